"""W&B-compatible hyperband: band values, thresholds, strict mode, goals, NaN, judging on every report."""

from __future__ import annotations

import math

import pytest

from sweeplab.schedulers import HyperbandScheduler, hyperband_bands, make_scheduler
from sweeplab.types import Decision, Goal, TrialState


@pytest.mark.parametrize(
    ("options", "bands"),
    [
        ({"min_iter": 1, "eta": 3}, [1, 3, 9, 27, 81]),
        ({"min_iter": 3, "eta": 3, "s": 3}, [3, 9, 27, 81]),           # s is not used with min_iter, as in W&B
        ({"min_iter": 2, "eta": 2, "s": 4}, [2, 4, 8, 16, 32, 64]),
        ({"min_iter": 1, "eta": 2.5, "s": 4}, [1, 2, 6, 15, 39, 97]),
        ({"max_iter": 150, "eta": 3, "s": 4}, [1, 5, 16, 50]),   # 150/3, 150/9, 150/27, 150/81, truncated
        ({"max_iter": 19, "eta": 3, "s": 2}, [2, 6]),             # W&B's own explanation of its bands
        ({"max_iter": 5, "eta": 2, "s": 2}, [1, 2]),              # W&B's docstring example
        ({"max_iter": 81, "eta": 3, "s": 3}, [3, 9, 27]),
        ({"max_iter": 10, "eta": 3, "s": 5}, [1, 3]),             # bands below 1 are dropped
        ({"max_iter": 27, "min_iter": 2, "eta": 3, "s": 2}, [3, 9]),  # max_iter wins, as in W&B
        ({"min_iter": 45, "eta": 1.4}, [45, 62, 88]),    # W&B's float product: 45 * 1.4 = 62.999..., so 62
        ({"max_iter": 33, "eta": 1.1, "s": 1}, [29]),    # W&B's float quotient: 33 / 1.1 = 29.999..., so 29
    ],
    ids=["min1-eta3", "min3-eta3-s3", "min2-eta2-s4", "min1-eta2.5-s4", "max150-eta3-s4", "max19-eta3-s2",
         "max5-eta2-s2", "max81-eta3-s3", "max10-eta3-s5", "both-given", "float-product", "float-quotient"],
)
def test_band_steps_match_wandb(options: dict, bands: list[int]) -> None:
    assert hyperband_bands(**options, upto=100) == bands
    sched = make_scheduler({"type": "hyperband", **options}, goal=Goal.MINIMIZE)
    assert isinstance(sched, HyperbandScheduler)
    assert sched.bands(upto=100) == bands


def _feed(sched: HyperbandScheduler, trial: int, values: list[float], start: int = 0) -> list[Decision]:
    return [sched.on_report(trial, start + i, v).decision for i, v in enumerate(values)]


def test_wandb_docstring_example_stops_b_but_not_c_or_d() -> None:
    # W&B's example: max_iter 5, eta 2, s 2 (bands 1, 2); a and e finished, b c d running. W&B's controller
    # today (band b is the b-th report, wandb/sweeps#99) stops b only; its docstring still says c too
    sched = HyperbandScheduler(max_iter=5, eta=2, s=2, metric="loss")
    _feed(sched, 0, [10, 9])
    sched.on_trial_end(0, TrialState.COMPLETED)
    _feed(sched, 4, [10, 6, 6])
    sched.on_trial_end(4, TrialState.COMPLETED)
    d = _feed(sched, 3, [10, 7, 7])
    c = _feed(sched, 2, [10, 8, 8])
    b = _feed(sched, 1, [10, 10])
    assert d == [Decision.CONTINUE] * 3
    assert c == [Decision.CONTINUE] * 3                     # its 8 at band 2 is the threshold, not worse
    assert b == [Decision.CONTINUE, Decision.STOP]          # 10 at band 2 (its 2nd report) is worse than 8


def test_stop_reason_names_band_value_threshold_and_count() -> None:
    sched = HyperbandScheduler(min_iter=1, eta=3, metric="loss")
    _feed(sched, 0, [10, 9])
    v = sched.on_report(1, 0, 12)                                # its 1st report is band 1
    assert v.stops and v.rule == "hyperband"
    assert v.reason == "hyperband band 1 (report 1): loss 12 worse than threshold 10 (top 1/3 of 2 trials)"
    assert v.data["band"] == 1 and v.data["value"] == 12 and v.data["cutoff"] == 10 and v.data["n"] == 2


def test_the_threshold_is_wandbs_int_n_over_eta_th_best() -> None:
    # eta 2 with two trials: index int(2/2) = 1, the worse of the two, so nobody is stopped yet
    sched = HyperbandScheduler(min_iter=1, eta=2)
    _feed(sched, 0, [1, 1])
    assert _feed(sched, 1, [5, 5])[-1] is Decision.CONTINUE
    # a third trial: index int(3/2) = 1 of [1, 5, 9] -> threshold 5
    assert _feed(sched, 2, [9, 9])[-1] is Decision.STOP


