"""Shared vocabulary: trial states, decisions, and the frozen snapshots that pure logic sees."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

__all__ = [
    "PLACEMENTS",
    "Decision",
    "Goal",
    "MetricPoint",
    "Origin",
    "SweepState",
    "TrialSnapshot",
    "TrialState",
    "Verdict",
]


PLACEMENTS = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")   # Ray placement group strategies


class TrialState(str, enum.Enum):
    """Where a trial is in its life. Terminal states never change again."""

    QUEUED = "queued"            # created (parameters chosen), waiting for a slot
    RUNNING = "running"          # an attempt is executing
    COMPLETED = "completed"      # returned normally; its value counts
    FAILED = "failed"            # error, crash, bad objective; retries exhausted
    PRUNED = "pruned"            # stopped early by the scheduler (ASHA, Hyperband, median)
    STOPPED_BY_RULE = "stopped_by_rule"  # stopped by a monitor (NaN, divergence, plateau, ...)
    PREEMPTED = "preempted"      # SIGTERM / node loss: will be requeued from its checkpoint
    INTERRUPTED = "interrupted"  # the driver went away (Ctrl-C, kill): requeued on resume
    STOPPED = "stopped"          # stopped by the user or a hard budget; not requeued

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def is_requeueable(self) -> bool:
        return self in (TrialState.PREEMPTED, TrialState.INTERRUPTED, TrialState.QUEUED)


_TERMINAL = frozenset(
    {
        TrialState.COMPLETED,
        TrialState.FAILED,
        TrialState.PRUNED,
        TrialState.STOPPED_BY_RULE,
        TrialState.STOPPED,
    }
)


class SweepState(str, enum.Enum):
    RUNNING = "running"
    FINISHED = "finished"        # budget reached or search space exhausted
    STOPPED = "stopped"          # interrupted by the user; resumable
    FAILED = "failed"            # crash loop or internal error; resumable after a fix


class Goal(str, enum.Enum):
    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"

    def better(self, a: float, b: float) -> bool:
        """True when `a` is strictly better than `b`."""
        return a < b if self is Goal.MINIMIZE else a > b

    def best(self, values: list[float]) -> float:
        return min(values) if self is Goal.MINIMIZE else max(values)

    def sign(self) -> float:
        """+1 for minimize, -1 for maximize: `sign * value` is always 'lower is better'."""
        return 1.0 if self is Goal.MINIMIZE else -1.0


class Decision(str, enum.Enum):
    CONTINUE = "continue"
    STOP = "stop"                # stop the trial (pruned / stopped by rule)
    WARN = "warn"                # record an event, keep going


class Origin(str, enum.Enum):
    """Who decided a verdict. It, never the rule's name, says which state a stopped trial ends in."""

    SCHEDULER = "scheduler"      # early stopping (ASHA, Hyperband, median, your own): PRUNED
    MONITOR = "monitor"          # a training-health rule (built in or custom): STOPPED_BY_RULE
    BUDGET = "budget"            # a spent budget, or the user: STOPPED


@dataclass(frozen=True)
class Verdict:
    """What a scheduler or monitor decided, and why (the reason is shown to users).

    `origin` is stamped by the driver as the verdict arrives (`by`), from the seam that returned it."""

    decision: Decision
    reason: str = ""
    rule: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    origin: Origin | None = None

    def by(self, origin: Origin) -> Verdict:
        """This verdict, as decided by `origin`."""
        return self if self.origin is origin else replace(self, origin=origin)

    @classmethod
    def go_on(cls) -> Verdict:
        return _CONTINUE

    @property
    def stops(self) -> bool:
        return self.decision is Decision.STOP


_CONTINUE = Verdict(Decision.CONTINUE)


class MetricPoint(NamedTuple):
    """One reported value. A tuple, so that it costs little to build per point and travels as a JSON array
    `[step, key, value, time]` (events.py decodes it back into a MetricPoint)."""

    step: int
    key: str
    value: float
    time: float


@dataclass(frozen=True)
class TrialSnapshot:
    """An immutable view of one trial, as schedulers, monitors and searchers see it.

    `history` maps metric key -> tuple of (step, value) in report order.
    """

    number: int
    params: Mapping[str, Any]
    state: TrialState
    history: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    value: float | None = None
    started: float | None = None
    last_report: float | None = None
    values: tuple[float | None, ...] | None = None   # every objective's value (several objectives), else None
    constraints: tuple[float, ...] | None = None     # constraint violations (<= 0: kept); None: no constraints

    def series(self, key: str) -> tuple[tuple[int, float], ...]:
        return self.history.get(key, ())

    def last(self, key: str) -> float | None:
        s = self.history.get(key)
        return s[-1][1] if s else None

    @property
    def last_step(self) -> int | None:
        steps = [s[-1][0] for s in self.history.values() if s]
        return max(steps) if steps else None
