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

import math
from abc import ABC, abstractmethod

from sweeplab._values import Options as Options  # re-exported: the one option reader (spec, monitors too)
from sweeplab.types import Goal, TrialState, Verdict

__all__ = ["Scheduler"]


class Scheduler(ABC):
    """Decides, report by report, whether a trial is still worth its compute.

    `metric` is the metric the scheduler judges (from `early_terminate.metric`, else the sweep's metric);
    `goal` says which direction is better. Values passed to `on_report` are raw: the goal is applied inside.
    """

    #: `early_terminate.type` of this scheduler ("asha", "hyperband", "median").
    type: str = ""

    #: Whether `decision_steps` count reports of the metric (hyperband's bands: band b is a trial's b-th
    #: report, whatever its steps) instead of steps (ASHA's rungs). The trial counts its reports to wait.
    decides_on_reports: bool = False

    def __init__(self, *, goal: Goal = Goal.MINIMIZE, metric: str | None = None) -> None:
        self.goal = Goal(goal)
        self.metric = metric

    @abstractmethod
    def on_report(self, trial: int, step: int, value: float) -> Verdict:
        """A new value of the objective metric, reported by `trial` at `step` (the budget unit)."""

    def on_trial_end(self, trial: int, state: TrialState) -> None:
        """`trial` reached `state`. Terminal states stop the trial's judging; others are ignored."""

    def overrule(self, trial: int) -> None:
        """The driver let `trial` go on after the report just given, though this scheduler now says stop:
        a resume replays the stored reports by their times, and a report that reached the live driver late
        (buffered points) was judged then among other trials' results. The stop is dropped (the values it
        recorded stay), so the replay keeps what the live driver decided."""

    def decision_steps(self, trial: int) -> tuple[int, ...]:
        """The steps at which `trial` may be stopped (ASHA's rungs), or the counts of its reports
        (hyperband's bands, with `decides_on_reports`), or () when any report can stop it (the median rule). A
        trial that reports its metric at one of these points, or first past one it skipped, waits for the
        verdict before its next step (`Run.log`), so a pruned trial trains nothing past the report its rung
        judged."""
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
