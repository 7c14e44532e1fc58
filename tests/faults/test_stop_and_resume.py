"""`sweeplab stop` and `sweeplab resume` of one sweep close together: real CLI processes and real signals.

A resume typed while the stopped driver still shuts down (its trials checkpoint within trial.grace) waits for it
rather than being refused as if the sweep were run by someone else; a stop typed while a resume starts up (before
it recorded itself as the sweep's driver) stops that resume, not "the driver is gone".
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

import pytest

pytestmark = pytest.mark.slow


def _lock_text(chaos, name: str) -> str:
    with contextlib.suppress(OSError):
        return (chaos.store / "locks" / f"{name}.lock").read_text()
    return ""


def test_resume_right_after_stop_waits_for_the_stopping_driver(chaos, reap, tmp_path):
    ready = tmp_path / "ready"
    body = chaos.faulty_spec("checkpoint_then_wait", params=chaos.params(x=0.5, steps=2, ready_file=str(ready)),
                             extra="trial: {retries: 1, grace: 120}")
    proc = chaos.start("sweep", str(chaos.spec("s", body)), "--name", "st", "--workers", "1", "-q")
    reap.append(proc.pid)
    chaos.wait_for(ready.exists, what="trial 0 checkpointed and waiting", proc=proc)
    worker = int(ready.read_text())
    reap.append(worker)
    cp = chaos("stop", "st", timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    # the trial ignores the stop: its driver waits trial.grace for it, and says so in the sweep's lock
    chaos.wait_for(lambda: "stopping" in _lock_text(chaos, "st"), what="the driver marked stopping", proc=proc)
    again = chaos.start("resume", "st", "-q")
    reap.append(again.pid)
    line = again.stdout.readline()
    while line and "is stopping" not in line:
        line = again.stdout.readline()
    assert f"its driver (pid {proc.pid}) is stopping (asked to stop at" in line
    os.kill(worker, signal.SIGKILL)   # the stopping driver ends now; the waiting resume takes the sweep
    proc.communicate(timeout=60)
    out, err = again.communicate(timeout=90)
    assert again.returncode == 0, f"{line}{out}\n{err}"
    assert chaos.trial("st", 0)["state"] == "completed"


def test_stop_while_a_resume_starts_stops_that_resume(chaos, reap, tmp_path):
    # the resume is held in its start-up, reading its base config from a FIFO, until the stop was typed
    config = tmp_path / "base.yaml"
    config.write_text("steps: 1\n")
    body = chaos.faulty_spec("stepper", params=chaos.params(x="{values: [0.1, 0.2]}"),
                             extra=f"config: {config}\nbudget: {{trials: 1}}")
    cp = chaos("sweep", str(chaos.spec("s", body)), "--name", "su", "--workers", "1", "-q", timeout=90)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    config.unlink()
    os.mkfifo(config)
    served = threading.Event()

    def serve() -> None:
        with open(config, "w") as fifo:   # blocks until the resume opens it
            fifo.write("steps: 1\n")
        served.set()

    again = chaos.start("resume", "su", "--trials", "+1", "-q")
    reap.append(again.pid)
    try:
        chaos.wait_for(lambda: _lock_text(chaos, "su").startswith(f"pid {again.pid}\n"),
                       what="the resume holds the lock", proc=again, timeout=30)
        cp = chaos("stop", "su", timeout=60)
        assert cp.returncode == 0 and f"pid {again.pid}" in cp.stdout, cp.stdout + cp.stderr
    finally:
        threading.Thread(target=serve, daemon=True).start()
    out, err = again.communicate(timeout=90)
    assert again.returncode == 143 and "stopped before it began (SIGTERM)" in out, f"{out}\n{err}"
    assert [t["state"] for t in chaos.trials("su")] == ["completed"]   # no trial added or run
    assert served.wait(5)


def test_resume_of_a_stopping_driver_that_was_then_sigstopped_names_kill_cont(chaos, reap, tmp_path):
    # waiting for it would be waiting for nothing: it cannot finish stopping until continued
    ready = tmp_path / "ready"
    body = chaos.faulty_spec("checkpoint_then_wait", params=chaos.params(x=0.5, steps=2, ready_file=str(ready)),
                             extra="trial: {retries: 1, grace: 120}")
    proc = chaos.start("sweep", str(chaos.spec("s", body)), "--name", "ps", "--workers", "1", "-q")
    reap.append(proc.pid)
    chaos.wait_for(ready.exists, what="trial 0 checkpointed and waiting", proc=proc)
    reap.append(int(ready.read_text()))
    assert chaos("stop", "ps", timeout=60).returncode == 0
    chaos.wait_for(lambda: "stopping" in _lock_text(chaos, "ps"), what="the driver marked stopping", proc=proc)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        cp = chaos("resume", "ps", "-q", timeout=60)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "was asked to stop at" in cp.stderr and f"kill -CONT {proc.pid}" in cp.stderr, cp.stderr
