"""The rules over more than one metric value: overfitting (two metrics), stalled (time), custom (a function)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeplab.errors import SpecError
from sweeplab.monitors._base import CustomFn, Monitor, _Fire
from sweeplab.monitors._util import _callable_name, _finite, _show, _show_duration, parse_duration
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

    def metrics(self) -> frozenset[str] | None:
        return frozenset({self.train, self.val})

    def forget(self, trial: int) -> None:
        super().forget(trial)
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
    name = "stalled"

    def __init__(self, after: float | str, *, action: str = "stop") -> None:
        super().__init__(action=action)
        self.after = parse_duration(after, key="stalled.after")

    def metrics(self) -> frozenset[str] | None:
        return frozenset()

    def observe(self, trial: int, points: Sequence[MetricPoint]) -> Verdict:
        if points:
            self._decide(trial, False)
        return Verdict.go_on()

    def idle(self, trial: int, last_report: float | None, now: float) -> Verdict:
        if last_report is None:
            return Verdict.go_on()
        quiet = now - last_report
        if quiet < self.after:
            return self._decide(trial, False) or Verdict.go_on()
        fire = _Fire(f"no report for {_show_duration(quiet)} (limit {_show_duration(self.after)})",
                     {"seconds": quiet, "after": self.after, "last_report": last_report})
        return self._decide(trial, fire) or Verdict.go_on()

    def describe(self) -> str:
        return f"stalled after {_show_duration(self.after)} ({self.action})"


class CustomMonitor(Monitor):
    name = "custom"

    def __init__(self, fn: CustomFn, *, name: str | None = None, action: str = "stop") -> None:
        if not callable(fn):
            raise SpecError("a custom monitor needs a callable", key="custom", value=fn,
                            expected="fn(trial, points) -> Verdict | bool | str | None")
        super().__init__(action=action, name=name or _callable_name(fn))
        self.fn = fn

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

