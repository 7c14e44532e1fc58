"""One attempt in progress inside a worker or rank process, and what watches it.

`Execution` is what `stop`, SIGTERM and the heartbeat act on; the heartbeat thread (one per process) sends
the held STARTED event, starts the CPU/memory sampler and tells the driver the trial is alive; `RssWatch`
says when a worker grew too much to take the next trial; `log_header` is the first lines of every trial's log;
`LogCap` keeps that log under `trial.log_max`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from sweeplab.backends.base import TrialTask
from sweeplab.backends.channel import Channel, fd_writer
from sweeplab.backends.events import EventKind
from sweeplab.profiling import UsageMark, profile_summary, rss
from sweeplab.run import Run

__all__ = ["Execution", "LogCap", "RssWatch", "control_stream", "heartbeat_thread", "log_header", "redirect_output",
           "send_profile"]

_RSS_GROWTH_LIMIT = 1 << 30   # recycle the worker when a trial left it this much bigger
_RSS_CHECK_EVERY = 0.25     # ... looked at after a trial, at most this often (s)
_SAMPLER_DELAY = 1.0          # a trial gets CPU/memory sampling once it has run this long
_STARTED_DELAY = 0.05         # STARTED waits this long to share a write with the next event


class RssWatch:
    """A worker's memory against its size before the first trial (owned by the worker's main loop)."""

    def __init__(self, baseline: int) -> None:
        self.baseline = baseline
        self._checked = -_RSS_CHECK_EVERY

    def grown(self) -> bool:
        """Whether this process grew past the limit (looks at /proc at most once per interval: many short
        trials cost one look)."""
        now = time.monotonic()
        if now - self._checked < _RSS_CHECK_EVERY:
            return False
        self._checked = now
        size = rss()
        return size is not None and size - self.baseline > _RSS_GROWTH_LIMIT


class _Heartbeat(threading.Thread):
    """One thread per worker process, watching the attempt in progress (a thread per trial would cost a
    context switch at every start).

    It sends the held STARTED event after 50 ms, starts the system sampler once the attempt has run for a
    second (listing a process tree costs a few milliseconds, which would dominate short trials), then tells
    the driver the process is alive every `heartbeat_interval` and sends metrics a quiet trial kept buffered.
    """

    _TICK = 0.05

    def __init__(self) -> None:
        super().__init__(daemon=True, name="sweeplab-heartbeat")
        self._lock = threading.Lock()
        self._ex: Execution | None = None
        self._t0 = self._next = 0.0
        self._flushed = self._sampling = False

    def attach(self, ex: Execution) -> None:
        with self._lock:
            self._ex, self._t0 = ex, time.monotonic()
            self._next = self._t0 + ex.task.heartbeat_interval
            self._flushed = self._sampling = False

    def detach(self) -> None:
        with self._lock:
            self._ex = None

    def run(self) -> None:
        while True:
            time.sleep(self._TICK)
            with self._lock:
                ex = self._ex
                if ex is None:
                    continue
                now = time.monotonic()
                flush = not self._flushed and now - self._t0 >= _STARTED_DELAY
                sample = not self._sampling and now - self._t0 >= _SAMPLER_DELAY
                beat = now >= self._next
                self._flushed |= flush
                self._sampling |= sample
                if beat:
                    self._next = now + ex.task.heartbeat_interval
            with contextlib.suppress(OSError):
                if flush:
                    ex.channel.flush()
                if sample:
                    with ex.lock:
                        if not ex.ended:
                            ex.sampler = _start_sampler(ex.channel)
                if beat and ex.alive():
                    with ex.lock:   # never after the attempt's end: send_profile sets `ended` before it
                        if not ex.ended:
                            ex.channel.send(EventKind.HEARTBEAT)
                cap = ex.log_cap
                if cap is not None:   # a function trial's log, which its process writes directly
                    cap.check()
                if ex.run is not None and ex.run.has_stale(1.0):   # checked every tick, not only at a beat:
                    with ex.lock:                                  # the last points before a hang or a long
                        if not ex.ended:                           # computation reach the monitors in ~1 s
                            ex.run.flush_if_stale(1.0)


_heartbeat: _Heartbeat | None = None


def heartbeat_thread() -> _Heartbeat:
    global _heartbeat
    if _heartbeat is None:
        _heartbeat = _Heartbeat()
        _heartbeat.start()
    return _heartbeat


class LogCap:
    """Keeps a trial's log under `limit` bytes (`trial.log_max`), as Ray's log rotation and Kubernetes'
    container log limit keep theirs, but in one file that still reads as the trial's log: its beginning (the
    first quarter of the cap, cut at a line's end: the header, the config, the first lines), one marker line
    saying how many bytes were dropped there, and its latest output (the last lines, the traceback).

    Past the cap, the part after the marker is cut to its last half, in place: copied forward over the dropped
    part, then the file truncated where the copy ends. The writer keeps appending (O_APPEND: after the
    truncation its next write lands at the new end): a command trial's copier checks after its writes, a function
    trial's heartbeat thread 20 times a second and once at the trial's end, so its log may pass the cap by what
    it prints in 50 ms until then. What the program writes while a cut copies may be lost (the marker says so).

    It looks at the log by its path (one stat) and holds no descriptor between cuts: a trial that closes every
    descriptor it did not open (a daemon's closerange) cannot take one from it, nor leave it one of its own.
    A cut opens its own read-write descriptor (an O_APPEND one cannot write in place)."""

    MARKER_ROOM = 512    # bytes kept free for the marker line
    #: the least cap (spec/limits.py refuses less): the end kept after a cut (3/8 of the cap) must hold what a
    #: command's stdout copier had yet to write (its 64 KB pipe, a 64 KB read) when the program's traceback
    #: came on stderr; with less, a last burst of stdout could push the traceback out
    MIN = 1 << 20

    def __init__(self, path: str, limit: int) -> None:
        self.path, self.limit = path, max(limit, self.MIN)
        self.dropped = 0
        self.closed = False
        self._head = -1        # where the kept beginning ends
        self._body = 0         # where what follows the marker starts
        self._lock = threading.Lock()

    def check(self) -> int:
        """Cut the log if it is over the cap; its size after (-1 when it cannot be looked at)."""
        with self._lock:
            if self.closed:
                return -1
            try:
                size = os.stat(self.path).st_size
                if size <= self.limit:
                    return size
                fd = os.open(self.path, os.O_RDWR)
                try:
                    return self._cut(fd)
                finally:
                    os.close(fd)
            except OSError:   # a log that cannot be cut (its disk full, removed) stays as it is, from here on
                self.closed = True
                return -1

    def holding(self) -> threading.Lock:
        """Held, no cut runs: what sweeplab itself writes to the log (a trial's traceback) cannot be lost to one."""
        return self._lock

    def close(self) -> None:
        """Stop watching: a check after this does nothing."""
        with self._lock:
            self.closed = True

    def marker(self, dropped: int) -> bytes:
        """The line that stands where `dropped` bytes of output were taken out."""
        return (f"# sweeplab: {dropped:,} bytes of output dropped here (trial.log_max: {_size(self.limit)}"
                " keeps a log's beginning and its latest output; lines printed during a cut may be missing)\n"
                ).encode()

    def _cut(self, fd: int) -> int:
        size = os.fstat(fd).st_size
        if size <= self.limit:
            return size
        if self._head < 0:   # the beginning kept: the cap's first quarter, to its last line's end
            first = os.pread(fd, self.limit // 4, 0)
            self._head = first.rfind(b"\n") + 1 or len(first)
            self._body = self._head
        keep = max(0, (self.limit - self._head - self.MARKER_ROOM) // 2)
        src = size - keep
        start = os.pread(fd, min(keep, 65536), src)   # what is kept starts at a line's start when one is near
        newline = start.find(b"\n")
        if 0 <= newline < len(start) - 1:
            src += newline + 1
        dropped = self.dropped + src - self._body
        lead = b"" if self._head == 0 or os.pread(fd, 1, self._head - 1) == b"\n" else b"\n"
        mark = lead + self.marker(dropped)
        os.pwrite(fd, mark, self._head)
        dst = self._head + len(mark)
        for _ in range(64):   # forward, in pieces: the copy never overtakes what it has yet to read
            while src < size:
                chunk = os.pread(fd, min(1 << 20, size - src), src)
                if not chunk:
                    break
                os.pwrite(fd, chunk, dst)
                src += len(chunk)
                dst += len(chunk)
            grown = os.fstat(fd).st_size   # what the program appended meanwhile follows
            if grown <= size:
                break
            size = grown
        os.ftruncate(fd, dst)
        self.dropped, self._body = dropped, self._head + len(mark)
        return dst


def _size(n: int) -> str:
    """`n` bytes as trial.log_max is written: 64KB, 100MB, 1.5GB."""
    for shift, unit in ((30, "GB"), (20, "MB"), (10, "KB")):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.4g}{unit}"
    return f"{n} bytes"


_made_dirs: set[str] = set()   # log directories known to exist (one mkdir per directory, not per trial)
_std_saved: tuple[int, int] | None = None   # copies of this process's own fds 1 and 2, made once


@contextlib.contextmanager
def redirect_output(log_path: str, header: bytes = b"", log_max: int = 0):  # type: ignore[no-untyped-def]
    """Send fds 1 and 2 (print, C extensions, subprocesses) to the trial's log file, which starts with
    `header` (log_header). The process's own fds 1 and 2 are copied once and put back after each trial.

    Yields the log's `LogCap` when `log_max` caps it (else None): the caller has the heartbeat thread check it
    while the trial runs; it is checked once more here, at the end, after the streams are flushed."""
    global _std_saved
    if not log_path:
        yield None
        return
    parent = os.path.dirname(log_path)
    if parent not in _made_dirs:
        Path(parent).mkdir(parents=True, exist_ok=True)
        _made_dirs.add(parent)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if _std_saved is None:
        _std_saved = (os.dup(1), os.dup(2))
    saved = _std_saved
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if header:
        with contextlib.suppress(OSError):
            fd_writer(log_fd)(header)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    cap = LogCap(log_path, log_max) if log_max > 0 else None
    try:
        yield cap
    finally:
        with cap.holding() if cap is not None else contextlib.nullcontext():   # its last lines, not during a cut
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
        if cap is not None:
            cap.check()
            cap.close()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)


def import_libraries(names: Sequence[str]) -> list[str]:
    """Import each of `names` (preload.trial_imports), skipping those that fail; the names that failed. What
    the imports print is thrown away: a library's import-time warnings belong to no trial's log."""
    from sweeplab.backends.preload import import_all

    with redirect_output(os.devnull):
        return import_all(names)


def control_stream() -> BinaryIO:
    """The driver's (or supervisor's) command lines, read from a private copy of fd 0; fd 0 itself becomes
    /dev/null. Call before anything reads sys.stdin. A function trial runs in this process: reading stdin it
    gets EOF (as a command trial does, and as under W&B's agent) instead of taking the commands; and a
    process it forks may close its inherited sys.stdin (multiprocessing's children do, torch DataLoader
    workers among them) without waiting forever for the lock a blocked command reader held at the fork."""
    fd = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return os.fdopen(fd, "rb")


class Execution:
    """One attempt in progress inside this process (what `stop` and SIGTERM act on)."""

    def __init__(self, task: TrialTask, channel: Channel) -> None:
        self.task = task
        self.channel = channel
        self.run: Run | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.liveness: Any = None          # a command program's signs of life (_tree.Liveness)
        self.output = 0                    # ... lines it printed so far
        self.preempted = False
        self.stop_requested = False
        self.timer: threading.Timer | None = None
        self.rss_watch: RssWatch | None = None   # a reusable worker's memory watch (not a rank's)
        self.retiring = False
        self.sampler: Any = None
        self.child_rss = 0                 # peak RSS of a command trial's program, once it was waited for
        self.child_cpu = 0.0               # ... and its CPU seconds
        self.usage = UsageMark()           # CPU and memory of a trial too short for the sampler
        self.lock = threading.Lock()
        self.ended = False
        self.relay_go: Callable[[int], None] | None = None   # a multi-process trial: `go` to its rank 0
        self.log_cap: LogCap | None = None  # a function trial's log cap, checked by the heartbeat thread

    def go(self, step: int) -> None:
        """The driver's verdict at decision step `step`: continue. To this process's Run, or to rank 0 of a
        multi-process trial (whose Run is the one that reports and waits)."""
        if self.run is not None:
            self.run.go(step)
        elif self.relay_go is not None:
            self.relay_go(step)

    def decide_retire(self) -> bool:
        """Whether this worker should exit after the attempt (preempted, or grown by a leak). Called once, as
        the attempt ends (it may look at /proc): the answer is kept in `retiring` for the worker's main loop."""
        if self.preempted:
            self.retiring = True
        elif self.task.kind == "function" and self.rss_watch is not None:
            self.retiring = self.retiring or self.rss_watch.grown()
        return self.retiring

    def alive(self) -> bool:
        """Whether to send a heartbeat now: always for a function trial (this process is the trial); for a
        command trial only if its program showed a sign of life since the last beat (backends/_tree.py)."""
        liveness = self.liveness
        return liveness is None or liveness.check(self.output)

    def stop(self, reason: str) -> None:
        self.stop_requested = True
        if self.run is not None:
            self.run.request_stop(reason)
        child = self.child
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGTERM)


def _start_sampler(channel: Channel) -> Any:
    """CPU %, RSS (and GPU via NVML) of this worker and its children, sampled once a second."""
    try:
        from sweeplab.profiling import SystemSampler

        sampler = SystemSampler(lambda samples: channel.send(EventKind.SYSTEM, {"samples": samples}),
                                interval=1.0, flush_every=5)
        sampler.start()
        return sampler
    except Exception:
        return None


def send_profile(ex: Execution) -> None:
    """Stop the sampler and send the per-trial profile summary (step timings + system figures + hint)."""
    with contextlib.suppress(Exception):
        steps = (ex.run.profile_summary() if ex.run is not None else None) or {}
        system: dict[str, Any] = {}
        with ex.lock:
            ex.ended = True
            sampler, ex.sampler = ex.sampler, None
        if sampler is not None:
            sampler.stop(reaped_rss=ex.child_rss)   # its final sample covers the trial's last moments
            system = sampler.peak()
        if not system.get("system_samples"):   # ended before the sampler's first sample: one look at the end
            sample = ex.usage.final_sample(ex.child_rss, ex.child_cpu)
            system = UsageMark.summary(sample) if sample is not None else {}
        if steps or system.get("system_samples"):
            ex.channel.send(EventKind.PROFILE, {"summary": profile_summary(steps, system)})


_ENV_SHOWN = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_slot_env: dict[str, str] | None = None             # _ENV_SHOWN as the backend set them for this process
_function_tails: dict[tuple[Any, ...], bytes] = {}  # a function trial's header after its first line
_TAILS_KEPT = 64


def _slot_vars() -> dict[str, str]:
    """The variables of _ENV_SHOWN the backend set for this process's slot, read once, before any trial ran
    (a trial may change them in os.environ; the header says what sweeplab set)."""
    global _slot_env
    if _slot_env is None:
        _slot_env = {k: os.environ[k] for k in _ENV_SHOWN if k in os.environ}
    return _slot_env


class WorkdirError(Exception):
    """The trial's own working directory (`trial.workdir: trial`) cannot be created where it runs."""


def make_workdir(task: TrialTask) -> None:
    """Create the trial's own working directory (`trial.workdir: trial`: `cwd` differs from `original_cwd`)
    where the trial runs: in the worker, so that on Ray it is made on the trial's node. A full disk is raised
    as the OSError it is (the sweep stops, backends/_diskfull.py); another failure as a WorkdirError naming it."""
    if not (task.original_cwd and task.cwd and task.cwd != task.original_cwd):
        return
    try:
        os.makedirs(task.cwd, exist_ok=True)
    except OSError as exc:
        from sweeplab.backends._diskfull import full_disk_error

        if full_disk_error(exc) is not None:
            raise
        raise WorkdirError(f"cannot create the trial's working directory {task.cwd} (trial.workdir: trial): "
                           f"{exc.strerror or exc}") from None


def log_header(task: TrialTask, *, argv: list[str] | None = None, added: dict[str, str] | None = None) -> bytes:
    """The first lines of every trial's log: how the attempt ran (argv or function, working directory, and
    the environment variables sweeplab set: never the whole environment, which may hold secrets). Values are
    JSON; `sweeplab repro` reads a command trial's back from here.

    A function trial's lines after the first are the same for every trial a worker runs (its function, cwd
    and slot), so they are built once (a no-op trial costs ~0.1 ms in all)."""
    first = f"# sweeplab: sweep {task.sweep}, trial {task.number}, attempt {task.attempt}\n".encode()
    cwd = task.cwd or os.getcwd()
    key = None
    if argv is None and added is None:
        key = (task.target, cwd, *task.env.items())
        tail = _function_tails.get(key)
        if tail is not None:
            return first + tail
    env = dict(_slot_vars())
    env.update(added if added is not None else {k: str(v) for k, v in task.env.items()})
    lines = [f"# argv: {json.dumps(argv)}" if argv is not None else f"# function: {json.dumps(task.target)}",
             f"# cwd: {json.dumps(os.path.abspath(cwd))}", f"# env: {json.dumps(env, sort_keys=True)}"]
    tail = ("\n".join(lines) + "\n").encode()
    if key is not None:
        if len(_function_tails) >= _TAILS_KEPT:
            _function_tails.clear()
        _function_tails[key] = tail
    return first + tail


