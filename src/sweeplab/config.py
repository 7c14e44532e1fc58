"""Experiment config: a base YAML file, an environment profile, sampled parameters and overrides.

Merge order (later wins): base config < profile < sweep parameters < command-line overrides.

    cfg = resolve_config(base="config/base.yaml", profile="local",
                         params={"lr": 0.01, "model.hidden": 256}, overrides=["epochs=3"])
    typed = coerce(cfg, typed_schema_of(train))   # a dataclass / pydantic model, or a read-only Config

Hyperparameters belong in the base config; a profile (`profiles/<name>.yaml`) holds facts about the
machine (data_dir, output_dir, num_workers) so the same code runs on a laptop and on a cluster.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import inspect
import os
import re
import stat
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeplab.errors import ConfigError

__all__ = [
    "Config",
    "ConfigKeyError",
    "apply_overrides",
    "check_config_reaches_trials",
    "check_distinct_overrides",
    "check_overrides_against_parameters",
    "check_parameters_against_config",
    "coerce",
    "deep_merge",
    "find_profile",
    "load_base_config",
    "load_yaml_mapping",
    "override_list",
    "parse_override",
    "profile_search_path",
    "resolve_config",
    "typed_schema_of",
]


# --------------------------------------------------------------------------------------------- YAML

# PyYAML is imported where a YAML text is read, not with this module: a function trial's worker imports
# `Config` for every trial and reads no YAML (about a tenth of a small sweep's CPU, issue 18 item 4)

def _yaml_scalar(text: str) -> Any:
    from sweeplab._yaml import yaml_load

    return yaml_load(text, keys_as_text=True)


def load_yaml_mapping(path: str | Path, *, what: str = "config") -> dict[str, Any]:
    """Read a YAML file that must hold a mapping (an empty file is an empty mapping)."""
    from sweeplab._yaml import read_yaml

    file = str(path)
    data = read_yaml(path, what=what, error=ConfigError, keys_as_text=True)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"the {what} must be a mapping of keys to values", file=file,
            value=_short(data), expected="a YAML mapping (key: value lines)",
        )
    return _no_interpolation(data, file=file, path="")


_INTERPOLATION = re.compile(r"(?<!\\)\$\{")


def _no_interpolation(value: Any, *, file: str | None, path: str) -> Any:
    """`value` with `\\${` unescaped to `${`; an OmegaConf interpolation (`${key}`, `${oc.env:VAR}`) is an
    error: sweeplab resolves none, and a literal `${data_dir}/out` reaching a trial would be a silent mistake."""
    if isinstance(value, str):
        if _INTERPOLATION.search(value):
            raise ConfigError(
                "interpolation is not supported", file=file, key=path or None, value=_short(value),
                expected="a plain value: sweeplab does not resolve ${key} or ${oc.env:VAR} as OmegaConf does",
                hint="put what differs between machines in a profile, compute the rest in the trial; "
                "write \\${ for a literal ${",
            )
        return value.replace("\\${", "${")
    if isinstance(value, dict):
        return {k: _no_interpolation(v, file=file, path=f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_interpolation(v, file=file, path=f"{path}[{i}]") for i, v in enumerate(value)]
    return value


# ------------------------------------------------------------------------------------------- Config

class ConfigKeyError(ConfigError, AttributeError, KeyError):
    """A trial read a key its config does not have (`config.model.depth`, `config["lr"]`): a mistake in the
    config or the code's expectation of it, shown as its message (the key path, a close key) without a
    traceback. Also an AttributeError and a KeyError, so `getattr(config, k, default)`, `hasattr` and
    `config.get(k)` behave as on any object and mapping."""

    __str__ = ConfigError.__str__    # not KeyError's repr() of the message


class Config(Mapping[str, Any]):
    """A read-only nested mapping with attribute access: `config.model.hidden`, `config["lr"]`.

    Nested mappings come back as Config; lists come back as fresh lists (changing them changes
    nothing here). Equal to any mapping with the same content.
    """

    __slots__ = ("_data", "_path")

    def __init__(self, data: Mapping[str, Any] | None = None, _path: str = "") -> None:
        object.__setattr__(self, "_data", copy.deepcopy(dict(data or {})))
        object.__setattr__(self, "_path", _path)   # the key path of a nested config ("model"), for messages

    def __getitem__(self, key: str) -> Any:
        try:
            return _wrap(self._data[key], self._key(key))
        except KeyError:
            raise self._missing(key) from None

    def _key(self, name: object) -> str:
        return f"{self._path}.{name}" if self._path else str(name)

    def _missing(self, name: object) -> ConfigKeyError:
        hint = _did_you_mean(str(name), [str(k) for k in self._data])
        keys = ", ".join(sorted(str(k) for k in self._data)[:20]) or "none"
        return ConfigKeyError("the config has no such key", key=self._key(name),
                              hint=hint or f"its keys{' at ' + self._path if self._path else ''}: {keys}")

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return _wrap(self._data[name], self._key(name))
        except KeyError:
            raise self._missing(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("Config is read-only; use to_dict() for a mutable copy")

    def __delattr__(self, name: str) -> None:
        raise TypeError("Config is read-only; use to_dict() for a mutable copy")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == _plain(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Config({self._data!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Config, (self._data, self._path) if self._path else (self._data,))

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {k for k in self._data if str(k).isidentifier()})

    def to_dict(self) -> dict[str, Any]:
        """A deep, plain, mutable copy."""
        return copy.deepcopy(self._data)


def _wrap(value: Any, path: str = "") -> Any:
    if isinstance(value, dict):
        return Config(value, path)
    if isinstance(value, list):
        return [_wrap(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Config):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------------------- merge and overrides

# a part of a dotted key: letters (any script), digits, `_` and `-`: `clé`, `β1`, `2nd_stage`, `0` (a config's keys
# are the text written, `0: a` included) and a list index; not starting with `-` (an option) or empty (`a..b`)
_KEY = re.compile(r"^[^\W][\w\-]*(?:\.[^\W][\w\-]*)*$")


def deep_merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """`a` updated by `b`, recursively for mappings; `b` wins elsewhere. Inputs are not changed."""
    out = {k: copy.deepcopy(_plain(v)) for k, v in a.items()}
    for key, value in b.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(_plain(value))
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """`"model.hidden=256"` -> `("model.hidden", 256)`; the value is read as a YAML scalar.

    `lr=0.01` is a float, `lr=1e-3` too, `name=abc` a string, `layers=[1,2]` a list, `flag=true`
    a bool, `x=null` None and `x=` the empty string. Hydra's prefixes are read and dropped from the key:
    `+key=v` (add), `++key=v` (add or set), `~key` (delete; its value None).
    """
    _op, key, value = _parse_override(text)
    return key, (None if value is _NO_VALUE else value)


_NO_VALUE: Any = object()   # `~key`: a deletion with no value to match


def _parse_override(text: str) -> tuple[str, str, Any]:
    """(prefix: "", "+", "++" or "~"; the dotted key; the value, or _NO_VALUE for a bare `~key`)."""
    if not isinstance(text, str):
        raise ConfigError("an override must be a string", value=_short(text), expected="'key=value'")
    op = "++" if text.startswith("++") else text[:1] if text[:1] in ("+", "~") else ""
    key, sep, raw = text[len(op):].partition("=")
    key = key.strip()
    if not key:
        raise ConfigError("override has no key", value=_short(text), expected="'key=value'")
    if not sep and not (op == "~" and key):
        raise ConfigError(
            "override has no value", value=_short(text), expected="'key=value'",
            hint=f"write '{_clip(key)}=<value>'",
        )
    if not _KEY.match(key):
        raise ConfigError(
            "override key is not a dotted name", value=_short(text),
            expected="a key like 'lr' or 'model.hidden' before '=' (prefixed by +, ++ or ~ as in Hydra)",
        )
    from sweeplab._yaml import MAX_DEPTH

    if key.count(".") >= MAX_DEPTH:   # a config that deep could not even be stored as JSON
        raise ConfigError(
            f"override key is nested deeper than {MAX_DEPTH} levels", value=f"{key[:60]}...",
            expected=f"a dotted key of at most {MAX_DEPTH} parts",
        )
    if not sep:
        return op, key, _NO_VALUE
    if raw.strip() == "":
        return op, key, ""
    import yaml

    try:
        if _drops_a_comment(raw):   # `color=#ff0000`, `tag=run #3`: no comments on a command line
            return op, key, _no_interpolation(raw.strip(), file=None, path=key)
        _refuse_block_syntax(key, raw)
        value = _no_interpolation(_yaml_scalar(raw), file=None, path=key)
        if isinstance(value, str) and ("\n" in raw or "\r" in raw) and raw.strip()[:1] not in ("'", '"', "!"):
            return op, key, raw.strip()   # `prompt="$(cat p.txt)"`: YAML folds its lines into one ('a b')
        if isinstance(value, str) and "," in value and raw.strip()[:1] not in ("'", '"', "!"):
            raise ConfigError(   # Hydra sweeps `lr=0.1,0.01`; YAML would pass every trial the text '0.1,0.01'
                f"override '{_clip(key)}={_clip(raw.strip())}' is a Hydra multirun sweep, which overrides are not",
                key=_clip(key),
                value=_short(raw.strip()), expected="one value: a sweep is the spec's parameters ({values: [...]})",
                hint=f"a list is [{_clip(raw.strip())}]; quote text with commas, "
                     f"e.g. '{_clip(key)}=\"{_clip(raw.strip())}\"'",
            )
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or "invalid YAML"
        said = getattr(exc, "expected", None)   # the reader's own advice (sweeplab._yaml.YAMLInputError)
        raise ConfigError(
            f"cannot read the value of override '{_clip(key)}': {problem}", key=_clip(key), value=_short(raw),
            expected=said or "a YAML value (0.01, abc, true, [1, 2], {a: 1})",
            hint=None if said else _quote_hint(key, raw),
        ) from None
    return op, key, value


def _quote_hint(key: str, raw: str) -> str:
    """How to pass `raw` as text: quoted, with this override's own key and value (`'fmt="%Y-%m-%d"'`, `'x="*.py"'`),
    not an example of another key."""
    text = raw.strip()
    if '"' not in text:
        return f"for text, quote it: '{_clip(key)}=\"{_clip(text)}\"'"
    return "for text, quote it in YAML ('...' or \"...\") inside the shell's quotes"


def _drops_a_comment(raw: str) -> bool:
    """True when YAML would read part of an override's value as a comment (`#ff0000` -> None, `run #3` -> 'run')."""
    import yaml

    text = raw.strip()
    if text.startswith("#"):
        return True
    if "#" not in text:
        return False
    from sweeplab._yaml import _Loader

    tokens = [t for t in yaml.scan(raw, Loader=_Loader)
              if not isinstance(t, (yaml.StreamStartToken, yaml.StreamEndToken))]
    return max((t.end_mark.index for t in tokens), default=0) < len(raw.rstrip())


