"""`run.log` throughput: a trial logs 1,000,000 points (250,000 steps x 4 metrics) through a real worker,
pipe, driver and SQLite store. Prints points/s inside the trial (what the training loop pays) and end to
end (until every point is stored), against the target of 100,000 points/s per trial.

    python benchmarks/logging_throughput.py
"""

from __future__ import annotations

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

POINTS = 1_000_000


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sweeplab-log-"))
    spec = parse_spec({"function": f"{HERE / '_noop.py'}:log_points", "method": "grid",
                       "metric": {"name": "loss", "goal": "minimize"},
                       "parameters": {"points": {"value": POINTS}}}, file="<benchmark>")
    store = Store.open(tmp)
    driver = Driver(spec, store, LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[])), sweep_name="log")
    driver.create(spec_path=None)
    t0 = time.perf_counter()
    driver.run()
    wall = time.perf_counter() - t0
    row = store.conn.execute("SELECT metrics FROM trials").fetchone()
    import json

    inside = json.loads(row[0])["seconds"]
    stored = store.conn.execute("SELECT count(*) FROM metrics").fetchone()[0]
    print(f"{stored:,} points stored (of {POINTS:,})")
    print(f"inside the trial: {POINTS / inside:,.0f} points/s ({inside:.2f}s; target >= 100,000)")
    print(f"end to end (worker -> pipe -> driver -> SQLite): {POINTS / wall:,.0f} points/s ({wall:.2f}s)")


if __name__ == "__main__":
    main()
