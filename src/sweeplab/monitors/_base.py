"""`Monitor`, the base of every rule: the contract the driver calls and fire-once / fire-again logic."""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeplab.errors import SpecError
from sweeplab.monitors._util import _jsonable
from sweeplab.types import Decision, MetricPoint, Verdict

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
        self._steps: dict[int, dict[str, int]] = {}   # trial -> metric -> last step it was reported at

    # the contract -------------------------------------------------------------------------------------

    def observe(self, trial: int, points: Sequence[MetricPoint]) -> Verdict:
        """New points of `trial`, in report order. Returns the first firing among them, else CONTINUE."""
        verdict = Verdict.go_on()
        wanted = self.metrics()
        for point in points:
            if wanted is not None and point.key not in wanted:
                continue  # fast path: run.log may send many points of metrics this rule ignores
            self._note_step(trial, point)
            v = self._decide(trial, self._check(trial, point))
            if v is not None and verdict.decision is Decision.CONTINUE:
                verdict = v
        return verdict

    def idle(self, trial: int, last_report: float | None, now: float) -> Verdict:
        """Called periodically for a running trial (time of its last report or start, and now)."""
        return Verdict.go_on()

    def heard(self, trial: int, points: Sequence[MetricPoint], at: float, *, first: bool = False) -> None:
        """New points of `trial` as the driver reads them (wall time `at`), before the watchdog's next `idle`
        call and before `observe` sees them; `first`: the first report of an attempt. For rules over time
        (`stalled`); the default does nothing."""

    def metrics(self) -> frozenset[str] | None:
        """The metric names this monitor needs (None: any metric will do)."""
        return None

    def forget(self, trial: int) -> None:
        """Drop the state of a trial that reached a terminal state (optional, frees memory)."""
        self._fired.discard(trial)
        self._spent.discard(trial)
        self._steps.pop(trial, None)
        self._restart(trial)

    def describe(self) -> str:
        return f"{self.name} ({self.action})"

    def to_spec(self) -> Any:
        """This rule as a spec's `monitors:` entry (`{plateau: {metric: ..., ...}}`): what the sweep stores, so
        `sweeplab resume` rebuilds a rule made in Python. A rule of your own stores only its name."""
        options = {k: v for k, v in self._options().items() if v is not None}
        return {self.name: {**options, "action": self.action}}

    def _options(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"

    # for implementations ------------------------------------------------------------------------------

    def _restart(self, trial: int) -> None:
        """Drop what the rule remembers of `trial`'s curve (its best, its streaks)."""

    def _note_step(self, trial: int, point: MetricPoint) -> None:
        """A metric reported at a step below one it was reported at before starts the trial's curve again:
        a retry (after a failure or a preemption) that starts over or from an earlier checkpoint, a program
        that trains again from scratch (the folds of a cross-validation). The rule judges the new curve on its
        own: judged against the best of the one before, a healthy retry that starts over read as a plateau
        of `patience` reports, or as diverging."""
        steps = self._steps.setdefault(trial, {})
        last = steps.get(point.key)
        if last is not None and point.step < last:   # a warning given stays given while its condition holds
            self._restart(trial)
            steps.clear()
        steps[point.key] = point.step

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

