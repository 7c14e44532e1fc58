"""Several objectives and constraints, as the driver sees them: a trial's objective values, its constraint
violations and feasibility, and the hypervolume of the sweep's front, recorded as trials complete.

The hypervolume is an `events` row of kind `hypervolume` after each completed feasible trial of a sweep with
several objectives, data `{"trials": completed trials so far, "hypervolume": x, "reference": [...],
"front": size of the feasible Pareto front, "points": the front's values}`. The reference is the objectives'
`reference` values when all are given, else `pareto.default_reference` over the front at that time; readers
(`store.queries.hypervolume_series`) then recompute every row's volume from its points against the latest
reference, so the series they show is on one scale and never decreases.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sweeplab.pareto import default_reference, dominates, hypervolume, to_min

if TYPE_CHECKING:
    from sweeplab.spec import SweepSpec

__all__ = ["ParetoTracker", "feasible", "objective_problem", "objective_values", "rated", "violations"]


def _number(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def objective_values(spec: SweepSpec, metrics: Mapping[str, Any]) -> tuple[float | None, ...] | None:
    """The trial's value of each objective (None where missing or not finite); None with one objective."""
    if not spec.multi_objective:
        return None
    return tuple(_number(metrics.get(str(o.name))) for o in spec.objectives)


def objective_problem(spec: SweepSpec, metrics: Mapping[str, Any]) -> str | None:
    """Why a finished trial of a multi-objective sweep has no usable values (the first objective is
    checked by the driver as in a single-objective sweep), or None."""
    for o in spec.objectives[1:]:
        name = str(o.name)
        if name not in metrics:
            return f"objective {name!r} was never reported (reported: {', '.join(sorted(metrics)) or 'nothing'})"
        if _number(metrics[name]) is None:
            return f"objective {name} is {metrics[name]!r}"
    return None


def violations(spec: SweepSpec, metrics: Mapping[str, Any]) -> tuple[float, ...] | None:
    """Per constraint, how far the trial is outside it (<= 0: satisfied); None without constraints."""
    if not spec.constraints:
        return None
    return tuple(c.violation(_number(metrics.get(c.metric))) for c in spec.constraints)


def rated(spec: SweepSpec, completed: bool, metrics: Mapping[str, Any]) -> bool:
    """Whether a trial that ended has a feasibility: a completed one always, any other one (failed, pruned,
    stopped) only once it reported a constrained metric (one that failed first is not "infeasible": it has
    none). The same rule live and on resume, so the scheduler and the searcher hear of it alike."""
    return bool(spec.constraints) and (completed or any(c.metric in metrics for c in spec.constraints))


def feasible(spec: SweepSpec, metrics: Mapping[str, Any]) -> bool | None:
    """Whether the trial keeps every constraint; None when the sweep has none."""
    v = violations(spec, metrics)
    return None if v is None else all(x <= 0 for x in v)


def violated(spec: SweepSpec, metrics: Mapping[str, Any]) -> str:
    """The constraints a trial breaks, for its reason line ("infeasible: memory_gb 20 > max 16")."""
    out = []
    for c in spec.constraints:
        value = _number(metrics.get(c.metric))
        if c.violation(value) > 0:
            out.append(f"{c.metric} {'missing' if value is None else f'{value:g}'} breaks {c.describe()}")
    return "; ".join(out)


class ParetoTracker:
    """The completed feasible trials' objective values, and the hypervolume of their front."""

    def __init__(self, spec: SweepSpec) -> None:
        self.goals = tuple(o.goal for o in spec.objectives)
        refs = tuple(o.reference for o in spec.objectives)
        self.reference: tuple[float, ...] | None = (
            tuple(float(r) for r in refs) if refs and all(r is not None for r in refs) else None)  # type: ignore[arg-type]
        self.front: list[tuple[float, ...]] = []     # in the objectives' own units
        self.completed = 0

    def add(self, values: tuple[float | None, ...] | None, is_feasible: bool | None) -> bool:
        """Count one completed trial; True when it joined the front (the hypervolume may have changed)."""
        self.completed += 1
        if values is None or is_feasible is False:
            return False
        mine = to_min(values, self.goals)
        if mine is None:
            return False
        fronts = [to_min(p, self.goals) for p in self.front]
        if any(f is not None and (dominates(f, mine) or f == mine) for f in fronts):
            return False
        self.front = [p for p, f in zip(self.front, fronts) if f is None or not dominates(mine, f)]
        self.front.append(tuple(float(v) for v in values))  # type: ignore[arg-type]
        return True

    def record(self) -> dict[str, Any] | None:
        """The `hypervolume` event data for the current front (None while it is empty)."""
        ref = self.reference or default_reference(self.front, self.goals)
        if ref is None:
            return None
        return {"trials": self.completed, "hypervolume": hypervolume(self.front, self.goals, ref),
                "reference": list(ref), "front": len(self.front), "points": [list(p) for p in self.front]}
