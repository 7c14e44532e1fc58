"""Training-health monitors: rules over a trial's metric history that stop (or flag) a sick trial.

Spec form (`monitors:` in a sweep spec), a bare name or a one-key mapping name -> options:

    monitors: [nan, {plateau: {metric: val_loss, patience: 5}}, {exploding: {metric: grad_norm, factor: 10}}]

Python form, the same objects: `from sweeplab.monitors import nan, plateau; monitors=[nan(), plateau("val_loss")]`.

Rules (every one accepts `action: stop | warn`, default stop):
    nan          a NaN/inf value in any metric, or in `metrics: [...]`
    diverging    `metric` worse than `factor` x its best so far (with `goal`), from step `min_steps`
    plateau      `metric` did not improve by more than `min_delta` for `patience` reports
    exploding    gradient norm `metric` above `threshold`, or above `factor` x its running median
    vanishing    gradient norm `metric` below `threshold` for `patience` reports in a row
    overfitting  the gap between `val` and `train` (worse side: val) grew for `patience` reports in a row
    stalled      no report for `after` (e.g. 10m, 30s, or seconds)
    custom       custom(fn): fn(trial, points) -> Verdict | bool | str | None (True or a str: fire)

A monitor is pure logic, one instance per sweep with per-trial state that is a deterministic function of the
calls (the driver rebuilds it after a restart by replaying the stored points). A `stop` monitor fires at most
once per trial (the driver then stops it: STOPPED_BY_RULE); a `warn` monitor (Decision.WARN, an event) fires
again only after its condition cleared, so a long plateau gives one warning, not one per report.
"""

from __future__ import annotations

import difflib
import heapq
import math
from abc import ABC
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeplab import _values
from sweeplab.errors import SpecError
from sweeplab.types import Decision, Goal, MetricPoint, Verdict

__all__ = [
    "Monitor",
    "custom",
    "diverging",
    "exploding",
    "nan",
    "overfitting",
    "parse_duration",
    "parse_monitors",
    "plateau",
    "stalled",
    "vanishing",
]

ACTIONS = ("stop", "warn")
CustomFn = Callable[[int, Sequence[MetricPoint]], "Verdict | bool | str | None"]


@dataclass(frozen=True)
class _Fire:
    """The condition holds: `detail` completes the reason "<name>: <detail>"."""

    detail: str
    data: Mapping[str, Any] = field(default_factory=dict)


class Monitor(ABC):
    """A rule over one trial's metric points. Subclasses implement `_check` (per point) or `observe`."""

    name: str = ""

    def __init__(self, *, action: str = "stop", name: str | None = None) -> None:
        if action not in ACTIONS:
            raise SpecError("unknown monitor action", key=f"{name or self.name}.action", value=action,
                            expected="stop or warn")
        self.action = action
        if name is not None:
            self.name = name
        self._fired: set[int] = set()    # trials for which the condition currently holds (and was reported)
        self._spent: set[int] = set()    # trials a `stop` monitor already fired for

    # the contract -------------------------------------------------------------------------------------

    def observe(self, trial: int, points: Sequence[MetricPoint]) -> Verdict:
        """New points of `trial`, in report order. Returns the first firing among them, else CONTINUE."""
        verdict = Verdict.go_on()
        wanted = self.metrics()
        for point in points:
            if wanted is not None and point.key not in wanted:
                continue  # fast path: run.log may send many points of metrics this rule ignores
            v = self._decide(trial, self._check(trial, point))
            if v is not None and verdict.decision is Decision.CONTINUE:
                verdict = v
        return verdict

    def idle(self, trial: int, last_report: float | None, now: float) -> Verdict:
        """Called periodically for a running trial (time of its last report or start, and now)."""
        return Verdict.go_on()

    def metrics(self) -> frozenset[str] | None:
        """The metric names this monitor needs (None: any metric will do)."""
        return None

    def forget(self, trial: int) -> None:
        """Drop the state of a trial that reached a terminal state (optional, frees memory)."""
        self._fired.discard(trial)
        self._spent.discard(trial)

    def describe(self) -> str:
        return f"{self.name} ({self.action})"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"

    # for implementations ------------------------------------------------------------------------------

    def _check(self, trial: int, point: MetricPoint) -> _Fire | bool | None:
        """One point: _Fire (the condition holds), False (it does not), None (the point is irrelevant)."""
        return None

    def _decide(self, trial: int, result: _Fire | bool | None) -> Verdict | None:
        """Turn a check result into a verdict, applying fire-once (stop) / fire-again-after-recovery (warn)."""
        if not isinstance(result, _Fire):
            if result is False:
                self._fired.discard(trial)
            return None
        if trial in self._fired or trial in self._spent:
            return None
        self._fired.add(trial)
        if self.action == "stop":
            self._spent.add(trial)
        decision = Decision.STOP if self.action == "stop" else Decision.WARN
        data = {k: _jsonable(v) for k, v in result.data.items()}
        data["action"] = self.action
        return Verdict(decision, reason=f"{self.name}: {result.detail}", rule=self.name, data=data)


