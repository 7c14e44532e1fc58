"""The GP's startup trials are a space-filling design (issue 18): trial k of a `gp`/`bayes` sweep's random
phase is point k of a scrambled Sobol sequence seeded by the sweep's seed, not an independent uniform draw.
With k workers the first k asks are one batch, and a batch of Sobol points covers every axis evenly."""

from __future__ import annotations

from typing import Any

import pytest

from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal, TrialSnapshot, TrialState

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")

SPACE = {"x": {"min": 0.0, "max": 1.0}, "lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1.0},
         "depth": {"min": 1, "max": 8}, "opt": {"values": ["sgd", "adam", "rmsprop", "lion"]}}


def _searcher(seed: int = 0) -> Any:
    return make_searcher("bayes", parse_parameters(SPACE), Goal.MINIMIZE, seed, prefetch=False)


def _strata(values: list[float], lo: float, hi: float, n: int) -> set[int]:
    return {min(int((v - lo) / (hi - lo) * n), n - 1) for v in values}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_first_batch_of_startup_asks_covers_every_axis_evenly(seed: int) -> None:
    """8 workers' first asks: each eighth of each continuous axis holds one point, each integer value of 8
    one, each of 4 categories two (a Sobol net's strata). Independent uniform draws leave strata empty."""
    import math

    searcher = _searcher(seed)
    batch = [searcher.ask() for _ in range(8)]   # none told: all eight run at once
    assert _strata([p["x"] for p in batch], 0.0, 1.0, 8) == set(range(8))
    assert _strata([math.log(p["lr"]) for p in batch], math.log(1e-4), 0.0, 8) == set(range(8))
    assert sorted(p["depth"] for p in batch) == list(range(1, 9))
    assert sorted(p["opt"] for p in batch) == sorted(["sgd", "adam", "rmsprop", "lion"] * 2)


def test_the_design_is_seeded_by_the_sweep_seed() -> None:
    assert [_searcher(3).ask() for _ in range(1)] == [_searcher(3).ask() for _ in range(1)]
    first = [_searcher(seed).ask()["x"] for seed in range(4)]
    assert len(set(first)) == 4


def test_a_resumed_startup_with_running_and_withdrawn_trials_asks_what_the_uninterrupted_one_asks() -> None:
    """The design point is the driver's trial number's: a withdrawn suggestion (Prefetching's stale one)
    is asked again with the same point, and a replayed sweep with trials still running continues the design
    where the uninterrupted one is."""
    live = _searcher(5)
    asked = [live.ask() for _ in range(3)]
    stale = live.ask()
    assert live.withdraw(stale)
    again = live.ask()
    assert again == stale
    live.tell(0, asked[0], TrialState.COMPLETED, 1.0)
    nxt = live.ask()
    resumed = _searcher(5)
    resumed.replay([TrialSnapshot(0, asked[0], TrialState.COMPLETED, value=1.0),
                    *(TrialSnapshot(k, p, TrialState.RUNNING) for k, p in ((1, asked[1]), (2, asked[2]), (3, again)))])
    assert resumed.ask() == nxt
