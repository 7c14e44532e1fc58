"""The validated spec: `SweepSpec` and the sections it holds (metric, resources, budget, trial policy)."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeplab._values import is_int as _is_int
from sweeplab.errors import SpecError
from sweeplab.space import SearchSpace
from sweeplab.spec.keys import DEFAULT_COMMAND, _methods
from sweeplab.types import Goal

# -------------------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class MetricSpec:
    """The metric to optimise. `name` None: no metric (grid/random/sobol only; no 'best' trial)."""

    name: str | None = None
    goal: Goal = Goal.MINIMIZE
    target: float | None = None                 # stop creating trials once a trial reaches it
    impute: str | None = None                   # value model-based search assumes for failed trials (None: ignored)
    impute_while_running: str | None = None     # W&B option, kept for compatibility
    reference: float | None = None              # hypervolume reference value (several objectives)


@dataclass(frozen=True)
class Constraint:
    """A bound on a metric a trial reports: past it the trial is infeasible (never best, searchers told)."""

    metric: str
    max: float | None = None
    min: float | None = None

    def violation(self, value: float | None) -> float:
        """How far `value` is outside the bound (<= 0: satisfied). A missing or non-finite value violates
        it by 1.0: nothing shows the trial is feasible."""
        if value is None or value != value or value in (float("inf"), float("-inf")):
            return 1.0
        over = [value - self.max] if self.max is not None else []
        under = [self.min - value] if self.min is not None else []
        return max(over + under)

    def describe(self) -> str:
        parts = ([f"{self.metric} <= {self.max:g}"] if self.max is not None else []) + (
            [f"{self.metric} >= {self.min:g}"] if self.min is not None else [])
        return " and ".join(parts)


@dataclass(frozen=True)
class Resources:
    """What one trial needs. `workers` > 1 starts that many processes per trial (torchrun style)."""

    cpus: float = 1.0
    gpus: float = 0.0
    workers: int = 1
    cpus_per_worker: float | None = None        # None: cpus / workers
    gpus_per_worker: float | None = None        # None: gpus / workers
    custom: Mapping[str, float] = field(default_factory=dict)
    placement: str | None = "PACK"              # Ray: how the ranks of a multi-process trial are placed




@dataclass(frozen=True)
class Budget:
    """When the sweep stops creating trials. None means no limit of that kind."""

    trials: int | None = None
    time: float | None = None                   # seconds of sweep wall time
    gpu_hours: float | None = None
    cpu_hours: float | None = None
    cost: Mapping[str, float] | None = None     # name -> limit on the sum of that cost over trials
    prices: Mapping[str, float] | None = None   # {cpu_hour, gpu_hour}: resource-hours priced into every cost


#: `trial.log_max` left out: 100 MB (1 MB = 2**20 bytes)
LOG_MAX_DEFAULT = 100 << 20
#: the values of `trial.workdir`: where a trial runs (the sweep's working directory, or one of its own)
WORKDIRS = ("sweep", "trial")


@dataclass(frozen=True)
class TrialPolicy:
    """How each trial is run.

    `checkpoint_every`: an int is a step count, a float is seconds (written as a duration, "5m"),
    "auto" lets the runtime choose, None writes every checkpoint the code asks for.
    `workdir`: where each trial runs: "sweep" (the sweep's working directory, shared by every trial) or
    "trial" (a directory of its own under the store, `workdirs/<sweep>/<trial>/`, kept over its retries).
    """

    timeout: float | None = None
    retries: int = 1
    checkpoint_every: float | str | None = None  # int: steps; float: seconds; "auto"
    keep_checkpoints: int = 2
    grace: float = 30.0                         # seconds between SIGTERM and SIGKILL
    heartbeat_timeout: float | None = 60.0      # a silent trial is declared lost after this
    torch_profiler: Mapping[str, Any] | None = None
    #: libraries each worker imports before its first trial (once for all workers, in a fork server): None
    #: reads them from the trial's code (backends/preload.trial_imports); () imports none
    preload: tuple[str, ...] | None = None
    workdir: str = "sweep"                      # "sweep" | "trial" (WORKDIRS)
    #: bytes a trial's log keeps (its beginning, a marker, its latest output; backends/execution.LogCap); 0: no cap
    log_max: int = LOG_MAX_DEFAULT


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep spec. Build it with `load_spec` / `parse_spec`."""

    method: str
    space: SearchSpace
    metric: MetricSpec = field(default_factory=MetricSpec)
    name: str | None = None
    description: str | None = None
    function: str | None = None
    program: str | None = None
    command: tuple[str, ...] | None = None
    config: Path | None = None
    profile: str | None = None
    seed: int | None = None
    workers: int | None = None
    resources: Resources = field(default_factory=Resources)
    budget: Budget = field(default_factory=Budget)
    trial: TrialPolicy = field(default_factory=TrialPolicy)
    early_terminate: Mapping[str, Any] | None = None
    monitors: tuple[Any, ...] = ()
    backend: str = "local"
    address: str | None = None
    checkpoint_dir: str | None = None
    source: Path | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()    # what W&B would warn about and run anyway (errors under strict)
    # every objective, `metric` first (a list under `metric:`); length 1 for a single-objective sweep
    objectives: tuple[MetricSpec, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    # `points_to_evaluate`: the first trials' parameters as given (flat names; the rest from the base config)
    points: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not self.objectives and self.metric.name is not None:
            object.__setattr__(self, "objectives", (self.metric,))

    @property
    def multi_objective(self) -> bool:
        """True when the sweep has several objectives (a Pareto front instead of one best trial)."""
        return len(self.objectives) > 1

    @property
    def scheduler_goal(self) -> Goal:
        """The goal early stopping judges by: `early_terminate.goal`, else that of the objective
        `early_terminate.metric` names, else the sweep's (first objective's) goal."""
        et = self.early_terminate or {}
        if et.get("goal") in (Goal.MINIMIZE.value, Goal.MAXIMIZE.value):
            return Goal(et["goal"])
        return next((o.goal for o in self.objectives if o.name == et.get("metric")), self.metric.goal)

    @property
    def is_function(self) -> bool:
        """True when trials call a Python function; False when they run a command."""
        return self.function is not None

    @property
    def effective_command(self) -> tuple[str, ...] | None:
        """The command template trials run (W&B's default when only `program` is given)."""
        if self.command is not None:
            return self.command
        return DEFAULT_COMMAND if self.program is not None else None

    @property
    def base_dir(self) -> Path | None:
        """The directory of the spec file (programs and relative paths are relative to it)."""
        return self.source.parent if self.source is not None else None

    def with_overrides(self, **changes: Any) -> SweepSpec:
        """A copy with some fields replaced (e.g. `--workers 4` from the command line)."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"SweepSpec has no field {unknown[0]!r}")
        for key, value in changes.items():
            _check_override(key, value)
        return dataclasses.replace(self, **changes)

    def to_jsonable(self) -> dict[str, Any]:
        """A normalised, JSON-safe spec mapping that `parse_spec` turns back into this spec.

        It is what the sweep row stores: every field with its resolved value (overrides included,
        `run_cap` folded into `budget.trials`, durations in seconds, `config` as an absolute path),
        the parameters as written, and the W&B-only keys that were ignored.
        """
        spec: dict[str, Any] = {"method": self.method, "parameters": _jsonable(self.raw.get("parameters") or {})}
        for key in ("name", "description", "function", "program", "profile", "seed", "workers",
                    "address", "checkpoint_dir"):
            value = getattr(self, key)
            if value is not None:
                spec[key] = value
        if self.command is not None:
            spec["command"] = list(self.command)
        if self.config is not None:
            spec["config"] = str(Path(self.config).absolute())
        if self.metric.name is not None:
            metrics = [_metric_jsonable(m) for m in (self.objectives or (self.metric,))]
            spec["metric"] = metrics if len(metrics) > 1 else metrics[0]
        if self.constraints:
            spec["constraints"] = [{k: v for k, v in dataclasses.asdict(c).items() if v is not None}
                                   for c in self.constraints]
        spec["backend"] = self.backend
        spec["resources"] = _jsonable({k: v for k, v in dataclasses.asdict(self.resources).items() if v is not None})
        spec["budget"] = _jsonable({k: v for k, v in dataclasses.asdict(self.budget).items() if v is not None})
        trial = dataclasses.asdict(self.trial)
        if isinstance(trial["checkpoint_every"], float):
            trial["checkpoint_every"] = f"{trial['checkpoint_every']!r}s"  # a bare number would mean steps
        spec["trial"] = _jsonable({k: v for k, v in trial.items() if v is not None or k == "heartbeat_timeout"})
        if self.early_terminate is not None:
            spec["early_terminate"] = _jsonable(self.early_terminate)
        if self.monitors:
            spec["monitors"] = _jsonable(list(self.monitors))
        if self.points:
            spec["points_to_evaluate"] = _jsonable([dict(p) for p in self.points])
        for key in self.ignored:
            if key in self.raw:
                spec[key] = _jsonable(self.raw[key])
        return spec

    @classmethod
    def from_jsonable(cls, data: Mapping[str, Any], *, source: str | Path | None = None) -> SweepSpec:
        """Rebuild a spec from `to_jsonable()` output (the sweep row, on resume).

        `source`, when known, is the spec file (errors name it and `base_dir` follows it).
        """
        from sweeplab.spec.load import parse_spec  # load -> parse -> model: imported when called

        spec = parse_spec(data, file=str(source) if source is not None else "<stored spec>")
        return dataclasses.replace(spec, source=Path(source) if source is not None else None)


def _metric_jsonable(m: MetricSpec) -> dict[str, Any]:
    metric: dict[str, Any] = {"name": m.name, "goal": m.goal.value}
    for key in ("impute", "target", "impute_while_running", "reference"):
        if getattr(m, key) is not None:
            metric[key] = getattr(m, key)
    return metric


#: the largest seed: what numpy.random.RandomState (Optuna's samplers) accepts
MAX_SEED = 2**32 - 1

def _check_override(key: str, value: Any) -> None:
    if key == "workers" and value is not None and (not _is_int(value) or value < 1):
        raise SpecError("must be an integer >= 1", key="workers", value=value, expected="an integer >= 1")
    if key == "seed" and value is not None and (not _is_int(value) or not 0 <= value <= MAX_SEED):
        raise SpecError("must be an integer from 0 to 2**32 - 1", key="seed", value=value,
                        expected=f"an integer from 0 to {MAX_SEED}")
    if key == "method" and value not in _methods():
        raise SpecError("unknown method", key="method", value=value, expected=f"one of {', '.join(_methods())}")
    if key == "backend" and not (isinstance(value, str) and value):
        raise SpecError("must be a name", key="backend", value=value, expected="a string like local or ray")


def _jsonable(value: Any) -> Any:
    to_spec = getattr(value, "to_spec", None)
    if callable(to_spec):   # a monitor made in Python: stored as its spec entry, which resume rebuilds
        return _jsonable(to_spec())
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
