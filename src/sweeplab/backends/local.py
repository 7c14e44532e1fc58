"""The local backend: N worker processes on this machine, one resource slot each.

Each worker (backends/worker.py) is a separate Python process with its own session, so a trial that
segfaults, calls os._exit, leaks or hangs takes down only its worker: the backend reports the attempt as
FAILED (exit code or signal) and starts a fresh worker for the slot. Workers are reused across trials
(starting Python per trial would cost ~50 ms); command trials run in a child of the worker.

A kill (and a shutdown, and a worker found dead) takes the worker's process group and the process group of
its command program, which the worker reports in a PROCESS event; the program's reaper (backends/_tree.py)
takes whatever of its tree left both groups.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeplab.backends._diskfull import disk_full_data, names_full_disk, trial_places
from sweeplab.backends._start_signals import SignalHold
from sweeplab.backends._tree import MARK, kill_marked, new_mark
from sweeplab.backends.base import Backend, TrialTask
from sweeplab.backends.events import (
    CHANNEL_CLOSED,
    CHANNEL_CLOSED_REASON,
    Event,
    EventKind,
    crash_stack,
    describe_exit,
    died_of_sigterm,
    read_events,
)
from sweeplab.backends.forkserver import ForkedProcess, ForkServer
from sweeplab.errors import BackendError, UserError

__all__ = ["MAX_LOCAL_WORKERS", "LocalBackend", "Slot", "plan_slots", "prestart", "prestart_fork_server",
           "release_prestarted"]


@dataclass(frozen=True)
class Slot:
    """A place one trial runs: CPUs it may use and the GPU ids it sees."""

    index: int
    cpus: float
    gpus: tuple[int | str, ...] = ()   # CUDA_VISIBLE_DEVICES entries: device indices or UUIDs

    def describe(self) -> dict[str, Any]:
        return {"slot": self.index, "cpus": self.cpus, "gpus": list(self.gpus)}


#: workers one machine runs at most: beyond any real local sweep (each is a Python process with its pipes), so
#: that `workers: 100000000000` with `resources.cpus: 0` is an error, not a fork bomb
MAX_LOCAL_WORKERS = 1024


def plan_slots(workers: int, *, cpus: float, gpus: float, gpu_ids: Sequence[int | str],
               cpu_count: int | None = None) -> list[Slot]:
    """Assign each of `workers` slots its CPUs and GPU ids.

    Whole `gpus` (1, 2...) give each slot that many devices of its own; a fraction (0.5, 0.25) packs
    1/fraction slots onto one device, and never splits one trial across devices.
    """
    if workers < 1:
        raise UserError(f"workers must be at least 1; got {workers}")
    if workers > MAX_LOCAL_WORKERS:
        raise UserError(f"{workers} workers on one machine; the local backend runs at most {MAX_LOCAL_WORKERS:,} "
                        "workers (use the ray backend for more)")
    cpu_count = cpu_count or os.cpu_count() or 1
    if cpus > 0 and workers * cpus > cpu_count + 1e-9:
        raise UserError(
            f"{workers} workers x {cpus:g} CPUs each need {workers * cpus:g} CPUs but this machine has "
            f"{cpu_count}; lower the workers (--workers, or `workers:` in the spec) or resources.cpus"
        )
    if gpus <= 0:
        return [Slot(i, cpus) for i in range(workers)]
    ids = list(gpu_ids)
    if gpus < 1:
        per_device = math.floor(1 / gpus + 1e-9)
        capacity = per_device * len(ids)
        if workers > capacity:
            raise UserError(
                f"{workers} workers x {gpus:g} GPU need more than the {len(ids)} GPU(s) available "
                f"({capacity} trials fit); lower the workers (--workers, or `workers:` in the spec) or "
                "resources.gpus, or pass --gpus"
            )
        return [Slot(i, cpus, (ids[i // per_device],)) for i in range(workers)]
    if gpus != int(gpus):
        raise UserError(f"resources.gpus above 1 must be a whole number; got {gpus:g}")
    n = int(gpus)
    if workers * n > len(ids):
        raise UserError(
            f"{workers} workers x {n} GPU(s) need {workers * n} GPUs but {len(ids)} are available; "
            "lower the workers (--workers, or `workers:` in the spec) or resources.gpus, or pass --gpus"
        )
    return [Slot(i, cpus, tuple(ids[i * n:(i + 1) * n])) for i in range(workers)]


@dataclass
class _Worker:
    slot: Slot
    proc: subprocess.Popen[bytes] | ForkedProcess
    rfd: int
    buf: bytearray = field(default_factory=bytearray)
    task: TrialTask | None = None
    kill_reason: str | None = None
    preempting: bool = False
    retiring: bool = False       # it said it will exit after its attempt: never give it another
    groups: list[int] = field(default_factory=list)   # process groups of its attempt's command program
    mark: str = ""               # its attempt's MARK (backends/_tree.py), on every process the attempt starts
    closed: bool = False


class LocalBackend(Backend):
    name = "local"
    supports_decisions = True

    def __init__(self, slots: Sequence[Slot], *, env: Mapping[str, str] | None = None,
                 hide_gpus: bool = False, preload: Sequence[str] = (), fork_server: bool | None = None) -> None:
        self.slots = list(slots)
        self._env = dict(env or {})
        #: the process's environment now: a worker started later gets it, not what a library in another thread
        #: has set for a moment (Optuna's GP sets OPENBLAS_NUM_THREADS=1 while it suggests, in the prefetch
        #: thread: a worker started then ran one OpenBLAS thread in a slot of 2 CPUs)
        self._environ = dict(os.environ)
        self._hide_gpus = hide_gpus
        #: libraries the trial's code imports (preload.trial_imports): every worker imports them before its
        #: first trial, and with 2+ slots of one environment they are imported once, by a fork server
        self.preload = tuple(preload)
        self._fork_server = fork_server   # None: when it pays (_forks); True: whenever it can; False: never
        self._server: ForkServer | None = None
        self.fork_note: dict[str, Any] = {}   # how the workers started, once a fork server was tried
        self._noted = False
        self._workers: dict[int, _Worker] = {}          # slot index -> worker
        self._retired: list[_Worker] = []
        self._by_trial: dict[int, _Worker] = {}
        self._sel = selectors.DefaultSelector()
        self._pending: list[Event] = []
        self._held: SignalHold | None = None   # SIGTERM, Ctrl-C held from the first start until the driver runs
        self._started = False

    def capacity(self) -> int:
        return len(self.slots)

    def describe(self) -> str:
        gpus = sorted({g for s in self.slots for g in s.gpus})
        return f"local: {len(self.slots)} worker(s)" + (f", GPUs {gpus}" if gpus else "")

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start one worker per slot (idempotent: the CLI starts them early, while the driver sets up).
        Workers `prestart` started for this sweep are taken over; those left over are ended. From the first
        call SIGTERM and Ctrl-C are held (backends/_start_signals.py) until the next one, the driver's, once its
        handlers are in place: a signal while the CLI creates the sweep is the driver's stop, not the process's
        end."""
        if self._started:
            self._release_signals()
        else:
            self._started = True
            self._held = SignalHold.install()
        if self._server is None and self._forks():
            env = self._slot_env(self.slots[0])
            try:
                self._server = _adopt_server(env, self.preload) or ForkServer(env, self.preload)
                self._sel.register(self._server, selectors.EVENT_READ, self._server)   # wakes `poll` when ready
            except OSError as exc:
                self.fork_note = {"level": "warning", "kind": "workers", "forked": False,
                                  "message": f"workers started one by one (no fork server: {exc})"}
        if self._server is None:   # else each worker is forked at its first trial, once the imports are done
            for slot in self.slots:
                if slot.index not in self._workers:
                    self._spawn(slot)
        release_prestarted()

    def _forks(self) -> bool:
        """Whether workers are forked from a fork server (backends/forkserver.py): the trial imports
        libraries, 2+ slots share one environment (CPU-only), and SWEEPLAB_FORK_SERVER is not 0."""
        if self._fork_server is False or os.environ.get("SWEEPLAB_FORK_SERVER", "1") == "0":
            return False
        if self._fork_server is None and (not self.preload or len(self.slots) < 2):
            return False
        envs = {tuple(sorted(self._slot_env(s).items())) for s in self.slots}
        return len(envs) == 1 and not any(s.gpus for s in self.slots) and sys.platform.startswith("linux")

    def _slot_env(self, slot: Slot) -> dict[str, str]:
        return _worker_env(slot, self._env, hide_gpus=self._hide_gpus, base=self._environ)

    def _spawn(self, slot: Slot) -> _Worker:
        env = self._slot_env(slot)
        started: tuple[subprocess.Popen[bytes] | ForkedProcess, int] | None = self._fork(env)
        if started is None:
            started = _adopt(env) or _popen(env)
            if self.preload:   # imported before its first trial, as a forked worker has them
                _send_line(started[0], {"op": "preload", "modules": list(self.preload)})
        proc, r = started
        worker = _Worker(slot, proc, r)
        self._workers[slot.index] = worker
        self._sel.register(r, selectors.EVENT_READ, worker)
        return worker

    def _fork(self, env: Mapping[str, str]) -> tuple[ForkedProcess, int] | None:
        """A worker forked from the fork server; None when there is none, it refused, or it is gone (the
        worker is then started cold). The first call waits for the server's imports."""
        server = self._server
        if server is None:
            return None
        if server.status == "starting":   # a caller that submits without asking free_slots waits here
            server.ready(max(0.0, PRELOAD_TIMEOUT - (time.monotonic() - server.started_at)))
        started: tuple[ForkedProcess, int] | None = None
        if server.status == "ready":
            cmd_r, cmd_w = os.pipe()
            ev_r, ev_w = os.pipe()
            try:
                proc = server.fork(env, (cmd_r, ev_w))
            finally:
                os.close(cmd_r)
                os.close(ev_w)
            if proc is None:
                os.close(cmd_w)
                os.close(ev_r)
            else:
                proc.stdin = os.fdopen(cmd_w, "wb")
                os.set_blocking(ev_r, False)
                started = proc, ev_r
        if not self.fork_note:   # how the first worker really started
            self.fork_note = self._note(server, forked=started is not None)
        if started is None:
            if server.status not in ("ready", "gone") and not server.forked():   # one that stopped answering
                self._unregister_server()                                        # keeps the workers it forked
                server.close(timeout=0)                                          # until the end
            elif server.status == "gone":
                self._unregister_server()
        return started

    def _note(self, server: ForkServer, *, forked: bool) -> dict[str, Any]:
        """The sweep's event saying how its workers started (kind `workers`)."""
        info = server.info
        if forked:
            missed = list(info.get("failed") or ())
            imported = [m for m in self.preload if m not in missed]
            failed = f"; could not import {', '.join(missed)}" if missed else ""
            message = (f"workers forked from one process that imported {', '.join(imported) or 'sweeplab'}"
                       f" ({info.get('cpu', 0):.1f} CPU-s){failed}")
        else:
            why = server.status if server.status != "ready" else "could not fork"
            code = None
            if server.status == "gone":   # its socket closed as it ended: its status follows at once
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = server.proc.wait(timeout=1.0)
            if code is not None:   # how it ended: a library that crashed it as it imported
                why = f"gone: {describe_exit(code)[0]} while " + ("forking" if info else "importing")
            message = f"workers started one by one (fork server {why})"
        return {"level": "info", "kind": "workers", "message": message, "forked": forked,
                "preload": list(self.preload), "preload_cpu": info.get("cpu"), "failed": info.get("failed", [])}

    def shutdown(self, *, grace: float = 0.0) -> None:
        for worker in self._retired:
            self._killpg(worker)
            self._close(worker)
        self._retired.clear()
        for worker in list(self._workers.values()):
            if worker.task is not None:
                self._send(worker, {"op": "stop", "trial": worker.task.trial_id, "reason": "sweep shutting down"})
            self._send(worker, {"op": "exit"})
        deadline = time.monotonic() + grace
        for worker in list(self._workers.values()):
            remaining = max(0.0, deadline - time.monotonic())
            try:
                worker.proc.wait(timeout=remaining if worker.task is not None else max(remaining, 2.0))
            except subprocess.TimeoutExpired:
                self._killpg(worker)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.proc.wait(timeout=5)
            self._drain(worker)
            self._close(worker)
        self._workers.clear()
        if self._server is not None:
            self._unregister_server()
            self._server.close()
            self._server = None
        self._started = False
        self._release_signals(restore=True)   # no driver took a signal held since start: its default action now

    def _release_signals(self, *, restore: bool = False) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.release(restore=restore)

    def _unregister_server(self) -> None:
        """Out of the selector before a new pipe can take its closed socket's descriptor number."""
        if self._server is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(self._server)

    # ----------------------------------------------------------------------------- trials
    def free_slots(self) -> int:
        """Slots that take a trial now: none while the fork server imports the trial's libraries (the driver
        goes on polling, honouring signals, stops and budgets, and `poll` wakes when it is ready)."""
        server = self._server
        if server is not None and server.status == "starting":
            server.collect()
            server.check_stopped()
            if server.status == "starting":
                if time.monotonic() - server.started_at < PRELOAD_TIMEOUT:
                    return 0
                server.status = f"refused: its imports took more than {PRELOAD_TIMEOUT:g}s"
        return sum(1 for s in self.slots if self._slot_free(s))

    def _slot_free(self, slot: Slot) -> bool:
        w = self._workers.get(slot.index)
        return w is None or w.task is None

    def running(self) -> list[int]:
        return list(self._by_trial)

    def submit(self, task: TrialTask) -> None:
        for slot in self.slots:
            if not self._slot_free(slot):
                continue
            worker = self._workers.get(slot.index)
            if worker is not None and worker.retiring and not worker.closed:
                self._retired.append(worker)
                del self._workers[slot.index]
                worker = None
            if worker is None or worker.closed or worker.proc.poll() is not None:
                if worker is not None:
                    self._close(worker)
                worker = self._spawn(slot)
            env = dict(task.env)
            worker.mark = new_mark()   # inherited by what the trial starts, in a session of its own too
            env.update({"SWEEPLAB_SLOT": str(slot.index), MARK: worker.mark})
            task_d = task.to_dict()
            task_d["env"] = env
            worker.task = task
            self._by_trial[task.trial_id] = worker
            if self.fork_note and not self._noted:   # in the sweep's events, with the trial that waited for it
                self._noted = True
                self._pending.append(Event(EventKind.NOTE, task.trial_id, task.attempt, time.time(),
                                           dict(self.fork_note)))
            if not self._send(worker, {"op": "run", "task": task_d}):
                worker.kill_reason = "worker died before the trial started"
            return
        raise BackendError("submit() called with no free slot")

    def stop(self, trial_id: int, reason: str = "") -> None:
        worker = self._by_trial.get(trial_id)
        if worker is not None:
            self._send(worker, {"op": "stop", "trial": trial_id, "reason": reason})

    def go(self, trial_id: int, step: int) -> None:
        worker = self._by_trial.get(trial_id)
        if worker is not None:
            self._send(worker, {"op": "go", "trial": trial_id, "step": step})

    def preempt(self, trial_id: int) -> None:
        """Send SIGTERM to the trial's process, as a spot reclaim would."""
        worker = self._by_trial.get(trial_id)
        if worker is not None:
            worker.preempting = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.proc.pid, signal.SIGTERM)

    def kill(self, trial_id: int, reason: str) -> None:
        worker = self._by_trial.get(trial_id)
        if worker is not None:
            worker.kill_reason = reason
            self._killpg(worker)

    # ----------------------------------------------------------------------------- events
    def wait(self, timeout: float) -> bool:
        """Block until a worker has written something or an event is pending (True) or `timeout` passes
        (False), reading nothing. For an owner that waits here on one thread and calls `poll(0)` under its
        own lock on another (the Ray backend's actor): an idle wait costs no CPU and delays nothing.
        Workers started or closed meanwhile by the other thread only make it return early."""
        if self._pending:
            return True
        try:
            fds = [w.rfd for w in [*self._workers.values(), *self._retired] if not w.closed]
        except RuntimeError:   # the other thread changed the workers while we listed them
            return True
        server = self._server
        if server is not None and server.status != "gone":
            fds.append(server.fileno())   # a forked worker's exit status comes from there
        if not fds:
            time.sleep(timeout)
            return False
        waiter = select.poll()
        for fd in fds:
            waiter.register(fd, select.POLLIN)
        return bool(waiter.poll(max(0.0, timeout) * 1000))

    def poll(self, timeout: float) -> list[Event]:
        events, self._pending = self._pending, []
        if events:
            timeout = 0.0
        server = self._server
        if server is not None:
            server.collect()
            if server.status == "gone":
                self._unregister_server()
        for key, _ in self._sel.select(timeout):
            if key.data is server:   # its news (ready, a worker's exit) are read by `collect`
                if server is not None:
                    server.collect()
                continue
            worker: _Worker = key.data
            events.extend(self._read(worker))
        for worker in list(self._workers.values()) + self._retired:
            if not worker.closed and worker.proc.poll() is not None:
                events.extend(self._drain(worker))
                events.extend(self._on_exit(worker))
                self._close(worker)
        self._retired = [w for w in self._retired if not w.closed]
        return events

    def _read(self, worker: _Worker) -> list[Event]:
        out = read_events(worker.rfd, worker.buf)
        for ev in out:
            if ev.kind is EventKind.PROCESS and worker.task is not None and ev.trial == worker.task.trial_id:
                worker.groups.append(int(ev.data["pgid"]))
            if ev.kind.ends_attempt and worker.task is not None and ev.trial == worker.task.trial_id:
                worker.groups.clear()    # the program has exited (the worker waited for it)
                worker.mark = ""         # and the worker ended what the attempt left running
                if self._by_trial.get(worker.task.trial_id) is worker:
                    del self._by_trial[worker.task.trial_id]
                worker.task = None
                if ev.data.get("retire"):
                    worker.retiring = True
        return out

    def _drain(self, worker: _Worker) -> list[Event]:
        if worker.closed:
            return []
        return self._read(worker)

    def _on_exit(self, worker: _Worker) -> list[Event]:
        self._killpg(worker)   # a worker that died on its own (OOM killer, kill -9): its ranks and program too
        task = worker.task
        if task is None:
            return []
        if self._by_trial.get(task.trial_id) is worker:
            del self._by_trial[task.trial_id]
        worker.task = None
        code = worker.proc.returncode
        now = time.time()
        if worker.preempting and worker.kill_reason is None:
            return [Event(EventKind.PREEMPTED, task.trial_id, task.attempt, now,
                          {"reason": "worker preempted (SIGTERM)"})]
        how, exit_code, sig = describe_exit(code)
        if not worker.kill_reason and died_of_sigterm(exit_code, sig):   # from outside, before its attempt ran
            return [Event(EventKind.PREEMPTED, task.trial_id, task.attempt, now,
                          {"reason": f"worker process {how} (SIGTERM: preemption)"})]
        if not worker.kill_reason and names_full_disk("", sig):   # a file-size limit: no fault of the trial's
            return [Event(EventKind.FAILED, task.trial_id, task.attempt, now, disk_full_data(
                f"worker process {how} (a file-size limit, RLIMIT_FSIZE)", trial_places(task),
                exit_code=exit_code, signal=sig))]
        if not worker.kill_reason and exit_code == CHANNEL_CLOSED:
            return [Event(EventKind.FAILED, task.trial_id, task.attempt, now, {
                "reason": CHANNEL_CLOSED_REASON, "error_type": "EventPipeClosed", "exit_code": exit_code,
                "signal": None, "message": CHANNEL_CLOSED_REASON})]
        reason = worker.kill_reason or f"worker process {how}"
        if worker.kill_reason:
            reason = f"{worker.kill_reason} ({how})"
        data: dict[str, Any] = {
            "reason": reason, "error_type": "WorkerDied" if not worker.kill_reason else "Killed",
            "exit_code": exit_code, "signal": sig, "message": reason,
        }
        stack = crash_stack(task.log_path) if sig and not worker.kill_reason else None
        if stack:   # faulthandler's dump of where the trial died (worker.py enables it)
            data["traceback"] = stack
        return [Event(EventKind.FAILED, task.trial_id, task.attempt, now, data)]

    # ----------------------------------------------------------------------------- plumbing
    def _send(self, worker: _Worker, msg: dict[str, Any]) -> bool:
        return not worker.closed and _send_line(worker.proc, msg)

    def _killpg(self, worker: _Worker) -> None:
        """Kill the worker's group and its command program's (a session of its own): at once, not when the
        worker's death reaches them, so no process of the attempt outlives the kill (the program's
        reaper, backends/_tree.py, then kills what started sessions of its own)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.proc.pid, signal.SIGKILL)
        self._kill_groups(worker)
        if worker.mark:   # killed mid-attempt: what the attempt started in sessions of its own (a function
            # trial's subprocess with start_new_session=True) escaped the group and would run on, orphaned
            mark, worker.mark = worker.mark, ""
            kill_marked(mark)

    def _kill_groups(self, worker: _Worker) -> None:
        groups, worker.groups = worker.groups, []
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)

    def _close(self, worker: _Worker) -> None:
        if worker.closed:
            return
        worker.closed = True
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(worker.rfd)
        with contextlib.suppress(OSError):
            os.close(worker.rfd)
        if worker.proc.stdin is not None:
            with contextlib.suppress(OSError, BrokenPipeError):
                worker.proc.stdin.close()
        if self._workers.get(worker.slot.index) is worker:
            del self._workers[worker.slot.index]


def _send_line(proc: subprocess.Popen[bytes] | ForkedProcess, msg: Mapping[str, Any]) -> bool:
    """Write one command line to a worker's stdin; False if it is gone."""
    stdin = proc.stdin
    if stdin is None:
        return False
    try:
        stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        stdin.flush()
        return True
    except (BrokenPipeError, OSError, ValueError):
        return False


