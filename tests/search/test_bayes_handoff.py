"""`bayes` past BAYES_GP_TRIALS (issue 18): TPE takes over the GP's study, so a long sweep's suggestions stay
cheap; the switch depends only on the trial number, so a resume reproduces it."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

import sweeplab.search.optuna as searchopt
from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal, TrialSnapshot, TrialState

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")

XY = {"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}}


def quadratic(params: dict[str, Any]) -> float:
    return (params["x"] - 0.3) ** 2 + (params["y"] - 0.7) ** 2


def test_bayes_hands_its_study_to_tpe_past_its_gp_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(searchopt, "BAYES_GP_TRIALS", 6)
    space = parse_parameters(XY)
    searcher = make_searcher("bayes", space, Goal.MINIMIZE, 2, prefetch=False, n_startup_trials=3)
    samplers, asked = [], []
    for number in range(9):
        params = searcher.ask()
        samplers.append(type(searcher.study.sampler))
        searcher.tell(number, params, TrialState.COMPLETED, quadratic(params))
        asked.append(params)
    assert all(issubclass(s, optuna.samplers.GPSampler) for s in samplers[:6])
    assert all(issubclass(s, optuna.samplers.TPESampler) for s in samplers[6:])
    assert len(searcher.study.get_trials(deepcopy=False)) == 9   # one study: TPE models the GP's trials

    resumed = make_searcher("bayes", space, Goal.MINIMIZE, 2, prefetch=False, n_startup_trials=3)
    resumed.replay([TrialSnapshot(k, p, TrialState.COMPLETED, value=quadratic(p)) for k, p in enumerate(asked[:8])])
    assert resumed.ask() == asked[8]


def test_gp_asked_for_by_name_stays_a_gp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(searchopt, "BAYES_GP_TRIALS", 2)
    searcher = make_searcher("gp", parse_parameters(XY), Goal.MINIMIZE, 2, prefetch=False, n_startup_trials=2)
    for number in range(4):
        params = searcher.ask()
        searcher.tell(number, params, TrialState.COMPLETED, quadratic(params))
    assert isinstance(searcher.study.sampler, optuna.samplers.GPSampler)


def test_bayes_past_its_gp_trials_models_a_conditional_space_as_tpe_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TPE that takes over a conditional space groups its parameters as `method: tpe` does (search.md:
    each set of parameters that occur together is modelled jointly). Ungrouped, it modelled only the
    parameters every trial has jointly, and each conditional one on its own."""
    monkeypatch.setattr(searchopt, "BAYES_GP_TRIALS", 4)
    space = parse_parameters({"x": {"min": 0.0, "max": 1.0}, "opt": {"values": ["sgd", "adam"], "when": {
        "sgd": {"m": {"min": 0.0, "max": 1.0}}, "adam": {"b": {"min": 0.5, "max": 1.0}}}}})
    searcher = make_searcher("bayes", space, Goal.MINIMIZE, 2, prefetch=False, n_startup_trials=3)
    for number in range(10):
        params = searcher.ask()
        assert set(params) == {"x", "opt", "m" if params["opt"] == "sgd" else "b"}
        searcher.tell(number, params, TrialState.COMPLETED, params["x"] + params.get("m", 0.5))
    sampler = searcher.study.sampler
    assert isinstance(sampler, optuna.samplers.TPESampler) and sampler._group
