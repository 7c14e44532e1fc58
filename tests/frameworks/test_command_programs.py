"""The framework callbacks in command trials: real sweeps through the CLI whose trials are a program
(`command: [python, program.py, ...]`) building its Run with `sl.Run.from_env()`, not a function handed one.

The same tiny Lightning, XGBoost, Transformers and Keras trainings as tests/frameworks/test_frameworks.py: a
trial whose program gets a real SIGTERM from outside sweeplab (as a cluster sends it, to the program itself)
writes a last checkpoint, is recorded preempted (not completed with half its epochs) and resumes from that
checkpoint; ASHA prunes another trial, whose framework stops training.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "program.py"


import _chaos  # noqa: E402  (tests/frameworks is on the path: it has no __init__)

Chaos, wait_for, reap = _chaos.Chaos, _chaos.wait_for, _chaos.reap

# framework -> (the metric its callback reports, step of its first epoch)
FRAMEWORKS = {"lightning": ("val_loss", 0), "xgboost": ("val-mlogloss", 0)}   # metric, first epoch


@pytest.fixture
def chaos(tmp_path: Path, monkeypatch) -> Chaos:
    monkeypatch.setenv("KERAS_BACKEND", "torch")   # the backend this machine has (torch, CPU)
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


# Lightning ends `fit` on a SIGTERM with a SystemExit (exit 0), XGBoost returns from `train`: the two ways a
# program ends after its Run's stop. Transformers and Keras return as XGBoost does; their callbacks' stops and
# resumes are tested in function trials (test_frameworks.py), by the same callbacks
@pytest.mark.parametrize("framework", ["lightning", "xgboost"])
def test_a_command_program_signalled_from_outside_is_preempted_and_resumes_and_asha_prunes_another(
        chaos, reap, framework):
    """Grid over lr [0.05, 0] (8 epochs, ASHA eta 2, one worker, long grace: only the callback can stop the
    framework in time). Trial 0's program is sent SIGTERM by the test (not by sweeplab) after 3 reported
    epochs: its callback saves a last checkpoint and the framework returns (Lightning's `fit` ends the program
    with exit 0). The attempt is PREEMPTED, and attempt 2 resumes from that checkpoint and completes; before,
    the Lightning program's attempt was `completed` with the metrics of its 3 epochs. Trial 1 (lr 0) is pruned
    by ASHA at its first rung, where its report waits for the verdict: it trains no epoch past the rung."""
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

    # trial 1: pruned at the first rung (step 1), where its `run.log` waited for the verdict: it reported
    # nothing past it (before the hold, the framework trained on a little before the SIGTERM reached it)
    assert pruned["state"] == "pruned" and "rung 1" in pruned["reason"], dict(pruned)
    assert chaos.steps(pruned["id"], 1, metric) == [0, 1], "the framework trained past its rung"


PLAIN = """\
import os, signal, sys, time
import sweeplab as sl

x = float(sys.argv[1].split("=")[1])
who = os.environ["WHO_SIGNALS"]
run = sl.Run.from_env()
state = run.restore()
for step in range(state["step"] + 1 if state else 0, 6):
    run.log({"loss": x / (step + 1)}, step=step)
    run.checkpoint({"step": step}, step=step)
    if step == 2 and run.attempt == 1 and x == 1:   # a SIGTERM sweeplab did not send, to the program or its worker
        os.kill(os.getpid() if who == "program" else os.getppid(), signal.SIGTERM)
    for _ in range(100 if step == 2 and x == 1 else 4):   # the worker's SIGTERM reaches the program soon after
        if run.should_stop:
            break
        time.sleep(0.05)
    if run.should_stop:
        break
