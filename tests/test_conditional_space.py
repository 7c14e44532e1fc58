"""Conditional parameters: the `when` / `condition` grammar, its errors, and the space it builds."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sweeplab.errors import SpecError
from sweeplab.space import Condition, parse_parameters
from sweeplab.spec import parse_spec
from sweeplab.testing.searchers import CONDITIONAL_GRID_SIZE, CONDITIONAL_PARAMETERS, CONTRACT_PARAMETERS

OPTIMIZER: dict[str, Any] = {
    "lr": {"min": 0.001, "max": 0.1},
    "optimizer": {
        "values": ["adam", "sgd", "rmsprop"],
        "when": {
            "sgd": {"momentum": {"min": 0.0, "max": 0.99}, "nesterov": {"values": [True, False]}},
            "adam": {"beta1": {"min": 0.8, "max": 0.999}},
        },
    },
}


def _error(parameters: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_parameters(parameters)
    return info.value


# ------------------------------------------------------------------------------------------ grammar


def test_when_children_are_siblings_of_their_parent_and_conditioned_on_its_value():
    space = parse_parameters(OPTIMIZER)
    assert list(space.params) == ["lr", "optimizer", "momentum", "nesterov", "beta1"]
    assert space.conditions == {
        "momentum": Condition("optimizer", ("sgd",)),
        "nesterov": Condition("optimizer", ("sgd",)),
        "beta1": Condition("optimizer", ("adam",)),
    }
    assert space.keys["momentum"] == "parameters.optimizer.when.sgd.momentum"
    assert "momentum: uniform(min=0.0, max=0.99) if optimizer in ['sgd']" in space.describe()


def test_a_wandb_spec_without_the_new_keys_parses_exactly_as_before():
    space = parse_parameters(CONTRACT_PARAMETERS)
    assert not space.conditional and space.conditions == {}
    assert list(space.params) == ["depth", "dropout", "optimizer.name", "optimizer.momentum", "epochs"]
    assert space.grid_size() == 3 * 3 * 3 * 2 == len(list(space.grid()))


def test_condition_by_name_and_nesting_to_any_depth():
    space = parse_parameters(CONDITIONAL_PARAMETERS)
    assert space.conditions["decay"] == Condition("optimizer", ("sgd", "rmsprop"))
    assert space.conditions["model.layers"] == Condition("model.family", ("mlp",))
    assert space.conditions["model.width2"] == Condition("model.layers", (2,))   # YAML key 2 is the int 2
    assert space.conditions["model.leaves"] == Condition("model.family", ("tree",))


def test_a_condition_on_a_parameter_defined_later_puts_the_parent_first():
    space = parse_parameters({"centered": {"values": [True, False], "condition": {"param": "opt", "in": "rms"}},
                              "opt": {"values": ["rms", "sgd"]}})
    assert list(space.params) == ["opt", "centered"]
    assert space.conditions["centered"] == Condition("opt", ("rms",))


def test_a_group_with_a_condition_conditions_all_its_parameters():
    space = parse_parameters({
        "model": {"values": ["mlp", "cnn"]},
        "mlp": {"condition": {"param": "model", "in": ["mlp"]},
                "parameters": {"hidden": {"values": [8, 16]},
                               "layers": {"values": [1, 2], "when": {2: {"hidden2": {"values": [4]}}}}}},
    })
    assert space.conditions["mlp.hidden"] == Condition("model", ("mlp",))
    assert space.conditions["mlp.hidden2"] == Condition("mlp.layers", (2,))   # keeps its narrower one
    assert {json.dumps(p, sort_keys=True) for p in space.grid()} == {
        json.dumps(p, sort_keys=True) for p in (
            {"model": "cnn"},
            {"model": "mlp", "mlp.hidden": 8, "mlp.layers": 1}, {"model": "mlp", "mlp.hidden": 16, "mlp.layers": 1},
            {"model": "mlp", "mlp.hidden": 8, "mlp.layers": 2, "mlp.hidden2": 4},
            {"model": "mlp", "mlp.hidden": 16, "mlp.layers": 2, "mlp.hidden2": 4})}


def test_a_parameter_written_identically_under_two_values_is_one_parameter_active_for_both():
    trees = {"n_estimators": {"values": [50, 100]}}
    space = parse_parameters({"model": {"values": ["svc", "rf", "gb"],
                                        "when": {"rf": trees, "gb": trees, "svc": {"C": {"values": [1.0]}}}}})
    assert space.conditions["n_estimators"] == Condition("model", ("rf", "gb"))
    assert space.grid_size() == 1 + 2 + 2


def test_a_value_may_have_no_parameters_of_its_own():
    space = parse_parameters({"opt": {"values": ["adam", "sgd"], "when": {"adam": None, "sgd": {"m": {"value": 1}}}}})
    assert list(space.grid()) == [{"opt": "adam"}, {"opt": "sgd", "m": 1}]


# ------------------------------------------------------------------------------------------ errors

BAD: dict[str, tuple[dict[str, Any], str, str]] = {
    "condition-on-unknown-parameter": (
        {"opt": {"values": ["sgd"]}, "m": {"value": 1, "condition": {"param": "optimiser", "in": ["sgd"]}}},
        "parameters.m.condition.param", "condition on an unknown parameter"),
    "when-value-outside-parent-values": (
        {"opt": {"values": ["adam", "sgd"], "when": {"sgdd": {"m": {"value": 1}}}}},
        "parameters.opt.when.sgdd", "'sgdd' is not a value of 'opt'"),
    "condition-value-outside-parent-values": (
        {"opt": {"values": ["adam", "sgd"]}, "m": {"value": 1, "condition": {"param": "opt", "in": ["sgd", "rms"]}}},
        "parameters.m.condition.in", "'rms' is not a value of 'opt'"),
    "cycle": (
        {"a": {"values": [1, 2], "condition": {"param": "b", "in": [1]}},
         "b": {"values": [1, 2], "condition": {"param": "a", "in": [1]}}},
        "parameters.a.condition", "conditions form a cycle: a -> b -> a"),
    "self-cycle": (
        {"a": {"values": [1, 2], "condition": {"param": "a", "in": [1]}}},
        "parameters.a.condition", "conditions form a cycle: a -> a"),
    "cycle-through-when": (
        {"a": {"values": [1, 2], "condition": {"param": "c", "in": [1]}, "when": {1: {"c": {"values": [1, 2]}}}}},
        "parameters.a.condition", "cycle"),
    "when-on-a-continuous-parameter": (
        {"lr": {"min": 0.1, "max": 1.0, "when": {0.5: {"m": {"value": 1}}}}},
        "parameters.lr.when", "'when' needs a parameter with a finite set of values"),
    "condition-on-a-continuous-parameter": (
        {"lr": {"min": 0.1, "max": 1.0}, "m": {"value": 1, "condition": {"param": "lr", "in": [0.5]}}},
        "parameters.m.condition.param", "finite set of values"),
    "when-not-a-mapping": (
        {"opt": {"values": ["sgd"], "when": ["sgd"]}}, "parameters.opt.when", "when must map values"),
    "when-child-with-a-condition": (
        {"opt": {"values": ["a", "b"], "when": {"a": {"m": {"value": 1, "condition": {"param": "opt", "in": ["b"]}}}}}},
        "parameters.opt.when.a.m.condition", "cannot also have a condition"),
    "different-definitions-under-two-values": (
        {"opt": {"values": ["a", "b"], "when": {"a": {"m": {"value": 1}}, "b": {"m": {"value": 2}}}}},
        "parameters.opt.when.b.m", "defined twice"),
    "when-child-clashes-with-a-plain-parameter": (
        {"m": {"value": 0}, "opt": {"values": ["a"], "when": {"a": {"m": {"value": 1}}}}},
        "parameters.opt.when.a.m", "defined twice"),
    "condition-missing-in": (
        {"opt": {"values": ["a"]}, "m": {"value": 1, "condition": {"param": "opt"}}},
        "parameters.m.condition.in", "a condition needs 'in'"),
    "condition-unknown-key": (
        {"opt": {"values": ["a"]}, "m": {"value": 1, "condition": {"param": "opt", "equals": "a"}}},
        "parameters.m.condition.equals", "unknown key 'equals'"),
    "condition-not-a-mapping": (
        {"opt": {"values": ["a"]}, "m": {"value": 1, "condition": "opt == a"}},
        "parameters.m.condition", "a condition must be a mapping"),
    "bad-parameter-inside-when": (
        {"opt": {"values": ["a"], "when": {"a": {"m": {"min": 2, "max": 1}}}}},
        "parameters.opt.when.a.m.min", "min must be less than max"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_conditional_grammar_names_the_key_path(case: str):
    parameters, key, message = BAD[case]
    err = _error(parameters)
    assert err.key == key, str(err)
    assert message in str(err)


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["SWEEPLAB_STORE"] = str(cwd / "store")
    return subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("case", ["condition-on-unknown-parameter", "when-value-outside-parent-values", "cycle",
                                  "when-on-a-continuous-parameter"])
def test_bad_conditional_grammar_is_exit_2_on_the_command_line(case: str, tmp_path: Path):
    parameters, key, message = BAD[case]
    spec = tmp_path / "sweep.yaml"
    spec.write_text(json.dumps({"method": "random", "function": "trials.py:quick", "parameters": parameters}))
    cp = _cli(tmp_path, "sweep", str(spec), "--trials", "1")
    assert cp.returncode == 2, (cp.stdout, cp.stderr)
    (line,) = cp.stderr.splitlines()
    assert line.startswith("error: ") and f"sweep.yaml: {key}: " in line and message in line, line
    assert not (tmp_path / "store").exists()   # nothing written


def test_grid_with_a_continuous_conditional_parameter_names_its_when_key_path():
    with pytest.raises(SpecError) as info:
        parse_spec({"method": "grid", "function": "m:f", "parameters": OPTIMIZER})
    assert info.value.key == "parameters.lr"
    with pytest.raises(SpecError) as info:
        parse_spec({"method": "grid", "function": "m:f", "parameters": {**OPTIMIZER, "lr": {"value": 0.1}}})
    assert info.value.key == "parameters.optimizer.when.sgd.momentum"


# ------------------------------------------------------------------------------------------ the space


def test_the_grid_is_the_tree_product_of_valid_combinations():
    space = parse_parameters(CONDITIONAL_PARAMETERS)
    grid = list(space.grid())
    assert space.grid_size() == len(grid) == CONDITIONAL_GRID_SIZE
    assert len({json.dumps(p, sort_keys=True) for p in grid}) == len(grid)
    for params in grid:
        assert space.contains(params), params
        assert ("momentum" in params) == ("nesterov" in params) == (params["optimizer"] == "sgd")
        assert ("decay" in params) == (params["optimizer"] in ("sgd", "rmsprop"))
        assert ("model.width2" in params) == (params.get("model.layers") == 2)


def test_sampling_draws_only_active_parameters():
    space = parse_parameters(OPTIMIZER)
    rng = random.Random(0)
    seen = set()
    for _ in range(200):
        params = space.sample(rng)
        seen.add(params["optimizer"])
        assert space.contains(params)
        assert set(params) == {"lr", "optimizer"} | {"sgd": {"momentum", "nesterov"}, "adam": {"beta1"},
                                                     "rmsprop": set()}[params["optimizer"]]
    assert seen == {"adam", "sgd", "rmsprop"}


def test_contains_rejects_an_inactive_parameter_and_a_missing_active_one():
    space = parse_parameters(OPTIMIZER)
    assert space.contains({"lr": 0.01, "optimizer": "adam", "beta1": 0.9})
    assert not space.contains({"lr": 0.01, "optimizer": "adam", "beta1": 0.9, "momentum": 0.5})   # inactive
    assert not space.contains({"lr": 0.01, "optimizer": "sgd", "momentum": 0.5})                 # nesterov missing
    assert space.prune({"lr": 0.01, "optimizer": "adam", "beta1": 0.9, "momentum": 0.5}) == {
        "lr": 0.01, "optimizer": "adam", "beta1": 0.9}


def test_from_unit_uses_one_coordinate_per_parameter_and_ignores_inactive_ones():
    space = parse_parameters(OPTIMIZER)
    assert space.dimension == 5
    adam = space.from_unit([0.5, 0.1, 0.3, 0.7, 0.5])   # lr, optimizer (0.1: adam), momentum, nesterov, beta1
    assert set(adam) == {"lr", "optimizer", "beta1"} and adam["optimizer"] == "adam"
    sgd = space.from_unit([0.5, 0.5, 0.3, 0.7, 0.5])
    assert set(sgd) == {"lr", "optimizer", "momentum", "nesterov"}


def test_when_keys_may_be_the_string_form_of_the_values_as_in_json():
    """A stored spec is JSON, whose keys are strings: `when: {"2": ...}` must mean the int 2 (resume)."""
    space = parse_parameters({"layers": {"values": [1, 2], "when": {"2": {"w": {"value": 8}}}},
                              "flag": {"values": [True, False], "when": {"true": {"v": {"value": 1}}}},
                              "mixed": {"values": [3, "3"], "when": {"3": {"u": {"value": 1}}}}})
    assert space.conditions["w"] == Condition("layers", (2,))
    assert space.conditions["v"] == Condition("flag", (True,))
    assert space.conditions["u"] == Condition("mixed", ("3",))   # the string itself wins
    assert _error({"layers": {"values": [1, 2], "when": {"3": {"w": {"value": 8}}}}}).key == "parameters.layers.when.3"
