"""Validation by key: the top-level spec, method, metric, parameters, what runs, early termination, monitors."""

from __future__ import annotations

import math
import re
import shlex
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import sweeplab.search as _search
from sweeplab._values import is_number as _is_number
from sweeplab.errors import SpecError
from sweeplab.space import LogUniformBase, SearchSpace, parse_parameters
from sweeplab.space.discrete import MAX_GRID_VALUES, GridTooLarge
from sweeplab.spec.keys import (
    _EXPONENT_KINDS,
    _FUNCTION,
    _HYPERBAND_KEYS,
    _IGNORED_KEYS,
    _IMPUTE,
    _LIST_MACROS,
    _MACRO,
    _TOP_KEYS,
    _UNSUPPORTED_KEYS,
    _WANDB_NAME,
    DEFAULT_COMMAND,
    MACROS,
    _dropped,
    _early_terminate_types,
    _methods,
    is_macro,
)
from sweeplab.spec.limits import _Limits
from sweeplab.spec.model import MAX_SEED, Constraint, MetricSpec, SweepSpec
from sweeplab.spec.points import parse_points
from sweeplab.spec.reader import _did_you_mean, yaml_bool_hint
from sweeplab.spec.wandb import _WandbWarnings
from sweeplab.types import Goal


def check_sweep_name(name: str, *, key: str = "name", file: str | None = None) -> str:
    """`name` when it can name a sweep (from a spec's `name:`, `--name` or `sl.sweep(name=...)`), else a
    SpecError: a control character (NUL, newline, tab, escape) makes a sweep that no command line can name
    again, or whose printed `sweeplab best NAME` names another sweep. A blank name (`sl.run_sweep(name="  ")`,
    `resume --fork ''`) made a sweep that `status` showed as a blank row."""
    if not name.strip():
        raise SpecError("a sweep name cannot be blank", file=file, key=key, value=name,
                        expected="a non-empty name, e.g. lr-sweep or team/lr-sweep")
    bad = next((ch for ch in name if unicodedata.category(ch) == "Cc"), None)
    if bad is not None:
        raise SpecError(f"a sweep name cannot hold a control character ({bad!r})", file=file, key=key, value=name,
                        expected="printable text, e.g. lr-sweep or team/lr-sweep")
    return name