_BLOCK_TOKENS = ("BlockMappingStartToken", "BlockSequenceStartToken", "BlockEntryToken", "AnchorToken",
                 "AliasToken", "DocumentStartToken", "DocumentEndToken", "DirectiveToken")


def _refuse_block_syntax(key: str, raw: str) -> None:
    """An override's value is one flow value: YAML's block syntax (`a: b` a mapping, `- a` a list, `|` a text
    block) and anchors would silently turn text into something else, or into nothing."""
    import yaml

    from sweeplab._yaml import _Loader

    for token in yaml.scan(raw, Loader=_Loader):
        kind = type(token).__name__
        if kind in _BLOCK_TOKENS or (kind == "ScalarToken" and token.style in ("|", ">")):
            what = {"BlockMappingStartToken": "a YAML mapping", "BlockSequenceStartToken": "a YAML list",
                    "BlockEntryToken": "a YAML list"}.get(kind, "YAML syntax")
            raise ConfigError(
                f"the value of override '{_clip(key)}' reads as {what}, not as one value", key=_clip(key),
                value=_short(raw),
                expected="one value: 0.01, abc, true, [1, 2], {a: 1}",
                hint=f"quote it for text, e.g. '{_clip(key)}=\"{_clip(raw.strip())}\"'",
            )


