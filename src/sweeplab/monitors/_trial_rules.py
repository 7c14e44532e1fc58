"""The rules over more than one metric value: overfitting (two metrics), stalled (time), custom (a function)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeplab.errors import SpecError
from sweeplab.monitors._base import CustomFn, Monitor, _Fire
from sweeplab.monitors._util import ALL, _callable_name, _finite, _show, _show_duration, parse_duration
from sweeplab.types import Decision, Goal, MetricPoint, Verdict


@dataclass
class _Gap:
    pending: dict[int, dict[str, float]] = field(default_factory=dict)  # step -> {"train"/"val": value}
    last: float | None = None
    best_val: float | None = None
    streak: int = 0


class OverfittingMonitor(Monitor):
    name = "overfitting"

    def __init__(self, train: str, val: str, *, patience: int = 5, min_delta: float = 0.0,
                 goal: Goal | str = Goal.MINIMIZE, action: str = "stop") -> None:
        super().__init__(action=action)
        self.train, self.val, self.patience, self.min_delta, self.goal = train, val, patience, min_delta, \
            Goal(goal)
        self._state: dict[int, _Gap] = {}

    def _options(self) -> dict[str, Any]:
        return {"train": self.train, "val": self.val, "patience": self.patience, "min_delta": self.min_delta,
                "goal": self.goal.value}

    def metrics(self) -> frozenset[str] | None:
        return frozenset({self.train, self.val})

    def _restart(self, trial: int) -> None:
        self._state.pop(trial, None)

    def describe(self) -> str:
        return f"overfitting on {self.val} vs {self.train} ({self.action})"

    def _check(self, trial: int, point: MetricPoint) -> _Fire | bool | None:
        role = "train" if point.key == self.train else "val" if point.key == self.val else None
        if role is None:
            return None
        s = self._state.setdefault(trial, _Gap())
        pair = s.pending.setdefault(point.step, {})
        pair[role] = point.value
        if len(pair) < 2:
            return None
        for step in [k for k in s.pending if k <= point.step]:
            del s.pending[step]
        gap = self.goal.sign() * (pair["val"] - pair["train"])
        # A report where val reaches a new best is not overfitting, whatever the gap does: the gap between
        # train and val grows through every healthy run (Prechelt's criteria judge val against its best).
        val_best = _finite(pair["val"]) and (s.best_val is None or self.goal.better(pair["val"], s.best_val))
        if val_best:
            s.best_val = pair["val"]
        grew = s.last is not None and _finite(gap) and gap > s.last + self.min_delta and not val_best
        s.streak = s.streak + 1 if grew else 0
        s.last = gap if _finite(gap) else None
        if s.streak < self.patience or gap <= 0:
            return False
        return _Fire(
            f"the gap between {self.val} and {self.train} grew for {s.streak} reports in a row, to "
            f"{_show(gap)} at step {point.step}",
            {"train": pair["train"], "val": pair["val"], "gap": gap, "patience": self.patience,
             "step": point.step},
        )


class StalledMonitor(Monitor):
    """No progress for `after` seconds. Progress is a report of a watched metric at a step above the highest
    step it was reported at before, or with a value other than its previous one; reports of other metrics (a
    heartbeat, a timestamp, a constant) and repeats do not count. Watched by default, as by `nan`: the sweep's
    metrics and every loss-like one (every metric when the sweep has no metric); `metrics="all"`: every metric,
    a list: only those. The clock starts at an attempt's first report (of any metric): a trial that has sent
    none is left to the heartbeat and `trial.timeout`.

    Progress is judged as the points arrive (`heard`, called by the driver as it reads them, before the
    watchdog's next `idle` call), so a driver that was paused does not take its trials' unread progress
    for a stall."""

    name = "stalled"

    def __init__(self, after: float | str, *, metrics: Sequence[str] | str | None = None,
                 action: str = "stop") -> None:
        super().__init__(action=action)
        self.after = parse_duration(after, key="stalled.after")
        self.every = metrics == ALL
        self.watched = frozenset(metrics) if metrics and not isinstance(metrics, str) else None
        self.sweep_metrics: frozenset[str] = frozenset()
        self._last: dict[int, dict[str, tuple[float, float]]] = {}   # trial -> metric -> (highest step, value)
        self._since: dict[int, float] = {}                            # trial -> wall time of its last progress
        self._heard: dict[int, float] = {}                            # trial -> wall time of its last report

    def _options(self) -> dict[str, Any]:
        return {"after": self.after,
                "metrics": ALL if self.every else sorted(self.watched) if self.watched is not None else None}

    def bind(self, sweep_metrics: Sequence[str]) -> None:
        """The sweep's metrics, watched by default (a `stalled` given `metrics` of its own ignores them)."""
        self.sweep_metrics = frozenset(sweep_metrics)

    def watches(self, key: str) -> bool:
        if self.watched is not None:
            return key in self.watched
        return self.every or not self.sweep_metrics or key in self.sweep_metrics or "loss" in key.lower()

    def metrics(self) -> frozenset[str] | None:
        return self.watched if self.watched is not None else frozenset()

    def forget(self, trial: int) -> None:
        super().forget(trial)
        self._last.pop(trial, None)
        self._since.pop(trial, None)
        self._heard.pop(trial, None)

    def heard(self, trial: int, points: Sequence[MetricPoint], at: float, *, first: bool = False) -> None:
        if first or trial not in self._since:
            self._last.pop(trial, None)
            self._since[trial] = at      # an attempt's first report starts the clock
        self._heard[trial] = at
        last = self._last.setdefault(trial, {})
        moved = False
        for step, key, value, *_ in points:
            if not self.watches(key):
                continue
            prev = last.get(key)
            if prev is None or step > prev[0] or not _same(value, prev[1]):
                moved = True
            last[key] = (step if prev is None else max(step, prev[0]), value)
        if moved:
            self._since[trial] = at

    def observe(self, trial: int, points: Sequence[MetricPoint]) -> Verdict:
        return Verdict.go_on()

    def idle(self, trial: int, last_report: float | None, now: float) -> Verdict:
        since = self._since.get(trial)
        if last_report is None or since is None:
            return Verdict.go_on()
        quiet = now - since
        if quiet < self.after:
            return self._decide(trial, False) or Verdict.go_on()
        limit = f"(limit {_show_duration(self.after)})"
        # went silent, or kept reporting: told by the times `heard` was given (the driver's `last_report`
        # is its own reading of another clock, taken later: it always came after the progress)
        if self._heard.get(trial, since) <= since:
            detail = f"no report for {_show_duration(quiet)} {limit}"
        else:
            detail = (f"no progress for {_show_duration(quiet)} {limit}: its reports since then advanced no "
                      f"step or value of {self._what()}")
        fire = _Fire(detail, {"seconds": quiet, "after": self.after, "last_progress": since,
                              "last_report": self._heard.get(trial, last_report)})
        return self._decide(trial, fire) or Verdict.go_on()

    def _what(self) -> str:
        if self.watched is not None:
            return ", ".join(sorted(self.watched))
        if self.every or not self.sweep_metrics:
            return "any metric"
        return f"{', '.join(sorted(self.sweep_metrics))} or a loss-like metric"

    def describe(self) -> str:
        return f"stalled after {_show_duration(self.after)} without progress of {self._what()} ({self.action})"


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)   # two NaN are the same value


