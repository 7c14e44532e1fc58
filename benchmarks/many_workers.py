"""Many workers (issue 18, item 3): does the driver keep 32 and 64 local workers, and 64 Ray slots, busy?

    python benchmarks/many_workers.py                     # 32 and 64 local workers, 1 s sleep trials, 6 rounds
    python benchmarks/many_workers.py --workers 8 32 --seconds 0.5
    python benchmarks/many_workers.py --ray               # + 64 Ray slots (4 nodes x 16 CPUs) vs Ray Tune
    python benchmarks/many_workers.py --ray --workers --nodes 2 --cpus-per-node 4   # Ray part only, small

Each sweep runs rounds x workers trials that sleep --seconds (on 2 cores this measures the driver, not
compute). Efficiency is measured in the steady state, from the trials' end times: between the end of the
first round (all workers booted and busy) and the start of the last, `ended` trials must take
count x seconds / workers of wall time; efficiency = that ideal / the measured span (1.0 = no worker ever
waits for the driver). The floor is the same sweep with 2 workers, measured in the same run. Also printed:
the driver process's CPU per trial (spawning the workers included), which machine load does not inflate:
flat across worker counts means the driver's work per trial does not grow with the number of workers.

With --ray: a simulated multi-node cluster (`ray.cluster_utils.Cluster`: a head without CPUs and --nodes
nodes of --cpus-per-node logical CPUs, all on this machine), and on it, in this order, the same sleep
sweep through sweeplab's Ray backend (one slot per CPU), then Ray Tune (`tune.Tuner`, a function trainable
sleeping --seconds, one CPU per trial, as many trials at once as there are slots, actors reused). Before
each, Ray's worker pool is warmed (one idle worker process per slot). Ray's slots boot staggered (tens of
seconds for 64 processes on 2 cores), so the end of round 1 is no boundary there: the steady state runs
from when every slot has finished a trial to when the last trial starts, and efficiency = the
trial-seconds run in it / (slots x its length) (`slot_efficiency`; a slot is the process that ran the
trial, end times as the trials recorded them). Also printed: the memory the cluster took at its peak.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from overhead import SLEEP, sweep

from sweeplab.store import Store

_OBJECT_STORE = 100 * 2**20   # per simulated node: the trials pass nothing big


def efficiency(ends: list[float], workers: int, seconds: float) -> float:
    """Steady-state efficiency from the trials' sorted end times (see the module docstring)."""
    ends = sorted(ends)
    lo, hi = workers - 1, len(ends) - workers - 1   # the end of round 1 .. the last end before the final round
    return (hi - lo) * seconds / workers / (ends[hi] - ends[lo])


def slot_efficiency(ends: list[tuple[Any, float]], seconds: float) -> float | None:
    """Steady-state efficiency from (slot, end time) pairs, for slots that boot staggered (Ray: tens of
    seconds for 64 worker processes on 2 cores, so the end of "round 1" is no boundary). The window opens
    when every slot has finished a trial (all booted) and closes when the last trial starts (from then on
    slots idle because the queue is empty): efficiency = the trial-seconds run inside the window / (slots x
    its width). None when the window is empty (boot took the whole run: raise --rounds)."""
    firsts: dict[Any, float] = {}
    for slot, end in ends:
        firsts[slot] = min(end, firsts.get(slot, end))
    lo = max(firsts.values())
    hi = max(end for _, end in ends) - seconds
    if hi <= lo:
        return None
    busy = sum(max(0.0, min(end, hi) - max(end - seconds, lo)) for _, end in ends)
    return busy / (len(firsts) * (hi - lo))


def store_ends(store_dir: Path, name: str) -> list[float]:
    store = Store.open(store_dir, readonly=True)
    ends = [r[0] for r in store.conn.execute(
        "SELECT a.ended FROM attempts a JOIN trials t ON t.id = a.trial_id JOIN sweeps s ON s.id = t.sweep_id "
        "WHERE s.name = ? ORDER BY a.ended", (name,))]
    store.close()
    return ends


def steady_efficiency(store_dir: Path, name: str, workers: int, seconds: float) -> float:
    return efficiency(store_ends(store_dir, name), workers, seconds)


def run_local(args: argparse.Namespace, tmp: Path) -> None:
    for workers in [2, *args.workers]:
        name = f"w{workers}"
        cpu = time.process_time()
        wall, _, _ = sweep(SLEEP, workers * args.rounds, workers=workers, store_dir=tmp / name, name=name,
                           config={"seconds": args.seconds})
        cpu = (time.process_time() - cpu) / (workers * args.rounds)
        eff = steady_efficiency(tmp / name, name, workers, args.seconds)
        ideal = args.rounds * args.seconds
        print(f"  {workers:>3} workers: steady efficiency {eff:.3f} (target >= 0.98); whole sweep {wall:.2f} s "
              f"vs ideal {ideal:.1f} s once booted; driver process CPU {cpu * 1000:.2f} ms per trial")


# ------------------------------------------------------------------------------------ Ray
class MemoryPeak:
    """The lowest MemAvailable seen (sampled every 0.5 s on a thread) while in use: memory at the peak."""

    def __init__(self) -> None:
        self.start = self.low = self._available()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _available() -> int:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.low = min(self.low, self._available())

    def __enter__(self) -> MemoryPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def used(self) -> float:
        """GiB taken at the peak, over what was in use when sampling began."""
        return (self.start - self.low) / 2**30


