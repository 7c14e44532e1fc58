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


def complete(s: AshaScheduler, trial: int, vector: tuple[float, float]) -> None:
    """`trial` reports its full budget (step 9) and completes: it joins the front the rule compares with."""
    s.on_report(trial, 9, vector)
    s.on_trial_end(trial, TrialState.COMPLETED)


def test_a_trade_off_survives_where_the_primary_objective_would_prune_it():
    s = asha()
    assert not s.on_report(0, 1, (0.9, 10.0)).stops
    complete(s, 0, (0.95, 10.0))
    assert not s.on_report(1, 1, (0.5, 5.0)).stops      # fewer than eta values: everyone passes
    v = s.on_report(2, 1, (0.4, 20.0))                  # dominated by trial 0: rank 2, cutoff rank 1
    assert v.stops
    assert v.reason == ("rung 1 (step 1): non-dominated rank 2 of (acc, size) not in top 1/3 of 3 trials "
                        "(cutoff rank 1); dominated there by trial 0 of the front")
    assert v.data["rank"] == 2 and v.data["cutoff"] == 1 and v.data["front_trial"] == 0
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


def test_a_trial_outside_the_top_ranks_continues_unless_a_front_trial_beat_it_at_the_rung():
    """Rung ranks mislead among near-equal trade-offs: a trial continues unless a trial that completed
    onto the front dominated it at the same rung (the old rule pruned trial 2 on its rank alone)."""
    s = asha()
    s.on_report(0, 1, (0.5, 10.0))
    complete(s, 0, (0.9, 10.0))                          # the front: trial 0, which had (0.5, 10) at rung 1
    assert not s.on_report(1, 1, (0.8, 5.0)).stops
    kept = s.on_report(2, 1, (0.7, 6.0))                # rank 2 (trial 1 dominates it), cutoff rank 1
    assert not kept.stops                               # but trial 0 did not dominate it at the rung
    v = s.on_report(3, 1, (0.4, 12.0))                  # trial 0 had (0.5, 10) here: better on both
    assert v.stops and v.data["front_trial"] == 0
    assert v.reason.endswith("; dominated there by trial 0 of the front")
    # pruned trials never join the front; a trial that completes does, with its last reported values
    s.on_trial_end(3, TrialState.PRUNED)
    s.on_report(4, 1, (0.6, 4.0))
    complete(s, 4, (0.92, 4.0))                          # now the front is trials 0 and 4
    assert s.on_report(5, 1, (0.55, 8.0)).data["front_trial"] == 4


def test_no_trial_is_pruned_on_rank_alone_before_one_completes():
    s = asha()
    for k, vec in enumerate(((0.9, 10.0), (0.8, 12.0), (0.1, 50.0))):
        assert not s.on_report(k, 1, vec).stops


def test_the_verdict_sticks_and_ended_trials_are_not_judged():
    s = asha()
    s.on_report(0, 1, (0.9, 10.0))
    complete(s, 0, (0.95, 10.0))
    for k, vec in enumerate(((0.8, 12.0), (0.1, 50.0)), start=1):
        s.on_report(k, 1, vec)
    assert s.on_report(2, 3, (0.99, 1.0)).stops           # stopped at rung 1: later reports change nothing
    s.on_trial_end(0, TrialState.COMPLETED)
    assert not s.on_report(0, 3, (0.0, 99.0)).stops


def test_a_trial_pruned_by_rank_joins_no_later_rung():
    """A report past several rungs is recorded rung by rung until one prunes the trial; it used to be
    recorded at the later rungs too, where it filled the rung up to eta values and made it judge."""
    s = asha()
    s.on_report(0, 1, (0.9, 10.0))
    complete(s, 0, (0.95, 10.0))                          # rungs 1 and 3 hold trial 0
    s.on_report(1, 1, (0.5, 5.0))
    assert s.on_report(2, 9, (0.4, 20.0)).data["rung_step"] == 1    # jumped to step 9: pruned at rung 1
    assert not s.on_report(3, 1, (0.95, 3.0)).stops
    assert not s.on_report(3, 3, (0.3, 30.0)).stops      # rung 3 holds 2 vectors (fewer than eta): goes on


def test_an_infeasible_trial_is_not_on_the_front_that_prunes():
    """With constraints the sweep's front holds feasible trials only; a completed trial that broke one
    used to prune the trials it dominated at a rung ('dominated there by trial 0 of the front')."""
    s = asha()
    s.on_report(0, 1, (0.9, 10.0))
    complete(s, 0, (0.95, 10.0))
    s.exclude_from_front(0)                               # trial 0 broke a constraint
    s.on_report(1, 1, (0.5, 5.0))
    assert not s.on_report(2, 1, (0.4, 20.0)).stops      # rank 2, but no feasible front trial beat it there
