"""The spec's vocabulary: the keys it knows, the methods and early-termination types, W&B's command macros."""

from __future__ import annotations

import re

import sweeplab.schedulers as _schedulers
import sweeplab.search as _search

# `method` and `early_terminate.type` are checked against the search and scheduler registries, read at each
# check (sweeplab.search.SEARCHERS, sweeplab.schedulers.SCHEDULERS); these tuples are their names at import
METHODS = _search.METHODS
EARLY_TERMINATE_TYPES = _schedulers.TYPES


def _methods() -> tuple[str, ...]:
    return tuple(_search.SEARCHERS)


def _early_terminate_types() -> tuple[str, ...]:
    return tuple(_schedulers.SCHEDULERS)


_IMPUTE = ("worst", "best", "latest", "none")

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
#: the parameter names W&B's schema matches (sweeps config/schema.json); others are a warning there, and run
_WANDB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
#: W&B's deprecated distributions whose min/max are natural-log exponents, and what W&B says to use instead
_EXPONENT_KINDS = {"log_uniform": "log_uniform_values", "q_log_uniform": "q_log_uniform_values",
                   "inv_log_uniform": "inv_log_uniform_values"}
_ENVVAR = re.compile(r"envvar:[A-Za-z_][A-Za-z0-9_]*")


def is_macro(name: str) -> bool:
    """True for a name sweeplab expands: one of W&B's `MACROS` or `envvar:NAME`. Any other `${...}` is not
    a macro: W&B's agent drops an item that is exactly one and leaves one inside a longer item as it is
    (a Hydra or OmegaConf interpolation such as `${now:%H-%M-%S}`, or the shell's)."""
    return name in MACROS or _ENVVAR.fullmatch(name) is not None


def _dropped(item: str) -> bool:
    """A command item that is exactly an unknown `${...}`: W&B's agent passes nothing for it."""
    whole = _MACRO.fullmatch(item)
    return whole is not None and not is_macro(whole.group(1))

_WANDB_KEYS = (
    "program", "command", "method", "metric", "parameters", "early_terminate", "run_cap", "name",
    "description",
)
_HYPERBAND_KEYS = ("type", "metric", "goal", "min_iter", "max_iter", "s", "eta", "strict")
_IGNORED_KEYS = ("entity", "project", "controller", "apiVersion", "kind")
_UNSUPPORTED_KEYS = {
    "job": "W&B Launch jobs are not supported; use program/command or function",
    "image_uri": "W&B Launch images are not supported; use program/command or function",
    "metrics": "a multi-objective sweep lists its objectives under metric: [{name: a, goal: maximize}, {name: b}]",
    "scheduler": "custom W&B schedulers are not supported; use method and early_terminate",
}
_OUR_KEYS = (
    "function", "config", "profile", "seed", "workers", "resources", "budget", "trial", "monitors",
    "backend", "address", "checkpoint_dir", "constraints", "points_to_evaluate",
)
_TOP_KEYS = (*_WANDB_KEYS, *_OUR_KEYS, *_IGNORED_KEYS)

#: 'pkg.module:fn', 'file.py:fn', or a function sweeplab shipped by value ('<store>/functions/<digest>.pkl:fn')
_FUNCTION = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|[^:]*\.py|[^:]*functions[/\\][0-9a-f]{24}\.pkl)"
    r":[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$"
)
