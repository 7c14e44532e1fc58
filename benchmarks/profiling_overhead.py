"""Profiling overhead: StepTracker per step and SystemSampler per sample, as a fraction of a step.

Target: < 1% of step time for steps of 1 ms and more.

1. Tracker: the per-step cost of `for x in tracker.track(it)` over a bare `for x in it` (trivial body, many
   steps, best of several runs), then that cost as a fraction of a 1 ms and a 10 ms step (a NumPy matmul loop
   calibrated to that duration). An end-to-end comparison of the matmul loop with and without the tracker is
   printed too; on a busy machine its noise is larger than the effect.
2. Sampler: CPU time of one `SystemSampler.sample()` call, as a fraction of the 1 s sampling interval (the
   share of one core it takes), and an end-to-end run of the matmul loop with a sampler at 1 s and at 0.1 s.

    python benchmarks/profiling_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: step times comparable run to run
os.environ.setdefault("OMP_NUM_THREADS", "1")

import statistics
import time
from collections.abc import Callable

import numpy as np

from sweeplab.profiling import StepTracker, SystemSampler


def _best(fn: Callable[[], float], repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def _tracker_cost(items: list, repeat: int) -> float:
    """Seconds per step that `StepTracker.track` adds to a bare loop over `items`."""

    def bare() -> float:
        t0 = time.perf_counter()
        for _ in items:
            pass
        return time.perf_counter() - t0

    def tracked() -> float:
        tracker = StepTracker()
        t0 = time.perf_counter()
        for _ in tracker.track(items):
            pass
        return time.perf_counter() - t0

    return max(_best(tracked, repeat) - _best(bare, repeat), 0.0) / len(items)


def tracker_cost_per_step(steps: int, repeat: int) -> float:
    return _tracker_cost(list(range(steps)), repeat)


def tracker_cost_with_arrays(steps: int, repeat: int) -> float:
    """Same, with batches whose size is detected: a tuple (x, y) of arrays."""
    batch = (np.zeros((32, 8)), np.zeros(32))
    return _tracker_cost([batch] * steps, repeat)


def matmul_step(target: float) -> tuple[Callable[[], None], float]:
    """A step function of about `target` seconds: one square matmul, size calibrated."""
    n = 64
    while True:
        a = np.random.default_rng(0).standard_normal((n, n))
        t0 = time.perf_counter()
        for _ in range(5):
            a @ a
        dt = (time.perf_counter() - t0) / 5
        if dt >= target or n > 4096:
            break
        n = int(n * min(2.0, max(1.05, (target / max(dt, 1e-7)) ** (1 / 3))))

    def step() -> None:
        a @ a

    return step, dt


def loop(step: Callable[[], None], steps: int, *, tracked: bool) -> float:
    items = [(np.zeros((32, 8)), np.zeros(32))] * steps
    t0 = time.perf_counter()
    it = StepTracker().track(items) if tracked else items
    for _ in it:
        step()
    return (time.perf_counter() - t0) / steps


def sampler_cost(samples: int) -> tuple[float, float]:
    """CPU seconds of one sample, and of one psutil rescan of the process tree (0.0 where the kernel has
    /proc/PID/task/TID/children: the tree is then listed by each sample, whose cost includes it)."""
    sampler = SystemSampler(lambda batch: None, interval=3600.0)
    sampler.start()
    try:
        sampler.sample()
        cpu0 = time.process_time()
        for _ in range(samples):
            sampler.sample()
        cached = (time.process_time() - cpu0) / samples
        if sampler._proc_children:
            return cached, 0.0
        cpu0 = time.process_time()
        for _ in range(samples):
            sampler._tree_cache = None  # force the /proc scan that happens every TREE_REFRESH seconds
            sampler._tree()
        return cached, (time.process_time() - cpu0) / samples
    finally:
        sampler.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    steps, repeat = (50_000, 3) if args.quick else (300_000, 5)
    loop_steps = 200 if args.quick else 1000

    per_step = tracker_cost_per_step(steps, repeat)
    per_step_arrays = tracker_cost_with_arrays(steps, repeat)
    print("## StepTracker")
    print(f"per-step cost, int items:           {per_step * 1e6:7.2f} us")
    print(f"per-step cost, (x, y) array batches: {per_step_arrays * 1e6:7.2f} us")
    for target in (1e-3, 1e-2):
        step, dt = matmul_step(target)
        ratio = per_step_arrays / dt
        verdict = "ok" if ratio < 0.01 else "ABOVE TARGET"
        print(f"step of {dt * 1e3:6.2f} ms: tracker overhead {100 * ratio:.3f}% of the step (target < 1%: {verdict})")
        n = max(20, int(loop_steps * 1e-3 / target))
        bare = statistics.median(loop(step, n, tracked=False) for _ in range(3))
        tracked = statistics.median(loop(step, n, tracked=True) for _ in range(3))
        print(f"    end to end: bare {bare * 1e3:.3f} ms/step, tracked {tracked * 1e3:.3f} ms/step "
              f"({100 * (tracked - bare) / bare:+.2f}%, noise included)")

    print("\n## SystemSampler")
    cost, scan = sampler_cost(50 if args.quick else 200)
    if scan:
        print(f"CPU time per sample: {cost * 1e3:.3f} ms, plus a process-tree scan of {scan * 1e3:.3f} ms "
              f"every {SystemSampler.TREE_REFRESH:g} s")
    else:
        print(f"CPU time per sample: {cost * 1e3:.3f} ms, listing the process tree from /proc children")
    for interval in (1.0, 0.1):
        share = cost / interval + scan / max(SystemSampler.TREE_REFRESH, interval)
        verdict = "ok" if share < 0.01 else "ABOVE TARGET"
        print(f"at a {interval:g} s interval: {100 * share:.3f}% of one core (target < 1%: {verdict})")
    step, dt = matmul_step(1e-2)
    n = 100 if args.quick else 400
    bare = statistics.median(loop(step, n, tracked=False) for _ in range(3))
    with SystemSampler(lambda batch: None, interval=0.1):
        sampled = statistics.median(loop(step, n, tracked=False) for _ in range(3))
    print(f"end to end, {dt * 1e3:.1f} ms steps: bare {bare * 1e3:.3f} ms, with a 0.1 s sampler "
          f"{sampled * 1e3:.3f} ms ({100 * (sampled - bare) / bare:+.2f}%, noise included)")


if __name__ == "__main__":
    main()
