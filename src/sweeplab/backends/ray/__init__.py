"""The Ray backend: the same sweep on a Ray cluster (`--backend ray [--address ADDR]`).

This module is a thin shell: nothing here imports ray. `start()` imports `_core`, which does, so that a
sweep on the local backend never pays for (or needs) ray, and a missing ray is one clear error:
`pip install 'sweeplab[ray]'`.

Each of `workers` slots is a long-lived Ray actor holding the trial's resources (CPUs, GPUs, fractional
GPUs, custom resources). A multi-process trial (`resources.workers` W > 1) gets a placement group of W
bundles instead, one actor per rank, so that its ranks may run on different nodes (see `_gang`). Inside
each actor a one-slot
local backend runs trials in a reusable worker process, exactly as on a laptop; events come back to the
driver in batches over Ray. `start()` returns once every slot's actor is up, and a trial only ever goes
to a started actor (one still booting, or being placed on a node that is coming up, would hold it).
A node that disappears (a reclaimed spot instance) takes its actors with it:
their trials end PREEMPTED and the driver requeues them from their last checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sweeplab._imports import optional_import
from sweeplab.backends.base import Backend, TrialTask
from sweeplab.backends.events import Event
from sweeplab.backends.ray._plan import PLACEMENTS, TrialDemand, trial_demand
from sweeplab.errors import UserError

if TYPE_CHECKING:
    from sweeplab.backends.ray._core import RayCore

__all__ = ["RayBackend", "TrialDemand", "trial_demand"]

_FROM_SPEC = object()   # RayBackend(placement=...) not given: the spec's resources.placement


class RayBackend(Backend):
    """Runs trials as Ray actors.

    spec        the sweep spec (its `resources` and `checkpoint_dir` are read); None for defaults
    workers     trials at once; None: as many as the cluster's nodes can hold right now
    address     a Ray address ("auto", "host:6379", "ray://host:10001"); None: the cluster this process
                is already connected to, else `RAY_ADDRESS`, else a new local cluster
    smoke       hide GPUs (trials run on CPU)
    resources   overrides `spec.resources` (a `sweeplab.spec.Resources` or a mapping of its fields)
    checkpoint_root  where checkpoints go when `spec.checkpoint_dir` is not set (the store's
                `checkpoints/`); checked to be reachable from every node of a multi-node cluster
    init        extra keyword arguments of `ray.init` when this backend starts the cluster connection
    placement   how the ranks of a multi-process trial are placed: a Ray placement group strategy
                ("PACK": as few nodes as possible, "STRICT_SPREAD": one rank per node, "SPREAD",
                "STRICT_PACK"), or None: every rank inside one actor on one node
    """

    name = "ray"
    supports_decisions = True

    def __init__(self, spec: Any = None, *, workers: int | None = None, address: str | None = None,
                 smoke: bool = False, resources: Any = None, checkpoint_root: str | None = None,
                 init: Mapping[str, Any] | None = None, placement: str | object | None = _FROM_SPEC,
                 workdir_root: str | None = None) -> None:
        if workers is not None and workers < 1:
            raise UserError(f"--workers must be at least 1; got {workers}")
        res = resources if resources is not None else getattr(spec, "resources", None)
        if placement is _FROM_SPEC:   # the spec's resources.placement (PACK when not given)
            placement = getattr(res, "placement", "PACK") if res is not None else "PACK"
        if placement is not None and str(placement).upper() not in PLACEMENTS:
            raise UserError(f"placement: expected one of {', '.join(PLACEMENTS)} (or none); got {placement!r}")
        self.placement = str(placement).upper() if placement is not None else None
        self.demand = trial_demand(res, smoke=smoke)
        self.workers = workers
        self.address = address
        from sweeplab.backends import preload_of

        #: what each actor's worker imports before its first trial, as a local worker does
        self.preload = preload_of(spec) if spec is not None else ()
        self.smoke = smoke
        ckpt = getattr(spec, "checkpoint_dir", None)
        # `~` expanded as the trials' own is (driver/tasks.py): the probe of a multi-host cluster looks there
        self.checkpoint_root = os.path.expanduser(str(ckpt)) if ckpt else checkpoint_root
        self.init = dict(init or {})
        #: the store's workdirs/ when trials run in their own directories (`trial.workdir: trial`): start()
        #: warns when some host of a multi-machine cluster cannot see it
        trial = getattr(spec, "trial", None)
        self.workdir_root = workdir_root if getattr(trial, "workdir", "sweep") == "trial" else None
        self._core: RayCore | None = None

    def describe(self) -> str:
        if self._core is None:
            return f"ray ({self.address or 'local'})"
        return self._core.describe()

    def start(self) -> None:
        """Connect and check everything before any trial is queued. A second call does no more than hand a
        SIGTERM that came meanwhile to the caller's handler (the driver's, installed before it calls this), so
        the CLI may start the backend before it creates the sweep (nothing is written when this fails) and a
        SIGTERM before the driver runs is its stop, not Ray's `sys.exit(15)`."""
        if self._core is not None:
            self._core.release_signals()
            return
        optional_import("ray", "ray", "the Ray backend")
        from sweeplab.backends.ray._core import RayCore

        core = RayCore(self.demand, workers=self.workers, address=self.address,
                       checkpoint_root=self.checkpoint_root, init=self.init, placement=self.placement,
                       preload=self.preload, workdir_root=self.workdir_root)
        core.start()
        self._core = core

    def _started(self) -> RayCore:
        if self._core is None:
            from sweeplab.errors import BackendError

            raise BackendError("the Ray backend is not started")
        return self._core

    def free_slots(self) -> int:
        return self._core.free_slots() if self._core is not None else 0

    def submit(self, task: TrialTask) -> None:
        self._started().submit(task)

    def poll(self, timeout: float) -> list[Event]:
        return self._started().poll(timeout)

    def stop(self, trial_id: int, reason: str = "") -> None:
        self._started().stop(trial_id, reason)

    def go(self, trial_id: int, step: int) -> None:
        self._started().go(trial_id, step)

    def preempt(self, trial_id: int) -> None:
        self._started().preempt(trial_id)

    def kill(self, trial_id: int, reason: str) -> None:
        self._started().kill(trial_id, reason)

    def running(self) -> list[int]:
        return self._core.running() if self._core is not None else []

    def node_of(self, trial_id: int) -> str | None:
        """The Ray node id a running trial is on (None when unknown)."""
        return self._core.node_of(trial_id) if self._core is not None else None

    def shutdown(self, *, grace: float = 0.0) -> None:
        if self._core is not None:
            self._core.shutdown(grace=grace)
            self._core = None
