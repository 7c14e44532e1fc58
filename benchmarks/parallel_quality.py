"""Parallel search quality (issue 18, item 1): best-at-N with k workers vs sequential Optuna GP and TPE.

    python benchmarks/parallel_quality.py                       # small: N=40, 3 seeds, 2 and 8 workers
    python benchmarks/parallel_quality.py --full                # N=40 and 80, 5 seeds, 1/2/4/8 workers, +xgboost
    python benchmarks/parallel_quality.py --idle                # + worker idle time, 8 workers, 1 s trials

sweeplab's side is the searcher the driver builds (`make_searcher(method, ...)`, Prefetching included) driven
the way the driver drives it with k workers: k suggestions are asked up front, then each time a trial ends
(in completion order; trial durations are drawn uniformly from 0.5-1.5 times `--trial-seconds`, default 60,
on a simulated clock that Prefetching reads, seeded) its result is told and one new suggestion is asked.
The trial length matters through Prefetching: it recomputes a suggestion that a result made stale when an
ask costs under 1 % of a trial (`FRESH_SHARE`), so with 60 s trials a GP's suggestions see every result
told before them and with 1 s trials they lag one result behind (`--trial-seconds 1`).
The peers are plain sequential Optuna studies (`study.optimize`, one trial at a time: the best case for
them) with GPSampler and TPESampler at their defaults, seeded.

Tasks: Branin (2-d), Hartmann6 (6-d), Rosenbrock (4-d, log10(1+f)), "mixed" (a synthetic training-loss
surface over a log-scaled learning rate, an integer depth, a float and a 3-way categorical: the kinds of
parameters real sweeps have), and with --xgboost (or --full) XGBoost on sklearn's diabetes data (the
`search_quality.py` demo). Reported per task: median best-at-N over seeds for each configuration, and the
ratio of sweeplab's median simple regret (best - optimum; best itself for xgboost) to each peer's.

--idle runs `bayes` with 8 workers and 1 s trials on a simulated clock where each suggestion takes the CPU
time it measurably took (see `idle_share`), and reports the share of worker time spent waiting for one.
"""

from __future__ import annotations

import argparse
import heapq
import importlib.util
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_quality import Problem as Task
from search_quality import branin, hartmann6, xgboost_problem

from sweeplab.search import make_searcher
from sweeplab.search.prefetch import fresh_limit
from sweeplab.space import parse_parameters
from sweeplab.types import Goal, TrialState


def rosenbrock4(p: dict[str, Any]) -> float:
    x = [p[f"x{i}"] for i in range(4)]
    f = sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(3))
    return math.log10(1.0 + f)


def mixed(p: dict[str, Any]) -> float:
    """A training-loss-like surface: best near lr=3e-3, depth 6, dropout 0.2, optimizer 'adam'."""
    lr = math.log10(p["lr"])
    bonus = {"adam": 0.0, "sgd": 0.15, "rmsprop": 0.08}[p["optimizer"]]
    return ((lr + 2.5) ** 2 * 0.4 + 0.02 * (p["depth"] - 6) ** 2 + (p["dropout"] - 0.2) ** 2 * 2
            + bonus + 0.05 * math.sin(5 * lr) ** 2)


def tasks(with_xgboost: bool) -> list[Task]:
    found = [
        Task("branin", {"x1": {"min": -5.0, "max": 10.0}, "x2": {"min": 0.0, "max": 15.0}}, branin, 0.397887),
        Task("hartmann6", {f"x{i}": {"min": 0.0, "max": 1.0} for i in range(1, 7)}, hartmann6, -3.32237),
        Task("rosenbrock4", {f"x{i}": {"min": -2.0, "max": 2.0} for i in range(4)}, rosenbrock4, 0.0),
        Task("mixed", {"lr": {"distribution": "log_uniform_values", "min": 1e-5, "max": 1e-1},
                       "depth": {"min": 1, "max": 12}, "dropout": {"min": 0.0, "max": 0.6},
                       "optimizer": {"values": ["sgd", "adam", "rmsprop"]}}, mixed, 0.0),
    ]
    if with_xgboost:
        xgb = xgboost_problem()
        if xgb is not None:
            found.append(Task("xgboost", xgb.parameters, xgb.objective, None))
    return found


