"""When a trial's vector of objective values goes to ASHA's rank rule (several objectives, no
early_terminate.metric): the one rule the live driver and the resume replay share.

A step is judged once, at its last objective point (of the batch live, of the trial's rows at that step on
replay), on every objective's latest value. An objective reported at one step only so far (a parameter
count logged at step 0, a size known before training) is carried to later steps; one reported at several
steps but not yet at this one is waited for, so a vector never mixes steps of a changing objective.
"""

from __future__ import annotations

__all__ = ["RankFeed"]


class RankFeed:
    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._last: dict[tuple[int, str], tuple[int, float, int]] = {}   # (trial, key) -> step, value, steps seen

    def add(self, trial: int, step: int, key: str, value: float, *, closes_step: bool
            ) -> tuple[float, ...] | None:
        """Record an objective point; the vector to judge at `step`, or None (not the step's last point,
        or an objective still missing)."""
        prev = self._last.get((trial, key))
        seen = 1 if prev is None else prev[2] + (prev[0] != step)
        self._last[(trial, key)] = (step, value, seen)
        if not closes_step:
            return None
        vector = []
        for name in self.names:
            got = self._last.get((trial, name))
            if got is None or got[0] > step or (got[0] != step and got[2] > 1):
                return None
            vector.append(float(got[1]))
        return tuple(vector)

