"""Typed configs (dataclasses and pydantic models): what `coerce` accepts, refuses and how it names the key."""

from __future__ import annotations

import dataclasses
import enum
from typing import Literal, Optional, Union

import pydantic
import pytest

from sweeplab.config import coerce
from sweeplab.errors import ConfigError


class Act(enum.Enum):
    relu = "relu"
    gelu = "gelu"


class Level(enum.IntEnum):
    low = 1
    high = 2


@dataclasses.dataclass(frozen=True)
class LayerDC:
    size: int = 4


@dataclasses.dataclass(frozen=True)
class ConvDC:
    kernel: int = 3


@dataclasses.dataclass(frozen=True)
class TrainDC:
    lr: float = 0.1
    epochs: int = 10
    flag: bool = False
    act: Act = Act.relu
    kind: Literal["mlp", "cnn"] = "mlp"
    clip: Optional[float] = None
    width: Union[int, str] = 1
    layers: list[LayerDC] = dataclasses.field(default_factory=list)
    named: dict[str, LayerDC] = dataclasses.field(default_factory=dict)
    block: Union[LayerDC, ConvDC, None] = None
    sizes: list[int] = dataclasses.field(default_factory=list)
    level: Level = Level.high
    rank: Literal[1, 2] = 2


class LayerPM(pydantic.BaseModel):
    size: int = 4


class ConvPM(pydantic.BaseModel):
    kernel: int = 3


class TrainPM(pydantic.BaseModel):
    lr: float = 0.1
    epochs: int = 10
    flag: bool = False
    act: Act = Act.relu
    kind: Literal["mlp", "cnn"] = "mlp"
    clip: Optional[float] = None
    width: Union[int, str] = 1
    layers: list[LayerPM] = []
    named: dict[str, LayerPM] = {}
    block: Union[LayerPM, ConvPM, None] = None
    sizes: list[int] = []
    level: Level = Level.high
    rank: Literal[1, 2] = 2


SCHEMAS = [pytest.param(TrainDC, id="dataclass"), pytest.param(TrainPM, id="pydantic")]


def _error(data, schema) -> str:
    with pytest.raises(ConfigError) as info:
        coerce(data, schema)
    return str(info.value)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_accepted_conversions(schema):
    out = coerce({"epochs": 3.0, "lr": 1, "act": "gelu", "kind": "cnn", "clip": 1, "width": "auto",
                  "layers": [{"size": 2}], "named": {"a": {}}, "block": {"kernel": 5}, "sizes": [1, 2.0],
                  "level": 1, "rank": 1}, schema)
    assert out.epochs == 3 and type(out.epochs) is int   # W&B's q_uniform samples 32.0 for an int field
    assert out.lr == 1.0 and out.act is Act.gelu and out.kind == "cnn" and out.width == "auto"
    assert out.layers[0].size == 2 and out.named["a"].size == 4 and out.block.kernel == 5
    assert out.sizes == [1, 2] and out.level is Level.low and out.rank == 1


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize(("data", "path"), [
    ({"epochs": True}, "epochs"),
    ({"lr": False}, "lr"),
    ({"clip": True}, "clip"),
    ({"sizes": [1, True]}, "sizes[1]"),
    ({"layers": [{"size": True}]}, "layers[0].size"),
    ({"named": {"a": {"size": False}}}, "named.a.size"),
    ({"level": True}, "level"),
    ({"rank": True}, "rank"),
], ids=["int", "float", "optional-float", "list-item", "in-list-of-models", "in-dict-of-models", "int-enum",
        "literal-of-numbers"])
def test_a_bool_is_not_a_number(schema, data, path):
    # `epochs: yes` or `batch_size=true` ran with 1 (pydantic's lax mode reads True as 1)
    text = _error(data, schema)
    assert text.startswith(f"{path}: wrong type"), text
    assert "got True" in text or "got False" in text
    assert "bool" in text


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize(("data", "path", "hint"), [
    ({"layers": [{"size": 3}, {"sise": 5}]}, "layers[1].sise", "size"),
    ({"named": {"a": {"sise": 5}}}, "named.a.sise", "size"),
    ({"block": {"kernal": 5}}, "block.kernal", "kernel"),
], ids=["list-of-models", "dict-of-models", "union-of-models"])
def test_unknown_keys_inside_containers_are_errors(schema, data, path, hint):
    # they were silently dropped: a typo in a list of layer configs ran with the default
    text = _error(data, schema)
    assert text.startswith(f"{path}: unknown key"), text
    assert f"did you mean '{hint}'?" in text


@pytest.mark.parametrize("schema", SCHEMAS)
def test_a_union_error_names_the_field_not_pydantics_member_tag(schema):
    text = _error({"width": 1.5}, schema)
    assert text.startswith("width: wrong type"), text   # was 'width.int: wrong type'
    assert "got 1.5" in text


# ------------------------------------------------------------------- a sweep's parameters against the typed config

