"""Search quality: best value found within a trial budget, per method, on standard test problems.

    python benchmarks/search_quality.py                      # Branin, Hartmann6 (+ XGBoost on diabetes)
    python benchmarks/search_quality.py --trials 30 --seeds 0 --methods random tpe

Problems: Branin (2-d, minimum 0.397887), Hartmann6 (6-d, minimum -3.32237) and, when xgboost and
scikit-learn are importable, XGBoost regression on sklearn's diabetes data (validation MSE). Searchers
are driven directly through ask/tell (no processes, no store). Prints the best value per method (mean and
spread over seeds) and the mean seconds per `ask`; writes nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.types import Goal, TrialState


@dataclass(frozen=True)
class Problem:
    name: str
    parameters: dict[str, Any]
    objective: Callable[[dict[str, Any]], float]
    optimum: float | None


def branin(p: dict[str, Any]) -> float:
    x1, x2 = p["x1"], p["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


_H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
_H_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                 [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
_H_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                        [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])


def hartmann6(p: dict[str, Any]) -> float:
    x = np.array([p[f"x{i}"] for i in range(1, 7)])
    return float(-np.sum(_H_ALPHA * np.exp(-np.sum(_H_A * (x - _H_P) ** 2, axis=1))))


def xgboost_problem() -> Problem | None:
    if not all(importlib.util.find_spec(m) for m in ("xgboost", "sklearn")):
        return None
    import xgboost
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split

    X, y = load_diabetes(return_X_y=True)
    X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.3, random_state=0)

    def objective(p: dict[str, Any]) -> float:
        model = xgboost.XGBRegressor(
            n_estimators=p["n_estimators"], max_depth=p["max_depth"], learning_rate=p["learning_rate"],
            subsample=p["subsample"], min_child_weight=p["min_child_weight"], n_jobs=1, random_state=0,
        )
        model.fit(X_train, y_train)
        return float(np.mean((model.predict(X_val) - y_val) ** 2))

    parameters = {
        "n_estimators": {"distribution": "q_uniform", "min": 50, "max": 300, "q": 10},
        "max_depth": {"min": 2, "max": 8},
        "learning_rate": {"distribution": "log_uniform_values", "min": 0.01, "max": 0.3},
        "subsample": {"min": 0.5, "max": 1.0},
        "min_child_weight": {"distribution": "log_uniform_values", "min": 1.0, "max": 20.0},
    }
    return Problem("xgboost-diabetes (val MSE)", parameters, objective, None)


def problems() -> list[Problem]:
    found = [
        Problem("branin", {"x1": {"min": -5.0, "max": 10.0}, "x2": {"min": 0.0, "max": 15.0}}, branin, 0.397887),
        Problem("hartmann6", {f"x{i}": {"min": 0.0, "max": 1.0} for i in range(1, 7)}, hartmann6, -3.32237),
    ]
    xgb = xgboost_problem()
    return found + ([xgb] if xgb else [])


def run_once(problem: Problem, method: str, seed: int, trials: int) -> tuple[float, float]:
    """(best value, mean seconds per ask) of one sweep."""
    space = parse_parameters(problem.parameters)
    searcher = make_searcher(method, space, Goal.MINIMIZE, seed, prefetch=False)
    best, ask_seconds = math.inf, 0.0
    for number in range(trials):
        start = time.perf_counter()
        params = searcher.ask()
        ask_seconds += time.perf_counter() - start
        assert params is not None
        value = problem.objective(params)
        best = min(best, value)
        searcher.tell(number, params, TrialState.COMPLETED, value)
    return best, ask_seconds / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=["random", "sobol", "tpe", "gp"])
    parser.add_argument("--problems", nargs="+", default=None, help="names to keep (prefix match)")
    args = parser.parse_args()

    methods = list(args.methods)
    if "gp" in methods and importlib.util.find_spec("torch") is None:
        print("gp skipped: torch is not installed (pip install 'sweeplab[bayes]')")
        methods.remove("gp")

    print(f"{args.trials} trials per sweep, seeds {args.seeds}; best value: mean (min..max) over seeds")
    for problem in problems():
        if args.problems and not any(problem.name.startswith(p) for p in args.problems):
            continue
        optimum = f", optimum {problem.optimum}" if problem.optimum is not None else ""
        print(f"\n{problem.name}{optimum}")
        print(f"  {'method':<8} {'best (mean)':>12} {'min':>10} {'max':>10} {'s/ask':>8}")
        for method in methods:
            results = [run_once(problem, method, seed, args.trials) for seed in args.seeds]
            bests = [b for b, _ in results]
            per_ask = statistics.mean(s for _, s in results)
            print(f"  {method:<8} {statistics.mean(bests):>12.4f} {min(bests):>10.4f} {max(bests):>10.4f}"
                  f" {per_ask:>8.4f}")


if __name__ == "__main__":
    main()