# the rules ----------------------------------------------------------------------------------------------


class NanMonitor(Monitor):
    name = "nan"

    def __init__(self, metrics: Sequence[str] | None = None, *, action: str = "stop") -> None:
        super().__init__(action=action)
        self.watched = frozenset(metrics) if metrics else None
        self._bad: dict[int, set[str]] = {}

    def _check(self, trial: int, point: MetricPoint) -> _Fire | bool | None:
        if self.watched is not None and point.key not in self.watched:
            return None
        bad = self._bad.setdefault(trial, set())
        if _finite(point.value):
            bad.discard(point.key)
            return None if bad else False
        bad.add(point.key)
        return _Fire(f"{point.key} is {_show(point.value)} at step {point.step}",
                     {"metric": point.key, "value": point.value, "step": point.step})

    def metrics(self) -> frozenset[str] | None:
        return self.watched

    def forget(self, trial: int) -> None:
        super().forget(trial)
        self._bad.pop(trial, None)


class _OneMetric(Monitor):
    """A rule over a single metric, with per-trial state."""

    def __init__(self, metric: str, *, action: str = "stop") -> None:
        super().__init__(action=action)
        self.metric = metric
        self._state: dict[int, Any] = {}

    def metrics(self) -> frozenset[str] | None:
        return frozenset({self.metric})

    def forget(self, trial: int) -> None:
        super().forget(trial)
        self._state.pop(trial, None)

    def describe(self) -> str:
        return f"{self.name} on {self.metric} ({self.action})"


class DivergingMonitor(_OneMetric):
    name = "diverging"

    def __init__(self, metric: str, *, factor: float = 10.0, goal: Goal | str = Goal.MINIMIZE,
                 min_steps: int = 0, action: str = "stop") -> None:
        super().__init__(metric, action=action)
        self.factor, self.goal, self.min_steps = factor, Goal(goal), min_steps

    def _limit(self, best: float) -> float | None:
        """The first value that counts as `factor` times worse than `best` (None: no ratio at 0)."""
        if best == 0:
            return None
        shrink = (best > 0) == (self.goal is Goal.MAXIMIZE)
        return best / self.factor if shrink else best * self.factor

    def _check(self, trial: int, point: MetricPoint) -> _Fire | bool | None:
        if point.key != self.metric or not _finite(point.value):
            return None
        v = point.value
        best = self._state.get(trial)
        self._state[trial] = v if best is None or self.goal.better(v, best) else best
        if best is None or point.step < self.min_steps:
            return False
        limit = self._limit(best)
        if limit is None or not self.goal.better(limit, v):
            return False
        return _Fire(
            f"{self.metric} {_show(v)} at step {point.step} is worse than {_show(self.factor)} x its best "
            f"{_show(best)}",
            {"metric": self.metric, "value": v, "best": best, "factor": self.factor, "step": point.step},
        )


class PlateauMonitor(_OneMetric):
    name = "plateau"

    def __init__(self, metric: str, *, patience: int = 5, min_delta: float = 0.0,
                 goal: Goal | str = Goal.MINIMIZE, action: str = "stop") -> None:
        super().__init__(metric, action=action)
        self.patience, self.min_delta, self.goal = patience, min_delta, Goal(goal)

    def _check(self, trial: int, point: MetricPoint) -> _Fire | bool | None:
        if point.key != self.metric:
            return None
        v = point.value
        state = self._state.get(trial)
        if state is None:
            self._state[trial] = [v if _finite(v) else math.nan, point.step, 0]
            return False
        best, best_step, stale = state
        gain = self.goal.sign() * (best - v) if _finite(v) else math.nan
        if (math.isnan(best) and _finite(v)) or gain > self.min_delta:
            self._state[trial] = [v, point.step, 0]
            return False
        stale += 1
        state[2] = stale
        if stale < self.patience:
            return False
        return _Fire(
            f"{self.metric} did not improve by more than {_show(self.min_delta)} for {stale} reports "
            f"(best {_show(best)} at step {best_step}, now {_show(v)} at step {point.step})",
            {"metric": self.metric, "value": v, "best": best, "best_step": best_step,
             "patience": self.patience, "step": point.step},
        )


