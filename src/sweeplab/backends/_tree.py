"""The process tree of a command trial's program: it dies with its attempt, and it is watched for signs of life.

A command trial's program runs in a session of its own (so that a stop's SIGTERM reaches its whole process
group, not the worker). Three things make sure nothing of an attempt outlives it, whichever way it ends:

- `die_with_parent`: the program gets SIGKILL from the kernel when its worker dies (PR_SET_PDEATHSIG);
- the backend records the program's process group (the worker reports it in a PROCESS event) and kills that
  group with the worker on every kill path (trial.timeout, heartbeat, grace period, shutdown);
- a `Reaper`, a small process in a session of its own started just before the program, keeps a list of every
  descendant of the program (also those that start sessions of their own, as torchrun ranks may) and kills
  all of them, with the program's session and group and every process carrying the attempt's mark in its
  environment (`MARK`, inherited by whatever the program starts, even once orphaned), as soon as the
  program exits, the worker closes its pipe at the end of the attempt, or the worker dies. It is what
  reaches grandchildren a SIGKILL to the program's group misses.

`Liveness` tells whether a command program showed a sign of life since the last look: a line on stdout, its
log file (stderr) or report file grew, its checkpoint directory changed, or its process tree used CPU time.
A stopped (SIGSTOP) program is not alive, whatever its files do. The worker sends a HEARTBEAT only then, so
a deadlocked (idle) or stopped program is killed after `trial.heartbeat_timeout` like a frozen worker, while
a program that computes silently for a long epoch is not.

This file runs as a script for the reaper (`python _tree.py - MARK`, the program's pid on its stdin once the
program has started): it imports only psutil there.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["MARK", "Liveness", "Reaper", "die_with_parent", "kill_group", "kill_marked", "new_mark"]

MARK = "SWEEPLAB_ATTEMPT_MARK"   # environment variable naming one attempt's processes (value: new_mark())

_SNAPSHOT_EVERY = 0.5      # how often the reaper lists the program's descendants (s; a look costs ~ms)
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A Popen `preexec_fn` asking the kernel to SIGKILL the child when the process that started it dies.

    Linux only; and only from the main thread: the kernel ties the signal to the thread that forked, so a
    child started from another thread would die when that thread ends. None where it does not apply."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl   # looked up here: the child only calls it
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:    # the parent died before prctl: nobody would send the signal
            os._exit(137)

    return preexec


def new_mark() -> str:
    import uuid

    return uuid.uuid4().hex


def kill_marked(mark: str) -> None:
    """SIGKILL every process carrying `mark` in its environment (Linux /proc; elsewhere nothing): what an
    attempt started that escaped its worker's process group (a session of its own) and outlived the worker."""
    for pid in _of_attempt(-1, mark):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class Reaper:
    """The worker's handle on the reaper process of one program (see the module docstring)."""

    def __init__(self, proc: subprocess.Popen[bytes] | None) -> None:
        self._proc = proc

    @classmethod
    def start(cls, mark: str) -> Reaper:
        """Started before the program (`mark`: the value of MARK in its environment), then told its pid
        (`watch`): a worker killed between the program's start and the reaper's (a trial killed as it starts,
        or at shutdown) left a grandchild in a session of its own running for good, with no reaper to end it.
        Now EOF before a pid still kills every process carrying the mark."""
        try:
            proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "-", mark], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )
        except OSError:
            proc = None
        return cls(proc)

    def watch(self, pid: int) -> None:
        """The program has started: its pid, for the reaper to list its descendants from."""
        if self._proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert self._proc.stdin is not None
            self._proc.stdin.write(f"{pid}\n".encode())
            self._proc.stdin.flush()

    def close(self) -> None:
        """The attempt is over: whatever is left of the program's tree is killed now."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


class Liveness:
    """Whether a command program showed a sign of life since the previous `check` (module docstring)."""

    def __init__(self, pid: int, files: Sequence[str], checkpoint_dir: str = "") -> None:
        self._pid = pid
        self._files = [f for f in files if f]
        self._ckpt = checkpoint_dir if checkpoint_dir and "://" not in checkpoint_dir else ""
        self._last: tuple[Any, ...] | None = None

    def check(self, output: int) -> bool:
        """`output`: lines the program printed so far (counted by whoever reads its stdout)."""
        if _stopped(self._pid):
            return False
        seen = (output, *(_size(f) for f in self._files), _dir_state(self._ckpt), _cpu_ticks(self._pid))
        alive, self._last = seen != self._last, seen
        return alive


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _dir_state(path: str) -> tuple[int, int]:
    """(mtime, entries) of a checkpoint directory: a checkpoint renamed in or removed changes both."""
    if not path:
        return (0, 0)
    try:
        return (os.stat(path).st_mtime_ns, len(os.listdir(path)))
    except OSError:
        return (-1, -1)


def _cpu_ticks(pid: int) -> int:
    """CPU time (user + system, in clock ticks as /proc counts it) used so far by a process and its
    descendants; -1 once it is gone. Ticks, not seconds: an idle tree's total does not move at all."""
    try:
        import psutil

        root = psutil.Process(pid)
        total = 0.0
        for p in (root, *root.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return round(total * 100)
    except Exception:
        return -1


def _stopped(pid: int) -> bool:
    try:
        import psutil

        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except Exception:
        return False


# ------------------------------------------------------------------------------------ the reaper process
def _session_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[4])
    except (OSError, ValueError, IndexError):
        return None


