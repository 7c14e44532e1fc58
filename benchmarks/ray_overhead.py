"""Per-trial overhead on a Ray cluster: sweeplab's Ray backend vs its local backend vs Ray Tune.

In one run, on one local Ray cluster (2 CPUs), the same no-op trial function 100 times, 2 at a time:
  * sweeplab's Ray backend through the backend API (actors reused across trials);
  * sweeplab's local backend (worker processes on this machine, no Ray) as the reference;
  * Ray Tune (`tune.Tuner`, one CPU per trial, 2 concurrent trials) on the same cluster.
For each: time to the first result (from the start of the backend / `Tuner.fit`), wall time, and the
per-trial overhead in slot-seconds (wall x concurrency / trials: a no-op trial's whole cost is overhead),
then the ratios. Ray Tune needs the `ray[tune]` extras (pandas, pyarrow...); without them its row says so.

    python benchmarks/ray_overhead.py [--trials 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweeplab.backends.base import Backend, TrialTask
from sweeplab.backends.events import EventKind

NOOP = f"{HERE / '_noop.py'}:noop"
WORKERS = 2


def _task(tmp: Path, i: int) -> TrialTask:
    base = tmp / f"t{i}"
    return TrialTask(trial_id=i, number=i, attempt=1, sweep="bench", kind="function", target=NOOP,
                     config={"x": i / 100}, params={"x": i / 100}, log_path=str(base / "1.log"),
                     checkpoint_dir=str(base / "ckpt"), capture_dir=str(base / "cap"), cwd=str(tmp),
                     heartbeat_interval=30.0)


def run_backend(make: Callable[[], Backend], trials: int) -> dict[str, float]:
    """Start the backend, run `trials` no-op trials, return timings (seconds)."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t0 = time.perf_counter()
        backend = make()
        backend.start()
        started = time.perf_counter() - t0
        first: float | None = None
        submitted = done = 0
        t1 = time.perf_counter()
        try:
            while done < trials:
                while submitted < trials and backend.free_slots() > 0:
                    backend.submit(_task(tmp, submitted))
                    submitted += 1
                for ev in backend.poll(0.05):
                    if ev.kind.ends_attempt:
                        if ev.kind is not EventKind.FINISHED:
                            raise RuntimeError(f"trial {ev.trial} ended {ev.kind.value}: {ev.data}")
                        done += 1
                        if first is None:
                            first = time.perf_counter() - t0
        finally:
            wall = time.perf_counter() - t1
            backend.shutdown()
    return {"start": started, "first": first or float("nan"), "wall": wall,
            "per_trial": wall * WORKERS / trials}


def run_tune(trials: int) -> dict[str, float] | str:
    try:
        from ray import tune
    except ImportError as exc:
        return f"ray.tune unavailable ({exc}); install 'ray[tune]' (pandas, pyarrow, ...)"
    import _noop

    stamps: dict[str, float] = {}

    class First(tune.Callback):
        def on_trial_complete(self, iteration: int, trials: Any, trial: Any, **info: Any) -> None:
            stamps.setdefault("first", time.perf_counter())

    def trainable(config: dict[str, Any]) -> dict[str, float]:
        return _noop.noop(config, None)

    with tempfile.TemporaryDirectory() as d:
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),
            param_space={"x": tune.uniform(0.0, 1.0)},
            tune_config=tune.TuneConfig(num_samples=trials, max_concurrent_trials=WORKERS),
            run_config=tune.RunConfig(storage_path=d, name="bench", verbose=0, callbacks=[First()]),
        )
        t0 = time.perf_counter()
        results = tuner.fit()
        wall = time.perf_counter() - t0
    if results.num_errors:
        return f"{results.num_errors} Ray Tune trials failed"
    return {"start": 0.0, "first": stamps.get("first", t0) - t0, "wall": wall, "per_trial": wall * WORKERS / trials}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100)
    args = ap.parse_args()

    import ray

    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.backends.ray import RayBackend

    rows: dict[str, dict[str, float] | str] = {}
    rows["sweeplab local"] = run_backend(lambda: LocalBackend(plan_slots(WORKERS, cpus=0, gpus=0, gpu_ids=[])),
                                         args.trials)
    t0 = time.perf_counter()
    ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False, configure_logging=False)
    print(f"local Ray cluster started in {time.perf_counter() - t0:.1f}s (not counted below)")
    try:
        rows["sweeplab ray"] = run_backend(lambda: RayBackend(workers=WORKERS, resources={"cpus": 1}),
                                           args.trials)
        rows["ray tune"] = run_tune(args.trials)
    finally:
        ray.shutdown()

    print(f"\n{args.trials} no-op trials, {WORKERS} at a time")
    print(f"{'':16} {'backend start':>13} {'first result':>13} {'wall':>8} {'overhead/trial':>15}")
    for name, r in rows.items():
        if isinstance(r, str):
            print(f"{name:16} {r}")
            continue
        print(f"{name:16} {r['start']:12.2f}s {r['first']:12.2f}s {r['wall']:7.2f}s {r['per_trial'] * 1e3:12.1f} ms")
    ours, local, tune_row = rows["sweeplab ray"], rows["sweeplab local"], rows["ray tune"]
    assert isinstance(ours, dict) and isinstance(local, dict)
    print(f"\nsweeplab ray / sweeplab local overhead: {ours['per_trial'] / local['per_trial']:.1f}x")
    if isinstance(tune_row, dict):
        ratio = tune_row["per_trial"] / ours["per_trial"]
        print(f"ray tune / sweeplab ray overhead:       {ratio:.1f}x (target >= 5x)")
        print(f"time to first result, tune / sweeplab ray: {tune_row['first'] / ours['first']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
