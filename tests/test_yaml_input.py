"""The YAML layer under specs, configs and profiles: bad input is one line naming file, key path and line.

Every case here once ended in a traceback, a RecursionError, a MemoryError, minutes of work or a silent
surprise (a duplicate key replacing the first). The loader refuses each with its own message.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from sweeplab._yaml import MAX_ALIAS_NODES, MAX_DEPTH, MAX_FILE_BYTES, YAMLInputError, read_yaml, yaml_load
from sweeplab.config import load_yaml_mapping, parse_override
from sweeplab.errors import ConfigError, SpecError
from sweeplab.spec import load_spec

HEAD = "method: grid\nfunction: train.py:train\n"


def nested_parameters(levels: int) -> str:
    """A spec whose parameters nest `levels` groups deep (two YAML levels each), in flow style."""
    return HEAD + "parameters: " + "{x: {parameters: " * levels + "{y: {value: 1}}" + "}}" * levels + "\n"


def alias_bomb(levels: int) -> str:
    """'Billion laughs': each anchor is a list of nine aliases of the one before (9**levels strings)."""
    lines = ["entity:", '  - &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"  - &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n" + HEAD + "parameters: {lr: {values: [1]}}\n"


def alias_chain(links: int) -> str:
    """Each anchor holds an alias of the previous one: small, but as deep as the chain is long."""
    lines = ["entity:", "  - &a0 [1]"] + [f"  - &a{i} [*a{i - 1}]" for i in range(1, links)]
    return "\n".join(lines) + "\n" + HEAD + "parameters: {lr: {values: [1]}}\n"


BAD = [
    # id, file content, key path in the message (None: none), fragments of the message
    ("non-utf8", HEAD.encode() + b"parameters: {lr: {values: [1]}}\nname: caf\xe9\n", None,
     ["line 4, column 10", "byte 0xe9 at offset", "not UTF-8", "expected a UTF-8"]),
    ("utf-16", "\ufeff".encode("utf-16-le") + (HEAD + "parameters: {lr: {values: [1]}}\n").encode("utf-16-le"), None,
     ["line 1, column 1: UTF-16 text (it starts with a UTF-16 byte-order mark)", "expected a UTF-8 encoded"]),
    ("utf-16-be", ("\ufeff" + HEAD + "parameters: {lr: {values: [1]}}\n").encode("utf-16-be"), None,
     ["UTF-16 text"]),
    ("utf-32", (HEAD + "parameters: {lr: {values: [1]}}\n").encode("utf-32"), None, ["UTF-32 text"]),
    ("utf-16-no-bom", (HEAD + "parameters: {lr: {values: [1]}}\n").encode("utf-16-le"), None,
     ["line 1, column 1: UTF-16 text without a byte-order mark (every other byte is 0x00)",
      "expected a UTF-8 encoded"]),
    ("utf-16-be-no-bom", (HEAD + "parameters: {lr: {values: [1]}}\n").encode("utf-16-be"), None,
     ["UTF-16 text without a byte-order mark"]),
    ("utf-16-no-bom-non-ascii-start",
     ("# 扫描 café\n" + HEAD + "parameters: {lr: {values: [1]}}\n").encode("utf-16-le"), None,
     ["UTF-16 text without a byte-order mark"]),
    ("utf-32-no-bom", (HEAD + "parameters: {lr: {values: [1]}}\n").encode("utf-32-le"), None,
     ["UTF-32 text without a byte-order mark"]),
    ("control-character", HEAD + 'name: "a\x07b"\n', None,
     ["line 3, column 9", "unacceptable character #x0007", "expected printable text"]),
    ("deep-nesting", nested_parameters(1000), "parameters.x.parameters",
     [f"nested deeper than {MAX_DEPTH} levels", "line 3"]),
    ("deep-through-aliases", alias_chain(2 * MAX_DEPTH), "entity[",
     [f"nested deeper than {MAX_DEPTH} levels through alias"]),
    ("alias-bomb-9-levels", alias_bomb(9), "entity[5][0]",
     [f"aliases (*name) expand to more than {MAX_ALIAS_NODES:,} nodes", "line 7: ", "billion laughs"]),
    ("alias-bomb-12-levels", alias_bomb(12), "entity[5][0]",
     [f"aliases (*name) expand to more than {MAX_ALIAS_NODES:,} nodes"]),
    ("alias-cycle", "entity: &a [*a]\n" + HEAD, "entity[0]",
     ["line 1", "alias *a refers to a node that contains it"]),
    ("duplicate-top-key", HEAD + "parameters: {lr: {values: [1]}}\nmethod: random\n", "method",
     ["duplicate key 'method' on line 4 (first on line 1)"]),
    ("duplicate-nested-key", HEAD + "parameters:\n  lr:\n    values: [1]\n  lr:\n    value: 2\n",
     "parameters.lr", ["duplicate key 'lr' on line 6 (first on line 4)"]),
    ("duplicate-after-merge", "entity: &d {x: 1}\nproject:\n  <<: *d\n  y: 1\n  y: 2\n" + HEAD,
     "project.y", ["duplicate key 'y' on line 5 (first on line 4)"]),
    ("python-tag", HEAD + "parameters:\n  lr:\n    values: !!python/object/apply:os.system [ls]\n",
     "parameters.lr.values", ["line 5, column 13", "unsupported YAML tag '!!python/object/apply:os.system'"]),
    ("unknown-local-tag", HEAD + "parameters:\n  lr: !mine {values: [1]}\n", "parameters.lr",
     ["line 4, column 7", "unsupported YAML tag '!mine'"]),
    ("bad-int-tag", HEAD + "seed: !!int abc\n", "seed", ["line 3, column 7", "cannot read 'abc' as !!int"]),
    ("bad-float-tag", HEAD + "parameters:\n  lr: {values: [!!float fast]}\n", "parameters.lr.values[0]",
     ["cannot read 'fast' as !!float"]),
    ("unhashable-key", HEAD + "? [a, b]\n: 1\n", None,
     ["line 3", "a key that is a list or a mapping", "expected a key of text, a number, a boolean or null"]),
    ("long-plain-key", HEAD + "k" * 1100 + ": 1\n", None,
     ["line 3", "a key of more than 1024 characters", "YAML reads such a key only after '? '"]),
    ("flow-key-without-space", HEAD + "parameters: {lr: {values: [1]}}\nentity: {team:ml}\n", "entity.team:ml",
     ["line 4, column 10", "'team:ml' in {...} reads as a key with no value", "expected 'team: ml'"]),
]


@pytest.mark.parametrize(("content", "key", "fragments"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_spec_file_is_one_spec_error_naming_file_key_and_line(tmp_path, content, key, fragments):
    path = tmp_path / "sweep.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: " + (f"{key}" if key else ""))
    if key is None:
        assert info.value.key is None
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(("content", "key", "fragments"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_config_file_is_one_config_error(tmp_path, content, key, fragments):
    path = tmp_path / "base.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigError) as info:
        load_yaml_mapping(path, what="config")
    assert "\n" not in str(info.value) and str(info.value).startswith(f"{path}: ")
    assert fragments[0] in str(info.value)


def test_file_larger_than_the_limit_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("w") as fh:
        fh.write(HEAD)
        fh.write(("# " + "x" * 1022 + "\n") * (MAX_FILE_BYTES // 1024 + 1))
    with pytest.raises(SpecError, match=r"huge\.yaml: the sweep spec file is larger than 4 MiB; "
                                         r"expected a sweep spec file of at most 4,194,304 bytes"):
        load_spec(path)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_endless_file_is_refused_by_size():
    with pytest.raises(ConfigError, match="larger than"):
        load_yaml_mapping("/dev/zero")


def test_alias_bomb_is_refused_by_counting_nodes_not_by_expanding_them():
    # 9**40 strings if expanded: only a count on the composed graph can refuse it at once
    with pytest.raises(YAMLInputError, match="expand to more than"):
        yaml_load(alias_bomb(40))


def test_recursion_limit_is_not_reached_at_any_depth():
    with pytest.raises(YAMLInputError, match="nested deeper"):
        yaml_load("[" * (sys.getrecursionlimit() * 3) + "]" * (sys.getrecursionlimit() * 3))


def test_depth_up_to_the_limit_loads():
    text = "a: " + "[" * (MAX_DEPTH - 2) + "1" + "]" * (MAX_DEPTH - 2) + "\n"
    data = yaml_load(text)
    depth = 1
    node = data["a"]
    while isinstance(node, list):
        node, depth = node[0], depth + 1
    assert depth == MAX_DEPTH - 1
    with pytest.raises(YAMLInputError, match="nested deeper"):
        yaml_load("a: " + "[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH + "\n")


def test_nested_parameters_as_deep_as_a_real_spec_get_load(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(nested_parameters(20))
    spec = load_spec(path)
    assert list(spec.space.params) == ["x." * 20 + "y"]


def test_anchors_aliases_and_merge_keys_used_normally_still_load():
    text = (
        "defaults: &d {lr: 0.1, layers: [1, 2, 3], opt: {name: adam}}\n"
        "a: {<<: *d, lr: 0.2}\n"
        "b:\n  <<: [*d, {extra: 1}]\n  opt: sgd\n"
        "c: *d\nd: [*d, *d, *d]\n"
    )
    data = yaml_load(text)
    assert data["a"] == {"lr": 0.2, "layers": [1, 2, 3], "opt": {"name": "adam"}}
    assert data["b"]["opt"] == "sgd" and data["b"]["extra"] == 1
    assert data["d"] == [data["defaults"]] * 3


def test_many_small_aliases_below_the_limit_load():
    count = MAX_ALIAS_NODES // 3 - 10          # each alias of [1] stands for 2 nodes
    data = yaml_load("x: &x [1]\ny: [" + ", ".join(["*x"] * count) + "]\n")
    assert len(data["y"]) == count


def test_same_key_in_different_mappings_is_no_duplicate():
    assert yaml_load("a: {x: 1}\nb: {x: 2}\nx: 3\n") == {"a": {"x": 1}, "b": {"x": 2}, "x": 3}


def test_keys_equal_as_values_are_duplicates_even_when_written_differently():
    with pytest.raises(YAMLInputError, match="duplicate key 1 on line 2 \\(first on line 1\\)"):
        yaml_load("1: a\n0x1: b\n")


def test_loading_stays_safe():
    with pytest.raises(YAMLInputError, match="unsupported YAML tag"):
        yaml_load("!!python/object/new:os.system [echo hacked]")
    assert yaml_load("lr: 1e-3\nwhen: 2024-01-02\n")["lr"] == 0.001


def test_a_colon_inside_a_flow_key_is_fine_when_quoted_or_given_a_value():
    assert yaml_load('{"a":1, b: c:d, "e:f": 2, t: 12:30}') == {"a": 1, "b": "c:d", "e:f": 2, "t": "12:30"}
    assert yaml_load("a:b: 1\nurl: http://x\n") == {"a:b": 1, "url": "http://x"}   # block style: as written


def test_an_integer_too_long_to_store_is_refused_in_any_base():
    # a hexadecimal one passed (it reads fast), then every json.dumps of it failed: the driver crashed mid-sweep
    for text in ("x: 0x" + "f" * 5000, "x: 0b" + "1" * 20000, "x: " + "9" * 5000):
        with pytest.raises(YAMLInputError, match="x: |cannot read"):
            yaml_load(text)
    assert yaml_load("x: 0x" + "f" * 1000)["x"] == 16 ** 1000 - 1



def test_a_decimal_integer_too_long_to_store_says_so_not_what_python_says():
    """`epochs=999...` (5,000 digits) was refused with Python's own words: 'Exceeds the limit (4300 digits) for
    integer string conversion ... use sys.set_int_max_str_digits() to increase the limit', advice for a
    programmer, not for a config."""
    for text in ("x: " + "9" * 5000, "x: -" + "9" * 5000, "x: " + "1_" * 4400 + "1"):
        with pytest.raises(YAMLInputError) as err:
            yaml_load(text)
        assert "more than 4300 decimal digits cannot be stored" in str(err.value), str(err.value)[:300]
        assert "set_int_max_str_digits" not in str(err.value)


@pytest.mark.parametrize("text", ["sep: =\n", "sep: [=, '-']\n", "sep: {a: =}\n"], ids=["plain", "list", "flow"])
def test_a_plain_equals_sign_is_text_not_yaml_11_value_key(text):
    # PyYAML's YAML 1.1 resolver tags a plain `=` as !!value, which it cannot build: a config `sep: =` or an
    # override `sep==` was refused as an "unsupported YAML tag '!!value'" the user never wrote
    assert "=" in str(yaml_load(text)["sep"])
    assert parse_override("sep==") == ("sep", "=")


def test_a_nul_byte_in_utf8_text_is_not_taken_for_utf16(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_bytes(HEAD.encode() + b"name: a\x00b\n")
    with pytest.raises(SpecError, match=r"unacceptable character #x0000") as info:
        load_spec(path)
    assert "UTF-16" not in str(info.value)


def test_refusals_are_yaml_errors_for_overrides_too():
    assert isinstance(YAMLInputError("x"), yaml.YAMLError)
    with pytest.raises(ConfigError, match="cannot read the value of override 'x': duplicate key 'a'"):
        parse_override("x={a: 1, a: 2}")


def test_read_yaml_names_the_file_with_the_error_class_asked_for(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("a: 1\na: 2\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(path, what="profile", error=ConfigError)
    assert info.value.file == str(path) and info.value.key == "a"
    assert info.value.expected == "each key once in a mapping"
