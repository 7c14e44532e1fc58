"""`sweeplab.report(...)`: metrics from any Python process of a command-line trial.

The runner sets SWEEPLAB_REPORT_FILE; each call appends one JSON line there (lines under 4 KiB are written
with one O_APPEND write, so concurrent writers do not interleave). Programs in other languages print
`@sweeplab {"loss": 0.3, "step": 2}` on stdout instead. Outside a sweep, report() does nothing.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["report"]


def report(metrics: Mapping[str, Any] | None = None, *, step: int | None = None, **kw: Any) -> bool:
    """Report metrics (`report({"loss": 0.3}, step=2)` or `report(loss=0.3, step=2)`).

    Returns True when a sweep received them, False when not running under sweeplab.
    """
    path = os.environ.get("SWEEPLAB_REPORT_FILE")
    if path and not _rank_zero():   # another rank's report: only rank 0's count (docs/scale-out.md)
        return False
    values = dict(metrics or {})
    values.update(kw)
    if step is not None:
        values["step"] = int(step)
    if not path:
        return False
    out: dict[str, Any] = {}
    for k, v in values.items():
        f = float(v)
        out[k] = f if math.isfinite(f) else str(f)
    line = (json.dumps(out, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return True


def _rank_zero() -> bool:
    """Whether this process is rank 0 of its program (or its only process): `RANK` where it is set (torchrun,
    sweeplab's multi-process trials), else `LOCAL_RANK` and `NODE_RANK`, which Lightning's launcher sets in
    the ranks it starts itself (`strategy="ddp"` in a command trial) without a `RANK`; they inherit the
    trial's report file."""
    rank = (os.environ.get("RANK") or "").strip()
    if rank:
        return rank == "0"
    return all((os.environ.get(k) or "0").strip() == "0" for k in ("LOCAL_RANK", "NODE_RANK"))