def _child(node: Any, part: str) -> tuple[bool, Any]:
    """(found, value) of `part` in a mapping, or of item `part` (a decimal index) in a list."""
    if isinstance(node, dict):
        return (part in node, node.get(part))
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return True, node[int(part)]
    return False, None


def _lookup(target: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = target
    for part in dotted.split("."):
        found, node = _child(node, part)
        if not found:
            return False, None
    return True, node


def _set_dotted(target: dict[str, Any], dotted: str, value: Any, *, source: str) -> None:
    parts = dotted.split(".")
    node: Any = target
    for i, part in enumerate(parts[:-1]):
        where = ".".join(parts[: i + 1])
        if isinstance(node, list):
            node = _list_item(node, part, ".".join(parts[:i]), source=source, dotted=dotted)
            continue
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, (dict, list)):
            raise ConfigError(
                f"cannot set '{dotted}' from {source}: '{where}' is not a mapping",
                key=where, value=_short(child), expected="a mapping to set sub-keys in",
            )
        node = child
    if isinstance(node, list):
        index = _list_index(node, parts[-1], ".".join(parts[:-1]), source=source, dotted=dotted)
        node[index] = copy.deepcopy(_plain(value))
    else:
        node[parts[-1]] = copy.deepcopy(_plain(value))


def _list_index(items: list[Any], part: str, where: str, *, source: str, dotted: str) -> int:
    if not part.isdigit() or int(part) >= len(items):
        raise ConfigError(
            f"cannot set '{dotted}' from {source}: '{where}' has no item {part}", key=where,
            value=_short(items), expected=f"an index from 0 to {len(items) - 1}" if items else "a non-empty list",
        )
    return int(part)


def _list_item(items: list[Any], part: str, where: str, *, source: str, dotted: str) -> Any:
    item = items[_list_index(items, part, where, source=source, dotted=dotted)]
    if not isinstance(item, (dict, list)):
        raise ConfigError(
            f"cannot set '{dotted}' from {source}: '{where}.{part}' is not a mapping",
            key=f"{where}.{part}", value=_short(item), expected="a mapping to set sub-keys in",
        )
    return item


def _delete_dotted(target: dict[str, Any], dotted: str) -> None:
    parent, _, last = dotted.rpartition(".")
    node = _lookup(target, parent)[1] if parent else target
    if isinstance(node, list):
        del node[int(last)]
    else:
        del node[last]


def _dotted_keys(node: Any, prefix: str = "") -> list[str]:
    """Every key path of a config (`model`, `model.hidden`), for "did you mean"."""
    out: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            out += [path, *_dotted_keys(v, path)]
    return out


