"""A command trial's whole process tree dies with its attempt, on every kill path; a hung program is detected.

The program (tree_program.py) starts a child and both write their pids; some variants give the child a
session of its own (as torchrun ranks may) or make both ignore SIGTERM. Each test kills the attempt one way
(trial.timeout, a frozen worker, the grace period after a stop, a signal to the driver, kill -9 of the
driver) and then polls until none of the recorded processes is alive: within a few seconds, never orphans.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).resolve().parent / "tree_program.py"


def _spec(pids: Path, *, trial: str = "", budget: str = "budget: {trials: 1}", **params: object) -> str:
    values = {"pids": str(pids), **params}
    lines = "\n".join(f"  {k}: {{value: {v!r}}}" for k, v in values.items())
    return (f"command: [{sys.executable!r}, {str(PROGRAM)!r}, '${{args}}']\nmethod: grid\n"
            f"metric: {{name: loss, goal: minimize}}\nparameters:\n{lines}\n{trial}\n{budget}\n")


def _pids(pids: Path, tag: str = "0-1") -> list[int]:
    return [int((pids / f"{tag}-{who}.pid").read_text()) for who in ("program", "child")]


def _wait_pids(chaos, pids: Path, proc, tag: str = "0-1") -> list[int]:
    chaos.wait_for(lambda: all((pids / f"{tag}-{w}.pid").exists() for w in ("program", "child")),
                   what=f"attempt {tag}'s program and child started", proc=proc)
    return _pids(pids, tag)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _assert_all_dead(pids: list[int], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    alive = [p for p in pids if _alive(p)]
    assert not alive, f"processes of the killed attempt still alive {within:g}s later: {alive}"


@pytest.fixture
def pids(tmp_path: Path) -> Path:
    d = tmp_path / "pids"
    d.mkdir()
    return d


def _start(chaos, reap, body: str, name: str):
    proc = chaos.start("sweep", str(chaos.spec(name, body)), "--name", name, "-q", "--workers", "1")
    reap.append(proc.pid)
    return proc


@pytest.mark.parametrize("setsid_child", [0, 1])
def test_trial_timeout_kills_the_program_and_its_child(chaos, reap, pids, setsid_child):
    body = _spec(pids, trial="trial: {timeout: 3s, retries: 0}", setsid_child=setsid_child)
    proc = _start(chaos, reap, body, "to")
    tree = _wait_pids(chaos, pids, proc)
    reap.extend(tree)
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err   # no trial completed
    assert "trial.timeout" in chaos.trial("to", 0)["reason"]
    _assert_all_dead(tree, within=2.0)


def test_a_frozen_worker_is_killed_with_its_program_tree(chaos, reap, pids):
    body = _spec(pids, trial="trial: {heartbeat_timeout: 2s, retries: 0}", setsid_child=1)
    proc = _start(chaos, reap, body, "hbw")
    tree = _wait_pids(chaos, pids, proc)
    reap.extend(tree)
    att = chaos.wait_for(lambda: chaos.running_attempt("hbw", 0), what="trial 0 running", proc=proc)
    reap.append(att["pid"])
    os.kill(att["pid"], signal.SIGSTOP)            # the worker freezes; its program goes on reporting
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err   # no trial completed
    assert "no heartbeat" in chaos.trial("hbw", 0)["reason"]
    _assert_all_dead(tree + [att["pid"]], within=3.0)


def test_the_grace_period_kill_after_a_stop_takes_the_whole_tree(chaos, reap, pids):
    # budget.time stops the trial; the program ignores SIGTERM, so trial.grace ends in a kill
    body = _spec(pids, trial="trial: {grace: 1s, retries: 0}", budget="budget: {trials: 1, time: 3s}",
                 ignore_term=1)
    proc = _start(chaos, reap, body, "gr")
    tree = _wait_pids(chaos, pids, proc)
    reap.extend(tree)
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err   # no trial completed
    attempt = chaos.attempts(chaos.trial("gr", 0)["id"])[0]
    assert "trial.grace" in attempt["reason"], attempt["reason"]
    _assert_all_dead(tree, within=2.0)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_the_driver_ends_every_process_of_the_running_attempt(chaos, reap, pids, sig):
    body = _spec(pids, trial="trial: {grace: 1s}", ignore_term=1, setsid_child=1)
    proc = _start(chaos, reap, body, "drv")
    tree = _wait_pids(chaos, pids, proc)
    reap.extend(tree)
    att = chaos.wait_for(lambda: chaos.running_attempt("drv", 0), what="trial 0 running", proc=proc)
    reap.append(att["pid"])
    os.kill(proc.pid, sig)
    proc.communicate(timeout=60)
    assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 0, signal.SIGKILL: -signal.SIGKILL}[sig]
    _assert_all_dead(tree + [att["pid"]], within=3.0)


@pytest.mark.parametrize("mode", ["freeze", "silent"])
def test_a_hung_program_is_killed_with_its_tree_and_retried_from_its_checkpoint(chaos, reap, pids, mode):
    body = _spec(pids, trial="trial: {heartbeat_timeout: 2s, retries: 1}", mode=mode, steps=4)
    proc = _start(chaos, reap, body, "hung")
    tree = _wait_pids(chaos, pids, proc)
    reap.extend(tree)
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    trial = chaos.trial("hung", 0)
    assert trial["state"] == "completed" and trial["attempts"] == 2
    first = chaos.attempts(trial["id"])[0]
    assert first["state"] == "failed"
    assert "no heartbeat for 2s" in first["reason"] and "trial.heartbeat_timeout" in first["reason"]
    _assert_all_dead(tree, within=2.0)
    assert (pids / "0-2-restored").read_text() == "1"   # attempt 2 went on from attempt 1's step 1


def test_a_program_computing_a_long_silent_step_is_not_taken_for_hung(chaos, reap, pids):
    # 3.5 s without a line, a report or a checkpoint (heartbeat_timeout 2 s), but using CPU: alive
    body = _spec(pids, trial="trial: {heartbeat_timeout: 2s, retries: 1}", mode="compute", steps=4)
    proc = _start(chaos, reap, body, "busy")
    reap.extend(_wait_pids(chaos, pids, proc))
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    trial = chaos.trial("busy", 0)
    assert trial["state"] == "completed" and trial["attempts"] == 1, trial


@pytest.mark.parametrize("setsid_child", [0, 1])
def test_a_program_that_exits_leaving_a_child_behind_ends_its_attempt_and_the_child(chaos, reap, pids,
                                                                                    setsid_child):
    # the child holds the program's stdout open: the attempt must still end when the program does
    body = _spec(pids, steps=2, setsid_child=setsid_child)
    proc = _start(chaos, reap, body, "left")
    tree = _wait_pids(chaos, pids, proc)
    reap.extend(tree)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert chaos.trial("left", 0)["state"] == "completed"
    _assert_all_dead(tree, within=2.0)


_ESCAPES = ("import os, subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import os, sys, time\\nos.setsid()\\n"
            "open(sys.argv[1], \"w\").write(str(os.getpid()))\\ntime.sleep(60)', sys.argv[1]])\n"
            "time.sleep(60)\n")


def test_a_program_whose_worker_dies_before_naming_it_to_the_reaper_leaves_nothing_behind(tmp_path):
    """The reaper is started before the program and told its pid after: a worker killed in between (a kill as
    the trial starts, a shutdown) used to leave no reaper at all (it was started after the program), and a
    grandchild in a session of its own ran on for good (seen once on the Ray backend's tree test in CI).
    EOF before the pid: the reaper kills everything carrying the attempt's mark."""
    from sweeplab.backends import _tree

    mark = _tree.new_mark()
    reaper = _tree.Reaper.start(mark)
    out = tmp_path / "grandchild.pid"
    program = subprocess.Popen([sys.executable, "-c", _ESCAPES, str(out)], start_new_session=True,
                               env={**os.environ, _tree.MARK: mark})
    try:
        deadline = time.monotonic() + 30
        while not (out.exists() and out.read_text()):
            assert time.monotonic() < deadline, "the grandchild did not start"
            time.sleep(0.02)
        reaper.close()   # the worker is gone before it could tell the reaper the program's pid
        _assert_all_dead([program.pid, int(out.read_text())])
    finally:
        program.kill()
        program.wait()


FUNCTION_TREE = """
import os, subprocess, sys, time

def train(config, run):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                             start_new_session=bool(config["setsid"]))
    with open(os.path.join(config["pids"], "child.pid"), "w") as f:
        f.write(str(child.pid))
    time.sleep(600)   # hangs: trial.timeout kills the worker
"""


@pytest.mark.parametrize("setsid_child", [0, 1])
def test_trial_timeout_of_a_function_trial_kills_the_processes_it_started(chaos, reap, pids, tmp_path,
                                                                            setsid_child):
    """A function trial's child in a session of its own (start_new_session=True: a data server, a
    tensorboard) escaped the kill of the worker's process group at trial.timeout and ran on as an orphan."""
    (tmp_path / "tree_fn.py").write_text(FUNCTION_TREE)
    target = f"{tmp_path / 'tree_fn.py'}:train"
    body = (f"function: {target!r}\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
            f"parameters:\n  pids: {{value: {str(pids)!r}}}\n  setsid: {{value: {setsid_child}}}\n"
            "trial: {timeout: 3s, retries: 0}\nbudget: {trials: 1}\n")
    proc = _start(chaos, reap, body, "fto")
    chaos.wait_for(lambda: (pids / "child.pid").exists(), what="the trial's child started", proc=proc)
    child = int((pids / "child.pid").read_text())
    reap.append(child)
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err
    assert "trial.timeout" in chaos.trial("fto", 0)["reason"]
    _assert_all_dead([child], within=2.0)


def test_a_second_sigterm_to_the_driver_ends_the_grace_period_at_once(chaos, reap, pids):
    """A SIGTERM preempts the running trials and waits `trial.grace` for them to end; a program that ignores
    SIGTERM held the driver the whole grace (10 minutes here) whatever else it was sent. A second SIGTERM (a
    second `kill`, a second `sweeplab stop`), as a second Ctrl-C does and as Ray Tune's second signal does,
    stops the wait: the trial's tree is killed, recorded resumable, and the driver exits 0 as for one SIGTERM.
    (A copy of the first signal that arrives within a second of it, as a group kill's can, changes nothing.)"""
    body = _spec(pids, trial="trial: {grace: 600s}", ignore_term=1)
    proc = _start(chaos, reap, body, "twice")
    tree = _wait_pids(chaos, pids, proc)
    reap.extend(tree)
    att = chaos.wait_for(lambda: chaos.running_attempt("twice", 0), what="trial 0 running", proc=proc)
    reap.append(att["pid"])
    os.kill(proc.pid, signal.SIGTERM)
    time.sleep(1.5)   # past the second within which a copy of the first is ignored
    os.kill(proc.pid, signal.SIGTERM)
    try:
        _out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("the driver still waited for trial.grace after a second SIGTERM") from None
    assert proc.returncode == 0, err
    _assert_all_dead(tree + [att["pid"]], within=3.0)
    trial = chaos.trial("twice", 0)
    assert trial["state"] in ("preempted", "interrupted"), dict(trial)
    assert [r["state"] for r in chaos.rows("SELECT state FROM sweeps WHERE name='twice'")] == ["stopped"]
    assert "second SIGTERM" in (chaos.attempts(trial["id"])[0]["reason"] or ""), dict(chaos.attempts(trial["id"])[0])
