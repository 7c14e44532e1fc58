"""Plain values: numbers and their grids, canonical forms, the unit-interval clip, short reprs for errors."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import Protocol

    class UnitSource(Protocol):
        """What sampling needs of a generator: `random.Random` and `numpy.random.Generator` both fit."""

        def random(self) -> float: ...


_EPS = 1e-12  # unit coordinates are clipped to [EPS, 1 - EPS] for unbounded distributions


# --------------------------------------------------------------------------------------------------
# helpers


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_integral(x: Any) -> bool:
    return (isinstance(x, int) and not isinstance(x, bool)) or (isinstance(x, float) and x.is_integer())


def _plain(x: Any) -> Any:
    """numpy scalars -> Python scalars; containers converted recursively."""
    if type(x).__module__ == "numpy":   # a numpy scalar (without importing numpy to ask)
        return x.item()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _same(a: Any, b: Any) -> bool:
    """Equality that tells bools from numbers (True != 1), recursively."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:
        return False


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def quantize(x: float, q: float) -> int | float:
    """round(x / q) * q, as an int when q is an int (as W&B does), else a float without 0.1+0.2 noise."""
    k = round(x / q)
    if isinstance(q, int):
        return int(k * q)
    return float(Decimal(k) * Decimal(repr(float(q))))


def _on_grid(v: float, q: float) -> int | None:
    """The k with v == k * q (up to float noise), or None."""
    k = v / q
    r = round(k)
    return r if abs(k - r) <= 1e-9 * max(1.0, abs(k)) else None


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
