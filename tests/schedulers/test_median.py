"""The median stopping rule, with Optuna MedianPruner semantics: warmup trials, min_iter, same-step median."""

from __future__ import annotations

import math

import pytest

from sweeplab.schedulers import MedianScheduler, make_scheduler
from sweeplab.types import Decision, Goal, TrialState


def _complete(sched: MedianScheduler, trial: int, values: list[float],
              state: TrialState = TrialState.COMPLETED) -> None:
    for step, v in enumerate(values):
        sched.on_report(trial, step, v)
    sched.on_trial_end(trial, state)


def _run(sched: MedianScheduler, trial: int, values: list[float]) -> list[Decision]:
    return [sched.on_report(trial, step, v).decision for step, v in enumerate(values)]


C, S = Decision.CONTINUE, Decision.STOP


@pytest.mark.parametrize(
    ("warmup", "min_iter", "completed", "values", "expected"),
    [
        (1, 0, [[1, 1, 1]], [2, 2, 2], [S, S, S]),
        (2, 0, [[1, 1, 1]], [2, 2, 2], [C, C, C]),                          # only 1 of 2 warmup trials done
        (2, 0, [[1, 1, 1], [3, 3, 3]], [2.5, 2.5, 2.5], [S, S, S]),          # median of 1 and 3 is 2
        (2, 0, [[1, 1, 1], [3, 3, 3]], [2, 2, 2], [C, C, C]),                # equal to the median: continue
        (1, 2, [[1, 1, 1]], [2, 2, 2], [C, C, S]),                          # not before step min_iter
        (3, 0, [[1, 1, 1], [2, 2, 2], [9, 9, 9]], [3, 3, 3], [S, S, S]),    # odd count: the middle one
        (1, 2, [[1, 1]], [5, 5, 5, 5], [C, C, C, C]),                       # nobody completed reported step 2+
        (1, 2, [[1, 1, 1]], [5, 5, 5, 5], [C, C, S, S]),
        (1, 0, [[1, 1, 1]], [math.nan, 0.5, 0.5], [S, S, S]),               # NaN is the worst
    ],
    ids=["basic", "warmup", "even-median", "tie", "min-iter", "odd-median", "no-reference", "reference",
         "nan"],
)
def test_decisions(warmup: int, min_iter: int, completed: list[list[float]], values: list[float],
                   expected: list[Decision]) -> None:
    sched = MedianScheduler(warmup=warmup, min_iter=min_iter, metric="loss")
    for trial, history in enumerate(completed):
        _complete(sched, trial, history)
    assert _run(sched, 100, values) == expected


def test_best_so_far_is_compared_not_the_latest_value() -> None:
    sched = MedianScheduler(warmup=1, metric="loss")
    _complete(sched, 0, [5, 4, 1])
    assert _run(sched, 1, [0.5, 6, 6]) == [C, C, C]
    assert _run(sched, 2, [6, 6, 0.9]) == [S, S, S]


def test_only_completed_trials_are_references() -> None:
    sched = MedianScheduler(warmup=1, metric="loss")
    _complete(sched, 0, [0.1, 0.1], state=TrialState.PRUNED)
    _complete(sched, 1, [0.1, 0.1], state=TrialState.FAILED)
    assert _run(sched, 2, [5, 5]) == [C, C]
    sched.on_trial_end(2, TrialState.COMPLETED)
    assert _run(sched, 3, [6, 6]) == [S, S]


@pytest.mark.parametrize("goal", list(Goal), ids=lambda g: g.value)
def test_goal(goal: Goal) -> None:
    s = goal.sign()
    sched = MedianScheduler(warmup=1, goal=goal)
    _complete(sched, 0, [s * 1, s * 1])
    assert _run(sched, 1, [s * 2, s * 2]) == [S, S]
    assert _run(sched, 2, [s * 0.5, s * 0.5]) == [C, C]


def test_reason_and_data() -> None:
    sched = MedianScheduler(warmup=2, min_iter=1, metric="val_loss")
    _complete(sched, 0, [1.0, 0.4])
    _complete(sched, 1, [1.0, 0.6])
    assert not sched.on_report(2, 0, 2.0).stops
    v = sched.on_report(2, 1, 0.52)
    assert v.stops and v.rule == "median"
    assert v.reason == ("median rule at step 1: best val_loss so far 0.52 is worse than the median 0.5 of 2 "
                        "completed trials at that step")
    assert v.data == {"step": 1, "value": 0.52, "median": 0.5, "cutoff": 0.5, "n": 2}


def test_spec_keys() -> None:
    sched = make_scheduler({"type": "median", "min_iter": 3, "warmup": 4}, goal=Goal.MINIMIZE)
    assert isinstance(sched, MedianScheduler) and (sched.min_iter, sched.warmup) == (3, 4)


def test_the_median_rule_has_no_decision_steps():
    """It may stop a trial at any report, so trials never wait for it."""
    assert MedianScheduler(warmup=1, metric="loss").decision_steps(0) == ()


def test_interval_judges_only_the_first_report_at_or_past_each_interval_point():
    """Optuna's interval_steps: with interval 3, steps 0, 3, 6, ... are judged (or the first report past
    one of them); a trial worse than the median at steps 1 and 2 is stopped at step 3."""
    sched = make_scheduler({"type": "median", "warmup": 1, "interval": 3}, goal=Goal.MINIMIZE)
    assert isinstance(sched, MedianScheduler)
    _complete(sched, 0, [1.0 / (step + 1) for step in range(12)])
    assert _run(sched, 1, [0.6, 0.6, 0.6, 0.6]) == [C, C, C, S]
    sched.on_report(2, 0, 0.6)
    assert sched.on_report(2, 2, 0.6).decision is C and sched.on_report(2, 5, 0.6).decision is S  # past 3
    assert "every 3 steps" in sched.describe()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_interval_must_be_a_positive_integer(bad):
    from sweeplab.errors import SpecError
    with pytest.raises(SpecError, match="interval"):
        make_scheduler({"type": "median", "interval": bad}, goal=Goal.MINIMIZE)
