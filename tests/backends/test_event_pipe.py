"""The worker's event pipe has one writer: every event reaches the driver as one whole line.

A worker writes events from several threads (the attempt, its heartbeat, the control thread that answers a
stop for a trial still queued). A line longer than the pipe's buffer is written in pieces while the driver
reads; if two of those threads did not share one lock, another event would land inside it and both would be
lost to the driver (the line no longer decodes).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from sweeplab.backends.base import TrialTask
from sweeplab.backends.events import EventKind, decode

pytestmark = pytest.mark.slow

TRIAL = '''
def big(config, run):
    # one metrics batch of some megabytes: one event line far longer than a pipe holds
    run.log({f"metric_{i:06d}_" + "x" * 40: float(i) for i in range(40000)}, step=0)
'''


def _queued(fd: int) -> int:
    """Bytes waiting in a pipe (either end)."""
    buf = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return int.from_bytes(buf, sys.byteorder)


def _until(cond, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_a_stop_answered_while_a_long_event_is_written_does_not_split_it(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_text(TRIAL)
    r, w = os.pipe()
    env = dict(os.environ, SWEEPLAB_EVENT_FD=str(w), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "sweeplab.backends.worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, pass_fds=(w,), env=env, start_new_session=True)
    os.close(w)
    assert proc.stdin is not None

    def send(*msgs: dict) -> None:  # type: ignore[type-arg]
        assert proc.stdin is not None
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in msgs))
        proc.stdin.flush()

    def task(trial_id: int) -> dict:  # type: ignore[type-arg]
        return TrialTask(trial_id=trial_id, number=trial_id, attempt=1, sweep="s", kind="function",
                         target=f"{tmp_path / 'big.py'}:big", log_path=str(tmp_path / f"{trial_id}.log"),
                         heartbeat_interval=3600.0).to_dict()

    try:
        # trial 1 writes its long line into a pipe nobody reads: the write stops when the pipe is full
        send({"op": "run", "task": task(1)})
        full = 0

        def pipe_full() -> bool:
            nonlocal full
            n = _queued(r)
            full = full + 1 if n > 60000 and n == getattr(pipe_full, "last", -1) else 0
            pipe_full.last = n   # type: ignore[attr-defined]
            return full >= 10    # stayed full: the attempt is blocked in its write
        _until(pipe_full)
        # trial 2 is queued behind it and stopped at once: the control thread answers FINISHED for it now
        send({"op": "run", "task": task(2)}, {"op": "stop", "trial": 2})
        _until(lambda: _queued(proc.stdin.fileno()) == 0)   # the worker has read both lines
        time.sleep(0.5)   # ... and its control thread is writing (or waiting to write) trial 2's event

        # drain: every line must be one whole event
        buf = bytearray()
        lines: list[bytes] = []
        ended: set[int] = set()
        deadline = time.monotonic() + 120
        while ended != {1, 2} and time.monotonic() < deadline:
            if select.select([r], [], [], 1.0)[0]:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                buf += chunk
                *done, rest = bytes(buf).split(b"\n")
                buf[:] = rest
                for line in done:
                    lines.append(line)
                    try:
                        ev = decode(line)
                    except ValueError:
                        continue
                    if ev.kind.ends_attempt:
                        ended.add(ev.trial)
        bad = [ln[:80] + b"..." + ln[-80:] for ln in lines if not _decodes(ln)]
        assert not bad, f"{len(bad)} event line(s) were split by another write: {bad}"
        assert ended == {1, 2}
        kinds = {decode(ln).trial: decode(ln).kind for ln in lines if decode(ln).kind.ends_attempt}
        assert kinds == {1: EventKind.FINISHED, 2: EventKind.FINISHED}
        points = [p for ln in lines for p in decode(ln).data.get("points", [])]
        assert len(points) == 40000
    finally:
        with_exit = proc.poll() is None
        if with_exit:
            send({"op": "exit"})
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        os.close(r)


def _decodes(line: bytes) -> bool:
    try:
        decode(line)
    except (ValueError, KeyError):
        return False
    return True