class ExplodingMonitor(_OneMetric):
    name = "exploding"

    def __init__(self, metric: str = "grad_norm", *, threshold: float | None = None,
                 factor: float | None = None, action: str = "stop") -> None:
        super().__init__(metric, action=action)
        if threshold is None and factor is None:
            factor = 10.0
        self.threshold, self.factor = threshold, factor

    def _check(self, trial: int, point: MetricPoint) -> _Fire | bool | None:
        if point.key != self.metric:
            return None
        v = point.value
        data: dict[str, Any] = {"metric": self.metric, "value": v, "step": point.step}
        if not _finite(v):
            return _Fire(f"{self.metric} is {_show(v)} at step {point.step}", data)
        history = self._state.setdefault(trial, _RunningMedian())
        median = history.median()
        history.add(v)
        if self.threshold is not None and v > self.threshold:
            return _Fire(f"{self.metric} {_show(v)} at step {point.step} is above the threshold "
                         f"{_show(self.threshold)}", {**data, "threshold": self.threshold})
        if self.factor is not None and median is not None and median > 0 and v > self.factor * median:
            return _Fire(f"{self.metric} {_show(v)} at step {point.step} is above {_show(self.factor)} x its "
                         f"running median {_show(median)}", {**data, "median": median, "factor": self.factor})
        return False


class VanishingMonitor(_OneMetric):
    name = "vanishing"

    def __init__(self, metric: str = "grad_norm", *, threshold: float = 1e-7, patience: int = 3,
                 action: str = "stop") -> None:
        super().__init__(metric, action=action)
        self.threshold, self.patience = threshold, patience

    def _check(self, trial: int, point: MetricPoint) -> _Fire | bool | None:
        if point.key != self.metric:
            return None
        v = point.value
        if not (_finite(v) and abs(v) < self.threshold):
            self._state[trial] = 0
            return False
        run = self._state.get(trial, 0) + 1
        self._state[trial] = run
        if run < self.patience:
            return False
        return _Fire(
            f"{self.metric} {_show(v)} at step {point.step} has been below {_show(self.threshold)} for "
            f"{run} reports", {"metric": self.metric, "value": v, "threshold": self.threshold,
                               "patience": self.patience, "step": point.step},
        )


@dataclass
class _Gap:
    pending: dict[int, dict[str, float]] = field(default_factory=dict)  # step -> {"train"/"val": value}
    last: float | None = None
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
        grew = s.last is not None and _finite(gap) and gap > s.last + self.min_delta
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


class _RunningMedian:
    """Median of a growing multiset in O(log n) per value (two heaps)."""

    def __init__(self) -> None:
        self._low: list[float] = []   # max-heap (negated) of the lower half
        self._high: list[float] = []  # min-heap of the upper half

    def add(self, v: float) -> None:
        if self._low and v > -self._low[0]:
            heapq.heappush(self._high, v)
        else:
            heapq.heappush(self._low, -v)
        if len(self._low) > len(self._high) + 1:
            heapq.heappush(self._high, -heapq.heappop(self._low))
        elif len(self._high) > len(self._low):
            heapq.heappush(self._low, -heapq.heappop(self._high))

    def median(self) -> float | None:
        if not self._low:
            return None
        if len(self._low) > len(self._high):
            return -self._low[0]
        return (-self._low[0] + self._high[0]) / 2


# constructors for Python users (the same objects parse_monitors builds) -------------------------------


def nan(metrics: Sequence[str] | None = None, *, action: str = "stop") -> Monitor:
    """Stop on a NaN/inf value in any metric, or in `metrics`."""
    o = _read("nan", {"metrics": metrics, "action": action})
    return NanMonitor(o["metrics"], action=o["action"])


def diverging(metric: str, *, factor: float = 10.0, goal: Goal | str = "minimize", min_steps: int = 0,
              action: str = "stop") -> Monitor:
    """Stop when `metric` is `factor` times worse than its best so far."""
    o = _read("diverging", {"metric": metric, "factor": factor, "goal": _goal_text(goal),
                            "min_steps": min_steps, "action": action})
    return DivergingMonitor(**o)


