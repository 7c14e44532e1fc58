"""Early-stopping schedulers: `early_terminate: {type: hyperband | asha | median, ...}` in a sweep spec.

    sched = make_scheduler({"type": "asha", "min_iter": 1, "max_iter": 27, "eta": 3}, goal=Goal.MINIMIZE)
    verdict = sched.on_report(trial=3, step=9, value=0.41)   # Decision.STOP -> the trial becomes PRUNED

Schedulers are pure decision logic (no I/O, no clock); see `base.Scheduler` for the contract.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from sweeplab.errors import SpecError
from sweeplab.schedulers.asha import AshaScheduler
from sweeplab.schedulers.base import Scheduler
from sweeplab.schedulers.hyperband import HyperbandScheduler, hyperband_bands
from sweeplab.schedulers.median import MedianScheduler
from sweeplab.types import Goal

__all__ = [
    "SCHEDULERS",
    "TYPES",
    "AshaScheduler",
    "HyperbandScheduler",
    "MedianScheduler",
    "Scheduler",
    "hyperband_bands",
    "make_scheduler",
]

#: THE scheduler registry: `early_terminate.type` -> scheduler class (with `from_spec`). The spec validates
#: `early_terminate.type` against it and `make_scheduler` builds from it; a new scheduler is one entry here.
SCHEDULERS: dict[str, type[AshaScheduler | HyperbandScheduler | MedianScheduler]] = {
    "hyperband": HyperbandScheduler,
    "asha": AshaScheduler,
    "median": MedianScheduler,
}
TYPES: tuple[str, ...] = tuple(SCHEDULERS)


def make_scheduler(
    raw: Mapping[str, Any] | None,
    *,
    goal: Goal,
    file: str | None = None,
    key: str = "early_terminate",
    metric: str | None = None,
) -> Scheduler | None:
    """Build the scheduler described by the spec's `early_terminate` mapping (None: no early stopping).

    `metric` is the sweep's metric name, used in reasons unless `early_terminate.metric` names another one
    (the driver then feeds that metric). Bad input raises SpecError naming the key path and the fix.
    """
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise SpecError(
            "early_terminate must be a mapping", file=file, key=key, value=raw,
            expected="a mapping with a type", hint="e.g. early_terminate: {type: asha, max_iter: 27}",
        )
    kind = raw.get("type")
    if kind is None:
        raise SpecError(
            "early_terminate needs a type", file=file, key=f"{key}.type",
            expected="one of " + ", ".join(sorted(SCHEDULERS)), hint="add type: asha",
        )
    if not isinstance(kind, str) or kind not in SCHEDULERS:
        close = difflib.get_close_matches(str(kind), list(SCHEDULERS), n=1)
        raise SpecError(
            "unknown early_terminate type", file=file, key=f"{key}.type", value=kind,
            expected="one of " + ", ".join(sorted(SCHEDULERS)),
            hint=f"did you mean '{close[0]}'?" if close else None,
        )
    own = raw.get("goal")
    if own is not None:
        if own not in (Goal.MINIMIZE.value, Goal.MAXIMIZE.value):
            raise SpecError("must be minimize or maximize", file=file, key=f"{key}.goal",
                            value=own, expected="minimize or maximize")
        goal, raw = Goal(own), {k: v for k, v in raw.items() if k != "goal"}
    return SCHEDULERS[kind].from_spec(raw, goal=Goal(goal), file=file, key=key, metric=metric)
