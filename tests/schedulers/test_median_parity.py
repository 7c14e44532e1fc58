"""Parity of `median` with Optuna's MedianPruner: the same trials stopped at the same report.

Optuna (the installed package) and sweeplab get the same randomized report streams: trials start at random
times and report at irregular, increasing steps, interleaved at random; values tie, some are NaN or
infinite; some trials fail, and only completed ones are references. Settings: `warmup` (Optuna's
n_startup_trials), `min_iter` (n_warmup_steps), `interval` (interval_steps), both directions.

The deliberate difference (docs/early-stopping.md, "Parity with Optuna and Ray Tune"): a NaN or infinite
value is the worst value, in the trial's own history and in the references (Optuna prunes a trial whose
values are all NaN and drops NaN references, and ranks +inf best when maximizing). Such values reach
Optuna as the worst infinity of the direction.
"""

from __future__ import annotations

import math
import random
import warnings
from typing import Any

import pytest

from sweeplab.schedulers import MedianScheduler
from sweeplab.types import Goal, TrialState

optuna = pytest.importorskip("optuna")


def _stream(rng: random.Random, *, nan: bool, ties: bool) -> list[tuple[int, float]]:
    step = rng.choice([0, 0, 1, rng.randint(2, 6)])
    start, rate = rng.uniform(1, 3), rng.uniform(0.0, 0.3)
    out = []
    for _ in range(rng.randint(1, 12)):
        v = start * math.exp(-rate * step) + rng.gauss(0, 0.1)
        if ties:
            v = round(v, 1)
        if nan and rng.random() < 0.1:
            v = rng.choice([math.nan, math.inf, -math.inf])
        out.append((step, v))
        step += rng.choice([1, 1, 1, 2, 3])
    return out


def simulate(*, warmup: int, min_iter: int, interval: int, goal: Goal, seed: int, nan: bool, ties: bool) -> int:
    rng = random.Random(seed)
    streams = {t: _stream(rng, nan=nan, ties=ties) for t in range(rng.randint(3, 25))}
    fails = {t for t in streams if rng.random() < 0.15}
    ours = MedianScheduler(warmup=warmup, min_iter=min_iter, interval=interval, goal=goal)
    study = optuna.create_study(direction=goal.value, pruner=optuna.pruners.MedianPruner(
        n_startup_trials=warmup, n_warmup_steps=min_iter, interval_steps=interval))
    waiting, running, stopped = list(streams), {}, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while waiting or running:
            if waiting and (not running or rng.random() < 0.3):
                running[waiting.pop(0)] = study.ask()
                continue
            t = rng.choice(sorted(running))
            step, v = streams[t].pop(0)
            verdict = ours.on_report(t, step, v)
            running[t].report(v if math.isfinite(v) else goal.sign() * math.inf, step)
            theirs = running[t].should_prune()
            assert verdict.stops == theirs, (
                f"trial {t} step {step} value {v}: sweeplab {verdict.decision.name}, Optuna "
                f"{'PRUNE' if theirs else 'CONTINUE'}; {verdict.reason}")
            if theirs or not streams[t]:
                state = (TrialState.PRUNED if theirs else TrialState.FAILED if t in fails
                         else TrialState.COMPLETED)
                study.tell(running.pop(t), v if state is TrialState.COMPLETED and math.isfinite(v) else None,
                           state={TrialState.PRUNED: optuna.trial.TrialState.PRUNED,
                                  TrialState.FAILED: optuna.trial.TrialState.FAIL}.get(
                               state, optuna.trial.TrialState.COMPLETE if math.isfinite(v) else
                               optuna.trial.TrialState.FAIL))
                # Optuna cannot complete a trial with a non-finite value; sweeplab then records it as failed
                ours.on_trial_end(t, state if state is not TrialState.COMPLETED or math.isfinite(v)
                                  else TrialState.FAILED)
                stopped += theirs
    return stopped


SETTINGS: list[dict[str, Any]] = [
    {"warmup": 1, "min_iter": 0, "interval": 1},
    {"warmup": 3, "min_iter": 0, "interval": 1},
    {"warmup": 5, "min_iter": 2, "interval": 1},
    {"warmup": 0, "min_iter": 0, "interval": 1},
    {"warmup": 2, "min_iter": 1, "interval": 3},
    {"warmup": 1, "min_iter": 4, "interval": 2},
]
CASES = [(s, goal) for s in SETTINGS for goal in Goal]


@pytest.mark.parametrize(("setting", "goal"), CASES, ids=[
    f"w{s['warmup']}-min{s['min_iter']}-int{s['interval']}-{g.value}" for s, g in CASES])
def test_median_stops_the_trials_optuna_prunes_at_the_same_report(setting: dict[str, Any], goal: Goal) -> None:
    total = sum(simulate(**setting, goal=goal, seed=seed, nan=seed % 3 == 0, ties=seed % 2 == 0)
                for seed in range(12))
    assert total > 0
