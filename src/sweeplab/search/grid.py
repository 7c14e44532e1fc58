"""Grid search: every combination once, in W&B's order (parameters sorted by name, last fastest)."""

from __future__ import annotations

import copy
from typing import Any

from sweeplab.search.base import SequentialSearcher
from sweeplab.space import SearchSpace
from sweeplab.types import Goal

__all__ = ["GridSearcher"]


class GridSearcher(SequentialSearcher):
    """Combination k is found by mixed-radix decomposition of k, so replay is O(1)."""

    method = "grid"

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None = None, **options: Any) -> None:
        super().__init__(space, goal, seed, **options)
        self._axes = space.grid_axes()  # raises SpecError for a continuous parameter
        self.size = 1
        for _, values in self._axes:
            self.size *= len(values)

    def point(self, k: int) -> dict[str, Any] | None:
        if k >= self.size:
            return None
        chosen: dict[str, Any] = {}
        for name, values in reversed(self._axes):
            k, i = divmod(k, len(values))
            chosen[name] = values[i]
        return copy.deepcopy({name: chosen[name] for name in self.space.params})

    @property
    def exhausted(self) -> bool:
        return self.position >= self.size
