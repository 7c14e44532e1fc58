"""Small helpers the monitors share: the duration option, finite checks, how values and durations print."""

from __future__ import annotations

import math
from typing import Any

from sweeplab import _values
from sweeplab.types import Goal

ALL = "all"   # `nan: {metrics: all}`, `stalled: {metrics: all}`: every metric a trial logs


def parse_duration(v: Any, *, key: str = "after", file: str | None = None) -> float:
    """Seconds in a duration above 0 (sweeplab's one grammar, `sweeplab._values.parse_duration`):
    a number of seconds, or text such as "30s", "10m", "1h30m", "2d", "500ms"."""
    return _values.parse_duration(v, key=key, file=file, positive=True)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _show(v: Any) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v:.4g}"
    return str(v)


def _jsonable(v: Any) -> Any:
    """Event data must be strict JSON: non-finite floats become the strings NaN, inf, -inf."""
    if isinstance(v, float) and not math.isfinite(v):
        return _show(v)
    return v


def _show_duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g}h"
    if seconds >= 60:
        return f"{seconds / 60:.3g}m"
    return f"{seconds:.3g}s"


def _goal_text(goal: Goal | str) -> str:
    return goal.value if isinstance(goal, Goal) else goal


def _callable_name(fn: Any) -> str:
    name = getattr(fn, "__name__", "") or ""
    return name if name and name != "<lambda>" else "custom"
