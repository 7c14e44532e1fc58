"""TPE in long sweeps (issue 18): its model reads the best trials, the latest TPE_WINDOW others and every
running one, so a suggestion's cost stops growing with the history; resumes still reproduce it."""

from __future__ import annotations

import random
from typing import Any

import optuna
import pytest

import sweeplab.search.optuna as searchopt
from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.types import Goal, TrialSnapshot, TrialState

XY = {"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}}


def quadratic(params: dict[str, Any]) -> float:
    return (params["x"] - 0.3) ** 2 + (params["y"] - 0.7) ** 2


@pytest.fixture
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(searchopt, "TPE_WINDOW", 12)
    monkeypatch.setattr(searchopt, "_TPE_KEEP_BEST", 4)


def _reference(trials: list[Any], minimize: bool) -> list[int]:
    """What the view must hold, computed from scratch: best 4 complete, latest 12 finished, all running."""
    running = optuna.trial.TrialState.RUNNING
    finished = [t for t in trials if t.state != running]
    complete = [t for t in finished if t.state == optuna.trial.TrialState.COMPLETE]
    best = sorted(complete, key=lambda t: ((t.value if minimize else -t.value), t.number))[:4]
    keep = {t.number for t in best} | {t.number for t in finished[-12:]}
    keep |= {t.number for t in trials if t.state == running}
    return sorted(keep)


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_the_window_holds_the_best_the_latest_and_the_running_trials(small_window: None, direction: str) -> None:
    rng = random.Random(1)
    study = optuna.create_study(direction=direction)
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    cache = searchopt._BestCache()
    running: list[Any] = []
    for _ in range(120):   # trials start and end out of order; some fail, some are pruned
        running.append(study.ask(dist))
        while running and rng.random() < 0.6:
            trial = running.pop(rng.randrange(len(running)))
            roll = rng.random()
            if roll < 0.1:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            elif roll < 0.2:
                trial.report(rng.random(), 1)
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, rng.random())
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.RUNNING)
        view = searchopt._WindowView(study, searchopt.TPE_WINDOW, cache)._get_trials(deepcopy=False, states=states)
        every = study._get_trials(deepcopy=False, states=states)
        expected = [t.number for t in every] if len(every) <= 16 else _reference(every, direction == "minimize")
        assert [t.number for t in view] == expected


def test_a_windowed_tpe_resumes_where_the_uninterrupted_one_was(small_window: None) -> None:
    space = parse_parameters(XY)
    plain = make_searcher("tpe", space, Goal.MINIMIZE, 5, prefetch=False, n_startup_trials=3)
    asked = []
    for number in range(40):   # well past the window: the model reads a part of the history
        params = plain.ask()
        plain.tell(number, params, TrialState.COMPLETED, quadratic(params))
        asked.append(params)
    nxt = plain.ask()
    resumed = make_searcher("tpe", space, Goal.MINIMIZE, 5, prefetch=False, n_startup_trials=3)
    resumed.replay([TrialSnapshot(k, p, TrialState.COMPLETED, value=quadratic(p)) for k, p in enumerate(asked)])
    assert resumed.ask() == nxt


def test_the_window_changes_what_tpe_suggests_only_past_its_size(small_window: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Below TPE_WINDOW + the best kept, the windowed sampler is Optuna's TPE, draw for draw."""
    space = parse_parameters(XY)
    windowed = make_searcher("tpe", space, Goal.MINIMIZE, 5, prefetch=False, n_startup_trials=3).model
    monkeypatch.setattr(searchopt, "TPE_WINDOW", 10_000)
    full = make_searcher("tpe", space, Goal.MINIMIZE, 5, prefetch=False, n_startup_trials=3).model
    monkeypatch.setattr(searchopt, "TPE_WINDOW", 12)
    a = b = None
    for number in range(30):
        a, b = windowed.ask(), full.ask()
        if number < 16:
            assert a == b
        windowed.tell(number, a, TrialState.COMPLETED, quadratic(a))
        full.tell(number, b, TrialState.COMPLETED, quadratic(b))
    assert a != b
