"""A TrialTask crosses the pipe as JSON: to_dict / from_dict / make build the same task as TrialTask(...)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sweeplab.backends.base import TrialTask

FIELDS = dict(trial_id=3, number=2, attempt=1, sweep="s", kind="function", target="m.py:f", config={"x": 1},
              params={"x": 1}, env={"SWEEPLAB_SLOT": "0"}, python_path=["/p"],
              wandb={"param_path": "/l/2-1.wandb-params.yaml", "args": {"x": 1}})


def test_make_builds_what_the_constructor_builds() -> None:
    made, built = TrialTask.make(**FIELDS), TrialTask(**FIELDS)
    assert made == built and repr(made) == repr(built)
    assert TrialTask.make(trial_id=1, number=1, attempt=1, sweep="s", kind="function").config == {}
    a = TrialTask.make(trial_id=1, number=1, attempt=1, sweep="s", kind="function")
    b = TrialTask.make(trial_id=1, number=1, attempt=1, sweep="s", kind="function")
    assert a.env is not b.env                      # default factories called per task, as the constructor does
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.number = 5                             # type: ignore[misc]


@pytest.mark.parametrize("fields", [{"trial_id": 1}, {**FIELDS, "junk": 1}], ids=["missing", "unknown"])
def test_make_refuses_what_the_constructor_refuses(fields: dict) -> None:
    with pytest.raises(TypeError):
        TrialTask.make(**fields)


def test_a_task_reads_back_from_its_json() -> None:
    task = TrialTask(**FIELDS)
    wire = json.loads(json.dumps({"op": "run", "task": task.to_dict()}))["task"]
    back = TrialTask.from_dict(wire)
    assert back == TrialTask(**wire) and back.to_dict() == wire   # (JSON made its tuples lists)
    assert dataclasses.replace(back, world_size=2).world_size == 2
    # a dict with other keys (an older or newer sender) still reads: unknown keys dropped, defaults filled
    partial = TrialTask.from_dict({"trial_id": 1, "number": 1, "attempt": 1, "sweep": "s", "kind": "function",
                                   "from_the_future": True})
    assert partial == TrialTask(trial_id=1, number=1, attempt=1, sweep="s", kind="function")
