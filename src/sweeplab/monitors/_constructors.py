"""Constructors for Python users: `nan()`, `plateau(...)`, ..., the same objects `parse_monitors` builds."""

from __future__ import annotations

from collections.abc import Sequence

from sweeplab.monitors._base import CustomFn, Monitor
from sweeplab.monitors._parsing import _read
from sweeplab.monitors._trial_rules import CustomMonitor, OverfittingMonitor, StalledMonitor
from sweeplab.monitors._util import _goal_text
from sweeplab.monitors._value_rules import (
    DivergingMonitor,
    ExplodingMonitor,
    NanMonitor,
    PlateauMonitor,
    VanishingMonitor,
)
from sweeplab.types import Goal


def nan(metrics: Sequence[str] | str | None = None, *, action: str = "stop") -> Monitor:
    """Stop on a NaN/inf value in the sweep's metrics or a loss-like one (default), in `metrics`, or in
    every metric (`metrics="all"`)."""
    o = _read("nan", {"metrics": metrics, "action": action})
    return NanMonitor(o["metrics"], action=o["action"])


def diverging(metric: str, *, factor: float = 10.0, goal: Goal | str | None = None, min_steps: int = 0,
              action: str = "stop") -> Monitor:
    """Stop when `metric` is `factor` times worse than its best so far. `goal`: by default that of the
    sweep's objective `metric` names, else minimize."""
    o = _read("diverging", {"metric": metric, "factor": factor, "goal": _goal_or_none(goal),
                            "min_steps": min_steps, "action": action})
    return _sweep_goal(DivergingMonitor(**o), goal)


def plateau(metric: str, *, patience: int = 5, min_delta: float = 0.0, goal: Goal | str | None = None,
            action: str = "stop") -> Monitor:
    """Stop when `metric` has not improved by more than `min_delta` for `patience` reports. `goal`: by
    default that of the sweep's objective `metric` names, else minimize."""
    o = _read("plateau", {"metric": metric, "patience": patience, "min_delta": min_delta,
                          "goal": _goal_or_none(goal), "action": action})
    return _sweep_goal(PlateauMonitor(**o), goal)


def exploding(metric: str = "grad_norm", *, threshold: float | None = None, factor: float | None = None,
              action: str = "stop") -> Monitor:
    """Stop when the gradient norm exceeds `threshold`, or `factor` x its running median (default 10x)."""
    return ExplodingMonitor(**_read("exploding", {"metric": metric, "threshold": threshold, "factor": factor,
                                                  "action": action}))


def vanishing(metric: str = "grad_norm", *, threshold: float = 1e-7, patience: int = 3,
              action: str = "stop") -> Monitor:
    """Stop when the gradient norm stays below `threshold` for `patience` reports."""
    return VanishingMonitor(**_read("vanishing", {"metric": metric, "threshold": threshold,
                                                  "patience": patience, "action": action}))


def overfitting(train: str, val: str, *, patience: int = 5, min_delta: float = 0.0,
                goal: Goal | str | None = None, action: str = "stop") -> Monitor:
    """Stop when the val-train gap (val on the worse side) grows `patience` reports in a row. `goal`: by
    default that of the sweep's objective `val` names, else minimize."""
    return _sweep_goal(OverfittingMonitor(**_read("overfitting", {
        "train": train, "val": val, "patience": patience, "min_delta": min_delta, "goal": _goal_or_none(goal),
        "action": action})), goal)


def _goal_or_none(goal: Goal | str | None) -> str | None:
    return None if goal is None else _goal_text(goal)


def _sweep_goal(monitor: Monitor, goal: Goal | str | None) -> Monitor:
    """Mark a rule built without a goal: the sweep gives it the goal of the objective it watches."""
    monitor.goal_from_sweep = goal is None   # type: ignore[attr-defined]
    return monitor


def stalled(after: float | str, *, metrics: Sequence[str] | str | None = None, action: str = "stop") -> Monitor:
    """Stop a trial that made no progress for `after` ("10m", "30s", or seconds): no report of a watched
    metric (the sweep's metrics and loss-like ones by default, `metrics`, or every metric: "all") at a new
    step or with a new value."""
    return StalledMonitor(**_read("stalled", {"after": after, "metrics": metrics, "action": action}))


def custom(fn: CustomFn, *, name: str | None = None, action: str = "stop") -> Monitor:
    """A rule of your own: `fn(trial, points)` returns a Verdict, True or a reason string to fire."""
    return CustomMonitor(fn, name=name, action=_read("custom", {"action": action})["action"])

