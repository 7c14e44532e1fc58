"""Sobol search: point k of a scrambled Sobol sequence, mapped through each distribution's inverse CDF."""

from __future__ import annotations

from typing import Any

from sweeplab.search.base import SequentialSearcher
from sweeplab.space import SearchSpace
from sweeplab.types import Goal

__all__ = ["SobolSearcher"]


class SobolSearcher(SequentialSearcher):
    """Low-discrepancy coverage of the unit cube (one coordinate per non-constant parameter)."""

    method = "sobol"

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None = None, **options: Any) -> None:
        super().__init__(space, goal, seed, **options)
        self._engine: Any = None

    def _engine_at(self, k: int) -> Any:
        from scipy.stats import qmc

        if self._engine is None or self._engine.num_generated > k:
            self._engine = qmc.Sobol(self.space.dimension, scramble=True, seed=self.seed)
        if self._engine.num_generated < k:
            self._engine.fast_forward(k - self._engine.num_generated)
        return self._engine

    def point(self, k: int) -> dict[str, Any]:
        if self.space.dimension == 0:
            return self.space.from_unit([])
        u = self._engine_at(k).random(1)[0]
        return self.space.from_unit([float(x) for x in u])
