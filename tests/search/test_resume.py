"""A searcher rebuilt from history (what `sweeplab resume` does) continues, it does not start over.

Trial k's suggestion depends on (seed, k, the history so far) only, for every method: a searcher that
replays trials 0..n-1 asks for trial n exactly what an uninterrupted searcher with the same history
asks, and never hands out a configuration it already tried.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from sweeplab.search import Searcher, make_searcher
from sweeplab.search.optuna import OptunaSearcher
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal, TrialSnapshot, TrialState

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")

CONTINUOUS = {"x": {"min": 0.0, "max": 1.0}, "lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1.0},
              "k": {"value": 3}}
DISCRETE = {"a": {"values": [1, 2, 3]}, "b": {"values": ["u", "v"]}, "n": {"min": 1, "max": 4}}
METHODS = ["random", "sobol", "tpe", pytest.param("gp", marks=needs_torch),
           pytest.param("bayes", marks=needs_torch)]


def objective(params: dict[str, Any]) -> float:
    if "x" not in params:                       # the grid's discrete space
        return float(params["a"] * params["n"])
    return (params["x"] - 0.3) ** 2 + abs(params["lr"] - 0.01)


def _make(method: str, **options: Any) -> Searcher:
    space = parse_parameters(DISCRETE if method == "grid" else CONTINUOUS)
    return make_searcher(method, space, Goal.MINIMIZE, 7, metric="loss", **options)


def _uninterrupted(method: str, n: int, outcome: Callable[[int, dict[str, Any]], tuple[TrialState, float | None]],
                   **options: Any) -> tuple[list[dict[str, Any]], list[TrialSnapshot]]:
    """Ask and tell n trials in turn; returns every suggestion and the history as the store would hold it."""
    searcher = _make(method, **options)
    asked, history = [], []
    try:
        for number in range(n):
            params = searcher.ask()
            assert params is not None
            state, value = outcome(number, params)
            searcher.tell(number, params, state, value)
            asked.append(params)
            history.append(TrialSnapshot(number, params, state, value=value))
    finally:
        searcher.close()
    return asked, history


def _completed(number: int, params: dict[str, Any]) -> tuple[TrialState, float | None]:
    return TrialState.COMPLETED, objective(params)


@pytest.mark.parametrize("method", ["grid", *METHODS])
@pytest.mark.parametrize("cut", [1, 4, 9])
def test_a_replayed_searcher_asks_what_the_uninterrupted_one_asks(method: str, cut: int) -> None:
    """Startup phase (cut < n_startup_trials) for every method: the continuation is exact."""
    n = 12
    asked, history = _uninterrupted(method, n, _completed, **({"n_startup_trials": 10} if method == "tpe" else {}))
    resumed = _make(method, **({"n_startup_trials": 10} if method == "tpe" else {}))
    try:
        resumed.replay(history[:cut])
        nxt = resumed.ask()
    finally:
        resumed.close()
    assert nxt == asked[cut]
    assert nxt not in asked[:cut]


@pytest.mark.parametrize("n_startup", [2, 10])
def test_tpe_after_a_replay_continues_the_uninterrupted_sequence_exactly(n_startup: int) -> None:
    """TPE is fully determined by (seed, trial number, history): resumed == uninterrupted, model phase too."""
    asked, history = _uninterrupted("tpe", 14, _completed, n_startup_trials=n_startup)
    for cut in (3, 8, 11):
        resumed = _make("tpe", n_startup_trials=n_startup)
        try:
            resumed.replay(history[:cut])
            got = []
            for number in range(cut, 14):
                params = resumed.ask()
                got.append(params)
                resumed.tell(number, params, TrialState.COMPLETED, objective(params))
        finally:
            resumed.close()
        assert got == asked[cut:], cut


@pytest.mark.parametrize("method", METHODS)
def test_three_resume_rounds_never_repeat_a_continuous_value(method: str) -> None:
    """Interrupted trials (running when the driver died) are replayed as running and requeued by the
    driver: the searcher must not hand their parameters out again, nor any earlier ones."""
    searcher = _make(method)
    history: list[TrialSnapshot] = []
    number = 0
    try:
        for round_ in range(4):
            for _ in range(4 + round_):
                params = searcher.ask()
                assert params is not None
                # the first two of each round were running when the driver was killed
                running = _ < 2 and round_ < 3
                state = TrialState.INTERRUPTED if running else TrialState.COMPLETED
                value = None if running else objective(params)
                if not running:
                    searcher.tell(number, params, state, value)
                history.append(TrialSnapshot(number, params, state, value=value))
                number += 1
            searcher.close()
            searcher = _make(method)           # the resumed driver's searcher
            searcher.replay(history)
    finally:
        searcher.close()
    configs = [tuple(sorted(s.params.items())) for s in history]
    assert len(set(configs)) == len(configs)
    for name, (lo, hi) in (("x", (0.0, 1.0)), ("lr", (1e-4, 1.0))):
        values = [s.params[name] for s in history]
        if method in ("gp", "bayes"):
            # the GP's acquisition optimum may lie on a bound of the range, uninterrupted too; inside the
            # range, no value may come back
            values = [v for v in values if not (math.isclose(v, lo) or math.isclose(v, hi))]
        assert len(set(values)) == len(values), (name, values)


def test_replay_twice_is_the_same_as_replay_once() -> None:
    """Two resumes with no trial in between (e.g. the second driver was killed at once) change nothing."""
    _, history = _uninterrupted("tpe", 6, _completed)
    once, twice = _make("tpe"), _make("tpe")
    try:
        once.replay(history)
        twice.replay(history[:3])
        twice.replay(history)
        assert once.ask() == twice.ask()
    finally:
        once.close()
        twice.close()


def test_the_prefetched_suggestion_lost_with_the_driver_is_asked_again_on_resume() -> None:
    """Prefetching computes trial n ahead; the driver is killed before creating it. The resumed searcher
    asks trial n (same number, same seed) again: no gap in the sequence and no repeat."""
    asked, history = _uninterrupted("tpe", 6, _completed)
    searcher = _make("tpe")
    try:
        searcher.replay(history[:5])             # trial 5 was prefetched, never created
        assert searcher.ask() == asked[5]
    finally:
        searcher.close()


def test_optuna_searcher_falls_back_to_a_fresh_sampler_when_it_cannot_reseed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without access to a sampler's generators (another Optuna version) each ask gets a fresh sampler
    seeded from (seed, trial number): slower for GP, the same guarantee."""
    import sweeplab.search.optuna as mod

    monkeypatch.setattr(mod, "_reseed", lambda sampler, seed, number: False)
    asked, history = _uninterrupted("tpe", 8, _completed, n_startup_trials=3)
    resumed = _make("tpe", n_startup_trials=3)
    try:
        resumed.replay(history[:5])
        assert resumed.ask() == asked[5]
    finally:
        resumed.close()
    assert len({p["x"] for p in asked}) == len(asked)