"""


@pytest.mark.parametrize("who", ["program", "worker"])
def test_a_plain_program_with_a_run_is_preempted_by_any_sigterm_and_pruned_by_asha(chaos, who):
    """No framework: a program checkpointing with `run.checkpoint` every step. Trial 0 (x=1) gets a SIGTERM at
    step 2 on its first attempt: sent to the program itself (a cluster's, which sweeplab did not send) or to
    its worker (sweeplab's preemption): either way the attempt is `preempted` and attempt 2 restores step 2 and
    logs steps 3-5. Trial 1 (x=3, worse) is pruned by ASHA at its first rung: that SIGTERM was sweeplab's, so
    the trial is `pruned`, not preempted, although its Run noted the signal."""
    (chaos.tmp / "prog.py").write_text(PLAIN)
    spec = chaos.spec("plain", f"command: [{sys.executable}, prog.py, '${{args}}']\nmethod: grid\n"
                               "metric: {name: loss, goal: minimize}\nparameters:\n  x: {values: [1, 3]}\n"
                               "early_terminate: {type: asha, min_iter: 1, max_iter: 6, eta: 2}\n"
                               "trial: {grace: 60s, retries: 0}\n")
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", str(spec), "--name", "plain", "--workers", "1",
                         "-q"], cwd=chaos.tmp, env={**chaos.env(), "WHO_SIGNALS": who}, capture_output=True,
                        text=True, timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    first, second = chaos.trials("plain")
    assert [a["state"] for a in chaos.attempts(first["id"])] == ["preempted", "completed"], cp.stdout + cp.stderr
    assert first["state"] == "completed"
    assert chaos.steps(first["id"], 1) == [0, 1, 2] and chaos.steps(first["id"], 2) == [3, 4, 5]
    assert second["state"] == "pruned" and "rung 1" in second["reason"], dict(second)


VALIDATING = """\
import os, sys, time
import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import sweeplab as sl
from sweeplab.integrations.lightning import SweeplabCallback

torch.set_num_threads(1)
L.seed_everything(0, verbose=False)
run = sl.Run.from_env()
x = torch.randn(32, 4); y = (x[:, 0] > 0).long()

class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)
    def training_step(self, batch, i):
        return nn.functional.cross_entropy(self.net(batch[0]), batch[1])
    def validation_step(self, batch, i):
        if run.attempt == 1 and self.current_epoch == 2 and i == 0:
            with open("validating.tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace("validating.tmp", "validating")
            while not run.should_stop:   # the test's SIGTERM comes here, in the first of 2 validation batches
                time.sleep(0.05)
        self.log("val_loss", nn.functional.cross_entropy(self.net(batch[0]), batch[1]))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

callback = SweeplabCallback(run)
trainer = L.Trainer(max_epochs=5, callbacks=[callback], accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    num_sanity_val_steps=0)
trainer.fit(Net(), DataLoader(TensorDataset(x, y), batch_size=16), DataLoader(TensorDataset(x, y), batch_size=16),
            ckpt_path=callback.resume_path())
"""


def _start_lightning_program(chaos: Chaos, reap: list[int], name: str, program: str, *, grace: int):
    """A one-trial sweep of `program` (a Lightning script reporting val_loss), one worker, started in the
    background; only its own checkpoints (the first and the stop's) are kept."""
    if importlib.util.find_spec("lightning") is None:
        pytest.skip("needs lightning")
    (chaos.tmp / "prog.py").write_text(program)
    spec = chaos.spec(name, f"command: [{sys.executable}, prog.py]\nmethod: grid\n"
                            "metric: {name: val_loss, goal: minimize}\n"
                            f"trial: {{grace: {grace}s, retries: 0, checkpoint_every: 1000}}\n")
    proc = chaos.start("sweep", str(spec), "--name", name, "--workers", "1", "-q")
    reap.append(proc.pid)
    return proc


def test_a_lightning_program_signalled_during_validation_saves_where_it_stopped(chaos, reap):
    """Lightning checks for a SIGTERM inside its validation loop too, and ends `fit` there (SIGTERMException)
    before any training batch ends for the callback to save at: the stop's checkpoint was never written, and
    the next attempt went back to the last one the policy had let through (epoch 0 here), losing the epochs
    since. The callback now saves in `on_exception` when the trial was asked to stop."""
    proc = _start_lightning_program(chaos, reap, "val", VALIDATING, grace=60)
    marker = chaos.tmp / "validating"
    validating = lambda: int(marker.read_text()) if marker.is_file() else None  # noqa: E731

    pid = wait_for(validating, timeout=120, what="epoch 2's validation", proc=proc)
    os.kill(pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    (trial,) = chaos.trials("val")
    assert [a["state"] for a in chaos.attempts(trial["id"])] == ["preempted", "completed"], out + err
    (restored,) = chaos.events("restored", trial["id"])
    assert json.loads(restored["data"])["step"] == 2, dict(restored)
    assert chaos.steps(trial["id"], 2, "val_loss")[0] in (2, 3)


LIGHTNING_DDP = """\
import os, time
import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import sweeplab as sl
from sweeplab.integrations.lightning import SweeplabCallback

torch.set_num_threads(1)
L.seed_everything(0, verbose=False)
run = sl.Run.from_env()
if run.rank == 0:
    with open(f"pid-{run.attempt}.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(f"pid-{run.attempt}.tmp", f"pid-{run.attempt}")
x = torch.randn(64, 4); y = (x[:, 0] > 0).long()

class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)
    def on_train_start(self):
        print(f"starts: rank {self.global_rank} epoch {self.current_epoch}", flush=True)
    def training_step(self, batch, i):
        time.sleep(0.1)
        return nn.functional.cross_entropy(self.net(batch[0]), batch[1])
    def validation_step(self, batch, i):
        self.log("val_loss", nn.functional.cross_entropy(self.net(batch[0]), batch[1]), sync_dist=True)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

callback = SweeplabCallback(run)
trainer = L.Trainer(max_epochs=10, callbacks=[callback], accelerator="cpu", devices=2, strategy="ddp",
                    logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(Net(), DataLoader(TensorDataset(x, y), batch_size=16), DataLoader(TensorDataset(x, y), batch_size=32),
            ckpt_path=callback.resume_path())
"""


@pytest.mark.parametrize("who", ["program", "worker"])
def test_a_lightning_ddp_program_stops_every_rank_on_sigterm_and_resumes(chaos, reap, who):
    """A command program whose Trainer starts its own 2 DDP ranks (`strategy="ddp"`, `devices=2`: Lightning runs
    the program again for rank 1), each building its Run with `from_env`. A SIGTERM to rank 0 alone (from
    outside sweeplab) or to the trial's worker (sweeplab's preemption, sent to every rank): the callback hands
    SIGTERM to the Run's handler for `fit` (Lightning's own broadcasts from inside the handler and can hang, see
    docs), the ranks agree to stop, save once, and return; the attempt is preempted (well within `trial.grace`)
    and both ranks of attempt 2 start from the same checkpoint."""
    proc = _start_lightning_program(chaos, reap, "ddp", LIGHTNING_DDP, grace=100)
    att = wait_for(lambda: chaos.running_attempt("ddp", 0), timeout=120, what="trial 0 running", proc=proc)
    wait_for(lambda: len(chaos.steps(att["trial_id"], 1, "val_loss")) >= 2, timeout=120, what="2 epochs", proc=proc)
    pid = int((chaos.tmp / "pid-1").read_text()) if who == "program" else att["pid"]
    os.kill(pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 0, out + err
    (trial,) = chaos.trials("ddp")
    attempts = chaos.attempts(trial["id"])
    assert [a["state"] for a in attempts] == ["preempted", "completed"], (out + err, [dict(a) for a in attempts])
    assert "grace" not in (attempts[0]["reason"] or ""), attempts[0]["reason"]
    restored = {json.loads(e["data"])["step"] for e in chaos.events("restored", trial["id"])}
    assert len(restored) == 1 and min(restored) >= 1, restored
    log = (chaos.store / "logs" / "ddp" / "0-2.log").read_text(errors="replace")
    # (the two ranks write one log: a line of one may end inside the other's)
    starts = dict(re.findall(r"starts: rank (\d+) epoch (\d+)", log))
    assert set(starts) == {"0", "1"} and len(set(starts.values())) == 1 and starts["0"] != "0", starts
