"""Checkpoint benchmark: what CheckpointManager.save costs, and how much work each frequency policy loses.

1. Overhead of `CheckpointManager.save` for a ~100 MB state against a bare `torch.save` (when torch imports)
   and a bare file write of the same bytes, measured in the same run (median of --repeat runs). The manager
   adds a sha256 of the payload, an fsync of file and directory, a rename and a manifest.
2. Simulation of a long job with exponential failures (mean time between failures M) and a fixed
   checkpoint cost C: expected total time, checkpoint overhead and lost (re-done) work for
   `checkpoint_every: auto` (Young/Daly sqrt(2 C M), from the measured cost and the observed failure rate)
   versus fixed intervals. The policy itself (`CheckpointPolicy`) decides, on a fake clock.

    python benchmarks/checkpoint.py            # 100 MB, 3 repeats, full simulation
    python benchmarks/checkpoint.py --quick    # 20 MB, fewer simulated runs
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from sweeplab._clock import FakeClock
from sweeplab.checkpoint import CheckpointManager, CheckpointPolicy, young_daly_interval


# ------------------------------------------------------------------------------------------ save overhead
def _timed(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _bare_write(path: str, data: bytes, fsync: bool) -> None:
    with open(path, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def save_overhead(mb: int, repeat: int) -> None:
    try:
        import torch
    except ImportError:
        torch = None
    n = mb * (1 << 20) // 4
    rng = np.random.default_rng(0)
    array = rng.standard_normal(n, dtype=np.float32)
    data = array.tobytes()
    work = tempfile.mkdtemp(prefix="sweeplab-bench-")
    rows: list[tuple[str, float]] = []
    try:
        target = os.path.join(work, "bare.bin")
        rows.append(("bare file write (no fsync)", _timed(lambda: _bare_write(target, data, False), repeat)))
        rows.append(("bare file write + fsync", _timed(lambda: _bare_write(target, data, True), repeat)))
        mgr_bytes = CheckpointManager(os.path.join(work, "ck-bytes"), keep=2)
        step = iter(range(10**6))
        rows.append(("CheckpointManager.save(bytes)", _timed(lambda: mgr_bytes.save(data, next(step)), repeat)))
        if torch is not None:
            state = {"model": {"weight": torch.from_numpy(array)}, "epoch": 3}
            rows.append(("bare torch.save", _timed(lambda: torch.save(state, target), repeat)))
            mgr_torch = CheckpointManager(os.path.join(work, "ck-torch"), keep=2)
            rows.append(("CheckpointManager.save(torch)", _timed(lambda: mgr_torch.save(state, next(step)), repeat)))
            rows.append(("bare torch.load", _timed(lambda: torch.load(target, weights_only=True), repeat)))
            rows.append(("CheckpointManager.latest() (verify+load)", _timed(mgr_torch.latest, repeat)))
        else:
            print("(torch not importable: torch rows skipped)")
        rows.append(("CheckpointManager.latest() bytes", _timed(mgr_bytes.latest, repeat)))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    base = dict(rows)
    print(f"\n## save overhead, {mb} MB state, median of {repeat}")
    print(f"{'operation':44s} {'seconds':>9s} {'MB/s':>8s}")
    for name, sec in rows:
        print(f"{name:44s} {sec:9.3f} {mb / sec:8.0f}")
    print("\nratios")
    pairs = [("CheckpointManager.save(bytes)", "bare file write + fsync"),
             ("CheckpointManager.save(bytes)", "bare file write (no fsync)"),
             ("CheckpointManager.save(torch)", "bare torch.save"),
             ("CheckpointManager.latest() (verify+load)", "bare torch.load")]
    for a, b in pairs:
        if a in base and b in base:
            print(f"  {a} / {b}: {base[a] / base[b]:.2f}x")


# -------------------------------------------------------------------------------------- lost-work simulation
def simulate(make_policy: Callable[[FakeClock, float | None], CheckpointPolicy], *, work: float, mtbf: float,
             cost: float, restart: float, dt: float, rng: np.random.Generator) -> dict[str, float]:
    """One job of `work` seconds of compute; returns wall time, checkpoint overhead, lost work, failures."""
    clock = FakeClock()
    t = progress = saved = overhead = lost = 0.0
    failures = 0
    next_fail = rng.exponential(mtbf)
    policy = make_policy(clock, None)
    step = 0
    while progress < work:
        end_compute = t + dt
        if end_compute > next_fail:  # dies while computing
            lost += (next_fail - t) + (progress - saved)
        else:
            t, progress, step = end_compute, progress + dt, step + 1
            clock.advance(dt)
            if not policy.due(step):
                continue
            if t + cost <= next_fail:
                t += cost
                overhead += cost
                clock.advance(cost)
                saved = progress
                policy.record(step, cost)
                continue
            lost += (next_fail - t) + (progress - saved)  # dies while checkpointing
        failures += 1
        clock.advance(max(next_fail + restart - t, 0.0))
        t = next_fail + restart
        progress = saved
        next_fail = t + rng.exponential(mtbf)
        policy = make_policy(clock, t / failures)  # a new attempt knows the observed failure rate
    return {"wall": t, "overhead": overhead, "lost": lost, "failures": failures}


def lost_work(cost: float, runs: int) -> None:
    hours = 3600.0
    work, restart, dt = 48 * hours, 60.0, 10.0
    fixed = [60.0, 300.0, 1800.0, 7200.0]
    print(f"\n## lost work: a {work / hours:.0f} h job, checkpoint cost {cost:.0f} s, restart {restart:.0f} s, "
          f"exponential failures, mean of {runs} runs")
    print(f"{'MTBF':>6s} {'policy':22s} {'wall h':>8s} {'ckpt h':>7s} {'lost h':>7s} {'waste %':>8s} {'fails':>6s}")
    for mtbf in (1 * hours, 6 * hours, 24 * hours):
        oracle = young_daly_interval(cost, mtbf)  # knows the true MTBF in advance
        policies: list[tuple[str, Callable[[FakeClock, float | None], CheckpointPolicy]]] = [
            ("auto", lambda c, m: CheckpointPolicy("auto", clock=c, mtbf=m)),
            (f"oracle YD {oracle / 60:.0f} min", lambda c, m, yd=oracle: CheckpointPolicy(yd, clock=c)),
        ] + [(f"every {s / 60:g} min", lambda c, m, s=s: CheckpointPolicy(s, clock=c)) for s in fixed]
        for name, make in policies:
            rng = np.random.default_rng(1234)  # the same failure draws for every policy
            results = [simulate(make, work=work, mtbf=mtbf, cost=cost, restart=restart, dt=dt, rng=rng)
                       for _ in range(runs)]
            mean = {k: statistics.fmean(r[k] for r in results) for k in results[0]}
            waste = 100 * (mean["wall"] - work) / work
            print(f"{mtbf / hours:5.0f}h {name:22s} {mean['wall'] / hours:8.2f} {mean['overhead'] / hours:7.2f} "
                  f"{mean['lost'] / hours:7.2f} {waste:8.1f} {mean['failures']:6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20, help="simulated jobs per policy and MTBF")
    parser.add_argument("--cost", type=float, default=30.0, help="simulated checkpoint cost, seconds")
    parser.add_argument("--quick", action="store_true", help="20 MB, 5 simulated runs")
    args = parser.parse_args()
    if args.quick:
        args.mb, args.runs = 20, 5
    save_overhead(args.mb, args.repeat)
    lost_work(args.cost, args.runs)


if __name__ == "__main__":
    main()
