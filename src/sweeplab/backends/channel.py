"""The sending end of a worker's event stream: one `EventWriter` per file descriptor, one `Channel` per attempt.

Every thread of a worker that sends events (the attempt, its heartbeat and sampler, the control thread that
answers a stop for a trial still queued) writes through the one `EventWriter` of the pipe, whose lock keeps
each event a whole line: a line longer than the pipe's buffer is written in pieces, and a second writer with
a lock of its own could put its event inside one (the driver then loses both).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from sweeplab.backends.base import TrialTask
from sweeplab.backends.events import Event, EventKind, encode

__all__ = ["Channel", "EventWriter", "fd_writer"]


def fd_writer(fd: int) -> Callable[[bytes], None]:
    """A function writing all of `data` to `fd` (a blocking pipe may take it in several writes)."""
    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    return write


class EventWriter:
    """The one writer of an event stream (a pipe's fd, a list, ...): whole lines, one at a time.

    Build one per stream and share it: its lock is the stream's lock."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self.raw = write                # call only while holding `lock`
        self.lock = threading.Lock()

    @classmethod
    def for_fd(cls, fd: int) -> EventWriter:
        return cls(fd_writer(fd))

    def write(self, data: bytes) -> None:
        with self.lock:
            self.raw(data)


class Channel:
    """Thread-safe sender of one trial attempt's events, through the stream's `EventWriter`."""

    def __init__(self, out: EventWriter | Callable[[bytes], None], task: TrialTask) -> None:
        self._out = out if isinstance(out, EventWriter) else EventWriter(out)
        self._lock = self._out.lock     # the stream's lock, shared with every other channel on it
        self._held = b""
        self.trial = task.trial_id
        self.attempt = task.attempt

    def send(self, kind: EventKind | str, data: dict[str, Any] | None = None) -> None:
        kind = EventKind(kind)
        line = encode(Event(kind, self.trial, self.attempt, time.time(), data or {}))
        with self._lock:
            if kind is EventKind.STARTED:
                self._held = line     # sent with the next event, or by the heartbeat within 50 ms:
                return                # a short trial then costs the driver one wake-up, not two
            if self._held:
                line, self._held = self._held + line, b""
            self._out.raw(line)

    def flush(self) -> None:
        """Send a held STARTED event now."""
        with self._lock:
            if self._held:
                line, self._held = self._held, b""
                self._out.raw(line)
