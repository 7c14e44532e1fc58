"""Running one attempt of a trial: STARTED, then the function, the command or the ranks, then its end.

The same `execute` serves every process that runs trials: a worker (backends/worker.py, also inside the Ray
backend's actors, whose one-slot local backend starts workers) and each rank of a multi-process trial
(backends/rank.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket

from sweeplab.backends.base import TrialTask
from sweeplab.backends.channel import Channel
from sweeplab.backends.command_trial import execute_command
from sweeplab.backends.events import EventKind
from sweeplab.backends.execution import Execution, RssWatch, heartbeat_thread
from sweeplab.backends.function_trial import execute_function
from sweeplab.backends.multiproc import execute_ranks

__all__ = ["execute"]


@functools.cache
def _hostname() -> str:
    return socket.gethostname()


def execute(task: TrialTask, channel: Channel, current: list[Execution | None],
            rss_watch: RssWatch | None = None) -> Execution:
    """Run one attempt to its end, sending STARTED ... FINISHED | FAILED | PREEMPTED."""
    ex = Execution(task, channel)
    ex.rss_watch = rss_watch
    current[0] = ex
    channel.send(EventKind.STARTED, {"pid": os.getpid(), "host": _hostname()})
    heartbeat = heartbeat_thread()
    heartbeat.attach(ex)
    try:
        if task.world_size > 1:   # several processes for one trial (function or command): supervise them
            execute_ranks(ex)
        elif task.kind == "command":
            execute_command(ex)
        else:
            execute_function(ex)
    finally:
        heartbeat.detach()
        with ex.lock:
            ex.ended = True
            sampler, ex.sampler = ex.sampler, None
        if sampler is not None:
            with contextlib.suppress(Exception):
                sampler.stop()
        if ex.timer is not None:
            ex.timer.cancel()
        current[0] = None
    return ex

