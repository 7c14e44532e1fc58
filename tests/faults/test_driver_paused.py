"""The driver itself paused: SIGSTOP (Ctrl-Z, a debugger, a frozen VM) for longer than the trials'
heartbeat timeout, then SIGCONT. The trials went on meanwhile and wrote their heartbeats into the pipe; the
driver must read them before it judges anyone silent, so no healthy trial is killed as hung.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

pytestmark = pytest.mark.slow


def test_a_driver_paused_past_the_heartbeat_timeout_kills_no_healthy_trial(chaos, reap):
    body = chaos.faulty_spec("stepper", params=chaos.params(x=0.5, steps=80, delay=0.05),
                             extra="trial: {heartbeat_timeout: 1s}\nbudget: {trials: 1}")
    proc = chaos.start("sweep", str(chaos.spec("pz", body)), "--name", "pz", "-q", "-w", "1")
    reap.append(proc.pid)
    chaos.wait_for(lambda: chaos.running_attempt("pz", 0), what="trial 0 running", proc=proc)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        time.sleep(2.5)                         # 2.5 heartbeat timeouts without the driver looking
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    (trial,) = chaos.trials("pz")
    attempts = chaos.attempts(trial["id"])
    assert [(a["state"], a["reason"]) for a in attempts] == [("completed", None)]
    assert trial["state"] == "completed"


def test_trials_that_end_inside_the_time_budget_while_the_driver_is_paused_keep_their_result(chaos, reap):
    """Both trials finish (about 1 s of work) while the driver is stopped; the driver wakes after budget.time
    is spent. What they sent before the deadline waits in the pipe: they ended inside the budget and are
    completed, not `stopped: budget.time ... reached` (the driver used to judge the deadline before reading).

    The pause lasts until both trials wrote their last checkpoint (their work is done) and budget.time has
    passed since they were seen running (the driver's clock started before that)."""
    budget = 6.0
    body = chaos.faulty_spec("stepper", method="random", params=chaos.params(x="{min: 0.0, max: 1.0}", steps=10,
                                                                             delay=0.1),
                             extra=f"budget: {{trials: 2, time: {budget:g}s}}")
    proc = chaos.start("sweep", str(chaos.spec("pt", body)), "--name", "pt", "-q", "-w", "2")
    reap.append(proc.pid)
    for n in (0, 1):
        chaos.wait_for(lambda n=n: chaos.running_attempt("pt", n), what=f"trial {n} running", proc=proc)
    seen_running = time.monotonic()
    os.kill(proc.pid, signal.SIGSTOP)
    last = [chaos.store / "checkpoints" / "pt" / str(n) / "step-0000000009" / "manifest.json" for n in (0, 1)]
    try:
        chaos.wait_for(lambda: all(p.exists() for p in last), timeout=60, what="both trials' last checkpoint")
        time.sleep(max(0.0, seen_running + budget + 0.5 - time.monotonic()))   # the sweep's time passes
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    trials = chaos.trials("pt")
    assert [(t["state"], t["reason"]) for t in trials] == [("completed", None)] * 2, trials
    assert not chaos.stray_workers()
