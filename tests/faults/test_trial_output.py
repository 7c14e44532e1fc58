"""Hostile output of a command trial's program: a line of stdout far longer than memory should hold.

A program may write megabytes without a newline (binary data, a progress bar redrawn with carriage
returns on stdout, a runaway print). The worker copies it to the trial's log as it comes, in bounded memory,
and still reads the `@sweeplab` lines that follow.
"""

from __future__ import annotations

import sys

import pytest

from sweeplab.backends.events import EventKind
from sweeplab.backends.local import LocalBackend, plan_slots
from sweeplab.testing.backends import collect, make_task

pytestmark = pytest.mark.slow

MB = 1 << 20
# writes `mb` MB on stdout without a newline, then reports its worker's peak resident memory (VmHWM)
LONG_LINE = """
import json, os, sys
chunk = b"x" * (1 << 20)
for _ in range({mb}):
    sys.stdout.buffer.write(chunk)
sys.stdout.buffer.write(b"\\n@sweeplab " + json.dumps({{"loss": 1.0}}).encode() + b"\\n")
sys.stdout.flush()
# the worker has read all of it once a line it must answer is through: ask for the peak after a pause
import time; time.sleep(0.3)
hwm = next(int(line.split()[1]) for line in open(f"/proc/{{os.getppid()}}/status") if line.startswith("VmHWM"))
print("@sweeplab " + json.dumps({{"worker_peak_mb": hwm / 1024}}), flush=True)
"""


def test_a_program_writing_a_huge_line_on_stdout_is_logged_in_bounded_memory(tmp_path):
    mb = 128
    script = tmp_path / "long_line.py"
    script.write_text(LONG_LINE.format(mb=mb))
    b = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]))
    b.start()
    try:
        task = make_task(tmp_path, 1, command=[sys.executable, str(script)])
        b.submit(task)
        events = collect(b, [1], timeout=120)[1]
    finally:
        b.shutdown()
    assert events[-1].kind is EventKind.FINISHED, events[-1]
    metrics = {p[1]: p[2] for e in events if e.kind is EventKind.METRICS for p in e.data["points"]}
    assert metrics["loss"] == 1.0                           # the report line after the long one is read
    assert metrics["worker_peak_mb"] < 100, metrics         # not the line's 128 MB (and a copy of it)
    log = open(task.log_path, "rb").read()
    assert log.count(b"x") == mb * MB                        # all of it is in the log, in order
    assert b"x\n@sweeplab " in log
