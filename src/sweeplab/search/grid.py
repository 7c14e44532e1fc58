"""Grid search: every combination once, in W&B's order (parameters sorted by name, last fastest).

A conditional space is enumerated as a tree: each parent before its children, an inactive parameter
skipped, so only valid combinations come out, each once."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from sweeplab.search.base import SequentialSearcher
from sweeplab.space import SearchSpace
from sweeplab.types import Goal, TrialSnapshot

__all__ = ["GridSearcher"]


def _rounded(value: Any) -> Any:
    """`value` with its floats to 12 significant digits: a grid point computed with other rounding noise (numpy's
    arange gave 0.30000000000000004 where sweeplab now gives 0.3) is the same combination."""
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.12g}")
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(_rounded(dict(params)), sort_keys=True, default=repr)


class GridSearcher(SequentialSearcher):
    """Combination k is found by mixed-radix decomposition of k.

    Replay skips the combinations the history already holds, not merely as many as it holds: after a
    resume that is the same (the history is combinations 0..n-1), but a forked sweep's history starts with
    another sweep's trials, which must neither be run again nor push untried combinations off the end.
    """

    method = "grid"

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None = None, **options: Any) -> None:
        super().__init__(space, goal, seed, **options)
        self._axes = space.grid_axes()  # raises SpecError for a continuous parameter
        self.size = 1
        for _, values in self._axes:
            self.size *= len(values)
        if space.conditional:   # a tree product: only the valid combinations (SearchSpace.grid_point)
            self.size = space.grid_size() or 0
        self._tried: set[str] = set()

    def replay(self, history: Sequence[TrialSnapshot]) -> None:
        self.position = 0
        self._tried = {_key(snap.params) for snap in history}

    def _skip_tried(self) -> None:
        while self._tried and self.position < self.size:
            point = self.point(self.position)
            if point is None or _key(point) not in self._tried:
                return
            self.position += 1

    def ask(self) -> dict[str, Any] | None:
        self._skip_tried()
        return super().ask()

    def point(self, k: int) -> dict[str, Any] | None:
        if k >= self.size:
            return None
        if self.space.conditional:
            return copy.deepcopy(self.space.grid_point(k))
        chosen: dict[str, Any] = {}
        for name, values in reversed(self._axes):
            k, i = divmod(k, len(values))
            chosen[name] = values[i]
        return copy.deepcopy({name: chosen[name] for name in self.space.params})

    @property
    def exhausted(self) -> bool:
        self._skip_tried()
        return self.position >= self.size
