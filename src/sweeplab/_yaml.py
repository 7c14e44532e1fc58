"""Safe YAML for specs, configs, profiles and overrides.

`yaml.SafeLoader` (no Python objects are ever built) that also reads `1e-3` as a float (YAML 1.1
insists on a dot: `1.0e-3`) and refuses, with a one-line error naming the key path and line:

- a key given twice in one mapping (YAML would keep the last one silently): both lines are named;
- nesting deeper than MAX_DEPTH levels, checked while composing, before Python's recursion limit;
- aliases (`*name`) that expand to more than MAX_ALIAS_NODES nodes ("billion laughs"): counted on
  the composed node graph, so the check costs as much as reading the file, not as the expansion;
- an alias that refers to a node containing it (a cycle);
- tags other than YAML's standard ones (`!!python/object`) and values their tag cannot build (`!!int abc`);
- numbers as YAML 1.2 (and JSON) read them, not as YAML 1.1 does: `010` is ten, not eight (octal is `0o10`),
  `12:30` is the text `12:30`, not the base-60 number 750, and `1e400` is an error, not infinity;
- standard tags whose values JSON cannot hold (`!!binary`, `!!set`, `!!omap`, `!!pairs`, `!!timestamp`): specs,
  configs and parameters are stored and passed to trials as JSON. A plain date (`2024-01-02`) is read as
  text, as a YAML 1.2 or JSON reader reads it, not as a `datetime.date`.

`read_yaml` adds the file: at most MAX_FILE_BYTES are read, and bytes that are not UTF-8 are named by
offset, line and column. Every error is a SpecError (or the ConfigError asked for) on one line.
"""

from __future__ import annotations

import math
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from sweeplab.errors import SpecError

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "YAMLInputError",
    "forget_piped",
    "piped_text",
    "read_yaml",
    "remember_piped",
    "too_long_for_json",
    "yaml_load",
]

#: limits no real spec or config reaches; each one stops a different way to exhaust time, memory or stack
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 100
MAX_ALIAS_NODES = 100_000

_MERGE = "tag:yaml.org,2002:merge"
_STR = "tag:yaml.org,2002:str"
_STD_TAG = "tag:yaml.org,2002:"


class YAMLInputError(yaml.YAMLError):
    """A YAML document sweeplab refuses to read: what is wrong, where (key path, line) and what was expected."""

    def __init__(self, message: str, *, key: str | None = None, mark: Any = None, column: bool = True,
                 expected: str | None = None) -> None:
        self.key = key or None
        self.line = mark.line + 1 if mark is not None else None
        self.column = mark.column + 1 if mark is not None and column else None
        self.expected = expected
        self.message = message
        self.problem = message   # what `yaml.MarkedYAMLError` callers read
        super().__init__(self.located)

    @property
    def located(self) -> str:
        """The message behind its line (and column): `line 4, column 7: duplicate key ...`."""
        if self.line is None:
            return self.message
        where = f"line {self.line}" + (f", column {self.column}" if self.column is not None else "")
        return f"{where}: {self.message}"


def _tag_name(tag: str) -> str:
    return "!!" + tag[len(_STD_TAG):] if tag.startswith(_STD_TAG) else tag


def _short_path(path: str, limit: int = 120) -> str:
    """A key path short enough for one line: the head and the tail of a very deep one."""
    if len(path) <= limit:
        return path
    return f"{path[: limit // 2 - 2]}...{path[-(limit // 2 - 1):]}"


def _child_path(parent: str, index: Any) -> str:
    if index is None:                     # a mapping key: errors about it belong to its mapping
        return parent
    if isinstance(index, int):
        return f"{parent}[{index}]"
    key = index.value if isinstance(index, ScalarNode) else "?"
    return f"{parent}.{key}" if parent else str(key)


