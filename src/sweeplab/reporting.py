"""`sweeplab.report(...)`: metrics from any Python process of a command-line trial.

The runner sets SWEEPLAB_REPORT_FILE; each call appends one JSON line there (lines under 4 KiB are written
with one O_APPEND write, so concurrent writers do not interleave). Programs in other languages print
`@sweeplab {"loss": 0.3, "step": 2}` on stdout instead. Outside a sweep, report() does nothing.

At a scheduler's rung (an ASHA rung step, a hyperband band: SWEEPLAB_DECISION_* from the runner), the report
of the judged metric waits for the verdict, as `sl.Run.from_env()`'s `run.log` does (docs/early-stopping.md,
command trials), so a pruned program trains nothing past its rung: `report` returns, and the stop's SIGTERM
follows (it has no Run to set `should_stop` on). `@sweeplab` lines on stdout are not held (see `_Hold`).
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
    hold = _hold()
    decide = hold.decides(out) if hold is not None else None
    if hold is None or decide is None:
        append_line(path, json.dumps(out, separators=(",", ":")) + "\n")
        return True
    out["step"] = decide   # (the step the runner would count to: the `@decide` line names it)
    append_line(path, json.dumps(out, separators=(",", ":")) + "\n" + json.dumps({"@decide": decide}) + "\n")
    hold.wait(decide)
    return True


class _Hold:
    """This process's decision points (the runner's SIGTERM-free reply channel: a verdict file, see
    _program_run.py) and the step the runner gives a report without one (one more than the last, as
    backends/command_trial.py's `_Reporter` counts: exact when this process is the trial's one reporter)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        from sweeplab._program_run import _decisions
        from sweeplab.run import DecisionPoints

        got = _decisions(env)
        self.metric: str = got["decision_metric"]
        self.points = DecisionPoints(got["decision_steps"], reports=got["decision_reports"])
        self.path, self.worker, self.bound = got["verdict_file"], got["worker_pid"], got["decision_wait"]
        self.next = 0

    def decides(self, out: Mapping[str, Any]) -> int | None:
        """The step at which report `out` waits for the verdict, or None."""
        try:
            step = int(out["step"]) if "step" in out else self.next
        except (TypeError, ValueError):
            return None
        self.next = step + 1
        if self.metric not in out or not self.points.passes(step, float(out[self.metric])):
            return None
        return step

    def wait(self, step: int) -> None:
        """Wait for the verdict (see `_program_run.await_verdict`). In the main thread a SIGTERM that comes
        meanwhile ends the wait and is then delivered again, to what the program had for it (by default: the
        end of the program, as without the wait)."""
        import signal
        import threading

        from sweeplab._program_run import await_verdict

        got: list[int] = []
        before: Any = None
        if threading.current_thread() is threading.main_thread():
            before = signal.getsignal(signal.SIGTERM)
            if before is not None and before != signal.SIG_IGN:   # (None: not set from Python: left alone)
                signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
            else:
                before = None
        try:
            await_verdict(self.path, step, self.worker, self.bound, lambda: bool(got))
        finally:
            if before is not None:
                signal.signal(signal.SIGTERM, before)
                if got:
                    os.kill(os.getpid(), signal.SIGTERM)


_holds: dict[str, _Hold | None] = {}


def _hold() -> _Hold | None:
    """The process's `_Hold`, read from its environment once: None (nothing waits) without decision points."""
    if "hold" not in _holds:
        env = os.environ
        ok = all(env.get(k) for k in ("SWEEPLAB_DECISION_FILE", "SWEEPLAB_DECISION_METRIC", "SWEEPLAB_DECISION_STEPS"))
        _holds["hold"] = _Hold(env) if ok else None
    return _holds["hold"]


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
