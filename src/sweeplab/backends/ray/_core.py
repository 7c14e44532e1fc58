"""The part of the Ray backend that imports ray (loaded by `RayBackend.start` only).

Driver side (`RayCore`): one slot per concurrent trial, each slot a `TrialHost` actor holding the trial's
resources. Submitting a trial is one actor call; events come back through a long poll: every actor always
has one `drain(wait)` call in flight, which returns as soon as it has events (or after `wait` seconds),
and `poll` gathers whatever is ready with `ray.wait`. Actors are reused from trial to trial.

The actor side (`TrialHost`) is in `_host.py`, small helpers in `_helpers.py`.

A multi-process trial (`resources.workers` W > 1) takes a slot made of a placement group of W bundles
(one per rank, PACK by default, so ranks may land on different nodes) and one `TrialHost` per bundle;
each rank runs as a one-process trial with the torchrun environment (`_gang.rank_tasks`) and `_gang.Gang`
turns the ranks' events into the events of one trial.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayError, RayTaskError

from sweeplab.backends.base import TrialTask
from sweeplab.backends.events import SWEEP, Event, EventKind
from sweeplab.backends.ray._auth import check_token, token_help
from sweeplab.backends.ray._gang import Gang, Op, rank_tasks
from sweeplab.backends.ray._helpers import (
    _first_line,
    _init_address,
    _lost_reason,
    _path_exists,
    _probe_address,
    _start_error,
)
from sweeplab.backends.ray._host import TrialHost
from sweeplab.backends.ray._plan import (
    TrialDemand,
    capacity,
    check_checkpoint_root,
    check_fits,
    checkpoint_scheme,
    workdir_warning,
)
from sweeplab.errors import BackendError, SweeplabError, UserError

__all__ = ["RayCore", "TrialHost"]

_DRAIN_WAIT = 1.0          # seconds an idle actor's drain call waits before returning nothing
_KILL_GRACE = 10.0         # after kill(), how long the actor has to report before it is ray.kill'ed
_START_TIMEOUT = 120.0     # the first actor must be up within this (else the cluster cannot run trials)
_HEAD_EVERY = 5.0          # seconds between checks that the cluster's head (its GCS) still answers
_START_FAILURES = 3        # a slot whose actors failed to start this many times in a row is retired
_BOOT_WARN = _START_TIMEOUT   # an actor not started this long after its spawn gets a warning (once)
_PAUSED = 2.0              # seconds the driver was away (between polls, or over a poll's timeout): paused
# token authentication errors (recent Ray; older Ray has none, and ConnectionError stands in harmlessly)
_AUTH_ERROR: type[Exception] = getattr(ray.exceptions, "AuthenticationError", ConnectionError)


# ================================================================================== driver side
class StartInterrupted(BackendError):
    """Ctrl-C or SIGTERM while the backend started: one error naming what it interrupted, exit 128 + the
    signal's number (130, 143). Not a KeyboardInterrupt: the command line would print nothing for one."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class _Signalled(BaseException):
    """Raised by the signal handler while the backend starts; a BaseException, so that no `except Exception`
    inside ray.init swallows it (its connection retries do), turned into `StartInterrupted` by `start`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _StartSignals:
    """SIGINT and SIGTERM while the backend starts (`RayCore.start`; main thread only): one clear error
    (`StartInterrupted`: exit 130 for Ctrl-C, 143 for SIGTERM) that names what was interrupted, after the
    backend has stopped what it started.

    While `ray.init` starts a local Ray instance (`hold`), the signal is held until it has started, and that
    instance is then stopped: interrupted half-way, `ray.init` leaves the processes it started so far running
    with no one to stop them (the raylet's dashboard and runtime-env agents outlive the driver). A second
    signal interrupts at once. Anywhere else (connecting to a cluster, starting the actors) it interrupts at
    once. Ray's own SIGTERM handler (`sys.exit(15)`, silently, wherever the process is), which `ray.init`
    installs in place of any other, is kept out while the backend starts. Afterwards a driver's handler stays in
    place; where SIGTERM or SIGINT had its default, a `_HeldSignals` (`held`) holds it for the driver to come."""

    def __init__(self, what: str) -> None:
        self.what = what          # "connecting to Ray": what the signal interrupted
        self.holding = False
        self.got: int | None = None
        self.ray_handler: Any = None   # the SIGTERM handler ray.init wanted to install
        self.held: _HeldSignals | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StartSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            # started: held for the driver where the signal had its default (also where a former sweep of this
            # process left its own hold): SIGTERM's action, Python's KeyboardInterrupt for Ctrl-C
            plain = (signal.SIG_DFL, None) if sig == signal.SIGTERM else (signal.default_int_handler,)
            if kind is None and (handler in plain or isinstance(handler, _HeldSignals)):
                if self.held is None:
                    self.held = _HeldSignals(self.ray_handler)
                handler = self.held
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    def error(self, signum: int) -> BaseException:
        name = signal.Signals(signum).name
        return StartInterrupted(f"{name} while {self.what}: stopped before any trial ran", signum)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.holding and self.got is None:
            self.got = signum
            with contextlib.suppress(OSError):
                os.write(2, f"{signal.Signals(signum).name}: stopping once Ray's local instance has started "
                            "(to stop it too); press Ctrl-C again to quit at once\n".encode())
            return
        self.got = signum
        raise _Signalled(signum)

    @property
    def active(self) -> bool:
        return bool(self._previous)

    @contextlib.contextmanager
    def around_init(self, *, hold: bool) -> Iterator[None]:
        """Around `ray.init`: its SIGTERM handler captured, not installed; `hold`: a signal waits for it."""
        utils = getattr(getattr(ray, "_private", None), "utils", None)
        install = getattr(utils, "set_sigterm_handler", None)
        if install is not None and self._previous:
            utils.set_sigterm_handler = self._capture   # type: ignore[union-attr]
        self.holding = hold and bool(self._previous)
        try:
            yield
        finally:
            self.holding = False
            if install is not None and self._previous:
                utils.set_sigterm_handler = install   # type: ignore[union-attr]

    def _capture(self, handler: Any) -> None:
        self.ray_handler = handler

    def raise_held(self) -> None:
        if self.got is not None:
            raise self.error(self.got)


def _answered(ref: Any) -> bool:
    """Whether an actor's where() has answered (it started), whether or not a poll has seen it yet."""
    if ref is None:
        return False
    try:
        return bool(ray.wait([ref], num_returns=1, timeout=0)[0])
    except Exception:
        return False


def _install_hint() -> str:
    return ("is sweeplab installed, importable and at the same version on every node, and can the trial's "
            "resources and runtime_env be set up there?")


class _HeldSignals:
    """The SIGTERM and Ctrl-C handler from the backend's start until a driver runs the sweep (installed where the
    signal had its default; main thread). `sweeplab sweep` starts the backend before it creates the sweep and
    runs its driver; Ray's handler, which `ray.init` installs (`sys.exit(15)` wherever the process is), ended
    the process there with exit 15 and the sweep just created left `running`, and a Ctrl-C's KeyboardInterrupt
    did the same with exit 130. Held instead, the first signal is delivered by `release` (the driver's own
    `start()` call, once the driver's handlers are in place): the sweep stops as on a SIGTERM or Ctrl-C to its
    driver (stopped, resumable). A second Ctrl-C while held interrupts at once. Once released, a signal that
    reaches this handler (a driver in another thread; after the sweep, when the driver has put this one back)
    does what it did before: Ctrl-C a KeyboardInterrupt; SIGTERM Ray's handler while Ray runs, else the
    default (the process ends)."""

    def __init__(self, ray_handler: Any) -> None:
        self.ray_handler = ray_handler
        self.holding = True
        self.got: int | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        if self.holding:
            if signum == signal.SIGINT and self.got == signal.SIGINT:
                raise KeyboardInterrupt   # a second Ctrl-C: at once
            if self.got is None:
                self.got = signum
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        elif callable(self.ray_handler) and ray.is_initialized():
            self.ray_handler(signum, frame)
        else:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def release(self) -> None:
        """Stop holding; the signal held so far goes to whatever handles it now (the driver's)."""
        self.holding = False
        got, self.got = self.got, None
        if got is not None:
            signal.raise_signal(got)


def _init_interruptibly(address: str | None, kwargs: dict[str, Any]) -> None:
    """`ray.init` connecting to a cluster, in a thread, while this (main) thread waits where a signal handler
    can run: Ray's connection attempts block in C++ for up to 30 s at a time (a GCS that accepts the
    connection but does not answer), during which no Python signal handler runs. On a signal the attempt is
    abandoned (it starts nothing of ours) and the process is expected to exit."""
    import logging

    outcome: list[BaseException] = []

    def connect() -> None:
        try:
            ray.init(address=address, **kwargs)
        except BaseException as exc:   # handed to the main thread
            outcome.append(exc)

    class _NoThreadWarning(logging.Filter):   # ray.init's "SIGTERM handler is not set ... not the main thread"
        def filter(self, record: logging.LogRecord) -> bool:
            return "SIGTERM handler is not set" not in record.getMessage()

    quiet = _NoThreadWarning()
    log = logging.getLogger("ray._private.worker")
    log.addFilter(quiet)
    try:
        thread = threading.Thread(target=connect, name="sweeplab-ray-init", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
    finally:
        log.removeFilter(quiet)
    if outcome:
        raise outcome[0]


def _init_error(exc: Exception, address: str | None, *, local: bool) -> SweeplabError:
    """The one-line error for `ray.init` failing: Ray's own first line, and what to try. A cluster that
    refuses the connection or our token, or options Ray rejects, are the user's to fix (exit 2); a local
    instance that cannot start (its raylet or GCS timed out on a loaded machine, its temp directory
    unusable) is the environment's (exit 1). Nothing of the sweep is touched: it stays resumable."""
    where = f"--address {address}" if address else "Ray"
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "") or type(exc).__name__
    if not isinstance(exc, (ConnectionError, RuntimeError, ValueError)):
        text = f"{type(exc).__name__}: {text}" if type(exc) is not Exception else text
    auth = _AUTH_ERROR is not ConnectionError and isinstance(exc, _AUTH_ERROR)
    if auth or "authenticat" in text.lower() or "InvalidAuthToken" in text:
        return BackendError(f"{where}: Ray token authentication failed: {text}; {token_help()}")
    if local:
        if isinstance(exc, ValueError):   # the `init` options given to ray.init
            return UserError(f"cannot start a local Ray instance: {text}")
        tmp = os.environ.get("RAY_TMPDIR") or "/tmp"
        return BackendError(f"cannot start a local Ray instance: {text} (a loaded machine can time Ray's start "
                            f"out: try again; check that {tmp}/ray is a writable directory with free space, or "
                            "start Ray yourself (`ray start --head`) and pass its --address)")
    if isinstance(exc, (ConnectionError, RuntimeError, ValueError)):
        return UserError(f"{where}: cannot connect to a Ray cluster: {text} (is its head running "
                         "(`ray start --head`) and reachable at that address? A cluster with token "
                         "authentication also needs RAY_AUTH_MODE=token and its token here)")
    return BackendError(f"{where}: cannot connect to the Ray cluster: {text} (its head may be overloaded or "
                        "still starting: try again; `ray status` there shows its state)")


def _wait_dead(actor_ids: list[str], deadline: float = 10.0) -> None:
    """Before `ray.shutdown`: wait until the cluster has the actors just killed as DEAD (or `deadline`).
    `ray.kill` and dropping their handles only start their end: the cluster's calls about them (the GCS
    asking their owner, this driver, whether their handles are gone; their workers' last calls) then reach
    this process while `ray.shutdown` destroys its core worker, and a reply sent then crashed the process
    with SIGSEGV in Ray's C++ (`ServerCallImpl::SendReply`) on a loaded machine, after the sweep finished."""
    end = time.monotonic() + deadline
    state = ray._private.state.state
    while actor_ids and time.monotonic() < end:
        try:
            actor_ids = [a for a in actor_ids if (state.actor_table(a) or {}).get("State") not in ("DEAD", None)]
        except Exception:   # no GCS to ask (it is gone): nothing to wait for
            return
        if actor_ids:
            time.sleep(0.05)


@dataclass
class _Slot:
    index: int
    actor: Any = None
    drain: Any = None                   # ObjectRef of the drain call in flight
    task: TrialTask | None = None
    node: str | None = None
    where: Any = None                   # ObjectRef of the actor's where() (node id once it is placed)
    gpus: list[str] | None = None       # a rank's own GPUs, as Ray gave them to its actor
    kill_reason: str | None = None
    kill_deadline: float | None = None
    unavailable: int = 0
    ready: bool = False                 # its actor has started (where() answered): it may take a trial
    #                                     (a multi-process slot: once every rank's actor has)
    members: list[_Slot] | None = None  # a multi-process slot: one TrialHost per rank
    pg: Any = None                      # ... in the bundles of this placement group
    gang: Gang | None = None            # ... running this attempt
    queued: list[Event] = field(default_factory=list)
    start_failures: int = 0             # its actors that could not start, in a row (their own fault, not a node's)
    retired: str | None = None          # why it takes no more trials: its actors cannot start
    spawned: float = 0.0                # monotonic time its (current) actor was created
    boot_noted: bool = False            # ... and the warning that it has not started was given


def _this_host(nodes: list[dict[str, Any]]) -> tuple[str, bool]:
    """This process's host address, and whether the cluster's nodes span more than this host."""
    here = ray.util.get_node_ip_address()
    return here, len({str(n.get("NodeManagerAddress")) for n in nodes} | {here}) > 1


class RayCore:
    """The Ray backend's state on the driver. All methods run on the driver's thread."""

    def __init__(self, demand: TrialDemand, *, workers: int | None, address: str | None,
                 checkpoint_root: str | None, init: Mapping[str, Any] | None = None,
                 drain_wait: float = _DRAIN_WAIT, placement: str | None = "PACK",
                 preload: Sequence[str] = (), workdir_root: str | None = None) -> None:
        self.demand = demand
        # the store's workdirs/ when trials run in their own directories (trial.workdir: trial), else None
        self.workdir_root = workdir_root
        self.preload = tuple(preload)
        # ranks of a multi-process trial spread over a placement group (None: all in one actor)
        self.placement = placement if demand.world_size > 1 else None
        self.workers = workers
        self.address = address
        self.checkpoint_root = checkpoint_root
        self.init = dict(init or {})
        self.drain_wait = drain_wait
        self.slots: list[_Slot] = []
        self._owns_ray = False
        self._host_cls: Any = None
        self._host_opts: dict[str, Any] = {}
        self._by_trial: dict[int, _Slot] = {}
        self._gcs: str | None = None        # host:port of the cluster's GCS (its head), once connected
        self._head_checked = 0.0
        self._head_lost: str | None = None  # why the head is gone: no Ray call can succeed any more
        self._sigterm: _HeldSignals | None = None   # SIGTERM, Ctrl-C held from start until the driver runs
        self._polled: float | None = None   # when the last poll returned (monotonic)
        self._own_instance = False          # Ray runs as a local instance this backend started

    def describe(self) -> str:
        text = f"ray: {len(self.slots)} slot(s) of {self.demand.describe()}"
        return f"{text}, one placement group ({self.placement}) each" if self.placement else text

    # ------------------------------------------------------------------------------ start
    def start(self) -> None:
        target = _init_address(self.address)
        env = os.environ.get("RAY_ADDRESS")
        what = ("starting a local Ray instance" if target == "local" and not ray.is_initialized() else
                f"connecting to the Ray cluster (--address {self.address})" if self.address else
                f"connecting to the Ray cluster (RAY_ADDRESS={env})" if env else "connecting to Ray")
        with _StartSignals(what) as signals:
            try:
                self._start(signals)
            except _Signalled as sig:
                raise signals.error(sig.signum) from None
        self._sigterm = signals.held

    def release_signals(self) -> None:
        """The driver's handlers are in place: a signal held since `start` goes to them (see `_HeldSignals`)."""
        if self._sigterm is not None:
            self._sigterm.release()

    def _start(self, signals: _StartSignals) -> None:
        self._connect(signals)
        signals.what = "starting the Ray actors that run trials"
        try:
            if "://" not in (self.address or ""):   # a Ray Client (ray://) may not reach the GCS port itself
                with contextlib.suppress(Exception):
                    self._gcs = str(ray.get_runtime_context().gcs_address)
            self._head_checked = time.monotonic()
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            resources = [dict(n.get("Resources") or {}) for n in nodes]
            check_fits(self.demand, resources, placement=self.placement)
            fit = capacity(self.demand, resources, placement=self.placement)
            n = self.workers or max(1, fit)
            if n > fit:
                raise UserError(
                    f"--workers {n}: the Ray cluster holds only {fit} trial(s) of {self.demand.describe()} "
                    "at once right now; lower --workers or add nodes"
                )
            self._check_checkpoints(nodes)
            self._check_workdirs(nodes)
            host_demand = self.demand.per_rank() if self.placement else self.demand
            self._host_opts = {"max_concurrency": 4, "max_restarts": 0, **host_demand.ray_options()}
            self._host_cls = ray.remote(TrialHost).options(**self._host_opts)
            self.slots = [_Slot(i) for i in range(n)]
            if self.placement:
                from ray.util.placement_group import placement_group

                for slot in self.slots:
                    slot.pg = placement_group(self.demand.bundles(), strategy=self.placement)
                    slot.members = [_Slot(r) for r in range(self.demand.world_size)]
            for slot in self.slots:
                self._spawn(slot)
            self._wait_actors()
        except BaseException:
            self.shutdown()
            raise

    def _connect(self, signals: _StartSignals) -> None:
        if ray.is_initialized():
            return
        address = self.address
        if address and address not in ("auto", "local"):
            _probe_address(address)
        if address and "://" not in address and address not in ("auto", "local"):
            # a cluster refusing our token: one clear error now, not 20 s of warnings and a wrong hint.
            # (Without an address, or with "auto", Ray itself sends a token it finds: nothing to check.)
            check_token(address)
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "configure_logging": False}
        kwargs.update(self.init)
        target = _init_address(address)
        try:
            try:
                with signals.around_init(hold=target == "local"):
                    if target == "local" or not signals.active:
                        ray.init(address=target, **kwargs)
                    else:
                        _init_interruptibly(target, kwargs)
            except _Signalled:   # connecting to a cluster: nothing of ours to stop
                raise
            except BaseException:   # failed half-way: leave nothing of it initialised
                with contextlib.suppress(Exception):
                    ray.shutdown()
                raise
            if signals.got is not None:   # held while the local instance started: stop it, then say so
                with contextlib.suppress(Exception):
                    ray.shutdown()
                signals.raise_held()
        except SweeplabError:   # an interruption held while the local instance started (StartInterrupted)
            raise
        except Exception as exc:   # Ray raises bare Exception, TimeoutError, OSError... as well: one line each
            raise _init_error(exc, address, local=target == "local") from None
        self._owns_ray = True
        self._own_instance = target == "local"   # a new local Ray instance, this sweep's alone

    def _check_checkpoints(self, nodes: list[dict[str, Any]]) -> None:
        root = self.checkpoint_root
        if not root:
            return
        here, multi_host = _this_host(nodes)
        unseen: list[str] | None = None
        if multi_host and checkpoint_scheme(root) in ("", "file", "local"):
            unseen = self._probe_shared(root, nodes, here)
        check_checkpoint_root(root, multi_host=multi_host, unseen=unseen)

    def _check_workdirs(self, nodes: list[dict[str, Any]]) -> None:
        """Warn (stderr) when trials run in their own directories under a store some hosts cannot see."""
        root = self.workdir_root
        if not root:
            return
        here, multi_host = _this_host(nodes)
        unseen = self._probe_shared(root, nodes, here, what="trial.workdir: trial") if multi_host else None
        message = workdir_warning(root, multi_host=multi_host, unseen=unseen)
        if message:
            print(f"warning: {message}", file=sys.stderr, flush=True)

    def _probe_shared(self, root: str, nodes: list[dict[str, Any]], here: str,
                      what: str = "checkpoint_dir") -> list[str]:
        """Write a file under `root` and ask one task on every other host whether it sees it."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        path = root.partition("://")[2] if "://" in root else root
        probe = Path(path) / f".sweeplab-probe-{uuid.uuid4().hex}"
        try:
            probe.parent.mkdir(parents=True, exist_ok=True)
            probe.write_text("sweeplab")
        except OSError as exc:
            raise UserError(f"{what}: cannot write under {root!r}: {exc.strerror or exc}") from None
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
        if slot.members is not None:
            for member in slot.members:
                if member.actor is None:
                    self._spawn_rank(slot, member)
            return
        slot.actor = self._host_cls.remote(self.demand.cpus, self.demand.gpus <= 0, self.preload)
        slot.where = slot.actor.where.remote()
        slot.spawned, slot.boot_noted = time.monotonic(), False
        slot.node = None
        slot.ready = False
        slot.drain = slot.actor.drain.remote(self.drain_wait)
        slot.unavailable = 0

    def _spawn_rank(self, slot: _Slot, member: _Slot) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        one = self.demand.per_rank()
        strategy = PlacementGroupSchedulingStrategy(placement_group=slot.pg,
                                                    placement_group_bundle_index=member.index)
        host = ray.remote(TrialHost).options(scheduling_strategy=strategy, **self._host_opts)
        member.actor = host.remote(one.cpus, one.gpus <= 0)
        member.where = member.actor.where.remote()
        member.spawned, member.boot_noted = time.monotonic(), False
        member.node = None
        member.ready = False
        member.drain = member.actor.drain.remote(self.drain_wait)
        member.unavailable = 0
        member.kill_reason = member.kill_deadline = None

    def _wait_actors(self) -> None:
        """The first actor must start (else the cluster cannot run trials: a clear error), then the others."""
        refs = [m.where for s in self.slots for m in (s.members or [s]) if m.where is not None]
        ready, _ = ray.wait(refs, num_returns=1, timeout=_START_TIMEOUT)
        if not ready:
            raise BackendError(
                f"no Ray actor with {self.demand.describe()} started within {_START_TIMEOUT:g}s "
                "(is the cluster busy, or scaling up?)"
            )
        try:
            ray.get(ready[0])
        except RayError as exc:
            raise BackendError(f"a Ray actor for trials cannot start: {_start_error(exc) or _first_line(exc)} "
                               "(is sweeplab installed on every node, at the same version?)") from None
        # then the others, so that every slot is free when start() returns (an actor still booting
        # takes no trial); one that is not up by the deadline joins when it is (see `poll`)
        rest = [r for r in refs if r not in ready]
        if rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=_START_TIMEOUT)
            ready = [*ready, *more]
        self._placed(ready)   # no trial yet, so nothing to report; a failed actor is replaced at once

    def _placed(self, refs: list[Any]) -> list[Event]:
        """Mark the slots whose where() answered (in `refs`) ready; an actor that failed to start is lost."""
        out: list[Event] = []
        done = set(refs)
        for slot in self.slots:
            for member in slot.members or []:
                if not member.ready and member.where is not None and member.where in done:
                    try:
                        member.node = ray.get(member.where)["node"]
                        member.ready = True
                        if all(m.ready for m in slot.members or []):
                            slot.start_failures = 0
                    except RayError as exc:
                        why = self._start_failed(slot, exc)
                        out.extend(self._rank_lost(slot, member.index, f"rank {member.index}'s Ray actor "
                                                   f"could not start: {why or _first_line(exc)}"))
            if slot.members is None and not slot.ready and slot.where in done:
                try:
                    slot.node = ray.get(slot.where)["node"]
                    slot.ready = True
                    slot.start_failures = 0
                except RayError as exc:
                    why = self._start_failed(slot, exc)
                    out.extend(self._end_lost(slot, f"Ray actor could not start: {why or _first_line(exc)}"))
        return out

    def _start_failed(self, slot: _Slot, exc: BaseException) -> str | None:
        """An actor of `slot` could not start: count it when the fault is the actor's own (`_start_error`:
        its constructor raised, its runtime_env failed), and retire the slot after _START_FAILURES in a row.
        Its trial was requeued (PREEMPTED) after each, started again on a new actor that failed the same
        way: the sweep spun forever, starting an actor a second, on a node where sweeplab does not import."""
        why = _start_error(exc)
        if why is not None:
            slot.start_failures += 1
            if slot.start_failures >= _START_FAILURES and slot.retired is None:
                slot.retired = why
        return why

    # ------------------------------------------------------------------------------ trials
    def _takes(self, slot: _Slot) -> bool:
        """Free for a trial: idle, and its actor started (a trial sent to an actor still booting would
        wait there, tens of seconds for 64 on a busy machine or minutes for a node still coming up, while
        started actors idle). A slot without an actor (its node was lost) starts one on submit."""
        if slot.retired is not None:   # its actors cannot start
            return False
        if slot.members is not None:   # every rank's actor placed in its bundle (or to be started)
            return slot.task is None and all(m.actor is None or m.ready for m in slot.members)
        return slot.task is None and (slot.actor is None or slot.ready)

    def free_slots(self) -> int:
        return sum(1 for s in self.slots if self._takes(s))

    def running(self) -> list[int]:
        """The trials whose attempt has not ended for the driver yet (an end still queued counts)."""
        ids = list(self._by_trial)
        ids += [ev.trial for s in self.slots for ev in s.queued if ev.kind.ends_attempt and ev.trial not in ids]
        return ids

    def node_of(self, trial_id: int) -> str | None:
        slot = self._by_trial.get(trial_id)
        if slot is None:
            return None
        if slot.node is None and slot.where is not None:
            with contextlib.suppress(RayError, GetTimeoutError):
                slot.node = ray.get(slot.where, timeout=30)["node"]
        return slot.node

    def submit(self, task: TrialTask) -> None:
        free = [s for s in self.slots if self._takes(s)]
        slot = next((s for s in free if s.actor is not None), free[0] if free else None)
        if slot is None:
            raise BackendError("submit() called with no free slot")
        if slot.actor is None:
            self._spawn(slot)
        if slot.members is not None:
            self._submit_gang(slot, task)
            return
        slot.task = task
        slot.kill_reason = slot.kill_deadline = None
        self._by_trial[task.trial_id] = slot
        slot.actor.submit.remote(task.to_dict())

    def _submit_gang(self, slot: _Slot, task: TrialTask) -> None:
        """Every rank's node is known (its actor is placed), rank 0's node gives MASTER_ADDR/PORT."""
        assert slot.members is not None
        self._spawn(slot)   # ranks lost with their node come back in the rescheduled bundles
        slot.task, slot.gang = task, Gang(task, len(slot.members))
        slot.kill_reason = slot.kill_deadline = None
        self._by_trial[task.trial_id] = slot
        try:
            where = ray.get([m.where for m in slot.members], timeout=_START_TIMEOUT)
            port = ray.get(slot.members[0].actor.master_port.remote(), timeout=_START_TIMEOUT)
        except (RayError, GetTimeoutError) as exc:
            why = self._start_failed(slot, exc)
            for r in range(len(slot.members)):   # the trial never started: PREEMPTED, requeued
                slot.queued.extend(self._rank_lost(slot, r, f"rank {r} could not start: {why or _first_line(exc)}"))
            return
        for member, info in zip(slot.members, where):
            member.node, member.gpus = info["node"], list(info.get("gpus") or [])
        slot.node = where[0]["node"]
        slot.gang.placed([w["node"] for w in where])
        per_rank = self.demand.gpus / len(where) if self.demand.gpus > 0 else None   # < 1: may share a GPU
        tasks = rank_tasks(task, [w["node"] for w in where], where[0]["ip"], int(port),
                           gpus=[list(w.get("gpus") or []) for w in where], gpus_per_rank=per_rank)
        for member, t in zip(slot.members, tasks):
            member.task = t
            member.kill_reason = member.kill_deadline = None
            member.actor.submit.remote(t.to_dict())

    def _apply(self, slot: _Slot, ops: list[tuple[Op, int]], reason: str = "") -> None:
        assert slot.members is not None and slot.task is not None
        trial = slot.task.trial_id
        for op, r in ops:
            member = slot.members[r]
            if member.actor is None:
                continue
            if op is Op.KILL:
                why = reason or "another rank of the trial failed or was lost"
                member.kill_reason = why
                member.kill_deadline = time.monotonic() + _KILL_GRACE
                member.actor.kill.remote(trial, why)
            else:
                member.actor.preempt.remote(trial)

    def _accept(self, slot: _Slot, rank: int, ev: Event, *, lost: bool = False) -> list[Event]:
        gang = slot.gang
        if gang is None:
            return []
        events, ops = gang.accept(rank, ev, lost=lost)
        if ops:
            self._apply(slot, ops)
        if gang.done:
            self._release(slot)
        return events

    def _rank_lost(self, slot: _Slot, rank: int, reason: str) -> list[Event]:
        """The actor of one rank is gone: forget it and start its next actor in the rank's bundle at once
        (unless the slot is retired: its actors cannot start, see `_start_failed`). The slot takes its next
        trial once Ray has placed every rank's actor: when the bundle's node was
        lost and no live node can hold it, the trial waits queued, not sent to actors that cannot start
        (the driver blocked on them, then preempted it again and again)."""
        assert slot.members is not None
        member = slot.members[rank]
        actor = member.actor
        if actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        member.actor = member.drain = member.where = member.node = None
        member.ready = False
        killed = member.kill_reason is not None
        member.kill_reason = member.kill_deadline = None
        if actor is not None and self._host_cls is not None and self._head_lost is None and slot.retired is None:
            self._spawn_rank(slot, member)
        task = slot.task
        if task is None or slot.gang is None:
            return []
        kind = EventKind.FAILED if killed else EventKind.PREEMPTED
        data: dict[str, Any] = {"reason": reason}
        if killed:
            data.update({"error_type": "Killed", "message": reason})
        out = self._accept(slot, rank, Event(kind, task.trial_id, task.attempt, time.time(), data),
                           lost=not killed)
        if out and out[-1].kind is EventKind.PREEMPTED:   # the trial's end: say first if it must wait
            out[-1:-1] = [*self._retired_note(slot, task), *self._waiting_note(task, out[-1])]
        return out

    def stop(self, trial_id: int, reason: str = "") -> None:
        slot = self._by_trial.get(trial_id)
        if slot is not None and slot.members is not None:
            if slot.gang is not None:
                slot.gang.stop_requested()
            for member in slot.members:   # every rank sees run.should_stop
                if member.actor is not None:
                    member.actor.stop.remote(trial_id, reason)
        elif slot is not None and slot.actor is not None:
            slot.actor.stop.remote(trial_id, reason)

    def go(self, trial_id: int, step: int) -> None:
        slot = self._by_trial.get(trial_id)
        if slot is not None and slot.members is not None:   # rank 0 reported the step and waits for this
            rank0 = slot.members[0]
            if rank0.actor is not None:
                rank0.actor.go.remote(trial_id, step)
        elif slot is not None and slot.actor is not None:
            slot.actor.go.remote(trial_id, step)

    def preempt(self, trial_id: int) -> None:
        slot = self._by_trial.get(trial_id)
        if slot is not None and slot.gang is not None:
            self._apply(slot, slot.gang.preempt_all())
        elif slot is not None and slot.actor is not None:
            slot.actor.preempt.remote(trial_id)

    def kill(self, trial_id: int, reason: str) -> None:
        slot = self._by_trial.get(trial_id)
        if slot is not None and slot.gang is not None:
            self._apply(slot, slot.gang.kill_all(), reason)
        elif slot is not None and slot.actor is not None:
            slot.kill_reason = reason
            slot.kill_deadline = time.monotonic() + _KILL_GRACE
            slot.actor.kill.remote(trial_id, reason)

    # ------------------------------------------------------------------------------ events
    def poll(self, timeout: float) -> list[Event]:
        self._check_head()
        self._check_retired()
        events: list[Event] = []
        for slot in self.slots:
            events.extend(slot.queued)
            slot.queued.clear()
        if events:
            timeout = 0.0
        began = time.monotonic()
        idle = self._polled is not None and began - self._polled > _PAUSED   # the driver was away
        events.extend(self._read(timeout))
        if idle or time.monotonic() - began > timeout + _PAUSED:
            # The driver was paused (SIGSTOP, Ctrl-Z, a debugger, a frozen VM), outside this call or in it.
            # What its trials sent meanwhile is in replies still on their way (ray.wait returns only those
            # already received) and in the actors' buffers (each had one drain in flight, which returned
            # early in the pause): read both now, since the driver judges silences after this poll, and a
            # trial whose heartbeats waited there was killed as hung (the driver's pause taken for its own).
            events.extend(self._read(0.0, every=True))
            events.extend(self._read(0.0, every=True))
        now = time.monotonic()
        self._polled = now
        events.extend(self._not_started(now))
        for slot in self.slots:
            if slot.members is not None:
                events.extend(self._check_gang(slot, now))
                continue
            if slot.task is not None and slot.kill_deadline is not None and now > slot.kill_deadline:
                events.extend(self._end_lost(slot, f"{slot.kill_reason} (Ray actor killed)", killed=True))
        if self._head_lost is not None and not events:
            self._check_head()
        return events

    def _read(self, timeout: float, *, every: bool = False) -> list[Event]:
        """What the actors' drain calls brought: as soon as one has (within `timeout`), all those ready then;
        `every`: each drain in flight (each returns within `drain_wait`), then whichever started actors."""
        events: list[Event] = []
        by_ref: dict[Any, tuple[_Slot, int | None]] = {}
        booting: set[Any] = set()   # where() of actors not started yet: their start may free a slot
        for s in self.slots:
            if s.members is None:
                if s.drain is not None:
                    by_ref[s.drain] = (s, None)
                if not s.ready and s.where is not None:
                    booting.add(s.where)
                continue
            for m in s.members:
                if m.drain is not None:
                    by_ref[m.drain] = (s, m.index)
                if not m.ready and m.where is not None:
                    booting.add(m.where)
        if by_ref and every:
            ray.wait(list(by_ref), num_returns=len(by_ref), timeout=self.drain_wait + 2.0)
        if by_ref or booting:
            refs = [*by_ref, *booting]
            ready, _ = ray.wait(refs, num_returns=1, timeout=max(0.0, timeout))
            if ready and len(refs) > 1:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            events.extend(self._placed([r for r in ready if r in booting]))
            for ref in ready:
                if ref not in by_ref:
                    continue
                slot, rank = by_ref[ref]
                if rank is None and slot.drain is not ref:   # lost meanwhile (its where() failed)
                    continue
                if rank is not None and slot.members is not None and slot.members[rank].drain is not ref:
                    continue   # that rank's actor was lost meanwhile (and its successor started)
                if rank is None:
                    events.extend(self._collect(slot, ref))
                else:
                    events.extend(self._collect_rank(slot, rank, ref))
        elif timeout > 0:
            time.sleep(timeout)
        return events

    def _not_started(self, now: float) -> list[Event]:
        """A warning, once per actor, for each slot whose actor has not started `_BOOT_WARN` after its spawn.
        Such a slot takes no trial (`_takes`) and nothing else showed it: a sweep ran on fewer slots than
        asked, silently, for as long as the actor was pending (a busy cluster, a node that never comes) or its
        start hung on its node (sweeplab's import there, a runtime_env, a site hook)."""
        out: list[Event] = []
        for slot in self.slots:
            if slot.retired is not None:
                continue
            for member in slot.members or [slot]:
                if member.ready or member.where is None or member.boot_noted or now - member.spawned < _BOOT_WARN:
                    continue
                member.boot_noted = True
                who = f"slot {slot.index}" + (f", rank {member.index}" if slot.members is not None else "")
                out.append(Event(EventKind.NOTE, SWEEP, 0, time.time(), {
                    "level": "warning", "kind": "actor_not_started", "slot": slot.index,
                    "message": f"{who}: its Ray actor ({self.demand.describe()}) has not started "
                               f"{now - member.spawned:.0f}s after it was created: the cluster may be busy or "
                               "scaling up, or the actor's start hangs on its node (sweeplab's import there, "
                               "its runtime_env); the slot takes trials once it starts, the other slots go on"}))
        return out

    def _check_retired(self) -> None:
        """Raise BackendError once every slot is retired (its actors cannot start) and the ends of their
        trials have been handed over: no trial can run any more; the driver stops the sweep, resumable."""
        if self.slots and all(s.retired is not None for s in self.slots) and not any(s.queued for s in self.slots) \
                and not self._by_trial:
            raise BackendError(
                f"no Ray actor for trials can start ({_START_FAILURES} attempts in a row for each of the "
                f"{len(self.slots)} slot(s)): {self.slots[0].retired}; {_install_hint()}")

    # ------------------------------------------------------------------------------ the head
    def _check_head(self, *, now: bool = False) -> None:
        """Raise BackendError once the cluster's head (its GCS) no longer answers: every actor is then
        unreachable and Ray ends this process about a minute later. Checked every _HEAD_EVERY seconds, and
        at once when an actor fails (`now`), so that the trials of a lost head are not taken for preempted
        ones and requeued onto actors that can never start. Afterwards no Ray call is made (they would wait
        for the head) and the driver stops the sweep, resumable, with this error."""
        if self._head_lost is None and self._gcs is not None and (
                now or time.monotonic() - self._head_checked >= _HEAD_EVERY):
            self._head_checked = time.monotonic()
            host, _, port = self._gcs.rpartition(":")
            try:
                with socket.create_connection((host.strip("[]"), int(port)), timeout=3.0):
                    pass
            except (OSError, ValueError) as exc:
                if isinstance(exc, ValueError):
                    return
                where = f"--address {self.address}" if self.address and self.address != "local" else "Ray"
                self._head_lost = (f"{where}: the Ray cluster's head is gone (its GCS at {self._gcs} does not "
                                   f"answer: {exc.strerror or exc}); the sweep's trials cannot run or report")
                self._by_trial.clear()
            if self._head_lost is None and now and self._own_instance and not self._live_nodes():
                # the sweep's own local instance lost its one node (its raylet died: killed, OOM-killed,
                # crashed): no node will ever join it, so its trials waited queued for one forever
                self._head_lost = ("Ray's local instance, started by this sweep, has no node left (its raylet "
                                   "died: killed, OOM-killed or crashed); the sweep's trials cannot run")
                self._by_trial.clear()
        if self._head_lost is not None:
            raise BackendError(self._head_lost)

    @staticmethod
    def _live_nodes() -> int:
        try:
            return sum(1 for n in ray.nodes() if n.get("Alive"))
        except Exception:   # the cluster's state is unknown: take it for alive
            return 1

    def _head_gone(self) -> bool:
        """After an actor failed: is it because the head is gone (then poll raises)?"""
        try:
            self._check_head(now=True)
        except BackendError:
            return True
        return False

    def _collect(self, slot: _Slot, ref: Any) -> list[Event]:
        slot.drain = None
        try:
            batch = ray.get(ref)
        except RayError as exc:
            if self._head_gone():   # not this actor's loss but the whole cluster's: poll raises
                return []
            if isinstance(exc, ActorUnavailableError):
                slot.unavailable += 1
                if slot.unavailable < 10:
                    slot.drain = slot.actor.drain.remote(self.drain_wait)
                    return []
                return self._end_lost(slot, "Ray actor unavailable")
            if not slot.ready:   # it never started: its own fault (counted), or its node's
                why = self._start_failed(slot, exc)
                return self._end_lost(slot, f"Ray actor could not start: {why or _lost_reason(exc)}")
            if isinstance(exc, RayActorError):
                return self._end_lost(slot, _lost_reason(exc))
            if isinstance(exc, RayTaskError):
                return self._end_lost(slot, f"Ray actor failed: {_first_line(exc)}")
            raise
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

    def _collect_rank(self, slot: _Slot, rank: int, ref: Any) -> list[Event]:
        assert slot.members is not None
        member = slot.members[rank]
        member.drain = None
        try:
            batch = ray.get(ref)
        except RayError as exc:
            if self._head_gone():   # not this actor's loss but the whole cluster's: poll raises
                return []
            if isinstance(exc, ActorUnavailableError):
                member.unavailable += 1
                if member.unavailable < 10:
                    member.drain = member.actor.drain.remote(self.drain_wait)
                    return []
                return self._rank_lost(slot, rank, "Ray actor unavailable")
            if isinstance(exc, RayActorError):
                return self._rank_lost(slot, rank, _lost_reason(exc))
            if isinstance(exc, RayTaskError):
                return self._rank_lost(slot, rank, f"Ray actor failed: {_first_line(exc)}")
            raise
        member.unavailable = 0
        out: list[Event] = []
        for d in batch:
            ev = Event.from_dict(d)
            if ev.kind.ends_attempt and member.task is not None and ev.trial == member.task.trial_id:
                member.task = None
                member.kill_reason = member.kill_deadline = None
            out.extend(self._accept(slot, rank, ev))
        member.drain = member.actor.drain.remote(self.drain_wait)
        return out

    def _check_gang(self, slot: _Slot, now: float) -> list[Event]:
        """Ranks that outlived rank 0 too long are killed; a rank whose actor ignores a kill is lost."""
        assert slot.members is not None
        if slot.gang is None:
            return []
        ops = slot.gang.tick()
        if ops:
            self._apply(slot, ops, "still running after rank 0 returned")
        out: list[Event] = []
        for member in slot.members:
            if slot.gang is not None and member.kill_deadline is not None and now > member.kill_deadline:
                out.extend(self._rank_lost(slot, member.index, f"{member.kill_reason} (Ray actor killed)"))
        return out

    def _release(self, slot: _Slot) -> None:
        if slot.task is not None and self._by_trial.get(slot.task.trial_id) is slot:
            del self._by_trial[slot.task.trial_id]
        slot.task = None
        slot.gang = None
        slot.kill_reason = slot.kill_deadline = None

    def _end_lost(self, slot: _Slot, reason: str, *, killed: bool = False) -> list[Event]:
        """The actor is gone (node lost, actor killed, or it could not start): end its trial and start another
        actor for the slot at once, unless the slot is retired (its actors cannot start: `_start_failed`).
        One that could not start was started again only by the next submit, which sent the trial to it before
        it had started (a trial waiting there for a node that never comes was failed as hung)."""
        actor, task, kill_reason = slot.actor, slot.task, slot.kill_reason
        if actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        slot.actor = slot.drain = slot.where = slot.node = None
        slot.ready = False
        self._release(slot)
        if actor is not None and self._host_cls is not None and self._head_lost is None and slot.retired is None:
            # a new actor now: the slot takes the next trial once Ray has placed it. Sent to an actor still
            # waiting for a node (none alive can hold it, until one joins), a trial would sit there
            # without a heartbeat and be failed as hung, its retries spent on a cluster's gap.
            self._spawn(slot)
        if task is None:
            return []
        now = time.time()
        if killed or kill_reason:
            why = reason if killed else f"{kill_reason} ({reason})"
            return [Event(EventKind.FAILED, task.trial_id, task.attempt, now, {
                "reason": why, "error_type": "Killed", "message": why})]
        end = Event(EventKind.PREEMPTED, task.trial_id, task.attempt, now, {"reason": reason})
        return [*self._retired_note(slot, task), *self._waiting_note(task, end), end]

    def _retired_note(self, slot: _Slot, task: TrialTask) -> list[Event]:
        """A warning on the attempt whose slot was just retired (its actors cannot start): the trial is
        requeued onto the other slots; once every slot is retired, `poll` stops the sweep."""
        if slot.retired is None:
            return []
        return [Event(EventKind.NOTE, task.trial_id, task.attempt, time.time(), {
            "level": "warning", "kind": "actor_cannot_start",
            "message": f"a Ray actor for trials could not start {slot.start_failures} times in a row: "
                       f"{slot.retired}; its slot takes no more trials ({_install_hint()})"})]

    def _waiting_note(self, task: TrialTask, end: Event) -> list[Event]:
        """After a loss: when no live node can hold a trial any more, a warning on the attempt (just before
        its PREEMPTED `end`, whose reason says it in short) naming what the trial needs and what the nodes
        have. The trial waits queued until a node that fits joins, or the sweep's budget.time ends the wait."""
        if self._head_lost is not None:
            return []
        try:
            nodes = [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]
            check_fits(self.demand, nodes, placement=self.placement)
            return []
        except UserError as exc:
            message = (f"waiting for a node that fits: {exc}. The trial stays queued until such a node joins "
                       "the cluster (budget.time ends the wait)")
        except Exception:   # the cluster's state is unknown: nothing to say
            return []
        end.data["reason"] = f"{end.data.get('reason') or 'preempted'}; no live node can hold it: waiting for one"
        return [Event(EventKind.NOTE, task.trial_id, task.attempt, time.time(),
                      {"level": "warning", "kind": "waiting_for_node", "message": message})]

    # ------------------------------------------------------------------------------ shutdown
    def shutdown(self, *, grace: float = 0.0) -> None:
        refs = []
        hosts = [m for s in self.slots for m in (s.members or [s])]
        if self._head_lost is not None:   # the actors died with the head; a call to them would only wait
            for slot in [*hosts, *self.slots]:
                slot.actor = slot.drain = slot.where = slot.pg = None
                slot.task = slot.gang = None
            hosts = []
        for slot in hosts:
            # an actor that has not started and has no trial is not asked (its reply would never come: the
            # sweep's end waited out the 10 s below for one whose start hung), and is killed below; one with a
            # trial is asked even before it is seen started: its shutdown ends the trial's whole process tree,
            # which killing the actor would leave running (a command's program in a session of its own)
            if slot.actor is not None and (slot.ready or slot.task is not None or _answered(slot.where)):
                with contextlib.suppress(Exception):
                    refs.append(slot.actor.shutdown.remote(grace))
        if refs:
            with contextlib.suppress(Exception):
                ray.wait(refs, num_returns=len(refs), timeout=grace + 10.0)
        killed: list[str] = []
        for slot in hosts:
            if slot.actor is not None:
                with contextlib.suppress(Exception):
                    ray.kill(slot.actor, no_restart=True)
                    killed.append(slot.actor._actor_id.hex())
            slot.actor = slot.drain = slot.where = None
            slot.task = None
        for slot in self.slots:
            slot.task = slot.gang = None
            if slot.pg is not None:
                from ray.util.placement_group import remove_placement_group

                with contextlib.suppress(Exception):
                    remove_placement_group(slot.pg)
                slot.pg = None
        self._by_trial.clear()
        if self._owns_ray:
            if killed and self._head_lost is None:
                _wait_dead(killed)
            with contextlib.suppress(Exception):
                ray.shutdown()
            self._owns_ray = False
        held, self._sigterm = self._sigterm, None
        if held is not None:   # no driver took a signal held since start (the command ended before it ran):
            held.release()     # the process ends by it now, with nothing of Ray's left running