def apply_overrides(base: Mapping[str, Any], overrides: Sequence[str], *, strict: bool = False) -> dict[str, Any]:
    """A copy of `base` with each override applied in order, with Hydra's prefixes:

    `key=v` sets (missing parents are created; with `strict`, the key must already exist: a typo is an error
    with a "did you mean"), `+key=v` adds a key the config does not have, `++key=v` sets or adds, `~key`
    deletes (`~key=v` only if its value is v). A decimal part indexes a list: `layers.0.size=3`.
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    out = deep_merge({}, base)
    for text in overrides:
        op, key, value = _parse_override(text)
        _refuse_through_dotted_key(out, key, f"override '{_clip(text)}'")
        exists, current = _lookup(out, key)
        if op == "+" and exists:
            raise ConfigError(
                f"override '{_clip(text)}' adds '{_clip(key)}', which the config already has", key=_clip(key),
                value=_short(current),
                expected="a new key after '+'", hint=f"write '{_clip(text[1:])}' to change it",
            )
        if op == "~":
            if not exists:
                hint = _did_you_mean(key, _dotted_keys(out))
                raise ConfigError(f"override '{_clip(text)}' deletes '{_clip(key)}', which the config does not "
                                  "have", key=_clip(key),
                                  hint=hint or None)
            if value is not _NO_VALUE and value != current:
                raise ConfigError(
                    f"override '{_clip(text)}' deletes '{_clip(key)}' only if its value is {_short(value)!r}; "
                    f"it is {_short(current)!r}",
                    key=_clip(key), hint=f"write '~{_clip(key)}' to delete it whatever its value",
                )
            _delete_dotted(out, key)
            continue
        if op == "" and strict and not exists:
            # a list index past its end, or a key under a value that is no mapping: that error, not "unknown key
            # ... '+key=v' adds it", which `+` then refused for the same reason
            _set_dotted(copy.deepcopy(out), key, value, source=f"override {_clip(text)!r}")
            hint = _did_you_mean(key, _dotted_keys(out))
            raise ConfigError(
                f"unknown key '{_clip(key)}' in override '{_clip(text)}'", key=_clip(key), value=_short(value),
                expected="a key of the config",
                hint=(f"{hint} " if hint else "") + f"'+{_clip(text)}' adds it",
            )
        _set_dotted(out, key, value, source=f"override {_clip(text)!r}")
    return out


def _dotted_literal(config: Mapping[str, Any], dotted: str) -> tuple[str, str] | None:
    """(where, key) when the nested keys `dotted` names run into a key with a dot in it (a config file's
    `model.hidden: 5`, or `lr.decay` under `opt`): `where` is the dotted path of the mapping that holds it."""
    parts = dotted.split(".")
    node: Any = config
    for i in range(len(parts) - 1):
        if not isinstance(node, Mapping):
            return None
        for j in range(len(parts), i + 1, -1):
            if ".".join(parts[i:j]) in node:
                return ".".join(parts[:i]), ".".join(parts[i:j])
        node = node.get(parts[i])
    return None


def _refuse_through_dotted_key(config: Mapping[str, Any], dotted: str, what: str, *, key: str | None = None) -> None:
    """A ConfigError when `what` (an override, a parameter) names nested keys where the config holds one key with
    a dot: `model.hidden=6` was "unknown key 'model.hidden' (did you mean 'model.hidden'?)", and where keys were
    not checked (`+model.hidden=6`, a sweep parameter) the trial got model: {hidden: 6} beside the stale
    'model.hidden': 5."""
    found = _dotted_literal(config, dotted)
    if found is None:
        return
    where, literal = found
    head, _, rest = literal.partition(".")
    raise ConfigError(
        f"{what} names nested keys ({' > '.join(dotted.split('.'))}), but {literal!r} is one key of the config, "
        f"with a dot in it" + (f" (under '{where}')" if where else ""), key=key or _clip(dotted),
        expected=f"the config file to nest it ({head}: {{{rest}: ...}}): dots in overrides, parameters and "
        "config paths name nested keys",
    )


def check_parameters_against_config(config: Mapping[str, Any], parameters: Sequence[str]) -> None:
    """Refuse a sweep parameter (`model.hidden`) whose nested keys run into a key with a dot of the base config or
    profile (`model.hidden: 5`): each trial would get the sampled model: {hidden: 7} and the stale
    'model.hidden': 5 beside it. A dotted parameter under another parameter (`model` and `model.dropout`) is
    one key, as W&B keeps it (`space.unflatten`), so it replaces the config's key of that name."""
    names = set(parameters)
    for name in parameters:
        parts = name.split(".")
        if len(parts) > 1 and not any(".".join(parts[:i]) in names for i in range(1, len(parts))):
            _refuse_through_dotted_key(config, name, f"parameter '{name}'", key=f"parameters.{name}")


def override_list(overrides: Sequence[str] | str | None) -> list[str]:
    """The overrides a Python caller gave (`sl.sweep(..., overrides=...)`) as a list: one string is one
    override (not one per character), None none; a mapping is refused with the list to write instead."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, Mapping):
        written = [f"{k}={v}" for k, v in list(overrides.items())[:3]]
        raise ConfigError("overrides must be a list of 'key=value' strings, not a mapping", value=_short(overrides),
                          expected=f"a list like {written!r}")
    if isinstance(overrides, (bytes, bytearray)) or not isinstance(overrides, (list, tuple, Sequence)):
        raise ConfigError(f"overrides must be a list of 'key=value' strings, not a {type(overrides).__name__}",
                          value=_short(overrides), expected="a list like ['lr=0.1'], or one string")
    return list(overrides)


def _prefixes(key: str) -> list[str]:
    """The dotted keys around `key`, outermost first: `a.b.c` -> `a`, `a.b`."""
    return [key[:i] for i, ch in enumerate(key) if ch == "."]


class _KeyIndex:
    """Dotted keys in the order they came, asked which earlier one is `key`, inside it or around it, in time
    linear in the keys' parts (comparing each key with every earlier one took minutes for 30,000 overrides)."""

    def __init__(self) -> None:
        self.at: dict[str, int] = {}        # key -> its index (the first time it came)
        self.around: dict[str, int] = {}    # a key's proper prefix -> the index of the first key inside it

    def add(self, key: str, index: int) -> None:
        self.at.setdefault(key, index)
        for prefix in _prefixes(key):
            self.around.setdefault(prefix, index)

    def first_clash(self, key: str) -> int | None:
        """The index of the first key that is `key`, around it (`a` for `a.b`) or inside it (`a.b.c`)."""
        found = [self.at.get(key), self.around.get(key), *(self.at.get(p) for p in _prefixes(key))]
        return min((i for i in found if i is not None), default=None)


