"""The part of the Ray backend that imports ray (loaded by `RayBackend.start` only).

Driver side (`RayCore`): one slot per concurrent trial, each slot a `TrialHost` actor holding the trial's
resources. Submitting a trial is one actor call; events come back through a long poll: every actor always
has one `drain(wait)` call in flight, which returns as soon as it has events (or after `wait` seconds),
and `poll` gathers whatever is ready with `ray.wait`. Actors are reused from trial to trial.

Actor side (`TrialHost`): a one-slot `LocalBackend` in the actor's process, so a trial runs in a worker
process of its own exactly as on the local backend (a segfault is a FAILED trial, not a dead actor;
SIGTERM-based preemption, stop, kill and command trials behave the same). A dead actor therefore means a
lost node or a killed Ray worker: its trial ends PREEMPTED and is requeued from its checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayError, RayTaskError

from sweeplab.backends.base import TrialTask
from sweeplab.backends.events import Event, EventKind
from sweeplab.backends.ray._plan import (
    TrialDemand,
    capacity,
    check_checkpoint_root,
    check_fits,
    checkpoint_scheme,
)
from sweeplab.errors import BackendError, UserError

__all__ = ["RayCore", "TrialHost"]

_DRAIN_WAIT = 1.0          # seconds an idle actor's drain call waits before returning nothing
_KILL_GRACE = 10.0         # after kill(), how long the actor has to report before it is ray.kill'ed
_START_TIMEOUT = 120.0     # the first actor must be up within this (else the cluster cannot run trials)


# ================================================================================== actor side
class TrialHost:
    """A Ray actor that runs one trial at a time in a local worker process and buffers its events."""

    def __init__(self, cpus: float, hide_gpus: bool) -> None:
        from sweeplab.backends.local import LocalBackend, Slot

        self._local = LocalBackend([Slot(0, cpus)], hide_gpus=hide_gpus)
        self._local.start()                     # the worker process starts now, ready for the first trial
        self._lock = threading.Lock()           # LocalBackend is single-threaded: one caller at a time
        self._cond = threading.Condition()
        self._buf: list[dict[str, Any]] = []
        self._pending: dict[int, list[tuple[str, tuple[Any, ...]]]] = {}
        self._ended: set[int] = set()           # trials whose attempt here is over (late controls are moot)
        self._current: tuple[int, int] | None = None
        self._closed = False
        threading.Thread(target=self._pump, daemon=True, name="sweeplab-ray-pump").start()

    def where(self) -> dict[str, Any]:
        return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
                "pid": os.getpid()}

    def submit(self, task: dict[str, Any]) -> None:
        t = TrialTask.from_dict(task)
        with self._lock:
            self._current = (t.trial_id, t.attempt)
            self._ended.discard(t.trial_id)
            self._local.submit(t)
            for op, args in self._pending.pop(t.trial_id, []):
                getattr(self._local, op)(t.trial_id, *args)

    def _control(self, op: str, trial: int, *args: Any) -> None:
        with self._lock:
            if trial in self._local.running():
                getattr(self._local, op)(trial, *args)
            elif trial not in self._ended:
                # Threaded actors do not keep call order: this may have overtaken its submit.
                self._pending.setdefault(trial, []).append((op, args))

    def stop(self, trial: int, reason: str = "") -> None:
        self._control("stop", trial, reason)

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

    def _pump(self) -> None:
        idle = 0.001
        while not self._closed:
            with self._lock:
                if self._closed:
                    return
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
                idle = 0.001
            else:
                time.sleep(idle)
                idle = min(idle * 2, 0.02)


# ================================================================================== driver side
@dataclass
class _Slot:
    index: int
    actor: Any = None
    drain: Any = None                   # ObjectRef of the drain call in flight
    task: TrialTask | None = None
    node: str | None = None
    where: Any = None                   # ObjectRef of the actor's where() (node id once it is placed)
    kill_reason: str | None = None
    kill_deadline: float | None = None
    unavailable: int = 0


class RayCore:
    """The Ray backend's state on the driver. All methods run on the driver's thread."""

    def __init__(self, demand: TrialDemand, *, workers: int | None, address: str | None,
                 checkpoint_root: str | None, init: Mapping[str, Any] | None = None,
                 drain_wait: float = _DRAIN_WAIT) -> None:
        self.demand = demand
        self.workers = workers
        self.address = address
        self.checkpoint_root = checkpoint_root
        self.init = dict(init or {})
        self.drain_wait = drain_wait
        self.slots: list[_Slot] = []
        self._owns_ray = False
        self._host_cls: Any = None
        self._by_trial: dict[int, _Slot] = {}

    def describe(self) -> str:
        return f"ray: {len(self.slots)} slot(s) of {self.demand.describe()}"

    # ------------------------------------------------------------------------------ start
    def start(self) -> None:
        self._connect()
        try:
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            resources = [dict(n.get("Resources") or {}) for n in nodes]
            check_fits(self.demand, resources)
            fit = capacity(self.demand, resources)
            n = self.workers or max(1, fit)
            if n > fit:
                raise UserError(
                    f"--workers {n}: the Ray cluster holds only {fit} trial(s) of {self.demand.describe()} "
                    "at once right now; lower --workers or add nodes"
                )
            self._check_checkpoints(nodes)
            self._host_cls = ray.remote(TrialHost).options(
                max_concurrency=4, max_restarts=0, **self.demand.ray_options(),
            )
            self.slots = [_Slot(i) for i in range(n)]
            for slot in self.slots:
                self._spawn(slot)
            self._wait_first_actor()
        except BaseException:
            self.shutdown()
            raise

    def _connect(self) -> None:
        if ray.is_initialized():
            return
        address = self.address
        if address and address not in ("auto", "local"):
            _probe_address(address)
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "configure_logging": False}
        kwargs.update(self.init)
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"--address {address}" if address else "Ray"
            raise UserError(f"{where}: cannot connect to a Ray cluster: {str(exc).splitlines()[0]}"
                            " (start one with `ray start --head`, or check the address)") from None
        self._owns_ray = True

    def _check_checkpoints(self, nodes: list[dict[str, Any]]) -> None:
        root = self.checkpoint_root
        if not root:
            return
        hosts = {str(n.get("NodeManagerAddress")) for n in nodes}
        here = ray.util.get_node_ip_address()
        multi_host = len(hosts | {here}) > 1
        unseen: list[str] | None = None
        if multi_host and checkpoint_scheme(root) in ("", "file", "local"):
            unseen = self._probe_shared(root, nodes, here)
        check_checkpoint_root(root, multi_host=multi_host, unseen=unseen)

    def _probe_shared(self, root: str, nodes: list[dict[str, Any]], here: str) -> list[str]:
        """Write a file under `root` and ask one task on every other host whether it sees it."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        path = root.partition("://")[2] if "://" in root else root
        probe = Path(path) / f".sweeplab-probe-{uuid.uuid4().hex}"
        try:
            probe.parent.mkdir(parents=True, exist_ok=True)
            probe.write_text("sweeplab")
        except OSError as exc:
            raise UserError(f"checkpoint_dir: cannot write under {root!r}: {exc.strerror or exc}") from None
        try:
            sees = ray.remote(_path_exists).options(num_cpus=0)
            refs = {}
            for n in nodes:
                if str(n.get("NodeManagerAddress")) == here:
                    continue
                strategy = NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)
                refs[str(n.get("NodeManagerAddress"))] = sees.options(scheduling_strategy=strategy).remote(
                    str(probe))
            unseen = []
            for host, ref in refs.items():
                try:
                    if not ray.get(ref, timeout=60):
                        unseen.append(host)
                except (RayError, GetTimeoutError):
                    unseen.append(host)
            return unseen
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()

    def _spawn(self, slot: _Slot) -> None:
        slot.actor = self._host_cls.remote(self.demand.cpus, self.demand.gpus <= 0)
        slot.where = slot.actor.where.remote()
        slot.node = None
        slot.drain = slot.actor.drain.remote(self.drain_wait)
        slot.unavailable = 0

    def _wait_first_actor(self) -> None:
        refs = [s.where for s in self.slots if s.where is not None]
        ready, _ = ray.wait(refs, num_returns=1, timeout=_START_TIMEOUT)
        if not ready:
            raise BackendError(
                f"no Ray actor with {self.demand.describe()} started within {_START_TIMEOUT:g}s "
                "(is the cluster busy, or scaling up?)"
            )
        try:
            ray.get(ready[0])
        except RayError as exc:
            raise BackendError(f"a Ray actor for trials cannot start: {_first_line(exc)} (is sweeplab "
                               "installed on every node, at the same version?)") from None

    # ------------------------------------------------------------------------------ trials
    def free_slots(self) -> int:
        return sum(1 for s in self.slots if s.task is None)

    def running(self) -> list[int]:
        return list(self._by_trial)

    def node_of(self, trial_id: int) -> str | None:
        slot = self._by_trial.get(trial_id)
        if slot is None:
            return None
        if slot.node is None and slot.where is not None:
            with contextlib.suppress(RayError, GetTimeoutError):
                slot.node = ray.get(slot.where, timeout=30)["node"]
        return slot.node

    def submit(self, task: TrialTask) -> None:
        slot = next((s for s in self.slots if s.task is None), None)
        if slot is None:
            raise BackendError("submit() called with no free slot")
        if slot.actor is None:
            self._spawn(slot)
        slot.task = task
        slot.kill_reason = slot.kill_deadline = None
        self._by_trial[task.trial_id] = slot
        slot.actor.submit.remote(task.to_dict())

    def stop(self, trial_id: int, reason: str = "") -> None:
        slot = self._by_trial.get(trial_id)
        if slot is not None and slot.actor is not None:
            slot.actor.stop.remote(trial_id, reason)

    def preempt(self, trial_id: int) -> None:
        slot = self._by_trial.get(trial_id)
        if slot is not None and slot.actor is not None:
            slot.actor.preempt.remote(trial_id)

    def kill(self, trial_id: int, reason: str) -> None:
        slot = self._by_trial.get(trial_id)
        if slot is not None and slot.actor is not None:
            slot.kill_reason = reason
            slot.kill_deadline = time.monotonic() + _KILL_GRACE
            slot.actor.kill.remote(trial_id, reason)

    # ------------------------------------------------------------------------------ events
    def poll(self, timeout: float) -> list[Event]:
        events: list[Event] = []
        by_ref = {s.drain: s for s in self.slots if s.drain is not None}
        if by_ref:
            refs = list(by_ref)
            ready, _ = ray.wait(refs, num_returns=1, timeout=max(0.0, timeout))
            if ready and len(refs) > 1:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                events.extend(self._collect(by_ref[ref], ref))
        elif timeout > 0:
            time.sleep(timeout)
        now = time.monotonic()
        for slot in self.slots:
            if slot.task is not None and slot.kill_deadline is not None and now > slot.kill_deadline:
                events.extend(self._end_lost(slot, f"{slot.kill_reason} (Ray actor killed)", killed=True))
        return events

    def _collect(self, slot: _Slot, ref: Any) -> list[Event]:
        slot.drain = None
        try:
            batch = ray.get(ref)
        except ActorUnavailableError:
            slot.unavailable += 1
            if slot.unavailable < 10:
                slot.drain = slot.actor.drain.remote(self.drain_wait)
                return []
            return self._end_lost(slot, "Ray actor unavailable")
        except RayActorError as exc:
            return self._end_lost(slot, _lost_reason(exc))
        except RayTaskError as exc:
            return self._end_lost(slot, f"Ray actor failed: {_first_line(exc)}")
        slot.unavailable = 0
        out: list[Event] = []
        for d in batch:
            ev = Event.from_dict(d)
            out.append(ev)
            task = slot.task
            if ev.kind.ends_attempt and task is not None and (ev.trial, ev.attempt) == (task.trial_id, task.attempt):
                self._release(slot)
        slot.drain = slot.actor.drain.remote(self.drain_wait)
        return out

    def _release(self, slot: _Slot) -> None:
        if slot.task is not None and self._by_trial.get(slot.task.trial_id) is slot:
            del self._by_trial[slot.task.trial_id]
        slot.task = None
        slot.kill_reason = slot.kill_deadline = None

    def _end_lost(self, slot: _Slot, reason: str, *, killed: bool = False) -> list[Event]:
        """The actor is gone (node lost, actor killed): end its trial and forget the actor."""
        actor, task, kill_reason = slot.actor, slot.task, slot.kill_reason
        if actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        slot.actor = slot.drain = slot.where = slot.node = None
        self._release(slot)
        if task is None:
            return []
        now = time.time()
        if killed or kill_reason:
            why = reason if killed else f"{kill_reason} ({reason})"
            return [Event(EventKind.FAILED, task.trial_id, task.attempt, now, {
                "reason": why, "error_type": "Killed", "message": why})]
        return [Event(EventKind.PREEMPTED, task.trial_id, task.attempt, now, {"reason": reason})]

    # ------------------------------------------------------------------------------ shutdown
    def shutdown(self, *, grace: float = 0.0) -> None:
        refs = []
        for slot in self.slots:
            if slot.actor is not None:
                with contextlib.suppress(Exception):
                    refs.append(slot.actor.shutdown.remote(grace))
        if refs:
            with contextlib.suppress(Exception):
                ray.wait(refs, num_returns=len(refs), timeout=grace + 10.0)
        for slot in self.slots:
            if slot.actor is not None:
                with contextlib.suppress(Exception):
                    ray.kill(slot.actor, no_restart=True)
            slot.actor = slot.drain = slot.where = None
            slot.task = None
        self._by_trial.clear()
        if self._owns_ray:
            with contextlib.suppress(Exception):
                ray.shutdown()
            self._owns_ray = False


# ================================================================================== helpers
def _path_exists(path: str) -> bool:
    return os.path.exists(path)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _lost_reason(exc: RayActorError) -> str:
    text = str(exc)
    if getattr(exc, "preempted", False):
        return "Ray node preempted (spot instance reclaimed)"
    if "node" in text.lower() and ("died" in text.lower() or "dead" in text.lower()):
        return "Ray node lost"
    return f"Ray actor died: {_first_line(exc)}"


def _probe_address(address: str) -> None:
    """Fail fast, with a clear message, when nothing listens at host:port."""
    rest = address.partition("://")[2] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"--address {address!r}: expected host:port (or ray://host:port, or auto)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=3.0):
            pass
    except OSError as exc:
        raise UserError(f"--address {address}: nothing answers there ({exc.strerror or exc}); is the Ray "
                        "head running (`ray start --head`) and the port open?") from None
