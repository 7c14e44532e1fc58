"""A W&B program in a command trial is held at the scheduler's decision steps (an ASHA rung, a hyperband band)
as a program using `sl.Run.from_env()` is: the hook's `wandb.log` at such a step writes the report and an
`@decide` line and waits for the verdict file (wandb_compat/_boot/_sweeplab_wandb_hook.py, `_Hold`), so a
pruned run trains nothing past its rung. W&B's own agent does not hold runs: its controller stops them at its
next look, minutes later. Real sweeps of real W&B programs, offline."""

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

from sweeplab.wandb_compat import BOOT_DIR

pytest.importorskip("wandb", reason="pip install 'sweeplab[wandb]'")
pytestmark = pytest.mark.slow

SRC = Path(__file__).resolve().parents[2] / "src"

PROGRAM = """\
import pathlib, sys
import wandb

run = wandb.init(project="held")
kind, out = run.config.kind, pathlib.Path(run.config.out)
floor = 0.2 if kind.endswith("-b") else 0.1
for step in range(run.config.steps):
    (out / f"{kind}.trained").write_text(str(step))          # this step was trained
    loss = floor + 1.0 / (step + 1) if kind.startswith("good") else 2.0 + 0.5 / (step + 1)
    wandb.log({"val_loss": loss})   # a row of its own, at W&B's next _step (0, 1, ...): reported at once
run.finish()
"""


def _offline_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "SWEEPLAB_"))}
    nowhere = "http://127.0.0.1:9"
    env.update({"WANDB_BASE_URL": nowhere, "HTTP_PROXY": nowhere, "HTTPS_PROXY": nowhere, "http_proxy": nowhere,
                "https_proxy": nowhere, "NO_PROXY": "", "no_proxy": "", "WANDB_API_KEY": "",
                "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)})
    env.update(extra)
    return env


ASHA = "{type: asha, min_iter: 1, max_iter: 300, eta: 3}"
HYPERBAND = "{type: hyperband, min_iter: 1, max_iter: 300, eta: 3}"   # bands count reports


@pytest.mark.parametrize(("early", "rung"), [(ASHA, 1), (HYPERBAND, 0)], ids=["asha", "hyperband"])
def test_a_pruned_wandb_program_trains_nothing_past_its_rung_and_a_continued_one_goes_on(tmp_path, early, rung):
    """Without the hold the hopeless runs (no pause between steps) trained and logged past their rung (ASHA's
    step 1; hyperband's band 1, their first report, at _step 0) until the SIGTERM of the prune reached them, as
    many steps as the round trip through the driver took."""
    (tmp_path / "train.py").write_text(PROGRAM)
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "sweep.yaml").write_text(
        "program: train.py\nmethod: grid\nmetric: {name: val_loss, goal: minimize}\n"
        f"early_terminate: {early}\ntrial: {{retries: 0}}\nparameters:\n"
        "  kind: {values: [good-b, good, hopeless-a, hopeless-b]}\n  steps: {value: 300}\n"
        f"  out: {{value: '{out}'}}\n")
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", "store", "-q",
                           "--workers", "1"], cwd=tmp_path, env=_offline_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with sqlite3.connect(tmp_path / "store" / "store.db") as c:
        reported = c.execute("SELECT t.state, MAX(m.step) FROM metrics m JOIN trials t ON t.id = m.trial_id "
                             "WHERE m.key = 'val_loss' GROUP BY t.number ORDER BY t.number").fetchall()
    assert reported == [("completed", 299), ("completed", 299), ("pruned", rung), ("pruned", rung)]
    trained = {p.stem: int(p.read_text()) for p in out.glob("*.trained")}
    assert trained == {"good-b": 299, "good": 299, "hopeless-a": rung, "hopeless-b": rung}


WAITER = """\
import signal, sys
import wandb

if sys.argv[1] == "handler":   # the program's own SIGTERM handler: it saves and exits 3
    signal.signal(signal.SIGTERM, lambda signum, frame: (print("handled", flush=True), sys.exit(3)))
run = wandb.init(project="held")
wandb.log({"val_loss": 1.0})           # step 0
wandb.log({"val_loss": 0.5})           # step 1, decision step 1: waits for the verdict
print("returned", flush=True)
run.finish()
"""


def _program(tmp_path: Path, worker_pid: int, how: str = "plain") -> subprocess.Popen[str]:
    params = tmp_path / "params.yaml"
    params.write_text("wandb_version: 1\n")
    env = _offline_env(
        PYTHONPATH=os.pathsep.join([str(BOOT_DIR), os.environ.get("PYTHONPATH", "")]),
        WANDB_MODE="offline", WANDB_SWEEP_PARAM_PATH=str(params), WANDB_DIR=str(tmp_path),
        SWEEPLAB_REPORT_FILE=str(tmp_path / "r.jsonl"), SWEEPLAB_DECISION_FILE=str(tmp_path / "r.jsonl.verdict"),
        SWEEPLAB_DECISION_STEPS="1,3", SWEEPLAB_DECISION_METRIC="val_loss", SWEEPLAB_WORKER_PID=str(worker_pid),
        SWEEPLAB_DECISION_WAIT="600")   # so long that a test would time out on it
    return subprocess.Popen([sys.executable, "-c", WAITER, how], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            text=True)


def _waiting(report: Path, prog: subprocess.Popen[str], deadline: float = 120.0) -> None:
    end = time.monotonic() + deadline
    while '{"@decide":1}' not in (report.read_text() if report.exists() else ""):
        assert prog.poll() is None and time.monotonic() < end, "the program did not wait at its decision step"
        time.sleep(0.02)