class _SpecParser(_WandbWarnings, _Limits):
    """Validates a spec mapping key by key into a `SweepSpec`."""

    # -- the spec -------------------------------------------------------------------------------

    def parse(self, raw: Any) -> SweepSpec:
        if raw is None:
            raise self.error("the sweep spec is empty", None, expected="a mapping with method and parameters")
        if not isinstance(raw, Mapping):
            raise self.error("the sweep spec must be a mapping", None, value=raw,
                             expected="a YAML mapping (method: ..., parameters: ...)")
        if raw.get("method") is None:   # a larger config holding the sweep under a key, for wandb.sweep(cfg[k])
            for k, v in raw.items():
                if isinstance(v, Mapping) and v.get("method") is not None and "parameters" in v:
                    raise self.error(f"missing required key 'method' (the sweep is under {k!r})", "method",
                                     expected="method at the top level",
                                     hint=f"move the keys of {k!r} to the top level of a file of their own")
        for k in raw:
            if k in _UNSUPPORTED_KEYS:
                raise self.error(f"{k!r} is not supported", str(k), hint=_UNSUPPORTED_KEYS[k])
            if k not in _TOP_KEYS:   # W&B warns about a schema violation and runs (wandb sweep)
                self.warn(f"unknown key {k!r}", str(k), expected="a sweep spec key",
                          hint=_did_you_mean(str(k), _TOP_KEYS) or "see docs/spec.md for the keys")

        method = self.method(raw.get("method"))
        objectives = self.objectives(raw.get("metric"), method)
        metric = objectives[0] if objectives else MetricSpec()
        space = self.space(raw.get("parameters"), method)
        function, program, command = self.target(raw)
        if method in _search.DEFINE_BY_RUN and function != _search.OBJECTIVE_TRIAL:
            raise self.error(f"method {method!r} is set by sweeplab.optimize (or `sweeplab sweep objective.py:fn`) "
                             "for an Optuna objective, not written in a spec", "method", value=method,
                             expected=f"one of {', '.join(m for m in _methods() if m not in _search.DEFINE_BY_RUN)}")
        self.arguments_without_nul(space, DEFAULT_COMMAND if command is None and program is not None else command)
        budget = self.budget(raw.get("budget"), raw.get("run_cap"))
        early = self.early_terminate(raw.get("early_terminate"), metric, objectives)
        config = self.string(raw.get("config"), "config")
        config_path = Path(config) if config is not None else None
        if config_path is not None and not config_path.is_absolute() and self.base_dir is not None:
            config_path = (self.base_dir / config_path).absolute()
        ignored = tuple(k for k in _IGNORED_KEYS if k in raw)
        return SweepSpec(
            method=method,
            space=space,
            metric=metric,
            name=self.sweep_name(raw.get("name")),
            description=self.text(self.label(raw.get("description"), "description"), "description"),
            function=function,
            program=program,
            command=command,
            config=config_path,
            profile=self.string(raw.get("profile"), "profile"),
            seed=self.seed(raw.get("seed")),
            workers=self.integer(raw.get("workers"), "workers", minimum=1),
            resources=self.resources(raw.get("resources")),
            budget=budget,
            trial=self.trial(raw.get("trial")),
            early_terminate=early,
            monitors=self.monitors(raw.get("monitors")),
            backend=self.string(raw.get("backend"), "backend") or "local",
            address=self.string(raw.get("address"), "address"),
            checkpoint_dir=self.checkpoint_dir(raw.get("checkpoint_dir")),
            source=Path(self.file) if self.file and not self.file.startswith("<") else None,
            raw={k: v for k, v in raw.items() if k in _TOP_KEYS},
            ignored=ignored,
            warnings=tuple(self.warnings) + self.param_warnings(function, program, command),
            objectives=objectives,
            constraints=self.constraints(raw.get("constraints")),
            points=parse_points(raw.get("points_to_evaluate"), space, method, budget.trials, file=self.file),
        )

    def label(self, raw: Any, key: str) -> Any:
        """`name: 2024`: W&B's schema wants a string, warns, and shows it; so does sweeplab, as text."""
        if isinstance(raw, bool) or _is_number(raw):
            self.warn("must be a string", key, value=raw, expected="a string", hint=yaml_bool_hint(raw),
                      note=f"W&B warns and runs it; sweeplab reads it as {str(raw)!r}")
            return str(raw)
        return raw

    def sweep_name(self, raw: Any) -> str | None:
        """The sweep's name: text without control characters. A NUL byte made a sweep no command could name
        again (no argument can hold one), and a newline, tab or escape made the printed `sweeplab best NAME`
        name another sweep than the stored one."""
        label = self.label(raw, "name")
        if isinstance(label, str) and label.strip():   # its control characters (NUL too) named as such
            return check_sweep_name(label, file=self.file)
        name = self.string(label, "name")
        return None if name is None else check_sweep_name(name, file=self.file)

    def method(self, raw: Any) -> str:
        methods = tuple(m for m in _methods() if m not in _search.DEFINE_BY_RUN)
        if raw in _search.DEFINE_BY_RUN:   # accepted by `target` for the spec sweeplab.optimize builds
            return str(raw)
        expected = f"one of {', '.join(methods)}"
        if raw is None:
            raise self.error("missing required key 'method'", "method", expected=expected)
        if raw == "custom":
            raise self.error("W&B's custom method is not supported", "method", value=raw, expected=expected)
        if raw not in methods:
            raise self.error("unknown method", "method", value=raw, expected=expected,
                             hint=yaml_bool_hint(raw) or _did_you_mean(str(raw), methods))
        return str(raw)

    def objectives(self, raw: Any, method: str) -> tuple[MetricSpec, ...]:
        """`metric`: one mapping (one objective) or a list of them (several: a Pareto front)."""
        if raw is None:
            if method in _search.MODEL_BASED:   # model-based searchers optimise a metric
                raise self.error(f"method {method} needs a metric to optimise", "metric",
                                 expected="a mapping like {name: val_loss, goal: minimize}")
            return ()
        if not isinstance(raw, (list, tuple)):
            return (self.metric(raw, method),)
        if not raw:
            raise self.error("must not be empty", "metric", value=raw,
                             expected="a list like [{name: val_acc, goal: maximize}, {name: latency_ms}]")
        several = len(raw) > 1
        out: list[MetricSpec] = []
        for i, item in enumerate(raw):
            m = self.metric(item, method, key=f"metric[{i}]", several=several)
            if any(o.name == m.name for o in out):
                raise self.error("an objective is listed twice", f"metric[{i}].name", value=m.name,
                                 expected="a different metric name for each objective")
            out.append(m)
        return tuple(out)

    def metric(self, raw: Any, method: str, *, key: str = "metric", several: bool = False) -> MetricSpec:
        raw = self.mapping(raw, key, "{name: val_loss, goal: minimize}")
        # with several objectives there is no single target to reach or value to impute
        allowed = (("name", "goal", "reference") if several else
                   ("name", "goal", "target", "impute", "impute_while_running", "reference"))
        for k in raw:
            if several and k in ("target", "impute", "impute_while_running"):
                raise self.error(f"{k!r} is not supported with several objectives", f"{key}.{k}",
                                 value=raw[k], expected="one of name, goal, reference",
                                 hint="a Pareto front has no single value to reach or impute")
        self.keys(raw, allowed, key)
        if "name" not in raw:
            raise self.error("missing required key 'name'", f"{key}.name", expected="the name of a metric")
        name = self.string(raw.get("name"), f"{key}.name")
        goal_raw = raw.get("goal", "minimize")
        if goal_raw not in ("minimize", "maximize"):
            raise self.error("unknown goal", f"{key}.goal", value=goal_raw, expected="minimize or maximize",
                             hint=_did_you_mean(str(goal_raw), ("minimize", "maximize")) or next(
                                 (f"did you mean {g!r}?" for g in ("minimize", "maximize")
                                  if str(goal_raw).lower()[:3] == g[:3]), None))   # max, min, Max, MINIMISE
        target = raw.get("target")
        if target is not None and not _is_number(target):
            raise self.error("must be a number", f"{key}.target", value=target, expected="a number")
        reference = raw.get("reference")
        if reference is not None and not _is_number(reference):
            raise self.error("must be a number", f"{key}.reference", value=reference,
                             expected="a number (the hypervolume reference value of this objective)")
        impute = raw.get("impute")
        if impute is not None and impute not in _IMPUTE:
            raise self.error("unknown impute", f"{key}.impute", value=impute, expected=f"one of {', '.join(_IMPUTE)}")
        running = raw.get("impute_while_running")
        if running is False or running == "false":
            running = None
        if running is not None and running not in _IMPUTE:
            raise self.error("unknown impute_while_running", f"{key}.impute_while_running", value=running,
                             expected="false or one of " + ", ".join(_IMPUTE))
        return MetricSpec(
            name=name, goal=Goal(goal_raw), target=float(target) if target is not None else None,
            impute=None if impute is None else str(impute), impute_while_running=running,
            reference=float(reference) if reference is not None else None,
        )

    def constraints(self, raw: Any) -> tuple[Constraint, ...]:
        """`constraints: [{metric: memory_gb, max: 16}, ...]`: bounds a feasible trial's metrics keep."""
        if raw is None:
            return ()
        example = "[{metric: memory_gb, max: 16}, {metric: latency_ms, max: 50}]"
        if not isinstance(raw, (list, tuple)):
            raise self.error("must be a list", "constraints", value=raw, expected=f"a list like {example}")
        out = []
        for i, item in enumerate(raw):
            key = f"constraints[{i}]"
            item = self.mapping(item, key, "{metric: memory_gb, max: 16}")
            self.keys(item, ("metric", "max", "min"), key)
            if "metric" not in item:
                raise self.error("missing required key 'metric'", f"{key}.metric",
                                 expected="the name of a metric the trial reports")
            metric = self.string(item.get("metric"), f"{key}.metric")
            bounds: dict[str, float] = {}
            for bound in ("max", "min"):
                v = item.get(bound)
                if v is not None and not _is_number(v):
                    raise self.error("must be a number", f"{key}.{bound}", value=v, expected="a number")
                if v is not None:
                    bounds[bound] = float(v)
            if not bounds:
                raise self.error("a constraint needs a bound", key, value=dict(item),
                                 expected="max: NUMBER and/or min: NUMBER")
            if "max" in bounds and "min" in bounds and bounds["min"] > bounds["max"]:
                raise self.error("min is above max: no value is feasible", f"{key}.min", value=bounds["min"],
                                 expected=f"a number <= max ({bounds['max']:g})")
            out.append(Constraint(metric=str(metric), **bounds))
        return tuple(out)

    def space(self, raw: Any, method: str) -> SearchSpace:
        try:
            space = parse_parameters(raw, file=self.file, key="parameters")
        except SpecError as err:
            raise (err.with_file(self.file) if self.file and not err.file else err) from None
        self.odd_names(raw, "parameters")
        self.mixed_bounds(raw)
        self.param_names = {*space.params, *(raw if isinstance(raw, Mapping) else ())}   # flat, dotted and groups
        for name, dist in space.params.items():   # W&B warns on each (sweeps PARAM_DEPRECATION_MAP), and runs it
            if dist.kind in _EXPONENT_KINDS and isinstance(dist, LogUniformBase):
                lo, hi = (_exp_text(x) for x in dist.log_bounds())
                self.warn(f"{dist.kind} takes min and max as natural-log exponents: it draws values from "
                          f"{lo} to {hi}", f"{space.keys.get(name) or _param_key(raw, name)}.distribution",
                          note="W&B warns and runs it, and so does sweeplab", value=dist.kind,
                          expected=f"{_EXPONENT_KINDS[dist.kind]} to give min and max as the values themselves")
        for name, dist in space.params.items():   # `q: 1` over 0.001..0.01: every draw rounds to 0
            if hasattr(dist, "q") and _one_value(dist):
                self.warn(f"q is larger than the range it quantises: every value {dist.kind} draws is "
                          f"{dist.from_unit(0.0)!r}", f"{space.keys.get(name) or _param_key(raw, name)}.q",
                          note="W&B runs it so, and so does sweeplab", value=dist.q,  # type: ignore[attr-defined]
                          expected="a q smaller than the range (max - min), or {value: ...} for one value")
        if method == "grid":
            for name, dist in space.params.items():
                try:
                    values = dist.grid_values()
                except GridTooLarge as exc:
                    raise self.error(str(exc), space.keys.get(name) or _param_key(raw, name),
                                     expected=f"at most {MAX_GRID_VALUES:,} values per parameter",
                                     hint="use method: random" + (", or a larger q" if "q" in dist.kind else "")
                                     ) from None
                if values is None:
                    raise self.error(
                        f"grid search needs a finite set of values, but parameter {name!r} is {dist.kind}",
                        space.keys.get(name) or _param_key(raw, name),
                        expected="value, values, an int_uniform or a q_uniform range",
                        hint="use values: [...] or method: random",
                    )
        for name, dist in space.params.items():   # a draw is round(x / q) * q: x / q must be a float
            where = space.keys.get(name) or _param_key(raw, name)
            problem = _overflows(dist)
            if problem == "q":
                raise self.error("q is too small for the range: a value divided by q is beyond a float",
                                 f"{where}.q", value=dist.q,  # type: ignore[attr-defined]
                                 expected=f"q of at least max / {sys.float_info.max:.4g}")
            if problem == "inf":   # `normal` with sigma: 1e308: its tails are infinite, no value to run
                raise self.error(f"{dist.kind} draws infinite values: its spread is beyond a float", where,
                                 value=dist.kind, expected=f"draws within +-{sys.float_info.max:.4g}")
        return space

    def checkpoint_dir(self, raw: Any) -> str | None:
        """A path or fsspec URL, as written (`~` is the home directory). `$SCRATCH/ckpt` is refused: nothing
        expands it, so the checkpoints went to a directory named `$SCRATCH` in the working directory."""
        text = self.string(raw, "checkpoint_dir")
        if text is not None and _ENV_REFERENCE.search(text):
            raise self.error("environment variables are not expanded here", "checkpoint_dir", value=text,
                             expected="the path itself, e.g. /scratch/me/ckpt or s3://bucket/ckpt (~ is expanded)",
                             hint="a path that differs per machine: one spec per machine, or --spec on resume")
        return text

    def seed(self, raw: Any) -> int | None:
        """An int in [0, 2**32 - 1]: NumPy's and Optuna's samplers take no larger seed (a larger one failed
        only once the sweep had started, and one past 2**63 could not even be stored)."""
        seed = self.integer(raw, "seed", minimum=0)
        if seed is not None and seed > MAX_SEED:
            raise self.error("seed is too large", "seed", value=seed, expected=f"an integer from 0 to {MAX_SEED}")
        return seed

    def odd_names(self, raw: Any, key: str) -> None:
        """Parameter names W&B's schema does not match (`+experiment`, `model/encoder`: Hydra overrides):
        W&B warns and hands them to the program as they are; so does sweeplab."""
        if not isinstance(raw, Mapping):
            return
        for name, node in raw.items():
            where = f"{key}.{name}"
            if isinstance(name, str) and not _WANDB_NAME.match(name):
                self.warn("parameter name W&B's schema does not match", where, value=name,
                          note="W&B warns and passes it as it is, and so does sweeplab",
                          expected="letters, digits, '_', '-' or '.', not starting with a digit")
            if isinstance(node, Mapping):
                self.odd_names(node.get("parameters"), f"{where}.parameters")
                when = node.get("when")
                for value, block in (when.items() if isinstance(when, Mapping) else ()):
                    self.odd_names(block, f"{where}.when.{value}")

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
                words = shlex.split(raw)
            except ValueError as exc:
                raise self.error(f"cannot split command: {exc}", "command", value=raw) from None
            if words:   # W&B's schema wants a list, and its agent runs a string letter by letter
                self.warn("a string, not a list", "command", value=raw, expected=f"a list such as {words!r}",
                          note="split into words as a shell would; W&B's agent would run it letter by letter")
            raw = words
        if not isinstance(raw, (list, tuple)) or not raw:
            raise self.error("must be a non-empty list", "command", value=raw,
                             expected="a list like [${env}, ${interpreter}, ${program}, ${args}]")
        items: list[str] = []
        for i, item in enumerate(raw):
            key = f"command[{i}]"
            if isinstance(item, bool) or _is_number(item):
                item = str(item)   # W&B's agent passes str(item): True, 4
            if not isinstance(item, str):   # null, a mapping (`- --lr: 3`), a list: W&B's agent passes str(item)
                self.warn("a command item that is not a string", key, value=item, expected="a string",
                          note=f"W&B's agent passes it as {str(item)!r}, and so does sweeplab",
                          hint="quote it if that text is meant")
                item = str(item)
            if "\x00" in item:
                raise self.error("a command item cannot hold a NUL byte (\\0): no program argument can", key,
                                 value=item, expected="text without NUL bytes")
            if "${" in _MACRO.sub("", item):
                raise self.error("unclosed macro: '${' without '}'", key, value=item,
                                 expected="macros written as ${name}")
            for match in _MACRO.finditer(item):
                name = match.group(1)
                if not is_macro(name):
                    # W&B's agent (wandb_agent.py, Agent._command_run) drops an item that is exactly an
                    # unknown ${...} and passes one inside a longer item as it is (Hydra's ${now:...});
                    # sweeplab does the same, and says so when the item is dropped or looks like a typo
                    if name in self.param_names:   # `-b ${batch-size}`: the agent does not put values there
                        self.warn(f"${{{name}}} names a parameter, but W&B's agent does not put parameter values "
                                  "into command items", key, value=item,
                                  note=("W&B's agent drops this item, and so does sweeplab" if match.group(0) == item
                                        else "W&B's agent passes the item as it is, and so does sweeplab"),
                                  expected="${args} (--name=value) or another ${args...} macro as an item of its own")
                        continue
                    hint = _did_you_mean(name, MACROS)
                    if match.group(0) == item or hint:
                        what = "W&B's agent drops this item, and so does sweeplab" if match.group(0) == item \
                            else "W&B's agent passes it as it is, and so does sweeplab"
                        self.warn(f"unknown macro ${{{name}}}: {what}", key, value=item,
                                  expected="one of " + ", ".join(f"${{{m}}}" for m in MACROS)
                                  + " or ${envvar:NAME}", hint=hint)
                    continue
                if name in _LIST_MACROS and match.group(0) != item:
                    raise self.error(f"${{{name}}} expands to several arguments; it must be a whole item",
                                     key, value=item, expected=f"an item that is exactly ${{{name}}}")
            items.append(item)
        return tuple(items)

    def arguments_without_nul(self, space: SearchSpace, command: Sequence[str] | None) -> None:
        """A parameter's name or text value that a command passes as an argument (`${args}`: `--name=value`)
        cannot hold a NUL byte: every trial failed to start (ValueError: embedded null byte, from Popen).
        `${args_json}` writes one as \\u0000, and a value inside a list or mapping is written escaped."""
        whole = {m.group(1) for c in command or () if (m := _MACRO.fullmatch(c)) is not None}
        if not whole & set(_LIST_MACROS):
            return
        for name, dist in space.params.items():
            where = space.keys.get(name) or f"parameters.{name}"
            if "\x00" in name:
                raise self.error("a parameter name cannot hold a NUL byte (\\0): the command passes it as an "
                                 "argument, which cannot hold one", where, value=name,
                                 expected="a name without NUL bytes")
            values = getattr(dist, "values", None)
            for value in (values if isinstance(values, tuple) else (getattr(dist, "value", None),)):
                if isinstance(value, str) and "\x00" in value:
                    raise self.error("a value the command passes as an argument cannot hold a NUL byte (\\0)",
                                     where, value=value, expected="text without NUL bytes",
                                     hint="${args_json} or ${args_json_file} pass it (JSON writes \\u0000)")

    def executable(self, command: tuple[str, ...]) -> None:
        """A command without a program must start with something to execute."""
        command = tuple(c for c in command if not _dropped(c))
        i = 1 if command[:1] == ("${env}",) else 0
        if i >= len(command):
            raise self.error("command has nothing to execute", "command", value=list(command),
                             expected="an executable after ${env}")
        first = command[i]
        if first == "${interpreter}" or first.startswith("${envvar:"):
            return
        if _MACRO.search(first) or not first.strip() or first.startswith("-"):
            raise self.error("command must start with an executable", f"command[{i}]", value=first,
                             expected="a program name or path such as python3, ./train.sh or ${interpreter}")

    def early_terminate(self, raw: Any, metric: MetricSpec, objectives: Sequence[MetricSpec] = ()
                        ) -> Mapping[str, Any] | None:
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
                             hint=yaml_bool_hint(kind) or _did_you_mean(str(kind), types))
        if raw.get("metric") is None and metric.name is None:
            raise self.error("early termination needs a metric", "early_terminate",
                             expected="a sweep metric or early_terminate.metric")
        judged = raw.get("metric")
        if isinstance(judged, str) and raw.get("goal") is None and metric.name is not None \
                and judged not in [o.name for o in objectives or (metric,)]:
            # judged by the sweep's goal: an accuracy sweep pruning by `loss` pruned its best trials, silently
            other = "minimize" if metric.goal is Goal.MAXIMIZE else "maximize"
            self.warn(f"early_terminate.metric {judged!r} is not an objective of the sweep", "early_terminate.goal",
                      expected="minimize or maximize", note=f"judged by the sweep's goal, {metric.goal.value}",
                      hint=f"add early_terminate.goal: {other} if {judged!r} goes the other way")
        out = dict(raw)
        if kind == "hyperband":   # W&B drops keys its schema lacks (sweeps/hyperband_stopping.py,
            for k in raw:         # hyperband_baseline_validate_and_fill) and runs
                if k not in _HYPERBAND_KEYS:
                    self.warn(f"unknown key {k!r}", f"early_terminate.{k}",
                              expected=f"one of {', '.join(_HYPERBAND_KEYS)}",
                              hint=_did_you_mean(str(k), _HYPERBAND_KEYS))
                    del out[k]
            if out.get("min_iter") is not None and out.get("max_iter") is not None and out.get("s") is None:
                # W&B's schema takes the file by its min_iter (anyOf: max_iter with s, or min_iter); its
                # controller reads s beside max_iter, which is not there: judged by min_iter's bands here
                self.warn("max_iter is not used without s", "early_terminate.max_iter", value=out.pop("max_iter"),
                          expected="max_iter with s, or min_iter", note=f"bands from min_iter {out['min_iter']}",
                          hint="add s to judge by max_iter, or drop max_iter")
            elif out.get("min_iter") is not None and out.get("max_iter") is not None:
                self.warn("min_iter is not used beside max_iter", "early_terminate.min_iter",
                          value=out["min_iter"], expected="min_iter or max_iter with s, not both",
                          note="max_iter wins, as in W&B")
        return out

    def monitors(self, raw: Any) -> tuple[Any, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, (list, tuple)):
            raise self.error("must be a list", "monitors", value=raw,
                             expected="a list like [nan, {plateau: {metric: val_loss, patience: 5}}]")
        for i, item in enumerate(raw):
            if not isinstance(item, (str, Mapping)) and not callable(getattr(item, "to_spec", None)):
                raise self.error("a monitor must be a name or a mapping", f"monitors[{i}]", value=item,
                                 expected="a name (nan) or a mapping ({plateau: {...}})")
        return tuple(raw)


