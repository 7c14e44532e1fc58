"""Flat cost as sweeps grow (issue 18, item 2): a suggestion's cost at trial 100, 1,000 and 10,000.

    python benchmarks/scale.py                       # trials 100, 1,000, 10,000: random, tpe (+ plain Optuna TPE)
    python benchmarks/scale.py --gp 100 300          # + GP at those sizes (seconds per suggestion)

For each history size n the searcher the driver builds is given n finished trials (random points of a 4-d
space with their values, through `replay`, as after a resume) and then asked/told 20 more trials, one at a
time; the figure is driver-process CPU per ask+tell (CPU time, not wall: this machine is shared). The peer
is plain Optuna's TPESampler with the same settings (constant liar, multivariate) on the same history:
sweeplab's TPE models the best 100 trials plus the latest 1,000 others (search/optuna.py, TPE_WINDOW), plain
TPE all of them. Not measured here yet: the driver's own per-trial cost at 10,000 trials, `status`/`best`/
dashboard latency at that size, and store bytes per million metric points (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from typing import Any

from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.types import Goal, TrialSnapshot, TrialState

SPACE = {f"x{i}": {"min": 0.0, "max": 1.0} for i in range(4)}


def objective(p: dict[str, Any]) -> float:
    return sum((v - 0.3) ** 2 for v in p.values()) + 0.1 * math.sin(7 * p["x0"])


def history(n: int, seed: int = 0) -> list[TrialSnapshot]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        p = {name: rng.random() for name in SPACE}
        out.append(TrialSnapshot(k, p, TrialState.COMPLETED, value=objective(p)))
    return out


def sweeplab_cost(method: str, n: int, asks: int) -> float:
    """CPU seconds per ask+tell after n finished trials."""
    searcher = make_searcher(method, parse_parameters(SPACE), Goal.MINIMIZE, 0, prefetch=False)
    searcher.replay(history(n))
    p = searcher.ask()   # the first ask after a replay pays one pass over the history (search space); not timed
    searcher.tell(n, p, TrialState.COMPLETED, objective(p))
    start = time.process_time()
    for k in range(n + 1, n + 1 + asks):
        p = searcher.ask()
        assert p is not None
        searcher.tell(k, p, TrialState.COMPLETED, objective(p))
    return (time.process_time() - start) / asks


def optuna_tpe_cost(n: int, asks: int) -> float:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {name: optuna.distributions.FloatDistribution(0.0, 1.0) for name in SPACE}
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, constant_liar=True, multivariate=True))
    for snap in history(n):
        study.add_trial(optuna.trial.create_trial(params=snap.params, distributions=dists, value=snap.value))
    start = time.process_time()
    for i in range(asks + 1):
        if i == 1:
            start = time.process_time()
        trial = study.ask(dists)
        study.tell(trial, objective(trial.params))
    return (time.process_time() - start) / asks


def driver_windows(trials: int, method: str, windows: list[tuple[int, int]]) -> list[float]:
    """ms of wall time per trial of a real sweep (2 workers, no-op trials) within each window of trial ends."""
    import sys
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from overhead import NOOP, sweep

    from sweeplab.store import Store

    with tempfile.TemporaryDirectory() as d:
        store_dir = Path(d) / "s"
        sweep(NOOP, trials, method=method, store_dir=store_dir, name="scale")
        store = Store.open(store_dir, readonly=True)
        ends = [r[0] for r in store.conn.execute("SELECT ended FROM attempts ORDER BY ended")]
        store.close()
    return [(ends[hi - 1] - ends[lo]) / (hi - 1 - lo) * 1000 for lo, hi in windows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--asks", type=int, default=20)
    parser.add_argument("--gp", type=int, nargs="*", default=None, help="GP history sizes (e.g. 100 300)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--driver", type=int, default=0, metavar="N",
                        help="also run real N-trial sweeps (tpe, random; 2 workers, no-op trials) and print the "
                             "wall ms per trial over trials 0-200 and the last 200")
    args = parser.parse_args()
    if args.driver:
        windows = [(0, 200), (args.driver - 200, args.driver)]
        for method in ("random", "tpe"):
            first, last = driver_windows(args.driver, method, windows)
            print(f"driver, {method}: {first:.2f} ms per trial over trials 0-200, {last:.2f} ms over "
                  f"{args.driver - 200}-{args.driver} ({last / first:.2f}x)")

    print(f"CPU ms per ask+tell after n finished trials (median of {args.repeats}; 4-d space; "
          f"{args.asks} asks after an untimed first)")
    print(f"  {'n':>6} {'random':>8} {'tpe':>8} {'optuna tpe':>11} {'tpe/optuna':>11}")
    for n in args.sizes:   # interleaved: each repeat measures every configuration once
        rows: dict[str, list[float]] = {"random": [], "tpe": [], "optuna": []}
        for _ in range(args.repeats):
            rows["random"].append(sweeplab_cost("random", n, args.asks))
            rows["tpe"].append(sweeplab_cost("tpe", n, args.asks))
            rows["optuna"].append(optuna_tpe_cost(n, args.asks))
        med = {k: statistics.median(v) * 1000 for k, v in rows.items()}
        print(f"  {n:>6} {med['random']:>8.2f} {med['tpe']:>8.2f} {med['optuna']:>11.2f}"
              f" {med['tpe'] / med['optuna']:>11.2f}")
    for n in args.gp or []:
        cost = statistics.median(sweeplab_cost("gp", n, 5) for _ in range(args.repeats))
        print(f"  gp after {n} trials: {cost:.3f} CPU s per ask+tell")


if __name__ == "__main__":
    main()
