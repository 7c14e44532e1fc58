"""What the driver keeps per trial and hands out at the end: plain records and small pure helpers."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sweeplab.types import SweepState, TrialSnapshot, TrialState, Verdict

if TYPE_CHECKING:
    from sweeplab.spec import Resources

__all__ = ["Progress", "SweepOutcome", "TrialRecord", "trial_seed"]


def trial_seed(sweep_seed: int, number: int) -> int:
    """A trial's seed: a fixed function of the sweep seed and the trial number."""
    return (sweep_seed * 1_000_003 + number * 7_919 + 12_345) % (2**31 - 1)


@dataclass
class TrialRecord:
    """The driver's live view of one trial (the store has the durable one)."""

    id: int
    number: int
    params: dict[str, Any]
    config: dict[str, Any]
    seed: int | None
    state: TrialState = TrialState.QUEUED
    attempt: int = 0                       # attempts started so far
    value: float | None = None
    last: dict[str, tuple[int, float]] = field(default_factory=dict)
    intermediate: dict[int, float] = field(default_factory=dict)
    stop_verdict: Verdict | None = None    # why we asked it to stop (pruned / rule / budget / user)
    stop_state: TrialState | None = None
    stop_at: float | None = None           # monotonic time of the stop request (grace accounting)
    kill_reason: str | None = None
    no_retry: bool = False
    started_mono: float | None = None
    last_seen: float | None = None
    last_report: float | None = None
    failures: list[tuple[str, str]] = field(default_factory=list)
    resource_seconds: float = 0.0
    spent: float = 0.0                     # seconds of earlier attempts (trial.timeout bounds the total)
    fresh: bool = False                    # just inserted as running by _new_trial
    costs: dict[str, float] = field(default_factory=dict)   # last reported value of each budget.cost name
    where: dict[str, Any] | None = None    # host/pid of the attempt, not yet written (see _write_where)
    values: tuple[float | None, ...] | None = None   # each objective's value (several objectives)
    violations: tuple[float, ...] | None = None      # per constraint, <= 0 when kept (spec.constraints)
    feasible: bool | None = None                     # None: the sweep has no constraints

    def snapshot(self) -> TrialSnapshot:
        return TrialSnapshot(number=self.number, params=self.params, state=self.state, value=self.value)


@dataclass(frozen=True)
class Progress:
    """What a progress display needs, sent after every batch of events."""

    sweep: str
    counts: Mapping[str, int]
    running: int
    created: int
    budget_trials: int | None
    best_value: float | None
    best_trial: int | None
    best_params: Mapping[str, Any] | None
    elapsed: float
    eta: float | None


@dataclass(frozen=True)
class SweepOutcome:
    sweep: str
    state: SweepState
    reason: str
    counts: Mapping[str, int]
    best_trial: int | None
    best_value: float | None
    best_params: Mapping[str, Any] | None
    exit_code: int


def shown_path(path: str) -> str:
    """A path as the user likely typed it: relative to the working directory when inside it."""
    rel = os.path.relpath(path) if os.path.isabs(path) else path
    return path if rel.startswith("..") else rel


def loads(text: str | None) -> Any:
    import json

    return json.loads(text) if text else None


def fired_at(v: Verdict) -> float:
    """The step at which a monitor fired (inf when it does not say)."""
    try:
        return float(v.data.get("step", math.inf))
    except (TypeError, ValueError):
        return math.inf


def costs_of(values: Mapping[str, Any], names: Mapping[str, float] | None) -> dict[str, float]:
    """The finite values of the budget.cost names among `values` (metrics a trial logged or returned)."""
    out: dict[str, float] = {}
    for name in names or ():
        try:
            v = float(values[name])
        except (KeyError, TypeError, ValueError):
            continue
        if math.isfinite(v):
            out[name] = v
    return out


def finite_dict(d: Mapping[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k, v in d.items():
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        out[k] = f if math.isfinite(f) else None
    return out


def resources_dict(res: Resources) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(res)


def judged_curve(curve: Mapping[int, float], verdict: Mapping[str, Any] | None) -> dict[int, float]:
    """The intermediate values a searcher is told of a trial a verdict stopped: those up to the step it was judged
    at (`verdict["step"]`). A trial that is not held at that report (the median rule, a command trial using
    neither `Run.from_env` nor W&B) reports on until it notices the stop, as far as its timing lets it; told those
    reports, a searcher (TPE ranks pruned trials by their last value) would learn what the timing decided.
    Without a verdict step: the whole curve."""
    step = (verdict or {}).get("step")
    if isinstance(step, bool) or not isinstance(step, (int, float)):
        return dict(curve)
    return {s: v for s, v in curve.items() if s <= step}
