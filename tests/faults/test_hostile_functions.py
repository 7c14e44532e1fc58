"""Hostile function trials run by a real sweep (Python API, local backend, real worker processes).

A trial function may misbehave in ways a plain bug does not: an exception whose `str()` raises, a child
process forked and left running after the function returned. Each is recorded as what it is (the trial's
state and reason), the sweep goes on, and nothing of the trial outlives it.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import psutil
import pytest

import sweeplab as sl

pytestmark = pytest.mark.slow

TRIALS = '''
import os, resource, signal, sys, threading, time

class BadStr(Exception):
    def __str__(self):
        raise RuntimeError("str boom")

def bad_str(config, run):
    raise BadStr()

def fork_and_leave(config, run):
    pid = os.fork()
    if pid == 0:
        with open(config.pidfile, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
        os._exit(0)
    while not os.path.exists(config.pidfile):
        time.sleep(0.01)
    return {"val": float(config.i)}

def daemonize(config, run):
    pid = os.fork()
    if pid == 0:   # a daemon: a session of its own, then a second fork whose parent exits
        os.setsid()
        if os.fork() == 0:
            with open(config.pidfile + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(config.pidfile + ".tmp", config.pidfile)
            time.sleep(60)
        os._exit(0)
    os.waitpid(pid, 0)
    while not os.path.exists(config.pidfile):
        time.sleep(0.01)
    return {"val": 1.0}

def huge_step(config, run):
    run.log({"val": 1.0}, step=0)
    run.log({"val": 2.0}, step=2**70)

def huge_result(config, run):
    return [{"val": 1.0, "big": 10**400}, {"val": 10**400}][config.i]

def _handler(*args):
    pass

def change_the_process(config, run):
    if config.i == 0:   # the first trial changes what a process holds
        os.chdir("/"); os.umask(0o077); os.environ["HOSTILE_MARK"] = "1"; sys.path.insert(0, "HOSTILE_MARK")
        signal.signal(signal.SIGTERM, _handler); signal.signal(signal.SIGINT, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_AS, (1 << 40, resource.getrlimit(resource.RLIMIT_AS)[1]))
        resource.setrlimit(resource.RLIMIT_CPU, (3600, resource.getrlimit(resource.RLIMIT_CPU)[1]))
        return {"val": 0.0}
    umask = os.umask(0o022); os.umask(umask)
    seen = [what for what, yes in [
        ("cwd", os.getcwd() == "/"), ("umask", umask == 0o077), ("env", "HOSTILE_MARK" in os.environ),
        ("sys.path", "HOSTILE_MARK" in sys.path), ("SIGTERM handler", signal.getsignal(signal.SIGTERM) is _handler),
        ("SIGINT handler", signal.getsignal(signal.SIGINT) is signal.SIG_DFL),
        ("RLIMIT_AS", resource.getrlimit(resource.RLIMIT_AS)[0] == 1 << 40),
        ("RLIMIT_CPU", resource.getrlimit(resource.RLIMIT_CPU)[0] == 3600),
        ("thread", any(t.name == "hostile-leftover" for t in threading.enumerate()))] if yes]
    if seen:
        raise RuntimeError("saw the previous trial's " + ", ".join(seen))
    if config.i == 1:   # the second one leaves a thread of its own running
        stop = time.monotonic() + 30
        threading.Thread(target=lambda: [time.sleep(0.05) for _ in iter(lambda: time.monotonic() > stop, True)],
                         name="hostile-leftover").start()
    return {"val": 1.0}

def fork_child_returns(config, run):
    pid = os.fork()
    if pid == 0:   # the child goes back up the worker's stack, as a careless fork does
        run.log({"child": 1.0}, step=0)
        return {"val": 99.0}
    os.waitpid(pid, 0)
    run.log({"parent": 1.0}, step=0)
    return {"val": 1.0}


def raises_keyboard_interrupt(config, run):
    run.log({"val": 2.0}, step=0)
    if config.i == 0:
        raise KeyboardInterrupt   # the function's own (a library's "cancelled", a bare re-raise), not a Ctrl-C
    return {"val": 1.0}


def close_fds(config, run):
    run.log({"val": 2.0}, step=0)
    os.closerange(3, 4096)   # as daemonizing code does: the worker's pipe to the driver with it
    return {"val": 1.0}
'''


def _sweep(tmp_path: Path, fn: str, n: int = 1, **params: object) -> Any:
    module = tmp_path / "trials.py"
    module.write_text(TRIALS)
    spec = {"name": fn, "function": f"{module}:{fn}", "method": "grid", "metric": {"name": "val", "goal": "minimize"},
            "parameters": {"i": {"values": list(range(n))}, **{k: {"value": v} for k, v in params.items()}},
            "trial": {"retries": 0}}
    return sl.run_sweep(spec, workers=1, store=tmp_path / "store")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_an_exception_whose_str_raises_fails_its_trial_with_its_type_as_the_reason(tmp_path):
    outcome = _sweep(tmp_path, "bad_str")
    assert outcome.exit_code == 1
    assert outcome.counts["failed"] == 1
    assert "BadStr" in outcome.reason, outcome.reason
    assert "worker process exited" not in outcome.reason


def test_a_function_that_closes_its_workers_pipe_fails_saying_so(tmp_path):
    """os.closerange(3, ...) in the function closed the worker's event pipe: the trial failed as
    "worker process exited with code 1" and its log held nothing about why."""
    outcome = _sweep(tmp_path, "close_fds")
    assert outcome.counts["failed"] == 1
    assert "trial 0: the trial closed its worker's pipe to the driver" in outcome.reason, outcome.reason
    assert "command trial" in outcome.reason
    (log,) = (tmp_path / "store" / "logs" / "close_fds").glob("0-1.log")
    assert "file descriptor" in log.read_text()


@pytest.mark.parametrize("trial", ["fork_and_leave", "daemonize"], ids=["forked-child", "setsid-daemon"])
def test_what_a_function_trial_forked_and_left_running_ends_with_the_trial(tmp_path, trial):
    """A child the function forked and left running, or a daemon it detached (setsid and a double fork, no
    longer its descendant but for the worker's subreaper), ends with the trial."""
    pidfile = tmp_path / "child.pid"
    outcome = _sweep(tmp_path, trial, pidfile=str(pidfile))
    pid = int(pidfile.read_text())
    try:
        assert outcome.exit_code == 0 and outcome.counts["completed"] == 1
        assert not _alive(pid), f"the trial's {trial} process outlived its trial"
    finally:
        if _alive(pid):
            os.kill(pid, 9)


def test_a_forked_child_that_returns_from_the_function_does_not_speak_for_the_trial(tmp_path):
    outcome = _sweep(tmp_path, "fork_child_returns")
    assert outcome.exit_code == 0, outcome.reason
    assert outcome.best_value == 1.0


def test_the_next_trial_in_a_worker_sees_nothing_the_previous_function_changed_or_left_running(tmp_path):
    outcome = _sweep(tmp_path, "change_the_process", n=3)
    assert outcome.exit_code == 0, outcome.reason
    assert outcome.counts["completed"] == 3, outcome.reason


def test_a_step_too_large_for_the_store_fails_its_trial_not_the_driver(tmp_path):
    outcome = _sweep(tmp_path, "huge_step", n=2)
    assert outcome.state.value == "failed" and outcome.counts["failed"] == 2, outcome.reason
    assert "ValueError: run.log: step 1180591620717411303424 is out of range" in outcome.reason
    assert "driver failed" not in outcome.reason


def test_a_command_report_whose_step_the_store_cannot_hold_is_logged_at_the_next_step(tmp_path):
    program = tmp_path / "prog.py"
    program.write_text("import sys\nfor step in sys.argv[1][len('--step='):].split(','):\n"
                       "    print('@sweeplab {\"val\": 1.0, \"step\": %s}' % step, flush=True)\n")
    spec = {"name": "steps", "program": str(program), "method": "grid", "metric": {"name": "val", "goal": "minimize"},
            "parameters": {"step": {"values": ["0,1180591620717411303424", "0,Infinity", "0,NaN,1e30"]}}}
    outcome = sl.run_sweep(spec, workers=1, store=tmp_path / "store")
    assert outcome.exit_code == 0 and outcome.counts["completed"] == 3, outcome.reason


def test_a_returned_int_too_large_for_a_float_is_infinite_not_an_overflow_in_sweeplab(tmp_path):
    outcome = _sweep(tmp_path, "huge_result", n=2)
    assert outcome.counts["completed"] == 1 and outcome.best_value == 1.0, outcome.reason
    with sqlite3.connect(tmp_path / "store" / "store.db") as db:
        reasons = dict(db.execute("SELECT number, reason FROM trials"))
    assert reasons[1] == "objective val is inf"


def test_a_keyboardinterrupt_the_function_raises_itself_fails_its_trial_with_its_traceback(tmp_path):
    """Workers ignore SIGINT (Ctrl-C is the driver's), so a KeyboardInterrupt in a trial is the function's own:
    it was re-raised, and the worker's death read "killed by signal SIGINT", with no traceback kept and a new
    worker started. It is the trial's failure, named where it was raised, and the next trial runs."""
    outcome = _sweep(tmp_path, "raises_keyboard_interrupt", n=2)
    assert (outcome.counts.get("failed"), outcome.counts.get("completed")) == (1, 1), outcome.counts
    con = sqlite3.connect(tmp_path / "store" / "store.db")
    (reason,) = con.execute("SELECT reason FROM trials WHERE number = 0").fetchone()
    (traceback, pids) = con.execute("SELECT a.traceback, (SELECT COUNT(DISTINCT pid) FROM attempts) FROM attempts a "
                                    "JOIN trials t ON a.trial_id = t.id WHERE t.number = 0").fetchone()
    con.close()
    assert reason == "KeyboardInterrupt", reason
    assert "trials.py" in traceback and "raise KeyboardInterrupt" in traceback, traceback
    assert pids == 1   # the worker went on to the next trial
