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


# -------------------------------------------------------------- shapes seen in Optuna's own examples
def numpy_values(trial):
    """numpy scalars and arrays where Optuna's in-memory study takes them (terminator_simple.py stores the
    cross-validation scores array through `report_cross_validation_scores`; training loops report float32)."""
    import numpy as np

    x = trial.suggest_float("x", 0.0, 1.0)
    trial.suggest_categorical("n", np.arange(1, 3))      # numpy choices: np.int64
    for step in range(3):
        trial.report(np.float32(x + step), step)
    trial.set_user_attr("best_epoch", np.int64(2))
    trial.set_user_attr("scores", np.array([0.5, 0.25]))
    trial.storage.set_trial_system_attr(trial._trial_id, "cv_scores", np.array([1.0, 2.0]))
    return np.float32(x)


def with_data(trial, data):
    """An objective taking extra arguments, bound by functools.partial (Optuna's FAQ)."""
    return data * trial.suggest_float("x", 0.0, 1.0)


class Objective:
    """A callable class holding its data (sklearn_additional_args.py)."""

    def __init__(self, scale):
        self.scale = scale

    def __call__(self, trial):
        return self.scale * trial.suggest_float("x", 0.0, 1.0)


def svc_like(trial):
    """faq/enqueue_trial.py's shape: the enqueued parameters run first; a study user attr is read."""
    c = trial.suggest_float("svc_c", 1e-10, 1e10, log=True)
    trial.set_user_attr("dataset", trial.study.user_attrs.get("dataset"))
    return float(c > 1e-3)


def two_objectives(trial):
    """basic/quadratic_multi_objective.py: minimize f1, maximize f2 (a tuple)."""
    x = trial.suggest_float("x", -100, 100)
    y = trial.suggest_categorical("y", [-1, 0, 1])
    return x**2 + y, -((x - 2) ** 2 + y)


def returns_none(trial):
    trial.suggest_float("x", 0.0, 1.0)


def sleeps(trial):
    x = trial.suggest_float("x", 0.0, 1.0)
    time.sleep(0.3)
    return x


def hangs(trial):
    trial.suggest_float("x", 0.0, 1.0)
    time.sleep(120)
    return 0.0


def constrained(trial):
    """Optuna 5's trial.set_constraint: feasible when x >= 1 (the best feasible is x = 1, value 1)."""
    x = trial.suggest_float("x", -5.0, 5.0)
    trial.set_constraint("c", 1.0 - x)
    return x * x


def quadratic(trial):
    """basic/quadratic_constraint.py's objective; its constraints are given by constraints_func below."""
    return trial.suggest_float("x", -5.0, 5.0) ** 2


def constraints(frozen_trial):
    return (1.0 - frozen_trial.params["x"],)


def nan_constraints(frozen_trial):
    return (float("nan"),)


def reports_a_step_twice(trial):
    """Optuna keeps the first value reported at a step and ignores (with a warning) a second one."""
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.report(0.5, 0)
    trial.report(0.7, 0)
    trial.report(0.25, 1)
    return x


def function_choices(trial):
    """An in-memory study takes functions as categorical choices; a persistent one cannot store them."""
    import math

    act = trial.suggest_categorical("act", [math.tanh, math.sin])
    return act(1.0)


def fails_once_between_suggests(trial):
    """Suggests x, fails once (as a killed worker would), then on the retry suggests y from the same range."""
    x = trial.suggest_float("x", 0.0, 1.0)
    if "attempted" not in trial.user_attrs:
        trial.set_user_attr("attempted", 1)
        raise RuntimeError("worker lost")
    return x + trial.suggest_float("y", 0.0, 1.0)


def writes_in_cwd(trial):
    """Writes `model.txt` by a relative name, as an objective saving a checkpoint does."""
    import os

    x = trial.suggest_float("x", -1.0, 1.0)
    with open("model.txt", "w") as f:
        f.write(f"{trial.number} {os.getcwd()}")
    return x * x


def tuple_choices(trial):
    """sklearn MLP's hidden_layer_sizes as Optuna's examples suggest it: tuples as categorical choices."""
    layers = trial.suggest_categorical("layers", [(50,), (50, 50)])
    assert isinstance(layers, tuple)
    return float(sum(layers)) + trial.suggest_float("x", 0.0, 1.0)


def returns_text(trial):
    """A number as text, as read back from a file or a subprocess's output: Optuna fails the trial."""
    return str(trial.suggest_float("x", 0.0, 1.0))


def brute(trial):
    """A space of 24 points, as tutorial/20_recipes/014_ablation_study_by_optuna.py enumerates one."""
    return trial.suggest_int("a", 0, 11) + trial.suggest_categorical("b", [0, 10])


def datetime_attr(trial):
    """A user attr an in-memory study keeps as it is and JSON cannot hold."""
    import datetime

    trial.set_user_attr("finished_at", datetime.datetime(2026, 1, 2))
    return trial.suggest_float("x", 0.0, 1.0)


def checkpointed(trial):
    """pytorch/pytorch_checkpoint.py's shape: records the number it saw and an artifact id per trial."""
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("number", trial.number)
    trial.set_user_attr("artifact_id", f"a{trial.number}")
    return x
