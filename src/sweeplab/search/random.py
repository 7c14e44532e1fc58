"""Random search: trial k's parameters are a function of (seed, k) only, so replay is trivial.

Every distribution samples by its inverse CDF from one uniform number per parameter, so a plain
`random.Random` is all this needs (numpy is not imported: a sweep's first trial starts sooner).
Trials are drawn in blocks of `BLOCK`: block b is one generator seeded with (seed, b), and trial k is the
(k mod BLOCK)-th draw from block k // BLOCK, so seeding a generator (more than a draw costs) happens
once per block, not once per trial.
"""

from __future__ import annotations

import random
from typing import Any

from sweeplab.search.base import SequentialSearcher

__all__ = ["RandomSearcher"]

BLOCK = 64


class RandomSearcher(SequentialSearcher):
    """Independent draws from each parameter's distribution (W&B `random`)."""

    method = "random"

    _block: int = -1
    _rng: random.Random | None = None
    _drawn: list[dict[str, Any]]

    def point(self, k: int) -> dict[str, Any]:
        block, index = divmod(k, BLOCK)
        if block != self._block or self._rng is None:
            self._block, self._rng, self._drawn = block, random.Random(f"{self.seed}:{block}"), []
        while len(self._drawn) <= index:
            self._drawn.append(self.space.sample(self._rng))
        return dict(self._drawn[index])
