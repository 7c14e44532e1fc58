"""Per-trial overhead, parallel efficiency and time to first result of the local backend.

In one run, against the floor measured in the same run:
  * marginal cost per no-op trial with 2 workers (random searcher, every trial durably recorded in SQLite),
    from the difference between a 400- and a 200-trial sweep, versus the same calls through
    concurrent.futures.ProcessPoolExecutor(2) (the floor);
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

from sweeplab.backends.local import LocalBackend, plan_slots
from sweeplab.driver import Driver
from sweeplab.spec import parse_spec
from sweeplab.store import Store

NOOP = f"{HERE / '_noop.py'}:noop"
SLEEP = f"{HERE / '_noop.py'}:sleep_half"


def sweep(function: str, trials: int, *, workers: int = 2, method: str = "random", store_dir: Path,
          name: str, config: dict | None = None) -> tuple[float, Driver, object]:
    raw = {"function": function, "method": method, "seed": 0, "metric": {"name": "loss", "goal": "minimize"},
           "budget": {"trials": trials}, "parameters": {"x": {"min": 0.0, "max": 1.0}}}
    spec = parse_spec(raw, file="<benchmark>")
    store = Store.open(store_dir)
    backend = LocalBackend(plan_slots(workers, cpus=0, gpus=0, gpu_ids=[]))
    overrides = [f"{k}={v}" for k, v in (config or {}).items()]
    driver = Driver(spec, store, backend, sweep_name=name, overrides=overrides)
    driver.create(spec_path=None)
    t0 = time.perf_counter()
    outcome = driver.run()
    wall = time.perf_counter() - t0
    store.close()
    return wall, driver, outcome


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
    code = f"""
import time, psutil, sys
sys.path.insert(0, {str(HERE)!r})
start = psutil.Process().create_time()
from sweeplab.backends.local import LocalBackend, plan_slots
from sweeplab.driver import Driver
from sweeplab.spec import parse_spec
from sweeplab.store import Store
spec = parse_spec({{"function": {NOOP!r}, "method": "random", "seed": 0,
                   "metric": {{"name": "loss", "goal": "minimize"}}, "budget": {{"trials": 4}},
                   "parameters": {{"x": {{"min": 0.0, "max": 1.0}}}}}}, file="<bench>")
first = []
def progress(p):
    if p.counts.get("completed") and not first:
        first.append(time.time() - start)
d = Driver(spec, Store.open({str(store_dir)!r}), LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[])),
           sweep_name="first", on_progress=progress)
d.create(spec_path=None)
d._last_progress = -1e9
d.run()
print(first[0])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


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
    w200, *_ = sweep(NOOP, 200, store_dir=tmp / "a", name="noop200")
    w400, *_ = sweep(NOOP, 400, store_dir=tmp / "b", name="noop400")
    per_trial = (w400 - w200) / 200
    f200, f400 = floor(200), floor(400)
    per_floor = (f400 - f200) / 200
    print("no-op trials, 2 workers (random searcher, durable SQLite store):")
    print(f"  sweeplab   {w200:.3f}s for 200, {w400:.3f}s for 400 -> {per_trial * 1e3:.3f} ms/trial marginal")
    print(f"  floor      ProcessPoolExecutor(2): {per_floor * 1e3:.3f} ms/trial")
    print(f"  ratio      {per_trial / per_floor:.1f}x the floor")
    wall, _, _ = sweep(SLEEP, 20, store_dir=tmp / "c", name="sleep20")
    print(f"sleep(0.5) x 20 on 2 workers: {wall:.3f}s (ideal 5.0 s) -> parallel efficiency {5.0 / wall:.3f}")
    firsts = sorted(first_result(tmp / f"f{i}") for i in range(3))
    print(f"process start -> first completed trial: median {firsts[1]:.3f}s (runs: "
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
