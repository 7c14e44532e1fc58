"""Method-specific behaviour: grid exhaustion, Sobol coverage, Optuna mapping and replay, prefetching."""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState as OptunaState

from sweeplab.errors import MissingExtraError, SpecError
from sweeplab.search import GridSearcher, Prefetching, RandomSearcher, SobolSearcher, make_searcher
from sweeplab.search.deferred import Deferred
from sweeplab.search.optuna import GPSearcher, TPESearcher, encode_space
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal, TrialSnapshot, TrialState

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


def quadratic(params: dict[str, Any]) -> float:
    return (params["x"] - 0.3) ** 2 + (params["y"] - 0.7) ** 2


XY = {"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}}


def test_grid_asks_every_combination_once_then_none() -> None:
    space = parse_parameters({"a": {"values": [1, 2, 3]}, "b": {"min": 0, "max": 1}, "k": {"value": "c"}})
    searcher = GridSearcher(space, Goal.MINIMIZE, 0)
    asked = []
    while not searcher.exhausted:
        asked.append(searcher.ask())
    assert asked == list(space.grid()) and len(asked) == 6
    assert searcher.ask() is None and searcher.ask() is None


def test_grid_of_a_continuous_space_is_a_spec_error() -> None:
    with pytest.raises(SpecError):
        make_searcher("grid", parse_parameters(XY), Goal.MINIMIZE, 0)


def test_random_trial_k_depends_only_on_seed_and_k() -> None:
    space = parse_parameters(XY)
    a = RandomSearcher(space, Goal.MINIMIZE, 5)
    b = RandomSearcher(space, Goal.MINIMIZE, 5)
    b.replay([TrialSnapshot(i, {}, TrialState.RUNNING) for i in range(3)])
    first = [a.ask() for _ in range(4)]
    assert b.ask() == first[3] == a.point(3)


def test_unseeded_searchers_pick_a_seed_they_can_report() -> None:
    searcher = RandomSearcher(parse_parameters(XY), Goal.MINIMIZE, None)
    assert isinstance(searcher.seed, int)
    again = RandomSearcher(parse_parameters(XY), Goal.MINIMIZE, searcher.seed)
    assert searcher.ask() == again.ask()


def test_sobol_points_cover_the_square_evenly() -> None:
    searcher = SobolSearcher(parse_parameters(XY), Goal.MINIMIZE, 0)
    points = np.array([[p["x"], p["y"]] for p in (searcher.ask() for _ in range(64))])
    counts, _, _ = np.histogram2d(points[:, 0], points[:, 1], bins=4, range=[[0, 1], [0, 1]])
    assert (counts == 4).all()  # 64 scrambled Sobol points: exactly 4 in each of the 16 cells
    assert searcher.point(10) == SobolSearcher(parse_parameters(XY), Goal.MINIMIZE, 0).point(10)


def test_sobol_of_constants_only_repeats_them() -> None:
    searcher = SobolSearcher(parse_parameters({"k": {"value": 1}}), Goal.MINIMIZE, 0)
    assert searcher.ask() == searcher.ask() == {"k": 1}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"min": 0.0, "max": 2.0}, FloatDistribution(0.0, 2.0)),
        ({"min": 1, "max": 9}, IntDistribution(1, 9)),
        ({"distribution": "log_uniform_values", "min": 1e-4, "max": 1.0}, FloatDistribution(1e-4, 1.0, log=True)),
        ({"distribution": "log_uniform", "min": 0, "max": 1}, FloatDistribution(1.0, math.e, log=True)),
        ({"distribution": "q_uniform", "min": 0, "max": 1, "q": 0.25}, IntDistribution(0, 4)),
        ({"distribution": "q_log_uniform_values", "min": 16, "max": 256, "q": 16}, IntDistribution(1, 16, log=True)),
        ({"values": ["a", [1], None]}, CategoricalDistribution((0, 1, 2))),
        ({"distribution": "normal"}, FloatDistribution(0.0, 1.0)),
        ({"distribution": "q_beta", "q": 0.1}, FloatDistribution(0.0, 1.0)),
        ({"distribution": "q_log_uniform_values", "min": 0.01, "max": 1, "q": 0.1}, FloatDistribution(0.0, 1.0)),
    ],
    ids=["uniform", "int", "log-values", "log-exponents", "q_uniform", "q_log_values", "categorical",
         "normal-unit", "q_beta-unit", "q_log-reaching-0-unit"],
)
def test_wandb_distributions_map_to_optuna_distributions(raw: dict[str, Any], expected: Any) -> None:
    axis = encode_space(parse_parameters({"p": raw}))["p"]
    assert axis.distribution == expected