def check_distinct_overrides(overrides: Sequence[str]) -> None:
    """Refuse two overrides of one key (`lr=1 lr=2`, `lr=1 ++lr=2`, `~lr lr=2`) or of a key and a key inside it
    (`a.b=1 a.b.c=2`, `model={hidden: 4} model.hidden=8`): the last silently won, so the command line said two
    things and a trial ran one. Hydra refuses them too ("Multiple values for lr"); write each key once."""
    seen: list[tuple[str, str]] = []
    index = _KeyIndex()
    for text in overrides:
        key = _parse_override(text)[1]
        clash = index.first_clash(key)
        if clash is not None:
            first_text, first = seen[clash]
            same = first == key
            raise ConfigError(
                f"override '{_clip(text)}' names '{_clip(key)}' again ('{_clip(first_text)}' came first)"
                if same else f"overrides '{_clip(first_text)}' and '{_clip(text)}' both set "
                f"'{_clip(max(first, key, key=len))}': one would replace the other",
                key=_clip(first if len(first) <= len(key) else key),
                value=_Abbrev(f"{_clip(first_text)} and {_clip(text)}"),
                expected="each config key in one override (Hydra refuses multiple values for a key too)",
                hint="keep one of them" if same else
                f"set '{_clip(min(first, key, key=len))}' whole in one override, or only keys inside it",
            )
        index.add(key, len(seen))
        seen.append((text, key))


def check_overrides_against_parameters(overrides: Sequence[str], parameters: Sequence[str]) -> None:
    """Refuse an override at, inside or around a sweep parameter (`lr=0.5` when `lr` is searched).

    Overrides apply last, so it would replace every trial's sampled value while the store, the searcher and
    `best` record the sampled one: a sweep whose results describe configs that never ran.
    """
    names = list(parameters)
    index = _KeyIndex()
    for i, name in enumerate(names):
        index.add(name, i)
    for text in overrides:
        op, key, _value = _parse_override(text)
        clash = index.first_clash(key)
        if clash is not None:
            name = names[clash]
            does, runs = ("deletes", "without it") if op == "~" else ("sets", "with the override")
            raise ConfigError(
                f"override '{_clip(text)}' {does} the sweep parameter '{name}': every trial would run {runs} "
                "while the sweep records its sampled value", key=_clip(key),
                expected="overrides of keys the sweep does not search",
                hint=f"change parameters.{name} in the spec, or drop the override",
            )


def check_config_reaches_trials(*, function_trials: bool, config: Any, profile: str | None,
                                overrides: Sequence[str], file: str | None = None) -> None:
    """Refuse a base config, a profile or overrides for a sweep of command trials: a command gets its parameters
    as arguments (`${args}`), never the config, so they would be silently ignored."""
    if function_trials:
        return
    given, key = ((f"override '{overrides[0]}'", None) if overrides else ("a base config", "config")
                  if config is not None else ("a profile", "profile") if profile else (None, None))
    if given is None:
        return
    raise ConfigError(
        f"{given} would be ignored: a command trial gets the sweep's parameters as arguments, never the config",
        file=file if key else None, key=key,
        expected="config, profile and overrides with a function: trial only",
        hint="give a fixed value to the command as a parameter, e.g. epochs: {value: 3}, or in command:",
    )


# ------------------------------------------------------------------------------------------ profiles

def profile_search_path(base: str | Path | None = None, *, cwd: str | Path | None = None) -> list[Path]:
    """Where profiles are looked for: `<base dir>/../profiles`, `<base dir>/profiles`, `./profiles`."""
    dirs: list[Path] = []
    if base is not None:
        here = Path(base).parent
        dirs += [here.parent / "profiles", here / "profiles"]
    dirs.append((Path(cwd) if cwd is not None else Path.cwd()) / "profiles")
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def find_profile(name: str, *, search: Sequence[Path], file: str | None = None, key: str = "profile") -> Path:
    """The file of profile `name`: `<dir>/<name>.yaml` (or `.yml`) in the first dir that has it.

    A name that is itself a path to a YAML file is used as is. An error names `file` (the spec that names the
    profile, if any) and `key` (`profile`, or the option that gave it: `--profile`).
    """
    if not isinstance(name, str) or not name:
        raise ConfigError("a profile name must be a non-empty string", file=file, key=key, value=name)
    direct = Path(name)
    if direct.suffix in (".yaml", ".yml") and direct.is_file():
        return direct
    if "/" in name or "\\" in name:
        raise ConfigError("profile file not found", file=file, key=key, value=name,
                          expected=f"a YAML file: {direct.absolute()} does not exist")
    stem = direct.stem if direct.suffix in (".yaml", ".yml") else name   # `--profile local.yaml` is `local`
    for d in search:
        for candidate in ([name] if stem != name else []) + [f"{stem}.yaml", f"{stem}.yml"]:
            found = _profile_file(Path(d) / candidate, name, key=key)
            if found is not None:
                return found
    available = sorted({
        p.stem for d in search if Path(d).is_dir()
        for p in Path(d).iterdir() if p.suffix in (".yaml", ".yml")
    })
    looked = ", ".join(str(d) for d in search) or "(no directories)"
    hint = _did_you_mean(stem, available)
    listing = ", ".join(available) if available else "none"
    raise ConfigError(
        f"unknown profile; looked in {looked}", file=file, key=key, value=name,
        expected=f"one of the available profiles: {listing}", hint=hint or None,
    )


