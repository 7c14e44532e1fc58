"""The search space: the W&B parameter grammar, sampling, unit maps, grids and errors."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from sweeplab.errors import SpecError
from sweeplab.space import KINDS, SearchSpace, parse_parameters, unflatten

# one spec per W&B distribution, with the Python type its values must have
EVERY_KIND: list[tuple[str, dict[str, Any], tuple[type, ...]]] = [
    ("constant", {"value": [1, 2]}, (list,)),
    ("categorical", {"values": ["a", 2, None, {"k": 1}]}, (str, int, type(None), dict)),
    ("categorical_w_probabilities", {"values": [1, 2, 3], "probabilities": [0.1, 0.2, 0.7]}, (int,)),
    ("int_uniform", {"min": -3, "max": 4}, (int,)),
    ("uniform", {"min": -1.5, "max": 2}, (float,)),
    ("q_uniform", {"distribution": "q_uniform", "min": 0, "max": 10, "q": 2.5}, (float,)),
    ("log_uniform", {"distribution": "log_uniform", "min": -9.2, "max": -2.3}, (float,)),
    ("log_uniform_values", {"distribution": "log_uniform_values", "min": 1e-4, "max": 0.1}, (float,)),
    ("q_log_uniform", {"distribution": "q_log_uniform", "min": 0, "max": 5, "q": 2}, (int,)),
    ("q_log_uniform_values", {"distribution": "q_log_uniform_values", "min": 16, "max": 512, "q": 16},
     (int,)),
    ("inv_log_uniform", {"distribution": "inv_log_uniform", "min": 0, "max": 4}, (float,)),
    ("inv_log_uniform_values", {"distribution": "inv_log_uniform_values", "min": 0.01, "max": 10}, (float,)),
    ("normal", {"distribution": "normal", "mu": 3, "sigma": 2}, (float,)),
    ("q_normal", {"distribution": "q_normal", "mu": 10, "sigma": 4, "q": 3}, (int,)),
    ("log_normal", {"distribution": "log_normal", "mu": 0, "sigma": 1}, (float,)),
    ("q_log_normal", {"distribution": "q_log_normal", "mu": 1, "sigma": 0.5, "q": 0.5}, (float,)),
    ("beta", {"distribution": "beta", "a": 2, "b": 5}, (float,)),
    ("q_beta", {"distribution": "q_beta", "a": 0.5, "b": 0.5, "q": 0.1}, (float,)),
]
KIND_IDS = [k for k, _, _ in EVERY_KIND]


def one(raw: dict[str, Any]) -> Any:
    return parse_parameters({"p": raw}).params["p"]


def test_the_table_covers_every_distribution() -> None:
    assert sorted(KIND_IDS) == sorted(KINDS)


@pytest.mark.parametrize(("kind", "raw", "types"), EVERY_KIND, ids=KIND_IDS)
def test_samples_are_plain_values_within_the_support(kind: str, raw: dict[str, Any], types: tuple) -> None:
    dist = one(raw)
    assert dist.kind == kind
    rng = np.random.default_rng(0)
    draws = [dist.sample(rng) for _ in range(2000)]
    for value in draws:
        assert type(value) in types, (value, type(value))
        assert dist.contains(value), value
    for u in (0.0, 1e-15, 0.5, 1 - 1e-15, 1.0):  # unit-interval endpoints too
        assert dist.contains(dist.from_unit(u))


@pytest.mark.parametrize(("kind", "raw", "types"), EVERY_KIND, ids=KIND_IDS)
def test_from_unit_is_monotone_and_to_unit_inverts_it(kind: str, raw: dict[str, Any], types: tuple) -> None:
    dist = one(raw)
    if kind in ("constant", "categorical"):
        return  # unordered
    us = np.linspace(0.001, 0.999, 57)
    values = [dist.from_unit(float(u)) for u in us]
    assert values == sorted(values)
    if not hasattr(dist, "q") and kind not in ("categorical_w_probabilities", "int_uniform"):
        back = [dist.to_unit(v) for v in values]
        np.testing.assert_allclose(back, us, atol=1e-6)


def test_quantised_values_are_multiples_of_q() -> None:
    dist = one({"distribution": "q_uniform", "min": 0, "max": 1, "q": 0.1})
    rng = np.random.default_rng(1)
    seen = {dist.sample(rng) for _ in range(3000)}
    assert seen == {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0}  # clean, no 0.30000000000000004
    assert not dist.contains(0.15) and not dist.contains(1.1) and dist.contains(0.3)


@pytest.mark.parametrize(
    ("raw", "expected_type"),
    [
        ({"distribution": "q_uniform", "min": 0, "max": 10}, float),  # W&B's default q is 1.0
        ({"distribution": "q_uniform", "min": 0, "max": 10, "q": 1}, int),
        ({"distribution": "q_normal", "q": 2}, int),
        ({"distribution": "q_log_uniform_values", "min": 1, "max": 100, "q": 1.0}, float),
    ],
    ids=["default-q", "int-q", "q-normal-int", "float-q"],
)
def test_quantised_values_are_ints_exactly_when_q_is_an_int(raw: dict[str, Any], expected_type: type) -> None:
    dist = one(raw)
    rng = np.random.default_rng(2)
    assert {type(dist.sample(rng)) for _ in range(200)} == {expected_type}


@pytest.mark.parametrize(
    ("raw", "lo", "hi"),
    [
        ({"distribution": "log_uniform_values", "min": 1e-5, "max": 1e-1}, 1e-5, 1e-1),
        ({"distribution": "log_uniform", "min": -5, "max": 2}, math.exp(-5), math.exp(2)),
        ({"distribution": "inv_log_uniform_values", "min": 0.5, "max": 50}, 0.5, 50),
        ({"distribution": "inv_log_uniform", "min": 1, "max": 3}, math.exp(-3), math.exp(-1)),
    ],
    ids=["log_uniform_values", "log_uniform-exponents", "inv_log_uniform_values", "inv_log_uniform"],
)
def test_log_distributions_are_uniform_in_log_space(raw: dict[str, Any], lo: float, hi: float) -> None:
    dist = one(raw)
    rng = np.random.default_rng(3)
    logs = np.log([dist.sample(rng) for _ in range(3000)])
    assert logs.min() >= math.log(lo) - 1e-9 and logs.max() <= math.log(hi) + 1e-9
    uniform_in_log = stats.uniform(loc=math.log(lo), scale=math.log(hi) - math.log(lo))
    assert stats.kstest(logs, uniform_in_log.cdf).pvalue > 0.01
    # the same test rejects a plain uniform over the same range: it can fail
    plain = rng.uniform(lo, hi, 3000)
    assert stats.kstest(np.log(plain), uniform_in_log.cdf).pvalue < 1e-6


def test_normal_and_categorical_probabilities_follow_their_parameters() -> None:
    rng = np.random.default_rng(4)
    normal = [one({"mu": 3.0, "sigma": 2.0}).sample(rng) for _ in range(4000)]
    assert abs(np.mean(normal) - 3.0) < 0.1 and abs(np.std(normal) - 2.0) < 0.1
    dist = one({"values": ["a", "b", "c"], "probabilities": [0.1, 0.0, 0.9]})
    draws = [dist.sample(rng) for _ in range(4000)]
    assert draws.count("b") == 0
    assert abs(draws.count("a") / 4000 - 0.1) < 0.02


@pytest.mark.parametrize(
    ("raw", "kind", "fields"),
    [
        ({"value": 0.1}, "constant", {"value": 0.1}),
        ({"values": [1, 2]}, "categorical", {"values": (1, 2)}),
        ({"values": [1, 2], "probabilities": [0.5, 0.5]}, "categorical_w_probabilities", {}),
        ({"min": 1, "max": 8}, "int_uniform", {"min": 1, "max": 8}),
        ({"min": 1, "max": 8.0}, "uniform", {}),
        ({"min": 0.0, "max": 1}, "uniform", {}),
        ({"mu": 1.0, "sigma": 0.5}, "normal", {"mu": 1.0, "sigma": 0.5}),
        ({"mu": 1.0}, "normal", {"sigma": 1.0}),
        ({"a": 2, "b": 3}, "beta", {"a": 2, "b": 3}),
        ({"distribution": "normal"}, "normal", {"mu": 0.0, "sigma": 1.0}),
        ({"distribution": "q_log_normal"}, "q_log_normal", {"mu": 0.0, "sigma": 1.0, "q": 1.0}),
        ({"distribution": "q_beta"}, "q_beta", {"a": 1.0, "b": 1.0, "q": 1.0}),
        ({"distribution": "q_uniform", "min": 0, "max": 4}, "q_uniform", {"q": 1.0}),
        ({"distribution": "uniform", "min": 0, "max": 4}, "uniform", {"min": 0, "max": 4}),
    ],
    ids=lambda x: None,
)
def test_distribution_inference_and_defaults_follow_wandb(raw: dict, kind: str, fields: dict) -> None:
    dist = one(raw)
    assert dist.kind == kind
    for name, value in fields.items():
        assert getattr(dist, name) == value


@pytest.mark.parametrize(
    ("raw", "key", "fragment"),
    [
        ({"lr": {"min": 0.1, "maxx": 1.0}}, "parameters.lr.maxx", "did you mean 'max'"),
        ({"lr": {"min": "a", "max": 1.0}}, "parameters.lr.min", "finite number"),
        ({"lr": {"min": "1e-5", "max": 1.0}}, "parameters.lr.min", "write 1.0e-5"),
        ({"lr": {"min": True, "max": 1.0}}, "parameters.lr.min", "finite number"),
        ({"lr": {"min": 2.0, "max": 1.0}}, "parameters.lr.min", "less than max"),
        ({"lr": {"min": 1.0, "max": 1.0}}, "parameters.lr.min", "less than max"),   # int 1..1: a constant, as W&B
        ({"n": {"distribution": "int_uniform", "min": 0.5, "max": 3}}, "parameters.n.min", "integer"),
        ({"c": {"values": []}}, "parameters.c.values", "empty"),
        ({"c": {"values": "abc"}}, "parameters.c.values", "must be a list"),
        ({"c": {"values": [1, 2], "probabilities": [0.5, 0.6]}}, "parameters.c.probabilities", "sum to 1"),
        ({"c": {"values": [1, 2], "probabilities": [1.0]}}, "parameters.c.probabilities", "length"),
        ({"c": {"values": [1], "probabilities": [-1.0]}}, "parameters.c.probabilities", ">= 0"),
        ({"c": {"probabilities": [1.0]}}, "parameters.c.values", "needs 'values'"),
        ({"x": {"distribution": "log_uniform_value", "min": 1, "max": 2}}, "parameters.x.distribution",
         "did you mean 'log_uniform_values'"),
        ({"x": {"distribution": "uniform", "min": 0}}, "parameters.x.max", "needs 'max'"),
        ({"x": {"distribution": "q_log_uniform_values", "min": 1, "max": 9}}, None, None),
        ({"x": {"distribution": "normal", "sigma": 0}}, "parameters.x.sigma", "positive"),
        ({"x": {"distribution": "q_normal", "q": -1}}, "parameters.x.q", "positive"),
        ({"x": {"distribution": "q_uniform", "min": 0, "max": 1, "q": 0}}, "parameters.x.q", "positive"),
        ({"x": {"distribution": "beta", "a": 0}}, "parameters.x.a", "positive"),
        ({"x": {"distribution": "log_uniform_values", "min": 0, "max": 1}}, "parameters.x.min", "min > 0"),
        ({"x": {"distribution": "q_log_uniform_values", "min": -1, "max": 1}}, "parameters.x.min", "min > 0"),
        ({"x": {"distribution": "inv_log_uniform_values", "min": 0.0, "max": 1}}, "parameters.x.min",
         "min > 0"),
        ({"x": {"distribution": "uniform", "min": 0, "max": 1, "q": 0.1}}, "parameters.x.q", "does not apply"),
        ({"x": {"min": 0, "max": 1, "q": 0.1}}, "parameters.x.q", "q_uniform"),
        ({"x": {"values": [1], "min": 0}}, "parameters.x.min", "cannot combine"),
        ({"x": {}}, "parameters.x", "cannot tell"),
        ({"x": 0.1}, "parameters.x", "{value: 0.1}"),
        ({1: {"value": 1}}, "parameters.1", "invalid parameter name"),   # "1x" is W&B's warning (spec)
        ({"opt": {"parameters": {"lr": {"min": 1.0, "max": 0.1}}}}, "parameters.opt.parameters.lr.min",
         "less than max"),
        ({"opt": {"parameters": {}}}, "parameters.opt.parameters", "empty"),
        ({"opt": {"parameters": {"lr": {"value": 1}}, "value": 2}}, "parameters.opt.value", "only 'parameters'"),
        ({"a.b": {"value": 1}, "a": {"parameters": {"b": {"value": 2}}}}, "parameters.a.parameters.b",
         "defined twice"),
    ],
)
def test_every_spec_error_names_its_key_path(raw: dict, key: str | None, fragment: str | None) -> None:
    if key is None:  # control row: a valid spec parses
        parse_parameters(raw)
        return
    with pytest.raises(SpecError) as info:
        parse_parameters(raw, file="sweep.yaml")
    assert info.value.key == key
    assert info.value.file == "sweep.yaml"
    assert fragment in str(info.value), str(info.value)
    assert str(info.value).startswith(f"sweep.yaml: {key}: ")


def test_parameters_must_be_a_mapping() -> None:
    with pytest.raises(SpecError) as info:
        parse_parameters([1, 2], key="parameters")
    assert info.value.key == "parameters"
    assert parse_parameters(None).params == {}


def test_nested_parameters_flatten_to_dotted_names_in_spec_order() -> None:
    space = parse_parameters({
        "z": {"value": 1},
        "optimizer": {"parameters": {"lr": {"min": 0.1, "max": 1.0},
                                     "betas": {"parameters": {"b1": {"values": [0.9]}}}}},
        "a": {"values": [1]},
    })
    assert list(space.params) == ["z", "optimizer.lr", "optimizer.betas.b1", "a"]
    assert space.searchable == ["optimizer.lr", "optimizer.betas.b1", "a"]
    assert unflatten(space.sample(np.random.default_rng(0)))["optimizer"]["betas"] == {"b1": 0.9}


def test_grid_follows_wandb_order_sorted_by_name_last_fastest() -> None:
    space = parse_parameters({
        "b": {"values": [1, 2]},
        "a": {"parameters": {"y": {"values": ["p", "q"]}, "x": {"value": 0}}},
        "c": {"distribution": "q_uniform", "min": 0, "max": 1, "q": 0.5},
        "d": {"min": 1, "max": 2},
    })
    combos = list(space.grid())
    assert space.grid_size() == len(combos) == 2 * 2 * 2 * 2   # q_uniform 0..1 by 0.5: 0, 0.5 (W&B's arange)
    assert list(combos[0]) == ["b", "a.y", "a.x", "c", "d"]  # keys stay in spec order
    order = [(c["a.y"], c["b"], c["c"], c["d"]) for c in combos]  # W&B sorts: a.x, a.y, b, c, d
    assert order == sorted(order)
    assert combos[:3] == [
        {"b": 1, "a.y": "p", "a.x": 0, "c": 0.0, "d": 1},
        {"b": 1, "a.y": "p", "a.x": 0, "c": 0.0, "d": 2},
        {"b": 1, "a.y": "p", "a.x": 0, "c": 0.5, "d": 1},
    ]
    assert len({repr(c) for c in combos}) == len(combos)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"min": 1, "max": 10, "q": 2}, [1, 3, 5, 7, 9]),
        ({"min": -3, "max": 3, "q": 2}, [-3, -1, 1]),
        ({"min": 0.0, "max": 1.0, "q": 0.1}, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]),
        ({"min": 0.05, "max": 0.5, "q": 0.1}, [0.05, 0.15, 0.25, 0.35, 0.45]),
        ({"min": 1, "max": 2, "q": 5}, [1]),
    ],
    ids=["offset-int", "negative", "tenths", "offset-tenths", "q-beyond-range"],
)
def test_q_uniform_grid_points_are_wandbs_and_belong_to_the_space(raw: dict[str, Any], expected: list[Any]) -> None:
    # W&B's grid is numpy.arange(min, max, q): its points start at min, which need not be a multiple of q. They
    # were not `contains`-ed by their own space (so a `when` keyed on one was refused), and numpy's float noise
    # (0.30000000000000004) made a `when: {0.3: ...}` branch silently absent from the grid
    space = parse_parameters({"x": {"distribution": "q_uniform", **raw}})
    points = [p["x"] for p in space.grid()]
    assert points == expected and [type(v) for v in points] == [type(v) for v in expected]
    assert all(space.contains(p) for p in space.grid())


def test_when_keyed_on_a_q_uniform_grid_point_is_active_there() -> None:
    space = parse_parameters({
        "x": {"distribution": "q_uniform", "min": 0.0, "max": 1.0, "q": 0.1, "when": {0.3: {"y": {"values": [1, 2]}}}},
        "n": {"distribution": "q_uniform", "min": 1, "max": 10, "q": 2},
        "z": {"values": ["a", "b"], "condition": {"param": "n", "in": [3]}},
    })
    grid = list(space.grid())
    assert space.grid_size() == len(grid) == (9 + 2) * (4 + 2)
    assert {(p["x"], p["y"]) for p in grid if "y" in p} == {(0.3, 1), (0.3, 2)}
    assert {(p["n"], p["z"]) for p in grid if "z" in p} == {(3, "a"), (3, "b")}
    assert all(space.contains(p) for p in grid)


def test_grid_skips_repeated_values_and_rejects_continuous_parameters() -> None:
    assert parse_parameters({"a": {"values": [1, 1, 2]}}).grid_size() == 2
    space = parse_parameters({"a": {"values": [1]}, "lr": {"min": 0.0, "max": 1.0}})
    assert space.grid_size() is None
    with pytest.raises(SpecError, match="grid search needs finite values") as info:
        list(space.grid())
    assert info.value.key == "parameters.lr"


def test_contains_checks_names_and_support() -> None:
    space = parse_parameters({"n": {"min": 1, "max": 3}, "c": {"values": [True, "x"]}, "k": {"value": 5}})
    assert space.contains({"n": 2, "c": True, "k": 5})
    assert not space.contains({"n": 2, "c": 1, "k": 5})  # 1 is not True
    assert not space.contains({"n": 4, "c": "x", "k": 5})
    assert not space.contains({"n": 2, "c": "x", "k": 6})
    assert not space.contains({"n": 2, "c": "x"})
    assert not space.contains({"n": 2, "c": "x", "k": 5, "extra": 1})


def test_from_unit_takes_one_coordinate_per_searchable_parameter() -> None:
    space = parse_parameters({"k": {"value": "x"}, "n": {"min": 0, "max": 9}, "u": {"min": 0.0, "max": 2.0}})
    assert space.from_unit([0.55, 0.25]) == {"k": "x", "n": 5, "u": 0.5}
    with pytest.raises(ValueError):
        space.from_unit([0.5])


def test_describe_gives_one_line_per_parameter() -> None:
    space = parse_parameters({"lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1},
                              "k": {"value": 3}})
    assert space.describe() == [
        "lr: log_uniform_values(min=0.0001, max=0.1)",
        "k: constant(value=3)",
    ]


def test_unflatten_nests_dotted_names_and_keeps_a_name_under_another_one_key() -> None:
    assert unflatten({"a.b": 1, "a.c.d": 2, "e": 3}) == {"a": {"b": 1, "c": {"d": 2}}, "e": 3}
    # `model` and `model.dropout` (Hydra overrides in a W&B sweep, which W&B runs): two keys, as W&B keeps
    # them; this failed every sweep at its first trial ("'a' is both a value and a group")
    assert unflatten({"a": 1, "a.b": 2}) == {"a": 1, "a.b": 2}
    assert unflatten({"a.b": 2, "a": 1, "c.d.e": 3, "c.d": 4}) == {"a.b": 2, "a": 1, "c": {"d": 4}, "c.d.e": 3}


def test_values_are_plain_python_even_from_numpy_input() -> None:
    space = parse_parameters({"a": {"values": [np.int64(3), np.float32(0.5)]}, "b": {"value": np.float64(2)}})
    sampled = space.sample(np.random.default_rng(0))
    assert type(sampled["b"]) is float and type(sampled["a"]) in (int, float)
    assert isinstance(space, SearchSpace)


def test_a_value_of_probability_zero_is_never_drawn_even_when_the_rest_sum_short_of_one() -> None:
    # probabilities need only sum to 1 within 1e-6: the draws past their sum fell to the last value, though its
    # probability was 0
    dist = parse_parameters({"c": {"values": ["a", "b", "never"], "probabilities": [0.5, 0.4999999, 0.0]}}).params["c"]
    assert {dist.from_unit(u) for u in (0.0, 0.3, 0.6, 0.99999995, 1.0 - 1e-12, 1.0)} == {"a", "b"}
