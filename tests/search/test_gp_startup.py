"""The GP's and TPE's startup trials are a space-filling design (issue 18): trial k of a `gp`/`bayes`/`tpe`
sweep's random phase is point k of a scrambled Sobol sequence seeded by the sweep's seed, not an independent
uniform draw. With k workers the first k asks are one batch, and a batch of Sobol points covers every axis
evenly."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal, TrialSnapshot, TrialState

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")

SPACE = {"x": {"min": 0.0, "max": 1.0}, "lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1.0},
         "depth": {"min": 1, "max": 8}, "opt": {"values": ["sgd", "adam", "rmsprop", "lion"]}}


def _searcher(seed: int = 0, method: str = "bayes") -> Any:
    return make_searcher(method, parse_parameters(SPACE), Goal.MINIMIZE, seed, prefetch=False)


def _strata(values: list[float], lo: float, hi: float, n: int) -> set[int]:
    return {min(int((v - lo) / (hi - lo) * n), n - 1) for v in values}


@pytest.mark.parametrize("method", ["bayes", "tpe"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_first_batch_of_startup_asks_covers_every_axis_evenly(seed: int, method: str) -> None:
    """8 workers' first asks: each eighth of each continuous axis holds one point, each integer value of 8
    one, each of 4 categories two (a Sobol net's strata). Independent uniform draws leave strata empty."""
    searcher = _searcher(seed, method)
    batch = [searcher.ask() for _ in range(8)]   # none told: all eight run at once
    assert _strata([p["x"] for p in batch], 0.0, 1.0, 8) == set(range(8))
    assert _strata([math.log(p["lr"]) for p in batch], math.log(1e-4), 0.0, 8) == set(range(8))
    assert sorted(p["depth"] for p in batch) == list(range(1, 9))
    assert sorted(p["opt"] for p in batch) == sorted(["sgd", "adam", "rmsprop", "lion"] * 2)


@pytest.mark.parametrize("method", ["bayes", "tpe"])
def test_a_resumed_startup_continues_the_design_where_the_uninterrupted_one_is(method: str) -> None:
    """The design point is the driver's trial number's: a withdrawn suggestion (Prefetching's stale one) is
    asked again with the same point, and a sweep resumed with 4 trials running asks the design's points
    4-7, as the uninterrupted one does: together the 8 cover every eighth of each axis."""
    live = _searcher(5, method)
    first = [live.ask() for _ in range(3)]
    stale = live.ask()
    assert live.withdraw(stale)
    first.append(live.ask())
    assert first[-1] == stale
    uninterrupted = [live.ask() for _ in range(4)]
    resumed = _searcher(5, method)
    resumed.replay([TrialSnapshot(k, p, TrialState.RUNNING) for k, p in enumerate(first)])
    rest = [resumed.ask() for _ in range(4)]
    assert rest == uninterrupted
    assert _strata([p["x"] for p in first + rest], 0.0, 1.0, 8) == set(range(8))
    assert sorted(p["depth"] for p in first + rest) == list(range(1, 9))


def test_tpe_still_in_its_startup_once_built_asks_the_design_point_of_the_trial_number() -> None:
    """TPE counts running, completed and pruned trials towards its startup, not failed ones: after ten failed
    startup trials the model (built by then) is still in its startup, and asks trial 10's design point, as
    the stand-in would have (deferred.DesignPoints), not a draw of Optuna's random sampler."""
    from sweeplab.search.deferred import DesignPoints

    space = parse_parameters(SPACE)
    searcher = make_searcher("tpe", space, Goal.MINIMIZE, 3, prefetch=False)
    for number in range(10):
        searcher.tell(number, searcher.ask(), TrialState.FAILED, None)
    assert searcher.ask() == DesignPoints(space, Goal.MINIMIZE, 3).point(10)
    searcher.close()


def test_tpe_startup_honours_probabilities_of_values() -> None:
    """A parameter whose values have `probabilities` keeps TPE's random startup (the prior drawn as given): a
    value of probability 0.9 is most of the startup, not the third an equal-share design would give it."""
    space = parse_parameters({**SPACE, "opt": {"values": ["sgd", "adam", "lion"], "probabilities": [0.9, 0.05, 0.05]}})
    searcher = make_searcher("tpe", space, Goal.MINIMIZE, 0, prefetch=False)
    asked = [searcher.ask() for _ in range(10)]
    assert sum(p["opt"] == "sgd" for p in asked) >= 6
    searcher.close()


def test_a_gp_suggestion_holds_an_already_loaded_blas_to_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Optuna limits OpenBLAS through OPENBLAS_NUM_THREADS, which a library loaded before (scipy's, by
    xgboost or scipy.linalg) never reads: its threads then contend with torch's and a suggestion cost 2-5x
    the CPU. The GP's suggestion holds every loaded BLAS to one thread, and gives the threads back after."""
    import scipy.linalg  # noqa: F401  (loads scipy's BLAS now, outside any limit)
    threadpoolctl = pytest.importorskip("threadpoolctl")   # the bayes extra, with torch
    threadpool_info, threadpool_limits = threadpoolctl.threadpool_info, threadpoolctl.threadpool_limits

    import sweeplab.search.optuna as searchopt

    seen: list[int] = []
    original = searchopt._believer_suggestion

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.extend(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")
        return original(*args, **kwargs)

    monkeypatch.setattr(searchopt, "_believer_suggestion", recording)
    searcher = make_searcher("gp", parse_parameters({"x": {"min": 0.0, "max": 1.0}}), Goal.MINIMIZE, 0,
                             prefetch=False, n_startup_trials=2)
    searcher.replay([TrialSnapshot(k, {"x": k / 4}, TrialState.COMPLETED, value=(k / 4 - 0.3) ** 2) for k in range(4)])
    with threadpool_limits(limits=2, user_api="blas"):
        before = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
        if max(before, default=1) < 2:
            pytest.skip("no BLAS library here runs 2 threads")
        searcher.ask()
        searcher.ask()   # one running: the believer's path
        after = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert seen and set(seen) == {1}
    assert after == before   # given back
