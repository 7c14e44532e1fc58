"""Many workers (issue 18, item 3): does the driver keep 32 and 64 local workers busy?

    python benchmarks/many_workers.py                     # 32 and 64 workers, 1 s sleep trials, 6 rounds
    python benchmarks/many_workers.py --workers 8 32 --seconds 0.5

Each sweep runs rounds x workers trials that sleep --seconds (on 2 cores this measures the driver, not
compute). Efficiency is measured in the steady state, from the trials' end times in the store: between the
end of the first round (all workers booted and busy) and the start of the last, `ended` trials must take
count x seconds / workers of wall time; efficiency = that ideal / the measured span (1.0 = no worker ever
waits for the driver). The floor is the same sweep with 2 workers, measured in the same run. Also printed:
the driver process's CPU per trial (spawning the workers included), which machine load does not inflate:
flat across worker counts means the driver's work per trial does not grow with the number of workers.

Not covered here (see docs/benchmarks.md): the Ray backend with 64 slots on a simulated multi-node cluster
against Ray Tune on the same cluster.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from overhead import SLEEP, sweep

from sweeplab.store import Store


def steady_efficiency(store_dir: Path, name: str, workers: int, seconds: float) -> float:
    store = Store.open(store_dir, readonly=True)
    ends = [r[0] for r in store.conn.execute(
        "SELECT a.ended FROM attempts a JOIN trials t ON t.id = a.trial_id JOIN sweeps s ON s.id = t.sweep_id "
        "WHERE s.name = ? ORDER BY a.ended", (name,))]
    store.close()
    lo, hi = workers - 1, len(ends) - workers - 1   # the end of round 1 .. the last end before the final round
    return (hi - lo) * seconds / workers / (ends[hi] - ends[lo])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    print(f"sleep({args.seconds}) trials, {args.rounds} rounds per sweep, steady-state efficiency "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
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


if __name__ == "__main__":
    main()
