"""`metric` as a list of objectives and `constraints`: what parses, what is stored, and the errors (key paths)."""

from __future__ import annotations

import pytest

from sweeplab.errors import SpecError
from sweeplab.spec import Constraint, SweepSpec, parse_spec
from sweeplab.types import Goal


def base(**changes):
    raw = {"method": "tpe", "function": "m:f", "parameters": {"x": {"min": 0.0, "max": 1.0}},
           "metric": [{"name": "acc", "goal": "maximize"}, {"name": "latency_ms", "goal": "minimize"}]}
    raw.update(changes)
    return raw


def test_a_list_of_objectives_keeps_metric_as_the_first():
    spec = parse_spec(base(constraints=[{"metric": "memory_gb", "max": 16}, {"metric": "latency_ms", "min": 1}]))
    assert spec.multi_objective
    assert spec.metric.name == "acc" and spec.metric.goal is Goal.MAXIMIZE
    assert [(o.name, o.goal) for o in spec.objectives] == [("acc", Goal.MAXIMIZE), ("latency_ms", Goal.MINIMIZE)]
    assert spec.constraints == (Constraint("memory_gb", max=16.0), Constraint("latency_ms", min=1.0))


def test_a_single_mapping_is_one_objective_as_before():
    spec = parse_spec(base(metric={"name": "loss"}))
    assert not spec.multi_objective and spec.objectives == (spec.metric,)
    assert spec.to_jsonable()["metric"] == {"name": "loss", "goal": "minimize"}
    assert "constraints" not in spec.to_jsonable()


def test_objectives_and_constraints_survive_the_stored_spec():
    spec = parse_spec(base(metric=[{"name": "a", "goal": "maximize", "reference": 0}, {"name": "b"}],
                           constraints=[{"metric": "m", "max": 2}]))
    again = SweepSpec.from_jsonable(spec.to_jsonable())
    assert again.objectives == spec.objectives and again.constraints == spec.constraints
    assert again.objectives[0].reference == 0.0


def test_constraint_violation_and_description():
    c = Constraint("memory_gb", max=16.0)
    assert c.violation(12) == -4 and c.violation(20) == 4 and c.violation(None) == 1.0
    assert c.violation(float("nan")) == 1.0
    both = Constraint("t", max=5.0, min=1.0)
    assert both.violation(0.5) == 0.5 and both.describe() == "t <= 5 and t >= 1"


@pytest.mark.parametrize(("changes", "key", "fragment"), [
    ({"metric": [{"name": "a"}, {"name": "b", "goal": "up"}]}, "metric[1].goal", "minimize or maximize"),
    ({"metric": [{"name": "a"}, {"goal": "maximize"}]}, "metric[1].name", "missing required key"),
    ({"metric": [{"name": "a"}, {"name": "a"}]}, "metric[1].name", "listed twice"),
    ({"metric": []}, "metric", "must not be empty"),
    ({"metric": [{"name": "a"}, "b"]}, "metric[1]", "must be a mapping"),
    ({"metric": [{"name": "a"}, {"name": "b", "target": 3}]}, "metric[1].target", "several objectives"),
    ({"metric": [{"name": "a", "impute": "worst"}, {"name": "b"}]}, "metric[0].impute", "several objectives"),
    ({"metric": [{"name": "a", "reference": "high"}, {"name": "b"}]}, "metric[0].reference", "must be a number"),
    ({"metric": [{"name": "a"}, {"name": "b", "gaol": "min"}]}, "metric[1].gaol", "unknown key"),
    ({"constraints": {"metric": "m", "max": 1}}, "constraints", "must be a list"),
    ({"constraints": [{"max": 1}]}, "constraints[0].metric", "missing required key"),
    ({"constraints": [{"metric": "m"}]}, "constraints[0]", "needs a bound"),
    ({"constraints": [{"metric": "m", "max": "lots"}]}, "constraints[0].max", "must be a number"),
    ({"constraints": [{"metric": "m", "max": 1, "min": 2}]}, "constraints[0].min", "min is above max"),
    ({"constraints": [{"metric": "m", "below": 1}]}, "constraints[0].below", "unknown key"),
])
def test_errors_name_the_key_path(changes, key, fragment):
    with pytest.raises(SpecError) as info:
        parse_spec(base(**changes), file="sweep.yaml")
    text = str(info.value)
    assert text.startswith(f"sweep.yaml: {key}: "), text
    assert fragment in text, text
