"""The scheduler contract: every early-stopping scheduler (asha, hyperband, median, yours) passes these tests.

Subclass `SchedulerContract` in a test module and implement `make(goal)`, returning a fresh scheduler that
can judge a trial within `horizon` steps (steps 0 .. horizon), e.g.

    class TestAsha(SchedulerContract):
        def make(self, goal):
            return AshaScheduler(min_iter=1, max_iter=27, eta=3, goal=goal, metric="loss")
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from sweeplab.schedulers.base import Scheduler
from sweeplab.types import Decision, Goal, TrialState, Verdict

__all__ = ["Call", "SchedulerContract", "feed", "random_calls"]

#: ("report", trial, step, value) or ("end", trial, state)
Call = tuple[str, int, int, float] | tuple[str, int, TrialState]


def feed(scheduler: Scheduler, calls: Sequence[Call]) -> list[Verdict | None]:
    """Replay `calls` into `scheduler`; the verdict of each report (None for trial ends)."""
    out: list[Verdict | None] = []
    for call in calls:
        if len(call) == 4:
            out.append(scheduler.on_report(call[1], int(call[2]), float(call[3])))
        else:
            scheduler.on_trial_end(call[1], TrialState(call[2]))
            out.append(None)
    return out


def random_calls(seed: int, *, trials: int = 12, horizon: int = 30, nan_rate: float = 0.03) -> list[Call]:
    """An interleaved history of reports and trial ends, like a sweep with a few workers produces."""
    rng = random.Random(seed)
    ends = [TrialState.COMPLETED, TrialState.COMPLETED, TrialState.PRUNED, TrialState.FAILED]
    running: dict[int, int] = {}
    quality = {t: rng.uniform(0.1, 2.0) for t in range(trials)}
    next_trial = 0
    calls: list[Call] = []
    while next_trial < trials or running:
        while len(running) < 3 and next_trial < trials:
            running[next_trial] = 0
            next_trial += 1
        trial = rng.choice(sorted(running))
        step = running[trial]
        if step > horizon or rng.random() < 0.02:
            calls.append(("end", trial, rng.choice(ends)))
            del running[trial]
            continue
        value = quality[trial] / (1 + step) + rng.gauss(0, 0.01)
        if rng.random() < nan_rate:
            value = rng.choice([math.nan, math.inf])
        calls.append(("report", trial, step, value))
        running[trial] = step + rng.choice([1, 1, 1, 2])
    return calls


def _same(a: list[Verdict | None], b: list[Verdict | None]) -> bool:
    return [None if v is None else (v.decision, v.reason, dict(v.data)) for v in a] == \
        [None if v is None else (v.decision, v.reason, dict(v.data)) for v in b]


class SchedulerContract:
    """Behaviour every scheduler must have."""

    #: the last step a trial reports in these tests
    horizon = 30
    #: False for a scheduler that skips NaN and infinite values (hyperband, as W&B's history filter does)
    non_finite_is_worst = True
    #: False for a scheduler whose verdicts decide which later values count (ASHA: a pruned trial joins no
    #: later rung), so its later decisions depend on the order reports arrived in, as in every asynchronous
    #: successive halving; the driver replays the stored history in its original order
    order_independent = True

    def make(self, goal: Goal) -> Scheduler:
        raise NotImplementedError("return a fresh scheduler for `goal`")

    # helpers
    def _good_then_bad(self, goal: Goal) -> tuple[Scheduler, list[Verdict]]:
        """Eight good trials run to the end; then a far worse one reports every step."""
        sign = goal.sign()
        s = self.make(goal)
        for trial in range(8):
            for step in range(self.horizon + 1):
                s.on_report(trial, step, sign * (1.0 + 0.01 * trial) / (1 + step))
            s.on_trial_end(trial, TrialState.COMPLETED)
        bad = [s.on_report(99, step, sign * 100.0) for step in range(self.horizon + 1)]
        return s, bad

    # the contract
    def test_describe_is_one_nonempty_line(self) -> None:
        text = self.make(Goal.MINIMIZE).describe()
        assert text.strip() and "\n" not in text

    def test_every_report_gets_a_verdict_never_warn(self) -> None:
        s = self.make(Goal.MINIMIZE)
        for v in feed(s, random_calls(1, horizon=self.horizon)):
            if v is not None:
                assert isinstance(v, Verdict)
                assert v.decision in (Decision.CONTINUE, Decision.STOP)

    def test_a_lone_trial_is_never_stopped(self) -> None:
        s = self.make(Goal.MINIMIZE)
        verdicts = [s.on_report(0, step, 10.0 + step) for step in range(self.horizon + 1)]
        assert not any(v.stops for v in verdicts)

    def test_a_hopeless_trial_is_stopped_with_reason_rule_and_data(self) -> None:
        for goal in Goal:
            s, bad = self._good_then_bad(goal)
            stops = [v for v in bad if v.stops]
            assert stops, f"{s.describe()}: a trial 100x worse than eight completed ones was never stopped"
            v = stops[0]
            assert v.reason and v.rule == s.type and "step" in v.data

    def test_a_stopped_trial_stays_stopped(self) -> None:
        _, bad = self._good_then_bad(Goal.MINIMIZE)
        first = next(i for i, v in enumerate(bad) if v.stops)
        assert all(v.stops and v.reason == bad[first].reason for v in bad[first:])

    def test_an_ended_trial_is_not_judged_any_more(self) -> None:
        s, _ = self._good_then_bad(Goal.MINIMIZE)
        s.on_trial_end(100, TrialState.FAILED)
        assert not s.on_report(100, self.horizon, 1e9).stops

    def test_nan_and_inf_are_the_worst_values_not_errors(self) -> None:
        s, _ = self._good_then_bad(Goal.MINIMIZE)
        verdicts = [s.on_report(77, step, math.nan if step % 2 else math.inf) for step in range(self.horizon)]
        assert any(v.stops for v in verdicts) is self.non_finite_is_worst

    def test_replaying_the_same_calls_rebuilds_the_same_decisions(self) -> None:
        for seed in range(3):
            calls = random_calls(seed, horizon=self.horizon)
            assert _same(feed(self.make(Goal.MINIMIZE), calls), feed(self.make(Goal.MINIMIZE), calls))

    def test_the_order_finished_trials_are_replayed_in_does_not_change_later_decisions(self) -> None:
        # the driver may replay stored history trial by trial rather than in the original interleaving
        if not self.order_independent:
            return
        for seed in range(4):
            calls = random_calls(seed, trials=20, horizon=self.horizon)
            by_trial = sorted(calls, key=lambda c: -c[1])   # stable: each trial's own order is kept
            later: list[Call] = [(c[0], c[1] + 1000, *c[2:]) for c in random_calls(seed + 100, trials=20,
                                                                                    horizon=self.horizon)]
            a, b = self.make(Goal.MINIMIZE), self.make(Goal.MINIMIZE)
            feed(a, calls)
            feed(b, by_trial)
            assert _same(feed(a, later), feed(b, later))

    def test_maximize_on_negated_values_decides_like_minimize(self) -> None:
        calls = random_calls(7, horizon=self.horizon, nan_rate=0.0)
        negated: list[Call] = [
            (c[0], c[1], c[2], -c[3]) if len(c) == 4 else c for c in calls
        ]
        lo = feed(self.make(Goal.MINIMIZE), calls)
        hi = feed(self.make(Goal.MAXIMIZE), negated)
        assert [v and v.decision for v in lo] == [v and v.decision for v in hi]