class _Loader(yaml.SafeLoader):
    """SafeLoader with limits and duplicate-key detection (see the module docstring)."""

    def __init__(self, stream: Any, *, keys_as_text: bool = False) -> None:
        super().__init__(stream)
        self._keys_as_text = keys_as_text  # configs: `on:`, `7:`, `~:` are the keys 'on', '7', '~' (see yaml_load)
        self._paths: list[str] = [""]     # key paths of the nodes being composed, root first
        self._alias_nodes = 0              # nodes that aliases stand for, in all
        # by id(node), for the nodes of this document (alive as long as the loader):
        self._path: dict[int, str] = {}
        self._size: dict[int, int] = {}                 # nodes in it, aliases expanded
        self._height: dict[int, int] = {}               # levels in it, aliases expanded
        self._own_keys: dict[int, list[Node]] = {}      # a mapping's keys as written (before `<<` merges)

    # -- composing: depth, alias expansion, cycles -------------------------------------------------

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        path = _child_path(self._paths[-1], index)
        depth = len(self._paths)
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            self._count_alias(node, event, path, depth)
            return node
        if depth > MAX_DEPTH:
            raise YAMLInputError(f"nested deeper than {MAX_DEPTH} levels", key=_short_path(path),
                                 mark=self.peek_event().start_mark,
                                 expected=f"at most {MAX_DEPTH} levels of nested mappings and lists")
        self._paths.append(path)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._paths.pop()
        children: list[Node] = []
        if isinstance(node, MappingNode):
            self._own_keys[id(node)] = [key for key, _ in node.value]
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, SequenceNode):
            children = list(node.value)
        self._path[id(node)] = path
        self._size[id(node)] = 1 + sum(self._size[id(c)] for c in children)
        self._height[id(node)] = 1 + max((self._height[id(c)] for c in children), default=0)
        return node

    def _count_alias(self, node: Node, event: Any, path: str, depth: int) -> None:
        """An alias stands for a copy of its node: count that copy's nodes and depth."""
        if id(node) not in self._size:
            raise YAMLInputError(f"alias *{event.anchor} refers to a node that contains it (a cycle)",
                                 key=_short_path(path), mark=event.start_mark,
                                 expected="aliases to finished nodes only")
        self._alias_nodes += self._size[id(node)]
        if self._alias_nodes > MAX_ALIAS_NODES:
            raise YAMLInputError(f"aliases (*name) expand to more than {MAX_ALIAS_NODES:,} nodes", column=False,
                                 key=_short_path(path), mark=event.start_mark,
                                 expected=f"aliases that expand to at most {MAX_ALIAS_NODES:,} nodes in all "
                                 "(is this a 'billion laughs' document?)")
        if depth - 1 + self._height[id(node)] > MAX_DEPTH:
            raise YAMLInputError(f"nested deeper than {MAX_DEPTH} levels through alias *{event.anchor}",
                                 key=_short_path(path), mark=event.start_mark,
                                 expected=f"at most {MAX_DEPTH} levels of nested mappings and lists")

    # -- constructing: duplicate keys, tags, values ------------------------------------------------

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except YAMLInputError:
            raise
        except Exception as exc:   # any failure to build a value is the file's fault
            raise self._value_error(node, exc) from None

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> Any:  # type: ignore[override]
        try:
            if self._keys_as_text:
                self._text_keys(self._own_keys.get(id(node), [key for key, _ in node.value]))
            self._check_duplicates(node)
            self._check_flow_keys(node)
            return super().construct_mapping(node, deep=deep)
        except YAMLInputError:
            raise
        except Exception as exc:
            raise self._value_error(node, exc) from None

    def flatten_mapping(self, node: MappingNode) -> None:
        super().flatten_mapping(node)
        if self._keys_as_text:   # the keys a merge `<<: *defaults` brought in, too
            self._text_keys([key for key, _ in node.value])

    @staticmethod
    def _text_keys(keys: list[Node]) -> None:
        """Plain scalar keys read as the text they are written as: JSON (how a config is stored and reaches a
        trial) has text keys only, so YAML's `on:` would become 'true' there and `7:` the key 7 that no
        override `x.7=...` reaches (it would add a second '7')."""
        for key in keys:
            if isinstance(key, ScalarNode) and key.style is None and key.tag not in (_STR, _MERGE):
                key.tag = _STR

    def _check_flow_keys(self, node: MappingNode) -> None:
        """`{hidden:64}` (Hydra's and JSON's way) is, to YAML, the key 'hidden:64' with no value: refused, with
        how to write it, rather than a config whose keys are silently 'hidden:64' and null."""
        if not node.flow_style:
            return
        for key_node, value_node in node.value:
            if (isinstance(key_node, ScalarNode) and key_node.style is None and ":" in key_node.value
                    and isinstance(value_node, ScalarNode) and value_node.tag == _STD_TAG + "null"
                    and value_node.value == ""):
                name, _, value = key_node.value.partition(":")
                path = _child_path(self._path.get(id(node), ""), key_node)
                raise YAMLInputError(
                    f"{key_node.value!r} in {{...}} reads as a key with no value: YAML needs a space after ':'",
                    key=_short_path(path), mark=key_node.start_mark,
                    expected=f"'{name}: {value}' (a space after the colon), or quotes for a key with a colon")

    def _check_duplicates(self, node: MappingNode) -> None:
        seen: dict[Any, Node] = {}
        for key_node in self._own_keys.get(id(node), [key for key, _ in node.value]):
            if key_node.tag == _MERGE:
                continue      # `<<: *defaults` merges keys the mapping may then override
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue      # an unhashable key: SafeConstructor names it
            if first is not None:
                path = _child_path(self._path.get(id(node), ""), key_node)
                raise YAMLInputError(
                    f"duplicate key {key!r} on line {key_node.start_mark.line + 1} "
                    f"(first on line {first.start_mark.line + 1}); the second would silently replace the first",
                    key=_short_path(path), expected="each key once in a mapping")
            seen[key] = key_node

    def _value_error(self, node: Node, exc: Exception) -> YAMLInputError:
        path = _short_path(self._path.get(id(node), ""))
        tag = node.tag
        known = tag in self.yaml_constructors
        if not known:
            return YAMLInputError(f"unsupported YAML tag {_tag_name(tag)!r}", key=path, mark=node.start_mark,
                                  expected="plain YAML values (mappings, lists, strings, numbers, booleans, "
                                  "null); tags such as !!python/... are never read")
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split()) or type(exc).__name__
        if problem == "found unhashable key":   # `? [a, b]`: SafeConstructor's words, with no way out
            return YAMLInputError("a key that is a list or a mapping", key=path,
                                  mark=getattr(exc, "problem_mark", None) or node.start_mark,
                                  expected="a key of text, a number, a boolean or null")
        if isinstance(node, ScalarNode):
            text = node.value if len(node.value) <= 60 else f"{node.value[:40]}...({len(node.value):,} characters)"
            return YAMLInputError(f"cannot read {text!r} as {_tag_name(tag)}: {problem}", key=path,
                                  mark=getattr(exc, "problem_mark", None) or node.start_mark)
        return YAMLInputError(str(problem), key=path, mark=getattr(exc, "problem_mark", None) or node.start_mark)


