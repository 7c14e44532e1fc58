"""The sweep spec: W&B's sweep configuration grammar plus sweeplab's own keys.

A W&B `sweep.yaml` loads unchanged (`entity`, `project`, `controller`, `apiVersion` and `kind` are
accepted and listed in `SweepSpec.ignored`). Every mistake raises SpecError naming the file, the key
path, the bad value and what was expected:

    sweep.yaml: budget.time: unknown duration unit; got '30x'; expected a duration like 45s, 30m, 2h, 1h30m, 1d

    spec = load_spec("sweep.yaml")
    argv = build_command(spec, {"lr": 0.01}, interpreter=sys.executable, args_json_file="/tmp/p.json")

The package, one concern a module: `keys` (the vocabulary), `model` (the dataclasses), `load` (load_spec,
parse_spec), `reader` / `parse` / `limits` (validation by key), `wandb` (W&B-only warnings), `command`
(W&B's command macros).
"""

from __future__ import annotations

from sweeplab._values import parse_duration
from sweeplab.spec.command import (
    args_json,
    build_command,
    check_command_paths,
    check_envvars,
    check_program_file,
    passes_params,
    resolve_interpreter,
    wandb_args,
)
from sweeplab.spec.keys import DEFAULT_COMMAND, EARLY_TERMINATE_TYPES, MACROS, METHODS, PARAM_MACROS
from sweeplab.spec.load import load_spec, parse_spec
from sweeplab.spec.model import Budget, Constraint, MetricSpec, Resources, SweepSpec, TrialPolicy
from sweeplab.spec.parse import check_sweep_name

__all__ = [
    "DEFAULT_COMMAND",
    "EARLY_TERMINATE_TYPES",
    "MACROS",
    "METHODS",
    "PARAM_MACROS",
    "Budget",
    "Constraint",
    "MetricSpec",
    "Resources",
    "SweepSpec",
    "TrialPolicy",
    "args_json",
    "build_command",
    "check_command_paths",
    "check_envvars",
    "check_program_file",
    "check_sweep_name",
    "load_spec",
    "parse_duration",
    "parse_spec",
    "passes_params",
    "resolve_interpreter",
    "wandb_args",
]

# `method` and `early_terminate.type` are checked against the search and scheduler registries, read at each
