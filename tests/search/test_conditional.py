"""Searchers over conditional spaces: only valid combinations, never an inactive parameter, and the
model-based ones ask define-by-run so that Optuna sees which parameters each trial has."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sweeplab.search import DEFINE_BY_RUN, METHODS, GridSearcher, make_searcher
from sweeplab.search.optuna import TPESearcher
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import (
    CONDITIONAL_GRID_SIZE,
    CONDITIONAL_PARAMETERS,
    HAS_TORCH,
    conditional_objective,
)
from sweeplab.types import Goal, TrialSnapshot, TrialState

OPTIMIZER: dict[str, Any] = {
    "lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1.0},
    "optimizer": {
        "values": ["adam", "sgd"],
        "when": {"sgd": {"momentum": {"min": 0.0, "max": 0.99}}, "adam": {"beta1": {"min": 0.8, "max": 0.999}}},
    },
}
ACTIVE = {"sgd": {"lr", "optimizer", "momentum"}, "adam": {"lr", "optimizer", "beta1"}}


def loss(params: dict[str, Any]) -> float:
    """sgd with momentum near 0.9 and lr near 0.1 is best; adam is 0.5 worse."""
    base = (params["lr"] - 0.1) ** 2
    if params["optimizer"] == "sgd":
        return base + abs(params["momentum"] - 0.9)
    return base + 0.5 + abs(params["beta1"] - 0.9)


def drive(searcher: Any, steps: int, objective: Any = loss) -> list[dict[str, Any]]:
    asked = []
    for number in range(steps):
        params = searcher.ask()
        if params is None:
            break
        asked.append(params)
        searcher.tell(number, params, TrialState.COMPLETED, objective(params))
    return asked


@pytest.mark.parametrize("method", [m for m in METHODS if m != "grid" and m not in DEFINE_BY_RUN])
def test_every_method_suggests_exactly_the_active_parameters(method: str) -> None:
    if method in ("gp", "bayes") and not HAS_TORCH:
        pytest.skip("torch is not installed")
    space = parse_parameters(OPTIMIZER)
    slow = method in ("gp", "bayes")   # a GP suggestion costs ~0.5 s here: fewer, with the model from trial 6
    options = {"n_startup_trials": 6} if slow else {}
    steps = 12 if slow else 24
    searcher = make_searcher(method, space, Goal.MINIMIZE, 0, prefetch=False, **options)
    asked = drive(searcher, steps)
    assert len(asked) == steps
    for params in asked:
        assert set(params) == ACTIVE[params["optimizer"]], params
        assert None not in params.values()
        assert space.contains(params)
    assert {p["optimizer"] for p in asked} == {"adam", "sgd"}


def test_grid_enumerates_the_tree_exactly_once_each() -> None:
    space = parse_parameters(CONDITIONAL_PARAMETERS | {"depth": {"value": 2}})
    searcher = GridSearcher(space, Goal.MINIMIZE, 0)
    asked = []
    while not searcher.exhausted:
        asked.append(searcher.ask())
    assert len(asked) == CONDITIONAL_GRID_SIZE // 3 == searcher.size   # 19 optimizer branches x 5 model ones
    assert len({json.dumps(p, sort_keys=True) for p in asked}) == len(asked)
    assert all(space.contains(p) for p in asked)
    assert searcher.ask() is None


def test_grid_replay_skips_the_tried_combinations_of_a_conditional_space() -> None:
    space = parse_parameters(CONDITIONAL_PARAMETERS)
    whole = list(space.grid())
    searcher = GridSearcher(space, Goal.MINIMIZE, 0)
    history = [TrialSnapshot(number=i, params=p, state=TrialState.COMPLETED, value=1.0)
               for i, p in enumerate(whole[:3] + whole[7:9])]
    searcher.replay(history)
    rest = []
    while not searcher.exhausted:
        rest.append(searcher.ask())
    assert rest == whole[3:7] + whole[9:]


def test_tpe_asks_define_by_run_with_grouped_multivariate_tpe() -> None:
    space = parse_parameters(OPTIMIZER)
    searcher = TPESearcher(space, Goal.MINIMIZE, 0, n_startup_trials=8)
    assert searcher.study.sampler._group is True and searcher.study.sampler._multivariate is True
    asked = drive(searcher, 40)
    for trial, params in zip(searcher.study.trials, asked):
        assert set(trial.distributions) == set(params)   # only the active ones
        assert set(trial.params) == set(params)
    # the model phase learns the structure: the better branch (sgd) and its momentum near 0.9
    late = asked[20:]
    assert sum(p["optimizer"] == "sgd" for p in late) >= 15, [p["optimizer"] for p in late]
    assert min(abs(p["momentum"] - 0.9) for p in late if "momentum" in p) < 0.05


def test_an_unconditional_space_keeps_tpe_ungrouped() -> None:
    space = parse_parameters({"x": {"min": 0.0, "max": 1.0}, "y": {"values": [1, 2]}})
    assert TPESearcher(space, Goal.MINIMIZE, 0).study.sampler._group is False


@pytest.mark.parametrize("method", ["tpe", "gp"])
def test_replayed_conditional_history_reaches_the_model_with_only_active_parameters(method: str) -> None:
    if method == "gp" and not HAS_TORCH:
        pytest.skip("torch is not installed")
    space = parse_parameters(CONDITIONAL_PARAMETERS)
    first = make_searcher(method, space, Goal.MINIMIZE, 5, prefetch=False)
    asked = drive(first, 12, conditional_objective)
    history = [TrialSnapshot(number=i, params=p, state=TrialState.COMPLETED, value=conditional_objective(p))
               for i, p in enumerate(asked)]
    history.append(TrialSnapshot(number=12, params=asked[0], state=TrialState.RUNNING))   # unfinished
    resumed = make_searcher(method, space, Goal.MINIMIZE, 5, prefetch=False)
    resumed.replay(history)
    trials = resumed.study.trials
    assert len(trials) == 13
    for trial, snap in zip(trials, history):
        assert set(trial.params) == set(snap.params)
    nxt = resumed.ask()
    assert space.contains(nxt)


@pytest.mark.parametrize("seed", range(6))
def test_a_resumed_conditional_tpe_asks_what_the_uninterrupted_one_asked(seed: int) -> None:
    """Grouped TPE splits the space into the groups of parameters that occur together, and Optuna kept that
    split across asks, folding the trials again at each one: its order (in which TPE samples the groups,
    drawing from one generator) then depended on when each trial had completed, not only on the history. A
    first trial that completed late (a monitor's stop, imputed once a trial completes, after a pruned one;
    parallel trials) ordered the groups otherwise live than on a resume, which then asked other trials."""
    space = parse_parameters(OPTIMIZER)

    def searcher() -> Any:
        return make_searcher("tpe", space, Goal.MINIMIZE, seed, prefetch=False, n_startup_trials=2, metric="loss")

    live, history = searcher(), []
    for number in range(12):
        params = live.ask()
        if history:
            resumed = searcher()
            resumed.replay(history)
            assert resumed.ask() == params, number
        if number == 0:   # stopped by the nan monitor: told as the worst value once a trial completes
            live.tell(number, params, TrialState.STOPPED_BY_RULE, None, {1: float("nan")})
            history.append(TrialSnapshot(number, params, TrialState.STOPPED_BY_RULE, {"loss": ((1, float("nan")),)}))
        elif number == 1:   # pruned at its first rung: modelled at once
            live.tell(number, params, TrialState.PRUNED, None, {1: loss(params) + 1})
            history.append(TrialSnapshot(number, params, TrialState.PRUNED, {"loss": ((1, loss(params) + 1),)}))
        else:
            live.tell(number, params, TrialState.COMPLETED, loss(params))
            history.append(TrialSnapshot(number, params, TrialState.COMPLETED, value=loss(params)))