@pytest.mark.parametrize("answer", ["go", "stop", "worker-gone", "sigterm"])
def test_a_waiting_wandb_program_returns_on_the_verdict_its_worker_gone_or_a_sigterm(tmp_path, answer):
    """The run waits at step 1 (its report and `@decide` line written) until the verdict file says go on or
    stop, or the worker that would answer is gone (here a stand-in process, killed), not for its (600 s)
    bound; a SIGTERM ends it and reaches the program's own handler, as it would without the hold (with none,
    the program ends by the signal, as before)."""
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        prog = _program(tmp_path, worker.pid, "handler" if answer == "sigterm" else "plain")
        _waiting(tmp_path / "r.jsonl", prog)
        assert prog.poll() is None                 # held
        if answer == "worker-gone":
            worker.kill()
            worker.wait()
        elif answer == "sigterm":
            prog.send_signal(signal.SIGTERM)
        else:
            tmp = tmp_path / "v.tmp"
            tmp.write_text('{"go": 1, "stop": null}' if answer == "go" else '{"go": -1, "stop": "pruned"}')
            os.replace(tmp, tmp_path / "r.jsonl.verdict")
        stdout, _ = prog.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()
        worker.wait()
    said = [w for w in stdout.split() if w in ("returned", "handled")]   # (wandb's own lines go there too)
    assert (said, prog.returncode) == ((["handled"], 3) if answer == "sigterm" else (["returned"], 0))
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert lines[:3] == ['{"val_loss":1.0,"@step":0}', '{"val_loss":0.5,"@step":1}', '{"@decide":1}']


HELD = """\
import os, pathlib, time
import wandb

run = wandb.init(project="held")
out = pathlib.Path(run.config.out)
wandb.log({"val_loss": 1.0})         # step 0
(out / "pid").write_text(str(os.getpid()))
while not (out / "on").exists():     # the test stops the driver first
    time.sleep(0.01)
wandb.log({"val_loss": 0.5})         # step 1, rung 1: waits for a verdict the stopped driver cannot give
(out / "returned").write_text("")
run.finish()
"""


def test_a_wandb_program_waiting_for_a_verdict_ends_when_its_driver_is_killed(tmp_path, killed_driver_frees):
    """The driver stopped (SIGSTOP) while the run waits at its rung, then killed: the program does not wait on
    (here its bound is 600 s): its worker goes with the driver and its process tree is ended, or the hook sees
    the worker gone."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "held.py").write_text(HELD)
    (tmp_path / "sweep.yaml").write_text(
        "program: held.py\nmethod: grid\nmetric: {name: val_loss, goal: minimize}\n"
        "early_terminate: {type: asha, min_iter: 1, max_iter: 9, eta: 3}\n"
        f"parameters:\n  out: {{value: '{out}'}}\n")
    driver = subprocess.Popen([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", "store",
                               "--workers", "1", "-q"], cwd=tmp_path, env=_offline_env(SWEEPLAB_DECISION_WAIT="600"),
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        killed_driver_frees(driver, out, tmp_path / "store", '{"@decide":1}')
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()


STEPPED = """\
import pathlib
import wandb


def main():
    run = wandb.init(project="held")
    kind, out = run.config.kind, pathlib.Path(run.config.out)
    for epoch in range(run.config.steps):
        (out / f"{kind}.trained").write_text(str(epoch))         # this epoch was trained
        loss = 0.1 + 1.0 / (epoch + 1) if kind.startswith("good") else 2.0 + 0.5 / (epoch + 1)
        wandb.log({"train_loss": loss * 2}, step=epoch)           # several dicts at one step: one W&B row
        wandb.log({"val_loss": loss}, step=epoch)
        wandb.log({"lr": 0.1}, step=epoch)
    run.finish()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("how", ["command", "function"])
def test_a_wandb_program_logging_with_step_is_held_at_the_log_of_its_rung_not_one_epoch_later(tmp_path, how):
    """`wandb.log(..., step=epoch)` leaves W&B's row open (it is committed by the next log at a later step), so the
    hook held such a run only at epoch rung+1's first log, one epoch trained past its rung (a function trial's
    run was stopped there too). Its values at the step are reported as they are logged now, and the log of the
    judged metric at the rung waits; the other dicts logged at that step still join the row."""
    (tmp_path / "train.py").write_text(STEPPED)
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "sweep.yaml").write_text(
        "program: train.py\nmethod: grid\nmetric: {name: val_loss, goal: minimize}\n"
        f"early_terminate: {ASHA}\ntrial: {{retries: 0}}\nparameters:\n"
        "  kind: {values: [good, hopeless-a, hopeless-b]}\n  steps: {value: 30}\n"
        f"  out: {{value: '{out}'}}\n")
    spec = (tmp_path / "sweep.yaml").read_text()
    if how == "function":
        (tmp_path / "sweep.yaml").write_text(spec.replace("program: train.py\n", "function: train:main\n"))
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", "store", "-q",
                           "--workers", "1"], cwd=tmp_path, env=_offline_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with sqlite3.connect(tmp_path / "store" / "store.db") as c:
        states = c.execute("SELECT state FROM trials ORDER BY number").fetchall()
        rows = c.execute("SELECT t.number, m.step, m.key, m.value FROM metrics m JOIN trials t ON t.id = m.trial_id "
                         "ORDER BY t.number, m.step, m.key").fetchall()
    assert states == [("completed",), ("pruned",), ("pruned",)]
    trained = {p.stem: int(p.read_text()) for p in out.glob("*.trained")}
    assert trained == {"good": 29, "hopeless-a": 1, "hopeless-b": 1}
    first = {(s, k) for n, s, k, _ in rows if n == 0}
    assert first == {(s, k) for s in range(30) for k in ("train_loss", "val_loss", "lr")}
    assert len([r for r in rows if r[0] == 0]) == 90   # each value once
