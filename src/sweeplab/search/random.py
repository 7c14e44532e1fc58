"""Random search: trial k's parameters are a function of (seed, k) only, so replay is trivial."""

from __future__ import annotations

from typing import Any

import numpy as np

from sweeplab.search.base import SequentialSearcher

__all__ = ["RandomSearcher"]


class RandomSearcher(SequentialSearcher):
    """Independent draws from each parameter's distribution (W&B `random`)."""

    method = "random"

    def point(self, k: int) -> dict[str, Any]:
        return self.space.sample(np.random.default_rng([self.seed, k]))
