"""The sweep spec: W&B's sweep configuration grammar plus sweeplab's own keys.

A W&B `sweep.yaml` loads unchanged (`entity`, `project`, `controller`, `apiVersion` and `kind` are
accepted and listed in `SweepSpec.ignored`). Every mistake raises SpecError naming the file, the key
path, the bad value and what was expected:

    sweep.yaml: budget.time: unknown duration unit; got '30x'; expected a duration like 45s, 30m, 2h, 1h30m, 1d

    spec = load_spec("sweep.yaml")
    argv = build_command(spec, {"lr": 0.01}, interpreter=sys.executable, args_json_file="/tmp/p.json")
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import sweeplab.schedulers as _schedulers
import sweeplab.search as _search
from sweeplab import _values
from sweeplab._values import is_int as _is_int
from sweeplab._values import is_number as _is_number
from sweeplab._values import parse_duration
from sweeplab._yaml import read_yaml
from sweeplab.errors import SpecError
from sweeplab.space import SearchSpace, parse_parameters
from sweeplab.types import PLACEMENTS, Goal

__all__ = [
    "DEFAULT_COMMAND",
    "EARLY_TERMINATE_TYPES",
    "MACROS",
    "METHODS",
    "PARAM_MACROS",
    "Budget",
    "MetricSpec",
    "Resources",
    "SweepSpec",
    "TrialPolicy",
    "args_json",
    "build_command",
    "load_spec",
    "parse_duration",
    "parse_spec",
    "passes_params",
    "resolve_interpreter",
    "wandb_args",
]

# `method` and `early_terminate.type` are checked against the search and scheduler registries, read at each
# check (sweeplab.search.SEARCHERS, sweeplab.schedulers.SCHEDULERS); these tuples are their names at import
METHODS = _search.METHODS
EARLY_TERMINATE_TYPES = _schedulers.TYPES


def _methods() -> tuple[str, ...]:
    return tuple(_search.SEARCHERS)


def _early_terminate_types() -> tuple[str, ...]:
    return tuple(_schedulers.SCHEDULERS)


_IMPUTE = ("worst", "best", "latest")

#: command macros (W&B's); `${envvar:NAME}` is also accepted
MACROS = (
    "env", "interpreter", "program", "args", "args_no_equals", "args_no_hyphens", "args_no_boolean_flags",
    "args_append_hydra", "args_override_hydra", "args_json", "args_json_file",
)
_LIST_MACROS = ("args", "args_no_equals", "args_no_hyphens", "args_no_boolean_flags", "args_append_hydra",
                "args_override_hydra")
#: the macros that hand a trial its parameters (a command without one passes none)
PARAM_MACROS = (*_LIST_MACROS, "args_json", "args_json_file")
DEFAULT_COMMAND = ("${env}", "${interpreter}", "${program}", "${args}")
_MACRO = re.compile(r"\$\{([^}]*)\}")

_WANDB_KEYS = (
    "program", "command", "method", "metric", "parameters", "early_terminate", "run_cap", "name",
    "description",
)
_HYPERBAND_KEYS = ("type", "metric", "min_iter", "max_iter", "s", "eta", "strict")
_IGNORED_KEYS = ("entity", "project", "controller", "apiVersion", "kind")
_UNSUPPORTED_KEYS = {
    "job": "W&B Launch jobs are not supported; use program/command or function",
    "image_uri": "W&B Launch images are not supported; use program/command or function",
    "metrics": "multi-objective sweeps are not supported; give one metric",
    "scheduler": "custom W&B schedulers are not supported; use method and early_terminate",
}
_OUR_KEYS = (
    "function", "config", "profile", "seed", "workers", "resources", "budget", "trial", "monitors",
    "backend", "address", "checkpoint_dir",
)
_TOP_KEYS = (*_WANDB_KEYS, *_OUR_KEYS, *_IGNORED_KEYS)

_FUNCTION = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|[^:]*\.py)"
    r":[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$"
)


# -------------------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class MetricSpec:
    """The metric to optimise. `name` None: no metric (grid/random/sobol only; no 'best' trial)."""

    name: str | None = None
    goal: Goal = Goal.MINIMIZE
    target: float | None = None                 # stop creating trials once a trial reaches it
    impute: str | None = None                   # value model-based search assumes for failed trials (None: ignored)
    impute_while_running: str | None = None     # W&B option, kept for compatibility


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


@dataclass(frozen=True)
class TrialPolicy:
    """How each trial is run.

    `checkpoint_every`: an int is a step count, a float is seconds (written as a duration, "5m"),
    "auto" lets the runtime choose, None writes every checkpoint the code asks for.
    """

    timeout: float | None = None
    retries: int = 1
    checkpoint_every: float | str | None = None  # int: steps; float: seconds; "auto"
    keep_checkpoints: int = 2
    grace: float = 30.0                         # seconds between SIGTERM and SIGKILL
    heartbeat_timeout: float | None = 60.0      # a silent trial is declared lost after this
    torch_profiler: Mapping[str, Any] | None = None


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
            metric: dict[str, Any] = {"name": self.metric.name, "goal": self.metric.goal.value}
            if self.metric.impute is not None:
                metric["impute"] = self.metric.impute
            if self.metric.target is not None:
                metric["target"] = self.metric.target
            if self.metric.impute_while_running is not None:
                metric["impute_while_running"] = self.metric.impute_while_running
            spec["metric"] = metric
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
        for key in self.ignored:
            if key in self.raw:
                spec[key] = _jsonable(self.raw[key])
        return spec

    @classmethod
    def from_jsonable(cls, data: Mapping[str, Any], *, source: str | Path | None = None) -> SweepSpec:
        """Rebuild a spec from `to_jsonable()` output (the sweep row, on resume).

        `source`, when known, is the spec file (errors name it and `base_dir` follows it).
        """
        spec = parse_spec(data, file=str(source) if source is not None else "<stored spec>")
        return dataclasses.replace(spec, source=Path(source) if source is not None else None)


def _check_override(key: str, value: Any) -> None:
    if key == "workers" and value is not None and (not _is_int(value) or value < 1):
        raise SpecError("must be an integer >= 1", key="workers", value=value, expected="an integer >= 1")
    if key == "seed" and value is not None and (not _is_int(value) or value < 0):
        raise SpecError("must be an integer >= 0", key="seed", value=value, expected="an integer >= 0")
    if key == "method" and value not in _methods():
        raise SpecError("unknown method", key="method", value=value, expected=f"one of {', '.join(_methods())}")
    if key == "backend" and not (isinstance(value, str) and value):
        raise SpecError("must be a name", key="backend", value=value, expected="a string like local or ray")


# ----------------------------------------------------------------------------------------- loading

def load_spec(path: str | Path, *, strict: bool = False, function: str | None = None) -> SweepSpec:
    """Read and validate a sweep spec file; every error names the file.

    `strict` turns what W&B only warns about into errors; `function` ('train.py:train', the CLI's
    `--function`) runs a W&B file written for `wandb.agent(sweep_id, function=train)`."""
    file = str(path)
    raw = read_yaml(path, what="sweep spec")
    if function is not None and isinstance(raw, Mapping):
        raw = {k: v for k, v in raw.items() if k not in ("program", "command")}
        raw["function"] = function
    spec = parse_spec(raw, file=file, base_dir=Path(path).parent, strict=strict)
    return dataclasses.replace(spec, source=Path(path))


def parse_spec(raw: Any, *, file: str | None = None, base_dir: Path | None = None,
               strict: bool = False) -> SweepSpec:
    """Validate a spec mapping (as loaded from YAML). `base_dir` anchors a relative `config` path
    (default: the directory of `file`)."""
    return _SpecParser(file, base_dir, strict=strict).parse(raw)


# ---------------------------------------------------------------------------------------- commands

def wandb_args(params: Mapping[str, Any], parameters: Any = None) -> dict[str, Any]:
    """The trial's parameters as W&B's controller hands them to the agent: one entry per top-level name
    of the spec's `parameters`, a nested parameter's value being a dict of its own (`{"optimizer":
    {"lr": 0.001, "nadam": {"beta": 0.9}}}`), and a dotted name (`optimizer.lr:` written flat) kept as
    one key. `params` is sweeplab's flat form; `parameters` is the spec's raw `parameters` mapping
    (without it, every name is taken as written)."""
    flat = dict(params)
    if not isinstance(parameters, Mapping):
        return flat
    out = _nest(parameters, flat, "")
    for name, value in flat.items():   # names the raw mapping does not know (overrides): as written
        if not any(name == k or name.startswith(k + ".") for k in parameters):
            out[name] = value
    return out


def _nest(block: Mapping[str, Any], flat: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, node in block.items():
        path = f"{prefix}{name}"
        if isinstance(node, Mapping) and isinstance(node.get("parameters"), Mapping):
            out[str(name)] = _nest(node["parameters"], flat, f"{path}.")
        elif path in flat:
            out[str(name)] = flat[path]
    return out


def args_json(params: Mapping[str, Any], parameters: Any = None) -> str:
    """What `${args_json}` passes and `${args_json_file}` holds: `json.dumps` of `wandb_args`, as W&B's
    agent writes it (wandb/sdk/launch/sweeps/utils.py, create_sweep_command_args)."""
    return json.dumps(wandb_args(params, parameters), default=str)


def _arg_lists(args: Mapping[str, Any]) -> dict[str, list[str]]:
    """The list macros, built as W&B's agent builds them: every value formatted with Python's str()
    (`True`, `None`, `['a', 'b']`, `{'lr': 0.001}`), false booleans left out of args_no_boolean_flags.
    Source: wandb/sdk/launch/sweeps/utils.py, create_sweep_command_args."""
    out: dict[str, list[str]] = {name: [] for name in _LIST_MACROS}
    for name, value in args.items():
        flag = f"{name}={value}"
        out["args"].append(f"--{flag}")
        out["args_no_hyphens"].append(flag)
        out["args_no_equals"] += [f"--{name}", str(value)]
        out["args_append_hydra"].append(f"+{flag}")
        out["args_override_hydra"].append(f"++{flag}")
        if isinstance(value, bool):
            if value:
                out["args_no_boolean_flags"].append(f"--{name}")
        else:
            out["args_no_boolean_flags"].append(f"--{flag}")
    return out


def passes_params(command: Sequence[str]) -> bool:
    """True when a command template hands the trial its parameters (`${args}`, `${args_json}`, ...)."""
    return any(m.group(1) in PARAM_MACROS for item in command for m in _MACRO.finditer(item))


def resolve_interpreter(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """What `${interpreter}` runs, and why: W&B's agent runs `python` from PATH (wandb/wandb_agent.py,
    Agent._command_run: sweep_vars["interpreter"] = ["python"]), so the user's own environment runs the
    program, not sweeplab's. Without a `python` on PATH, `python3`, then sweeplab's own interpreter."""
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    for name in ("python", "python3"):
        found = shutil.which(name, path=path)
        if found:
            why = "python on PATH, as W&B's agent runs it" if name == "python" else \
                "python3 on PATH (no `python` on PATH; W&B's agent would fail here)"
            return found, why
    return sys.executable, "sweeplab's own interpreter (neither python nor python3 on PATH)"


def _substitute(single: Callable[[str, str], str | None], where: str, match: re.Match[str]) -> str:
    return single(match.group(1), where) or ""


def build_command(
    spec: SweepSpec,
    params: Mapping[str, Any],
    *,
    interpreter: str,
    args_json_file: str,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """The argv of one trial: the spec's command with W&B's macros expanded as W&B's agent does.

    `params` is flat with dotted names (`{"lr": 0.1, "model.hidden": 64}`); the arguments are W&B's
    (`wandb_args`: a nested parameter is one argument, `--model={'hidden': 64}`). An item that is exactly
    a macro expands to its arguments (`${args}` -> `--lr=0.1`, `${env}` -> `/usr/bin/env`, nothing on
    Windows); inside a longer item the single-value macros are replaced as text (`--params=${args_json_file}`,
    which W&B's agent would leave as it is). The caller writes `args_json(...)` to `args_json_file`.
    """
    template = spec.effective_command
    if template is None:
        raise SpecError("this sweep calls a function; it has no command to build", key="command",
                        file=str(spec.source) if spec.source else None)
    env = os.environ if environ is None else environ
    args = wandb_args(params, spec.raw.get("parameters"))
    lists = _arg_lists(args)

    def single(name: str, where: str) -> str | None:
        if name == "env":
            return None if os.name == "nt" else "/usr/bin/env"
        if name == "interpreter":
            return interpreter
        if name == "program":
            if spec.program is None:
                raise SpecError("command uses ${program} but the spec has no program", key=where)
            return spec.program
        if name == "args_json":
            return json.dumps(args, default=str)
        if name == "args_json_file":
            return args_json_file
        if name.startswith("envvar:"):
            var = name[len("envvar:"):]
            if var not in env:
                raise SpecError(f"environment variable {var} is not set", key=where,
                                value=f"${{{name}}}", expected="a variable set in the environment")
            return env[var]
        raise SpecError("unknown macro", key=where, value=f"${{{name}}}")  # parse_spec prevents this

    argv: list[str] = []
    for i, item in enumerate(template):
        where = f"command[{i}]"
        whole = _MACRO.fullmatch(item)
        if whole is not None:
            name = whole.group(1)
            if name in lists:
                argv += lists[name]
            else:
                value = single(name, where)
                if value is not None:
                    argv.append(value)
            continue
        argv.append(_MACRO.sub(partial(_substitute, single, where), item))
    return argv


# ----------------------------------------------------------------------------------------- parsing

def _did_you_mean(word: str, choices: Sequence[str]) -> str | None:
    return _values.did_you_mean(word, choices)


class _Abbrev(str):
    def __repr__(self) -> str:
        return str(self)


def _short(value: Any) -> Any:
    text = repr(value)
    return value if len(text) <= 80 else _Abbrev(text[:77] + "...")


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class _SpecParser:
    def __init__(self, file: str | None, base_dir: Path | None, *, strict: bool = False) -> None:
        self.file = file
        self.strict = strict
        self.warnings: list[str] = []
        if base_dir is None and file and not file.startswith("<"):  # "<stored spec>" is no file
            base_dir = Path(file).parent
        self.base_dir = base_dir

    # -- helpers --------------------------------------------------------------------------------

    def error(self, message: str, key: str | None, **kw: Any) -> SpecError:
        if "value" in kw:
            kw["value"] = _short(kw["value"])
        return SpecError(message, file=self.file, key=key, **kw)

    def mapping(self, raw: Any, key: str, example: str) -> Mapping[str, Any]:
        if not isinstance(raw, Mapping):
            raise self.error("must be a mapping", key, value=raw, expected=f"a mapping like {example}")
        return raw

    def keys(self, raw: Mapping[str, Any], allowed: Sequence[str], key: str) -> None:
        for k in raw:
            if k not in allowed:
                where = f"{key}.{k}" if key else str(k)
                raise self.error(f"unknown key {k!r}", where, expected=f"one of {', '.join(allowed)}",
                                 hint=_did_you_mean(str(k), allowed))

    def string(self, raw: Any, key: str) -> str | None:
        if raw is None:
            return None
        if not isinstance(raw, str) or not raw.strip():
            raise self.error("must be a non-empty string", key, value=raw, expected="a string")
        return raw

    def integer(self, raw: Any, key: str, *, minimum: int) -> int | None:
        return None if raw is None else _values.integer(_short(raw), key=key, file=self.file, minimum=minimum)

    def number(self, raw: Any, key: str, *, minimum: float = 0.0) -> float | None:
        return None if raw is None else _values.number(_short(raw), key=key, file=self.file, minimum=minimum)

    def duration(self, raw: Any, key: str) -> float | None:
        return None if raw is None else parse_duration(raw, file=self.file, key=key)

    def gpus(self, raw: Any, key: str) -> float | None:
        value = self.number(raw, key)
        if value is not None and value > 1 and not float(value).is_integer():
            raise self.error("a fraction of a GPU must be <= 1; more than one GPU must be a whole number",
                             key, value=raw, expected="a number in [0, 1] or a whole number of GPUs")
        return value

    # -- the spec -------------------------------------------------------------------------------

    def parse(self, raw: Any) -> SweepSpec:
        if raw is None:
            raise self.error("the sweep spec is empty", None, expected="a mapping with method and parameters")
        if not isinstance(raw, Mapping):
            raise self.error("the sweep spec must be a mapping", None, value=raw,
                             expected="a YAML mapping (method: ..., parameters: ...)")
        for k in raw:
            if k in _UNSUPPORTED_KEYS:
                raise self.error(f"{k!r} is not supported", str(k), hint=_UNSUPPORTED_KEYS[k])
            if k not in _TOP_KEYS:   # W&B warns about a schema violation and runs (wandb sweep)
                self.warn(f"unknown key {k!r}", str(k), expected="a sweep spec key",
                          hint=_did_you_mean(str(k), _TOP_KEYS) or "see docs/spec.md for the keys")

        method = self.method(raw.get("method"))
        metric = self.metric(raw.get("metric"), method)
        space = self.space(raw.get("parameters"), method)
        function, program, command = self.target(raw)
        budget = self.budget(raw.get("budget"), raw.get("run_cap"))
        early = self.early_terminate(raw.get("early_terminate"), metric)
        config = self.string(raw.get("config"), "config")
        config_path = Path(config) if config is not None else None
        if config_path is not None and not config_path.is_absolute() and self.base_dir is not None:
            config_path = (self.base_dir / config_path).absolute()
        ignored = tuple(k for k in _IGNORED_KEYS if k in raw)
        return SweepSpec(
            method=method,
            space=space,
            metric=metric,
            name=self.string(raw.get("name"), "name"),
            description=self.text(raw.get("description"), "description"),
            function=function,
            program=program,
            command=command,
            config=config_path,
            profile=self.string(raw.get("profile"), "profile"),
            seed=self.integer(raw.get("seed"), "seed", minimum=0),
            workers=self.integer(raw.get("workers"), "workers", minimum=1),
            resources=self.resources(raw.get("resources")),
            budget=budget,
            trial=self.trial(raw.get("trial")),
            early_terminate=early,
            monitors=self.monitors(raw.get("monitors")),
            backend=self.string(raw.get("backend"), "backend") or "local",
            address=self.string(raw.get("address"), "address"),
            checkpoint_dir=self.string(raw.get("checkpoint_dir"), "checkpoint_dir"),
            source=Path(self.file) if self.file and not self.file.startswith("<") else None,
            raw={k: v for k, v in raw.items() if k in _TOP_KEYS},
            ignored=ignored,
            warnings=tuple(self.warnings) + self.param_warnings(function, program, command),
        )

    def warn(self, message: str, key: str | None, **kw: Any) -> None:
        """What W&B accepts with a warning: a warning here, an error under `strict`."""
        err = self.error(message, key, **kw)
        if self.strict:
            raise err
        self.warnings.append(f"{err} (ignored, as W&B does; --strict makes this an error)")

    def param_warnings(self, function: str | None, program: str | None,
                       command: tuple[str, ...] | None) -> tuple[str, ...]:
        """A command that passes no parameters to a program that never reads wandb.config runs every trial
        with the same settings: say so (W&B's agent runs it silently)."""
        if function is not None or command is None or passes_params(command):
            return ()
        files = [program] if program else [c for c in command if c.endswith(".py") and "${" not in c]
        for name in files:
            path = Path(name) if self.base_dir is None else self.base_dir / name
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if "wandb" in text and re.search(r"\.config\b", text):
                return ()   # it reads its parameters from wandb.config (WANDB_SWEEP_PARAM_PATH)
        shown = files[0] if files else "the program"
        return (f"{self.file or 'spec'}: command: passes no parameters (no ${{args}}, ${{args_json}} or other "
                f"${{args...}} macro) and {shown} does not read wandb.config, so every trial runs with the same "
                "settings; add ${args} to command (or read the parameters from wandb.config)",)

    def text(self, raw: Any, key: str) -> str | None:
        if raw is None:
            return None
        if not isinstance(raw, str):
            raise self.error("must be a string", key, value=raw, expected="a string")
        return raw

    def method(self, raw: Any) -> str:
        methods = _methods()
        expected = f"one of {', '.join(methods)}"
        if raw is None:
            raise self.error("missing required key 'method'", "method", expected=expected)
        if raw == "custom":
            raise self.error("W&B's custom method is not supported", "method", value=raw, expected=expected)
        if raw not in methods:
            raise self.error("unknown method", "method", value=raw, expected=expected,
                             hint=_did_you_mean(str(raw), methods))
        return str(raw)

    def metric(self, raw: Any, method: str) -> MetricSpec:
        if raw is None:
            if method in _search.MODEL_BASED:   # model-based searchers optimise a metric
                raise self.error(f"method {method} needs a metric to optimise", "metric",
                                 expected="a mapping like {name: val_loss, goal: minimize}")
            return MetricSpec()
        raw = self.mapping(raw, "metric", "{name: val_loss, goal: minimize}")
        self.keys(raw, ("name", "goal", "target", "impute", "impute_while_running"), "metric")
        if "name" not in raw:
            raise self.error("missing required key 'name'", "metric.name", expected="the name of a metric")
        name = self.string(raw.get("name"), "metric.name")
        goal_raw = raw.get("goal", "minimize")
        if goal_raw not in ("minimize", "maximize"):
            raise self.error("unknown goal", "metric.goal", value=goal_raw, expected="minimize or maximize",
                             hint=_did_you_mean(str(goal_raw), ("minimize", "maximize")))
        target = raw.get("target")
        if target is not None and not _is_number(target):
            raise self.error("must be a number", "metric.target", value=target, expected="a number")
        impute = raw.get("impute")
        if impute is not None and impute not in _IMPUTE:
            raise self.error("unknown impute", "metric.impute", value=impute, expected=f"one of {', '.join(_IMPUTE)}")
        running = raw.get("impute_while_running")
        if running is False or running == "false":
            running = None
        if running is not None and running not in _IMPUTE:
            raise self.error("unknown impute_while_running", "metric.impute_while_running", value=running,
                             expected="false or one of " + ", ".join(_IMPUTE))
        return MetricSpec(
            name=name, goal=Goal(goal_raw), target=float(target) if target is not None else None,
            impute=None if impute is None else str(impute), impute_while_running=running,
        )

    def space(self, raw: Any, method: str) -> SearchSpace:
        try:
            space = parse_parameters(raw, file=self.file, key="parameters")
        except SpecError as err:
            raise (err.with_file(self.file) if self.file and not err.file else err) from None
        if method == "grid":
            for name, dist in space.params.items():
                if dist.grid_values() is None:
                    raise self.error(
                        f"grid search needs a finite set of values, but parameter {name!r} is {dist.kind}",
                        _param_key(raw, name),
                        expected="value, values, an int_uniform or a q_uniform range",
                        hint="use values: [...] or method: random",
                    )
        return space

    def target(self, raw: Mapping[str, Any]) -> tuple[str | None, str | None, tuple[str, ...] | None]:
        function = self.string(raw.get("function"), "function")
        program = self.string(raw.get("program"), "program")
        command = self.command(raw.get("command")) if "command" in raw else None
        if function is not None:
            if not _FUNCTION.match(function):
                raise self.error("function must name a module or file and a function", "function",
                                 value=function, expected="'pkg.module:fn' or 'path/to/file.py:fn'")
            for other in ("program", "command"):
                if raw.get(other) is not None:
                    raise self.error(f"function and {other} are alternatives; give one", other,
                                     hint="a Python function is called in the worker; a program runs as a command")
            return function, None, None
        if command is not None:
            uses_program = any("${program}" in item for item in command)
            if uses_program and program is None:
                index = next(i for i, item in enumerate(command) if "${program}" in item)
                raise self.error("command uses ${program} but no program is given", f"command[{index}]",
                                 value=command[index], hint="add program: train.py")
            if program is None:
                self.executable(command)
            return None, program, command
        if program is not None:
            return None, program, None
        raise self.error("nothing to run: no program, command or function", None,
                         expected="one of function ('pkg.module:fn'), program (train.py) or command",
                         hint="a W&B sweep run by wandb.agent(sweep_id, function=train) runs with "
                              "`sweeplab sweep FILE --function train.py:train`; or add program: train.py")

    def command(self, raw: Any) -> tuple[str, ...]:
        if isinstance(raw, str):
            try:
                raw = shlex.split(raw)
            except ValueError as exc:
                raise self.error(f"cannot split command: {exc}", "command", value=raw) from None
        if not isinstance(raw, (list, tuple)) or not raw:
            raise self.error("must be a non-empty list", "command", value=raw,
                             expected="a list like [${env}, ${interpreter}, ${program}, ${args}]")
        items: list[str] = []
        for i, item in enumerate(raw):
            key = f"command[{i}]"
            if _is_number(item):
                item = str(item)
            if not isinstance(item, str):
                raise self.error("a command item must be a string", key, value=item, expected="a string")
            if "${" in _MACRO.sub("", item):
                raise self.error("unclosed macro: '${' without '}'", key, value=item,
                                 expected="macros written as ${name}")
            for match in _MACRO.finditer(item):
                name = match.group(1)
                if name.startswith("envvar:") and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name[7:]):
                    continue
                if name not in MACROS:
                    raise self.error(f"unknown macro ${{{name}}}", key, value=item,
                                     expected="one of " + ", ".join(f"${{{m}}}" for m in MACROS)
                                     + " or ${envvar:NAME}",
                                     hint=_did_you_mean(name, MACROS))
                if name in _LIST_MACROS and match.group(0) != item:
                    raise self.error(f"${{{name}}} expands to several arguments; it must be a whole item",
                                     key, value=item, expected=f"an item that is exactly ${{{name}}}")
            items.append(item)
        return tuple(items)

    def executable(self, command: tuple[str, ...]) -> None:
        """A command without a program must start with something to execute."""
        i = 1 if command[0] == "${env}" else 0
        if i >= len(command):
            raise self.error("command has nothing to execute", "command", value=list(command),
                             expected="an executable after ${env}")
        first = command[i]
        if first == "${interpreter}" or first.startswith("${envvar:"):
            return
        if _MACRO.search(first) or not first.strip() or first.startswith("-"):
            raise self.error("command must start with an executable", f"command[{i}]", value=first,
                             expected="a program name or path such as python3, ./train.sh or ${interpreter}")

    def budget(self, raw: Any, run_cap: Any) -> Budget:
        cap = self.integer(run_cap, "run_cap", minimum=1)
        if raw is None:
            return Budget(trials=cap)
        raw = self.mapping(raw, "budget", "{trials: 60, time: 30m, gpu_hours: 4}")
        self.keys(raw, ("trials", "time", "gpu_hours", "cpu_hours", "cost", "prices"), "budget")
        trials = self.integer(raw.get("trials"), "budget.trials", minimum=1)
        if cap is not None and trials is not None and cap != trials:
            raise self.error("run_cap and budget.trials disagree (run_cap is an alias of budget.trials)",
                             "run_cap", value=cap, expected=f"{trials} (budget.trials) or only one of them")
        cost = raw.get("cost")
        if cost is not None:
            cost = self.mapping(cost, "budget.cost", "{usd: 20}")
            cost = {str(k): self.number(v, f"budget.cost.{k}") for k, v in cost.items()}
        return Budget(
            trials=trials if trials is not None else cap,
            time=self.duration(raw.get("time"), "budget.time"),
            gpu_hours=self.hours(raw.get("gpu_hours"), "budget.gpu_hours"),
            cpu_hours=self.hours(raw.get("cpu_hours"), "budget.cpu_hours"),
            cost=cost,
            prices=self.prices(raw.get("prices"), cost),
        )

    def prices(self, raw: Any, cost: Mapping[str, float] | None) -> dict[str, float] | None:
        """Prices per resource-hour, e.g. {cpu_hour: 0.04, gpu_hour: 2.5}: added to every budget.cost."""
        if raw is None:
            return None
        raw = self.mapping(raw, "budget.prices", "{cpu_hour: 0.04, gpu_hour: 2.5}")
        self.keys(raw, ("cpu_hour", "gpu_hour"), "budget.prices")
        if not cost:
            raise self.error("budget.prices needs a budget.cost limit to spend against", "budget.prices",
                             expected="budget.cost: {usd: 20} beside it")
        out = {}
        for k, v in raw.items():
            price = self.number(v, f"budget.prices.{k}")
            if price is None or price < 0:
                raise self.error("a price cannot be negative", f"budget.prices.{k}", value=v,
                                 expected="a number >= 0 (currency per resource-hour)")
            out[str(k)] = float(price)
        return out

    def hours(self, raw: Any, key: str) -> float | None:
        """A number of hours, or a duration string ("90m")."""
        if raw is None:
            return None
        if isinstance(raw, str):
            return parse_duration(raw, file=self.file, key=key) / 3600.0
        return self.number(raw, key)

    def resources(self, raw: Any) -> Resources:
        if raw is None:
            return Resources()
        raw = self.mapping(raw, "resources", "{cpus: 1, gpus: 0}")
        allowed = ("cpus", "gpus", "workers", "cpus_per_worker", "gpus_per_worker", "custom", "placement")
        self.keys(raw, allowed, "resources")
        custom = raw.get("custom") or {}
        custom = self.mapping(custom, "resources.custom", "{tpu: 1}")
        placement = raw.get("placement", "pack")
        if placement is not None and str(placement).lower() != "none":
            placement = str(placement).upper()
            if placement not in PLACEMENTS:
                raise self.error("unknown placement strategy", "resources.placement", value=raw.get("placement"),
                                 expected=f"one of {', '.join(p.lower() for p in PLACEMENTS)} or none")
        else:
            placement = None
        return Resources(
            placement=placement,
            cpus=self.number(raw.get("cpus", 1.0), "resources.cpus"),  # type: ignore[arg-type]
            gpus=self.gpus(raw.get("gpus", 0.0), "resources.gpus"),  # type: ignore[arg-type]
            workers=self.integer(raw.get("workers", 1), "resources.workers", minimum=1),  # type: ignore[arg-type]
            cpus_per_worker=self.number(raw.get("cpus_per_worker"), "resources.cpus_per_worker"),
            gpus_per_worker=self.gpus(raw.get("gpus_per_worker"), "resources.gpus_per_worker"),
            custom={str(k): self.number(v, f"resources.custom.{k}") for k, v in custom.items()},  # type: ignore[misc]
        )

    def trial(self, raw: Any) -> TrialPolicy:
        if raw is None:
            return TrialPolicy()
        raw = self.mapping(raw, "trial", "{timeout: 10m, retries: 2, checkpoint_every: 5m}")
        allowed = ("timeout", "retries", "checkpoint_every", "keep_checkpoints", "grace",
                   "heartbeat_timeout", "torch_profiler")
        self.keys(raw, allowed, "trial")
        profiler = raw.get("torch_profiler")
        if profiler is True:
            profiler = {}
        elif profiler is False:
            profiler = None
        elif profiler is not None:
            profiler = dict(self.mapping(profiler, "trial.torch_profiler", "{wait: 1, warmup: 1, active: 3}"))
        defaults = TrialPolicy()
        return TrialPolicy(
            timeout=self.duration(raw.get("timeout"), "trial.timeout"),
            retries=self.integer(raw.get("retries", defaults.retries), "trial.retries", minimum=0),  # type: ignore[arg-type]
            checkpoint_every=self.checkpoint_every(raw.get("checkpoint_every")),
            keep_checkpoints=self.integer(  # type: ignore[arg-type]
                raw.get("keep_checkpoints", defaults.keep_checkpoints), "trial.keep_checkpoints", minimum=1),
            grace=self.duration(raw.get("grace", defaults.grace), "trial.grace"),  # type: ignore[arg-type]
            heartbeat_timeout=self.duration(raw.get("heartbeat_timeout", defaults.heartbeat_timeout),
                                            "trial.heartbeat_timeout"),
            torch_profiler=profiler,
        )

    def checkpoint_every(self, raw: Any) -> float | str | None:
        key = "trial.checkpoint_every"
        expected = "a step count (100), a duration ('5m') or 'auto'"
        if raw is None:
            return None
        if _is_int(raw):
            if raw < 1:
                raise self.error("checkpoint_every must be at least 1 step", key, value=raw, expected=expected)
            return int(raw)
        if isinstance(raw, str):
            text = raw.strip().lower()
            if text == "auto":
                return "auto"
            steps = re.fullmatch(r"(\d+)\s*steps?", text)
            if steps:
                return self.checkpoint_every(int(steps.group(1)))
            return parse_duration(raw, file=self.file, key=key)
        raise self.error("checkpoint_every must be steps, a duration or 'auto'", key, value=raw,
                         expected=expected, hint="a bare number is a step count; write '30s' for time")

    def early_terminate(self, raw: Any, metric: MetricSpec) -> Mapping[str, Any] | None:
        if raw is None:
            return None
        raw = self.mapping(raw, "early_terminate", "{type: hyperband, min_iter: 3}")
        kind, types = raw.get("type"), _early_terminate_types()
        if kind is None:
            raise self.error("missing required key 'type'", "early_terminate.type",
                             expected=f"one of {', '.join(types)}")
        if kind not in types:
            raise self.error("unknown early_terminate type", "early_terminate.type", value=kind,
                             expected=f"one of {', '.join(types)}",
                             hint=_did_you_mean(str(kind), types))
        if raw.get("metric") is None and metric.name is None:
            raise self.error("early termination needs a metric", "early_terminate",
                             expected="a sweep metric or early_terminate.metric")
        out = dict(raw)
        if kind == "hyperband":   # W&B drops keys its schema lacks (sweeps/hyperband_stopping.py,
            for k in raw:         # hyperband_baseline_validate_and_fill) and runs
                if k not in _HYPERBAND_KEYS:
                    self.warn(f"unknown key {k!r}", f"early_terminate.{k}",
                              expected=f"one of {', '.join(_HYPERBAND_KEYS)}",
                              hint=_did_you_mean(str(k), _HYPERBAND_KEYS))
                    del out[k]
        return out

    def monitors(self, raw: Any) -> tuple[Any, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, (list, tuple)):
            raise self.error("must be a list", "monitors", value=raw,
                             expected="a list like [nan, {plateau: {metric: val_loss, patience: 5}}]")
        for i, item in enumerate(raw):
            if not isinstance(item, (str, Mapping)):
                raise self.error("a monitor must be a name or a mapping", f"monitors[{i}]", value=item,
                                 expected="a name (nan) or a mapping ({plateau: {...}})")
        return tuple(raw)


def _param_key(raw: Any, name: str) -> str:
    """The spec key path of a flat parameter name: `a.b` -> `parameters.a.parameters.b`."""
    if not isinstance(raw, Mapping):
        return f"parameters.{name}"
    if name in raw:
        return f"parameters.{name}"
    parts = name.split(".")
    for i in range(1, len(parts)):
        head, rest = ".".join(parts[:i]), ".".join(parts[i:])
        node = raw.get(head)
        if isinstance(node, Mapping) and isinstance(node.get("parameters"), Mapping):
            return f"parameters.{head}.{_param_key(node['parameters'], rest)}"
    return f"parameters.{name}"