def _profile_file(candidate: Path, name: str, *, key: str = "profile") -> Path | None:
    """`candidate` when it is the profile's file, None when nothing is there. Something there that cannot be
    read (a symlink loop, a dangling symlink, a directory) is an error naming it: skipping it made the error
    'unknown profile ... (did you mean 'gpu'?)' for the name the user had typed. A pipe is read once, as a
    base config is."""
    if candidate.is_file():
        return candidate
    if not os.path.lexists(candidate):
        return None
    try:
        mode = candidate.stat().st_mode
    except OSError as exc:
        raise ConfigError(f"cannot read the profile file: {exc.strerror or exc}", file=str(candidate),
                          key=key, value=name, expected="a YAML file") from None
    if stat.S_ISDIR(mode):
        raise ConfigError("the profile file is a directory", file=str(candidate), key=key, value=name,
                          expected="a YAML file") from None
    return candidate


# ------------------------------------------------------------------------------------------- resolve

def resolve_config(
    *,
    base: str | Path | None,
    profile: str | None,
    params: Mapping[str, Any],
    overrides: Sequence[str] = (),
    search: Sequence[Path] = (),
    named_by: tuple[str | None, str, str] | None = None,
) -> dict[str, Any]:
    """Merge base config < profile < sweep parameters (flat dotted keys) < overrides.

    `search` lists profile directories; empty means `profile_search_path(base)`. `named_by` says where the base
    config and the profile were named, for an error about a file that is not there: (the spec file or None, the
    base config's key or option, the profile's); None names the file alone.
    """
    merged: dict[str, Any] = {}
    if base is not None:
        merged = load_yaml_mapping(base, what="config") if named_by is None else _load_base(
            base, file=named_by[0], key=named_by[1])
    if profile:
        dirs = list(search) or profile_search_path(base)
        spec_file, profile_key = (None, "profile") if named_by is None else (named_by[0], named_by[2])
        path = find_profile(profile, search=dirs, file=spec_file if profile_key == "profile" else None,
                            key=profile_key)
        merged = deep_merge(merged, load_yaml_mapping(path, what="profile"))
    for key, value in params.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise ConfigError("a parameter name must be a dotted name", key=str(key), value=key)
        _set_dotted(merged, key, value, source=f"parameter '{key}'")
    return apply_overrides(merged, list(overrides))


def _load_base(path: str | Path, *, file: str | None, key: str) -> dict[str, Any]:
    """The base config file's mapping. A file that is not there (or cannot be opened) is named with the spec file
    and key that point to it (`config:`, or `--config`): the error named the path alone, and not who asked for it.
    What is wrong inside a file that was read is named inside it (its own file, key path and line)."""
    try:
        return load_yaml_mapping(path, what="config")
    except ConfigError as exc:
        if exc.file != str(path) or exc.key is not None or not (
                exc.reason == "config file not found" or exc.reason.startswith("cannot read the config file")):
            raise
        where = " (a relative config: is read from the spec file's directory)" if file and key == "config" else ""
        raise ConfigError(exc.reason, file=file if key == "config" else None, key=key, value=_Abbrev(str(path)),
                          expected=f"a readable YAML file{where}") from None


def load_base_config(
    config: str | Path | None, profile: str | None, *, spec_file: str | Path | None, cwd: str | Path,
    config_key: str = "config", profile_key: str = "profile",
) -> dict[str, Any]:
    """The part of every trial's config that does not vary: base config < profile, as a sweep reads it.

    Profiles are looked for beside the base config (`../profiles`, `profiles`), beside the spec file and in
    `cwd`. The command line calls this before it opens the store, so a bad config or profile file is an
    error before anything is written; the driver calls it again for the trials. A file that is not there is
    named with the spec file and its key (`config`, `profile`), or with the option that gave it instead
    (`config_key="--config"`, `profile_key="--profile"`).
    """
    search: list[Path] = []
    if config is not None:
        base_dir = Path(config).parent
        search += [base_dir.parent / "profiles", base_dir / "profiles"]
    if spec_file is not None:
        search.append(Path(spec_file).parent / "profiles")
    search.append(Path(cwd) / "profiles")
    unique = list(dict.fromkeys(p.resolve() for p in search))   # `./profiles` named once in an error
    return resolve_config(base=config, profile=profile, params={}, search=unique,
                          named_by=(str(spec_file) if spec_file is not None else None, config_key, profile_key))


# ----------------------------------------------------------------------------------- typed configs

def _pydantic_base() -> type | None:
    """pydantic.BaseModel if pydantic is already imported (a user model implies it is)."""
    module = sys.modules.get("pydantic")
    return getattr(module, "BaseModel", None) if module is not None else None


