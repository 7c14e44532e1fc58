"""The driver's side of a worker's event pipe, read at every wake-up (issue 18 item 5: short trials wake the
driver several times each, so each read must cost what its bytes cost)."""

from __future__ import annotations

import os
import time
import tracemalloc

from sweeplab.backends.events import Event, EventKind, encode, read_events


def _metrics(trial: int, n: int) -> bytes:
    points = [[i, "val_mse", 3000.5 + i, 1.7e9 + i] for i in range(n)]
    return encode(Event(EventKind.METRICS, trial, 1, time.time(), {"points": points}))


def test_a_small_read_allocates_no_buffer_of_a_megabyte() -> None:
    """os.read(fd, n) allocates n bytes before the kernel copies: a 1 MiB chunk cost an mmap and munmap (~20 us,
    more on a busy machine) per wake-up for events of a kilobyte or two."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    buf = bytearray()
    try:
        line = _metrics(1, 40)
        os.write(w, line)
        tracemalloc.start()
        try:
            events = read_events(r, buf)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert [e.kind for e in events] == [EventKind.METRICS] and len(events[0].data["points"]) == 40
        assert peak < 256 * 1024, peak
    finally:
        os.close(r)
        os.close(w)


def test_a_burst_longer_than_a_read_arrives_whole() -> None:
    """Lines split across reads (a burst larger than one read, a line longer than the pipe holds) decode whole."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    buf = bytearray()
    try:
        lines = [_metrics(t, 600) for t in range(6)]      # ~20 KB each: more than one read of 64 KiB in all
        blob = b"".join(lines)
        got: list[Event] = []
        sent = 0
        while sent < len(blob) or len(got) < len(lines):
            if sent < len(blob):
                sent += os.write(w, blob[sent:sent + 50_000])
            got += read_events(r, buf)
        assert [e.trial for e in got] == list(range(6)) and not buf
        assert all(len(e.data["points"]) == 600 for e in got)
    finally:
        os.close(r)
        os.close(w)
