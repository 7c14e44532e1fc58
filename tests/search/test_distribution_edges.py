"""Distribution edge cases through the searchers (audit of the search space): huge integer ranges, q_uniform
rounding at the ends of its range, zero probabilities."""

from __future__ import annotations

from typing import Any

import pytest

from sweeplab.search.optuna import GPSearcher
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal, TrialState

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


@needs_torch
def test_gp_models_huge_integer_ranges_without_listing_their_values() -> None:
    # Optuna's GP lists every value of an integer axis (numpy.arange over the range) on each ask: an int_uniform
    # over 0..2**62 ended the sweep with "array is too big" at the first modelled trial, 0..1e10 with a 74 GiB
    # MemoryError
    space = parse_parameters({
        "n": {"min": 0, "max": 2**62},
        "k": {"distribution": "q_log_uniform_values", "min": 1, "max": 10**15, "q": 1},
        "u": {"min": 0.0, "max": 1.0},
    })
    searcher = GPSearcher(space, Goal.MINIMIZE, 0, n_startup_trials=2)
    for number in range(4):
        params = searcher.ask()
        assert space.contains(params), params
        assert type(params["n"]) is int and type(params["k"]) is int
        searcher.tell(number, params, TrialState.COMPLETED, abs(params["n"] - 2**60) / 2**60 + params["u"])


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"min": 1, "max": 10, "q": 2}, (1, 5)),     # 0 = round(0.5) * 2 only where the draw is exactly min
        ({"min": 0, "max": 7, "q": 2}, (0, 3)),      # 8 = round(3.5) * 2 only where the draw is exactly max
        ({"min": 0, "max": 5, "q": 2}, (0, 2)),      # round(2.5) is 2: 4 is reached, 6 never
        ({"min": 0.1, "max": 1.0, "q": 0.5}, (0, 2)),  # 0 is reached (draws below 0.25), as in W&B's random
    ],
    ids=["min-on-a-tie", "max-on-a-tie", "max-tie-rounds-down", "below-min-reached"],
)
def test_optuna_searches_only_the_multiples_of_q_that_random_draws_reach(raw: dict[str, Any],
                                                                          expected: tuple[int, int]) -> None:
    # q_uniform is round(U(min, max) / q) * q: the TPE/GP axis held k = 0 for min 1 and q 2 (the value 0, below
    # min), which random search reaches only where U is exactly min, and TPE proposed it as often as any other
    from optuna.distributions import IntDistribution

    from sweeplab.search.optuna import encode_space

    space = parse_parameters({"x": {"distribution": "q_uniform", **raw}})
    axis = encode_space(space)["x"]
    assert axis.distribution == IntDistribution(*expected)
    reached = {space.params["x"].from_unit((i + 0.5) / 4000) for i in range(4000)}
    assert reached == {axis.decode(k) for k in range(expected[0], expected[1] + 1)}


def test_tpe_replays_a_forked_grid_sweeps_q_uniform_points() -> None:
    # a grid over q_uniform 1..10 by 2 runs 1, 3, 5, 7, 9 (W&B's arange); a sweep forked from it hands them to
    # TPE, whose axis holds the multiples of q: they are told as the nearest one, not refused by Optuna
    from sweeplab.search.optuna import TPESearcher
    from sweeplab.types import TrialSnapshot

    space = parse_parameters({"x": {"distribution": "q_uniform", "min": 1, "max": 10, "q": 2}})
    history = [TrialSnapshot(i, p, TrialState.COMPLETED, value=float(p["x"])) for i, p in enumerate(space.grid())]
    searcher = TPESearcher(space, Goal.MINIMIZE, 0, n_startup_trials=2)
    searcher.replay(history)
    told = [t.params["x"] for t in searcher.study.trials]   # k, for the value 2k: a nearest multiple of q
    assert told == [1, 2, 2, 4, 4]   # 1 -> 2 (0 is off the axis), 3 -> 4, 5 -> 4, 7 -> 8, 9 -> 8 (ties to even)
    assert space.contains(searcher.ask())


@pytest.mark.parametrize("method", ["tpe", pytest.param("gp", marks=needs_torch), "nsga2"])
def test_model_based_searchers_never_suggest_a_value_of_probability_zero(method: str) -> None:
    # random and sobol never draw a value whose probability is 0; the Optuna searchers' categorical held every
    # value, so TPE, the GP's design and NSGA-II proposed it as often as the others
    from sweeplab.search import make_searcher
    from sweeplab.types import TrialSnapshot

    space = parse_parameters({"w": {"values": ["a", "b", "c"], "probabilities": [0.5, 0.0, 0.5]},
                              "u": {"min": 0.0, "max": 1.0}})
    searcher = make_searcher(method, space, Goal.MINIMIZE, 0, prefetch=False, n_startup_trials=3) \
        if method != "nsga2" else make_searcher(method, space, Goal.MINIMIZE, 0, prefetch=False)
    # a trial from a grid (which ignores probabilities) of a forked sweep is history the model cannot hold
    searcher.replay([TrialSnapshot(0, {"w": "b", "u": 0.5}, TrialState.COMPLETED, value=0.0)])
    asked = []
    for number in range(1, 9):
        params = searcher.ask()
        asked.append(params["w"])
        searcher.tell(number, params, TrialState.COMPLETED, params["u"])
    searcher.close()
    assert "b" not in asked and set(asked) == {"a", "c"}


@pytest.mark.parametrize("raw", [
    {"distribution": "log_uniform", "min": 0.0001, "max": 1000},    # values written as exponents (warned)
    {"distribution": "inv_log_uniform", "min": -1000, "max": 0},
    {"distribution": "log_uniform", "min": -800, "max": 0},
    {"distribution": "q_log_uniform", "min": 0, "max": 800, "q": 1},
], ids=["log-1000", "inv-1000", "log-minus-800", "q-log-800"])
@pytest.mark.parametrize("method", ["random", "sobol", "tpe"])
def test_exponents_beyond_a_float_draw_floats(raw: dict[str, Any], method: str) -> None:
    # exp(1000) raised OverflowError at the first trial (random, sobol) or when TPE was built; exp(-800) is 0,
    # which TPE's log scale refused
    import math

    from sweeplab.search import make_searcher

    space = parse_parameters({"x": raw})
    options = {"n_startup_trials": 2} if method == "tpe" else {}
    searcher = make_searcher(method, space, Goal.MINIMIZE, 0, prefetch=False, **options)
    for number in range(4):
        params = searcher.ask()
        assert math.isfinite(params["x"]) and space.contains(params), params
        searcher.tell(number, params, TrialState.COMPLETED, math.log1p(params["x"]))