def _marked(pid: int, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry in f.read().split(b"\0")
    except OSError:
        return False


def _of_attempt(sid: int, mark: str) -> list[int]:
    """Pids in session `sid` or with the attempt's mark in their environment (Linux /proc; else none)."""
    entry = f"{MARK}={mark}".encode()
    out = []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            if _session_of(int(name)) == sid or (mark and _marked(int(name), entry)):
                out.append(int(name))
    return out


def _read_pid() -> int | None:
    """The program's pid, the first line on stdin; None at EOF before it (the worker died or gave up before
    the program started, or just after: its processes are found by their mark)."""
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk:
            return None
        line += chunk
    try:
        return int(line)
    except ValueError:
        return None


def _reap(pid: int | None, mark: str = "") -> int:
    import psutil

    known: dict[int, Any] = {}
    root = None
    if pid is None:
        pid = _read_pid()
    if pid is None:
        pid = -1   # no session, no group: the mark alone
    else:
        try:
            root = psutil.Process(pid)
            known[pid] = root
        except psutil.Error:   # a short program already gone: what it left behind still carries its mark
            root = None

    def snapshot() -> bool:
        """Add the root's current descendants to `known`; False once the root has exited."""
        try:
            if root is None or root.status() == psutil.STATUS_ZOMBIE:
                return False
            for gone in [p for p in known.values() if p is not root and not p.is_running()]:
                del known[gone.pid]   # a program starting many short processes: keep only the living
            for child in root.children(recursive=True):
                known.setdefault(child.pid, child)
            return True
        except psutil.Error:
            return False

    while snapshot():
        ready, _, _ = select.select([0], [], [], _SNAPSHOT_EVERY)
        if ready and not os.read(0, 4096):
            break   # EOF: the attempt is over, or the worker died
    for _ in range(3):   # a process forking while we kill: look again
        if pid > 0:
            kill_group(pid)  # the program's group, and what remains of its session
        for other in _of_attempt(pid, mark):
            with contextlib.suppress(psutil.Error):
                known.setdefault(other, psutil.Process(other))
        for p in list(known.values()):
            with contextlib.suppress(psutil.Error):
                for child in p.children(recursive=True):
                    known.setdefault(child.pid, child)
        alive = []
        for p in known.values():
            with contextlib.suppress(psutil.Error):
                if p.status() != psutil.STATUS_ZOMBIE:
                    p.kill()     # psutil refuses a pid reused by another process
                    alive.append(p)
        if not alive:
            break
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]   # this directory holds modules (ray/) that must not shadow installed ones
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(_reap(None if sys.argv[1] == "-" else int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else ""))
