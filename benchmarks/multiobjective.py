"""Several objectives: hypervolume after a trial budget, sweeplab's searchers vs Optuna's driven directly.

    python benchmarks/multiobjective.py            # small: 40 trials, seeds 0 1
    python benchmarks/multiobjective.py --full     # the figures in docs/benchmarks.md: 100 trials, 5 seeds

Problems:
  zdt1    ZDT1 with 10 variables (both objectives minimised), reference point (1.1, 10).
  digits  a one-hidden-layer MLP on sklearn's digits, trained epoch by epoch (partial_fit, 9 epochs;
          --digits-epochs 27 for a longer task with rungs at 1, 3 and 9): validation accuracy (maximize)
          vs parameter count (minimize), reference point (0.8, 10000).

Runs, all in this process and in the same run (interleaved by seed):
  sweeplab:bayes   sweeplab's default for several objectives (`method: bayes`: independent TPE), ask/tell
  sweeplab:tpe     `method: tpe` (multivariate TPE); sweeplab:tpe-independent: `tpe` with multivariate off
  sweeplab:nsga2   sweeplab's NSGA-II searcher
  optuna:nsga2     optuna.samplers.NSGAIISampler(seed), study.ask/tell directly
  optuna:tpe       optuna.samplers.TPESampler(seed) (multi-objective TPE), study.ask/tell directly
  sweeplab:bayes+asha  (digits) the default with ASHA (min_iter 1, max_iter 9, eta 3) judging rungs by
                   non-dominated rank of (accuracy, size) within the rung (the rule without
                   early_terminate.metric: a trial outside the rung's top ranks is pruned only when a
                   trial on the completed trials' front dominated it at that rung); pruned trials stop
                   training and are not on the front.
                   (sweeplab:bayes+asha-primary, on request: judged on accuracy alone, early_terminate.metric.)
                   Compute = epochs trained. Each +asha run goes on (same seed as sweeplab:bayes) until
                   it has spent the plain run's compute (trials x 9 epochs) and reached 99% of the plain
                   run's final hypervolume, or has spent twice that compute.

Reported per problem and run: mean hypervolume of the final front over seeds (and its spread), the ratio to
the best Optuna run and the epochs trained; for the +asha runs against sweeplab:bayes with the same seed:
the hypervolume each had after the same compute (a third, half and all of the plain run's epochs), and the
epochs each needed to reach 99% of sweeplab:bayes's final hypervolume (the hypervolume column of a +asha
run is the one it had after the plain run's compute). Hypervolume is sweeplab.pareto.hypervolume (checked
against Optuna's in tests/pareto).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sweeplab.pareto import hypervolume
from sweeplab.schedulers import make_scheduler
from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.types import Goal, TrialState


@dataclass(frozen=True)
class Problem:
    name: str
    parameters: dict[str, Any]
    goals: tuple[Goal, Goal]
    reference: tuple[float, float]
    # params, report(step, values) -> keep going? ; returns (values, epochs trained) or None if pruned
    run: Callable[[dict[str, Any], Callable[[int, tuple[float, float]], bool]], tuple[tuple[float, float] | None, int]]
    steps: int = 1


def zdt1_problem(n: int = 10) -> Problem:
    def run(p: dict[str, Any], report: Callable[[int, tuple[float, float]], bool]) -> tuple[Any, int]:
        x = [p[f"x{i}"] for i in range(n)]
        g = 1 + 9 * sum(x[1:]) / (n - 1)
        return (x[0], g * (1 - (x[0] / g) ** 0.5)), 1

    return Problem("zdt1", {f"x{i}": {"min": 0.0, "max": 1.0} for i in range(n)},
                   (Goal.MINIMIZE, Goal.MINIMIZE), (1.1, 10.0), run)


def digits_problem(epochs: int = 9) -> Problem:
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.3, random_state=0)
    classes = np.unique(y)

    def run(p: dict[str, Any], report: Callable[[int, tuple[float, float]], bool]) -> tuple[Any, int]:
        h = int(p["hidden"])
        size = float(X.shape[1] * h + h + h * len(classes) + len(classes))
        model = MLPClassifier(hidden_layer_sizes=(h,), learning_rate_init=p["lr"], alpha=p["alpha"],
                              batch_size=64, random_state=0)
        acc = 0.0
        for epoch in range(1, epochs + 1):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model.partial_fit(X_train, y_train, classes=classes)
            acc = float(model.score(X_val, y_val))
            if not report(epoch, (acc, size)):
                return None, epoch
        return (acc, size), epochs

    parameters = {"hidden": {"min": 2, "max": 128},
                  "lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 0.1},
                  "alpha": {"distribution": "log_uniform_values", "min": 1e-6, "max": 1e-1}}
    return Problem("digits", parameters, (Goal.MAXIMIZE, Goal.MINIMIZE), (0.8, 10000.0), run, steps=epochs)


def _go_on(step: int, values: tuple[float, float]) -> bool:
    return True


def run_sweeplab(problem: Problem, method: str, seed: int, trials: int, asha: str | None = None,
                 until: float | None = None, **options: Any) -> tuple[float, int]:
    """(hypervolume after `trials` trials, epochs trained). With `until` (the +asha runs): keep going
    until the run has spent the compute of `trials` full trials and its hypervolume reached `until`, or
    it has spent twice that compute. TRACE collects (epochs so far, hypervolume) after each trial."""
    space = parse_parameters(problem.parameters)
    goals = tuple(g.value for g in problem.goals)
    searcher = make_searcher(method, space, problem.goals[0], seed, prefetch=False, goals=goals, **options)
    scheduler: Any = None
    if asha is not None:   # "rank": the default rule with several objectives; "primary": on the first one
        raw = {"type": "asha", "min_iter": 1, "max_iter": problem.steps, "eta": 3}
        scheduler = make_scheduler({**raw, "metric": "acc"} if asha == "primary" else raw, goal=problem.goals[0])
        if asha == "rank":
            scheduler.judge_by_rank(problem.goals, ("acc", "size"))
    front: list[tuple[float, float]] = []
    epochs, budget, k = 0, trials * problem.steps, 0
    while True:
        hv = hypervolume(front, problem.goals, problem.reference)
        if until is None and k >= trials:
            break
        if until is not None and epochs >= budget and (hv >= until or epochs >= 2 * budget):
            break
        params = searcher.ask()

        def report(step: int, values: tuple[float, float], k: int = k) -> bool:
            judged = values if asha == "rank" else values[0]
            return scheduler is None or not scheduler.on_report(k, step, judged).stops

        values, used = problem.run(params, report)
        epochs += used
        state = TrialState.COMPLETED if values is not None else TrialState.PRUNED
        searcher.tell(k, params, state, values)
        if scheduler is not None:
            scheduler.on_trial_end(k, state)
        if values is not None:
            front.append(values)
        TRACE.append((epochs, hypervolume(front, problem.goals, problem.reference)))
        k += 1
    return hv, epochs


TRACE: list[tuple[int, float]] = []   # the last sweeplab run: (epochs so far, hypervolume) after each trial


def epochs_to(trace: list[tuple[int, float]], target: float) -> int | None:
    """The compute (epochs) a run had spent when its hypervolume first reached `target`."""
    return next((e for e, h in trace if h >= target), None)


def hv_at(trace: list[tuple[int, float]], epochs: float) -> float:
    """The hypervolume a run had once it had spent at most `epochs` (its compute so far)."""
    return max((h for e, h in trace if e <= epochs), default=0.0)


SHARES = (1 / 3, 1 / 2, 1.0)   # equal-compute points: shares of the plain run's compute (trials full trials)


def run_optuna(problem: Problem, sampler: str, seed: int, trials: int) -> tuple[float, int]:
    import optuna
    from optuna.distributions import FloatDistribution, IntDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists: dict[str, Any] = {}
    for name, d in problem.parameters.items():
        if isinstance(d["min"], int) and isinstance(d["max"], int):
            dists[name] = IntDistribution(d["min"], d["max"])
        else:
            dists[name] = FloatDistribution(d["min"], d["max"], log="log" in d.get("distribution", ""))
    samplers = {"nsga2": optuna.samplers.NSGAIISampler, "tpe": optuna.samplers.TPESampler}
    study = optuna.create_study(sampler=samplers[sampler](seed=seed),
                                directions=[g.value for g in problem.goals])
    points, epochs = [], 0
    for _ in range(trials):
        trial = study.ask(dists)
        values, used = problem.run(trial.params, _go_on)
        epochs += used
        study.tell(trial, list(values))
        points.append(values)
    return hypervolume(points, problem.goals, problem.reference), epochs


RUNS: dict[str, Callable[[Problem, int, int], tuple[float, int]]] = {
    "sweeplab:bayes": lambda p, s, n: run_sweeplab(p, "bayes", s, n),
    "sweeplab:nsga2": lambda p, s, n: run_sweeplab(p, "nsga2", s, n),
    "optuna:nsga2": lambda p, s, n: run_optuna(p, "nsga2", s, n),
    "optuna:tpe": lambda p, s, n: run_optuna(p, "tpe", s, n),
    "sweeplab:bayes+asha": lambda p, s, n, until=None: run_sweeplab(p, "bayes", s, n, asha="rank", until=until),
    "sweeplab:bayes+asha-primary": lambda p, s, n, until=None: run_sweeplab(p, "bayes", s, n, asha="primary",
                                                                            until=until),
    "sweeplab:tpe": lambda p, s, n: run_sweeplab(p, "tpe", s, n),
    "sweeplab:tpe-independent": lambda p, s, n: run_sweeplab(p, "tpe", s, n, multivariate=False),
    "sweeplab:gp": lambda p, s, n: run_sweeplab(p, "gp", s, n),
}
TARGET = 0.99   # early stopping: the share of the plain run's final hypervolume both runs are timed to
DEFAULT_RUNS = ["sweeplab:bayes", "sweeplab:nsga2", "optuna:nsga2", "optuna:tpe", "sweeplab:bayes+asha"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="100 trials, seeds 0-4 (the documented figures)")
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--seeds", type=int, nargs="+", default=None)
    ap.add_argument("--problems", nargs="+", default=["zdt1", "digits"], choices=["zdt1", "digits"])
    ap.add_argument("--runs", nargs="+", default=DEFAULT_RUNS, choices=list(RUNS))
    ap.add_argument("--digits-epochs", type=int, default=9,
                    help="epochs of a full digits trial (ASHA's max_iter); 27: rungs at 1, 3 and 9")
    args = ap.parse_args(argv)
    trials = args.trials or (100 if args.full else 40)
    seeds = args.seeds or (list(range(5)) if args.full else [0, 1])
    makers = {"zdt1": zdt1_problem, "digits": lambda: digits_problem(args.digits_epochs)}
    for name in args.problems:
        problem = makers[name]()
        runs = [r for r in args.runs if not ("+asha" in r and problem.steps == 1)]
        hv: dict[str, list[float]] = {r: [] for r in runs}
        work: dict[str, list[int]] = {r: [] for r in runs}
        cpu: dict[str, float] = dict.fromkeys(runs, 0.0)
        to_target: dict[str, list[int | None]] = {r: [] for r in runs}   # epochs to 99% of bayes's final hv
        traces: dict[str, list[list[tuple[int, float]]]] = {r: [] for r in runs}
        for seed in seeds:   # interleaved: a noisy neighbour slows every run alike
            for r in runs:
                t0 = time.process_time()
                TRACE.clear()
                target = TARGET * hv["sweeplab:bayes"][-1] if hv.get("sweeplab:bayes") else None
                if "+asha" in r:   # same seed: the plain run's compute, and on until the target hypervolume
                    h, e = RUNS[r](problem, seed, trials, until=-math.inf if target is None else target)  # type: ignore[call-arg]
                else:
                    h, e = RUNS[r](problem, seed, trials)
                if r == "sweeplab:bayes":
                    target = TARGET * h
                if "+asha" in r:   # compared at equal compute
                    h = hv_at(TRACE, trials * problem.steps)
                to_target[r].append(epochs_to(TRACE, target) if target is not None and TRACE else None)
                traces[r].append(list(TRACE))
                cpu[r] += time.process_time() - t0
                hv[r].append(h)
                work[r].append(e)
        peers = [statistics.mean(hv[r]) for r in runs if r.startswith("optuna:")]
        best_peer = max(peers) if peers else None
        print(f"\n{problem.name}: {trials} trials of {problem.steps} steps, seeds {seeds}, "
              f"reference {problem.reference}")
        print(f"{'run':<22}{'hypervolume':>14}{'spread':>10}{'vs best optuna':>16}{'epochs':>9}{'cpu s':>8}")
        for r in runs:
            mean = statistics.mean(hv[r])
            spread = statistics.stdev(hv[r]) if len(hv[r]) > 1 else 0.0
            ratio = f"{mean / best_peer:.3f}" if best_peer else "-"
            print(f"{r:<22}{mean:>14.6g}{spread:>10.3g}{ratio:>16}{statistics.mean(work[r]):>9.0f}{cpu[r]:>8.1f}")
        base = to_target.get("sweeplab:bayes")
        budget = trials * problem.steps
        for r in (r for r in runs if "+asha" in r and base):
            print(f"{r} vs sweeplab:bayes at equal compute (epochs; {budget} = {trials} full trials), "
                  "mean hypervolume (seeds ahead):")
            for share in SHARES:
                mine = [hv_at(t, share * budget) for t in traces[r]]
                plain = [hv_at(t, share * budget) for t in traces["sweeplab:bayes"]]
                ahead = sum(a > b for a, b in zip(mine, plain))
                print(f"  {share * budget:>6.0f} epochs: {statistics.mean(mine):.1f} vs {statistics.mean(plain):.1f}"
                      f" ({statistics.mean(mine) / statistics.mean(plain):.3f}x, {ahead}/{len(mine)} seeds ahead)")
            pairs = [(a, b) for a, b in zip(to_target[r], base or []) if b]
            reached = [(a, b) for a, b in pairs if a is not None]
            ratio = (f"{statistics.mean(a for a, _ in reached) / statistics.mean(b for _, b in reached):.2f}x"
                     if reached else "-")
            print(f"  reached {TARGET:.0%} of sweeplab:bayes's final hypervolume in {len(reached)}/"
                  f"{len(pairs)} seeds (within {2 * budget} epochs), with {ratio} the epochs sweeplab:bayes "
                  f"needed ({statistics.mean(a for a, _ in reached) if reached else float('nan'):.0f} vs "
                  f"{statistics.mean(b for _, b in reached) if reached else float('nan'):.0f}); per seed "
                  f"{[a for a, _ in pairs]} vs {[b for _, b in pairs]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
