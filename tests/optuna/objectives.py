"""Optuna objectives as users write them (define-by-run, conditional, pruning, user attrs); copied into a
test's working directory so worker processes import them by name, as they would a user's module."""

import os
import time
from pathlib import Path

import optuna


def conditional(trial):
    x = trial.suggest_float("x", 0.0, 10.0)
    kind = trial.suggest_categorical("kind", ["a", "b"])
    extra = trial.suggest_int("y", 0, 3) if kind == "a" else 0
    trial.set_user_attr("double_x", 2 * x)
    for step in range(3):
        trial.report(x, step)                 # ThresholdPruner(upper=5) prunes x > 5 at step 0
        if trial.should_prune():
            raise optuna.TrialPruned()
    return x + extra


def grid(trial):
    return trial.suggest_float("x", 0.0, 3.0)


def waits(trial):
    """Trials 0 and 1 complete at once; later ones wait while the file STALL exists (trials in flight)."""
    x = trial.suggest_float("x", 0.0, 1.0)
    while trial.number >= 2 and Path("STALL").exists():
        time.sleep(0.05)
    return x


def pid(trial):
    trial.set_user_attr("pid", os.getpid())
    return trial.suggest_float("x", -1.0, 1.0) ** 2


def fails(trial):
    trial.suggest_float("x", 0.0, 1.0)
    raise ValueError("planted failure")
