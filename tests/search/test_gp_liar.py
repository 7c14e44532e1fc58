"""The GP with parallel workers (issue 18): running trials are told to the model as a Kriging believer (the
GP's posterior mean there), so a suggestion costs one analytic log-EI optimisation instead of Optuna's q-batch
Monte Carlo acquisition, and parallel suggestions still keep away from the running points."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal, TrialSnapshot, TrialState

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")

XY = {"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}}


def quadratic(params: dict[str, Any]) -> float:
    return (params["x"] - 0.3) ** 2 + (params["y"] - 0.7) ** 2


def _history(n: int) -> list[TrialSnapshot]:
    points = [{"x": (k * 0.37) % 1.0, "y": (k * 0.61) % 1.0} for k in range(n)]
    return [TrialSnapshot(k, p, TrialState.COMPLETED, value=quadratic(p)) for k, p in enumerate(points)]


def test_running_trials_do_not_need_the_batch_acquisition(monkeypatch: pytest.MonkeyPatch) -> None:
    import optuna._gp.acqf as acqf

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("q-batch log-EI built: running trials were not told as believed values")

    monkeypatch.setattr(acqf.qLogEI, "__init__", refuse)
    searcher = make_searcher("gp", parse_parameters(XY), Goal.MINIMIZE, 0, prefetch=False, n_startup_trials=4)
    searcher.replay(_history(8))
    batch = [searcher.ask() for _ in range(4)]   # 4 workers: each ask sees the earlier ones running
    for a in range(4):
        for b in range(a):
            assert math.dist(batch[a].values(), batch[b].values()) > 1e-3   # spread out, not one point 4 times


def test_the_lies_do_not_end_the_random_startup_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """1 completed + 3 running with n_startup_trials=4: the lied-to trials must not count as completed (the
    model needs 2, half the startup trials; see test_gp_batch)."""
    from optuna.samplers._gp.sampler import GPSampler

    import sweeplab.search.optuna as searchopt

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the GP model was used during the random startup")

    monkeypatch.setattr(GPSampler, "_sample_relative_impl", refuse)
    monkeypatch.setattr(searchopt, "_believer_suggestion", refuse)
    searcher = make_searcher("gp", parse_parameters(XY), Goal.MINIMIZE, 0, prefetch=False, n_startup_trials=4)
    searcher.replay(_history(1))
    assert all(parse_parameters(XY).contains(searcher.ask()) for _ in range(3))


def test_a_resumed_gp_with_running_trials_asks_what_the_uninterrupted_one_asks() -> None:
    space = parse_parameters(XY)
    live = make_searcher("gp", space, Goal.MINIMIZE, 3, prefetch=False, n_startup_trials=4)
    live.replay(_history(6))
    running = [live.ask(), live.ask()]
    nxt = live.ask()
    resumed = make_searcher("gp", space, Goal.MINIMIZE, 3, prefetch=False, n_startup_trials=4)
    resumed.replay([*_history(6), *(TrialSnapshot(6 + i, p, TrialState.RUNNING) for i, p in enumerate(running))])
    again = resumed.ask()
    assert math.dist(again.values(), nxt.values()) < 0.05   # up to the GP's kernel warm start
