"""The worker -> driver event stream, shared by every backend.

Events are plain JSON-serialisable records so that any transport (a pipe to a local worker, a Ray object,
a file tailed from a command trial) can carry them without pickle. `trial` is the trial's id in the store,
`attempt` counts from 1 and increases with each retry or requeue.

Kinds and their `data`:
    STARTED     {"pid", "host"}
    METRICS     {"points": [[step, key, value, time], ...]}        batched by the Run
    HEARTBEAT   {}                                                 the worker process is alive
    CHECKPOINT  {"step", "path", "checksum", "bytes", "seconds"}   a checkpoint was written
    ARTIFACT    {"name", "path"}
    SYSTEM      {"samples": [{"time", "cpu", "rss", "gpu_util", "gpu_mem"}, ...]}
    PROFILE     {"summary": {...}}                                 per-trial profile summary
    NOTE        {"level", "message", ...}                          a warning or info line for the event log
    FINISHED    {"metrics": {...}, "stopped": bool}                the trial returned
    FAILED      {"reason", "error_type", "message", "traceback", "exit_code", "signal", "capture"}
    PREEMPTED   {"reason"}                                         SIGTERM / node loss: requeue
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "EventKind", "decode", "encode"]


class EventKind(str, enum.Enum):
    STARTED = "started"
    METRICS = "metrics"
    HEARTBEAT = "heartbeat"
    CHECKPOINT = "checkpoint"
    ARTIFACT = "artifact"
    SYSTEM = "system"
    PROFILE = "profile"
    NOTE = "note"
    FINISHED = "finished"
    FAILED = "failed"
    PREEMPTED = "preempted"

    @property
    def ends_attempt(self) -> bool:
        return self in (EventKind.FINISHED, EventKind.FAILED, EventKind.PREEMPTED)


@dataclass(frozen=True)
class Event:
    kind: EventKind
    trial: int
    attempt: int
    time: float
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.kind.value, "tr": self.trial, "a": self.attempt, "t": self.time, "d": self.data}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Event:
        return cls(EventKind(d["k"]), int(d["tr"]), int(d["a"]), float(d["t"]), d.get("d") or {})


def encode(event: Event) -> bytes:
    """One event as one line of JSON (NaN and +-Inf kept, as JSON5-style bare words)."""
    return json.dumps(event.to_dict(), separators=(",", ":"), default=_default).encode() + b"\n"


def _default(o: Any) -> Any:
    # numpy / torch scalars and other number-likes
    for attr in ("item", "__float__"):
        f = getattr(o, attr, None)
        if callable(f):
            try:
                return f()
            except (TypeError, ValueError):
                pass
    return repr(o)


def decode(line: bytes | str) -> Event:
    # Python's json emits and accepts NaN / Infinity bare words, so floats round-trip.
    return Event.from_dict(json.loads(line))