_FLOAT = re.compile(
    r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9_]+|[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?$"
    r"|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"
)
# YAML 1.2's integers: `010` is ten (YAML 1.1: eight), `0o17` octal; `12:30` is text (YAML 1.1: 750, base 60)
_INT = re.compile(r"^[-+]?(?:0b[01_]+|0o[0-7_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*)$")
_NUMBER_TAGS = {_STD_TAG + "int", _STD_TAG + "float"}
_NOT_JSON = {_STD_TAG + t for t in ("binary", "set", "omap", "pairs", "timestamp")}


def _construct_int(loader: yaml.SafeLoader, node: Any) -> int:
    """An integer as YAML 1.2 reads it: decimal unless `0b`, `0o` or `0x` says otherwise."""
    text = str(loader.construct_scalar(node)).replace("_", "")
    sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text.lstrip("+"))
    base = {"0b": 2, "0o": 8, "0x": 16}.get(digits[:2].lower(), 10)
    too_long = ValueError(f"an integer of more than {getattr(sys, 'get_int_max_str_digits', lambda: 0)()} "
                          "decimal digits cannot be stored (as JSON)")
    try:
        value = sign * int(digits[2:] if base != 10 else digits, base)
    except ValueError:   # decimal digits beyond int()'s limit: Python's words advised sys.set_int_max_str_digits()
        if base == 10 and digits.isascii() and digits.isdigit():
            raise too_long from None
        raise
    if too_long_for_json(value):
        raise too_long
    return value


