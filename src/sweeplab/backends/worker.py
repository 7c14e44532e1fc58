"""The worker: runs trials in a process of its own and streams their events back.

`python -m sweeplab.backends.worker` reads commands as JSON lines on stdin
    {"op": "run", "task": {...TrialTask...}}   {"op": "stop", "trial": id}   {"op": "exit"}
    {"op": "go", "trial": id, "step": n}       (the trial waiting at decision step n goes on)
    {"op": "preload", "modules": [...]}        (import the libraries the trial's code imports, before it)
and writes events (backends/events.py) as JSON lines to the file descriptor named by SWEEPLAB_EVENT_FD.
A worker runs one trial at a time and is reused for the next one (cheap), unless the trial was a command
(it ran in a child process anyway), it was preempted, or its memory grew past a limit: then it exits and
the backend starts a fresh one. A trial that crashes the interpreter (segfault, os._exit) takes only this
process down; the backend turns that into a FAILED event.

This module is that process's main and nothing else: running an attempt is backends/attempt.py, the event
pipe's one writer backends/channel.py. The Ray backend's actors start these workers through a one-slot local
backend.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import stat
import threading
from typing import Any

from sweeplab._exit import exit_now
from sweeplab.backends.attempt import execute
from sweeplab.backends.base import TrialTask
from sweeplab.backends.channel import Channel, EventWriter
from sweeplab.backends.events import CHANNEL_CLOSED, CHANNEL_CLOSED_REASON, EventKind
from sweeplab.backends.execution import Execution, RssWatch, control_stream, import_libraries
from sweeplab.profiling import rss

__all__ = ["main"]


def _preload() -> None:
    """Import what every trial needs before the first task (profiling and psutil come later, lazily:
    the sampler starts after a second and `run.track` imports its tracker on first use)."""
    with contextlib.suppress(Exception):
        import sweeplab.config  # noqa: F401


#: what a worker started by its own trial says (it has no event pipe, no commands: nothing to serve)
RERUN = ("sweeplab: this process is a copy of a trial's worker, started again by the trial's own code as its "
          "main program (as Lightning's strategy='ddp' with devices > 1 starts each further rank in a trial of one "
          "process); it has no sweeplab backend to serve and ends. Let sweeplab start a multi-process trial's "
          "processes: `resources: {workers: N}` in the spec, and for Lightning "
          "`L.Trainer(**sweeplab.integrations.lightning.trainer_options())` (docs/integrations.md)")


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _pipe(fd: int, ino: int) -> bool:
    """Whether `fd` is still the pipe `ino` (one a backend gave this worker, unless a trial closed it; its
    number may then name another file the process opened since)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return stat.S_ISFIFO(st.st_mode) and st.st_ino == ino


# ---------------------------------------------------------------------------------------- process main
def _utf8_output() -> None:
    """A trial's stdout and stderr are its log file, written as UTF-8 (what `sweeplab logs`, the dashboard
    and `repro` read), whatever the terminal the sweep started from could show: the C locale without UTF-8
    coercion or PYTHONIOENCODING=ascii would make `print("naïve")` in a trial raise UnicodeEncodeError."""
    import codecs
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if not codecs.lookup(stream.encoding or "ascii").name.startswith("utf"):
                stream.reconfigure(encoding="utf-8", errors="backslashreplace")   # type: ignore[union-attr]