def _exp_text(x: float) -> str:
    """exp(x) for a message: `1.0001`, or `e^1000` where a float cannot hold it."""
    try:
        return f"{math.exp(x):.6g}"
    except OverflowError:
        return f"e^{x:g}"


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


_ENV_REFERENCE = re.compile(r"\$(?:\{[^}]*\}|[A-Za-z_])")   # $SCRATCH, ${SCRATCH}, ${oc.env:SCRATCH}


def _one_value(dist: Any) -> bool:
    """A quantised distribution whose every draw is one value (q wider than its range)."""
    try:
        return bool(dist.from_unit(0.0) == dist.from_unit(1.0))
    except (OverflowError, ValueError):   # a q so small the multiples overflow: the grid check names it
        return False


def _overflows(dist: Any) -> str | None:
    """"q" for a quantised distribution whose extreme draws cannot be quantised (`q: 1.0e-300` up to 1.0e308),
    "inf" for one whose extreme draws are infinite (`normal` with `sigma: 1.0e308`), else None."""
    if not hasattr(dist, "from_unit") or dist.kind in ("categorical", "categorical_w_probabilities", "constant"):
        return None
    try:
        ends = [dist.from_unit(0.0), dist.from_unit(1.0)]
    except (OverflowError, ValueError):
        return "q" if hasattr(dist, "q") else "inf"
    return "inf" if any(isinstance(v, float) and not math.isfinite(v) for v in ends) else None
