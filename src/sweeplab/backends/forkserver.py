"""Workers forked from one process that imported the trial's libraries once (a fork server).

A trial function that imports torch or xgboost pays that import (1-2.5 CPU-s) in every worker process it
runs in; with N workers, N times, at the same time, on the same cores. Threads (Optuna's `n_jobs`) pay it
once but give up the isolation sweeplab's workers exist for. A fork server keeps both: one process imports
the worker's machinery and the libraries the trial's code imports (`preload.trial_imports`, read from its
source), then forks each worker, which starts with them already in memory (copy-on-write) and runs exactly
as a worker started with `python -m sweeplab.backends.worker` (gunicorn's `--preload`, multiprocessing's
`forkserver` with `set_forkserver_preload`).

`python -m sweeplab.backends.forkserver` is that process. It talks to its backend over a Unix socket pair
(SEQPACKET: one JSON message per packet; a fork request carries the worker's two pipe ends as SCM_RIGHTS):

    backend -> server   {"op": "preload", "modules": [...]}     server -> {"op": "ready", "threads": [...],
                                                                          "failed": [...], "cpu": s}
    backend -> server   {"op": "fork", "env": {...}, "unset": [...]} + fds      server -> {"op": "forked", "pid": n}
                                                                 server -> {"op": "exit", "pid": n, "code": c}

The worker contract stays the backend's (backends/local.py): each forked worker calls `setsid`, so the
backend's SIGKILL to its process group and SIGTERM to its pid reach it as before; its exit status comes back
as an "exit" message (`code` as `Popen.returncode`: -N for signal N), read by `ForkedProcess.poll`. The
server never holds a worker's pipes after forking it, so a driver that dies closes the workers' stdin and
they end as orphans always did; the server ends when its socket closes and its last worker is reaped (while it
still imports, with its driver: PR_SET_PDEATHSIG), and
its workers get SIGKILL from the kernel if it dies first (PR_SET_PDEATHSIG), which the backend reports as
the workers' deaths; a SIGTERM to it is passed to its workers (preempted, as if each had been sent it), and
it forks no more and ends after them. Forking is refused (the backend starts workers cold, as before) when the preloaded
libraries started an OS thread other than jemalloc's background thread, which jemalloc stops and restarts
around a fork; threads would otherwise leave locks held in the child.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import socket

__all__ = ["FORK_SAFE_THREADS", "ForkServer", "ForkedProcess"]

#: names (/proc/self/task/N/comm) of OS threads a process may have and still fork safely: jemalloc (bundled by
#: pyarrow, which pandas and scikit-learn import) stops its background thread before a fork and restarts it
#: on demand after (its prefork/postfork handlers)
FORK_SAFE_THREADS = frozenset({"jemalloc_bg_thd"})
_MSG = 65536          # largest message (a fork's changes to the server's environment)
#: seconds a fork's answer may take (ms normally) before the server is taken as unresponsive
FORK_TIMEOUT = 10.0
#: seconds a worker may be seen dead without its fork server reporting its status, before it counts as killed
UNREPORTED_AFTER = 2.0
_PR_SET_PDEATHSIG = 1


# ------------------------------------------------------------------------------------------ the backend's side
class ForkServer:
    """A fork server process and the backend's end of its socket."""

    def __init__(self, env: Mapping[str, str], modules: Sequence[str]) -> None:
        import socket  # here: `sweeplab sweep` imports this module before its first trial, not always a server

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sweeplab.backends.forkserver"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=None, pass_fds=(theirs.fileno(),),
                env={**env, "SWEEPLAB_FORK_SOCKET": str(theirs.fileno()), "SWEEPLAB_FORK_PARENT": str(os.getpid())},
                start_new_session=True,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.env = dict(env)   # the server's environment: a fork sends only what differs from it
        self.started_at = time.monotonic()
        self.modules = tuple(modules)
        self.status: str = "starting"        # starting | ready | refused: <why> | gone
        self.info: dict[str, Any] = {}
        self._exits: dict[int, int] = {}
        self._children: dict[int, ForkedProcess] = {}
        self._reply: dict[str, Any] | None = None
        self._send({"op": "preload", "modules": list(self.modules)})

    def fileno(self) -> int:
        return self.sock.fileno()

    # ------------------------------------------------------------------ messages
    def _send(self, msg: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
        import socket

        data = json.dumps(msg, separators=(",", ":")).encode()
        if fds:
            socket.send_fds(self.sock, [data], list(fds))
        else:
            self.sock.send(data)

    def _take(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """Keep an exit or the ready message; return any other message."""
        op = msg.get("op")
        if op == "exit":
            pid, code = int(msg["pid"]), int(msg["code"])
            child = self._children.pop(pid, None)
            if child is not None:
                child.returncode = code
            else:
                self._exits[pid] = code
            return None
        if op == "ready":
            self.info = msg
            extra = [t for t in msg.get("threads", ()) if t not in FORK_SAFE_THREADS]
            self.status = "ready" if not extra else f"refused: the imports started threads {', '.join(extra)}"
            return None
        return msg

    def _receive(self, timeout: float | None) -> bool:
        """Read the messages that arrive within `timeout` (None: block for one; 0: only those waiting)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        got = False
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if got:
                wait = 0.0
            try:
                ready, _, _ = select.select([self.sock], [], [], wait)
            except (OSError, ValueError):
                self._gone()
                return got
            if not ready:
                return got
            try:
                data = self.sock.recv(_MSG)
            except OSError:
                data = b""
            if not data:
                self._gone()
                return got
            got = True
            left = self._take(json.loads(data))
            if left is not None:
                self._reply = left

    def _gone(self) -> None:
        """The server died or closed: its workers died with it (PDEATHSIG); report each as killed."""
        if self.status == "gone":
            return
        self.status = "gone"
        with contextlib.suppress(OSError):
            self.sock.close()
        for pid, child in list(self._children.items()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            child.returncode = -signal.SIGKILL
        self._children.clear()

    def forked(self) -> int:
        """How many of its workers are alive, as far as the backend knows."""
        return len(self._children)

    def collect(self) -> None:
        """Read whatever the server sent since the last look (exits), without waiting."""
        if self.status != "gone":
            self._receive(0.0)

    def stopped(self) -> bool:
        """Whether the server is stopped (SIGSTOP: state T in /proc): it cannot go on importing."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                return f.read().rpartition(b")")[2].split()[0] == b"T"
        except (OSError, IndexError):
            return False

    def check_stopped(self) -> None:
        """A server stopped while it imports is refused: no slot waits PRELOAD_TIMEOUT for it."""
        if self.status == "starting" and self.stopped():
            self.status = "refused: stopped (SIGSTOP) while importing"

    def ready(self, timeout: float) -> bool:
        """Wait (up to `timeout`) for the preload to end; True when workers can be forked from it."""
        deadline = time.monotonic() + timeout
        while self.status == "starting" and time.monotonic() < deadline:
            self._receive(min(0.5, deadline - time.monotonic()))
            self.check_stopped()
        if self.status == "starting":
            self.status = f"refused: its imports took more than {timeout:g}s"
        return self.status == "ready"

    # ------------------------------------------------------------------ workers
    def fork(self, env: Mapping[str, str], fds: Sequence[int]) -> ForkedProcess | None:
        """A worker forked with `env`, fds[0] as its stdin and fds[1] as SWEEPLAB_EVENT_FD; None if the server
        cannot (the caller then starts the worker cold). A server that does not answer within FORK_TIMEOUT
        (stopped, or hung) forks no more: its workers run on, and later ones start cold."""
        if self.status != "ready":
            return None
        if self.stopped():   # it cannot answer: the driver's loop would wait FORK_TIMEOUT for nothing
            self.status = "refused: stopped (SIGSTOP)"
            return None
        msg = {"op": "fork", "env": {k: v for k, v in env.items() if self.env.get(k) != v},
               "unset": [k for k in self.env if k not in env]}
        if len(json.dumps(msg, separators=(",", ":")).encode()) > _MSG:
            return None   # (environments that differ this much are not forked: `_forks`)
        self._reply = None
        try:
            self._send(msg, fds)
        except OSError:
            self._gone()
            return None
        deadline = time.monotonic() + FORK_TIMEOUT
        while self._reply is None and self.status == "ready" and time.monotonic() < deadline:
            self._receive(deadline - time.monotonic())
        if self._reply is None and self.status == "ready":
            self.status = f"refused: no answer to a fork within {FORK_TIMEOUT:g}s"
        reply, self._reply = self._reply, None
        if reply is None or reply.get("op") != "forked":
            return None
        pid = int(reply["pid"])
        child = ForkedProcess(self, pid)
        if pid in self._exits:
            child.returncode = self._exits.pop(pid)
        else:
            self._children[pid] = child
        return child

    def close(self, timeout: float = 5.0) -> None:
        """Close the socket (the server ends once its last worker is reaped) and wait for it. One still
        importing, or stopped, has no worker to wait for and cannot see the socket close: it is killed."""
        if self.status == "starting" or (not self._children and self.stopped()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.sock.close()
        self.status = "gone"
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)


class ForkedProcess:
    """A forked worker, as much of `subprocess.Popen` as the local backend uses: pid, stdin, poll, wait,
    returncode."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: Any = None
        self._looked = 0.0              # when /proc was last read for it
        self._dead_since: float | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.collect()
        if self.returncode is None:
            self._unreported()
        return self.returncode

    def _unreported(self) -> None:
        """A worker that ended while its fork server does not answer (stopped, hung) is never reported by it:
        seen dead (a zombie, or gone) for UNREPORTED_AFTER seconds, or twice while its server is stopped, it
        counts as killed (its real status cannot be read: only its parent may reap it). /proc is read at most
        every 0.5 s."""
        now = time.monotonic()
        if now - self._looked < 0.5:
            return
        self._looked = now
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                dead = f.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
        except (OSError, IndexError):
            dead = True
        if not dead:
            self._dead_since = None
        elif self._dead_since is None:
            self._dead_since = now
        elif now - self._dead_since >= UNREPORTED_AFTER or self.server.stopped():   # a stopped one never will
            self.returncode = -signal.SIGKILL
            self.server._children.pop(self.pid, None)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if self.server.status == "gone":
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(["sweeplab worker"], timeout or 0.0)
            self.server._receive(0.5 if left is None else min(left, 0.5))
        assert self.returncode is not None
        return self.returncode


# ------------------------------------------------------------------------------------------ the server process
def _threads() -> list[str]:
    """The names of this process's OS threads other than the main one."""
    names = []
    for tid in sorted(os.listdir("/proc/self/task")):
        if int(tid) == os.getpid():
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return names


def _preload(modules: Sequence[str]) -> list[str]:
    """Import the worker's machinery and `modules`; the names that failed."""
    import sweeplab.backends.worker
    import sweeplab.config  # noqa: F401
    from sweeplab.backends.execution import import_libraries

    return import_libraries(modules)


def _one_blas_thread() -> str | None:
    """Have OpenBLAS (numpy's, scipy's) start no thread as it loads, which it does when OPENBLAS_NUM_THREADS > 1
    (2+ CPUs a slot): those threads would refuse forking (`_threads`). The value it had, to put back; None when
    nothing was changed."""
    value = os.environ.get("OPENBLAS_NUM_THREADS")
    if value is None or not value.isdigit() or int(value) <= 1:
        return None
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    return value


def _blas_threads_after_fork(value: str | None) -> Callable[[int], None] | None:
    """Put OPENBLAS_NUM_THREADS back, and how a forked worker gets OpenBLAS's threads the slot asks for (what
    a cold worker's OpenBLAS started with): threadpoolctl, which scikit-learn installs; None when no OpenBLAS
    was loaded, or without threadpoolctl (OpenBLAS then runs one thread in forked workers)."""
    if value is None:
        return None
    os.environ["OPENBLAS_NUM_THREADS"] = value
    try:
        import threadpoolctl  # imports no library of its own and starts no thread
    except ImportError:
        return None
    with contextlib.suppress(Exception):
        if threadpoolctl.ThreadpoolController().select(internal_api="openblas").lib_controllers:
            return lambda n: threadpoolctl.ThreadpoolController().select(internal_api="openblas").limit(limits=n)
    return None


def _pdeathsig(sig: int) -> None:
    """Have the kernel send `sig` to this process when its parent dies (PR_SET_PDEATHSIG; 0: no longer)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def _child(sock: socket.socket, wake: tuple[int, int], env: Mapping[str, str], unset: Sequence[str],
           fds: Sequence[int], parent: int, started: tuple[int, int],
           blas_limit: Callable[[int], None] | None = None) -> None:
    """In the forked worker: become what `python -m sweeplab.backends.worker` would be, then run it."""
    try:
        os.setsid()
        for fd in started:   # the server answers the fork once this closes: the worker's group exists by then
            os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)   # the worker's own handler comes with its main
        _pdeathsig(signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(137)
        sock.close()
        for fd in wake:
            os.close(fd)
        cmd, events = fds
        os.dup2(cmd, 0)
        os.close(cmd)
        # the server's environment, with what the imports set in it (a cold worker keeps that too: it imports
        # them before its first trial), changed as the backend asks
        for name in unset:
            os.environ.pop(name, None)
        os.environ.update(env)
        os.environ["SWEEPLAB_EVENT_FD"] = str(events)
        if blas_limit is not None:   # OpenBLAS's threads, as many as a cold worker starts with (_one_blas_thread)
            with contextlib.suppress(Exception):
                blas_limit(int(os.environ.get("OPENBLAS_NUM_THREADS") or 1))
        np = sys.modules.get("numpy")
        if np is not None:   # a fresh worker's numpy seeds its global generator from the OS; so does this one
            np.random.seed()
        import sweeplab.backends.worker as worker

        sys.argv[0] = worker.__file__ or sys.argv[0]
        code = worker.main()
    except BaseException:   # whatever happens, the child never returns into the server's loop
        import traceback

        with contextlib.suppress(Exception):
            traceback.print_exc()
        os._exit(1)
    worker._exit(code)


def main() -> int:
    import socket

    sock_fd = os.environ.pop("SWEEPLAB_FORK_SOCKET", None)
    if sock_fd is None:
        # not started by a backend: a forked worker's trial ran its main program again, which is this module
        # (Lightning's strategy="ddp" does, for each further rank)
        from sweeplab.backends.worker import RERUN

        print(RERUN, file=sys.stderr, flush=True)
        return 1
    sock = socket.socket(fileno=int(sock_fd))
    sock.set_inheritable(False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # while it imports (seconds for torch, forever for a hung import, the GIL held inside a library's C code),
    # a driver that dies (kill -9) takes it along: nothing of the sweep may run on after its driver, and once
    # ready it ends by itself after its last worker. Not later: its workers must outlive it to see their
    # stdin close.
    _pdeathsig(signal.SIGKILL)
    if os.getppid() != int(os.environ.pop("SWEEPLAB_FORK_PARENT", os.getppid())):
        return 0   # the driver died already
    first = json.loads(sock.recv(_MSG) or b"{}")
    blas = _one_blas_thread()
    failed = _preload(first.get("modules", ()))
    blas_limit = _blas_threads_after_fork(blas)
    # what the imports made lives as long as every worker: out of the garbage collector's reach (Python's
    # recipe for fork without exec), so a worker's collections never walk those objects, nor write to their
    # pages (which copy-on-write would copy into each worker)
    gc.freeze()
    _pdeathsig(0)
    usage = os.times()
    try:
        sock.send(json.dumps({"op": "ready", "threads": _threads(), "failed": failed,
                              "cpu": usage.user + usage.system}).encode())
    except OSError:   # the backend went away as the imports ended
        return 0
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    # SIGTERM (`kill PID`, a memory daemon's first warning) preempts its workers, as if each had been sent it
    # (they checkpoint and are requeued: no attempt fails), instead of taking them down with SIGKILL
    # (PDEATHSIG); it forks no more and ends after them
    term = {"got": False, "passed": False}
    signal.signal(signal.SIGTERM, lambda *_: term.update(got=True))
    children: set[int] = set()
    open_ = True

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                return
            if pid == 0:
                return
            children.discard(pid)
            with contextlib.suppress(OSError):
                sock.send(json.dumps({"op": "exit", "pid": pid,
                                      "code": os.waitstatus_to_exitcode(status)}).encode())

    while (open_ and not term["got"]) or children:
        watched: list[Any] = [sock, r] if open_ else [r]
        ready, _, _ = select.select(watched, [], [], 1.0)
        if r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(r, 4096)
        if term["got"] and not term["passed"]:
            term["passed"] = True
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        reap()
        if sock not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, _MSG, 2)
        except OSError:
            data, fds = b"", []
        if not data:
            open_ = False   # the backend closed (or died): end once the last worker is reaped
            continue
        try:
            msg = json.loads(data)
        except ValueError:
            msg = {}
        if not isinstance(msg, dict) or msg.get("op") != "fork" or len(fds) != 2 or term["got"]:
            for fd in fds:
                os.close(fd)
            why = "ending (SIGTERM)" if term["got"] else "a request it cannot read"
            with contextlib.suppress(OSError):   # answered: the backend starts that worker cold at once
                sock.send(json.dumps({"op": "failed", "error": why}).encode())
            continue
        reply: dict[str, Any] = {"op": "forked"}
        parent = os.getpid()
        started = os.pipe()
        try:
            with warnings.catch_warnings():   # Python 3.12+ warns of any other OS thread; only jemalloc's is
                warnings.simplefilter("ignore", DeprecationWarning)   # here, which jemalloc handles (_threads)
                pid = os.fork()
        except OSError as exc:   # out of processes or memory: this worker starts cold; the others run on
            reply = {"op": "failed", "error": str(exc)}
            pid = -1
        if pid == 0:
            _child(sock, (r, w), msg.get("env") or {}, msg.get("unset") or (), fds, parent, started, blas_limit)
        os.close(started[1])
        if pid > 0:   # until the child has its own session (the backend kills by process group), or died
            with contextlib.suppress(OSError):
                os.read(started[0], 1)
        os.close(started[0])
        for fd in fds:
            os.close(fd)
        if pid > 0:
            children.add(pid)
            reply["pid"] = pid
        with contextlib.suppress(OSError):
            sock.send(json.dumps(reply).encode())
    return 0


if __name__ == "__main__":
    os._exit(main())
