"""Safe YAML for specs, configs and overrides: `yaml.SafeLoader` that also reads `1e-3` as a float
(YAML 1.1 insists on a dot: `1.0e-3`), and file reading whose errors name the file, line and column."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sweeplab.errors import SpecError

__all__ = ["read_yaml", "yaml_load"]


class _Loader(yaml.SafeLoader):
    pass


_FLOAT = re.compile(
    r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9_]+|[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?$"
    r"|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"
)
_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def yaml_load(text: str) -> Any:
    """Parse YAML text safely (no Python objects are ever built)."""
    return yaml.load(text, Loader=_Loader)


def read_yaml(path: str | Path, *, what: str, error: type[SpecError] = SpecError) -> Any:
    """Read and parse a YAML file; `error` (SpecError or ConfigError) names the file and the place."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{what} file not found", file=file) from None
    except OSError as exc:
        raise error(f"cannot read the {what} file: {exc.strerror or exc}", file=file) from None
    try:
        return yaml_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"invalid YAML: {where}{problem}", file=file) from None
