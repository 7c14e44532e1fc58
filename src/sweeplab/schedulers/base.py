"""The scheduler seam: pure early-stopping logic over the sweep's objective metric.

A scheduler sees one value at a time (`on_report`) and the end of each trial (`on_trial_end`), and answers
with a `Verdict`. It never does I/O, never reads a clock and never touches a process: the driver acts on the
verdict (a STOP becomes the trial state PRUNED with the verdict's reason). Its state is a deterministic
function of the calls it received, so the driver rebuilds it after a restart by replaying the stored history
in the same order.

Internally every scheduler works on a *score*: `goal.sign() * value`, lower is better, and any non-finite
value (NaN, +inf, -inf) scores +inf, the worst possible.
"""

from __future__ import annotations

import difflib
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any

from sweeplab.errors import SpecError
from sweeplab.types import Goal, TrialState, Verdict

__all__ = ["Scheduler"]


class Scheduler(ABC):
    """Decides, report by report, whether a trial is still worth its compute.

    `metric` is the metric the scheduler judges (from `early_terminate.metric`, else the sweep's metric);
    `goal` says which direction is better. Values passed to `on_report` are raw: the goal is applied inside.
    """

    #: `early_terminate.type` of this scheduler ("asha", "hyperband", "median").
    type: str = ""

    def __init__(self, *, goal: Goal = Goal.MINIMIZE, metric: str | None = None) -> None:
        self.goal = Goal(goal)
        self.metric = metric

    @abstractmethod
    def on_report(self, trial: int, step: int, value: float) -> Verdict:
        """A new value of the objective metric, reported by `trial` at `step` (the budget unit)."""

    def on_trial_end(self, trial: int, state: TrialState) -> None:
        """`trial` reached `state`. Terminal states stop the trial's judging; others are ignored."""

    def decision_steps(self, trial: int) -> tuple[int, ...]:
        """The steps at which `trial` may be stopped (ASHA's rungs, hyperband's bands), or () when any
        report can stop it (the median rule). A trial that reports its metric at one of these steps waits
        for the verdict before its next step (`Run.log`), so a pruned trial trains nothing past its rung."""
        return ()

    @abstractmethod
    def describe(self) -> str:
        """One line for `--dry-run`, e.g. `asha: rungs at steps 1, 3, 9 (eta 3), judged on val_loss`."""

    # helpers shared by the implementations -------------------------------------------------------

    def _score(self, value: float) -> float:
        """Lower is better; NaN and infinities are the worst score."""
        return score(value, self.goal)

    @property
    def _metric_name(self) -> str:
        return self.metric or "value"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


def score(value: float, goal: Goal) -> float:
    """`goal.sign() * value`, or +inf when the value is not a finite number."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return math.inf
    return goal.sign() * v if math.isfinite(v) else math.inf


def fmt(value: float) -> str:
    """A short, stable rendering of a metric value for reasons."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{value:.4g}"


def unscore(s: float, goal: Goal) -> float:
    """The raw value of a score (inverse of `score` for finite values)."""
    return goal.sign() * s if math.isfinite(s) else math.nan


class Options:
    """Reads one scheduler's raw option mapping, raising SpecError with the key path on any mistake."""

    def __init__(
        self, raw: Mapping[str, Any], *, key: str, file: str | None, allowed: Iterable[str]
    ) -> None:
        self.raw, self.key, self.file = raw, key, file
        allowed = sorted(allowed)
        for name in raw:
            if name not in allowed:
                close = difflib.get_close_matches(str(name), allowed, n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"remove '{name}'"
                raise SpecError(
                    f"unknown option '{name}'", file=file, key=f"{key}.{name}",
                    expected="one of " + ", ".join(allowed), hint=hint,
                )

    def error(self, name: str, message: str, *, expected: str, hint: str | None = None) -> SpecError:
        return SpecError(
            message, file=self.file, key=f"{self.key}.{name}", value=self.raw.get(name),
            expected=expected, hint=hint,
        )

    def has(self, name: str) -> bool:
        return self.raw.get(name) is not None

    def integer(
        self, name: str, default: int | None, *, minimum: int | None = None, hint: str | None = None
    ) -> int | None:
        v = self.raw.get(name)
        if v is None:
            return default
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(name, "not an integer", expected="an integer")
        if minimum is not None and v < minimum:
            raise self.error(name, "too small", expected=f"an integer >= {minimum}", hint=hint)
        return v

    def number(
        self, name: str, default: float, *, above: float | None = None, hint: str | None = None
    ) -> float:
        v = self.raw.get(name)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.error(name, "not a number", expected="a finite number")
        if above is not None and v <= above:
            raise self.error(name, "too small", expected=f"a number > {fmt(above)}", hint=hint)
        return float(v)

    def boolean(self, name: str, default: bool) -> bool:
        v = self.raw.get(name)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.error(name, "not a boolean", expected="true or false")
        return v

    def string(self, name: str, default: str | None) -> str | None:
        v = self.raw.get(name)
        if v is None:
            return default
        if not isinstance(v, str) or not v:
            raise self.error(name, "not a name", expected="a non-empty string")
        return v


def geometric_steps(
    start: float, eta: float, *, upto: int, count: int | None = None, below: int | None = None,
    round_up: bool = True,
) -> list[int]:
    """Distinct integer steps `start * eta**k` (k = 0, 1, ...) that are <= `upto`, ascending.

    At most `count` terms are generated (None: unbounded), and only steps `< below` are kept. `round_up`
    rounds each term up (ASHA); otherwise it is truncated to an int as W&B's hyperband does.
    """
    out: list[int] = []
    k = 0
    while count is None or k < count:
        raw = start * eta**k
        step = math.ceil(raw - 1e-9) if round_up else int(raw + 1e-9)
        if step > upto or (below is not None and step >= below):
            break
        if not out or step != out[-1]:
            out.append(step)
        k += 1
    return out
