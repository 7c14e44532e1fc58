"""ASHA's rank rule for several objectives: a rung keeps the top floor(n / eta) by non-dominated rank."""

from __future__ import annotations

import math

from sweeplab.schedulers import AshaScheduler
from sweeplab.types import Goal, TrialState

GOALS = (Goal.MAXIMIZE, Goal.MINIMIZE)   # accuracy, size


def asha() -> AshaScheduler:
    s = AshaScheduler(min_iter=1, max_iter=9, eta=3, goal=Goal.MAXIMIZE)
    s.judge_by_rank(GOALS, ("acc", "size"))
    return s


def test_a_trade_off_survives_where_the_primary_objective_would_prune_it():
    s = asha()
    assert not s.on_report(0, 1, (0.9, 10.0)).stops
    assert not s.on_report(1, 1, (0.5, 5.0)).stops      # fewer than eta values: everyone passes
    v = s.on_report(2, 1, (0.4, 20.0))                  # dominated by trial 0: rank 2, cutoff rank 1
    assert v.stops
    assert v.reason == "rung 1 (step 1): non-dominated rank 2 of (acc, size) not in top 1/3 of 3 trials (cutoff rank 1)"
    assert v.data["rank"] == 2 and v.data["cutoff"] == 1
    # the small, less accurate model is on the rung's front: kept (accuracy alone would cut it: 0.45 < 0.9)
    assert not s.on_report(3, 1, (0.45, 4.0)).stops
    # judged on accuracy alone, the same rung prunes it
    p = AshaScheduler(min_iter=1, max_iter=9, eta=3, goal=Goal.MAXIMIZE)
    for k, acc in enumerate((0.9, 0.5, 0.4)):
        p.on_report(k, 1, acc)
    assert p.on_report(3, 1, 0.45).stops


def test_a_nan_objective_ranks_behind_every_usable_vector():
    s = asha()
    s.on_report(0, 1, (0.9, 10.0))
    s.on_report(1, 1, (0.8, 12.0))
    assert s.on_report(2, 1, (math.nan, 1.0)).stops


def test_the_verdict_sticks_and_ended_trials_are_not_judged():
    s = asha()
    for k, vec in enumerate(((0.9, 10.0), (0.8, 12.0), (0.1, 50.0))):
        s.on_report(k, 1, vec)
    assert s.on_report(2, 3, (0.99, 1.0)).stops           # stopped at rung 1: later reports change nothing
    s.on_trial_end(0, TrialState.COMPLETED)
    assert not s.on_report(0, 3, (0.0, 99.0)).stops
