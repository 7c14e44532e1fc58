"""CPU per no-op trial on each side of the local backend, measured inside one process each.

On a shared machine, other processes inflate the wall time of `overhead.py` far more than the CPU time one
process spends on its own work, so the per-trial path is compared here by CPU time (the minimum over repeats):
  * worker: a function trial's attempt as a worker runs it: the task decoded from the JSON line the local
    backend sends, `execute` (log redirection and header, config, Run, events written to /dev/null);
  * driver: `Driver.run` against an inline backend that answers each task at once with STARTED + FINISHED
    (the task encoded as LocalBackend encodes it, the events decoded as it decodes them), SQLite included.
With 2 workers on 2 cores, wall time per trial follows the larger of the driver's CPU and half the total.

`--against DIR` measures another checkout's sweeplab (DIR/src) in the same run, interleaved with this one,
and prints the ratios. Issue 13's bound (within 5 % of the start of the refactor) is checked with
`git worktree add /tmp/base 0509559` and `--against /tmp/base`.

    python benchmarks/per_trial_cost.py [--against DIR] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOOP = f"{HERE / '_noop.py'}:noop"


def _sweep(store_dir: Path, trials: int, backend: object = None, name: str = "s") -> None:
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    raw = {"function": NOOP, "method": "random", "seed": 0, "metric": {"name": "loss", "goal": "minimize"},
           "budget": {"trials": trials}, "parameters": {"x": {"min": 0.0, "max": 1.0}}}
    store = Store.open(store_dir)
    b = backend or LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[]))
    driver = Driver(parse_spec(raw, file="<benchmark>"), store, b, sweep_name=name, overrides=[])
    driver.create(spec_path=None)
    driver.run()
    store.close()


def worker_side(tmp: Path, repeats: int, per: int = 500) -> list[float]:
    from sweeplab.backends import local
    from sweeplab.backends.base import TrialTask

    try:
        from sweeplab.backends.attempt import execute
        from sweeplab.backends.channel import Channel
        from sweeplab.backends.execution import RssWatch
        extra: tuple[object, ...] = (RssWatch(0),)
    except ImportError:   # an older tree: one worker module
        from sweeplab.backends.worker import Channel, execute  # type: ignore[attr-defined,no-redef]
        extra = (0,)
    lines: list[str] = []
    send = local.LocalBackend._send

    def recording(self, worker, msg):  # type: ignore[no-untyped-def]
        if msg.get("op") == "run":
            lines.append(json.dumps(msg, separators=(",", ":")))
        return send(self, worker, msg)

    local.LocalBackend._send = recording  # type: ignore[method-assign]
    _sweep(tmp / "w", 50)   # the tasks a real sweep sends
    null = os.open(os.devnull, os.O_WRONLY)

    def write(data: bytes) -> None:
        os.write(null, data)

    current: list[object] = [None]

    def attempt(i: int) -> None:
        task = TrialTask.from_dict(json.loads(lines[i % len(lines)])["task"])
        execute(task, Channel(write, task), current, *extra)

    for i in range(len(lines)):
        attempt(i)   # warm
    out = []
    for _ in range(repeats):
        c0 = time.process_time()
        for i in range(per):
            attempt(i)
        out.append((time.process_time() - c0) / per * 1e6)
    return out


def driver_side(tmp: Path, repeats: int, trials: int = 1000) -> list[float]:
    from sweeplab.backends.base import Backend
    from sweeplab.backends.events import Event, EventKind, decode, encode

    host = socket.gethostname()

    class Inline(Backend):
        name = "local"

        def __init__(self) -> None:
            self.queue: list[bytes] = []
            self.busy: dict[int, object] = {}

        def start(self) -> None: ...
        def free_slots(self) -> int: return 2 - len(self.busy)
        def capacity(self) -> int: return 2
        def running(self) -> list[int]: return list(self.busy)
        def stop(self, trial_id: int, reason: str = "") -> None: ...
        def preempt(self, trial_id: int) -> None: ...
        def kill(self, trial_id: int, reason: str) -> None: ...
        def shutdown(self, *, grace: float = 0.0) -> None: ...

        def submit(self, task) -> None:  # type: ignore[no-untyped-def]
            d = task.to_dict()
            d["env"] = {**task.env, "SWEEPLAB_SLOT": "0"}
            json.dumps({"op": "run", "task": d}, separators=(",", ":")).encode()
            self.busy[task.trial_id] = task
            now = time.time()
            self.queue.append(
                encode(Event(EventKind.STARTED, task.trial_id, task.attempt, now, {"pid": 1, "host": host}))
                + encode(Event(EventKind.FINISHED, task.trial_id, task.attempt, now,
                               {"metrics": {"loss": float(task.config["x"])}, "stopped": False, "retire": False})))

        def poll(self, timeout: float) -> list[Event]:
            if not self.queue:
                return []
            events = [decode(line) for line in self.queue.pop(0).splitlines()]
            self.busy.pop(events[0].trial, None)
            return events

    import contextlib

    from sweeplab.driver import Driver
    from sweeplab.store import Store

    # nothing driven by the clock (WAL checkpoint thread, progress line), the same in every tree
    Store.background_checkpoints = lambda self, interval=0.5: contextlib.nullcontext()  # type: ignore[method-assign]
    Driver._progress = lambda self, force=False: None  # type: ignore[method-assign]
    _sweep(tmp / "warm", 50, Inline(), "warm")
    out = []
    for r in range(repeats):
        c0 = time.process_time()
        _sweep(tmp / f"d{r}", trials, Inline(), f"d{r}")
        out.append((time.process_time() - c0) / trials * 1e6)
    return out


def measure(src: Path, side: str, repeats: int) -> float:
    """The minimum CPU µs per trial of `side`, in a fresh process importing sweeplab from `src`."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cp = subprocess.run([sys.executable, __file__, "--side", side, "--repeats", str(repeats)], env=env,
                        capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return min(json.loads(cp.stdout.splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", type=Path, help="another checkout (its src/ is measured too)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (each a fresh process per tree)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--side", choices=["worker", "driver"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:   # a measuring child
        with tempfile.TemporaryDirectory(prefix="sweeplab-cost-") as tmp:
            fn = worker_side if args.side == "worker" else driver_side
            print(json.dumps(fn(Path(tmp), args.repeats)))
        return
    trees = {"this": HERE.parent / "src"}
    if args.against:
        trees["against"] = args.against.resolve() / "src"
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for side in ("worker", "driver"):
            for name, src in trees.items():
                value = measure(src, side, args.repeats)
                best[name, side] = min(best.get((name, side), value), value)
    print(f"CPU per no-op trial, minimum of {args.rounds} rounds x {args.repeats} repeats (µs):")
    for side in ("worker", "driver"):
        row = "  ".join(f"{name} {best[name, side]:6.1f}" for name in trees)
        ratio = f"  ratio {best['this', side] / best['against', side]:.3f}" if args.against else ""
        print(f"  {side:6s}  {row}{ratio}")
    if args.against:
        total = {n: best[n, "worker"] + best[n, "driver"] for n in trees}
        print(f"  both    this {total['this']:6.1f}  against {total['against']:6.1f}  ratio "
              f"{total['this'] / total['against']:.3f}")


if __name__ == "__main__":
    main()
