"""Command-line values coerced without importing pydantic, when the answer is plainly the same (issue 18).

Recent typer releases coerce every parameter of the invoked command through a pydantic `TypeAdapter`, built the
first time the parameter is processed, even for an option left unset: `sweeplab sweep spec.yaml -q` imported
pydantic and built 18 adapters, a third of the CPU a whole 2-trial sweep spends in its driver process. Our
options are plain (str, int, pathlib.Path, list[str], bool), so `install` gives typer's parameters a coercion
that answers what typer would, without pydantic, for the values where that is evident:

  * no value (an unset option)            -> None, or () for a variadic argument (typer's own rule);
  * str                                   -> the string itself;
  * int from ASCII digits with a sign     -> int(value) (pydantic accepts these and gives the same number);
  * pathlib.Path without path checks      -> Path(value), after typer's readability check where the path exists;
  * list[str] of strings                  -> the list;
  * pathlib.Path with a parser of ours    -> what the parser returns (`--store`), when it is a Path.

Any other value or parameter (a malformed number, "3.0", choices, ranges, callbacks' parsers, files, dates,
path options such as exists=...) goes to typer's own coercion, built on first need, so its results and error
messages are unchanged. A typer without this internal hook (releases that coerce through click) is left as it is.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

_INT = re.compile(r"[+-]?[0-9]+")
_UNSET: Any = object()


class _FastCoercion:
    """Stands in for typer's runtime parameter: the plain cases here, the rest by typer's coercion."""

    def __init__(self, param: Any, build: Any) -> None:
        self.param = param
        self.build = build            # () -> typer's own runtime parameter for `param`
        self.real: Any = None
        self.kind = _kind(param)

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:   # typer's RuntimeParam.coerce: an unset value is never validated
            return () if (param.multiple or param.nargs == -1) else None
        result = _plain(self.kind, value, self.param) if self.kind is not None else _UNSET
        if result is not _UNSET:
            return result
        if self.real is None:
            self.real = self.build()
        return self.real.coerce(value, param=param, ctx=ctx)

    def __getattr__(self, name: str) -> Any:   # anything else typer asks of its runtime parameter
        if self.real is None:
            self.real = self.build()
        return getattr(self.real, name)


def _kind(param: Any) -> str | None:
    """"str", "int", "path", "list" or "bool" for a parameter with no parser, choices, range or path options;
    "parsed" for a pathlib.Path one with a parser."""
    descriptor = getattr(param, "type_descriptor", None)
    info = getattr(descriptor, "parameter_info", None)
    if descriptor is None or info is None:
        return None
    if getattr(info, "parser", None) is not None:   # ours (`--store`): its own answer, when it gives a Path
        return "parsed" if descriptor.annotation is Path else None
    if getattr(descriptor, "file_annotation", None) is not None or getattr(descriptor, "is_choice", True):
        return None
    annotation = descriptor.annotation
    if annotation is list[str]:
        return "list"
    if annotation is str or annotation is bool:
        return annotation.__name__
    if annotation is int:
        ranged = any(getattr(info, k, None) is not None for k in ("min", "max")) or getattr(info, "clamp", False)
        return None if ranged else "int"
    if annotation is Path:
        checks = (getattr(info, "exists", True) or getattr(info, "resolve_path", True)
                  or getattr(info, "allow_dash", True) or getattr(info, "path_type", 1) is not None
                  or getattr(info, "writable", True) or getattr(info, "executable", False)
                  or not getattr(info, "file_okay", False) or not getattr(info, "dir_okay", False))
        return None if checks else "path"
    return None


def _plain(kind: str, value: Any, param: Any) -> Any:
    """The coerced value, or _UNSET when typer's own coercion must decide."""
    if kind == "str":
        return value if type(value) is str else _UNSET
    if kind == "bool":
        return value if type(value) is bool else _UNSET
    if kind == "int":
        if type(value) is int:
            return value
        if type(value) is str and _INT.fullmatch(value):
            try:
                return int(value)
            except ValueError:   # more digits than int() reads (4,300): typer's own "exceeded maximum size"
                return _UNSET
        return _UNSET
    if kind == "list":
        if isinstance(value, (list, tuple)) and all(type(v) is str for v in value):
            return list(value)
        return _UNSET
    if kind == "parsed":
        if type(value) is str:
            value = param.type_descriptor.parameter_info.parser(value)   # its BadParameter is typer's message
        return value if isinstance(value, Path) else _UNSET
    if kind == "path" and (type(value) is str or isinstance(value, Path)):
        path = value if isinstance(value, Path) else Path(value)
        try:
            os.stat(path)
        except OSError:
            return path   # a path that does not exist is fine without exists=True
        except ValueError:   # an embedded NUL: typer's to answer
            return _UNSET
        readable = getattr(param.type_descriptor.parameter_info, "readable", True)
        return path if not readable or os.access(path, os.R_OK) else _UNSET   # typer says it is not readable
    return _UNSET


def install() -> bool:
    """Give typer's parameters the coercion above; True if typer has the hook (idempotent)."""
    try:
        from typer import core
    except ImportError:   # pragma: no cover - typer is a dependency
        return False
    cls = getattr(core, "_TyperParameter", None)
    original = getattr(cls, "get_runtime_param", None)
    if cls is None or original is None:
        return False
    if getattr(original, "sweeplab_fast", False):
        return True

    def get_runtime_param(self: Any) -> Any:
        if getattr(self, "_runtime_param", None) is None:
            self._runtime_param = _FastCoercion(self, lambda: _build(self, original))
        return self._runtime_param

    get_runtime_param.sweeplab_fast = True   # type: ignore[attr-defined]
    get_runtime_param.original = original   # type: ignore[attr-defined]
    get_runtime_param.__doc__ = original.__doc__
    cls.get_runtime_param = get_runtime_param
    return True


def _build(param: Any, original: Any) -> Any:
    """typer's own runtime parameter for `param` (its get_runtime_param builds it when none is cached)."""
    cached = param._runtime_param
    param._runtime_param = None
    try:
        return original(param)
    finally:
        param._runtime_param = cached
