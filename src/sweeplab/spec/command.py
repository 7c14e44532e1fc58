"""The command a trial runs: W&B's macros expanded as W&B's agent expands them, and the parameters it passes."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from sweeplab.errors import SpecError
from sweeplab.spec.keys import _LIST_MACROS, _MACRO, PARAM_MACROS, is_macro
from sweeplab.spec.model import SweepSpec


def wandb_args(params: Mapping[str, Any], parameters: Any = None) -> dict[str, Any]:
    """The trial's parameters as W&B's controller hands them to the agent: one entry per top-level name
    of the spec's `parameters`, a nested parameter's value being a dict of its own (`{"optimizer":
    {"lr": 0.001, "nadam": {"beta": 0.9}}}`), and a dotted name (`optimizer.lr:` written flat) kept as
    one key. `params` is sweeplab's flat form; `parameters` is the spec's raw `parameters` mapping
    (without it, every name is taken as written).

    The names come sorted at every level, as W&B's controller sends them (wandb/sweeps params.py,
    HyperParameterSet.from_config walks `sorted(d.items())`), whatever their order in the file: so
    `${args}`, `${args_json}` and the parameters file (the order of `wandb.config`) are W&B's. A float
    with no fraction comes as an int, as W&B's server sends it (see `_served`)."""
    flat = {k: _served(v) for k, v in params.items()}
    if not isinstance(parameters, Mapping):
        return _by_name(flat)
    out = _nest(parameters, flat, "")
    known = _top_names(parameters)
    for name, value in flat.items():   # names the raw mapping does not know (overrides): as written
        parts = name.split(".")         # known: `name` or one of its dotted prefixes (set lookups, not a scan)
        if not any(".".join(parts[:i]) in known for i in range(1, len(parts) + 1)):
            out[name] = value
    return _by_name(out)


