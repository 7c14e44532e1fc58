"""The framework callbacks end to end: real sweeps through the CLI whose function trials train with
PyTorch Lightning, a Hugging Face Trainer, Keras 3 (torch backend), XGBoost or LightGBM, tiny models on the CPU.

For each framework, one sweep: a trial preempted by a real SIGTERM writes a last checkpoint through its
callback and the next attempt resumes from it (not from epoch 0) and completes; a scheduler prunes another
trial at its first rung and the framework stops training there. One more: a monitor rule stops a Lightning
trial.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "fixtures" / "frameworks.py"


import _chaos  # noqa: E402  (tests/frameworks is on the path: it has no __init__)

Chaos, wait_for, reap = _chaos.Chaos, _chaos.wait_for, _chaos.reap

# framework -> (module it needs, trial function, the metric its callback reports, step of its first epoch)
FRAMEWORKS = {
    "lightning": ("lightning", "lightning_trial", "val_loss", 0),
    "transformers": ("transformers", "transformers_trial", "eval_loss", 1),
    "keras": ("keras", "keras_trial", "val_loss", 0),
    "xgboost": ("xgboost", "xgboost_trial", "val-mlogloss", 0),   # a boosting round is an epoch
    "lightgbm": ("lightgbm", "lightgbm_trial", "val-multi_logloss", 0),
}


@pytest.fixture
def chaos(tmp_path: Path, monkeypatch) -> Chaos:
    monkeypatch.setenv("KERAS_BACKEND", "torch")   # the backend this machine has (torch, CPU)
    return Chaos(tmp_path)


def _needs(framework: str) -> None:
    module = FRAMEWORKS[framework][0]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"needs {module} (the dev extra installs it)")


def _spec(framework: str, *, lr: str, epochs: int, delay: float = 0.0, extra: str = "") -> str:
    _, function, metric, _ = FRAMEWORKS[framework]
    return (f"function: {FIXTURE}:{function}\nmethod: grid\nseed: 1\n"
            f"metric: {{name: {metric}, goal: minimize}}\n"
            f"parameters:\n  lr: {lr}\n  epochs: {{value: {epochs}}}\n  delay: {{value: {delay}}}\n{extra}\n")


def _steps(chaos: Chaos, trial_id: int, attempt: int, key: str) -> list[int]:
    return chaos.steps(trial_id, attempt, key)


def test_a_monitor_rule_stops_a_lightning_trial(chaos):
    """plateau (patience 1, min_delta 100: no report can improve by that much) fires at the second report;
    the trial is STOPPED_BY_RULE and Lightning stops training soon after, long before its 10 epochs."""
    _needs("lightning")
    spec = chaos.spec("rule", _spec("lightning", lr="{value: 0.05}", epochs=10, delay=0.2, extra=(
        "monitors:\n  - {plateau: {metric: val_loss, patience: 1, min_delta: 100}}\n"
        "trial: {grace: 120s}")))
    cp = chaos("sweep", str(spec), "--name", "rule", "--workers", "1", "-q", timeout=240)
    assert cp.returncode == 1 and "no trial completed (1 stopped_by_rule" in cp.stderr, cp.stdout + cp.stderr
    (trial,) = chaos.trials("rule")
    assert trial["state"] == "stopped_by_rule", dict(trial)
    steps = _steps(chaos, trial["id"], 1, "val_loss")
    # a monitor's verdict is not waited for: it may land an epoch or two late (0.8 s each), never 10
    assert steps[:2] == [0, 1] and len(steps) <= 4, steps
    assert json.loads(trial["metrics"])["epochs_run"] == len(steps)


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_a_preempted_trial_resumes_from_its_checkpoint_and_a_pruned_one_stops_at_its_rung(chaos, reap, framework):
    """One sweep, one worker, grid over lr [0.05, 0] (8 epochs, ASHA with eta 2: the better half of each rung
    goes on; long grace, so only the callbacks can stop a framework in time).

    Trial 0 gets a real SIGTERM in the middle of training: its callback writes a last checkpoint on the way
    out, the attempt is PREEMPTED, and attempt 2 starts from that checkpoint (not from epoch 0) and completes.
    Trial 1 (lr 0: its loss never improves) is second at the first rung, is pruned there, and its framework
    trains no further epoch. Either may run first after the preemption; the outcome is the same."""
    _needs(framework)
    _, _, metric, first = FRAMEWORKS[framework]
    epochs = 8   # the SIGTERM comes after 3 reported epochs: 5 more (0.3 s each) are its margin
    spec = chaos.spec("fw", _spec(framework, lr="{values: [0.05, 0.0]}", epochs=epochs, delay=0.08, extra=(
        f"early_terminate: {{type: asha, min_iter: 1, max_iter: {epochs}, eta: 2}}\n"
        "trial: {grace: 120s, retries: 0, checkpoint_every: 1000}")))   # no checkpoint but the first and the last
    proc = chaos.start("sweep", str(spec), "--name", "fw", "--workers", "1", "-q")
    reap.append(proc.pid)
    att = wait_for(lambda: chaos.running_attempt("fw", 0), timeout=120, what="trial 0 running", proc=proc)
    trial_id = att["trial_id"]
    wait_for(lambda: len(_steps(chaos, trial_id, 1, metric)) >= 3, timeout=120, what="3 epochs reported",
             proc=proc)
    os.kill(att["pid"], signal.SIGTERM)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out + err

    # trial 0: preempted, then resumed from the checkpoint its callback wrote at the preemption
    trial, pruned = chaos.trials("fw")
    assert [a["state"] for a in chaos.attempts(trial_id)] == ["preempted", "completed"], out + err
    assert trial["state"] == "completed"
    (restored,) = chaos.events("restored", trial_id)
    restored_step = json.loads(restored["data"])["step"]
    before = _steps(chaos, trial_id, 1, metric)
    after = _steps(chaos, trial_id, 2, metric)
    assert restored_step >= before[2] and restored_step >= before[-1] - 1, (restored_step, before)
    # attempt 2 goes on from it (the epoch it was in, or the next one) to the end
    assert after and after[0] in (restored_step, restored_step + 1) and after[0] > first, (restored_step, after)
    assert after[-1] == first + epochs - 1
    final = json.loads(trial["metrics"])
    assert final["start_epoch"] > 0 and final["epochs_run"] < epochs, final

    # trial 1: pruned at the first rung (step 1), and nothing trained or reported past it
    assert pruned["state"] == "pruned" and "rung 1" in pruned["reason"], dict(pruned)
    assert _steps(chaos, pruned["id"], 1, metric) == list(range(first, 2))
    ran = json.loads(pruned["metrics"])["epochs_run"]
    assert ran == 2 - first, f"the framework trained {ran} epochs, though pruned at step 1"

    # the export shows trial 0's curve once per epoch across its two attempts (the latest attempt's value)
    if importlib.util.find_spec("tensorboard") is not None:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        from sweeplab.export import export_sweep

        out = export_sweep("fw", chaos.tmp / "tb", format="tensorboard", store=chaos.store)
        acc = EventAccumulator(str(out / "trial-0000"))
        acc.Reload()
        assert [e.step for e in acc.Scalars(metric)] == list(range(first, first + epochs))


def _rank_starts(chaos: Chaos, sweep: str, number: int, attempt: int) -> dict[int, str]:
    """{rank: the epoch it started training at}, from the lines every rank of the fixture prints into its log."""
    starts: dict[int, str] = {}
    for log in sorted((chaos.store / "logs" / sweep).glob(f"{number}-{attempt}*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("framework-test: training starts: rank "):
                _, rank, _, epoch = line.rsplit(" ", 3)
                starts[int(rank)] = epoch
    return starts


@pytest.mark.parametrize("framework", ["lightning", "transformers"])
def test_ddp_trials_stop_together_and_resume_on_every_rank(chaos, reap, framework):
    """The same sweep as above with `resources: {workers: 2}`: every trial is 2 ranks training with DDP (gloo,
    CPU), the framework finding them through the torchrun environment. Trial 0 gets a real SIGTERM (its worker
    passes it to both ranks): the ranks agree to stop at the same step, save one last checkpoint together,
    the attempt is PREEMPTED, and attempt 2 starts every rank from that checkpoint and completes. Trial 1 is
    pruned by ASHA (multi-process trials do not wait at a rung, so it may train on a little): both ranks stop
    at the same step and return. Before the callbacks agreed on their decisions, rank 0 alone called the
    framework's collective save at the first checkpoint and both ranks hung there.

    Transformers runs trial 0 only (its prune is the same stop request as the SIGTERM's, agreed at the same
    place, and each attempt's 2 ranks spend seconds importing it)."""
    _needs(framework)
    _, _, metric, first = FRAMEWORKS[framework]
    epochs = 6
    lrs = "[0.05, 0.0]" if framework == "lightning" else "[0.05]"
    spec = chaos.spec("ddp", _spec(framework, lr=f"{{values: {lrs}}}", epochs=epochs, delay=0.1, extra=(
        f"early_terminate: {{type: asha, min_iter: 1, max_iter: {epochs}, eta: 2}}\n"
        "resources: {workers: 2}\n"
        "trial: {grace: 60s, retries: 0, checkpoint_every: 1000}")))   # no checkpoint but the first and the last
    proc = chaos.start("sweep", str(spec), "--name", "ddp", "--workers", "1", "-q")
    reap.append(proc.pid)
    att = wait_for(lambda: chaos.running_attempt("ddp", 0), timeout=120, what="trial 0 running", proc=proc)
    trial_id = att["trial_id"]
    wait_for(lambda: len(_steps(chaos, trial_id, 1, metric)) >= 2, timeout=90, what="2 epochs reported", proc=proc)
    os.kill(att["pid"], signal.SIGTERM)   # the trial's worker: it sends SIGTERM to every rank
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, out + err

    trial, *rest = chaos.trials("ddp")
    assert [a["state"] for a in chaos.attempts(trial_id)] == ["preempted", "completed"], out + err
    assert trial["state"] == "completed"
    (restored,) = chaos.events("restored", trial_id)
    restored_step = json.loads(restored["data"])["step"]
    before, after = _steps(chaos, trial_id, 1, metric), _steps(chaos, trial_id, 2, metric)
    # the stop's checkpoint, not the first one (ranks that hung on the SIGTERM wrote none and were killed)
    assert restored_step >= before[1], (restored_step, before)
    assert after and after[0] in (restored_step, restored_step + 1) and after[-1] == first + epochs - 1, after
    final = json.loads(trial["metrics"])
    assert final["start_epoch"] > 0 and final["epochs_run"] < epochs, final
    # every rank of attempt 2 started where rank 0 did (from the same checkpoint)
    starts = _rank_starts(chaos, "ddp", 0, 2)
    assert set(starts) == {0, 1} and len(set(starts.values())) == 1, starts
    assert float(starts[0]) == final["start_epoch"], (starts, final)

    assert not chaos.events("ranks_killed"), "a rank outlived rank 0: the ranks did not stop together"
    if framework != "lightning":
        return
    # trial 1: pruned at the first rung; its ranks stopped together and returned (its result is there)
    (pruned,) = rest
    assert pruned["state"] == "pruned" and "rung 1" in pruned["reason"], dict(pruned)
    assert _steps(chaos, pruned["id"], 1, metric)[:2] == [first, first + 1]
    assert json.loads(pruned["metrics"])["epochs_run"] < epochs


def test_a_sweeplab_torch_ddp_trial_saves_where_a_sigterm_stopped_it_and_ends_as_an_uninterrupted_run(
        chaos, reap, monkeypatch):
    """docs/torch.md's loop as a 2-rank trial (gloo, CPU). Trial 0 gets a real SIGTERM after its epoch-2 report
    (after the epoch-2 `run.checkpoint` of the loop as the docs wrote it before): both ranks stop at epoch 2, rank
    0 writes that epoch's checkpoint (the policy keeps only the first and a stop's), and attempt 2 starts both
    ranks at epoch 3 and ends with the parameters of an uninterrupted one-process run. Before, the loop
    checkpointed before it asked whether to stop: the stop's checkpoint was never written and attempt 2 trained
    epochs 1 and 2 again. Trial 1 (lr 0) is pruned at the first rung: both ranks train epochs 0 and 1 only and
    return. Reports and checkpoints come from rank 0 alone."""
    pytest.importorskip("torch")
    import sys

    sys.path.insert(0, str(HERE))
    import torch_trial

    from sweeplab.config import Config
    from sweeplab.run import Run

    epochs = 6
    spec = chaos.spec("tddp", (
        f"function: {HERE / 'torch_trial.py'}:train\nmethod: grid\nseed: 1\n"
        "metric: {name: val_loss, goal: minimize}\nresources: {workers: 2}\n"
        f"parameters:\n  lr: {{values: [0.05, 0.0]}}\n  epochs: {{value: {epochs}}}\n  hold_at: {{value: 2}}\n"
        f"early_terminate: {{type: asha, min_iter: 1, max_iter: {epochs}, eta: 2}}\n"
        "trial: {grace: 60s, retries: 0, checkpoint_every: 1000}\n"))
    proc = chaos.start("sweep", str(spec), "--name", "tddp", "--workers", "1", "-q")
    reap.append(proc.pid)
    att = wait_for(lambda: chaos.running_attempt("tddp", 0), timeout=120, what="trial 0 running", proc=proc)

    def facts(attempt: int, rank: int, trial: int = 0) -> dict:
        path = chaos.tmp / f"{trial}-{attempt}-{rank}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    wait_for(lambda: 2 in facts(1, 0).get("epochs", []) and 2 in facts(1, 1).get("epochs", []), timeout=120,
             what="both ranks reported epoch 2", proc=proc)
    os.kill(att["pid"], signal.SIGTERM)   # the trial's worker: it passes it to both ranks
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out + err

    trial, pruned = chaos.trials("tddp")
    assert [a["state"] for a in chaos.attempts(trial["id"])] == ["preempted", "completed"], out + err
    for rank in (0, 1):
        assert facts(1, rank)["epochs"] == [0, 1, 2], (rank, facts(1, rank))
        assert facts(2, rank)["start"] == 3 and facts(2, rank)["epochs"] == [3, 4, 5], (rank, facts(2, rank))
    assert _steps(chaos, trial["id"], 1, "val_loss") == [0, 1, 2]   # rank 0's reports only, once each
    assert _steps(chaos, trial["id"], 2, "val_loss") == [3, 4, 5]
    (restored,) = chaos.events("restored", trial["id"])
    assert json.loads(restored["data"])["step"] == 2
    (chaos.tmp / "whole").mkdir()
    monkeypatch.chdir(chaos.tmp / "whole")   # one process, no stop: the run the resumed trial must equal
    alone = Run(config={}, sink=lambda kind, data: None, seed=trial["seed"], checkpoint_dir=str(chaos.tmp / "whole"))
    whole = torch_trial.train(Config({"lr": 0.05, "epochs": epochs, "hold_at": -1}), alone)
    assert abs(whole["val_loss"] - json.loads(trial["metrics"])["val_loss"]) < 1e-5, (whole, trial["metrics"])
    assert facts(2, 0)["params"] == facts(2, 1)["params"]

    assert pruned["state"] == "pruned" and "rung 1" in pruned["reason"], dict(pruned)
    for rank in (0, 1):
        assert facts(1, rank, trial=1)["epochs"] == [0, 1] and "params" in facts(1, rank, trial=1)
    assert not chaos.events("ranks_killed")
