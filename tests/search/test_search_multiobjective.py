"""Searchers with several objectives and constraints: Optuna sees every direction and every trial's
constraint violations, live and after `replay`, and a replayed searcher asks what the uninterrupted one would."""

from __future__ import annotations

import pytest

from sweeplab.search import MULTI_OBJECTIVE_BAYES, make_searcher
from sweeplab.space import parse_parameters
from sweeplab.types import Goal, TrialSnapshot, TrialState

pytest.importorskip("optuna")

SPACE = parse_parameters({"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}})
GOALS = ("maximize", "minimize")


def outcome(p):
    return (p["x"], p["y"] + p["x"] ** 2), (p["y"] - 0.5,)


def run(method, n, **options):
    s = make_searcher(method, SPACE, Goal.MAXIMIZE, 7, prefetch=False, goals=GOALS, constraints=1, **options)
    history = []
    for k in range(n):
        p = s.ask()
        values, cons = outcome(p)
        state = TrialState.PRUNED if k == 3 else TrialState.COMPLETED
        s.tell(k, p, state, values if state is TrialState.COMPLETED else None, None, constraints=cons)
        history.append(TrialSnapshot(number=k, params=p, state=state, values=values if k != 3 else None,
                                     constraints=cons))
    return s, history


@pytest.mark.parametrize("method", ["tpe", "nsga2"])
def test_directions_values_and_constraints_reach_optuna(method):
    s, _ = run(method, 14, **({"population_size": 4} if method == "nsga2" else {}))
    study = s.inner.study if hasattr(s, "inner") else s.study
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    trials = study.get_trials(deepcopy=False)
    assert trials[3].state.name == "PRUNED" and trials[3].values is None
    done = [t for i, t in enumerate(trials) if i != 3]
    assert all(t.state.name == "COMPLETE" and len(t.values) == 2 for t in done)
    assert all(t.constraints == {"0": pytest.approx(t.params["y"] - 0.5)} for t in done)


@pytest.mark.parametrize("method", ["tpe", "nsga2"])
def test_replay_asks_what_the_uninterrupted_searcher_asks(method):
    options = {"population_size": 4} if method == "nsga2" else {}
    s, history = run(method, 14, **options)
    fresh = make_searcher(method, SPACE, Goal.MAXIMIZE, 7, prefetch=False, goals=GOALS, constraints=1, **options)
    fresh.replay(history)
    study = fresh.study
    assert [t.constraints for t in study.get_trials(deepcopy=False)] == \
        [t.constraints for t in s.study.get_trials(deepcopy=False)]
    assert [fresh.ask() for _ in range(3)] == [s.ask() for _ in range(3)]


def test_a_single_objective_sweep_with_constraints_tells_them_too():
    s = make_searcher("tpe", SPACE, Goal.MINIMIZE, 1, prefetch=False, constraints=1)
    p = s.ask()
    s.tell(0, p, TrialState.COMPLETED, 0.5, None, constraints=(2.0,))
    assert s.study.trials[0].constraints == {"0": 2.0} and s.study.trials[0].value == 0.5


def test_a_completed_trial_without_every_value_fails():
    s = make_searcher("tpe", SPACE, Goal.MAXIMIZE, 1, prefetch=False, goals=GOALS)
    p = s.ask()
    s.tell(0, p, TrialState.COMPLETED, (0.5, None), None)
    assert s.study.trials[0].state.name == "FAIL"


def test_bayes_with_several_objectives_uses_the_benchmarked_searcher_and_says_so():
    s = make_searcher("bayes", SPACE, Goal.MAXIMIZE, 1, prefetch=False, goals=GOALS)
    assert s.method == MULTI_OBJECTIVE_BAYES
    assert s.options["multivariate"] is False
    assert any("several objectives" in n for n in s.notes)


@pytest.mark.parametrize("method", ["random", "sobol"])
def test_plain_searchers_accept_several_objectives_and_constraints(method):
    s = make_searcher(method, SPACE, Goal.MAXIMIZE, 1, goals=GOALS, constraints=1)
    p = s.ask()
    s.tell(0, p, TrialState.COMPLETED, (0.1, 0.2), None, constraints=(0.0,))
    assert s.ask() != p


@pytest.mark.parametrize("seed", range(4))
def test_nsga2_resumed_within_a_generation_asks_what_the_uninterrupted_one_asks(seed):
    """Optuna's NSGA-II selects a generation's parents at its first ask and caches their ids: that first ask
    drew from the parents in selection order, later ones from the cache, in trial order. A resume in the
    middle of a generation selected them again, so its next ask drew from the selection order where the
    uninterrupted sweep drew from the cached order: another child. Every ask now draws from the cached
    order, the first one of a generation included."""
    space = parse_parameters({"x": {"min": 0.0, "max": 1.0}, "y": {"min": -2.0, "max": 5.0}})

    def searcher():
        return make_searcher("nsga2", space, Goal.MINIMIZE, seed, prefetch=False, goals=("minimize", "maximize"),
                             population_size=4)

    live, history = searcher(), []
    for k in range(14):
        p = live.ask()
        if history:
            resumed = searcher()
            resumed.replay(history)
            assert resumed.ask() == p, k
        values = (p["x"], p["y"] * p["x"])
        live.tell(k, p, TrialState.COMPLETED, values)
        history.append(TrialSnapshot(k, p, TrialState.COMPLETED, values=values))