def too_long_for_json(value: int) -> bool:
    """An int Python will not write in decimal (`sys.get_int_max_str_digits()`), so `json.dumps` fails on it:
    `0x` and 5,000 `f`s read fast, then storing the config that holds it crashed the driver."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    return bool(limit) and value.bit_length() > limit * 3.3219   # log2(10) bits per digit


def _construct_float(loader: yaml.SafeLoader, node: Any) -> float:
    """A float; one too large for 64 bits (`1e400`) is an error, not a silent infinity (`.inf` says so)."""
    value = yaml.SafeLoader.construct_yaml_float(loader, node)
    if math.isinf(value) and "inf" not in str(node.value).lower():
        raise ValueError("too large for a 64-bit float (write .inf for infinity)")
    return value


_Loader.yaml_constructors = {t: c for t, c in yaml.SafeLoader.yaml_constructors.items() if t not in _NOT_JSON}
_Loader.yaml_constructors[_STD_TAG + "int"] = _construct_int
_Loader.yaml_constructors[_STD_TAG + "float"] = _construct_float
# `=` is the text '=': YAML 1.1 tags a plain `=` as !!value (a "default value" key no loader builds), so `sep: =`
# and the override `sep==` were refused as an "unsupported YAML tag '!!value'" nobody wrote
_VALUE = _STD_TAG + "value"
_Loader.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag not in _NOT_JSON | _NUMBER_TAGS | {_VALUE}]
                                   for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(_STD_TAG + "int", _INT, list("-+0123456789"))       # before float: `3` is an int
_Loader.add_implicit_resolver(_STD_TAG + "float", _FLOAT, list("-+0123456789."))


def yaml_load(text: str, *, keys_as_text: bool = False) -> Any:
    """Parse YAML text safely (no Python objects are ever built); YAMLInputError for refused documents.

    `keys_as_text`: a mapping key is the text it is written as (`on:` the key 'on', not True; `7:` '7'), as
    configs need: they are stored and reach trials as JSON, whose keys are text. A spec keeps YAML's keys,
    which `when:` compares with its parameter's values (`when: {2: ...}`)."""
    loader = _Loader(text, keys_as_text=keys_as_text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


#: byte-order marks of the encodings a Windows editor or PowerShell's `>` writes, UTF-32 first (its
#: little-endian mark starts with UTF-16's)
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
         (b"\xfe\xff", "UTF-16"))


