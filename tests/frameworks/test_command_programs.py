"""The framework callbacks in command trials: real sweeps through the CLI whose trials are a program
(`command: [python, program.py, ...]`) building its Run with `sl.Run.from_env()`, not a function handed one.

The same tiny Lightning and XGBoost trainings as tests/frameworks/test_frameworks.py: a trial whose program
gets a real SIGTERM from outside sweeplab (as a cluster sends it, to the program itself) writes a last
checkpoint, is recorded preempted (not completed with half its epochs) and resumes from that checkpoint; ASHA
prunes another trial, whose framework stops training.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "program.py"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_faults = _load("_sweeplab_faults_conftest", HERE.parent / "faults" / "conftest.py")
Chaos, wait_for = _faults.Chaos, _faults.wait_for
reap = _faults.reap

# framework -> (the metric its callback reports, step of its first epoch)
FRAMEWORKS = {"lightning": ("val_loss", 0), "xgboost": ("val-mlogloss", 0)}


@pytest.fixture
def chaos(tmp_path: Path) -> Chaos:
    return Chaos(tmp_path)


def _spec(framework: str, *, lrs: str, epochs: int, delay: float, extra: str = "") -> str:
    metric, _ = FRAMEWORKS[framework]
    return (f"command: [{sys.executable}, {PROGRAM}, --framework={framework}, '${{args}}']\nmethod: grid\n"
            f"metric: {{name: {metric}, goal: minimize}}\n"
            f"parameters:\n  lr: {{values: {lrs}}}\n  epochs: {{value: {epochs}}}\n  delay: {{value: {delay}}}\n"
            f"{extra}\n")


def _pid(chaos: Chaos, trial: int, attempt: int) -> int | None:
    path = chaos.tmp / f"pid-{trial}-{attempt}"
    return int(path.read_text()) if path.is_file() and path.read_text() else None


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_a_command_program_signalled_from_outside_is_preempted_and_resumes_and_asha_prunes_another(
        chaos, reap, framework):
    """Grid over lr [0.05, 0] (8 epochs, ASHA eta 2, one worker, long grace: only the callback can stop the
    framework in time). Trial 0's program is sent SIGTERM by the test (not by sweeplab) after 3 reported
    epochs: its callback saves a last checkpoint and the framework returns (Lightning's `fit` ends the program
    with exit 0). The attempt is PREEMPTED, and attempt 2 resumes from that checkpoint and completes; before,
    the Lightning program's attempt was `completed` with the metrics of its 3 epochs. Trial 1 (lr 0) is pruned
    by ASHA at its first rung: the stop reaches the program as a SIGTERM and the framework stops early."""
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"needs {framework}")
    metric, first = FRAMEWORKS[framework]
    epochs = 8
    spec = chaos.spec("cmd", _spec(framework, lrs="[0.05, 0.0]", epochs=epochs, delay=0.08, extra=(
        f"early_terminate: {{type: asha, min_iter: 1, max_iter: {epochs}, eta: 2}}\n"
        "trial: {grace: 120s, retries: 0, checkpoint_every: 1000}")))   # no checkpoint but the first and the last
    proc = chaos.start("sweep", str(spec), "--name", "cmd", "--workers", "1", "-q")
    reap.append(proc.pid)
    att = wait_for(lambda: chaos.running_attempt("cmd", 0), timeout=120, what="trial 0 running", proc=proc)
    trial_id = att["trial_id"]
    wait_for(lambda: len(chaos.steps(trial_id, 1, metric)) >= 3, timeout=120, what="3 epochs reported", proc=proc)
    pid = wait_for(lambda: _pid(chaos, 0, 1), what="the program's pid")
    assert pid != att["pid"]   # the program, not its worker
    os.kill(pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out + err

    trial, pruned = chaos.trials("cmd")
    attempts = chaos.attempts(trial_id)
    assert [a["state"] for a in attempts] == ["preempted", "completed"], (out + err, [dict(a) for a in attempts])
    assert trial["state"] == "completed"
    (restored,) = chaos.events("restored", trial_id)
    restored_step = json.loads(restored["data"])["step"]
    before, after = chaos.steps(trial_id, 1, metric), chaos.steps(trial_id, 2, metric)
    assert restored_step >= before[2] and restored_step >= before[-1] - 1, (restored_step, before)
    assert after and after[0] in (restored_step, restored_step + 1) and after[0] > first, (restored_step, after)
    assert after[-1] == first + epochs - 1
    final = json.loads(trial["metrics"])
    assert final["start_epoch"] > 0 and final["epochs_run"] < epochs, final
    assert chaos.checkpoints(trial_id), "the program's checkpoints are listed in the store"

    # trial 1: pruned at the first rung; a command trial is not held there, so it may train a little on
    assert pruned["state"] == "pruned" and "rung 1" in pruned["reason"], dict(pruned)
    ran = len(chaos.steps(pruned["id"], 1, metric))
    assert 2 <= ran < epochs, f"the framework trained {ran} epochs, though pruned at step 1"
