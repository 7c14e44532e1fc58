"""The median stopping rule (Golovin et al. 2017, Google Vizier), with Optuna's MedianPruner semantics.

A running trial is stopped at step t when its best value so far is worse than the median of the values that
*completed* trials reported at the same step t. Nothing is stopped until `warmup` trials have completed
(Optuna's n_startup_trials), nor before step `min_iter` (n_warmup_steps), nor at a step where no completed
trial reported. Only trials that ended COMPLETED serve as reference (pruned or failed ones do not).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sweeplab.errors import SpecError
from sweeplab.schedulers.base import Options, Scheduler, fmt, unscore
from sweeplab.types import Decision, Goal, TrialState, Verdict

__all__ = ["MedianScheduler"]

_KEYS = ("type", "metric", "min_iter", "warmup", "interval")


@dataclass
class _Trial:
    values: dict[int, float] = field(default_factory=dict)  # step -> score (first report at that step)
    best: float = math.inf
    last_step: int = -1          # the highest step reported before the current report
    stopped: Verdict | None = None
    ended: bool = False


class MedianScheduler(Scheduler):
    """Stop a trial whose best value so far is worse than the completed trials' median at that step."""

    type = "median"

    def __init__(
        self, *, min_iter: int = 0, warmup: int = 5, interval: int = 1, goal: Goal = Goal.MINIMIZE,
        metric: str | None = None,
    ) -> None:
        super().__init__(goal=goal, metric=metric)
        _validate(min_iter=min_iter, warmup=warmup, interval=interval, key=self.type, file=None)
        self.min_iter, self.warmup, self.interval = min_iter, warmup, interval
        self._completed: dict[int, list[float]] = {}  # step -> sorted scores of completed trials
        self._n_completed = 0
        self._trials: dict[int, _Trial] = {}

    @classmethod
    def from_spec(
        cls, raw: Mapping[str, Any], *, goal: Goal, file: str | None = None, key: str = "early_terminate",
        metric: str | None = None,
    ) -> MedianScheduler:
        o = Options(raw, key=key, file=file, allowed=_KEYS)
        min_iter = o.integer("min_iter", 0, minimum=0) or 0
        warmup = o.integer("warmup", 5, minimum=0) or 0
        interval = o.integer("interval", 1, minimum=1, hint="interval: 1 judges every report") or 1
        return cls(min_iter=min_iter, warmup=warmup, interval=interval, goal=goal,
                   metric=o.string("metric", None) or metric)

    def on_report(self, trial: int, step: int, value: float) -> Verdict:
        t = self._trials.setdefault(trial, _Trial())
        if t.ended:
            return Verdict.go_on()
        sc = self._score(value)
        t.values.setdefault(step, sc)
        t.best = min(t.best, sc)
        before, t.last_step = t.last_step, max(t.last_step, step)
        if t.stopped is not None:
            return t.stopped
        if self._n_completed < max(self.warmup, 1) or step < self.min_iter:
            return Verdict.go_on()
        if self.interval > 1 and before >= step - (step - self.min_iter) % self.interval:
            return Verdict.go_on()   # judged only at the first report at or past each interval point
        reference = self._completed.get(step)
        if not reference:
            return Verdict.go_on()
        median = _median(reference)
        if not t.best > median:
            return Verdict.go_on()
        raw_best, raw_median = unscore(t.best, self.goal), unscore(median, self.goal)
        n = len(reference)
        t.stopped = Verdict(
            Decision.STOP,
            reason=(
                f"median rule at step {step}: best {self._metric_name} so far {fmt(raw_best)} is worse than "
                f"the median {fmt(raw_median)} of {n} completed trials at that step"
            ),
            rule="median",
            data={"step": step, "value": raw_best, "median": raw_median, "cutoff": raw_median, "n": n},
        )
        return t.stopped

    def overrule(self, trial: int) -> None:
        t = self._trials.get(trial)
        if t is not None:
            t.stopped = None

    def on_trial_end(self, trial: int, state: TrialState) -> None:
        if not state.is_terminal:
            return
        t = self._trials.setdefault(trial, _Trial())
        if t.ended:
            return
        t.ended = True
        if state is TrialState.COMPLETED:
            self._n_completed += 1
            for step, sc in t.values.items():
                bisect.insort(self._completed.setdefault(step, []), sc)

    def describe(self) -> str:
        every = f", every {self.interval} steps" if self.interval > 1 else ""
        return (
            f"median: stop when the best {self._metric_name} so far is worse than the median of completed "
            f"trials at the same step, from step {self.min_iter}{every}, after {self.warmup} completed trials "
            f"({self.goal.value})"
        )


def _median(sorted_scores: list[float]) -> float:
    n = len(sorted_scores)
    mid = n // 2
    if n % 2:
        return sorted_scores[mid]
    lo, hi = sorted_scores[mid - 1], sorted_scores[mid]
    return hi if math.isinf(hi) else (lo + hi) / 2


def _validate(*, min_iter: int, warmup: int, interval: int = 1, key: str, file: str | None) -> None:
    for name, v, least in (("min_iter", min_iter, 0), ("warmup", warmup, 0), ("interval", interval, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise SpecError(
                f"{name} must be an integer >= {least}", file=file, key=f"{key}.{name}", value=v,
                expected=f"an integer >= {least}", hint=f"set {name}: {least} or more",
            )
