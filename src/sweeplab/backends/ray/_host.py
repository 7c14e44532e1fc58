"""The actor side of the Ray backend (imports ray): `TrialHost`, one per slot (or per rank).

Actor side (`TrialHost`): a one-slot `LocalBackend` in the actor's process, so a trial runs in a worker
process of its own exactly as on the local backend (a segfault is a FAILED trial, not a dead actor;
SIGTERM-based preemption, stop, kill and command trials behave the same). A dead actor therefore means a
lost node or a killed Ray worker: its trial ends PREEMPTED and is requeued from its checkpoint.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import ray

from sweeplab.backends.base import TrialTask
from sweeplab.backends.multiproc import reserve_port

_WAKE = 0.25   # the pump's longest sleep: a worker's exit is noticed within this even without pipe EOF


class TrialHost:
    """A Ray actor that runs one trial at a time in a local worker process and buffers its events."""

    def __init__(self, cpus: float, hide_gpus: bool, preload: Sequence[str] = ()) -> None:
        from sweeplab.backends.local import LocalBackend, Slot

        # its worker imports the trial's libraries before the first trial, as a local worker does
        self._local = LocalBackend([Slot(0, cpus)], hide_gpus=hide_gpus, preload=preload)
        self._local.start()                     # the worker process starts now, ready for the first trial
        self._lock = threading.Lock()           # LocalBackend is single-threaded: one caller at a time
        self._cond = threading.Condition()
        self._buf: list[dict[str, Any]] = []
        self._pending: dict[int, list[tuple[str, tuple[Any, ...]]]] = {}
        self._ended: set[int] = set()           # trials whose attempt here is over (late controls are moot)
        self._current: tuple[int, int] | None = None
        self._closed = False
        self._port_hold: socket.socket | None = None
        self._raylet = os.getppid()             # the node's raylet started this actor's process
        threading.Thread(target=self._pump, daemon=True, name="sweeplab-ray-pump").start()

    def where(self) -> dict[str, Any]:
        return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
                "pid": os.getpid(), "ip": ray.util.get_node_ip_address(),
                "gpus": [str(g) for g in ray.get_gpu_ids()]}   # this actor's own (CUDA_VISIBLE_DEVICES)

    def master_port(self) -> int:
        """A free port on this node, for MASTER_PORT of a multi-process trial whose rank 0 runs here.

        It stays reserved (multiproc.reserve_port) until the next trial of this host asks for one, so that
        no other trial on the node is handed it while rank 0 starts."""
        if self._port_hold is not None:   # this host runs one trial at a time: the previous one is over
            self._port_hold.close()
        self._port_hold = reserve_port(ray.util.get_node_ip_address())
        return int(self._port_hold.getsockname()[1])

    def submit(self, task: dict[str, Any]) -> None:
        t = TrialTask.from_dict(task)
        with self._lock:
            self._current = (t.trial_id, t.attempt)
            self._ended.discard(t.trial_id)
            self._local.submit(t)
            for op, args in self._pending.pop(t.trial_id, []):
                getattr(self._local, op)(t.trial_id, *args)
            self._collect()   # an event the submit queued itself (the pump may be asleep for _WAKE)

    def _control(self, op: str, trial: int, *args: Any) -> None:
        with self._lock:
            if trial in self._local.running():
                getattr(self._local, op)(trial, *args)
                self._collect()
            elif trial not in self._ended:
                # Threaded actors do not keep call order: this may have overtaken its submit.
                self._pending.setdefault(trial, []).append((op, args))

    def stop(self, trial: int, reason: str = "") -> None:
        self._control("stop", trial, reason)

    def go(self, trial: int, step: int) -> None:
        self._control("go", trial, step)

    def preempt(self, trial: int) -> None:
        self._control("preempt", trial)

    def kill(self, trial: int, reason: str) -> None:
        self._control("kill", trial, reason)

    def drain(self, wait: float) -> list[dict[str, Any]]:
        with self._cond:
            if not self._buf and not self._closed:
                self._cond.wait(timeout=wait)
            out, self._buf = self._buf, []
        return out

    def shutdown(self, grace: float = 0.0) -> None:
        with self._lock:
            self._closed = True
            self._local.shutdown(grace=grace)
        with self._cond:
            self._cond.notify_all()

    def _orphaned(self) -> None:
        """The node's raylet died (killed, OOM-killed, crashed) while its machine lives on: Ray takes the node
        for lost and the driver runs the trial again elsewhere, but nothing of Ray's ends this actor's process
        nor the trial's worker, which went on running (and holding their memory and GPU) indefinitely. End
        them, as a lost node would have: the worker's whole process tree, then this process."""
        got = self._lock.acquire(timeout=5.0)   # a control call in progress ends in a moment
        try:
            self._closed = True
            self._local.shutdown(grace=0.0)
        finally:
            if got:
                self._lock.release()
            os._exit(1)

    def _collect(self) -> bool:
        """Move the local backend's events to the buffer `drain` returns (caller holds `_lock`)."""
        events = self._local.poll(0.0)
        for ev in events:
            if ev.kind.ends_attempt and self._current == (ev.trial, ev.attempt):
                self._current = None
                self._ended.add(ev.trial)
                self._pending.pop(ev.trial, None)
        if events:
            with self._cond:
                self._buf.extend(ev.to_dict() for ev in events)
                self._cond.notify_all()
        return bool(events)

    def _pump(self) -> None:
        """Wait (no lock held, no CPU) until the worker writes, then collect. Sleeping and re-polling
        instead cost every idle actor ~12 ms of CPU a second: 0.8 of this 2-core machine's cores for 64
        slots, which slowed every trial's round trip."""
        idle = 0.001
        while not self._closed:
            woke = self._local.wait(_WAKE)
            if os.getppid() != self._raylet:
                self._orphaned()
            with self._lock:
                if self._closed:
                    return
                got = self._collect()
            if got or not woke:
                idle = 0.001
            else:   # readable but no whole event yet (a partial line): do not spin on it
                time.sleep(idle)
                idle = min(idle * 2, 0.02)
