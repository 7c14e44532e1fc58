"""The backend seam: where trials run. Asynchronous submit / poll events / stop.

A backend turns a `TrialTask` into a running process (or several, or a Ray actor) and a stream of
`Event`s (backends/events.py). It reports every way an attempt can end as an event: a worker that dies
becomes FAILED (exit code / signal), a lost node or SIGTERM becomes PREEMPTED. It never touches the store
or the searcher: the driver owns decisions. Adding a backend touches no other module.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeplab.backends.events import Event

__all__ = ["Backend", "TrialTask"]


@dataclass(frozen=True)
class TrialTask:
    """Everything a worker needs to run one attempt of one trial (JSON-able: no pickle on the wire)."""

    trial_id: int
    number: int
    attempt: int
    sweep: str
    kind: str                                  # "function" | "command"
    target: str | None = None                  # "pkg.mod:fn" or "path/file.py:fn"
    command: Sequence[str] | None = None       # argv of a command trial
    config: Mapping[str, Any] = field(default_factory=dict)   # resolved nested config
    params: Mapping[str, Any] = field(default_factory=dict)   # flat sampled params
    seed: int | None = None
    smoke: bool = False
    log_path: str = ""                         # absolute path of this attempt's log file
    log_max: int = 0                           # bytes the log keeps (trial.log_max; execution.LogCap); 0: all
    report_path: str = ""                      # absolute path command trials report into (JSON lines)
    checkpoint_dir: str = ""                   # this trial's checkpoint root (path or fsspec URL)
    keep_checkpoints: int = 2
    checkpoint_every: Any = None               # int steps | float seconds | "auto" | None
    mtbf: float | None = None                  # observed mean time between failures (auto checkpointing)
    grace: float = 30.0
    heartbeat_interval: float = 5.0
    cwd: str = ""
    # the directory the trial runs in under `trial.workdir: sweep` (SWEEPLAB_ORIGINAL_CWD, `run.original_cwd`);
    # when `cwd` differs from it, `cwd` is the trial's own directory (`trial.workdir: trial`): the worker creates it
    original_cwd: str = ""
    python_path: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    capture_dir: str = ""                      # where failure captures go
    artifacts_dir: str = ""
    torch_profiler: Mapping[str, Any] | None = None
    smoke_steps: int = 3                       # run.track stops after this many batches in smoke mode
    world_size: int = 1                        # processes per trial (DDP); 1 = a plain trial
    replay: Mapping[str, Any] | None = None    # repro: {"capture": path} of a failed trial's captured objects
    decision_steps: Sequence[int] = ()         # steps whose report of decision_metric waits for the verdict
    decision_metric: str | None = None
    decision_reports: bool = False             # decision_steps count reports of decision_metric, not steps
    wandb: Mapping[str, Any] | None = None     # a function trial's W&B setup {"param_path", "args"}, used by
                                               # the worker only if the trial starts a W&B run (wandb_compat)

    def to_dict(self) -> dict[str, Any]:
        """A shallow dict (fields are JSON-able already): a copy of `__dict__`, which holds exactly the
        fields (a frozen dataclass without slots); much cheaper than dataclasses.asdict."""
        return dict(self.__dict__)

    @classmethod
    def make(cls, **fields: Any) -> TrialTask:
        """`TrialTask(**fields)`, the same task, built as `from_dict` builds one (the driver makes one per
        attempt). Unknown names and missing required ones raise TypeError, as in `TrialTask(...)`."""
        plain, factories = _defaults()
        d = {**plain, **fields}
        for name, factory in factories.items():
            if name not in fields:
                d[name] = factory()
        if d.keys() != cls.__dataclass_fields__.keys():
            return cls(**fields)
        return cls.from_dict(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrialTask:
        """The task `d` describes: unknown keys are ignored, missing fields take their defaults. A dict of
        exactly the fields (what `to_dict` gives, as a worker receives it) becomes the task's `__dict__` as it
        is, without the frozen `__init__`'s one `object.__setattr__` per field (per trial, on both ends)."""
        known = cls.__dataclass_fields__
        if d.keys() == known.keys():
            task = object.__new__(cls)
            task.__dict__.update(d)
            return task
        return cls(**{k: v for k, v in d.items() if k in known})


_DEFAULTS: tuple[dict[str, Any], dict[str, Any]] | None = None


def _defaults() -> tuple[dict[str, Any], dict[str, Any]]:
    """TrialTask's defaults: (name -> default value, name -> default factory), computed once."""
    global _DEFAULTS
    if _DEFAULTS is None:
        plain, factories = {}, {}
        for f in dataclasses.fields(TrialTask):
            if f.default is not dataclasses.MISSING:
                plain[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                factories[f.name] = f.default_factory
        _DEFAULTS = (plain, factories)
    return _DEFAULTS


class Backend(ABC):
    """Runs trials somewhere. All methods are called from the driver's thread."""

    name: str = "backend"
    #: Whether `go` reaches a running trial. Only then does the driver give trials `decision_steps`
    #: (a trial waiting for a verdict that never comes would wait out `Run`'s timeout at every rung).
    supports_decisions: bool = False
    #: The trials at once it was asked for (`--workers`, the spec's `workers`), None for its default: recorded
    #: with the sweep's driver, so that `sweeplab resume` runs as wide again (set by `make_backend`).
    requested_workers: int | None = None

    @abstractmethod
    def start(self) -> None:
        """Acquire resources (start workers / connect to a cluster). Raise BackendError or UserError."""

    @abstractmethod
    def free_slots(self) -> int:
        """How many more trials can be submitted right now."""

    @abstractmethod
    def submit(self, task: TrialTask) -> None:
        """Start one attempt. Its events arrive through `poll`, beginning with STARTED."""

    @abstractmethod
    def poll(self, timeout: float) -> list[Event]:
        """Events that arrived, waiting at most `timeout` seconds for the first."""

    @abstractmethod
    def stop(self, trial_id: int) -> None:
        """Ask a running trial to stop (sets `run.should_stop`; a command trial gets SIGTERM)."""

    def go(self, trial_id: int, step: int) -> None:
        """Tell a trial waiting at decision step `step` that it continues (a stop says the opposite)."""

    @abstractmethod
    def preempt(self, trial_id: int) -> None:
        """Preempt a trial as a spot reclaim would (SIGTERM): it may checkpoint within its grace period,
        then ends with a PREEMPTED event and is requeued by the driver."""

    @abstractmethod
    def kill(self, trial_id: int, reason: str) -> None:
        """Kill a trial now; a FAILED event with `reason` follows (or PREEMPTED if it was preempted)."""

    @abstractmethod
    def running(self) -> list[int]:
        """Trial ids with an attempt in flight."""

    @abstractmethod
    def shutdown(self, *, grace: float = 0.0) -> None:
        """Stop every worker; running trials are stopped (with `grace` seconds to finish) then killed."""

    def capacity(self) -> int:
        """How many trials it runs at once when all slots are busy (progress estimates; 1 when unknown)."""
        return 1

    def describe(self) -> str:
        return self.name
