"""Smoke checks that run in the driver's process before any trial: the target imports, and every
combination of categorical choices the spec can produce fits the typed config."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["check_config_combinations"]


def check_config_combinations(spec: Any, resolve: Callable[[dict[str, Any]], dict[str, Any]],
                              python_path: Sequence[str], target: str) -> tuple[list[str], list[str]]:
    """Returns (problems, notes). `resolve(params)` gives the merged config for flat params."""
    from sweeplab.backends.worker import load_target
    from sweeplab.config import coerce, typed_schema_of
    from sweeplab.errors import ConfigError

    problems: list[str] = []
    notes: list[str] = []
    try:
        fn = load_target(target, list(python_path))
    except Exception as exc:
        return [f"cannot import {target}: {type(exc).__name__}: {exc}"], notes
    schema = typed_schema_of(fn)
    choices: dict[str, list[Any]] = {}
    fixed: dict[str, Any] = {}
    rng = __import__("numpy").random.default_rng(0)
    for name, dist in spec.space.params.items():
        values = dist.grid_values() if dist.kind in ("categorical", "categorical_w_probabilities",
                                                     "constant") else None
        if values is not None:
            choices[name] = list(values)
        else:
            fixed[name] = dist.sample(rng)
    if not choices:
        notes.append("no categorical parameters: one sampled configuration was type-checked")
    combos = list(itertools.product(*choices.values())) if choices else [()]
    if len(combos) > 512:
        notes.append(f"{len(combos)} categorical combinations; checked the first 512")
        combos = combos[:512]
    for combo in combos:
        params = dict(fixed)
        params.update(dict(zip(choices, combo)))
        try:
            coerce(resolve(params), schema)
        except ConfigError as exc:
            where = ", ".join(f"{k}={v!r}" for k, v in zip(choices, combo))
            problems.append(f"config does not fit {getattr(schema, '__name__', 'the config')}"
                            + (f" for {where}" if where else "") + f": {exc}")
            if len(problems) >= 5:
                break
    if schema is None:
        notes.append(f"{Path(target.split(':')[0]).name}: the function declares no typed config "
                     "(annotate its first parameter with a dataclass or pydantic model to check keys)")
    return problems, notes
