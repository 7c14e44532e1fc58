"""One rank of a multi-process trial: `python -m sweeplab.backends.rank`, started by backends/multiproc.py.

It reads its task (one JSON line) from stdin, runs it through `attempt.execute` with the torchrun variables
its supervisor set, obeys `{"op": "stop"}` and `{"op": "go", "step": n}` lines, and writes its events to
the fd named by SWEEPLAB_EVENT_FD.
It exits when its supervisor goes away (stdin closes), and gets SIGKILL from the kernel if it dies.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from sweeplab.backends.attempt import execute
from sweeplab.backends.base import TrialTask
from sweeplab.backends.channel import Channel, EventWriter
from sweeplab.backends.execution import Execution, control_stream

__all__ = ["main"]


def main() -> int:
    """One rank: read the task from stdin, run it, obey stop lines; exit when the supervisor goes away."""
    with contextlib.suppress(Exception):   # a segfault's Python stack goes to fd 2: the trial's log
        faulthandler.enable()
    out = EventWriter.for_fd(int(os.environ["SWEEPLAB_EVENT_FD"]))
    commands = control_stream()   # the trial sees an empty stdin
    task = TrialTask.from_dict(json.loads(commands.readline()))
    current: list[Execution | None] = [None]

    def on_sigterm(signum: int, frame: Any) -> None:
        ex = current[0]
        if ex is None:
            os._exit(143)
        ex.preempted = True
        ex.stop("preempted (SIGTERM)")

    def control() -> None:
        for line in commands:
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
                if msg.get("op") == "go":   # rank 0 reported at a decision step: the verdict is "go on"
                    ex = current[0]
                    if ex is not None:
                        ex.go(int(msg.get("step", -1)))
                elif msg.get("op") == "stop":
                    for _ in range(500):   # the stop may overtake the start of the attempt
                        ex = current[0]
                        if ex is not None:
                            ex.stop("stop requested")
                            break
                        time.sleep(0.01)
        os._exit(1)   # the supervisor is gone: an orphan rank must not go on

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=control, daemon=True, name="sweeplab-rank-control").start()
    execute(task, Channel(out, task), current)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)   # skip interpreter teardown (process groups, CUDA): the result is already sent


if __name__ == "__main__":
    sys.exit(main())
