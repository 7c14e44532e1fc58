"""`sweeplab.report(...)`: metrics from any Python process of a command-line trial.

The runner sets SWEEPLAB_REPORT_FILE; each call appends one JSON line there (lines under 4 KiB are written
with one O_APPEND write, so concurrent writers do not interleave). Programs in other languages print
`@sweeplab {"loss": 0.3, "step": 2}` on stdout instead. Outside a sweep, report() does nothing.

`report` never waits at a scheduler's rung (it has no Run to set `should_stop` on): a pruned program learns
of the stop by its SIGTERM. `sl.Run.from_env()`'s `run.log` waits there for the verdict (docs/early-stopping.md,
command trials).
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
    append_line(path, json.dumps(out, separators=(",", ":")) + "\n")
    return True


def append_line(path: str, text: str) -> None:
    """Append `text` to the report file with one O_APPEND write (concurrent writers of the file do not
    interleave lines under 4 KiB): `report` and `Run.from_env`'s Run."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def env_int(name: str, default: int) -> int:
    try:
        return int((os.environ.get(name) or "").strip())
    except ValueError:
        return default


def program_rank() -> int:
    """This process's rank in its program: `RANK` where it is set (torchrun, sweeplab's multi-process
    trials), else from `LOCAL_RANK`, `NODE_RANK` and `LOCAL_WORLD_SIZE`, which Lightning's launcher sets in the
    ranks it starts itself (`strategy="ddp"` in a command trial) without a `RANK`; they inherit the trial's
    report file, and only rank 0's reports count."""
    if (os.environ.get("RANK") or "").strip():
        return env_int("RANK", 0)
    local, node, per_node = env_int("LOCAL_RANK", 0), env_int("NODE_RANK", 0), env_int("LOCAL_WORLD_SIZE", 0)
    return node * per_node + local if per_node > 0 else (local or node)


def _rank_zero() -> bool:
    return program_rank() == 0
