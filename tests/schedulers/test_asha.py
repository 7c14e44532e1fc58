"""ASHA: rung steps, top-1/eta promotion, ties, goals, asynchrony, max_iter, brackets, NaN, resumes."""

from __future__ import annotations

import math

import pytest

from sweeplab.schedulers import AshaScheduler, make_scheduler
from sweeplab.types import Decision, Goal, TrialState

C, S = Decision.CONTINUE, Decision.STOP


@pytest.mark.parametrize(
    ("options", "bracket", "rungs"),
    [
        ({"min_iter": 1, "max_iter": 27, "eta": 3}, 0, [1, 3, 9]),
        ({"min_iter": 1, "max_iter": 27, "eta": 3, "brackets": 3}, 1, [3, 9]),
        ({"min_iter": 1, "max_iter": 27, "eta": 3, "brackets": 3}, 2, [9]),
        ({"min_iter": 2, "max_iter": 100, "eta": 2}, 0, [2, 4, 8, 16, 32, 64]),
        ({"min_iter": 1, "max_iter": 50, "eta": 2.5}, 0, [1, 3, 7, 16, 40]),   # rounded up
        ({"min_iter": 1, "max_iter": 28, "eta": 3}, 0, [1, 3, 9, 27]),
        ({"min_iter": 4, "eta": 4}, 0, [4, 16, 64, 256]),                      # no max_iter: unbounded
    ],
    ids=["r1-R27-eta3", "bracket1", "bracket2", "r2-R100-eta2", "eta2.5", "R28", "unbounded"],
)
def test_rung_steps(options: dict, bracket: int, rungs: list[int]) -> None:
    sched = make_scheduler({"type": "asha", **options}, goal=Goal.MINIMIZE)
    assert isinstance(sched, AshaScheduler)
    assert sched.rungs(bracket, upto=300) == rungs


@pytest.mark.parametrize(
    ("goal", "values", "decisions"),
    [
        (Goal.MINIMIZE, [0.5, 0.4, 0.6], [C, C, S]),           # 3rd: top 1 of 3 is 0.4
        (Goal.MINIMIZE, [0.5, 0.4, 0.3], [C, C, C]),
        (Goal.MINIMIZE, [0.5, 0.5, 0.5], [C, C, C]),           # ties continue
        (Goal.MINIMIZE, [9.0, 8.0, 7.0, 6.0, 5.0, 5.5], [C, C, C, C, C, C]),  # n=6 keeps 2: cutoff 5.5
        (Goal.MINIMIZE, [9.0, 8.0, 7.0, 6.0, 5.0, 5.6, 5.8], [C, C, C, C, C, C, S]),  # n=7: cutoff 5.6
        (Goal.MAXIMIZE, [0.5, 0.4, 0.3], [C, S, S]),
        (Goal.MAXIMIZE, [0.5, 0.4, 0.6], [C, S, C]),
        (Goal.MINIMIZE, [100.0, 1e6], [C, S]),                  # fewer than eta values: the best so far only
        (Goal.MINIMIZE, [100.0, 1.0, 50.0], [C, C, S]),
        (Goal.MINIMIZE, [2.0, 1.0, math.nan], [C, C, S]),       # NaN is the worst
        (Goal.MAXIMIZE, [1.0, 2.0, math.inf], [C, C, S]),       # so is inf, even when maximizing
        (Goal.MINIMIZE, [math.nan, math.nan, math.nan], [C, C, C]),  # all equally bad: a tie
    ],
    ids=["min-worse", "min-better", "ties", "n6-keeps-2", "n6-n7", "max-worse", "max-better",
         "few-worse", "few-better", "nan", "inf-max", "all-nan"],
)
def test_first_rung_decisions(goal: Goal, values: list[float], decisions: list[Decision]) -> None:
    sched = AshaScheduler(min_iter=1, max_iter=27, eta=3, goal=goal)
    got = []
    for trial, v in enumerate(values):
        assert not sched.on_report(trial, 0, v).stops            # step 0: before the first rung
        got.append(sched.on_report(trial, 1, v).decision)
    assert got == decisions


def _reach(sched: AshaScheduler, trial: int, value: float, upto: int) -> Decision:
    decision = C
    for step in range(upto + 1):
        decision = sched.on_report(trial, step, value).decision
    return decision


def test_reason_names_the_rung_and_the_comparison() -> None:
    sched = AshaScheduler(min_iter=1, max_iter=27, eta=3, metric="val_loss")
    for trial, v in enumerate([0.8, 0.7, 0.6, 0.5, 0.35, 0.3]):
        assert _reach(sched, trial, v, 9) is C
    # good at rungs 1 and 2 (steps 1, 3), then 0.41 at rung 3 (step 9) among 7: top 2 have 0.3 and 0.35
    for step, v in [(1, 0.1), (3, 0.1)]:
        assert not sched.on_report(6, step, v).stops
    verdict = sched.on_report(6, 9, 0.41)
    assert verdict.stops and verdict.rule == "asha"
    assert verdict.reason == "rung 3 (step 9): val_loss 0.41 not in top 1/3 of 7 trials (cutoff 0.35)"
    assert verdict.data == {"bracket": 0, "rung": 3, "rung_step": 9, "step": 9, "value": 0.41,
                            "cutoff": 0.35, "n": 7}


def test_the_value_recorded_is_the_first_report_at_or_past_the_rung() -> None:
    sched = AshaScheduler(min_iter=2, max_iter=100, eta=2)       # rungs 2, 4, 8, ...
    sched.on_report(0, 0, 1.0)
    sched.on_report(0, 3, 1.0)                                   # step 3 counts for rung 2
    v = sched.on_report(1, 5, 3.0)                               # jumps over rungs 2 and 4: judged at 2
    assert v.stops and v.data["rung_step"] == 2 and v.data["step"] == 5 and v.data["n"] == 2