def plateau(metric: str, *, patience: int = 5, min_delta: float = 0.0, goal: Goal | str = "minimize",
            action: str = "stop") -> Monitor:
    """Stop when `metric` has not improved by more than `min_delta` for `patience` reports."""
    o = _read("plateau", {"metric": metric, "patience": patience, "min_delta": min_delta,
                          "goal": _goal_text(goal), "action": action})
    return PlateauMonitor(**o)


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
                goal: Goal | str = "minimize", action: str = "stop") -> Monitor:
    """Stop when the val-train gap (val on the worse side) grows `patience` reports in a row."""
    return OverfittingMonitor(**_read("overfitting", {
        "train": train, "val": val, "patience": patience, "min_delta": min_delta, "goal": _goal_text(goal),
        "action": action}))


def stalled(after: float | str, *, action: str = "stop") -> Monitor:
    """Stop a trial that sent no report for `after` ("10m", "30s", or seconds)."""
    return StalledMonitor(**_read("stalled", {"after": after, "action": action}))


def custom(fn: CustomFn, *, name: str | None = None, action: str = "stop") -> Monitor:
    """A rule of your own: `fn(trial, points)` returns a Verdict, True or a reason string to fire."""
    return CustomMonitor(fn, name=name, action=_read("custom", {"action": action})["action"])


# parsing the spec ---------------------------------------------------------------------------------------

_REQUIRED = object()

# name -> option -> (kind, default). Kinds: see _coerce.
_SCHEMA: dict[str, dict[str, tuple[str, Any]]] = {
    "nan": {"metrics": ("names", None)},
    "diverging": {"metric": ("name", _REQUIRED), "factor": ("factor", 10.0), "goal": ("goal", "minimize"),
                  "min_steps": ("count0", 0)},
    "plateau": {"metric": ("name", _REQUIRED), "patience": ("count1", 5), "min_delta": ("number0", 0.0),
                "goal": ("goal", "minimize")},
    "exploding": {"metric": ("name", "grad_norm"), "threshold": ("positive", None),
                  "factor": ("factor", None)},
    "vanishing": {"metric": ("name", "grad_norm"), "threshold": ("positive", 1e-7),
                  "patience": ("count1", 3)},
    "overfitting": {"train": ("name", _REQUIRED), "val": ("name", _REQUIRED), "patience": ("count1", 5),
                    "min_delta": ("number0", 0.0), "goal": ("goal", "minimize")},
    "stalled": {"after": ("duration", _REQUIRED)},
    "custom": {},
}
_BUILD: dict[str, Callable[..., Monitor]] = {
    "nan": NanMonitor, "diverging": DivergingMonitor, "plateau": PlateauMonitor,
    "exploding": ExplodingMonitor, "vanishing": VanishingMonitor, "overfitting": OverfittingMonitor,
    "stalled": StalledMonitor,
}
_EXPECTED = {
    "name": "a metric name", "names": "a list of metric names", "factor": "a number > 1",
    "goal": "minimize or maximize", "count0": "an integer >= 0", "count1": "an integer >= 1",
    "number0": "a number >= 0", "positive": "a number > 0", "duration": "a duration such as 30s, 10m, 1h",
    "action": "stop or warn",
}


def parse_monitors(
    raw: Sequence[Any] | None,
    *,
    file: str | None = None,
    key: str = "monitors",
    metric: str | None = None,
    goal: Goal | str | None = None,
) -> list[Monitor]:
    """Build the monitors of a spec's `monitors:` list. Monitor instances pass through unchanged.

    `metric`/`goal` are the sweep's: `diverging` and `plateau` watch that metric when they name none.
    Bad input raises SpecError naming the key path (`monitors[1].plateau.patience`), the value and the fix.
    """
    if raw is None:
        return []
    if isinstance(raw, (str, Mapping)) or not isinstance(raw, Sequence):
        raise SpecError("monitors must be a list", file=file, key=key, value=raw,
                        expected="a list of names or one-key mappings",
                        hint="e.g. monitors: [nan, {plateau: {metric: val_loss, patience: 5}}]")
    out: list[Monitor] = []
    for i, item in enumerate(raw):
        where = f"{key}[{i}]"
        if isinstance(item, Monitor):
            out.append(item)
            continue
        opts: Any = {}
        if isinstance(item, str):
            name = item
        elif isinstance(item, Mapping) and len(item) == 1:
            name, opts = next(iter(item.items()))
            opts = {} if opts is None else opts
            if not isinstance(opts, Mapping):
                raise SpecError("monitor options must be a mapping", file=file, key=f"{where}.{name}",
                                value=opts, expected="option: value pairs",
                                hint=f"e.g. {{{name}: {{action: warn}}}}")
        else:
            raise SpecError("a monitor is a name or a one-key mapping", file=file, key=where, value=item,
                            expected="nan, or {plateau: {metric: val_loss}}")
        if not isinstance(name, str) or name not in _BUILD:
            close = difflib.get_close_matches(str(name), list(_BUILD), n=1)
            raise SpecError("unknown monitor", file=file, key=where, value=name,
                            expected="one of " + ", ".join(sorted(_BUILD)),
                            hint=f"did you mean '{close[0]}'?" if close else
                            "a rule of your own is custom(fn) in Python")
        opts = dict(opts)
        if name in ("diverging", "plateau"):  # default to the sweep's metric, and its goal for it
            if opts.get("metric") is None and metric is not None:
                opts["metric"] = metric
            if opts.get("goal") is None and goal is not None and opts.get("metric") == metric:
                opts["goal"] = _goal_text(goal)
        out.append(_BUILD[name](**_read(name, opts, key=f"{where}.{name}", file=file)))
    return out


