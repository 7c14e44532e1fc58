"""The worker -> driver event stream, shared by every backend.

Events are plain JSON-serialisable records so that any transport (a pipe to a local worker, a Ray object,
a file tailed from a command trial) can carry them without pickle. `trial` is the trial's id in the store,
`attempt` counts from 1 and increases with each retry or requeue.

Kinds and their `data`:
    STARTED     {"pid", "host"}
    METRICS     {"points": [[step, key, value, time], ...]}        batched by the Run (MetricPoints, which
                                                                   are tuples: JSON arrays on the wire)
    HEARTBEAT   {}                                                 the trial is alive (a command trial: its
                                                                   program showed a sign of life, _tree.py)
    PROCESS     {"pid", "pgid"}                                    a command trial's program started: every
                                                                   kill of the attempt also kills this group
    CHECKPOINT  {"step", "path", "checksum", "bytes", "seconds",   a checkpoint was written; "removed": paths
                 "removed"}                                        of older ones its retention deleted
    ARTIFACT    {"name", "path"}
    SYSTEM      {"samples": [{"time", "cpu", "rss", "gpu_util", "gpu_mem"}, ...]}
    PROFILE     {"summary": {...}}                                 per-trial profile summary
    NOTE        {"level", "message", ...}                          a warning or info line for the event log;
                                                                   with trial SWEEP (0): of the sweep, not of a
                                                                   trial (a backend's slot), also shown to the
                                                                   user when its level is "warning"
    FINISHED    {"metrics": {...}, "stopped": bool}                the trial returned
    FAILED      {"reason", "error_type", "message", "traceback", "exit_code", "signal", "capture"}
                + {"bad_input": true, "key"} when the trial's config could not be built (never retried)
                + {"disk_full": true} when it found its disk full (backends/_diskfull.py): not a failure,
                the driver leaves it interrupted and stops the sweep
    PREEMPTED   {"reason"}                                         SIGTERM / node loss: requeue
"""

from __future__ import annotations

import enum
import json
import os
import signal
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SWEEP", "Event", "EventKind", "crash_stack", "decode", "describe_exit", "died_of_sigterm", "encode",
           "read_events"]

SWEEP = 0   # the `trial` of a NOTE about the sweep rather than one trial (store ids start at 1)


class EventKind(str, enum.Enum):
    STARTED = "started"
    METRICS = "metrics"
    HEARTBEAT = "heartbeat"
    PROCESS = "process"
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


def read_events(fd: int, buf: bytearray, chunk: int = 1 << 16) -> list[Event]:
    """Read what a non-blocking pipe holds, append it to `buf`, and decode every complete line.

    A partial last line stays in `buf` for the next call; lines that do not decode are skipped. `chunk` is a
    pipe's capacity: os.read allocates it before reading, and the driver reads at every wake-up.
    """
    while True:
        try:
            data = os.read(fd, chunk)
        except BlockingIOError:
            break
        except OSError:
            data = b""
        if not data:
            break
        buf += data
        if len(data) < chunk:
            break
    if b"\n" not in buf:
        return []
    *lines, rest = bytes(buf).split(b"\n")
    buf[:] = rest
    out = []
    for line in lines:
        if line:
            try:
                out.append(decode(line))
            except (ValueError, KeyError):
                continue
    return out


def describe_exit(code: int | None) -> tuple[str, int | None, int | None]:
    """(how a process ended, its exit code, the signal that killed it) from a Popen returncode."""
    sig = -code if code is not None and code < 0 else None
    how = f"killed by signal {signal.Signals(sig).name}" if sig else f"exited with code {code}"
    return how, (None if sig else code), sig


#: a worker's exit code when the trial it ran closed the worker's event pipe (worker.py)
CHANNEL_CLOSED = 97
CHANNEL_CLOSED_REASON = (
    "the trial closed its worker's pipe to the driver (a file descriptor it did not open: os.closerange, a "
    "daemonizing library): a function trial runs inside the worker process, so it must leave open the "
    "descriptors it did not open; run such code as a command trial (`program:` or `command:` in the spec)")


def died_of_sigterm(exit_code: int | None, sig: int | None) -> bool:
    """A process of a trial (a worker, a rank) that ended by SIGTERM: killed by it before its handler was
    installed (while it started), or exit 143 (the handler of a worker or rank that held no running attempt, or
    whose grace expired). A preemption of the trial, as SIGTERM to a running attempt is, not a failure: the
    local backend, the multi-process supervisor and the Ray gang all take it so."""
    return sig == signal.SIGTERM or exit_code == 143


def crash_stack(log_path: str | None, limit: int = 4000) -> str | None:
    """The Python stack that faulthandler (enabled in workers and ranks) wrote into a trial's log when its
    process died of a signal (a segfault, an abort), from `Fatal Python error:` on; None when there is none."""
    if not log_path:
        return None
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            tail = fh.read()
    except OSError:
        return None
    at = tail.rfind(b"Fatal Python error: ")
    if at < 0:
        return None
    return tail[at:at + limit].decode("utf-8", "replace").strip()