def test_the_study_numbers_its_trials_like_the_driver() -> None:
    """The per-trial seed uses the study's trial count, which must equal the driver's trial number."""
    _, history = _uninterrupted("tpe", 5, _completed)
    searcher = _make("tpe")
    try:
        searcher.replay(history)
        searcher.ask()
        inner = getattr(searcher, "inner", searcher)
        inner = getattr(inner, "model", inner)
        assert isinstance(inner, OptunaSearcher)
        assert [t.number for t in inner.study.get_trials(deepcopy=False)] == list(range(6))
    finally:
        searcher.close()


def test_grid_replay_continues_after_the_combinations_the_history_holds() -> None:
    space = parse_parameters(DISCRETE)
    plain = make_searcher("grid", space, Goal.MINIMIZE, 0)
    every = [plain.ask() for _ in range(24)]
    assert plain.ask() is None and plain.exhausted
    # a resume: combinations 0..9 done (9 was running when the driver died, and is requeued)
    resumed = make_searcher("grid", space, Goal.MINIMIZE, 0)
    resumed.replay([TrialSnapshot(k, every[k], TrialState.COMPLETED if k < 9 else TrialState.INTERRUPTED)
                    for k in range(10)])
    assert [resumed.ask() for _ in range(14)] == every[10:] and resumed.ask() is None


def test_a_forked_grid_runs_each_untried_combination_once_and_no_tried_one() -> None:
    """A fork's history starts with another sweep's trials: counting them would skip untried combinations
    at the start and repeat the tried ones later."""
    space = parse_parameters(DISCRETE)
    plain = make_searcher("grid", space, Goal.MINIMIZE, 0)
    every = [plain.ask() for _ in range(24)]
    forked = [every[20], every[3], {"a": 9, "b": "w", "n": 1}, every[7]]   # one is outside the new space
    searcher = make_searcher("grid", space, Goal.MINIMIZE, 0)
    searcher.replay([TrialSnapshot(k, p, TrialState.COMPLETED, value=1.0) for k, p in enumerate(forked)])
    rest = []
    while not searcher.exhausted:
        rest.append(searcher.ask())
    assert rest == [p for p in every if p not in forked]


def test_grid_resume_skips_tried_combinations_whose_floats_differ_by_rounding_noise() -> None:
    """A sweep resumed by another sweeplab may compute a float grid point with other rounding noise (numpy's
    arange gave 0.30000000000000004 for q_uniform 0..0.4 by 0.1; it is 0.3 now): the resumed grid ran every
    such combination again."""
    space = parse_parameters({"q": {"distribution": "q_uniform", "min": 0.0, "max": 0.4, "q": 0.1},
                              "v": {"values": [1e-3, 0.7, 1]}})
    every = list(space.grid())
    def noise(x: Any) -> Any:   # one unit in the last place, as float rounding leaves it (0 stays 0)
        return math.nextafter(x, math.inf) if isinstance(x, float) and x else x

    noisy = [{name: noise(value) for name, value in p.items()} for p in every]
    resumed = make_searcher("grid", space, Goal.MINIMIZE, 0)
    resumed.replay([TrialSnapshot(k, p, TrialState.COMPLETED, value=1.0) for k, p in enumerate(noisy[:7])])
    assert [resumed.ask() for _ in range(len(every) - 7)] == every[7:]
    assert resumed.ask() is None and resumed.exhausted


@pytest.mark.parametrize("impute", ["worst", "best"])
def test_tpe_with_impute_after_a_replay_continues_the_uninterrupted_sequence_exactly(impute: str) -> None:
    """A failed trial is imputed from the trials completed before it was told, live and on replay alike: a
    replay that imputed every failure from the whole history told the rebuilt study other values than the
    live one had (a failure before the worst result got that worse value), so TPE asked other trials after
    a resume of a sequential sweep."""
    def outcome(number: int, params: dict[str, Any]) -> tuple[TrialState, float | None]:
        if number % 3 == 1:
            return TrialState.FAILED, None
        return TrialState.COMPLETED, objective(params) * (1 + number)   # later trials worse: worst moves on

    asked, history = _uninterrupted("tpe", 16, outcome, n_startup_trials=2, impute=impute)
    for cut in (5, 9, 12):
        resumed = _make("tpe", n_startup_trials=2, impute=impute)
        try:
            resumed.replay(history[:cut])
            got = []
            for number in range(cut, 16):
                params = resumed.ask()
                got.append(params)
                state, value = outcome(number, params)
                resumed.tell(number, params, state, value)
        finally:
            resumed.close()
        assert got == asked[cut:], cut