@pytest.mark.parametrize("batch", [False, True], ids=["one-report-past-rungs", "reports-after-the-verdict"])
def test_a_trial_pruned_at_a_rung_joins_no_later_rung(batch: bool) -> None:
    """ASHA's later rungs hold promoted trials only (Optuna's SuccessiveHalvingPruner too). A trial pruned
    at rung 1 by a report past rungs 2 and 3 (or whose later reports arrive in the same batch) used to be
    recorded there as well, so those rungs let more than their top 1/eta through."""
    sched = AshaScheduler(min_iter=1, max_iter=100, eta=2)     # rungs 1, 2, 4, 8, ...
    for trial, v in enumerate([0.2, 0.1]):                      # two good trials reach rung 4
        for step in (1, 2, 4):
            assert not sched.on_report(trial, step, v).stops
    if batch:                                                   # the verdict at step 1, then step 9 in one batch
        assert sched.on_report(2, 1, 5.0).stops
        assert sched.on_report(2, 9, 5.0).stops
    else:
        assert sched.on_report(2, 9, 5.0).data["rung_step"] == 1   # jumped rungs 1, 2, 4 and 8: pruned at 1
    # rung 4 holds 0.1 and 0.2 only, so 0.15 there is not in the top 1 of 3 (with 5.0 counted: top 2 of 4)
    for step in (1, 2):
        assert not sched.on_report(3, step, 0.05).stops
    v = sched.on_report(3, 4, 0.15)
    assert v.stops and v.data["n"] == 3 and v.data["cutoff"] == 0.1


def test_trials_reaching_max_iter_are_no_longer_judged() -> None:
    sched = AshaScheduler(min_iter=1, max_iter=3, eta=3)         # the only rung is step 1
    for trial in range(3):
        assert _reach(sched, trial, 1.0, 1) is C
    assert _reach(sched, 3, 1.0, 1) is C                         # ties at rung 1
    assert all(not sched.on_report(3, step, 1e9).stops for step in range(2, 30))


@pytest.mark.parametrize("brackets", [2, 3])
def test_brackets_take_trials_round_robin_with_their_own_rungs(brackets: int) -> None:
    sched = AshaScheduler(min_iter=1, max_iter=27, eta=3, brackets=brackets)
    assert [sched.bracket_of(t) for t in range(6)] == [t % brackets for t in range(6)]
    # fill bracket 0's first rung (step 1) with good values
    for trial in range(0, 3 * brackets, brackets):
        assert sched.on_report(trial, 1, 0.1).decision is C
    # a bad trial of bracket 1 is not judged at step 1 (its first rung is step 3) ...
    assert sched.on_report(1, 1, 50.0).decision is C
    # ... and at step 3 it is compared with bracket-1 trials only (fewer than eta so far: continue)
    assert sched.on_report(1, 3, 50.0).decision is C
    # while a bad trial of bracket 0 is stopped at its first rung by the good ones
    assert sched.on_report(3 * brackets, 1, 50.0).decision is S


def test_a_resumed_trial_repeating_steps_is_not_counted_twice() -> None:
    sched = AshaScheduler(min_iter=1, max_iter=27, eta=3)
    sched.on_report(0, 1, 1.0)
    sched.on_trial_end(0, TrialState.PREEMPTED)                  # not terminal: it will come back
    sched.on_report(0, 0, 1.0)
    sched.on_report(0, 1, 1.0)
    assert sched.on_report(1, 1, 5.0).data["n"] == 2             # two values at rung 1, not three
    assert sched.on_report(2, 1, 9.0).data["n"] == 3


def test_describe_lists_rungs_per_bracket() -> None:
    sched = make_scheduler({"type": "asha", "max_iter": 27, "brackets": 2}, goal=Goal.MINIMIZE, metric="loss")
    assert sched is not None
    assert sched.describe() == (
        "asha: bracket 0: rungs at steps 1, 3, 9; bracket 1: rungs at steps 3, 9 (eta 3, max_iter 27, "
        "minimize loss)"
    )


def test_decision_steps_are_the_rungs_of_the_trials_bracket():
    s = AshaScheduler(min_iter=1, max_iter=27, eta=3, brackets=2)
    assert s.decision_steps(0) == (1, 3, 9)
    assert s.decision_steps(1) == (3, 9)
    assert AshaScheduler(min_iter=2, eta=2).decision_steps(0)[:4] == (2, 4, 8, 16)


@pytest.mark.parametrize("min_iter,max_iter,eta", [(20, 200, 3), (10, 90, 3), (7, 100, 2), (50, 1000, 4)])
def test_a_first_rung_far_from_step_zero_still_prunes(min_iter: int, max_iter: int, eta: int) -> None:
    """The xgboost template's ASHA (rungs at 20, 60, 180): the third trial worse than two others at the
    first rung is stopped there (the lazy rung lookup used to search only steps up to 2*eta)."""
    sched = make_scheduler({"type": "asha", "min_iter": min_iter, "max_iter": max_iter, "eta": eta},
                           goal=Goal.MINIMIZE)
    assert isinstance(sched, AshaScheduler)
    for trial, value in enumerate([0.1] * (eta - 1)):
        assert sched.on_report(trial, min_iter, value).decision is C
    verdict = sched.on_report(eta - 1, min_iter, 0.9)
    assert verdict.decision is S and f"step {min_iter}" in verdict.reason