class CustomMonitor(Monitor):
    name = "custom"

    def __init__(self, fn: CustomFn, *, name: str | None = None, action: str = "stop") -> None:
        if not callable(fn):
            raise SpecError("a custom monitor needs a callable", key="custom", value=fn,
                            expected="fn(trial, points) -> Verdict | bool | str | None")
        super().__init__(action=action, name=name or _callable_name(fn))
        self.fn = fn

    def to_spec(self) -> Any:
        return {"custom": {"name": self.name, "action": self.action}}   # the function itself cannot be stored

    def observe(self, trial: int, points: Sequence[MetricPoint]) -> Verdict:
        try:
            out = self.fn(trial, points)
        except Exception as exc:
            if trial in self._spent:
                return Verdict.go_on()
            self._spent.add(trial)
            return Verdict(Decision.WARN, reason=f"{self.name}: the rule raised {type(exc).__name__}: {exc}",
                           rule=self.name, data={"error": type(exc).__name__, "action": "warn"})
        return self._decide(trial, self._convert(out, points)) or Verdict.go_on()

    def _convert(self, out: Any, points: Sequence[MetricPoint]) -> _Fire | bool:
        step = points[-1].step if points else None
        if isinstance(out, Verdict):
            if out.decision is Decision.CONTINUE:
                return False
            detail = out.reason or "fired"
            prefix = f"{self.name}: "
            return _Fire(detail.removeprefix(prefix),
                         {"step": step, **out.data})
        if out is True or (isinstance(out, str) and out):
            return _Fire(out if isinstance(out, str) else f"fired at step {step}", {"step": step})
        return False

