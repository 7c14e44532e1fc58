"""Conditional search: model selection with per-model parameters, sweeplab vs Optuna define-by-run TPE.

    python benchmarks/conditional.py                  # small: 20 trials, seeds 0-1 (a few minutes)
    python benchmarks/conditional.py --full           # the figures in docs/benchmarks.md: 60 trials, seeds 0-4
    python benchmarks/conditional.py --trials 40 --seeds 0 1 2

The task: pick a classifier for scikit-learn's bundled digits (8x8 images, 10 classes; no download) and
its own parameters: an SVC (C, gamma, kernel; `degree` only for the polynomial kernel: two levels deep), a
random forest (trees, depth, features) or histogram gradient boosting (learning rate, leaves, iterations).
The objective is the validation error (1 - accuracy) on a fixed 70/30 split; every model is seeded, so a
configuration always scores the same and scores are cached across arms and seeds.

Arms, the same trial budget and seeds, run interleaved per seed in one process:
    sweeplab tpe      the spec's `when` grammar, searcher driven through ask/tell (define-by-run TPE,
                      multivariate, group=True)
    optuna tpe        the peer: an Optuna objective written define-by-run, `TPESampler(seed=seed)` (the
                      defaults a user writes)
    optuna tpe grouped   the same with `multivariate=True, group=True`, the options sweeplab chooses
    sweeplab random   the floor: random search over the same conditional space
Prints, per arm, the mean best error after 1/3, 2/3 and all trials (spread over seeds) and the ratio of
sweeplab's mean best to Optuna's (<= 1 means sweeplab is at least as good). Writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")   # one thread per fit: histogram boosting spins on a busy machine

from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.types import Goal, TrialState

PARAMETERS: dict[str, Any] = {
    "classifier": {
        "values": ["svc", "rf", "hgb"],
        "when": {
            "svc": {
                "C": {"distribution": "log_uniform_values", "min": 0.01, "max": 1000.0},
                "gamma": {"distribution": "log_uniform_values", "min": 1e-5, "max": 0.1},
                "kernel": {"values": ["rbf", "poly"], "when": {"poly": {"degree": {"min": 2, "max": 4}}}},
            },
            "rf": {
                "n_estimators": {"min": 10, "max": 100},
                "max_depth": {"min": 2, "max": 20},
                "max_features": {"min": 0.05, "max": 1.0},
            },
            "hgb": {
                "learning_rate": {"distribution": "log_uniform_values", "min": 0.01, "max": 0.5},
                "max_leaf_nodes": {"min": 4, "max": 32},
                "max_iter": {"min": 10, "max": 50},
            },
        },
    },
}


def optuna_space(trial: Any) -> dict[str, Any]:
    """The same space written as an Optuna define-by-run objective would."""
    p: dict[str, Any] = {"classifier": trial.suggest_categorical("classifier", ["svc", "rf", "hgb"])}
    if p["classifier"] == "svc":
        p["C"] = trial.suggest_float("C", 0.01, 1000.0, log=True)
        p["gamma"] = trial.suggest_float("gamma", 1e-5, 0.1, log=True)
        p["kernel"] = trial.suggest_categorical("kernel", ["rbf", "poly"])
        if p["kernel"] == "poly":
            p["degree"] = trial.suggest_int("degree", 2, 4)
    elif p["classifier"] == "rf":
        p["n_estimators"] = trial.suggest_int("n_estimators", 10, 100)
        p["max_depth"] = trial.suggest_int("max_depth", 2, 20)
        p["max_features"] = trial.suggest_float("max_features", 0.05, 1.0)
    else:
        p["learning_rate"] = trial.suggest_float("learning_rate", 0.01, 0.5, log=True)
        p["max_leaf_nodes"] = trial.suggest_int("max_leaf_nodes", 4, 32)
        p["max_iter"] = trial.suggest_int("max_iter", 10, 50)
    return p


class Task:
    """Validation error of one configuration on digits (cached: every model is seeded)."""

    def __init__(self) -> None:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        X, y = load_digits(return_X_y=True)
        self.data = train_test_split(X / 16.0, y, test_size=0.3, random_state=0, stratify=y)
        self.cache: dict[str, float] = {}
        self.fit_seconds = 0.0

    def __call__(self, p: dict[str, Any]) -> float:
        key = json.dumps(p, sort_keys=True)
        if key not in self.cache:
            start = time.process_time()
            self.cache[key] = self._error(p)
            self.fit_seconds += time.process_time() - start
        return self.cache[key]

    def _error(self, p: dict[str, Any]) -> float:
        from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
        from sklearn.svm import SVC

        X_train, X_val, y_train, y_val = self.data
        if p["classifier"] == "svc":
            model: Any = SVC(C=p["C"], gamma=p["gamma"], kernel=p["kernel"], degree=p.get("degree", 3))
        elif p["classifier"] == "rf":
            model = RandomForestClassifier(n_estimators=p["n_estimators"], max_depth=p["max_depth"],
                                           max_features=p["max_features"], n_jobs=1, random_state=0)
        else:
            model = HistGradientBoostingClassifier(learning_rate=p["learning_rate"],
                                                   max_leaf_nodes=p["max_leaf_nodes"], max_iter=p["max_iter"],
                                                   early_stopping=False, random_state=0)
        model.fit(X_train, y_train)
        return float(1.0 - model.score(X_val, y_val))


def run_sweeplab(method: str, task: Task, trials: int, seed: int) -> tuple[list[float], float]:
    """Best-so-far per trial, and the CPU seconds spent asking and telling (fits excluded)."""
    space = parse_parameters(PARAMETERS)
    searcher = make_searcher(method, space, Goal.MINIMIZE, seed, prefetch=False)
    best, curve, overhead = float("inf"), [], 0.0
    for number in range(trials):
        start = time.process_time()
        params = searcher.ask()
        overhead += time.process_time() - start
        assert params is not None and space.contains(params), params
        value = task(params)
        start = time.process_time()
        searcher.tell(number, params, TrialState.COMPLETED, value)
        overhead += time.process_time() - start
        best = min(best, value)
        curve.append(best)
    return curve, overhead


def run_optuna(task: Task, trials: int, seed: int, **sampler: Any) -> tuple[list[float], float]:
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, **sampler), direction="minimize")
    curve: list[float] = []
    fits = [0.0]
    def objective(trial: Any) -> float:
        value = task(optuna_space(trial))
        curve.append(min(value, curve[-1]) if curve else value)
        return value

    before = task.fit_seconds
    start = time.process_time()
    study.optimize(objective, n_trials=trials)
    fits[0] = task.fit_seconds - before
    return curve, time.process_time() - start - fits[0]


ARMS: dict[str, Callable[[Task, int, int], tuple[list[float], float]]] = {
    "sweeplab tpe": lambda task, n, seed: run_sweeplab("tpe", task, n, seed),
    "optuna tpe": run_optuna,
    "optuna tpe grouped": lambda task, n, seed: run_optuna(task, n, seed, multivariate=True, group=True),
    "sweeplab random": lambda task, n, seed: run_sweeplab("random", task, n, seed),
}


def _fmt(values: list[float]) -> str:
    mean = statistics.fmean(values)
    spread = f" ({min(values):.4f}-{max(values):.4f})" if len(values) > 1 else ""
    return f"{mean:.4f}{spread}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="60 trials, seeds 0-4 (the documented figures)")
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    args = parser.parse_args(argv)
    trials = args.trials or (60 if args.full else 20)
    seeds = args.seeds if args.seeds is not None else (list(range(5)) if args.full else [0, 1])

    task = Task()
    curves: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
    overhead: dict[str, float] = dict.fromkeys(ARMS, 0.0)
    started = time.monotonic()
    for seed in seeds:               # interleaved: every arm for one seed, then the next seed
        for arm, run in ARMS.items():
            curve, spent = run(task, trials, seed)
            curves[arm].append(curve)
            overhead[arm] += spent
        print(f"seed {seed}: " + ", ".join(f"{arm} {curves[arm][-1][-1]:.4f}" for arm in ARMS), flush=True)

    cuts = sorted({max(1, trials // 3), max(1, 2 * trials // 3), trials})
    print(f"\ndigits model selection (svc | rf | hgb), {trials} trials, seeds {seeds}: mean best validation "
          f"error (min-max over seeds); {len(task.cache)} distinct configurations fitted "
          f"in {task.fit_seconds:.0f} s CPU, {time.monotonic() - started:.0f} s wall\n")
    header = "| arm | " + " | ".join(f"after {c}" for c in cuts) + " | search CPU ms per trial |"
    print(header)
    print("|---" * (len(cuts) + 2) + "|")
    for arm in ARMS:
        cols = [_fmt([c[n - 1] for c in curves[arm]]) for n in cuts]
        per_trial = 1000 * overhead[arm] / (trials * len(seeds))
        print(f"| {arm} | " + " | ".join(cols) + f" | {per_trial:.1f} |")
    ours = statistics.fmean(c[-1] for c in curves["sweeplab tpe"])
    peer = statistics.fmean(c[-1] for c in curves["optuna tpe"])
    wins = sum(a[-1] <= b[-1] for a, b in zip(curves["sweeplab tpe"], curves["optuna tpe"]))
    print(f"\nsweeplab tpe / optuna tpe, mean best at {trials} trials: {ours / peer:.3f} "
          f"(<= 1: at least as good); sweeplab at least as good on {wins} of {len(seeds)} seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
