"""Parity of `asha` with Optuna's SuccessiveHalvingPruner: the same trials pruned at the same report.

Optuna (the installed package, not a port) is driven with the same randomized report streams as sweeplab:
trials start at random times and report one value at a time, interleaved at random (asynchronous arrival);
steps are irregular (start at 0 or 1, strides of 1 to 4, jumps over several rungs); values tie, some are NaN
or infinite; some trials end (complete or fail) before a rung. After every report `trial.should_prune()`
must say what sweeplab's verdict says. Settings: min_iter (Optuna's min_resource), eta (reduction_factor),
the bracket (min_early_stopping_rate), max_iter, both directions.

Optuna's own rule decides a rung holding fewer than `eta` values (only the best of them goes on). Optuna is
adjusted where docs/early-stopping.md promises otherwise (the deliberate differences listed
there under "Parity with Optuna and Ray Tune"):

- a NaN or infinite value is the worst value, recorded at the rung (Optuna prunes a NaN without recording
  it, and ranks +inf first when maximizing): such values reach Optuna as a finite value worse than any other;
- `max_iter`: reports past it reach Optuna at step max_iter - 1 (sweeplab has no rung at or past max_iter).
"""

from __future__ import annotations

import math
import random
import warnings
from typing import Any

import pytest

from sweeplab.schedulers import AshaScheduler
from sweeplab.types import Goal, TrialState

optuna = pytest.importorskip("optuna")

WORST = 1e300


@pytest.fixture(autouse=True)
def _quiet_optuna() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)


def _stream(rng: random.Random, *, nan: bool, ties: bool, horizon: int) -> list[tuple[int, float]]:
    """One trial's (step, value) reports: increasing, irregular steps; a noisy decaying curve."""
    step = rng.choice([0, 1, rng.randint(2, 12)])
    length = rng.randint(1, 14)
    start, rate = rng.uniform(1, 3), rng.uniform(0.0, 0.2)
    out = []
    for _ in range(length):
        v = start * math.exp(-rate * step) + rng.gauss(0, 0.05)
        if ties:
            v = round(v, 1)
        if nan and rng.random() < 0.1:
            v = rng.choice([math.nan, math.inf, -math.inf])
        out.append((step, v))
        step += rng.choice([1, 1, 1, 2, 3, 4]) if rng.random() < 0.85 else rng.randint(5, horizon)
    return out


def _to_optuna(v: float, goal: Goal) -> float:
    return v if math.isfinite(v) else goal.sign() * WORST


def simulate(*, min_iter: int, eta: int, brackets: int, max_iter: int | None, goal: Goal, seed: int,
             nan: bool, ties: bool) -> int:
    """Run one random sweep through both; assert the same verdict at every report. Returns the prunes."""
    rng = random.Random(seed)
    n = rng.randint(3, 30)
    streams = {t: _stream(rng, nan=nan, ties=ties, horizon=3 * min_iter * eta) for t in range(n)}
    fails = {t for t in streams if rng.random() < 0.1}          # these fail after their last report
    ours = AshaScheduler(min_iter=min_iter, max_iter=max_iter, eta=eta, brackets=brackets, goal=goal)
    studies = [optuna.create_study(
        direction=goal.value,
        pruner=optuna.pruners.SuccessiveHalvingPruner(
            min_resource=min_iter, reduction_factor=eta, min_early_stopping_rate=b),
    ) for b in range(brackets)]
    waiting = list(streams)                      # trials start in number order, at random times
    running: dict[int, Any] = {}
    fed: dict[int, int] = {}                     # the last step Optuna was given, per trial
    pruned = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while waiting or running:
            if waiting and (not running or rng.random() < 0.3):
                t = waiting.pop(0)
                running[t] = studies[t % brackets].ask()
                continue
            t = rng.choice(sorted(running))
            step, v = streams[t].pop(0)
            verdict = ours.on_report(t, step, v)
            optuna_step = step if max_iter is None else min(step, max_iter - 1)
            theirs = False
            if optuna_step > fed.get(t, -1):
                fed[t] = optuna_step
                running[t].report(_to_optuna(v, goal), optuna_step)
                theirs = running[t].should_prune()
            assert verdict.stops == theirs, (
                f"trial {t} step {step} value {v}: sweeplab {verdict.decision.name}, Optuna "
                f"{'PRUNE' if theirs else 'CONTINUE'}; {verdict.reason}")
            if theirs or not streams[t]:
                trial, state = running.pop(t), (TrialState.PRUNED if theirs else
                                                 TrialState.FAILED if t in fails else TrialState.COMPLETED)
                studies[t % brackets].tell(trial, None if state is not TrialState.COMPLETED else v,
                                           state={TrialState.PRUNED: optuna.trial.TrialState.PRUNED,
                                                  TrialState.FAILED: optuna.trial.TrialState.FAIL}.get(state))
                ours.on_trial_end(t, state)
                pruned += theirs
    return pruned


SETTINGS = [
    {"min_iter": 1, "eta": 2, "brackets": 1, "max_iter": None},
    {"min_iter": 1, "eta": 3, "brackets": 1, "max_iter": None},
    {"min_iter": 2, "eta": 2, "brackets": 1, "max_iter": None},
    {"min_iter": 3, "eta": 4, "brackets": 1, "max_iter": None},
    {"min_iter": 1, "eta": 3, "brackets": 1, "max_iter": 27},
    {"min_iter": 1, "eta": 2, "brackets": 1, "max_iter": 10},
    {"min_iter": 1, "eta": 3, "brackets": 3, "max_iter": 81},
    {"min_iter": 2, "eta": 2, "brackets": 2, "max_iter": None},
]
CASES = [(s, goal) for s in SETTINGS for goal in Goal]


@pytest.mark.parametrize(("setting", "goal"), CASES, ids=[
    f"r{s['min_iter']}-eta{s['eta']}-b{s['brackets']}-R{s['max_iter']}-{g.value}" for s, g in CASES])
def test_asha_prunes_the_trials_optuna_prunes_at_the_same_report(setting: dict[str, Any], goal: Goal) -> None:
    total = sum(simulate(**setting, goal=goal, seed=seed, nan=seed % 3 == 0, ties=seed % 2 == 0)
                for seed in range(10))
    assert total > 0      # the comparison saw prunes