_TRAIN = '''
from dataclasses import dataclass, field

@dataclass(frozen=True)
class Model:
    hidden: int = 64

@dataclass(frozen=True)
class TrainConfig:
    lr: float
    batch_size: int = 16
    model: Model = field(default_factory=Model)

def train(config: TrainConfig, run):
    return {"loss": config.lr}
'''


def _dry_run(tmp_path, parameters: str):
    import os
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(_TRAIN)
    (tmp_path / "base.yaml").write_text("lr: 0.1\nbatch_size: 16\nmodel: {hidden: 64}\n")
    (tmp_path / "sweep.yaml").write_text(
        "function: train:train\nconfig: base.yaml\nmethod: random\nmetric: {name: loss, goal: minimize}\n"
        f"run_cap: 60\nparameters:\n{parameters}")
    env = {**os.environ, "COLUMNS": "240"}
    return subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--dry-run"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("parameters", "expected"), [
    ("  batch_size: {values: [32, auto]}\n",
     ["for batch_size='auto'", "batch_size: wrong type; got 'auto'; expected int"]),
    ("  model.hiden: {value: 8}\n", ["model.hiden: unknown key for Model", "did you mean 'hidden'?"]),
], ids=["wrong-type", "not-a-field"])
def test_dry_run_refuses_parameters_that_do_not_fit_the_typed_config(tmp_path, parameters, expected):
    # `values: [32, "auto"]` for an int field: the dry-run said "valid" and half the sweep's trials failed
    done = _dry_run(tmp_path, "  lr: {min: 0.001, max: 0.1}\n" + parameters)
    assert done.returncode == 2, done.stdout + done.stderr
    err = " ".join(done.stderr.split())
    assert all(e in err for e in expected), err
    assert not (tmp_path / ".sweeplab").exists()


def test_dry_run_of_parameters_that_fit_says_they_were_checked(tmp_path):
    done = _dry_run(tmp_path, "  lr: {min: 0.001, max: 0.1}\n  batch_size: {values: [32, 64]}\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TrainConfig" in done.stdout, done.stdout


# ------------------------------------------------------------------------------------- pydantic aliases

class Aliased(pydantic.BaseModel):
    lr: float = pydantic.Field(0.1, alias="learning_rate")
    eta: float = pydantic.Field(0.1, validation_alias=pydantic.AliasChoices("step_size", "eta0"))


class AliasedByName(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(populate_by_name=True)
    lr: float = pydantic.Field(0.1, alias="learning_rate")


def test_a_field_name_pydantic_would_ignore_for_its_alias_is_an_unknown_key():
    # `lr: 0.5` for a field aliased `learning_rate`: pydantic ignored it and the trial ran with lr=0.1
    text = _error({"lr": 0.5}, Aliased)
    assert text.startswith("lr: unknown key for Aliased"), text
    assert "learning_rate" in text
    assert coerce({"learning_rate": 0.5, "eta0": 0.2}, Aliased).eta == 0.2   # each of AliasChoices' names
    assert coerce({"step_size": 0.3}, Aliased).eta == 0.3
    assert coerce({"lr": 0.5}, AliasedByName).lr == 0.5 and coerce({"learning_rate": 0.4}, AliasedByName).lr == 0.4


def test_a_pydantic_dataclass_with_extra_allow_accepts_unknown_keys():
    @pydantic.dataclasses.dataclass(config=pydantic.ConfigDict(extra="allow"))
    class Loose:
        lr: float = 0.1

    assert coerce({"lr": 0.2, "other": 1}, Loose).lr == 0.2


def test_a_profile_key_no_trial_can_build_names_itself_when_the_grid_has_one_point(tmp_path):
    # with a free worker the grid ran out before its only trial failed: the sweep ended 'finished', with 'search
    # space exhausted (grid finished)' on stderr and the config error only in `sweeplab status`
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(_TRAIN)
    (tmp_path / "base.yaml").write_text("lr: 0.1\n")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "local.yaml").write_text("num_wrkers: 2\n")
    (tmp_path / "sweep.yaml").write_text(
        "name: one\nfunction: train:train\nconfig: base.yaml\nprofile: local\nmethod: grid\n"
        "metric: {name: loss, goal: minimize}\nparameters:\n  lr: {values: [0.1]}\n")
    env = {**os.environ, "COLUMNS": "240"}
    cmd = [sys.executable, "-m", "sweeplab"]
    done = subprocess.run([*cmd, "sweep", "sweep.yaml", "-w", "2"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    err = " ".join(done.stderr.split())
    assert "profile local" in err and "num_wrkers: unknown key for TrainConfig" in err, err
    assert "exhausted" not in err, err
    status = subprocess.run([*cmd, "status", "one", "--json"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60, check=True)
    sweep = json.loads(status.stdout)["sweep"]
    assert sweep["state"] == "failed" and "num_wrkers" in sweep["end_reason"], sweep