# ------------------------------------------------------------------------------------------ sweeplab side
def sweeplab_run(task: Task, method: str, seed: int, workers: int, n: int, seconds: float = 60.0,
                 options: dict[str, Any] | None = None) -> list[float]:
    """Best-so-far after each completed trial, with `workers` trials in flight (simulated time; trials last
    0.5-1.5 x `seconds`); `options`: the searcher's (`--option`)."""
    searcher = make_searcher(method, parse_parameters(task.parameters), Goal.MINIMIZE, seed, **(options or {}))
    durations = np.random.default_rng(10_000 + seed)
    running: list[tuple[float, int, dict[str, Any]]] = []
    now, asked, best, curve = 0.0, 0, math.inf, []
    if hasattr(searcher, "clock"):   # Prefetching measures the trials' durations on the simulated clock
        searcher.clock = lambda: now
    try:
        while len(curve) < n:
            while len(running) < workers and asked < n:
                params = searcher.ask()
                assert params is not None and not searcher.exhausted   # waits for a suggestion computed
                # ahead, so that it always sees the same history (trials last much longer than an ask)
                heapq.heappush(running, (now + seconds * float(durations.uniform(0.5, 1.5)), asked, params))
                asked += 1
            now, number, params = heapq.heappop(running)
            value = task.objective(params)
            searcher.tell(number, params, TrialState.COMPLETED, value)
            best = min(best, value)
            curve.append(best)
    finally:
        searcher.close()
    return curve


# ------------------------------------------------------------------------------------------ Optuna peers
def _suggest(trial: Any, name: str, spec: dict[str, Any]) -> Any:
    if "values" in spec:
        return trial.suggest_categorical(name, spec["values"])
    dist = spec.get("distribution")
    if dist == "q_uniform":   # xgboost's n_estimators
        return trial.suggest_int(name, int(spec["min"]), int(spec["max"]), step=int(spec["q"]))
    if dist == "log_uniform_values":
        return trial.suggest_float(name, spec["min"], spec["max"], log=True)
    if isinstance(spec["min"], int) and isinstance(spec["max"], int):
        return trial.suggest_int(name, spec["min"], spec["max"])
    return trial.suggest_float(name, spec["min"], spec["max"])


def optuna_run(task: Task, sampler_name: str, seed: int, n: int) -> list[float]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = (optuna.samplers.GPSampler(seed=seed) if sampler_name == "gp"
               else optuna.samplers.TPESampler(seed=seed))
    study = optuna.create_study(sampler=sampler, direction="minimize")
    study.optimize(lambda t: task.objective({k: _suggest(t, k, s) for k, s in task.parameters.items()}),
                   n_trials=n)
    values = [t.value for t in study.trials]
    return list(np.minimum.accumulate(values))


# ------------------------------------------------------------------------------------------ idle time
def idle_share(task: Task, method: str, seed: int, workers: int, n: int, seconds: float,
               prefetch: bool = True) -> tuple[float, float]:
    """(share of worker time idle waiting for suggestions, mean CPU seconds per ask) on a dedicated core.

    Every ask's and tell's CPU time is measured (process CPU, so a machine shared with other work inflates
    it little) and replayed on a simulated clock where trials take `seconds` and the searcher does one
    thing at a time (the driver's Prefetching holds one lock around the searcher). As in the driver's loop,
    the results that arrive while it is busy are all told before the freed slots are filled (so a burst of
    free slots shares one kernel fit of the GP). With `prefetch`, the
    policy of `sweeplab.search.Prefetching` is replayed: when asks cost `fresh_limit` or more, one suggestion is
    computed ahead after each result and, with other trials in flight, right after one is handed out (a
    cheaper one would be withdrawn at the next result, so none is); a result that ends while the searcher
    computes is told when it is done; a stale ready suggestion is recomputed when asks are cheaper than
    `fresh_limit` of the trials' duration; the searcher's one-off `warm_up` runs once the first workers are
    fed. A freed worker waits until its suggestion is ready; that wait is the idle time.
    """
    searcher = make_searcher(method, parse_parameters(task.parameters), Goal.MINIMIZE, seed, prefetch=False)
    running: list[tuple[float, int, dict[str, Any]]] = []
    busy = idle = 0.0            # the searcher is busy until `busy` (simulated seconds)
    asked = done = 0
    asks: list[float] = []
    ready: dict[str, Any] | None = None
    ready_done = 0               # results told when `ready` was computed

    def compute(at: float) -> dict[str, Any]:
        """Ask the searcher, starting when it is free and not before `at`."""
        nonlocal busy
        c0 = time.process_time()
        params = searcher.ask()
        asks.append(time.process_time() - c0)
        busy = max(at, busy) + asks[-1]
        assert params is not None
        return params

    def start(at: float, params: dict[str, Any]) -> None:
        nonlocal asked
        heapq.heappush(running, (at + seconds, asked, params))
        asked += 1

    try:
        for i in range(workers):   # every worker waits from 0 for its first suggestion
            params = ready if ready is not None else compute(0.0)
            ready = None
            idle += busy
            start(busy, params)
            if prefetch and i >= 1 and asked < n and asks[-1] >= fresh_limit([seconds]):   # Prefetching computes ahead
                ready, ready_done = compute(busy), done                          # once 2 are in flight (if costly)
        if prefetch:   # Prefetching warms the searcher up in the background once a trial runs
            c0 = time.process_time()
            searcher.warm_up()
            busy += time.process_time() - c0
        end = 0.0
        while done < n:
            # one driver turn: every result that arrived while the searcher was busy is told, then the
            # freed slots are filled (the driver's loop does the same)
            turn = [heapq.heappop(running)]
            while running and running[0][0] <= max(turn[0][0], busy):
                turn.append(heapq.heappop(running))
            for end, number, params in turn:
                c0 = time.process_time()
                searcher.tell(number, params, TrialState.COMPLETED, task.objective(params))
                busy = max(end, busy) + (time.process_time() - c0)
                done += 1
            for freed, *_ in turn:
                if asked >= n:
                    break
                if ready is not None and ready_done < done and asks[-1] < fresh_limit([seconds]):
                    assert searcher.withdraw(ready)   # stale and cheap: asked again with the new results
                    ready = None
                if ready is None:
                    nxt = compute(busy)
                else:
                    nxt, ready = ready, None
                idle += busy - freed
                start(busy, nxt)
                if prefetch and asked < n and workers >= 2 and asks[-1] >= fresh_limit([seconds]):
                    ready, ready_done = compute(busy), done
        span = end
    finally:
        searcher.close()
    return idle / (workers * span), statistics.mean(asks)


