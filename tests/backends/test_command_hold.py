"""A command trial whose program reports through `sl.Run.from_env()` is held at the scheduler's decision steps
(an ASHA rung) as a function trial is: its `run.log` waits for the verdict, so a pruned program trains not one
step past its rung, and a continued one goes on (backends/command_trial.py `_Verdicts`, _program_run.py). Real
sweeps of real programs; and a program whose runner is gone while it waits does not wait on."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sweeplab as sl

PROGRAM = """\
import os, pathlib, sys
import sweeplab as sl

args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
run = sl.Run.from_env(args)
kind, _, variant = args["kind"].partition("-")
floor = 0.2 if variant else 0.1
rank = "" if run.rank == 0 else f".rank{run.rank}"   # only rank 0 reports, and waits
trained = pathlib.Path(args["out"]) / f"{args['kind']}{rank}.trained"
for step in range(1, int(args["steps"]) + 1):
    trained.write_text(str(step))          # this step was trained
    loss = floor + 1.0 / step if kind == "good" else 2.0 + 0.5 / step
    run.log({"val_loss": loss}, step=step)
    if run.should_stop:
        break
"""


def _sweep(tmp_path: Path, *, backend: str = "local", early: dict | None = None,
           ranks: int = 1) -> tuple[Path, sl.SweepOutcome]:
    prog = tmp_path / "train.py"
    prog.write_text(PROGRAM)
    out = tmp_path / "out"
    out.mkdir()
    spec = {"program": str(prog), "method": "grid", "metric": {"name": "val_loss", "goal": "minimize"},
            "early_terminate": early or {"type": "asha", "min_iter": 1, "max_iter": 300, "eta": 3},
            "trial": {"retries": 0}, "resources": {"cpus": 1, "workers": ranks},
            "parameters": {"kind": {"values": ["good-b", "good", "hopeless-a", "hopeless-b"]},
                           "steps": {"value": 300}, "out": {"value": str(out)}}}
    outcome = sl.run_sweep(spec, store=tmp_path / "store", backend=backend, workers=1, name="held")
    return out, outcome


def _trained(out: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in sorted(out.glob("*.trained")) if ".rank" not in p.name}


def _reported(store: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(store / "store.db") as c:
        return c.execute("SELECT t.state, MAX(m.step) FROM metrics m JOIN trials t ON t.id = m.trial_id "
                         "WHERE m.key = 'val_loss' GROUP BY t.number ORDER BY t.number").fetchall()


ASHA = {"type": "asha", "min_iter": 1, "max_iter": 300, "eta": 3}
HYPERBAND = {"type": "hyperband", "min_iter": 1, "max_iter": 300, "eta": 3}   # bands count reports


@pytest.mark.parametrize(("backend", "early", "ranks"), [
    ("local", ASHA, 1), ("local", HYPERBAND, 1), ("local", ASHA, 2),
    pytest.param("ray", ASHA, 1, marks=pytest.mark.ray)],
    ids=["local-asha", "local-hyperband", "local-asha-2-ranks", "ray-asha"])
def test_a_pruned_command_trial_trains_nothing_past_its_rung_and_a_continued_one_goes_on(tmp_path, backend, early,
                                                                                         ranks):
    """Without the hold, the hopeless programs (no pause between steps) ran far past step 1 (to step 8, 14,
    300) before the SIGTERM of the prune reached them. Ray's actors run the local worker: the same hold. In a
    2-rank trial rank 0 (the one that reports) waits; the other ranks go on until they meet it in a collective
    (this program has none: they run on until the SIGTERM)."""
    if backend == "ray":
        pytest.importorskip("ray")
    out, outcome = _sweep(tmp_path, backend=backend, early=early, ranks=ranks)
    assert outcome.exit_code == 0, outcome
    assert _reported(tmp_path / "store") == [("completed", 300), ("completed", 300), ("pruned", 1), ("pruned", 1)]
    assert _trained(out) == {"good-b": 300, "good": 300, "hopeless-a": 1, "hopeless-b": 1}


WAITER = """\
import sys, sweeplab as sl
run = sl.Run.from_env()
run.log({"val_loss": 1.0}, step=0)
run.log({"val_loss": 0.5}, step=1)      # decision step 1: waits for the verdict
print("returned", run.should_stop, flush=True)
"""


def _program_env(tmp_path: Path, worker_pid: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPLAB_")}
    env.update({"SWEEPLAB_REPORT_FILE": str(tmp_path / "r.jsonl"), "SWEEPLAB_SWEEP": "s", "SWEEPLAB_TRIAL": "0",
                "SWEEPLAB_DECISION_FILE": str(tmp_path / "r.jsonl.verdict"), "SWEEPLAB_DECISION_STEPS": "1,3",
                "SWEEPLAB_DECISION_METRIC": "val_loss", "SWEEPLAB_WORKER_PID": str(worker_pid),
                "SWEEPLAB_DECISION_WAIT": "600"})   # so long that a test would time out on it
    env.update(extra)
    return env


def _waiting(report: Path, prog: subprocess.Popen[str], deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while '"@decide": 1' not in (report.read_text() if report.exists() else ""):
        assert prog.poll() is None and time.monotonic() < end, "the program did not wait at its decision step"
        time.sleep(0.02)


@pytest.mark.parametrize("verdict", ['{"go": 1, "stop": null}', '{"go": -1, "stop": "pruned"}', None],
                         ids=["go", "stop", "worker-gone"])
def test_a_waiting_program_returns_on_the_verdict_or_when_its_worker_is_gone(tmp_path, verdict):
    """The program waits at step 1 (its report and `@decide` line written) until the verdict file says go on
    (should_stop stays False) or stop (it is set); with no verdict, it stops waiting once the worker that
    would answer is gone (here a stand-in process, killed), not after its (here 600 s) bound."""
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        prog = subprocess.Popen([sys.executable, "-c", WAITER], env=_program_env(tmp_path, worker.pid),
                                stdout=subprocess.PIPE, text=True)
        _waiting(tmp_path / "r.jsonl", prog)
        assert prog.poll() is None                 # held
        if verdict is None:
            worker.kill()
            worker.wait()
        else:
            tmp = tmp_path / "v.tmp"
            tmp.write_text(verdict)
            os.replace(tmp, tmp_path / "r.jsonl.verdict")
        stdout, _ = prog.communicate(timeout=60)
    finally:
        worker.kill()
        worker.wait()
    assert stdout.split() == ["returned", "True" if verdict and "pruned" in verdict else "False"]
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert lines == ['{"val_loss":1.0,"@step":0}', '{"val_loss":0.5,"@step":1}', '{"@decide": 1}']


def test_without_decision_variables_a_program_never_waits(tmp_path):
    """No scheduler (or a runner that passes no verdict file): `run.log` at any step returns at once, and
    writes no `@decide` line."""
    env = _program_env(tmp_path, os.getpid())
    del env["SWEEPLAB_DECISION_FILE"]
    cp = subprocess.run([sys.executable, "-c", WAITER], env=env, capture_output=True, text=True, timeout=60)
    assert cp.stdout.split() == ["returned", "False"], cp.stderr
    assert "@decide" not in (tmp_path / "r.jsonl").read_text()


HELD = """\
import os, pathlib, sys, time
import sweeplab as sl

