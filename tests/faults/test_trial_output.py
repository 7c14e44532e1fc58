"""Hostile output of a command trial's program: a line of stdout far longer than memory should hold.

A program may write megabytes without a newline (binary data, a progress bar redrawn with carriage
returns on stdout, a runaway print). The worker copies it to the trial's log as it comes, in bounded memory,
and still reads the `@sweeplab` lines that follow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path

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
    body = log[log.index(b"x" * 64):]                        # after the header (its paths may hold an x)
    assert body.count(b"x") == mb * MB                       # all of it is in the log, in order
    assert b"x\n@sweeplab " in log


# writes `mb` MB on stdout and on stderr (far more than a pipe holds, and than the log's disk), with a report
# line every 64 KB of stdout, then its last report
FLOOD = """
import json, sys
line = b"y" * 1023 + b"\\n"
for step in range({mb} * 16):
    for _ in range(64):
        sys.stdout.buffer.write(line)
        sys.stderr.buffer.write(line)
    sys.stdout.buffer.write(b"@sweeplab " + json.dumps({{"step": step, "loss": 1.0 / (step + 1)}}).encode() + b"\\n")
sys.stdout.flush()
sys.stderr.flush()
print("@sweeplab " + json.dumps({{"done": 1.0}}), flush=True)
"""


@pytest.fixture
def log_disk(tmp_path, tmpfs):
    """A 1 MB tmpfs for a trial's log (its report file and checkpoints stay where there is room)."""
    return tmpfs(tmp_path / "log-disk", "1m")


def test_a_program_whose_log_is_on_a_full_disk_still_runs_and_reports(tmp_path, log_disk):
    """Its output is drained (the program never blocks on a full pipe), its reports all count, and the lost log
    is noted once: a warning, not a crashed copier, a hung or a failed trial."""
    mb = 4
    script = tmp_path / "flood.py"
    script.write_text(FLOOD.format(mb=mb))
    b = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]))
    b.start()
    try:
        task = dataclasses.replace(make_task(tmp_path, 1, command=[sys.executable, str(script)]),
                                   log_path=str(log_disk / "1.log"))
        Path(task.report_path).parent.mkdir()
        b.submit(task)
        events = collect(b, [1], timeout=120)[1]
        assert b.running() == [] or 1 not in b.running()
    finally:
        b.shutdown()
    assert events[-1].kind is EventKind.FINISHED, events[-1]
    points = [p for e in events if e.kind is EventKind.METRICS for p in e.data["points"]]
    assert sorted(p[0] for p in points if p[1] == "loss") == list(range(mb * 16))   # every report counted
    assert any(p[1] == "done" for p in points)
    notes = [e.data for e in events if e.kind is EventKind.NOTE]
    assert len(notes) == 1, notes                                                   # noted once
    assert notes[0]["level"] == "warning" and str(log_disk / "1.log") in notes[0]["message"], notes
    assert "No space left on device" in notes[0]["message"], notes
    assert (log_disk / "1.log").read_bytes().startswith(b"# sweeplab: ")            # what fitted is kept


def test_a_function_whose_log_is_on_a_full_disk_is_not_failed(tmp_path, log_disk):
    """A function trial's stdout and stderr are its log file itself: a print that finds the disk full raises in
    the trial, which ends as having found the disk full (the driver stops the sweep, resumable), not failed."""
    faulty = Path(__file__).resolve().parents[1] / "fixtures" / "faulty.py"
    b = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]))
    b.start()
    try:
        task = dataclasses.replace(make_task(tmp_path, 1, f"{faulty}:printer", config={"mb": 4}),
                                   log_path=str(log_disk / "1.log"))
        b.submit(task)
        events = collect(b, [1], timeout=120)[1]
    finally:
        b.shutdown()
    end = events[-1]
    assert end.kind is EventKind.FAILED and end.data.get("disk_full") is True, end
    assert "No space left on device" in end.data["reason"] and str(log_disk) in end.data["reason"], end


def test_a_torch_trace_that_finds_the_disk_full_is_noted_not_listed(tmp_path, log_disk):
    """The optional torch.profiler trace (`trial.torch_profiler`) of a trial whose artifacts' disk is full: the
    trial goes on, the lost trace is a warning, and no artifact is listed for a file that is not there (torch
    only logs its failure to write)."""
    pytest.importorskip("torch")
    from sweeplab.run import Run

    with open(log_disk / "fill", "wb") as fh:    # the disk is full from the start
        with contextlib.suppress(OSError):
            while True:
                fh.write(bytes(1 << 16))
                fh.flush()
    sent: list[tuple[str, dict]] = []
    run = Run(config={}, sink=lambda kind, data: sent.append((kind, data)),
              torch_profiler={"start": 0, "steps": 2}, artifacts_dir=str(log_disk / "artifacts"))
    assert list(run.track(range(4))) == [0, 1, 2, 3]
    assert [k for k, _ in sent if k == "artifact"] == [], sent
    notes = [d for k, d in sent if k == "note"]
    assert len(notes) == 1 and notes[0]["level"] == "warning" and str(log_disk) in notes[0]["message"], sent
