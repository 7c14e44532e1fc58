"""W&B's `hyperband` early termination, with W&B's keys and meaning, judged on every report.

Bands (the steps where trials are judged), as W&B computes them:
    min_iter given:  int(min_iter * eta**k) for k = 0 .. 99 (`s` is not used with min_iter, as in W&B)
    max_iter given:  int(max_iter / eta**k) for k = 1 .. s, stopping below 1 (max_iter takes
                     precedence when both are given, as in W&B)
At each band every trial that reached it records its value. As in W&B's controller, band b is reached by
a trial's b-th report of the metric (its value at index b-1 of the metric's history, whatever the steps
the program gives; sources: wandb/sweeps, hyperband_stopping.py, hyperband_stop_runs: `h[band - 1]` and
`band <= len(history)`, since wandb/sweeps#99; the sweeps 0.2.0 wheel on PyPI predates it), so a trial
logging from step 0 is judged at step b-1, one logging from step 1 at step b.
The threshold of a band is the `int(n / eta)`-th best of the n values recorded there (so the
top 1/eta pass). NaN and infinite values are skipped (no report, no band value), as W&B's
metric_history(filter_invalid=True) drops them. A running trial whose value is worse than the threshold
of the last band it passed is
stopped. `strict: true` (W&B's default) compares the value recorded at that band; `strict: false` compares
the trial's best value so far, which stops fewer trials. W&B evaluates this every few minutes; sweeplab on
every report, so a trial can also be stopped between bands when later trials raise the bar.
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

__all__ = ["HyperbandScheduler", "hyperband_bands"]

_KEYS = ("type", "metric", "min_iter", "max_iter", "s", "eta", "strict")
_UNBOUNDED = 10**18
_WANDB_MIN_ITER_BANDS = 100   # W&B computes this many bands from min_iter; none after them


def hyperband_bands(
    *, min_iter: int | None = None, max_iter: int | None = None, s: int | None = None, eta: float = 3,
    upto: int = _UNBOUNDED,
) -> list[int]:
    """The band steps W&B's hyperband judges at, ascending (those <= `upto`), with W&B's own float
    arithmetic (wandb/sweeps, hyperband_stopping.py, hyperband_stop_runs): max_iter divided by eta s times,
    each truncated, stopping below 1; or min_iter multiplied by eta, truncated, for W&B's 100 bands."""
    bands: set[int] = set()
    if max_iter is not None:
        band: float = max_iter
        for _ in range(s or 0):
            band /= eta
            if band < 1:
                break
            bands.add(int(band))
        return sorted(b for b in bands if b <= upto)
    if min_iter is None:
        raise ValueError("hyperband needs min_iter or max_iter")
    band = min_iter
    for _ in range(_WANDB_MIN_ITER_BANDS):
        if int(band) > upto:
            break
        bands.add(int(band))
        band *= eta
    return sorted(bands)


@dataclass
class _Trial:
    band_scores: dict[int, float] = field(default_factory=dict)  # band step -> score recorded there
    best: float = math.inf
    reports: int = 0
    top: int | None = None   # the highest step reported so far
    stopped: Verdict | None = None
    ended: bool = False