args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
out = pathlib.Path(args["out"])
run = sl.Run.from_env(args)
run.log({"val_loss": 1.0}, step=0)
(out / "pid").write_text(str(os.getpid()))
while not (out / "on").exists():     # the test stops the driver first
    time.sleep(0.01)
run.log({"val_loss": 0.5}, step=1)   # rung 1: waits for a verdict the stopped driver cannot give
(out / "returned").write_text("")
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as fh:   # a zombie not yet reaped by its new parent is gone too
        return fh.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_program_waiting_for_a_verdict_ends_when_its_driver_is_killed(tmp_path):
    """The driver stopped (SIGSTOP) while the program waits at its rung, then killed: the program does not
    wait on (here its bound is 600 s): its worker goes with the driver and its process tree is ended, or the
    program sees its worker gone."""
    prog, out = tmp_path / "held.py", tmp_path / "out"
    prog.write_text(HELD)
    out.mkdir()
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"program: {prog}\nmethod: grid\nmetric: {{name: val_loss, goal: minimize}}\n"
                    "early_terminate: {type: asha, min_iter: 1, max_iter: 9, eta: 3}\n"
                    f"parameters:\n  out: {{value: '{out}'}}\n")
    env = {**os.environ, "SWEEPLAB_DECISION_WAIT": "600", "PYTHONPATH": os.pathsep.join(sys.path)}
    driver = subprocess.Popen([sys.executable, "-m", "sweeplab", "sweep", str(spec), "--store",
                               str(tmp_path / "store"), "--workers", "1", "-q"], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 60
        while not (out / "pid").exists():
            assert driver.poll() is None and time.monotonic() < end, "the program never started"
            time.sleep(0.02)
        pid = int((out / "pid").read_text())
        driver.send_signal(signal.SIGSTOP)
        (out / "on").write_text("")
        reports = list((tmp_path / "store").rglob("*.report.jsonl"))
        end = time.monotonic() + 30
        while not any('"@decide": 1' in p.read_text() for p in reports):
            assert time.monotonic() < end and not _gone(pid), "the program did not wait at its rung"
            time.sleep(0.02)
            reports = list((tmp_path / "store").rglob("*.report.jsonl"))
        assert not (out / "returned").exists()     # held: the driver cannot answer
        driver.kill()
        driver.wait()
        end = time.monotonic() + 60
        while not _gone(pid):
            assert time.monotonic() < end, "the program still waits for its killed driver"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
