"""Asynchronous successive halving (ASHA; Li et al. 2018, "A System for Massively Parallel
Hyperparameter Tuning"), as a stopping rule.

Rungs: bracket b (0-based) judges at steps `ceil(min_iter * eta**(k + b))`, k = 0, 1, ..., below `max_iter`
(a trial that reaches `max_iter` is never judged again). Trials are spread over the brackets round-robin by
trial number. When a trial first reports at or past a rung step, the value of that report is recorded at the
rung, and the trial continues only if it is in the top `floor(n / eta)` of the n values recorded there so far,
and at least the best one (ties continue). Promotions are asynchronous: no worker ever waits for a rung to
fill. While a rung holds fewer than `eta` values, a trial goes on only if it is as good as every value there
(as Optuna's SuccessiveHalvingPruner; Ray Tune's ASHA likewise stops a trial behind the earlier ones): letting
every trial through until the rung filled made each rung's first `eta - 1` trials train on whatever they
scored: 14 % more epochs to the same target (docs/benchmarks.md, time to target).

With several objectives judged together (`judge_by_rank`) a rung records each trial's vector of objective
values, and "top floor(n / eta)" is by non-dominated rank among the vectors recorded there (rank 1: not
dominated by any of them; ties continue). A trial outside that top still continues unless a trial on the
current Pareto front (of the completed feasible trials' last reported vectors) dominated it at the same
rung: rung ranks mislead most where a front is decided, among near-equal trade-offs, and a trial that was at
least as good at the rung as every front trial was there may still join the front (pruning such trials cut
40% of the front the trials would have made on benchmarks/multiobjective.py's digits task). A rung holding
fewer than `eta` vectors lets every trial through (the single-objective rule's change was not measured here).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweeplab.errors import SpecError
from sweeplab.pareto import dominates, nondominated_ranks, pareto_front, to_min
from sweeplab.schedulers.base import Options, Scheduler, fmt, geometric_steps, unscore
from sweeplab.types import Decision, Goal, TrialState, Verdict

__all__ = ["AshaScheduler"]

_KEYS = ("type", "metric", "min_iter", "max_iter", "eta", "brackets")
_UNBOUNDED = 10**18
_DECISION_HORIZON = 10**6   # with no max_iter, rungs past this step are not waited for


@dataclass
class _Trial:
    done: int = 0                  # rungs already recorded
    stopped: Verdict | None = None
    ended: bool = False
    # the rank rule: the latest objective vector reported, and the vector recorded at each rung step
    last: tuple[float, ...] | None = None
    at_rungs: dict[int, tuple[float, ...]] | None = None


class AshaScheduler(Scheduler):
    """ASHA with `brackets` independent brackets. See the module docstring for the exact rule."""

    type = "asha"

    def __init__(
        self, *, min_iter: int = 1, max_iter: int | None = None, eta: float = 3, brackets: int = 1,
        goal: Goal = Goal.MINIMIZE, metric: str | None = None,
    ) -> None:
        super().__init__(goal=goal, metric=metric)
        _validate(min_iter=min_iter, max_iter=max_iter, eta=eta, brackets=brackets, key=self.type, file=None)
        self.min_iter, self.max_iter, self.eta, self.brackets = min_iter, max_iter, eta, brackets
        # bracket -> rung step -> sorted scores recorded there
        self._rungs: list[dict[int, list[float]]] = [{} for _ in range(brackets)]
        self._steps: list[list[int]] = [[] for _ in range(brackets)]  # rung steps known so far, per bracket
        self._trials: dict[int, _Trial] = {}
        # several objectives judged together (`judge_by_rank`): their goals and names, and per bracket and
        # rung step the objective vectors recorded there
        self.rank_goals: tuple[Goal, ...] | None = None
        self.rank_names: tuple[str, ...] = ()
        self._vectors: list[dict[int, list[tuple[float, ...]]]] = [{} for _ in range(brackets)]
        self._finished: dict[int, tuple[float, ...]] = {}   # completed trial -> its last reported vector

    def judge_by_rank(self, goals: tuple[Goal, ...], names: tuple[str, ...]) -> None:
        """Judge rungs on non-dominated rank: `on_report` then takes a tuple of every objective's value,
        and a trial continues when its front rank among the vectors recorded at the rung is within the
        top floor(n / eta) ranks (ties continue), or when no trial on the current Pareto front of the
        completed trials dominated it at that rung. A sweep with several objectives and no
        early_terminate.metric uses this."""
        self.rank_goals, self.rank_names = tuple(goals), tuple(names)

    @classmethod
    def from_spec(
        cls, raw: Mapping[str, Any], *, goal: Goal, file: str | None = None, key: str = "early_terminate",
        metric: str | None = None,
    ) -> AshaScheduler:
        o = Options(raw, key=key, file=file, allowed=_KEYS)
        min_iter = o.integer("min_iter", 1, minimum=1, hint="steps count from 0; min_iter: 1 is the earliest rung") or 1
        max_iter = o.integer("max_iter", None, minimum=1)
        eta = o.number("eta", 3.0, above=1.0, hint="eta: 3 keeps the top third at each rung")
        brackets = o.integer("brackets", 1, minimum=1) or 1
        _validate(min_iter=min_iter, max_iter=max_iter, eta=eta, brackets=brackets, key=key, file=file)
        return cls(
            min_iter=min_iter, max_iter=max_iter, eta=eta, brackets=brackets, goal=goal,
            metric=o.string("metric", None) or metric,
        )

    def bracket_of(self, trial: int) -> int:
        return trial % self.brackets

    def rungs(self, bracket: int = 0, upto: int = _UNBOUNDED) -> list[int]:
        """Rung steps of `bracket` (those <= `upto`; pass a bound when max_iter is not set)."""
        return geometric_steps(
            self.min_iter * self.eta**bracket, self.eta, upto=upto, below=self.max_iter, round_up=True
        )

    def decision_steps(self, trial: int) -> tuple[int, ...]:
        return tuple(self.rungs(self.bracket_of(trial), upto=self.max_iter or _DECISION_HORIZON))

    def on_report(self, trial: int, step: int, value: Any) -> Verdict:
        t = self._trials.setdefault(trial, _Trial())
        if t.ended:
            return Verdict.go_on()
        if t.stopped is not None:
            return t.stopped
        if self.rank_goals is not None:
            return self._on_vector(t, trial, step, tuple(value))
        bracket = self.bracket_of(trial)
        sc = self._score(value)
        # A report past several rungs is recorded at each in turn until one prunes the trial: a pruned
        # trial was not promoted, so it joins no later rung, even when it had trained past it (a report
        # that jumped rungs, a batch of reports, a command trial not held at its rung: one using neither
        # `Run.from_env` nor W&B). Counting it there would let more than the top 1/eta of the promoted trials through.
        while (rung_step := self._rung_step(bracket, t.done)) is not None and rung_step <= step:
            index = t.done
            values = self._rungs[bracket].setdefault(rung_step, [])
            bisect.insort(values, sc)
            t.done += 1
            n = len(values)
            keep = max(1, math.floor(n / self.eta + 1e-9))
            cutoff = values[keep - 1]
            if sc > cutoff:
                t.stopped = self._pruned(bracket, index, rung_step, step, sc, cutoff, n)
                return t.stopped
        return Verdict.go_on()

    def _on_vector(self, t: _Trial, trial: int, step: int, vector: tuple[float, ...]) -> Verdict:
        """The rank rule: as `on_report`, comparing front ranks within the rung instead of values."""
        bracket = self.bracket_of(trial)
        goals = self.rank_goals or ()
        finite = all(isinstance(v, (int, float)) and math.isfinite(v) for v in vector)
        t.last = vector
        # a NaN / infinite value is worse than any finite one: it is ranked behind every usable vector
        while (rung_step := self._rung_step(bracket, t.done)) is not None and rung_step <= step:
            index = t.done
            vectors = self._vectors[bracket].setdefault(rung_step, [])
            vectors.append(vector)
            t.at_rungs = {**(t.at_rungs or {}), rung_step: vector}
            t.done += 1
            n = len(vectors)
            if n < self.eta:
                continue
            ranks = nondominated_ranks(vectors, goals)
            worst = max((r for r in ranks if r is not None), default=0) + 1
            ordered = sorted(worst if r is None else r for r in ranks)
            mine = ranks[-1] if finite and ranks[-1] is not None else worst
            keep = math.floor(n / self.eta + 1e-9)
            cutoff = ordered[keep - 1]
            if mine <= cutoff:
                continue
            by = self._front_dominator(rung_step, vector) if finite else None
            if finite and by is None:
                continue   # as good at this rung as the front's trials were: it may still join the front
            where = f"bracket {bracket} " if self.brackets > 1 else ""
            beaten = f"; dominated there by trial {by} of the front" if by is not None else ""
            t.stopped = Verdict(
                Decision.STOP,
                reason=(f"{where}rung {index + 1} (step {rung_step}): non-dominated rank {mine} of "
                        f"({', '.join(self.rank_names)}) not in top 1/{fmt(self.eta)} of {n} trials "
                        f"(cutoff rank {cutoff}){beaten}"),
                rule="asha",
                data={"bracket": bracket, "rung": index + 1, "rung_step": rung_step, "step": step,
                      "rank": mine, "cutoff": cutoff, "n": n, "values": list(vector), "front_trial": by},
            )
            return t.stopped     # a pruned trial joins no later rung (see on_report)
        return Verdict.go_on()

    def _front_dominator(self, rung_step: int, vector: tuple[float, ...]) -> int | None:
        """The first trial on the Pareto front of the completed trials whose vector at `rung_step`
        dominates `vector`, or None (no front trial was better there on every objective)."""
        goals = self.rank_goals or ()
        mine = to_min(vector, goals)
        numbers = list(self._finished)
        for i in pareto_front([self._finished[k] for k in numbers], goals):
            then = (self._trials[numbers[i]].at_rungs or {}).get(rung_step)
            theirs = to_min(then, goals) if then is not None else None
            if theirs is not None and mine is not None and dominates(theirs, mine):
                return numbers[i]
        return None

    def _rung_step(self, bracket: int, index: int) -> int | None:
        """Step of rung `index` of `bracket`, or None past the last rung (below max_iter)."""
        known = self._steps[bracket]
        while len(known) <= index:
            first = math.ceil(self.min_iter * self.eta**bracket - 1e-9)  # the search starts at the first rung
            upto = max(2 * (known[-1] if known else first), 2) * math.ceil(self.eta)
            more = self.rungs(bracket, upto=upto)
            if len(more) == len(known):
                return None  # no further rung below max_iter
            known[:] = more
        return known[index]

    def _pruned(
        self, bracket: int, index: int, rung_step: int, step: int, sc: float, cutoff: float, n: int
    ) -> Verdict:
        raw, raw_cutoff = unscore(sc, self.goal), unscore(cutoff, self.goal)
        where = f"bracket {bracket} " if self.brackets > 1 else ""
        return Verdict(
            Decision.STOP,
            reason=(
                f"{where}rung {index + 1} (step {rung_step}): {self._metric_name} {fmt(raw)} "
                + (f"not in top 1/{fmt(self.eta)} of {n} trials" if n >= self.eta else
                   f"behind the best of the {n} trials there so far")
                + f" (cutoff {fmt(raw_cutoff)})"
            ),
            rule="asha",
            data={
                "bracket": bracket, "rung": index + 1, "rung_step": rung_step, "step": step,
                "value": raw, "cutoff": raw_cutoff, "n": n,
            },
        )

    def overrule(self, trial: int) -> None:
        t = self._trials.get(trial)
        if t is not None:
            t.stopped = None

    def on_trial_end(self, trial: int, state: TrialState) -> None:
        if state.is_terminal:
            t = self._trials.setdefault(trial, _Trial())
            t.ended = True
            if state is TrialState.COMPLETED and self.rank_goals is not None and t.last is not None:
                self._finished[trial] = t.last   # the rank rule's front: completed trials' last vectors

    def exclude_from_front(self, trial: int) -> None:
        """The rank rule: a completed `trial` that broke a constraint is no trial of the front it compares
        with (the sweep's front holds feasible trials only), so it prunes no trial it dominated at a rung."""
        self._finished.pop(trial, None)

    def describe(self) -> str:
        limit = self.max_iter if self.max_iter is not None else int(self.min_iter * self.eta**4 + 1e-9)
        more = "" if self.max_iter is not None else ", ..."
        parts = []
        for b in range(self.brackets):
            label = f"bracket {b}: " if self.brackets > 1 else ""
            parts.append(label + "rungs at steps " + ", ".join(map(str, self.rungs(b, upto=limit))) + more)
        top = f", max_iter {self.max_iter}" if self.max_iter is not None else ""
        return (
            f"asha: {'; '.join(parts)} (eta {fmt(self.eta)}{top}, {self.goal.value} {self._metric_name})"
        )


def _validate(
    *, min_iter: int, max_iter: int | None, eta: float, brackets: int, key: str, file: str | None
) -> None:
    def err(name: str, message: str, value: Any, expected: str, hint: str) -> SpecError:
        return SpecError(message, file=file, key=f"{key}.{name}", value=value, expected=expected, hint=hint)

    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not eta > 1:
        raise err("eta", "eta must exceed 1", eta, "a number > 1", "eta: 3 keeps the top third at each rung")
    for name, v in (("min_iter", min_iter), ("max_iter", max_iter), ("brackets", brackets)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise err(name, f"{name} must be a positive integer", v, "an integer >= 1", f"set {name}: 1 or more")
    if max_iter is None:
        return
    if min_iter >= max_iter:
        raise err("min_iter", "min_iter must be below max_iter", min_iter, f"an integer < {max_iter}",
                  "min_iter is the first rung, max_iter the full budget of a trial")
    last = brackets - 1
    if math.ceil(min_iter * eta**last - 1e-9) >= max_iter:
        raise err("brackets", f"bracket {last} would have no rung below max_iter {max_iter}", brackets,
                  f"at most {_max_brackets(min_iter, max_iter, eta)}", "decrease brackets or eta, or raise max_iter")


def _max_brackets(min_iter: int, max_iter: int, eta: float) -> int:
    b = 0
    while math.ceil(min_iter * eta**b - 1e-9) < max_iter:
        b += 1
    return b