class HyperbandScheduler(Scheduler):
    """W&B-compatible hyperband stopping. See the module docstring for the exact rule."""

    type = "hyperband"
    decides_on_reports = True

    def __init__(
        self, *, min_iter: int | None = None, max_iter: int | None = None, s: int | None = None,
        eta: float = 3, strict: bool = True, goal: Goal = Goal.MINIMIZE, metric: str | None = None,
    ) -> None:
        super().__init__(goal=goal, metric=metric)
        _validate(min_iter=min_iter, max_iter=max_iter, s=s, eta=eta, key=self.type, file=None)
        self.min_iter, self.max_iter, self.s, self.eta, self.strict = min_iter, max_iter, s, eta, strict
        self._finite = max_iter is not None
        self._bands = hyperband_bands(min_iter=min_iter, max_iter=max_iter, s=s, eta=eta) if self._finite \
            else []
        self._values: dict[int, list[float]] = {}   # band step -> sorted scores of every trial there
        self._trials: dict[int, _Trial] = {}

    @classmethod
    def from_spec(
        cls, raw: Mapping[str, Any], *, goal: Goal, file: str | None = None, key: str = "early_terminate",
        metric: str | None = None,
    ) -> HyperbandScheduler:
        o = Options(raw, key=key, file=file, allowed=_KEYS)
        min_iter = o.integer("min_iter", None, minimum=1, hint="min_iter: 1 is the earliest band")
        max_iter = o.integer("max_iter", None, minimum=1)
        s = o.integer("s", None, minimum=1)
        eta = o.number("eta", 3.0, above=1.0, hint="eta: 3 keeps the top third at each band")
        _validate(min_iter=min_iter, max_iter=max_iter, s=s, eta=eta, key=key, file=file)
        return cls(
            min_iter=min_iter, max_iter=max_iter, s=s, eta=eta, strict=o.boolean("strict", True),
            goal=goal, metric=o.string("metric", None) or metric,
        )

    def bands(self, upto: int = 10**6) -> list[int]:
        """The band steps (those <= `upto` when the bands are unbounded)."""
        return self._bands_upto(upto)

    def _bands_upto(self, step: int) -> list[int]:
        if self._finite:
            return [b for b in self._bands if b <= step]
        return hyperband_bands(min_iter=self.min_iter, eta=self.eta, upto=step)

    def decision_steps(self, trial: int) -> tuple[int, ...]:
        """The bands, in reports (`decides_on_reports`): band b is a trial's b-th report of the metric,
        whatever its steps (step 40 for a trial logging every 5 steps from step 0); it waits there."""
        return tuple(self.bands())

    def on_report(self, trial: int, step: int, value: float) -> Verdict:
        t = self._trials.setdefault(trial, _Trial())
        if t.ended:
            return Verdict.go_on()
        sc = self._score(value)
        # a step at or below one already reported is no new iteration: an attempt that runs again (a retry, a
        # resume) from an older checkpoint or from scratch reports its steps again (W&B drops a log whose step
        # does not increase); counted twice, they would bring the trial to its bands early
        again = t.top is not None and step <= t.top
        t.top = step if t.top is None else max(t.top, step)
        if math.isfinite(sc) and not again:   # W&B drops NaN and infinite values from the history
            t.best = min(t.best, sc)  # (filter_invalid): no iteration, no band value; the trial is judged as is
            t.reports += 1
        passed = self._bands_upto(t.reports)   # W&B: band b needs len(history) >= b
        for band in passed:  # recorded whatever the verdicts: the replay order cannot change the bands
            if band not in t.band_scores:
                t.band_scores[band] = sc
                bisect.insort(self._values.setdefault(band, []), sc)
        if t.stopped is not None:
            return t.stopped
        if not passed:
            return Verdict.go_on()
        band = passed[-1]
        values = self._values[band]
        n = len(values)
        threshold = values[int((1.0 / self.eta) * n)]
        judged = t.band_scores[band] if self.strict else t.best
        if not judged > threshold:
            return Verdict.go_on()
        raw_judged, raw_threshold = unscore(judged, self.goal), unscore(threshold, self.goal)
        what = f"{self._metric_name} {fmt(raw_judged)}" if self.strict \
            else f"best {self._metric_name} so far {fmt(raw_judged)}"
        t.stopped = Verdict(
            Decision.STOP,
            reason=(
                f"hyperband band {len(passed)} (report {band}): {what} worse than threshold "
                f"{fmt(raw_threshold)} (top 1/{fmt(self.eta)} of {n} trials)"
            ),
            rule="hyperband",
            data={
                "rung": len(passed), "band": band, "step": step, "value": raw_judged,
                "cutoff": raw_threshold, "threshold": raw_threshold, "n": n, "strict": self.strict,
            },
        )
        return t.stopped

    def overrule(self, trial: int) -> None:
        t = self._trials.get(trial)
        if t is not None:
            t.stopped = None

    def on_trial_end(self, trial: int, state: TrialState) -> None:
        if state.is_terminal:
            self._trials.setdefault(trial, _Trial()).ended = True

    def describe(self) -> str:
        shown = self._bands if self._finite else self.bands(upto=_shown_limit(self.min_iter, self.eta))
        more = "" if self._finite else ", ..."
        mode = "strict" if self.strict else "not strict"
        return (
            f"hyperband: bands at reports {', '.join(map(str, shown))}{more} (eta {fmt(self.eta)}, {mode}, "
            f"{self.goal.value} {self._metric_name})"
        )


def _shown_limit(min_iter: int | None, eta: float) -> int:
    return int((min_iter or 1) * eta**4 + 1e-9)


def _validate(
    *, min_iter: int | None, max_iter: int | None, s: int | None, eta: float, key: str, file: str | None,
) -> None:
    def err(name: str, message: str, value: Any, expected: str, hint: str) -> SpecError:
        return SpecError(message, file=file, key=f"{key}.{name}", value=value, expected=expected, hint=hint)

    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not eta > 1:
        raise err("eta", "eta must exceed 1", eta, "a number > 1", "eta: 3 keeps the top third at each band")
    if min_iter is None and max_iter is None:
        raise SpecError(
            "hyperband needs min_iter or max_iter", file=file, key=key,
            expected="min_iter (first band) or max_iter with s (last step judged)",
            hint="e.g. early_terminate: {type: hyperband, min_iter: 3}",
        )
    for name, v in (("min_iter", min_iter), ("max_iter", max_iter), ("s", s)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise err(name, f"{name} must be a positive integer", v, "an integer >= 1", f"set {name}: 1 or more")
    if max_iter is not None:
        if s is None:
            raise SpecError(
                "hyperband with max_iter needs s (the number of bands below max_iter)", file=file,
                key=f"{key}.s", expected="an integer >= 1", hint="add s: 2 (bands at max_iter/eta, max_iter/eta^2)",
            )
        if not hyperband_bands(max_iter=max_iter, s=s, eta=eta):
            raise err("max_iter", "max_iter / eta is below 1, so there is no band", max_iter,
                      f"an integer >= {math.ceil(eta)}", "increase max_iter or decrease eta")
