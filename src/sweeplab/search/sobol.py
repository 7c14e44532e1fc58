"""Sobol search: point k of a scrambled Sobol sequence, mapped through each distribution's inverse CDF."""

from __future__ import annotations

from typing import Any

from sweeplab.search._sobol import MAX_DIM, Sobol
from sweeplab.search.base import SequentialSearcher
from sweeplab.space import SearchSpace
from sweeplab.types import Goal

__all__ = ["SobolSearcher"]


class SobolSearcher(SequentialSearcher):
    """Low-discrepancy coverage of the unit cube (one coordinate per non-constant parameter): search/_sobol.py's
    scrambled sequence (plain Python: importing scipy.stats cost 0.7 s before the first trial), SciPy's past the
    axes it has direction numbers for."""

    method = "sobol"

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None = None, **options: Any) -> None:
        super().__init__(space, goal, seed, **options)
        self._engine: Any = None
        self._design = Sobol(space.dimension, self.seed) if space.dimension <= MAX_DIM else None

    def _engine_at(self, k: int) -> Any:
        from scipy.stats import qmc

        if self._engine is None or self._engine.num_generated > k:
            self._engine = qmc.Sobol(self.space.dimension, scramble=True, seed=self.seed)
        if self._engine.num_generated < k:
            self._engine.fast_forward(k - self._engine.num_generated)
        return self._engine

    def point(self, k: int) -> dict[str, Any]:
        if self._design is not None:
            return self.space.from_unit(self._design.point(k))
        u = self._engine_at(k).random(1)[0]
        return self.space.from_unit([float(x) for x in u])
