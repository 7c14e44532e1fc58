"""Experiment config: YAML files, profiles, dotted overrides, typed configs."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pydantic
import pytest

from sweeplab.config import (
    Config,
    apply_overrides,
    coerce,
    deep_merge,
    find_profile,
    load_yaml_mapping,
    parse_override,
    profile_search_path,
    resolve_config,
    typed_schema_of,
)
from sweeplab.errors import ConfigError, SweeplabError

# ------------------------------------------------------------------------------------------ overrides


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("lr=0.01", "lr", 0.01),
        ("lr=1e-3", "lr", 0.001),
        ("lr=-2.5E+2", "lr", -250.0),
        ("epochs=3", "epochs", 3),
        ("name=abc", "name", "abc"),
        ("name='007'", "name", "007"),
        ("layers=[1,2]", "layers", [1, 2]),
        ("opt={name: adam, beta: 0.9}", "opt", {"name": "adam", "beta": 0.9}),
        ("flag=true", "flag", True),
        ("flag=False", "flag", False),
        ("x=null", "x", None),
        ("x=", "x", ""),
        ("model.hidden=256", "model.hidden", 256),
        ("data.dir=/tmp/a=b", "data.dir", "/tmp/a=b"),
        ("ver=1.10", "ver", 1.1),
        ("tag=v1.10", "tag", "v1.10"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_parse_override_reads_values_as_yaml_scalars(text, key, value):
    assert parse_override(text) == (key, value)
    assert type(parse_override(text)[1]) is type(value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("novalue", "override has no value"),
        ("=3", "override has no key"),
        ("layers=[1,2", "cannot read the value of override 'layers'"),
        ("a..b=1", "not a dotted name"),
        ("a b=1", "not a dotted name"),
    ],
    ids=["no-equals", "no-key", "bad-yaml", "empty-segment", "space-in-key"],
)
def test_parse_override_rejects_malformed_text(text, fragment):
    with pytest.raises(ConfigError) as info:
        parse_override(text)
    assert fragment in str(info.value)
    assert isinstance(info.value, SweeplabError)


def test_apply_overrides_creates_nested_dicts_and_leaves_base_unchanged():
    base = {"model": {"hidden": 64, "act": "relu"}, "lr": 0.1}
    out = apply_overrides(base, ["model.hidden=256", "opt.betas.b1=0.9", "lr=1e-2"])
    assert out == {"model": {"hidden": 256, "act": "relu"}, "lr": 0.01, "opt": {"betas": {"b1": 0.9}}}
    assert base == {"model": {"hidden": 64, "act": "relu"}, "lr": 0.1}


def test_apply_overrides_later_override_wins():
    assert apply_overrides({}, ["a=1", "a=2"]) == {"a": 2}


def test_apply_overrides_into_a_scalar_is_an_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"model: cannot set 'model.hidden'.*'model' is not a mapping"):
        apply_overrides({"model": "resnet"}, ["model.hidden=3"])


def test_deep_merge_is_recursive_and_does_not_alias_inputs():
    a = {"x": {"y": 1, "z": [1]}, "k": 1}
    b = {"x": {"y": 2}, "n": {"m": 1}}
    out = deep_merge(a, b)
    assert out == {"x": {"y": 2, "z": [1]}, "k": 1, "n": {"m": 1}}
    out["x"]["z"].append(2)
    out["n"]["m"] = 5
    assert a["x"]["z"] == [1] and b["n"] == {"m": 1}


def test_deep_merge_mapping_replaces_scalar_and_scalar_replaces_mapping():
    assert deep_merge({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}
    assert deep_merge({"a": {"b": 2}}, {"a": None}) == {"a": None}


# ------------------------------------------------------------------------------------------- profiles


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    (tmp_path / "config").mkdir()
    (tmp_path / "profiles").mkdir()
    (tmp_path / "config" / "base.yaml").write_text(
        "lr: 0.1\nepochs: 10\nmodel:\n  hidden: 64\n  act: relu\ndata_dir: ./data\nnum_workers: 0\n"
    )
    (tmp_path / "profiles" / "local.yaml").write_text("data_dir: /data/local\nnum_workers: 2\n")
    (tmp_path / "profiles" / "cluster.yml").write_text("data_dir: s3://bucket/data\nnum_workers: 16\n")
    return tmp_path


def test_find_profile_finds_yaml_and_yml(project):
    search = [project / "profiles"]
    assert find_profile("local", search=search) == project / "profiles" / "local.yaml"
    assert find_profile("cluster", search=search) == project / "profiles" / "cluster.yml"


def test_find_profile_first_directory_wins(project, tmp_path_factory):
    other = tmp_path_factory.mktemp("other")
    (other / "local.yaml").write_text("data_dir: other\n")
    assert find_profile("local", search=[other, project / "profiles"]) == other / "local.yaml"


def test_missing_profile_lists_the_available_ones_with_a_hint(project):
    with pytest.raises(ConfigError) as info:
        find_profile("locl", search=[project / "profiles", project / "nowhere"])
    text = str(info.value)
    assert text.startswith("profile: unknown profile")
    assert "one of the available profiles: cluster, local" in text
    assert "did you mean 'local'?" in text


def test_profile_search_path_order(tmp_path):
    base = tmp_path / "proj" / "config" / "base.yaml"
    assert profile_search_path(base, cwd=tmp_path) == [
        tmp_path / "proj" / "profiles",
        tmp_path / "proj" / "config" / "profiles",
        tmp_path / "profiles",
    ]


# ------------------------------------------------------------------------------------------- resolve


def test_merge_order_base_profile_params_overrides(project):
    cfg = resolve_config(
        base=project / "config" / "base.yaml",
        profile="local",
        params={"lr": 0.01, "model.hidden": 256, "num_workers": 4},
        overrides=["lr=0.5", "model.act=gelu"],
    )
    assert cfg == {
        "lr": 0.5,                     # override beats parameter beats base
        "epochs": 10,                  # base only
        "model": {"hidden": 256, "act": "gelu"},
        "data_dir": "/data/local",     # profile beats base
        "num_workers": 4,              # parameter beats profile
    }


def test_resolve_without_base_or_profile_uses_params_and_overrides():
    assert resolve_config(base=None, profile=None, params={"a.b": 1}, overrides=["c=2"]) == {
        "a": {"b": 1}, "c": 2,
    }


def test_resolve_uses_explicit_search_dirs(project, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("profiles")
    (elsewhere / "gpu.yaml").write_text("num_workers: 8\n")
    cfg = resolve_config(base=project / "config" / "base.yaml", profile="gpu", params={}, search=[elsewhere])
    assert cfg["num_workers"] == 8


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("lr: [1, 2\n", "invalid YAML: line"),
        ("- 1\n- 2\n", "the config must be a mapping"),
    ],
    ids=["bad-yaml", "not-a-mapping"],
)
def test_bad_base_config_names_the_file(tmp_path, content, fragment):
    path = tmp_path / "base.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        resolve_config(base=path, profile=None, params={})
    assert str(info.value).startswith(f"{path}: ")
    assert fragment in str(info.value)


def test_missing_base_config_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="base.yaml: config file not found"):
        resolve_config(base=tmp_path / "base.yaml", profile=None, params={})


def test_empty_yaml_file_is_an_empty_mapping(tmp_path):
    (tmp_path / "e.yaml").write_text("# nothing yet\n")
    assert load_yaml_mapping(tmp_path / "e.yaml") == {}


def test_yaml_files_read_exponent_floats(tmp_path):
    (tmp_path / "c.yaml").write_text("lr: 1e-4\nwd: 5E-2\nname: 1e\nver: '1e-4'\n")
    assert load_yaml_mapping(tmp_path / "c.yaml") == {"lr": 1e-4, "wd": 0.05, "name": "1e", "ver": "1e-4"}


# --------------------------------------------------------------------------------------------- Config


def test_config_attribute_and_item_access():
    cfg = Config({"lr": 0.1, "model": {"hidden": 64, "blocks": [{"k": 3}]}})
    assert cfg.lr == 0.1 and cfg["lr"] == 0.1
    assert cfg.model.hidden == 64 and cfg["model"]["hidden"] == 64
    assert cfg.model.blocks[0].k == 3
    assert isinstance(cfg.model, Config)
    assert cfg.get("missing", 7) == 7
    assert set(cfg) == {"lr", "model"} and len(cfg) == 2 and "lr" in cfg


def test_config_is_read_only_and_detached_from_its_source():
    source = {"model": {"hidden": 64}, "layers": [1, 2]}
    cfg = Config(source)
    source["model"]["hidden"] = 1
    with pytest.raises(TypeError):
        cfg.lr = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg["lr"] = 3  # type: ignore[index]
    cfg.layers.append(3)
    assert cfg.model.hidden == 64 and cfg.layers == [1, 2]


def test_config_missing_attribute_suggests_a_key():
    cfg = Config({"hidden": 64})
    with pytest.raises(AttributeError, match="did you mean 'hidden'"):
        cfg.hiden  # noqa: B018


def test_config_equality_repr_to_dict_and_pickle():
    data = {"a": {"b": [1, {"c": 2}]}}
    cfg = Config(data)
    assert cfg == data and data == cfg and cfg == Config(data) and cfg != {"a": {}}
    assert repr(cfg) == f"Config({data!r})"
    plain = cfg.to_dict()
    assert type(plain) is dict and type(plain["a"]) is dict and plain == data
    plain["a"]["b"].append(9)
    assert cfg.a.b == [1, {"c": 2}]
    assert pickle.loads(pickle.dumps(cfg)) == cfg


# --------------------------------------------------------------------------------------- typed configs


@dataclasses.dataclass(frozen=True)
class ModelDC:
    hidden: int = 64
    act: str = "relu"


@dataclasses.dataclass(frozen=True)
class TrainDC:
    lr: float
    epochs: int = 10
    model: ModelDC = dataclasses.field(default_factory=ModelDC)
    layers: list[int] = dataclasses.field(default_factory=list)
    head: ModelDC | None = None


class ModelPM(pydantic.BaseModel):
    hidden: int = 64
    act: str = "relu"


class TrainPM(pydantic.BaseModel):
    lr: float
    epochs: int = 10
    model: ModelPM = ModelPM()
    layers: list[int] = []
    head: ModelPM | None = None


SCHEMAS = [pytest.param(TrainDC, id="dataclass"), pytest.param(TrainPM, id="pydantic")]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_coerce_builds_nested_instances(schema):
    out = coerce({"lr": 0.1, "model": {"hidden": 128}, "layers": [1, 2], "head": {"act": "tanh"}}, schema)
    assert isinstance(out, schema)
    assert out.lr == 0.1 and out.epochs == 10 and out.layers == [1, 2]
    assert out.model.hidden == 128 and out.model.act == "relu"
    assert out.head.act == "tanh" and type(out.head).__name__.startswith("Model")


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"lr": 0.1, "lrr": 0.2}, "lrr: unknown key for Train"),
        ({"lr": 0.1, "model": {"hiden": 3}}, "model.hiden: unknown key for Model"),
        ({"lr": 0.1, "head": {"actt": "x"}}, "head.actt: unknown key for Model"),
    ],
    ids=["top", "nested", "optional-nested"],
)
def test_coerce_unknown_key_names_path_with_did_you_mean(schema, data, expected):
    with pytest.raises(ConfigError) as info:
        coerce(data, schema)
    text = str(info.value)
    assert text.startswith(expected)
    assert "did you mean '" in text


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize(
    ("data", "path", "value", "expected"),
    [
        ({"lr": "fast"}, "lr", "'fast'", "expected float"),
        ({"lr": 0.1, "model": {"hidden": "big"}}, "model.hidden", "'big'", "expected int"),
        ({"lr": 0.1, "layers": [1, "x"]}, "layers[1]", "'x'", "integer"),
        ({"lr": 0.1, "model": 5}, "model", "5", "expected"),
    ],
    ids=["float", "nested-int", "list-item", "not-a-mapping"],
)
def test_coerce_wrong_type_names_path_value_and_type(schema, data, path, value, expected):
    with pytest.raises(ConfigError) as info:
        coerce(data, schema)
    text = str(info.value)
    assert text.startswith(f"{path}: wrong type")
    assert f"got {value}" in text
    assert expected in text


@pytest.mark.parametrize("schema", SCHEMAS)
def test_coerce_missing_required_key(schema):
    with pytest.raises(ConfigError, match="lr: missing required key"):
        coerce({"epochs": 3}, schema)


def test_coerce_respects_pydantic_extra_allow():
    class Loose(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        lr: float = 0.1

    assert coerce({"lr": 0.2, "other": 1}, Loose).other == 1


def test_coerce_without_schema_gives_a_config():
    out = coerce({"a": {"b": 1}}, None)
    assert isinstance(out, Config) and out.a.b == 1


def test_coerce_accepts_a_config_as_input():
    assert coerce(Config({"lr": 0.3}), TrainDC).lr == 0.3


def _plain_fn(config, run):
    return None


def _dc_fn(config: TrainDC, run) -> None:
    return None


def _pm_fn(config: TrainPM, run) -> None:  # a string annotation, resolved
    return None


def _dict_fn(config: dict, run) -> None:
    return None


class _Trainer:
    def fit(self, config: TrainDC) -> None:
        return None


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (_plain_fn, None),
        (_dc_fn, TrainDC),
        (_pm_fn, TrainPM),
        (_dict_fn, None),
        (_Trainer().fit, TrainDC),
        (lambda: None, None),
    ],
    ids=["unannotated", "dataclass", "pydantic-string-annotation", "dict", "bound-method", "no-params"],
)
def test_typed_schema_of(fn, expected):
    assert typed_schema_of(fn) is expected


def test_a_missing_key_is_a_config_error_naming_its_path_and_still_an_attribute_and_key_error():
    from sweeplab.config import Config, ConfigKeyError

    c = Config({"model": {"width": 3}, "lr": 0.1, "layers": [{"units": 8}]})
    cases = [(lambda: c.model.depth, "model.depth: the config has no such key (did you mean 'width'?)"),
             (lambda: c["lrr"], "lrr: the config has no such key (did you mean 'lr'?)"),
             (lambda: c.layers[0].size, "layers[0].size: the config has no such key (its keys at layers[0]: units)")]
    for read, message in cases:
        with pytest.raises(ConfigKeyError) as info:
            read()
        assert str(info.value) == message and isinstance(info.value, (ConfigError, AttributeError, KeyError))
    assert c.get("nope", 5) == 5 and not hasattr(c, "nope") and getattr(c.model, "depth", 7) == 7
    assert pickle.loads(pickle.dumps(c.model)) == {"width": 3} and c.model == Config({"width": 3})
