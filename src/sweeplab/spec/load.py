"""Reading a spec: from a file (`load_spec`) or from a mapping (`parse_spec`)."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeplab._yaml import MAX_DEPTH, read_yaml, too_long_for_json
from sweeplab.errors import SpecError
from sweeplab.spec.model import SweepSpec
from sweeplab.spec.parse import _SpecParser


def load_spec(path: str | Path, *, strict: bool = False, function: str | None = None) -> SweepSpec:
    """Read and validate a sweep spec file; every error names the file.

    `strict` turns what W&B only warns about into errors; `function` ('train.py:train', the CLI's
    `--function`) runs a W&B file written for `wandb.agent(sweep_id, function=train)`."""
    file = str(path)
    where, _, fn = file.rpartition(":")
    if Path(file).suffix == ".py" or (where.endswith(".py") and fn.isidentifier() and not Path(file).exists()):
        name = fn if where.endswith(".py") else "FUNCTION"
        raise SpecError("a Python file is not a sweep spec", file=where if where.endswith(".py") else file,
                        expected="a YAML spec (function: FILE.py:FUNCTION, method, parameters)",
                        hint=f"`sweeplab run {where if where.endswith('.py') else file}:{name}` runs one trial of it")
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
    _check_json(raw, file)
    return _SpecParser(file, base_dir, strict=strict).parse(raw)


_JSON_SCALARS = (str, int, float, bool, type(None))


def _check_json(raw: Any, file: str | None) -> None:
    """Refuse a value JSON cannot hold (a date, bytes, a set, an object), naming its key path: the spec is
    stored as JSON and its values reach trials as JSON, so such a value would fail only after the store
    was written. Walked with a stack, so a deeply nested Python mapping cannot exhaust the recursion."""
    stack: list[tuple[str, Any, int]] = [("", raw, 0)]
    while stack:
        path, value, depth = stack.pop()
        if depth > MAX_DEPTH and isinstance(value, (Mapping, list, tuple)):   # as the YAML reader refuses
            raise SpecError(f"nested deeper than {MAX_DEPTH} levels", file=file, key=f"{path[:60]}...",
                            expected=f"at most {MAX_DEPTH} levels of nested mappings and lists")
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, _JSON_SCALARS):
                    raise SpecError("a key must be a string", file=file, key=path or None, value=key,
                                    expected="a string key (JSON keys are text)")
                stack.append((f"{path}.{key}" if path else str(key), item, depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{i}]", item, depth + 1) for i, item in enumerate(value))
        elif isinstance(value, int) and too_long_for_json(value):
            raise SpecError("an integer this long cannot be stored as JSON", file=file, key=path or None,
                            value=f"an integer of {value.bit_length():,} bits",
                            expected=f"at most {sys.get_int_max_str_digits()} decimal digits")
        elif re.fullmatch(r"monitors\[\d+\]", path) and callable(getattr(value, "to_spec", None)):
            continue   # a monitor made in Python (sweeplab.monitors): stored as its spec entry
        elif not isinstance(value, _JSON_SCALARS):
            raise SpecError(f"a {type(value).__name__} cannot be stored as JSON", file=file, key=path or None,
                            value=value, expected="a string, number, boolean, null, list or mapping")