@pytest.mark.parametrize(
    ("strict", "expected"), [(True, Decision.STOP), (False, Decision.CONTINUE)], ids=["strict", "not-strict"]
)
def test_strict_compares_the_band_value_not_the_best_so_far(strict: bool, expected: Decision) -> None:
    sched = HyperbandScheduler(min_iter=2, eta=2, strict=strict, metric="loss")
    _feed(sched, 0, [1, 1])
    _feed(sched, 1, [2, 2])
    # trial 2 was the best early but is the worst at band 2: threshold = 2nd best of [1, 2, 3] = 2
    assert _feed(sched, 2, [0.5, 3])[-1] is expected


@pytest.mark.parametrize("goal", list(Goal), ids=lambda g: g.value)
def test_goal_decides_which_side_is_worse(goal: Goal) -> None:
    s = goal.sign()
    sched = HyperbandScheduler(min_iter=1, eta=3, goal=goal)
    _feed(sched, 0, [s * 1, s * 1])
    assert _feed(sched, 1, [s * 5, s * 5])[-1] is Decision.STOP
    assert _feed(sched, 2, [s * 0.5, s * 0.5])[-1] is Decision.CONTINUE


def test_a_trial_is_judged_between_bands_when_later_trials_raise_the_bar() -> None:
    sched = HyperbandScheduler(min_iter=1, eta=3)                # bands 1, 3, 9, ...
    assert _feed(sched, 0, [5]) == [Decision.CONTINUE]           # alone at band 1
    _feed(sched, 1, [1])
    _feed(sched, 2, [1])
    # back to trial 0 at its 2nd report (no new band): its band-1 value 5 is now worse than the threshold 1
    v = sched.on_report(0, 1, 4)
    assert v.stops and v.data["band"] == 1 and v.data["value"] == 5


def test_nan_and_inf_are_skipped_as_wandb_filters_them_from_the_history() -> None:
    # sweeps/run.py metric_history(filter_invalid=True): a non-finite value is no iteration and no band value
    sched = HyperbandScheduler(min_iter=1, eta=3)
    _feed(sched, 0, [1, 1])
    assert _feed(sched, 1, [math.nan, math.inf, -math.inf]) == [Decision.CONTINUE] * 3
    assert sched.on_report(1, 3, 0.5).decision is Decision.CONTINUE   # its 1st value, at band 1: best
    assert sched.on_report(2, 0, 2).stops   # band 1 threshold: index int(3/3) of sorted {0.5, 1, 2}: 1


def test_a_band_is_reached_by_the_count_of_reports_not_by_the_step_as_in_wandb() -> None:
    # W&B's hyperband_stop_runs indexes the metric's history: band b needs b values, whatever the steps
    sched = HyperbandScheduler(min_iter=1, eta=3)                # bands 1, 3, 9, ...
    sched.on_report(0, 10, 2.0)                                  # its 1st value, at step 10: band 1 only
    assert sched.on_report(2, 100, 1.0).decision is Decision.CONTINUE   # step 100 is still band 1
    sched.on_report(0, 11, 2.0)                                  # 2nd value: no new band
    v = sched.on_report(1, 0, 3.0)
    assert v.stops and v.data["band"] == 1 and v.data["cutoff"] == 2.0   # 2nd best of [1, 2, 3]


def test_steps_reported_again_by_a_retried_attempt_are_no_new_reports() -> None:
    # an attempt that starts again from an older checkpoint (or from scratch) logs steps already reported; W&B
    # drops a log whose step does not increase, so they reach no band
    sched = HyperbandScheduler(min_iter=2, eta=2)                 # bands 2, 4, ...
    _feed(sched, 0, [1, 1, 1, 1], start=1)
    _feed(sched, 2, [1, 1, 1, 1], start=1)
    _feed(sched, 1, [1, 1, 1], start=1)                           # steps 1-3: band 2
    assert _feed(sched, 1, [9, 9, 9], start=1) == [Decision.CONTINUE] * 3   # again: still 3 reports, no band 4
    v = sched.on_report(1, 4, 3)                                  # its 4th report, at band 4: 3 > threshold 1
    assert v.stops and v.data["band"] == 4 and v.data["value"] == 3


def test_ended_trials_still_count_in_thresholds_but_are_not_judged() -> None:
    sched = HyperbandScheduler(min_iter=1, eta=3)
    _feed(sched, 0, [1, 1])
    sched.on_trial_end(0, TrialState.COMPLETED)
    assert sched.on_report(0, 5, 100).decision is Decision.CONTINUE
    assert _feed(sched, 1, [2, 2])[-1] is Decision.STOP


def test_describe_lists_the_bands() -> None:
    sched = make_scheduler({"type": "hyperband", "max_iter": 81, "s": 3}, goal=Goal.MAXIMIZE, metric="acc")
    assert sched is not None
    assert sched.describe() == "hyperband: bands at reports 3, 9, 27 (eta 3, strict, maximize acc)"


def test_decision_points_are_the_bands_counted_in_reports():
    # band b is the b-th report of the metric, whatever its steps: the trial counts its reports to wait there
    s = HyperbandScheduler(min_iter=1, s=3, eta=3)
    assert s.decides_on_reports and s.decision_steps(7)[:4] == (1, 3, 9, 27)
    assert HyperbandScheduler(max_iter=27, s=2, eta=3).decision_steps(0) == (3, 9)