def _served(value: Any) -> Any:
    """`value` as W&B's server hands a run's parameters to its agent: it keeps them as JSON in Go, whose
    encoder writes a whole-number float below 1e21 without a fraction, so that `4.0` (`values: [4.0]`, or
    `q_uniform` without `q`, which draws 3.0) reaches the program as the int 4: `--layers=3`, which
    argparse's `type=int` reads, and an int in wandb.config (wandb/wandb#3555, wandb/wandb#2337;
    wandb/sweeps grid_search.py, yaml_hash, says so of "3e6"). Inside lists and dicts too."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 1e21 else value
    if isinstance(value, list):
        return [_served(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_served(v) for v in value)
    if isinstance(value, dict):
        return {k: _served(v) for k, v in value.items()}
    return value


def _by_name(args: dict[str, Any]) -> dict[str, Any]:
    """`args` sorted by name (one level: `_nest` sorts each nested parameter's own; a value that is a dict
    is the program's and stays as written)."""
    return dict(sorted(args.items(), key=lambda kv: str(kv[0])))


def _nest(block: Mapping[str, Any], flat: Mapping[str, Any], prefix: str,
          conditional: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, node in block.items():
        path = f"{prefix}{name}"
        if isinstance(node, Mapping) and isinstance(node.get("parameters"), Mapping):
            inner = conditional or "condition" in node
            group = _nest(node["parameters"], flat, f"{path}.", inner)
            if group or not inner:   # an inactive conditional group is absent
                out[str(name)] = group
        elif path in flat:
            out[str(name)] = flat[path]
        for branch in _when_blocks(node):   # conditional parameters are siblings of their parent
            for key, value in _nest(branch, flat, prefix, True).items():
                if isinstance(value, dict) and isinstance(out.get(key), dict):
                    out[key].update(value)
                else:
                    out[key] = value
    return _by_name(out)


def _when_blocks(node: Any) -> list[Mapping[str, Any]]:
    """The parameter blocks of a parameter's `when` (sweeplab's conditional parameters), if any."""
    when = node.get("when") if isinstance(node, Mapping) else None
    if not isinstance(when, Mapping):
        return []
    return [b for b in when.values() if isinstance(b, Mapping)]


def _top_names(block: Mapping[str, Any]) -> set[str]:
    """The names a `parameters` block declares at its level, `when` children included."""
    names = {str(k) for k in block}
    for node in block.values():
        for branch in _when_blocks(node):
            names |= _top_names(branch)
    return names


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
    if not is_macro(match.group(1)):
        return match.group(0)    # not W&B's: left for Hydra, OmegaConf or the program, as W&B's agent does
    return single(match.group(1), where) or ""


def _unset(spec: SweepSpec, var: str, where: str, item: str) -> SpecError:
    return SpecError(f"environment variable {var} is not set", key=where, value=item,
                     expected=f"a variable set in the environment where the sweep runs (export {var}=...)",
                     file=str(spec.source) if spec.source else None)


def check_envvars(spec: SweepSpec, environ: Mapping[str, str] | None = None) -> None:
    """Refuse a command whose `${envvar:NAME}` names a variable `environ` (the driver's: it builds every
    trial's command) lacks, before anything is written. W&B's agent would pass `NAME` itself in its place
    (wandb/sdk/launch/sweeps/utils.py, create_sweep_command): a program run with `--data=DATA_DIR` fails or,
    worse, runs on the wrong data; docs/wandb.md lists this difference."""
    env = os.environ if environ is None else environ
    for i, item in enumerate(spec.effective_command or ()):
        for match in _MACRO.finditer(item):
            name = match.group(1)
            if name.startswith("envvar:") and is_macro(name) and name[len("envvar:"):] not in env:
                raise _unset(spec, name[len("envvar:"):], f"command[{i}]", item)


_PYTHON = re.compile(r"python[0-9.]*")


def check_program_file(spec: SweepSpec, cwd: str | None = None) -> None:
    """Refuse a `program` run as a script (`${interpreter} ${program}`, W&B's default command, or
    `python3 ${program}`) that is neither in the working directory (where W&B's agent runs it) nor beside
    the spec file (which sweeplab also accepts, driver/tasks.py): every trial would fail with python's
    "can't open file", after the sweep was written. A module (`-m ${program}`) or an executable found on
    PATH (`${env} ${program}`) is not a file to look for."""
    command, program = spec.effective_command or (), spec.program
    if program is None:
        return
    scripted = any(item == "${program}" and i > 0 and (command[i - 1] == "${interpreter}"
                                                        or _PYTHON.fullmatch(os.path.basename(command[i - 1])))
                   for i, item in enumerate(command))
    if not scripted:
        return
    here = cwd or os.getcwd()
    base = spec.base_dir
    places = [os.path.join(here, program), *([os.path.join(base, program)] if base is not None else [])]
    if not any(os.path.isfile(p) for p in places):
        beside = f" or beside the spec file ({os.path.abspath(base)})" if base is not None else ""
        raise SpecError("program file not found", key="program", value=program,
                        expected=f"a file in the working directory ({here}){beside}",
                        file=str(spec.source) if spec.source else None)


def build_command(
    spec: SweepSpec,
    params: Mapping[str, Any],
    *,
    interpreter: str,
    args_json_file: str,
    environ: Mapping[str, str] | None = None,
    program_dir: str | None = None,
) -> list[str]:
    """The argv of one trial: the spec's command with W&B's macros expanded as W&B's agent does.

    `params` is flat with dotted names (`{"lr": 0.1, "model.hidden": 64}`); the arguments are W&B's
    (`wandb_args`: a nested parameter is one argument, `--model={'hidden': 64}`). An item that is exactly
    a macro expands to its arguments (`${args}` -> `--lr=0.1`, `${env}` -> `/usr/bin/env`, nothing on
    Windows); inside a longer item the single-value macros are replaced as text (`--params=${args_json_file}`,
    which W&B's agent would leave as it is). Any other `${...}` is W&B's agent's: an item that is exactly one
    is dropped, one inside a longer item is left as it is (`hydra.run.dir=out/${now:%H-%M-%S}`).
    The caller writes `args_json(...)` to `args_json_file`.

    `program_dir`, for a trial that runs in a directory of its own (`trial.workdir: trial`), is the directory
    `program` is relative to: a `program` that names a file there becomes its absolute path, so that
    `${interpreter} ${program}` still finds it (a module after `-m`, or a name found on PATH, stays as it is).
    """
    template = spec.effective_command
    if template is None:
        raise SpecError("this sweep calls a function; it has no command to build", key="command",
                        file=str(spec.source) if spec.source else None)
    env = os.environ if environ is None else environ
    args = wandb_args(params, spec.raw.get("parameters"))
    lists = _arg_lists(args)
    items = {f"command[{i}]": item for i, item in enumerate(template)}

    def single(name: str, where: str) -> str | None:
        if name == "env":
            return None if os.name == "nt" else "/usr/bin/env"
        if name == "interpreter":
            return interpreter
        if name == "program":
            if spec.program is None:
                raise SpecError("command uses ${program} but the spec has no program", key=where)
            return _program_path(spec.program, program_dir, template, where)
        if name == "args_json":
            return json.dumps(args, default=str)
        if name == "args_json_file":
            return args_json_file
        if name.startswith("envvar:"):
            var = name[len("envvar:"):]
            if var not in env:
                raise _unset(spec, var, where, items[where])
            return env[var]
        raise SpecError("unknown macro", key=where, value=f"${{{name}}}")  # parse_spec prevents this

    argv: list[str] = []
    for i, item in enumerate(template):
        where = f"command[{i}]"
        whole = _MACRO.fullmatch(item)
        if whole is not None:
            name = whole.group(1)
            if not is_macro(name):
                continue             # W&B's agent passes nothing for an item that is an unknown ${...}
            if name in lists:
                argv += lists[name]
            else:
                value = single(name, where)
                if value is not None:
                    argv.append(value)
            continue
        argv.append(_MACRO.sub(partial(_substitute, single, where), item))
    return argv


def _program_path(program: str, program_dir: str | None, template: Sequence[str], where: str) -> str:
    """`program` as `${program}` passes it: its absolute path when `program_dir` is given and holds it as a
    file, unless the item before it is `-m` (a module name)."""
    if program_dir is None or os.path.isabs(program):
        return program
    i = int(where[len("command["):-1])
    if i > 0 and template[i - 1] == "-m":
        return program
    path = os.path.join(program_dir, program)
    return os.path.abspath(path) if os.path.isfile(path) else program


def check_command_paths(spec: SweepSpec, cwd: str | None = None) -> None:
    """With `trial.workdir: trial`, refuse a command item that is a relative path of a file in the working
    directory or beside the spec (`command: [python, train.py, ${args}]`), alone or as the value of an option
    or override (`--config=conf.yaml`, `data.path=train.csv`): the trial runs in a directory of its own, where
    that path names nothing, and every trial would fail. `${program}` is made absolute instead."""
    if spec.trial.workdir != "trial" or spec.command is None:
        return
    here = cwd or os.getcwd()
    bases = [here, *([str(spec.base_dir)] if spec.base_dir is not None else [])]
    for i, item in enumerate(spec.command):
        if not item or _MACRO.search(item) or (i == 0 and os.sep not in item):
            continue   # a macro; a bare program name is looked up on PATH
        # the item, or the value of an option or override (`--config=conf.yaml`, Hydra's `data.path=x.csv`)
        named = item.partition("=")[2] if "=" in item else ("" if item.startswith("-") else item)
        if not named or os.path.isabs(named):
            continue   # an option without a value, an absolute path
        if any(os.path.isfile(os.path.join(b, named)) for b in bases):
            raise SpecError("a relative path in the command, and trial.workdir is trial: each trial runs in a "
                            "directory of its own, where it names no file", key=f"command[{i}]", value=item,
                            expected="an absolute path" + (", or ${program} for the script (with program: "
                                                           + item + ")" if named == item else ""),
                            hint="or leave trial.workdir at sweep",
                            file=str(spec.source) if spec.source else None)
