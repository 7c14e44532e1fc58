"""The rules over one metric's values: nan, diverging, plateau, exploding, vanishing."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

from sweeplab.monitors._base import Monitor, _Fire
from sweeplab.monitors._util import ALL, _finite, _show
from sweeplab.types import Goal, MetricPoint


class NanMonitor(Monitor):
    """A NaN or infinite value in a watched metric. Watched by default: the sweep's metrics (bound by
    `parse_monitors`: every objective, the scheduler's metric, the constraints' metrics) and every metric
    whose name contains "loss". Not every metric: a healthy run logs infinities elsewhere (the gradient norm
    of a step the AMP GradScaler skips, a ratio to a learning rate of 0 in warm-up, an early perplexity
    exp(loss) that overflows), and a NaN that matters reaches the loss within a step. `metrics="all"`
    watches every metric, a list only those."""

    name = "nan"

    def __init__(self, metrics: Sequence[str] | str | None = None, *, action: str = "stop") -> None:
        super().__init__(action=action)
        self.every = metrics == ALL
        self.watched = frozenset(metrics) if metrics and not isinstance(metrics, str) else None
        self.sweep_metrics: frozenset[str] = frozenset()
        self._bad: dict[int, set[str]] = {}

    def _options(self) -> dict[str, Any]:
        return {"metrics": ALL if self.every else sorted(self.watched) if self.watched is not None else None}

    def bind(self, sweep_metrics: Sequence[str]) -> None:
        """The sweep's metrics, watched by default (a `nan` given a list of its own ignores them)."""
        self.sweep_metrics = frozenset(sweep_metrics)

    def watches(self, key: str) -> bool:
        if self.watched is not None:
            return key in self.watched
        return self.every or key in self.sweep_metrics or "loss" in key.lower()

    def _check(self, trial: int, point: MetricPoint) -> _Fire | bool | None:
        if not self.watches(point.key):
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

    def describe(self) -> str:
        what = (", ".join(sorted(self.watched)) if self.watched is not None else "every metric" if self.every
                else "the sweep's metrics and loss-like ones")
        return f"{self.name} on {what} ({self.action})"

    def _restart(self, trial: int) -> None:
        self._bad.pop(trial, None)


class _OneMetric(Monitor):
    """A rule over a single metric, with per-trial state."""

    def __init__(self, metric: str, *, action: str = "stop") -> None:
        super().__init__(action=action)
        self.metric = metric
        self._state: dict[int, Any] = {}

    def metrics(self) -> frozenset[str] | None:
        return frozenset({self.metric})

    def _restart(self, trial: int) -> None:
        self._state.pop(trial, None)

    def describe(self) -> str:
        return f"{self.name} on {self.metric} ({self.action})"


class DivergingMonitor(_OneMetric):
    name = "diverging"

    def __init__(self, metric: str, *, factor: float = 10.0, goal: Goal | str = Goal.MINIMIZE,
                 min_steps: int = 0, action: str = "stop") -> None:
        super().__init__(metric, action=action)
        self.factor, self.goal, self.min_steps = factor, Goal(goal), min_steps

    def _options(self) -> dict[str, Any]:
        return {"metric": self.metric, "factor": self.factor, "goal": self.goal.value, "min_steps": self.min_steps}

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
        state = self._state.get(trial)
        if state is None:
            self._state[trial] = (v, v)  # (best, first)
            return False
        best, first = state
        self._state[trial] = (v if self.goal.better(v, best) else best, first)
        if point.step < self.min_steps:
            return False
        # Worse than `factor` x the best AND worse than where it started: a ratio to a best near 0 (a
        # mini-batch loss that touched 0.01) fires on ordinary noise, and one to a best across 0 (a
        # log-likelihood) is meaningless; a run that diverges loses everything it learnt, so it passes both.
        limit = self._limit(best)
        if limit is None or not self.goal.better(limit, v) or not self.goal.better(first, v):
            return False
        return _Fire(
            f"{self.metric} {_show(v)} at step {point.step} is worse than {_show(self.factor)} x its best "
            f"{_show(best)} and than its first value {_show(first)}",
            {"metric": self.metric, "value": v, "best": best, "first": first, "factor": self.factor,
             "step": point.step},
        )


class PlateauMonitor(_OneMetric):
    name = "plateau"

    def __init__(self, metric: str, *, patience: int = 5, min_delta: float = 0.0,
                 goal: Goal | str = Goal.MINIMIZE, action: str = "stop") -> None:
        super().__init__(metric, action=action)
        self.patience, self.min_delta, self.goal = patience, min_delta, Goal(goal)

    def _options(self) -> dict[str, Any]:
        return {"metric": self.metric, "patience": self.patience, "min_delta": self.min_delta,
                "goal": self.goal.value}

    def _restart(self, trial: int) -> None:
        """A curve that starts over keeps its count of reports without progress (a flat trial interrupted
        and retried stops where it would have), but the best it must beat becomes its own: a healthy retry
        that starts over is judged by whether it improves, not against the best of the attempt before."""
        state = self._state.get(trial)
        if state is not None:
            state[3] = True

    def forget(self, trial: int) -> None:
        super().forget(trial)
        self._state.pop(trial, None)

    def _check(self, trial: int, point: MetricPoint) -> _Fire | bool | None:
        if point.key != self.metric:
            return None
        v = point.value
        state = self._state.get(trial)
        if state is None:
            self._state[trial] = [v if _finite(v) else math.nan, point.step, 0, False]
            return False
        best, best_step, stale, restarted = state
        gain = self.goal.sign() * (best - v) if _finite(v) else math.nan
        if (math.isnan(best) and _finite(v)) or gain > self.min_delta:
            self._state[trial] = [v, point.step, 0, False]
            return False
        stale += 1
        state[2] = stale
        if restarted:   # the curve started over: its first report is the best it is judged against from now on
            state[:] = [v if _finite(v) else best, point.step if _finite(v) else best_step, stale, False]
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

    def _options(self) -> dict[str, Any]:
        return {"metric": self.metric, "threshold": self.threshold, "factor": self.factor}

    def _check(self, trial: int, point: MetricPoint) -> _Fire | bool | None:
        if point.key != self.metric:
            return None
        v = point.value
        data: dict[str, Any] = {"metric": self.metric, "value": v, "step": point.step}
        if not _finite(v):
            # A step that mixed precision's GradScaler (or a skip-on-overflow loop) skips: its gradients
            # overflowed, the step is dropped, training goes on. When training itself breaks, the loss
            # turns NaN, which `nan` watches. Not a value of the running median either.
            return None
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

    def _options(self) -> dict[str, Any]:
        return {"metric": self.metric, "threshold": self.threshold, "patience": self.patience}

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

