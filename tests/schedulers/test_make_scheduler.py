"""make_scheduler: spec -> scheduler, and every bad input refused with its key path, value and fix."""

from __future__ import annotations

from typing import Any

import pytest

from sweeplab.errors import SpecError
from sweeplab.schedulers import AshaScheduler, HyperbandScheduler, MedianScheduler, make_scheduler
from sweeplab.types import Goal


def test_none_means_no_early_stopping() -> None:
    assert make_scheduler(None, goal=Goal.MINIMIZE) is None


@pytest.mark.parametrize(
    ("raw", "cls"),
    [
    ({"type": "asha"}, AshaScheduler),
    ({"type": "asha", "metric": "val_mse", "min_iter": 1, "max_iter": 27, "eta": 3}, AshaScheduler),
    ({"type": "hyperband", "min_iter": 3}, HyperbandScheduler),
    ({"type": "hyperband", "max_iter": 27, "s": 2, "eta": 3.0, "strict": False}, HyperbandScheduler),
    ({"type": "median"}, MedianScheduler),
    ],
    ids=["asha-defaults", "asha-design-example", "hyperband-min", "hyperband-max", "median"],
)
def test_valid_specs(raw: dict[str, Any], cls: type) -> None:
    sched = make_scheduler(raw, goal=Goal.MINIMIZE, metric="loss")
    assert isinstance(sched, cls)
    assert sched.metric == raw.get("metric", "loss")
    assert sched.goal is Goal.MINIMIZE and sched.type == raw["type"]


BAD = [
    ("asha", "early_terminate", "must be a mapping"),
    ({"eta": 3}, "early_terminate.type", "needs a type"),
    ({"type": "ahsa"}, "early_terminate.type", "did you mean 'asha'"),
    ({"type": "asha", "metric": "loss", "goal": "upward"}, "early_terminate.goal", "minimize or maximize"),
    ({"type": 3}, "early_terminate.type", "unknown early_terminate type"),
    ({"type": "asha", "etaa": 3}, "early_terminate.etaa", "did you mean 'eta'"),
    ({"type": "asha", "eta": 1}, "early_terminate.eta", "expected a number > 1"),
    ({"type": "asha", "eta": 0.5}, "early_terminate.eta", "got 0.5"),
    ({"type": "asha", "eta": "3"}, "early_terminate.eta", "not a number"),
    ({"type": "asha", "eta": True}, "early_terminate.eta", "not a number"),
    ({"type": "asha", "min_iter": 0}, "early_terminate.min_iter", "expected an integer >= 1"),
    ({"type": "asha", "min_iter": 1.5}, "early_terminate.min_iter", "not an integer"),
    ({"type": "asha", "min_iter": 30, "max_iter": 27}, "early_terminate.min_iter", "below max_iter"),
    ({"type": "asha", "min_iter": 27, "max_iter": 27}, "early_terminate.min_iter", "below max_iter"),
    ({"type": "asha", "max_iter": 27, "brackets": 4}, "early_terminate.brackets", "at most 3"),
    ({"type": "asha", "brackets": 0}, "early_terminate.brackets", "integer >= 1"),
    ({"type": "asha", "metric": 5}, "early_terminate.metric", "not a name"),
    ({"type": "hyperband"}, "early_terminate", "needs min_iter or max_iter"),
    ({"type": "hyperband", "eta": 3}, "early_terminate", "needs min_iter or max_iter"),
    ({"type": "hyperband", "max_iter": 27}, "early_terminate.s", "needs s"),
    ({"type": "hyperband", "max_iter": 2, "s": 2, "eta": 3}, "early_terminate.max_iter", "no band"),
    ({"type": "hyperband", "min_iter": 0}, "early_terminate.min_iter", "integer >= 1"),
    ({"type": "hyperband", "min_iter": 3, "eta": 1}, "early_terminate.eta", "number > 1"),
    ({"type": "hyperband", "min_iter": 3, "strict": "yes"}, "early_terminate.strict", "true or false"),
    ({"type": "hyperband", "min_iter": 3, "brackets": 2}, "early_terminate.brackets", "unknown option"),
    ({"type": "median", "warmup": -1}, "early_terminate.warmup", "integer >= 0"),
    ({"type": "median", "min_iter": "3"}, "early_terminate.min_iter", "not an integer"),
    ({"type": "median", "eta": 3}, "early_terminate.eta", "unknown option"),
]


@pytest.mark.parametrize(("raw", "key", "text"), BAD, ids=[f"{k}: {t}" for _, k, t in BAD])
def test_bad_input_names_key_value_and_fix(raw: Any, key: str, text: str) -> None:
    with pytest.raises(SpecError) as info:
        make_scheduler(raw, goal=Goal.MINIMIZE, file="sweep.yaml")
    err = info.value
    assert err.key == key
    assert str(err).startswith(f"sweep.yaml: {key}: ")
    assert text in str(err)
    assert err.expected or err.hint


def test_python_constructors_validate_too() -> None:
    with pytest.raises(SpecError, match=r"asha\.eta"):
        AshaScheduler(eta=1)
    with pytest.raises(SpecError, match=r"median\.warmup"):
        MedianScheduler(warmup=-2)
    with pytest.raises(SpecError, match=r"hyperband"):
        HyperbandScheduler()
