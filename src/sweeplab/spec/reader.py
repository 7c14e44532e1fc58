"""The checks every spec key shares (a mapping, known keys, a string, a number, a duration);
each error names the file and the key path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeplab import _values
from sweeplab._values import parse_duration
from sweeplab.errors import SpecError


def _did_you_mean(word: str, choices: Sequence[str]) -> str | None:
    return _values.did_you_mean(word, choices)


def yaml_bool_hint(raw: Any) -> str | None:
    """For a boolean where text was expected (`profile: off`, `metric: {name: on}`): YAML 1.1, which W&B's
    files are written in, reads the word as a boolean, and the error said "got False" of what the user wrote."""
    if not isinstance(raw, bool):
        return None
    words = "'on', 'yes'" if raw else "'off', 'no'"
    return f"YAML reads yes, no, on, off, true and false as booleans: quote the text ({words})"


class _Abbrev(str):
    def __repr__(self) -> str:
        return str(self)


def _short(value: Any) -> Any:
    text = repr(value)
    return value if len(text) <= 80 else _Abbrev(text[:77] + "...")


class _Reader:
    """Reads one spec: the file it came from, the checks every key shares, and the warnings so far."""

    def __init__(self, file: str | None, base_dir: Path | None, *, strict: bool = False) -> None:
        self.file = file
        self.strict = strict
        self.warnings: list[str] = []
        self.param_names: set[str] = set()   # the spec's parameter names, once read (command checks them)
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
            raise self.error("must be a non-empty string", key, value=raw, expected="a string",
                             hint=yaml_bool_hint(raw))
        if "\x00" in raw:   # a path, module, address or choice: open() and exec() raised ValueError on it
            raise self.error("cannot hold a NUL byte (\\0)", key, value=raw, expected="text without NUL bytes")
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

    def text(self, raw: Any, key: str) -> str | None:
        if raw is None:
            return None
        if not isinstance(raw, str):
            raise self.error("must be a string", key, value=raw, expected="a string", hint=yaml_bool_hint(raw))
        return raw