def _is_model(tp: Any) -> bool:
    base = _pydantic_base()
    return base is not None and isinstance(tp, type) and issubclass(tp, base)


def _is_schema(tp: Any) -> bool:
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or _is_model(tp))


def typed_schema_of(fn: Callable[..., Any]) -> Any | None:
    """The annotation of `fn`'s first parameter when it is a dataclass or pydantic model class."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if not params:
        return None
    first = params[0]
    if inspect.isfunction(fn) or inspect.ismethod(fn):
        target: Any = fn
    elif isinstance(fn, type):
        target = fn.__init__  # type: ignore[misc]
    else:
        target = type(fn).__call__  # a callable object
    try:
        hints = typing.get_type_hints(target)
        annotation = hints.get(first.name, first.annotation)
    except (NameError, TypeError, AttributeError, SyntaxError):
        annotation = first.annotation  # unresolvable forward reference: use what is written
    return annotation if _is_schema(annotation) else None


def coerce(config: Mapping[str, Any], schema: Any) -> Any:
    """Turn a merged config into what the user's function declares.

    `schema` None -> a read-only Config. A dataclass or pydantic model class -> an instance (nested
    dataclasses / models too), after checking that every key is known (with a did-you-mean hint)
    and that every value has the declared type.
    """
    data = _plain(config)
    if schema is None:
        return Config(data)
    if not _is_schema(schema):
        raise TypeError(f"coerce: schema must be None, a dataclass or a pydantic model, not {schema!r}")
    _check_keys(data, schema, path="")
    pydantic = __import__("pydantic")
    try:
        if _is_model(schema):
            return schema.model_validate(data)
        return pydantic.TypeAdapter(schema).validate_python(data)
    except pydantic.ValidationError as exc:
        raise _translate(exc, schema) from None


def _fields(schema: Any) -> dict[str, Any]:
    """Accepted key -> declared type, for a dataclass or pydantic model class."""
    if _is_model(schema):
        # the keys pydantic reads: a field's validation alias(es) (or its alias), and its name when it has none
        # or the model validates by name too; a name it does not read would be dropped in silence
        config = schema.model_config
        by_name = bool(config.get("validate_by_name") or config.get("populate_by_name"))
        by_alias = config.get("validate_by_alias", True) is not False
        out: dict[str, Any] = {}
        for name, info in schema.model_fields.items():
            alias = info.validation_alias if info.validation_alias is not None else info.alias
            choices = getattr(alias, "choices", [alias]) if alias is not None else []
            keys = [c for c in choices if isinstance(c, str)] if by_alias else []
            if not choices or by_name or not by_alias:
                keys.append(name)
            for key in keys:
                out[key] = info.annotation
        return out
    try:
        hints = typing.get_type_hints(schema)
    except (NameError, TypeError, AttributeError, SyntaxError):
        hints = {}
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(schema) if f.init}


def _allows_extra(schema: Any) -> bool:
    """A pydantic model, or a pydantic dataclass, with `extra="allow"`."""
    config = schema.model_config if _is_model(schema) else getattr(schema, "__pydantic_config__", None)
    return isinstance(config, Mapping) and config.get("extra") == "allow"


def _nested_schema(tp: Any) -> Any | None:
    """The dataclass / model class inside `tp` (`Model`, `Model | None`, `Optional[Model]`)."""
    if _is_schema(tp):
        return tp
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    is_union = typing.get_origin(tp) in (typing.Union, types.UnionType)
    return args[0] if is_union and len(args) == 1 and _is_schema(args[0]) else None


def _check_keys(data: Any, schema: Any, *, path: str) -> None:
    """Every key of `data` is a field of `schema` (with a did-you-mean), and so on into its fields' values."""
    if not isinstance(data, Mapping):
        return  # a type error: reported by validation with its path
    fields = _fields(schema)
    if not _allows_extra(schema):
        for key in data:
            if key not in fields:
                _unknown_key(data, key, schema.__name__, list(fields), path)
    for key, tp in fields.items():
        if key in data:
            _check_value(data[key], tp, path=f"{path}.{key}" if path else str(key))


def _unknown_key(data: Mapping[str, Any], key: str, owner: str, fields: Sequence[str], path: str) -> typing.NoReturn:
    where = f"{path}.{key}" if path else str(key)
    hint = _did_you_mean(str(key), list(fields))
    raise ConfigError(
        f"unknown key for {owner}", key=where, value=_short(data[key]),
        expected=f"one of {', '.join(sorted(set(fields)))}", hint=hint or None,
    )


_SEQUENCES: tuple[Any, ...] = (list, tuple, set, frozenset, Sequence)
_MAPPINGS: tuple[Any, ...] = (dict, Mapping)


