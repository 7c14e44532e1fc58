"""The driver itself paused: SIGSTOP (Ctrl-Z, a debugger, a frozen VM) for longer than the trials'
heartbeat timeout, then SIGCONT. The trials went on meanwhile and wrote their heartbeats into the pipe; the
driver must read them before it judges anyone silent, so no healthy trial is killed as hung.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

FAULTY = Path(__file__).resolve().parents[1] / "fixtures" / "faulty.py"
# a command trial: `steps` reports `delay` seconds apart (its heartbeat: its output)
PROGRAM = """
import json, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
for step in range(int(args["steps"])):
    print("@sweeplab " + json.dumps({"loss": 1.0 / (step + 1), "step": step}), flush=True)
    time.sleep(float(args["delay"]))
print("@sweeplab " + json.dumps({"loss": 0.0}), flush=True)
"""


def _one_trial_running(chaos, reap, name: str, body: str):
    """A one-worker sweep `name` of `body`, started (its pid reaped at the end) and running its trial 0."""
    proc = chaos.start("sweep", str(chaos.spec(name, body)), "--name", name, "-q", "-w", "1")
    reap.append(proc.pid)
    chaos.wait_for(lambda: chaos.running_attempt(name, 0), what="trial 0 running", proc=proc)
    return proc


def test_a_driver_paused_past_the_heartbeat_timeout_kills_no_healthy_trial(chaos, reap):
    body = chaos.faulty_spec("stepper", params=chaos.params(x=0.5, steps=80, delay=0.05),
                             extra="trial: {heartbeat_timeout: 1s}\nbudget: {trials: 1}")
    proc = _one_trial_running(chaos, reap, "pz", body)
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
    def started() -> bool:   # running, or (a starved test looking late) already completed: kept all the same
        trials = chaos.trials("pt")
        return len(trials) == 2 and all(t["state"] in ("running", "completed") for t in trials)

    chaos.wait_for(started, what="both trials running", proc=proc)
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


def test_sweeplab_stop_stops_a_driver_that_is_itself_stopped(chaos, reap):
    """A sweep paused with Ctrl-Z (SIGTSTP) or SIGSTOP and then `sweeplab stop`ped from another terminal: stop said
    "asked the driver to stop" and exited 0, but a stopped process never acts on the SIGTERM, so the sweep stayed
    `running` with its trials going on until someone continued it by hand. `stop` continues it (SIGCONT after the
    SIGTERM, as a shell's `kill` does for a stopped job), and the sweep stops resumable; `resume` refused meanwhile
    names the pause."""
    body = chaos.faulty_spec("stepper", params=chaos.params(x=0.5, steps=2000, delay=0.05),
                             extra="budget: {trials: 1}")
    proc = _one_trial_running(chaos, reap, "zz", body)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        refused = chaos("resume", "zz", "-q")
        assert refused.returncode != 0 and "stopped" in refused.stderr and "kill -CONT" in refused.stderr, \
            refused.stderr
        cp = chaos("stop", "zz", check=True)
        assert "asked the driver" in cp.stdout, cp.stdout
        chaos.wait_for(lambda: proc.poll() is not None, timeout=30, what="the stopped driver to exit")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    assert [t["state"] for t in chaos.trials("zz")] == ["preempted"], [dict(t) for t in chaos.trials("zz")]
    assert [r["state"] for r in chaos.rows("SELECT state FROM sweeps WHERE name='zz'")] == ["stopped"]
    assert not chaos.stray_workers()


@pytest.mark.parametrize("kind", ["function", "command"])
def test_a_sweep_frozen_whole_past_its_silence_rules_kills_and_stops_no_trial(chaos, reap, kind):
    """The whole sweep paused at once, its trials with it (`docker pause`, a cgroup freeze, SIGSTOP to every
    process), for longer than trial.heartbeat_timeout and a `stalled` monitor's limit, then continued: the
    trials were as frozen as the driver, so they did not go silent. The driver used to wake first, find no
    heartbeat since before the pause and kill every trial as hung (or stop it, `stalled: no report for 5s`).
    A pause of the driver itself (a turn that comes late) no longer counts as the trials' silence."""
    import psutil

    if kind == "function":
        target = f"function: {FAULTY}:stepper\n"
    else:
        program = chaos.tmp / "program.py"
        program.write_text(PROGRAM)
        target = f"command: [{sys.executable!r}, {str(program)!r}, '${{args}}']\n"
    body = (f"{target}method: grid\nmetric: {{name: loss, goal: minimize}}\nparameters:\n"
            f"{chaos.params(x=0.5, steps=60, delay=0.05)}\nbudget: {{trials: 1}}\n"
            "trial: {heartbeat_timeout: 2s}\nmonitors: [{stalled: {after: 2s}}]\n")
    proc = _one_trial_running(chaos, reap, "fz", body)
    chaos.wait_for(lambda: chaos.steps(chaos.trial("fz", 0)["id"], 1), what="trial 0 reporting", proc=proc)
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    for p in reversed(tree):
        p.suspend()
    try:
        time.sleep(5)                           # 2.5 times the silence limits, everything frozen
    finally:
        for p in tree:                          # the driver first: it looks before its trials can say anything
            with contextlib.suppress(psutil.Error):
                p.resume()
                if p.pid == proc.pid:
                    time.sleep(0.5)             # (well inside the limits: a thaw order the driver must not mind)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    (trial,) = chaos.trials("fz")
    attempts = chaos.attempts(trial["id"])
    assert [(a["state"], a["reason"]) for a in attempts] == [("completed", None)]
    assert not chaos.stray_workers()


def test_status_shows_a_sweep_whose_driver_is_paused_as_paused_not_running(chaos, reap):
    """A sweep whose driver is stopped (Ctrl-Z, SIGSTOP) does nothing until continued; `status` listed it as
    plain `running`, as a sweep at work. The list says `running (driver paused)`, the sweep's own view says how
    to continue it; once continued it is plain `running` again."""
    body = chaos.faulty_spec("stepper", params=chaos.params(x=0.5, steps=2000, delay=0.05),
                             extra="budget: {trials: 1}")
    proc = _one_trial_running(chaos, reap, "zp", body)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        chaos.wait_for(lambda: _stopped(proc.pid), timeout=10, what="the driver to be stopped")
        listed = chaos("status", check=True).stdout
        assert "running (driver paused)" in listed, listed
        one = chaos("status", "zp", check=True).stdout
        assert f"driver (pid {proc.pid}) is paused" in one and f"kill -CONT {proc.pid}" in one, one
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    chaos.wait_for(lambda: not _stopped(proc.pid), timeout=10, what="the driver to be continued")
    listed = chaos("status", check=True).stdout
    assert "running" in listed and "paused" not in listed, listed
    chaos("stop", "zp", check=True)
    proc.communicate(timeout=60)


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0] in ("T", "t")