@contextmanager
def ray_cluster(nodes: int, cpus: int) -> Iterator[Any]:
    """A head without CPUs (nothing runs beside the drivers) and `nodes` nodes of `cpus` logical CPUs."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "object_store_memory": _OBJECT_STORE})
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=cpus, object_store_memory=_OBJECT_STORE)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def _hold(seconds: float) -> None:
    time.sleep(seconds)


def warm_pool(slots: int) -> float:
    """Start one Ray worker process per slot (a task holding one CPU each) and leave them idle in Ray's
    pool, where the next actors are placed: the peers' actors then start as fast on a cluster whose workers
    are up, and 64 Python processes booting on 2 cores (tens of seconds, staggered) stay out of both
    measures. Returns the seconds it took (not counted)."""
    import ray

    t0 = time.perf_counter()
    hold = ray.remote(num_cpus=1)(_hold)
    ray.get([hold.remote(0.5) for _ in range(slots)])
    return time.perf_counter() - t0


def run_sweeplab_ray(slots: int, args: argparse.Namespace, tmp: Path) -> tuple[float | None, float]:
    """sweeplab's Ray backend: (steady efficiency, whole-sweep wall time). A slot is its worker's pid
    (each actor keeps one worker process from trial to trial)."""
    from sweeplab.backends.ray import RayBackend

    name = f"ray{slots}"
    backend = RayBackend(workers=slots, resources={"cpus": 1})
    wall, _, _ = sweep(SLEEP, slots * args.rounds, workers=slots, store_dir=tmp / name, name=name,
                       config={"seconds": args.seconds}, backend=backend)
    store = Store.open(tmp / name, readonly=True)
    ends = [(r[0], r[1]) for r in store.conn.execute(
        "SELECT a.pid, a.ended FROM attempts a JOIN trials t ON t.id = a.trial_id JOIN sweeps s ON s.id = t.sweep_id "
        "WHERE s.name = ?", (name,))]
    store.close()
    return slot_efficiency(ends, args.seconds), wall


def _tune_sleep(config: dict[str, Any]) -> dict[str, float]:
    time.sleep(float(config["seconds"]))
    return {"loss": float(config["x"]), "end": time.time(), "pid": os.getpid()}


def run_tune(slots: int, args: argparse.Namespace, tmp: Path) -> tuple[float | None, float] | str:
    """Ray Tune on the same cluster: (steady efficiency, whole-run wall time), or why it could not run.
    With `reuse_actors=True` (Tune's default is False: a new actor, a new process, per trial; in an 8-slot
    trial run that took 102 s for 48 one-second trials), so a slot is its actor's pid."""
    try:
        from ray import tune
    except ImportError as exc:
        return f"ray.tune unavailable ({exc}); install 'ray[tune]' (pandas, pyarrow, ...)"
    tuner = tune.Tuner(
        tune.with_resources(_tune_sleep, {"cpu": 1}),
        param_space={"x": tune.uniform(0.0, 1.0), "seconds": args.seconds},
        tune_config=tune.TuneConfig(num_samples=slots * args.rounds, max_concurrent_trials=slots,
                                    reuse_actors=True),
        run_config=tune.RunConfig(storage_path=str(tmp / "tune"), name="sleep", verbose=0),
    )
    t0 = time.perf_counter()
    results = tuner.fit()
    wall = time.perf_counter() - t0
    if results.num_errors:
        return f"{results.num_errors} Ray Tune trials failed"
    ends = [(r.metrics["pid"], r.metrics["end"]) for r in results]
    return slot_efficiency(ends, args.seconds), wall


def run_ray(args: argparse.Namespace, tmp: Path) -> None:
    slots = args.nodes * args.cpus_per_node
    rows: dict[str, tuple[float | None, float] | str] = {}
    with MemoryPeak() as mem:
        t0 = time.perf_counter()
        with ray_cluster(args.nodes, args.cpus_per_node):
            print(f"  Ray cluster: {args.nodes} nodes x {args.cpus_per_node} CPUs = {slots} slots, started in "
                  f"{time.perf_counter() - t0:.1f} s (not counted)")
            print(f"  Ray worker pool warmed in {warm_pool(slots):.1f} s (not counted)")
            rows["sweeplab ray"] = run_sweeplab_ray(slots, args, tmp)
            ours = mem.used()
            print(f"  Ray worker pool warmed in {warm_pool(slots):.1f} s (not counted)")
            rows["ray tune (reuse_actors=True)"] = run_tune(slots, args, tmp)
    print(f"\n  {slots} slots, {slots * args.rounds} trials of sleep({args.seconds}):  steady efficiency   whole run")
    for label, row in rows.items():
        if isinstance(row, str):
            print(f"  {label:30} {row}")
        else:
            eff = "n/a (boot took the run)" if row[0] is None else f"{row[0]:.3f}"
            print(f"  {label:30} {eff:>17} {row[1]:10.1f} s")
    mine, theirs = rows["sweeplab ray"], rows["ray tune (reuse_actors=True)"]
    if isinstance(mine, tuple) and isinstance(theirs, tuple) and mine[0] and theirs[0]:
        print(f"  efficiency sweeplab / ray tune: {mine[0] / theirs[0]:.2f}x (target: sweeplab >= 0.95)")
    print(f"  memory at peak (MemAvailable fell by): {ours:.1f} GiB with sweeplab's {slots} actors and their "
          f"{slots} worker processes up, {mem.used():.1f} GiB over the whole Ray part")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="*", default=[32, 64],
                        help="local worker counts (none: skip the local part)")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--ray", action="store_true", help="also the Ray part: sweeplab's Ray backend vs Ray Tune")
    parser.add_argument("--nodes", type=int, default=4, help="simulated Ray nodes (--ray)")
    parser.add_argument("--cpus-per-node", type=int, default=16, help="logical CPUs per Ray node (--ray)")
    args = parser.parse_args()
    print(f"sleep({args.seconds}) trials, {args.rounds} rounds per sweep, steady-state efficiency "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.workers:
            run_local(args, tmp)
        if args.ray:
            run_ray(args, tmp)


if __name__ == "__main__":
    main()
