"""Flat cost as sweeps grow (issue 18, item 2): a suggestion's cost at trial 100, 1,000 and 10,000.

    python benchmarks/scale.py                       # trials 100, 1,000, 10,000: random, tpe (+ plain Optuna TPE)
    python benchmarks/scale.py --gp 100 300          # + GP at those sizes (seconds per suggestion)
    python benchmarks/scale.py --reads 1000          # + reads, store size, driver: 100 vs 1,000 trials
    python benchmarks/scale.py --reads 10000 --sizes 100 1000 10000   # the full figures (docs/benchmarks.md)
    python benchmarks/scale.py --reads 10000 --no-search             # the reads part alone

For each history size n the searcher the driver builds is given n finished trials (random points of a 4-d
space with their values, through `replay`, as after a resume) and then asked/told 20 more trials, one at a
time; the figure is driver-process CPU per ask+tell (CPU time, not wall: this machine is shared). The peer
is plain Optuna's TPESampler with the same settings (constant liar, multivariate) on the same history:
sweeplab's TPE models the best 100 trials plus the latest 1,000 others (search/optuna.py, TPE_WINDOW), plain
TPE all of them.

`--reads N` runs two real sweeps (random, 2 workers, trials that log 4 metrics at each of 10 steps): one of
100 trials and one of N, each into its own store, as a user's sweep fills it. From them, in the same run:
- the driver process's CPU per trial over the big sweep's first and last 500 trials (the driver at trial N),
  and the SQLite steps of one trial's store writes at trial 100 and at trial N (free of the machine's load);
- `sweeplab status`, `sweeplab status SWEEP`, `sweeplab best SWEEP` as whole CLI processes (child CPU and
  wall, interleaved between the two stores), and the query functions behind them in-process (CPU);
- the dashboard's API calls that the sweep page makes, in-process through its ASGI app: cold (a new app,
  nothing cached) and warm (the same call again, the store unchanged): the first screen's (sweep, the
  table's first page, keys), every trial's columns for the plots (`trials`, a payload proportional to the
  sweep) and a live refresh's trials changed since its last answer (`trials?since=`);
- store bytes per million metric points: the metrics table and its index (SQLite's dbstat), and the whole
  store file over its metric points.
Ratios are N trials over 100 trials.
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


# ------------------------------------------------------------------------------------ reads and store size
STEPS, KEYS = 10, 4   # each trial of the read stores logs KEYS metrics at each of STEPS steps


def fill(store_dir: Any, trials: int) -> tuple[float, list[tuple[float, int]]]:
    """A real random sweep of `trials` logging trials into `store_dir` (as a user's sweep fills a store),
    2 workers: (wall seconds, [(driver-process CPU seconds, trials ended)] at each progress update)."""
    from pathlib import Path

    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    trial = f"{Path(__file__).resolve().parent / '_scale_trial.py'}:logged"
    spec = parse_spec({"function": trial, "method": "random", "seed": 0, "budget": {"trials": trials},
                       "metric": {"name": "loss", "goal": "minimize"},
                       "parameters": {"x": {"min": 0.0, "max": 1.0}}}, file="<benchmark>")
    samples: list[tuple[float, int]] = []

    def progress(p: Any) -> None:
        samples.append((time.process_time(), sum(n for s, n in p.counts.items() if s not in ("queued", "running"))))

    store = Store.open(store_dir)
    driver = Driver(spec, store, LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[])), sweep_name="scale",
                    overrides=[f"steps={STEPS}"], on_progress=progress)
    driver.create(spec_path=None)
    t0 = time.perf_counter()
    driver.run()
    wall = time.perf_counter() - t0
    store.close()
    return wall, samples


def cpu_per_trial(samples: list[tuple[float, int]], lo: int, hi: int) -> float:
    """Driver CPU ms per trial between the progress updates nearest to `lo` and `hi` trials ended."""
    a = min(samples, key=lambda s: abs(s[1] - lo))
    b = min(samples, key=lambda s: abs(s[1] - hi))
    return (b[0] - a[0]) / max(1, b[1] - a[1]) * 1000


def write_steps(big: int) -> tuple[float, float]:
    """SQLite VM steps per trial of the writes the driver makes for one trial (through the Store API: the
    trial added, its attempt and events, STEPS batches of KEYS metrics with its last step, its end), at trial
    100 and at trial `big` of one store: the write path's cost, free of this machine's load."""
    import tempfile
    from pathlib import Path

    from sweeplab.store import Store

    with tempfile.TemporaryDirectory() as d:
        s = Store.open(Path(d))
        sid = s.create_sweep(name="w", method="random", metric="loss", goal="minimize", spec={}, spec_path=None,
                             seed=0)
        steps = [0]

        def tick() -> int:
            steps[0] += 1
            return 0

        def trial(n: int) -> None:
            with s.transaction():
                tid = s.add_trial(sid, n, {"x": n}, {"x": n}, seed=n, state="running", started=1.0, attempts=1)
                s.add_attempt(tid, 1, started=1.0)
                s.add_event(sid, "trial_started", f"trial {n}", trial_id=tid, attempt=1)
            for step in range(STEPS):
                with s.transaction():
                    s.add_metrics(tid, 1, [(step, key, 0.5, 1.0) for key in ("loss", "val_loss", "acc", "lr")])
                    s.update_trial(tid, last_step=step)
            with s.transaction():
                s.update_attempt(tid, 1, state="completed", ended=2.0)
                s.update_trial(tid, state="completed", value=(n * 7919 % 1000) / 1000, ended=2.0, metrics={"x": 1})
                s.add_event(sid, "trial_ended", f"trial {n}", trial_id=tid, attempt=1)

        out = []
        for n in range(big + 10):
            if n in (100, big):
                steps[0] = 0
                s.conn.set_progress_handler(tick, 1)
            trial(n)
            if n in (109, big + 9):
                s.conn.set_progress_handler(None, 1)
                out.append(steps[0] / 10)
        s.close()
    return out[0], out[1]


def store_bytes(store_dir: Any) -> tuple[int, int, int]:
    """(metric points, bytes of the metrics table + its index, bytes of the whole database file)."""
    import sqlite3
    from pathlib import Path

    db = Path(store_dir) / "store.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    points = conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE tbl_name='metrics'")]
    marks = ",".join("?" * len(names))
    metric_bytes = conn.execute(f"SELECT SUM(pgsize) FROM dbstat WHERE name IN ({marks})", names).fetchone()[0]
    conn.close()
    return points, int(metric_bytes), db.stat().st_size


def cli_cost(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one `sweeplab ...` process, its output to a pipe."""
    import resource
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("sweeplab")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([str(exe), *args], capture_output=True)   # (read as it comes: a pipe never fills)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"sweeplab {' '.join(args)} exited {proc.returncode}: {proc.stderr[-300:]!r}")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def query_cost(store_dir: Any, call: Any, repeats: int) -> float:
    """Median CPU s of `call(store)` on a read-only store (opened once, as a CLI command does)."""
    from sweeplab.store import Store

    store = Store.open(store_dir, readonly=True)
    try:
        times = []
        for _ in range(repeats):
            t0 = time.process_time()
            call(store)
            times.append(time.process_time() - t0)
        return statistics.median(times)
    finally:
        store.close()


def last_seq(store_dir: Any) -> int:
    """The sweep's highest trial change number (`trials.seq`)."""
    from sweeplab.store import Store

    store = Store.open(store_dir, readonly=True)
    try:
        row = store.conn.execute("SELECT seq FROM trials ORDER BY seq DESC LIMIT 1").fetchone()
        return int(row[0]) if row and row[0] is not None else 0
    finally:
        store.close()


def page_calls(trials: int, seq: int = 0) -> list[str]:
    """The API calls of a sweep page's first load and its live poll (dashboard/static/sweep.js, app.js):
    the first screen (sweep, the table's first page, keys), every trial's columns for the plots (`trials`),
    and a live refresh's trials changed since the page's last answer (10 changes: ~5 trials ending)."""
    curves = ",".join(str(n) for n in range(min(trials, 10)))
    return ["/api/sweeps/scale", "/api/sweeps/scale/trials?limit=50", "/api/sweeps/scale/trials",
            f"/api/sweeps/scale/trials?since={max(0, seq - 10)}", "/api/sweeps/scale/keys",
            "/api/sweeps/scale/events?newest=1&limit=200", "/api/sweeps/scale/importance",
            f"/api/sweeps/scale/curves?key=loss&trials={curves}&max_points=600",
            "/api/sweeps/scale/status", "/api/sweeps/scale/best", "/api/changes?sweep=scale"]


def dashboard_steps(store_dir: Any) -> dict[str, float]:
    """SQLite VM steps of the reads behind the sweep page's first screen and a live refresh (free of the
    machine's load): {read: steps}."""
    from sweeplab.store import Store, queries

    seq = last_seq(store_dir)
    reads = {"first page of trials (limit=50)": lambda s: queries.trial_columns(s, "scale", limit=50),
             "keys": lambda s: queries.sweep_metric_keys(s, queries.sweep_id(s, "scale")),
             "trials changed (10 changes)": lambda s: queries.trial_columns(s, "scale", since=max(0, seq - 10)),
             "every trial's columns": lambda s: queries.trial_columns(s, "scale")}
    counter = [0]

    def tick() -> int:
        counter[0] += 1
        return 0

    out = {}
    for label, read in reads.items():
        store = Store.open(store_dir, readonly=True)
        counter[0] = 0
        store.conn.set_progress_handler(tick, 1)
        read(store)
        store.close()
        out[label] = float(counter[0])
    return out


def dashboard_cost(store_dir: Any, trials: int) -> dict[str, tuple[float, float]]:
    """{call: (cold CPU s, warm CPU s)}: each call first on a new app (nothing cached), then 5 times more
    (warm: their median)."""
    from starlette.testclient import TestClient

    from sweeplab.dashboard.app import create_app

    out = {}
    for url in page_calls(trials, last_seq(store_dir)):
        with TestClient(create_app(store_dir, allowed_hosts=None)) as client:
            costs = []
            for _ in range(6):   # the first cold, then 5 warm
                t0 = time.process_time()
                resp = client.get(url)
                costs.append(time.process_time() - t0)
                assert resp.status_code == 200, (url, resp.status_code, resp.text[:200])
        label = url.split("?")[0].removeprefix("/api/sweeps/scale").lstrip("/") or "sweep"
        label += {"limit": " (first page)", "since": " (changed)"}.get(url.partition("?")[2][:5], "")
        out[label] = (costs[0], statistics.median(costs[1:]))
    return out


def reads(big: int, repeats: int) -> None:
    import tempfile
    from pathlib import Path

    from sweeplab.store import queries

    with tempfile.TemporaryDirectory() as d:
        dirs = {n: Path(d) / f"s{n}" for n in (100, big)}
        samples: list[tuple[float, int]] = []
        for n, path in dirs.items():
            wall, samples = fill(path, n)   # the big sweep's, in the end
            print(f"filled a {n}-trial store: a real random sweep, {STEPS} steps x {KEYS} metrics per trial, "
                  f"{wall:.1f} s")
        w = min(500, big // 5)
        first, last = cpu_per_trial(samples, 20, 20 + w), cpu_per_trial(samples, big - w, big)
        print(f"driver CPU per trial (random, 2 workers, logging trials): {first:.2f} ms over trials 20-{20 + w}, "
              f"{last:.2f} ms over {big - w}-{big} ({last / first:.2f}x)")

        at_100, at_big = write_steps(big)
        print(f"store writes of one trial (SQLite VM steps, the driver's writes through the Store API): "
              f"{at_100:.0f} at trial 100, {at_big:.0f} at trial {big:,} ({at_big / at_100:.2f}x)")

        points, metric_bytes, file_bytes = store_bytes(dirs[big])
        print(f"store size: {metric_bytes / points * 1e6 / 2**20:.1f} MiB per million metric points in the "
              f"metrics table and its index; the whole store {file_bytes / points * 1e6 / 2**20:.1f} MiB per "
              f"million ({points:,} points, {file_bytes / 2**20:.1f} MiB, {big:,} trials)")

        print(f"CLI, whole process, output to a pipe (median of {repeats}, interleaved): "
              "CPU s (wall s) at 100 and at {:,} trials".format(big))
        commands = {"status": ["status"], "status SWEEP": ["status", "scale"], "status SWEEP --json":
                    ["status", "scale", "--json"], "best SWEEP": ["best", "scale"]}
        for label, argv in commands.items():
            got: dict[int, list[tuple[float, float]]] = {n: [] for n in dirs}
            for _ in range(repeats):
                for n, path in dirs.items():
                    got[n].append(cli_cost([*argv, "--store", str(path)]))
            cpu = {n: statistics.median(c for _, c in v) for n, v in got.items()}
            wall = {n: statistics.median(w for w, _ in v) for n, v in got.items()}
            print(f"  {label:<20} {cpu[100]:.3f} ({wall[100]:.3f})  {cpu[big]:.3f} ({wall[big]:.3f})  "
                  f"ratio {cpu[big] / cpu[100]:.2f}")

        print(f"queries in-process (CPU ms, median of {max(5, repeats)}) at 100 and at {big:,} trials:")
        calls = {"list_sweeps": lambda s: queries.list_sweeps(s),
                 "sweep_status(limit=20) (status SWEEP)": lambda s: queries.sweep_status(s, "scale", limit=20),
                 "sweep_status, every trial (--json)": lambda s: queries.sweep_status(s, "scale"),
                 "best_trial": lambda s: queries.best_trial(s, "scale"),
                 "sweep_summary": lambda s: queries.sweep_summary(s, "scale")}
        for label, call in calls.items():
            cost = {n: query_cost(path, call, max(5, repeats)) * 1000 for n, path in dirs.items()}
            print(f"  {label:<36} {cost[100]:8.2f} {cost[big]:8.2f}  ratio {cost[big] / max(cost[100], 1e-3):.2f}")

        print(f"dashboard reads, SQLite VM steps (load-free) at 100 and at {big:,} trials:")
        steps = {n: dashboard_steps(path) for n, path in dirs.items()}
        for label in steps[100]:
            print(f"  {label:<34} {steps[100][label]:>10,.0f} {steps[big][label]:>12,.0f}  "
                  f"ratio {steps[big][label] / steps[100][label]:.2f}")

        print(f"dashboard API, the sweep page's calls in-process (CPU ms; cold: a new app; warm: again) "
              f"at 100 and at {big:,} trials:")
        dash = {n: [dashboard_cost(path, n) for _ in range(repeats)] for n, path in dirs.items()}
        for call in dash[100][0]:
            cold = {n: statistics.median(r[call][0] for r in runs) * 1000 for n, runs in dash.items()}
            warm = {n: statistics.median(r[call][1] for r in runs) * 1000 for n, runs in dash.items()}
            print(f"  {call:<22} cold {cold[100]:7.2f} {cold[big]:8.2f} ratio {cold[big] / max(cold[100], 1e-3):6.2f}"
                  f"   warm {warm[100]:6.2f} {warm[big]:7.2f} ratio {warm[big] / max(warm[100], 1e-3):5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--asks", type=int, default=20)
    parser.add_argument("--gp", type=int, nargs="*", default=None, help="GP history sizes (e.g. 100 300)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--driver", type=int, default=0, metavar="N",
                        help="also run real N-trial sweeps (tpe, random; 2 workers, no-op trials) and print the "
                             "wall ms per trial over trials 0-200 and the last 200")
    parser.add_argument("--reads", type=int, default=0, metavar="N",
                        help="also measure status/best/dashboard reads, store size and the driver at 100 vs N "
                             "trials (real sweeps of logging trials)")
    parser.add_argument("--no-search", action="store_true",
                        help="skip the searchers' ask+tell table (with --reads: only the reads part)")
    args = parser.parse_args()
    if args.reads:
        reads(args.reads, args.repeats)
    if args.driver:
        windows = [(0, 200), (args.driver - 200, args.driver)]
        for method in ("random", "tpe"):
            first, last = driver_windows(args.driver, method, windows)
            print(f"driver, {method}: {first:.2f} ms per trial over trials 0-200, {last:.2f} ms over "
                  f"{args.driver - 200}-{args.driver} ({last / first:.2f}x)")

    if args.no_search:
        return
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