def _strip(tp: Any) -> Any:
    """`Annotated[T, ...]` -> T."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _check_value(value: Any, tp: Any, *, path: str) -> None:
    """What pydantic's lax validation would let through silently: a key no dataclass / model declares (inside
    lists, dicts and unions of them too: pydantic drops it), a bool where a number is declared (read as 1 or 0:
    `epochs: yes`, `batch_size=true`)."""
    tp = _strip(tp)
    if _is_schema(tp):
        _check_keys(value, tp, path=path)
        return
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(value, bool) and _number_not_bool(tp):
        _bool_for_number(value, tp, path)
        return
    if _is_union(tp):
        _check_union(value, tp, [_strip(a) for a in args], path=path)
        return
    if origin in _SEQUENCES and isinstance(value, (list, tuple)) and args:
        for i, item in enumerate(value):
            if origin is tuple and args[-1] is not Ellipsis:
                item_tp = args[i] if i < len(args) else None
            else:
                item_tp = args[0]
            if item_tp is not None:
                _check_value(item, item_tp, path=f"{path}[{i}]")
        return
    if origin in _MAPPINGS and isinstance(value, Mapping) and len(args) == 2:
        for key, item in value.items():
            _check_value(item, args[1], path=f"{path}.{key}")


def _number_not_bool(tp: Any) -> bool:
    """`int`, `float`, an IntEnum or a Literal of numbers: pydantic reads True there as 1."""
    if tp in (int, float) or (isinstance(tp, type) and issubclass(tp, int) and tp is not bool):
        return True
    values = typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else ()
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _bool_for_number(value: bool, tp: Any, path: str) -> typing.NoReturn:
    raise ConfigError(
        "wrong type", key=path, value=value,
        expected=f"{_type_name(tp)} (a number, not a bool: YAML reads true/false/yes/no/on/off as bool)",
    )


def _check_union(value: Any, tp: Any, members: list[Any], *, path: str) -> None:
    if any(m in (Any, object) for m in members):
        return
    if isinstance(value, bool):
        if bool not in members and any(_number_not_bool(m) for m in members):
            _bool_for_number(value, tp, path)
        return
    if isinstance(value, Mapping):
        if any(m in _MAPPINGS or typing.get_origin(m) in _MAPPINGS for m in members):
            return   # a plain mapping is one of the choices: nothing to check its keys against
        schemas = [m for m in members if _is_schema(m)]
        if not schemas:
            return
        unknown = {s: ([] if _allows_extra(s) else [k for k in value if k not in _fields(s)]) for s in schemas}
        fitting = [s for s in schemas if not unknown[s]]
        if fitting:
            _check_keys(value, fitting[0], path=path)
            return
        closest = min(schemas, key=lambda s: len(unknown[s]))
        every = [f for s in schemas for f in _fields(s)]
        _unknown_key(value, unknown[closest][0], " or ".join(s.__name__ for s in schemas), every, path)
    if isinstance(value, (list, tuple)):
        for m in members:
            if typing.get_origin(m) in _SEQUENCES:
                _check_value(value, m, path=path)
                return


def _field_path(schema: Any, loc: Sequence[Any]) -> tuple[str, Any]:
    """pydantic's error location as the config's key path (`model.layers[0].size`), and the type declared there.

    pydantic adds a tag for the member of a union it tried (`width.int`, `block.LayerDC`): not a key, dropped."""
    path, tp, declared = "", schema, schema
    for part in loc:
        tp = _strip(tp) if tp is not None else None
        if isinstance(part, int):
            path += f"[{part}]"
            args = typing.get_args(tp) if tp is not None else ()
            tp = declared = args[0] if args and typing.get_origin(tp) in _SEQUENCES else None
            continue
        nested = _nested_schema(tp) if tp is not None else None
        if nested is not None and part in _fields(nested):
            path += f".{part}" if path else str(part)
            tp = declared = _fields(nested)[part]
        elif tp is not None and _is_union(tp):
            tp = next((m for m in typing.get_args(tp) if getattr(m, "__name__", None) == part or str(m) == part),
                      None)
        elif tp is not None and typing.get_origin(tp) in _MAPPINGS:
            path += f".{part}" if path else str(part)
            args = typing.get_args(tp)
            tp = declared = args[1] if len(args) == 2 else None
        else:
            path += f".{part}" if path else str(part)
            tp = declared = None
    return path, declared


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _translate(exc: Any, schema: Any) -> ConfigError:
    errors = exc.errors()
    where = [_field_path(schema, [p for p in e.get("loc", ()) if p != "__root__"]) for e in errors]
    first, (path, annotation) = errors[0], where[0]
    others = len({p for p, _ in where[1:]} - {path})   # a union's members fail at one key: one problem
    more = f" (and {others} more problem{'s' if others > 1 else ''})" if others else ""
    msg = str(first.get("msg", "invalid value"))
    detail = msg.removeprefix("Input should be ")
    if first.get("type") == "missing":
        owner = _field_path(schema, [p for p in first.get("loc", ())][:-1])[1] if "." in path else schema
        name = getattr(_nested_schema(owner) or schema, "__name__", "the config")
        return ConfigError(f"missing required key for {name}{more}", key=path or None)
    expected = f"{_type_name(annotation)} ({detail})" if annotation is not None else detail
    value = first.get("input", ...)
    return ConfigError(f"wrong type{more}", key=path or None, value=_short(value), expected=expected)


# ------------------------------------------------------------------------------------------- helpers

def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else ""


def _short(value: Any) -> Any:
    text = repr(value)
    if len(text) <= 80:
        return value
    return _Abbrev(text[:77] + "...")


def _clip(text: str, limit: int = 80) -> str:
    """`text`, or its start and its length when longer than `limit`: an error names a 100,000-character
    override without writing it out (four times, in one line)."""
    return text if len(text) <= limit else f"{text[:limit - 20]}...({len(text):,} characters)"


class _Abbrev(str):
    def __repr__(self) -> str:
        return str(self)