def test_optuna_suggestions_decode_to_the_spaces_values() -> None:
    space = parse_parameters({
        "q": {"distribution": "q_uniform", "min": 0, "max": 1, "q": 0.1},
        "n": {"distribution": "q_normal", "mu": 5, "sigma": 2, "q": 1},
        "c": {"values": [{"a": 1}, [1, 2], True, 1]},
        "k": {"value": [3]},
    })
    searcher = TPESearcher(space, Goal.MINIMIZE, 0, n_startup_trials=3)
    for number in range(8):
        params = searcher.ask()
        assert space.contains(params), params
        assert params["k"] == [3] and type(params["n"]) is int
        searcher.tell(number, params, TrialState.COMPLETED, float(params["n"]))


def _history() -> list[TrialSnapshot]:
    return [
        TrialSnapshot(0, {"x": 0.1, "y": 0.2}, TrialState.COMPLETED, value=0.5),
        TrialSnapshot(1, {"x": 0.4, "y": 0.9}, TrialState.PRUNED,
                      history={"loss": ((0, 3.0), (1, 2.0)), "acc": ((0, 0.1),)}),
        TrialSnapshot(2, {"x": 0.5, "y": 0.5}, TrialState.FAILED),
        TrialSnapshot(3, {"x": 0.6, "y": 0.6}, TrialState.COMPLETED, value=math.nan),
        TrialSnapshot(4, {"x": 0.7, "y": 0.1}, TrialState.RUNNING),
        TrialSnapshot(5, {"x": 9.0, "y": 0.1}, TrialState.COMPLETED, value=1.0),  # outside the space
    ]


def test_tpe_replay_rebuilds_the_study_from_history() -> None:
    searcher = TPESearcher(parse_parameters(XY), Goal.MINIMIZE, 0, metric="loss")
    searcher.ask()  # state from before the restart is dropped by replay
    searcher.replay(_history())
    trials = searcher.study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [
        OptunaState.COMPLETE, OptunaState.PRUNED, OptunaState.FAIL, OptunaState.FAIL, OptunaState.RUNNING,
    ]
    assert trials[0].value == 0.5 and trials[0].params == {"x": 0.1, "y": 0.2}
    assert trials[1].intermediate_values == {0: 3.0, 1: 2.0} and trials[1].value == 2.0
    # the running trial can still be told, with the intermediate values it reached
    searcher.tell(4, {"x": 0.7, "y": 0.1}, TrialState.STOPPED_BY_RULE, None, {0: 4.0, 2: 1.5})
    told = searcher.study.get_trials(deepcopy=False)[4]
    assert told.state == OptunaState.PRUNED and told.intermediate_values == {0: 4.0, 2: 1.5}
    searcher.tell(0, {"x": 0.1, "y": 0.2}, TrialState.COMPLETED, 0.5)  # replayed terminal: ignored
    assert len(searcher.study.get_trials(deepcopy=False)) == 5


def test_replay_without_a_metric_option_reads_a_single_series() -> None:
    searcher = TPESearcher(parse_parameters(XY), Goal.MINIMIZE, 0)
    searcher.replay([
        TrialSnapshot(0, {"x": 0.4, "y": 0.9}, TrialState.PRUNED, history={"val": ((0, 3.0), (2, 1.0))}),
        TrialSnapshot(1, {"x": 0.4, "y": 0.8}, TrialState.PRUNED, history={"val": ((0, 3.0),), "b": ((0, 1),)}),
    ])
    first, second = searcher.study.get_trials(deepcopy=False)
    assert first.state == OptunaState.PRUNED and first.intermediate_values == {0: 3.0, 2: 1.0}
    assert second.state == OptunaState.FAIL  # ambiguous: which series is the objective?


def test_optuna_tell_maps_outcomes_to_optuna_states() -> None:
    searcher = TPESearcher(parse_parameters(XY), Goal.MAXIMIZE, 0)
    outcomes = [
        (TrialState.COMPLETED, 2.0, None, OptunaState.COMPLETE),
        (TrialState.COMPLETED, math.inf, None, OptunaState.FAIL),
        (TrialState.COMPLETED, None, None, OptunaState.FAIL),
        (TrialState.PRUNED, None, {1: 0.5}, OptunaState.PRUNED),
        (TrialState.STOPPED, None, None, OptunaState.FAIL),
        (TrialState.FAILED, None, None, OptunaState.FAIL),
    ]
    for number, (state, value, steps, _) in enumerate(outcomes):
        searcher.tell(number, searcher.ask(), state, value, steps)
    trials = searcher.study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [o[3] for o in outcomes]
    assert searcher.study.direction.name == "MAXIMIZE"