def _bomless_encoding(data: bytes) -> str | None:
    """UTF-16 or UTF-32 written without a byte-order mark, told by where the 0x00 bytes of its first characters
    fall (the high bytes of ASCII and Latin text, as YAML's keys are): such a file is valid UTF-8 and failed as
    "unacceptable character #x0000", which does not say what the file is. Called only for text holding a NUL."""
    head = data[:1024]
    for width, name in ((4, "UTF-32"), (2, "UTF-16")):
        size = len(head) - len(head) % width
        if size < 2 * width:
            continue
        zeros = [sum(1 for i in range(k, size, width) if head[i] == 0) / (size // width) for k in range(width)]
        for low in (0, width - 1):   # little-endian: 'a\0' ('a\0\0\0'); big-endian: '\0a'
            if width == 4:   # a character below U+10000: its two high bytes are 0x00, its lowest is rarely
                high = (2, 3) if low == 0 else (0, 1)
                if all(zeros[k] == 1 for k in high) and zeros[low] < 0.05:
                    return name
            elif zeros[1 - low] >= 0.3 and zeros[low] < 0.05:
                return name
    return None


def _decode(data: bytes, file: str, what: str, error: type[SpecError]) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        encoding = next((name for bom, name in _BOMS if data.startswith(bom)), None)
        if encoding is not None:   # said as "byte 0xff at offset 0 is not UTF-8 text", of a file that is text
            raise error(f"line 1, column 1: {encoding} text (it starts with a {encoding} byte-order mark)",
                        file=file, expected=f"a UTF-8 encoded {what} file (save it as UTF-8; in PowerShell, "
                        "Out-File -Encoding utf8)") from None
        _refuse_bomless(data, file, what, error)
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(f"line {line}, column {column}: byte 0x{data[exc.start]:02x} at offset {exc.start} is not "
                    "UTF-8 text", file=file, expected=f"a UTF-8 encoded {what} file") from None
    if "\x00" in text:
        _refuse_bomless(data, file, what, error)
    return text


def _refuse_bomless(data: bytes, file: str, what: str, error: type[SpecError]) -> None:
    encoding = _bomless_encoding(data) if b"\x00" in data[:1024] else None
    if encoding is not None:
        share = "every other byte is" if encoding == "UTF-16" else "two bytes in four are"
        raise error(f"line 1, column 1: {encoding} text without a byte-order mark ({share} 0x00)", file=file,
                    expected=f"a UTF-8 encoded {what} file (save it as UTF-8)")


#: what was read of a pipe (a FIFO, the shell's `<(...)`), by absolute path: a pipe is read once, and every
#: later reader in this process (the command line's checks, the driver building each trial's config) gets
#: the same bytes; a sweep records them for its resume (driver/recovery.py), which puts them back here
_PIPED: dict[str, bytes] = {}


def _read_bytes(path: str | Path) -> bytes:
    """At most MAX_FILE_BYTES + 1 bytes of `path`; a pipe's bytes are kept, and read from there again."""
    key = os.path.abspath(os.fspath(path))
    if key in _PIPED:
        return _PIPED[key]
    with open(path, "rb") as fh:
        data = fh.read(MAX_FILE_BYTES + 1)
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            _PIPED[key] = data
    return data


def piped_text(path: str | Path) -> str | None:
    """What this process read of `path` when it is a pipe (None: a regular file, or not read)."""
    data = _PIPED.get(os.path.abspath(os.fspath(path)))
    return None if data is None else data.decode("utf-8", errors="surrogateescape")


def remember_piped(path: str | Path, text: str) -> None:
    """Read `text` wherever `path` is read from now on in this process: a resumed sweep's piped config."""
    _PIPED[os.path.abspath(os.fspath(path))] = text.encode("utf-8", errors="surrogateescape")


def forget_piped() -> None:
    """Forget what was read of pipes: a sweep run from Python has ended, and a named FIFO the next one reads
    (same path) may hold new text. (The sweep keeps what it read, for its resume.)"""
    _PIPED.clear()


def _long_plain_key(text: str, mark: Any) -> bool:
    """The ':' at `mark` ends a plain key longer than YAML allows one (1024 characters): PyYAML said "mapping
    values are not allowed here", of a line that reads as a key and its value."""
    lines = text.splitlines()
    if mark.line >= len(lines):
        return False
    head = lines[mark.line][: mark.column].lstrip(" -")
    return len(head) > 1024 and ": " not in head


def read_yaml(path: str | Path, *, what: str, error: type[SpecError] = SpecError, keys_as_text: bool = False) -> Any:
    """Read and parse a YAML file; `error` (SpecError or ConfigError) names the file, the key path and the line."""
    file = str(path)
    if "\x00" in file:   # open() raised ValueError ("embedded null byte"): a traceback
        raise error(f"a {what} file name cannot hold a NUL byte (\\0)", file=file.replace("\x00", "\\0"),
                    expected="a file name without NUL bytes")
    try:
        data = _read_bytes(path)
    except FileNotFoundError:
        raise error(f"{what} file not found", file=file) from None
    except OSError as exc:
        raise error(f"cannot read the {what} file: {exc.strerror or exc}", file=file) from None
    if len(data) > MAX_FILE_BYTES:
        raise error(f"the {what} file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB", file=file,
                    expected=f"a {what} file of at most {MAX_FILE_BYTES:,} bytes")
    text = _decode(data, file, what, error)
    try:
        return yaml_load(text, keys_as_text=keys_as_text)
    except YAMLInputError as exc:
        raise error(exc.located, file=file, key=exc.key, expected=exc.expected) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise error(f"line {line}, column {column}: unacceptable character #x{exc.character:04x}: {exc.reason}",
                    file=file, expected="printable text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        if "'\\t'" in problem:   # PyYAML: "found character '\t' that cannot start any token"
            problem = "a tab; YAML does not indent with tabs: indent with spaces"
        elif (problem in ("mapping values are not allowed here", "could not find expected ':'") and mark is not None
              and _long_plain_key(text, mark)):
            problem = ("a key of more than 1024 characters: YAML reads such a key only after '? ' (`? long-key`, "
                       "its value on the next line as `: value`)")
        raise error(f"invalid YAML: {where}{problem}", file=file) from None