# ----------------------------------------------------------------------------- starting a worker
#: how long the first trial waits for the fork server's imports before workers are started cold instead
PRELOAD_TIMEOUT = 120.0

def _worker_env(slot: Slot, extra: Mapping[str, str], *, hide_gpus: bool,
                base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker of `slot` (but its event pipe's fd, which each worker has its own): `base`
    (the process's environment when None) with `extra` and the slot's devices and threads."""
    env = dict(os.environ if base is None else base)
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    if slot.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in slot.gpus)
    elif hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    # keep user code from oversubscribing the machine: one slot's CPUs worth of threads
    threads = str(max(1, int(slot.cpus))) if slot.cpus >= 1 else "1"
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(var, threads)
    return env


def _popen(env: Mapping[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """A worker process in a session of its own, and the read end of its event pipe (non-blocking)."""
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sweeplab.backends.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=None,
            pass_fds=(w,), env={**env, "SWEEPLAB_EVENT_FD": str(w)}, start_new_session=True,
        )
    except OSError as exc:
        os.close(r)
        os.close(w)
        raise BackendError(f"cannot start a worker process: {exc}") from None
    os.close(w)
    os.set_blocking(r, False)
    return proc, r


# ----------------------------------------------------------------------------- workers started early
#: workers started before their backend exists: (environment, process, read end of its event pipe)
_PRESTARTED: list[tuple[dict[str, str], subprocess.Popen[bytes], int]] = []


def prestart(workers: int, *, cpus: float = 1.0) -> None:
    """Start `workers` workers of one CPU-only slot of `cpus` each now, before the sweep's backend exists.

    Why: a worker's interpreter start and imports take about as long as the command line's own imports and
    reading of the spec; started first (`sweeplab sweep` does, from its arguments alone: cli/_early.py),
    they run side by side on another core. A `LocalBackend` takes one over when it would start a worker
    with exactly the same environment (`_adopt`), so an adopted worker is the worker it would have started;
    any other plan (GPUs, other CPUs per trial, fewer workers, another backend) starts its own, and
    `release_prestarted` ends those not taken: when a backend starts, and at exit. A worker that cannot
    start here is left to the backend, which reports it as it always has.
    """
    if not _PRESTARTED and not _PRESTARTED_SERVERS:
        import atexit

        atexit.register(release_prestarted)
    env = _worker_env(Slot(0, cpus), {}, hide_gpus=False)
    for _ in range(workers):
        try:
            proc, r = _popen(env)
        except BackendError:
            return
        _PRESTARTED.append((env, proc, r))


def _adopt(env: Mapping[str, str]) -> tuple[subprocess.Popen[bytes], int] | None:
    """A prestarted worker that is alive and was started with exactly `env`, taken out of the pool."""
    for i, (started_env, proc, r) in enumerate(_PRESTARTED):
        if started_env == env and proc.poll() is None:
            del _PRESTARTED[i]
            return proc, r
    return None


def prestart_fork_server(preload: Sequence[str], *, cpus: float = 1.0) -> None:
    """Start the fork server of a sweep of one-CPU slots whose trial imports `preload`, before the sweep's
    backend exists (as `prestart` does for workers: `sweeplab sweep` does, from its spec's `function:` line,
    cli/_early.py); a backend that would start the same one takes it over."""
    if not _PRESTARTED and not _PRESTARTED_SERVERS:
        import atexit

        atexit.register(release_prestarted)
    env = _worker_env(Slot(0, cpus), {}, hide_gpus=False)
    with contextlib.suppress(OSError):
        _PRESTARTED_SERVERS.append((env, tuple(preload), ForkServer(env, preload)))


#: fork servers started before their backend exists: (environment, preload, server)
_PRESTARTED_SERVERS: list[tuple[dict[str, str], tuple[str, ...], ForkServer]] = []


def _adopt_server(env: Mapping[str, str], preload: Sequence[str]) -> ForkServer | None:
    for i, (started_env, started_preload, server) in enumerate(_PRESTARTED_SERVERS):
        if started_env == env and started_preload == tuple(preload) and server.proc.poll() is None:
            del _PRESTARTED_SERVERS[i]
            return server
    return None


def release_prestarted() -> None:
    """End the prestarted workers and fork servers no backend took (SIGKILL to their group: none has run
    anything)."""
    while _PRESTARTED_SERVERS:
        server = _PRESTARTED_SERVERS.pop()[2]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(server.proc.pid, signal.SIGKILL)
        server.close(timeout=5)
    while _PRESTARTED:
        _, proc, r = _PRESTARTED.pop()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.close(r)
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