@pytest.mark.parametrize("method", ["tpe", pytest.param("gp", marks=needs_torch)])
def test_bayesian_searchers_beat_their_own_random_start(method: str) -> None:
    searcher = make_searcher(method, parse_parameters(XY), Goal.MINIMIZE, 0, n_startup_trials=5,
                             prefetch=False)
    values = []
    for number in range(14):
        params = searcher.ask()
        values.append(quadratic(params))
        searcher.tell(number, params, TrialState.COMPLETED, values[-1])
    assert min(values[5:]) < min(values[:5])


@needs_torch
def test_prefetching_returns_the_plain_sequence_when_used_sequentially() -> None:
    space = parse_parameters(XY)
    plain = GPSearcher(space, Goal.MINIMIZE, 1, n_startup_trials=3)
    wrapped = Prefetching(GPSearcher(space, Goal.MINIMIZE, 1, n_startup_trials=3))
    try:
        for number in range(6):
            a, b = plain.ask(), wrapped.ask()
            assert a == b
            plain.tell(number, a, TrialState.COMPLETED, quadratic(a))
            wrapped.tell(number, b, TrialState.COMPLETED, quadratic(b))
    finally:
        wrapped.close()


def test_prefetching_serves_parallel_asks_and_replays() -> None:
    space = parse_parameters(XY)
    searcher = Prefetching(TPESearcher(space, Goal.MINIMIZE, 0))
    try:
        batch = [searcher.ask() for _ in range(4)]  # more asks than prefetched suggestions
        assert len({repr(p) for p in batch}) == 4
        searcher.replay([TrialSnapshot(i, p, TrialState.COMPLETED, value=quadratic(p)) for i, p in enumerate(batch)])
        nxt = searcher.ask()  # waits for the prefetch started by replay
        states = [t.state for t in searcher.inner.study.get_trials(deepcopy=False)]
        assert states == [OptunaState.COMPLETE] * 4 + [OptunaState.RUNNING]  # the stale prefetch was dropped
        assert space.contains(nxt)
        assert not searcher.exhausted
    finally:
        searcher.close()
    assert space.contains(searcher.ask())  # still usable after close, synchronously


def test_prefetching_reports_exhaustion_and_errors() -> None:
    grid = Prefetching(GridSearcher(parse_parameters({"a": {"values": [1, 2]}}), Goal.MINIMIZE, 0))
    assert [grid.ask(), grid.ask()] == [{"a": 1}, {"a": 2}]
    grid.tell(1, {"a": 2}, TrialState.COMPLETED, 1.0)
    assert grid.exhausted and grid.ask() is None
    grid.close()

    class Broken(RandomSearcher):
        def point(self, k: int) -> dict[str, Any]:
            raise RuntimeError("boom")

    broken = Prefetching(Broken(parse_parameters(XY), Goal.MINIMIZE, 0))
    with pytest.raises(RuntimeError, match="boom"):
        broken.ask()
    broken.close()


def test_make_searcher_wraps_bayesian_methods_and_validates_input() -> None:
    space = parse_parameters(XY)
    searcher = make_searcher("tpe", space, Goal.MINIMIZE, 0)
    assert isinstance(searcher, Prefetching) and isinstance(searcher.inner, Deferred)
    assert isinstance(searcher.inner.model, TPESearcher)
    searcher.close()
    assert isinstance(make_searcher("random", space, Goal.MINIMIZE, 0), RandomSearcher)
    with pytest.raises(SpecError, match="did you mean 'sobol'"):
        make_searcher("sobel", space, Goal.MINIMIZE, 0)
    with pytest.raises(SpecError, match="unknown option"):
        make_searcher("random", space, Goal.MINIMIZE, 0, n_startup_trials=3)
    with pytest.raises(SpecError, match="wrong type"):
        make_searcher("tpe", space, Goal.MINIMIZE, 0, n_startup_trials="3")
    with pytest.raises(SpecError, match="seed"):
        make_searcher("random", space, Goal.MINIMIZE, -1)


def test_bayes_without_torch_runs_tpe_and_says_how_to_get_gp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # what a minimal install looks like to importlib
    space = parse_parameters(XY)
    searcher = make_searcher("bayes", space, Goal.MINIMIZE, 0, deterministic_objective=True)
    try:
        assert isinstance(searcher.inner, TPESearcher)
        assert len(searcher.notes) == 1 and "pip install 'sweeplab[bayes]'" in searcher.notes[0]
    finally:
        searcher.close()
    with pytest.raises(MissingExtraError, match=r"sweeplab\[bayes\]"):
        make_searcher("gp", space, Goal.MINIMIZE, 0)