# ------------------------------------------------------------------------------------------ report
def _regret(best: float, task: Task) -> float:
    return best - task.optimum if task.optimum is not None else best


def _ratio(ours: float, peer: float, task: Task) -> float:
    return _regret(ours, task) / max(_regret(peer, task), 1e-12)


#: "level" means a one-sided Mann-Whitney U test over the seeds does not find sweeplab worse at this level
ALPHA = 0.05


def verdict(ours: list[float], peer: list[float]) -> str:
    """Within seed noise or not: an unpaired one-sided Mann-Whitney U test on best-at-N over the seeds
    (seeds are not matched across samplers, so a paired test would pair nothing). "behind" when sweeplab's
    values are larger (worse, minimising) with p < ALPHA, "ahead" when smaller with p < ALPHA, else "level".
    With 5 seeds a side the smallest possible p is 1/252, so a gap needs about 4 of 5 seeds to show."""
    from scipy.stats import mannwhitneyu

    if mannwhitneyu(ours, peer, alternative="greater").pvalue < ALPHA:
        return "behind"
    if mannwhitneyu(ours, peer, alternative="less").pvalue < ALPHA:
        return "ahead"
    return "level"


def run_task(task: Task, method: str, seeds: list[int], workers: list[int], peers: list[str],
             n_max: int, seconds: float = 60.0, known: dict[str, Any] | None = None,
             options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every configuration's best-so-far curves on one task (interleaved by seed), with the CPU they took.
    `known`: an earlier result of the same seeds and N (or more seeds, a larger N) whose peer curves are
    reused (`--peers-from`)."""
    curves: dict[str, list[list[float]]] = {}
    reused = {}
    if known is not None and set(seeds) <= set(known["key"]["seeds"]) and known["key"]["n"] >= n_max:
        at = [known["key"]["seeds"].index(seed) for seed in seeds]   # those seeds' curves, to N = n_max
        reused = {f"optuna {p} seq": [known["curves"][f"optuna {p} seq"][i][:n_max] for i in at] for p in peers
                  if f"optuna {p} seq" in known["curves"]}
    c0 = time.process_time()
    for seed in seeds:   # interleaved: every configuration of one seed before the next seed
        for k in workers:
            curves.setdefault(f"{method} k={k}", []).append(
                sweeplab_run(task, method, seed, k, n_max, seconds, options))
        for peer in peers:
            if f"optuna {peer} seq" not in reused:
                curves.setdefault(f"optuna {peer} seq", []).append(optuna_run(task, peer, seed, n_max))
    return {"curves": {**curves, **reused}, "cpu": time.process_time() - c0, "reused": sorted(reused)}


def report(task: Task, result: dict[str, Any], method: str, trials: list[int], peers: list[str]) -> list[str]:
    """The table of one task: per N and configuration, median and range over seeds, the regret ratio to
    each peer's median and the verdict against each peer."""
    curves = result["curves"]
    opt = f" (optimum {task.optimum})" if task.optimum is not None else ""
    reused = f", {' and '.join(result['reused'])} from --peers-from" if result.get("reused") else ""
    lines = [f"\n{task.name}{opt}  [{result['cpu']:.0f} s CPU{reused}]"]
    for n in trials:
        at = {label: [c[n - 1] for c in cs] for label, cs in curves.items()}
        medians = {label: statistics.median(row) for label, row in at.items()}
        for label, row in at.items():
            cells = "  ".join(
                f"/{peer}: {_ratio(medians[label], medians[f'optuna {peer} seq'], task):5.2f} "
                f"{verdict(row, at[f'optuna {peer} seq']):<6}"
                for peer in peers if f"optuna {peer} seq" in at) if label.startswith(method) else ""
            lines.append(f"  N={n:<3} {label:<16} median {medians[label]:>10.4f}"
                         f"  range {min(row):>9.4f}..{max(row):<9.4f}  {cells}")
    return lines


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise SystemExit(f"--option {text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true",
                        help="N=40 and 80, 5 seeds, 1/2/4/8 workers, 5 tasks (with xgboost), idle at N=80")
    parser.add_argument("--trials", type=int, nargs="+", default=None)
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--workers", type=int, nargs="+", default=None)
    parser.add_argument("--method", default="bayes")
    parser.add_argument("--tasks", nargs="+", default=None, help="names to keep (prefix match)")
    parser.add_argument("--xgboost", action="store_true")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--idle", action="store_true", help="also measure idle time (8 workers, 1 s trials)")
    parser.add_argument("--trial-seconds", type=float, default=60.0,
                        help="simulated trial length (0.5-1.5 x this); Prefetching's freshness depends on it")
    parser.add_argument("--peers-from", type=Path, default=None,
                        help="reuse the Optuna peers' curves of the same seeds and N (or more) from an earlier "
                             "--out DIR "
                             "(they do not depend on sweeplab; saves most of the CPU when iterating)")
    parser.add_argument("--out", type=Path, default=None,
                        help="keep each task's curves in DIR/<task>.json and skip tasks already there "
                             "(resume an interrupted --full, or run tasks in separate processes)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a searcher option for sweeplab's side (repeatable; VALUE read as JSON, else a "
                             "string), e.g. --option n_startup_trials=8")
    args = parser.parse_args()
    options = dict(_option(text) for text in args.option)
    trials = args.trials or ([40, 80] if args.full else [40])
    seeds = list(range(args.seeds or (5 if args.full else 3)))
    workers = args.workers or ([1, 2, 4, 8] if args.full else [2, 8])
    n_max = max(trials)
    peers = [] if args.no_peers else ["gp", "tpe"]
    if importlib.util.find_spec("torch") is None and "gp" in peers:
        peers.remove("gp")

    if args.idle:   # first: importing xgboost (its task) makes torch's ops cost several times the CPU
        task = tasks(False)[1]
        n = 80 if args.full else 48
        print(f"\nidle: {args.method}, 8 workers, 1 s trials, {n} trials, {task.name}, seeds 0-2 (target < 5 %)")
        for prefetch in (True, False):
            runs = [idle_share(task, args.method, seed, 8, n, 1.0, prefetch=prefetch) for seed in range(3)]
            how = "with prefetching (as the driver runs)" if prefetch else "no prefetching (one ask per freed slot)"
            print(f"  {how:<40} workers idle {statistics.median(r[0] for r in runs):5.1%} median "
                  f"({', '.join(f'{r[0]:.1%}' for r in runs)}); mean ask "
                  f"{statistics.median(r[1] for r in runs) * 1000:.0f} ms CPU")

    print(f"sweeplab {args.method} with k workers (simulated completion order) vs sequential Optuna; "
          f"seeds {seeds}; median best-at-N; regret ratio sweeplab/peer (< 1 is better) and verdict "
          f"(one-sided Mann-Whitney U over seeds, p < {ALPHA}: behind/ahead, else level)")
    total = 0.0
    for task in tasks(args.xgboost or args.full):
        if args.tasks and not any(task.name.startswith(p) for p in args.tasks):
            continue
        key = {"method": args.method, "seeds": seeds, "workers": workers, "peers": peers, "n": n_max,
               "trial_seconds": args.trial_seconds, **({"options": options} if options else {})}
        name = f"{task.name.split()[0]}.json"
        path = args.out / name if args.out else None
        result = json.loads(path.read_text()) if path and path.exists() else None
        if result is None or result.get("key") != key:
            known = args.peers_from / name if args.peers_from else None
            known = json.loads(known.read_text()) if known and known.exists() else None
            result = {"key": key, **run_task(task, args.method, seeds, workers, peers, n_max, args.trial_seconds,
                                             known, options)}
            if path:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(result))
        total += result["cpu"]
        print("\n".join(report(task, result, args.method, trials, peers)), flush=True)
    print(f"\nquality runs: {total:.0f} s CPU in all")


if __name__ == "__main__":
    main()
