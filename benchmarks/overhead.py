"""Per-trial overhead, parallel efficiency and time to first result of the local backend.

In one run, against the floor measured in the same run:
  * cost per no-op trial with 2 workers (random searcher, every trial durably recorded in SQLite) in the
    steady state: the time between the 100th and the 900th completed trial of a 1000-trial sweep, / 800
    (median of 3 sweeps), versus the same calls through concurrent.futures.ProcessPoolExecutor(2) (the floor);
  * parallel efficiency: 20 trials of sleep(0.5) on 2 workers (ideal 5.0 s);
  * time from process start to the first completed trial (a fresh `python` running a sweep);
  * worker idle time with the model-based searchers (tpe, gp): the fraction of slot-time spent waiting
    for the searcher, with 0.2 s trials.

    python benchmarks/overhead.py            # prints a table; writes nothing outside a temp dir
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweeplab.backends.base import Backend
from sweeplab.backends.local import LocalBackend, plan_slots
from sweeplab.driver import Driver
from sweeplab.spec import parse_spec
from sweeplab.store import Store

NOOP = f"{HERE / '_noop.py'}:noop"
SLEEP = f"{HERE / '_noop.py'}:sleep_half"


def sweep(function: str, trials: int, *, workers: int = 2, method: str = "random", store_dir: Path,
          name: str, config: dict | None = None, warm: bool = False,
          backend: Backend | None = None) -> tuple[float, Driver, object]:
    """Run a sweep (on `backend`, else a local backend of `workers` slots); `warm` starts the workers before
    the clock starts (as the CLI does while it sets up)."""
    raw = {"function": function, "method": method, "seed": 0, "metric": {"name": "loss", "goal": "minimize"},
           "budget": {"trials": trials}, "parameters": {"x": {"min": 0.0, "max": 1.0}}}
    spec = parse_spec(raw, file="<benchmark>")
    store = Store.open(store_dir)
    backend = backend or LocalBackend(plan_slots(workers, cpus=0, gpus=0, gpu_ids=[]))
    overrides = [f"{k}={v}" for k, v in (config or {}).items()]
    driver = Driver(spec, store, backend, sweep_name=name, overrides=overrides)
    driver.create(spec_path=None)
    if warm:
        backend.start()
        time.sleep(1.0)   # let them boot
    t0 = time.perf_counter()
    outcome = driver.run()
    wall = time.perf_counter() - t0
    store.close()
    return wall, driver, outcome


def steady_per_trial(store_dir: Path, name: str, lo: int = 100, hi: int = 900) -> float:
    store = Store.open(store_dir, readonly=True)
    ends = [r[0] for r in store.conn.execute(
        "SELECT a.ended FROM attempts a JOIN trials t ON t.id = a.trial_id JOIN sweeps s ON s.id = t.sweep_id "
        "WHERE s.name = ? ORDER BY a.ended", (name,))]
    store.close()
    return (ends[hi] - ends[lo]) / (hi - lo)


def floor(n: int) -> float:
    with cf.ProcessPoolExecutor(2) as pool:
        list(pool.map(_noop_mod().pool_noop, range(4)))   # warm
        t0 = time.perf_counter()
        list(pool.map(_noop_mod().pool_noop, range(n), chunksize=1))
        return time.perf_counter() - t0


def _noop_mod():
    import _noop

    return _noop


def first_result(store_dir: Path) -> float:
    """Seconds from starting `sweeplab sweep` (a fresh process) to its first completed trial, read from the
    store afterwards (the trial's end as the worker stamped it), so that nothing polls the store meanwhile."""
    spec = store_dir.parent / f"{store_dir.name}.yaml"
    spec.write_text(f"function: {NOOP}\nmethod: random\nseed: 0\nmetric: {{name: loss, goal: minimize}}\n"
                    "budget: {trials: 4}\nparameters:\n  x: {min: 0.0, max: 1.0}\n")
    exe = Path(sys.executable).with_name("sweeplab")
    t0 = time.time()
    subprocess.run([str(exe), "sweep", str(spec), "--store", str(store_dir), "-q", "--workers", "2"],
                   check=True, stdout=subprocess.DEVNULL)
    store = Store.open(store_dir, readonly=True)
    first = store.conn.execute("SELECT min(ended) FROM trials WHERE state = 'completed'").fetchone()[0]
    store.close()
    return float(first) - t0


def idle_fraction(method: str, store_dir: Path, trials: int = 30) -> tuple[float, float]:
    wall, _driver, _ = sweep(SLEEP, trials, method=method, store_dir=store_dir, name=f"idle-{method}",
                            config={"seconds": 0.2})
    store = Store.open(store_dir, readonly=True)
    busy = store.conn.execute(
        "SELECT sum(a.ended - a.started) FROM attempts a JOIN trials t ON t.id = a.trial_id "
        "JOIN sweeps s ON s.id = t.sweep_id WHERE s.name = ?", (f"idle-{method}",)).fetchone()[0]
    store.close()
    return wall, 1.0 - busy / (2 * wall)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sweeplab-bench-"))
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    runs = []
    for i in range(3):
        wall, *_ = sweep(NOOP, 1000, store_dir=tmp / f"a{i}", name=f"noop{i}")
        runs.append((steady_per_trial(tmp / f"a{i}", f"noop{i}"), wall))
    runs.sort()
    per_trial, wall = runs[1]
    per_floor = sorted(floor(1000) / 1000 for _ in range(3))[1]
    print("no-op trials, 2 workers (random searcher, durable SQLite store):")
    print(f"  sweeplab   {per_trial * 1e3:.3f} ms/trial in the steady state (median of 3; "
          f"1000 trials in {wall:.2f}s with start-up)")
    print(f"  floor      ProcessPoolExecutor(2): {per_floor * 1e3:.3f} ms/trial")
    print(f"  ratio      {per_trial / per_floor:.1f}x the floor")
    cold, _, _ = sweep(SLEEP, 20, store_dir=tmp / "c", name="sleep20")
    warm, _, _ = sweep(SLEEP, 20, store_dir=tmp / "w", name="sleep20w", warm=True)
    print(f"sleep(0.5) x 20 on 2 workers (ideal 5.0 s): {warm:.3f}s with workers up -> efficiency {5.0 / warm:.3f};"
          f" {cold:.3f}s counting their start -> {5.0 / cold:.3f}")
    firsts = sorted(first_result(tmp / f"f{i}") for i in range(3))
    print(f"`sweeplab sweep` start -> first completed trial: median {firsts[1]:.3f}s (runs: "
          + ", ".join(f"{x:.3f}" for x in firsts) + ")")
    for method in ("random", "tpe", "gp"):
        try:
            wall, idle = idle_fraction(method, tmp / f"i-{method}")
        except Exception as exc:
            print(f"worker idle with {method}: skipped ({type(exc).__name__}: {exc})")
            continue
        print(f"worker idle with {method:6s}: {idle * 100:5.1f}% of slot time (30 trials of 0.2 s, wall {wall:.2f}s)")


if __name__ == "__main__":
    main()