def _read(name: str, raw: Mapping[str, Any], *, key: str | None = None, file: str | None = None
          ) -> dict[str, Any]:
    """Validate one monitor's options (spec or Python kwargs) into constructor keyword arguments."""
    key = key or name
    schema = {**_SCHEMA[name], "action": ("action", "stop")}
    _values.check_keys(raw, sorted(schema), key=key, file=file, what=f"option for monitor {name}:")
    out: dict[str, Any] = {}
    for option, (kind, default) in schema.items():
        value = raw.get(option)
        if value is None:
            if default is _REQUIRED:
                raise SpecError(f"monitor {name} needs {option}", file=file, key=f"{key}.{option}",
                                expected=_EXPECTED[kind], hint=f"add {option}: ...")
            out[option] = default
            continue
        out[option] = _coerce(kind, value, key=f"{key}.{option}", file=file)
    return out


def _coerce(kind: str, v: Any, *, key: str, file: str | None) -> Any:
    """One option value by its kind (see _EXPECTED), through the shared validators of `sweeplab._values`."""
    def bad(message: str) -> SpecError:
        return SpecError(message, file=file, key=key, value=v, expected=_EXPECTED[kind])

    if kind == "name":
        return _values.name(v, key=key, file=file, what="a metric name")
    if kind == "names":
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, Sequence) or not all(isinstance(x, str) and x for x in v):
            raise bad("must be a list of metric names")
        return list(v)
    if kind == "goal":
        if v not in ("minimize", "maximize"):
            raise bad("unknown goal")
        return Goal(v)
    if kind == "action":
        if v not in ACTIONS:
            raise bad("unknown action")
        return v
    if kind == "duration":
        return parse_duration(v, key=key, file=file)
    if kind in ("count0", "count1"):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        return _values.integer(v, key=key, file=file, minimum=1 if kind == "count1" else 0,
                               hint="patience counts reports: 1 fires on the first bad one")
    if kind == "factor":
        return _values.number(v, key=key, file=file, above=1.0, hint="factor: 10 means ten times its reference")
    if kind == "positive":
        return _values.number(v, key=key, file=file, above=0.0)
    return _values.number(v, key=key, file=file, minimum=0.0)


def parse_duration(v: Any, *, key: str = "after", file: str | None = None) -> float:
    """Seconds in a duration above 0 (sweeplab's one grammar, `sweeplab._values.parse_duration`):
    a number of seconds, or text such as "30s", "10m", "1h30m", "2d", "500ms"."""
    return _values.parse_duration(v, key=key, file=file, positive=True)


# small helpers -------------------------------------------------------------------------------------------


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _show(v: Any) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v:.4g}"
    return str(v)


def _jsonable(v: Any) -> Any:
    """Event data must be strict JSON: non-finite floats become the strings NaN, inf, -inf."""
    if isinstance(v, float) and not math.isfinite(v):
        return _show(v)
    return v


def _show_duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g}h"
    if seconds >= 60:
        return f"{seconds / 60:.3g}m"
    return f"{seconds:.3g}s"


def _goal_text(goal: Goal | str) -> str:
    return goal.value if isinstance(goal, Goal) else goal


def _callable_name(fn: Any) -> str:
    name = getattr(fn, "__name__", "") or ""
    return name if name and name != "<lambda>" else "custom"