def main() -> int:
    with contextlib.suppress(Exception):   # a segfault's Python stack goes to fd 2: the trial's log
        faulthandler.enable()
    fd = int(os.environ["SWEEPLAB_EVENT_FD"])
    if not _open(fd):   # not started by a backend: a trial ran its main program again (it inherited the environment)
        import sys

        print(RERUN, file=sys.stderr, flush=True)
        return 1
    _utf8_output()
    out = EventWriter.for_fd(fd)   # every channel on the pipe shares it
    commands = control_stream()   # trials see an empty stdin
    current: list[Execution | None] = [None]
    tasks: list[TrialTask | None] = []
    preloads: list[list[str]] = []   # libraries to import before the next trial (preload.trial_imports)
    have_task = threading.Condition()
    sigterm = {"got": False}

    def on_sigterm(signum: int, frame: Any) -> None:
        sigterm["got"] = True
        ex = current[0]
        if ex is not None:
            ex.preempted = True
            ex.stop("preempted (SIGTERM)")
            if ex.timer is None:
                ex.timer = threading.Timer(ex.task.grace, _grace_expired, args=(ex,))
                ex.timer.daemon = True
                ex.timer.start()
        else:   # no attempt runs (none yet, or its task is on the way): 143, a preemption (events.died_of_sigterm)
            os._exit(143)

    def _grace_expired(ex: Execution) -> None:
        with contextlib.suppress(Exception):
            ex.channel.send(EventKind.PREEMPTED, {"reason": f"SIGTERM; grace of {ex.task.grace:g}s expired",
                                                  "retire": True})
        if ex.child is not None:
            with contextlib.suppress(Exception):
                os.killpg(ex.child.pid, signal.SIGKILL)
        os._exit(143)

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the driver's to handle

    pipes = {f: os.fstat(f).st_ino for f in (fd, commands.fileno())}   # to tell a pipe a trial closed

    def closed_by_trial() -> None:
        """End the worker with CHANNEL_CLOSED when the trial closed (or replaced) one of its pipes: no event
        can say so, the exit code does (local.py)."""
        if all(_pipe(f, ino) for f, ino in pipes.items()):
            return
        with contextlib.suppress(Exception):
            os.write(2, f"sweeplab: {CHANNEL_CLOSED_REASON}\n".encode())
        os._exit(CHANNEL_CLOSED)

    def reader() -> None:
        with contextlib.suppress(OSError):   # OSError: the control pipe's descriptor was closed under it
            if commands_until_exit():
                return
        closed_by_trial()
        # stdin closed without "exit": the driver died. An orphan must not go on writing checkpoints
        # beside the attempt a resumed driver will start, so it ends now, with its command children.
        ex = current[0]
        if ex is not None and ex.child is not None:
            with contextlib.suppress(Exception):
                os.killpg(ex.child.pid, signal.SIGKILL)
        os._exit(1)

    def commands_until_exit() -> bool:
        """Act on the driver's commands; True at "exit", False when the stream ends without it."""
        for line in commands:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            op = msg.get("op")
            if op == "run":
                with have_task:
                    tasks.append(TrialTask.from_dict(msg["task"]))
                    have_task.notify()
            elif op == "preload":
                with have_task:
                    preloads.append([str(m) for m in msg.get("modules") or ()])
                    have_task.notify()
            elif op == "go":
                ex = current[0]
                if ex is not None and ex.task.trial_id == msg.get("trial"):
                    ex.go(int(msg.get("step", -1)))
            elif op == "stop":
                ex = current[0]
                if ex is not None and ex.task.trial_id == msg.get("trial"):
                    ex.stop(msg.get("reason") or "stop requested")
                else:
                    with have_task:   # a stop that overtook its task: mark it
                        for t in tasks:
                            if t is not None and t.trial_id == msg.get("trial"):
                                tasks.remove(t)
                                Channel(out, t).send(EventKind.FINISHED, {"metrics": {}, "stopped": True})
                                break
            elif op == "exit":
                with have_task:
                    tasks.append(None)
                    have_task.notify()
                return True
        return False

    threading.Thread(target=reader, daemon=True, name="sweeplab-control").start()
    _preload()
    watch = RssWatch(rss() or 0)
    while True:
        with have_task:
            while not tasks and not preloads:
                have_task.wait()
            modules = preloads.pop(0) if preloads else None
            task = tasks.pop(0) if modules is None else None
        if modules is not None:
            import_libraries(modules)
            watch = RssWatch(rss() or 0)   # the libraries are part of the worker, not a trial's growth
            continue
        if task is None:
            return 0
        try:
            ex = execute(task, Channel(out, task), current, watch)
        except OSError:
            closed_by_trial()
            raise
        if ex.preempted or sigterm["got"] or ex.retiring:
            return 0   # the backend saw "retire" in the last event and starts a fresh worker


def _exit(code: int) -> None:
    """End the process without the interpreter's teardown (freeing every module of a process that ran
    numpy or torch takes tens of milliseconds, which the driver would wait for at the end of each sweep):
    atexit handlers of user code and libraries still run, and standard streams are flushed."""
    exit_now(code)


if __name__ == "__main__":
    _exit(main())
