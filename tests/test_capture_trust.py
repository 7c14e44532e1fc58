"""`sweeplab repro` unpickles only the capture sweeplab wrote for the trial: a tampered, truncated, swapped,
missing or foreign capture (a pickle another program wrote, with a manifest that matches it) is refused with
one error line naming the file, never unpickled (real processes: a sweep, then `sweeplab repro`)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sweeplab as sl

TRIAL = """
def train(config, run):
    run.capture("batch", {"x": 1})
    raise ValueError("boom")
"""


@pytest.fixture(scope="module")
def failed_store(tmp_path_factory):
    base = tmp_path_factory.mktemp("trust")
    (base / "trust_trial.py").write_text(TRIAL)
    spec = {"method": "grid", "metric": {"name": "loss", "goal": "minimize"},
            "parameters": {"lr": {"value": 0.5}}, "trial": {"retries": 0}}
    old = os.getcwd()
    os.chdir(base)
    try:
        sl.sweep(spec, fn="trust_trial.py:train", store=str(base / "st"), workers=1, name="f")
    finally:
        os.chdir(old)
    return base


class Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "unpickled"))


def _foreign(payload_path: Path, marker: Path) -> None:
    data = pickle.dumps({"batch": Evil(str(marker))})
    payload_path.write_bytes(data)
    manifest = payload_path.with_suffix(".json")
    entry = json.loads(manifest.read_text())
    entry["sha256"] = hashlib.sha256(data).hexdigest()
    manifest.write_text(json.dumps(entry))


TAMPERS = {
    "foreign-pickle-with-matching-manifest": _foreign,
    "truncated-payload": lambda p, m: p.write_bytes(p.read_bytes()[:10]),
    "truncated-manifest": lambda p, m: p.with_suffix(".json").write_text('{"sha256": '),
    "manifest-not-a-mapping": lambda p, m: p.with_suffix(".json").write_text("[1]"),
    "manifest-missing": lambda p, m: p.with_suffix(".json").unlink(),
    "payload-missing": lambda p, m: p.unlink(),
    "payload-a-directory": lambda p, m: (p.unlink(), p.mkdir()),
}


@pytest.mark.parametrize("tamper", list(TAMPERS), ids=list(TAMPERS))
def test_repro_refuses_a_capture_sweeplab_did_not_write(failed_store, tmp_path, tamper):
    store = tmp_path / "st"
    shutil.copytree(failed_store / "st", store)
    payloads = sorted((store / "artifacts" / "f" / "0" / "captures").glob("*.pkl"))
    assert len(payloads) == 1
    marker = tmp_path / "marker"
    TAMPERS[tamper](payloads[0], marker)
    done = subprocess.run([sys.executable, "-m", "sweeplab", "repro", "f/0", "--store", str(store)],
                          cwd=failed_store, capture_output=True, text=True, timeout=120)
    assert not marker.exists(), "the foreign pickle was unpickled"
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "│" not in done.stderr, done.stderr
    assert "refusing to load it" in done.stderr and payloads[0].name in done.stderr, done.stderr


def test_repro_of_an_intact_capture_replays_it(failed_store):
    done = subprocess.run([sys.executable, "-m", "sweeplab", "repro", "f/0", "--store", str(failed_store / "st")],
                          cwd=failed_store, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "captured: batch" in done.stdout and "the failure reproduced" in done.stdout


CHECKPOINTING = """
def train(config, run):
    state = run.restore()
    print("restored", state)
    run.checkpoint({"epoch": 1}, step=1)
    raise ValueError("boom")
"""


@pytest.fixture(scope="module")
def checkpointed_store(tmp_path_factory):
    base = tmp_path_factory.mktemp("trust-ckpt")
    (base / "ck_trial.py").write_text(CHECKPOINTING)
    spec = {"method": "grid", "metric": {"name": "loss", "goal": "minimize"},
            "parameters": {"lr": {"value": 0.5}}, "trial": {"retries": 0, "checkpoint_every": 1}}
    old = os.getcwd()
    os.chdir(base)
    try:
        sl.sweep(spec, fn="ck_trial.py:train", store=str(base / "st"), workers=1, name="c")
    finally:
        os.chdir(old)
    return base


def _pickle_checkpoint(entry: Path, marker: Path, step: int) -> None:
    """A checkpoint directory another program wrote: a pickle payload with a manifest that matches it."""
    entry.mkdir(exist_ok=True)
    for old in entry.glob("payload*"):
        old.unlink()
    data = pickle.dumps(Evil(str(marker)))
    (entry / "payload.pkl").write_bytes(data)
    (entry / "manifest.json").write_text(json.dumps({
        "version": 1, "step": step, "seq": step, "format": "pickle", "payload": "payload.pkl",
        "checksum": "sha256:" + hashlib.sha256(data).hexdigest(), "bytes": len(data), "time": 1.0, "attempt": 1}))


def _tamper_and_repro(base, sweep: str, tmp_path, where: str):
    """A copy of `base`'s store whose trial `sweep/0` got a foreign pickle checkpoint (replacing its recorded
    one, or beside it), then `sweeplab repro sweep/0` on it: (the repro's process, the marker the pickle makes)."""
    store = tmp_path / "st"
    shutil.copytree(base / "st", store)
    trial_dir = store / "checkpoints" / sweep / "0"
    recorded = sorted(trial_dir.glob("step-*"))
    assert [p.name for p in recorded] == ["step-0000000001"]
    marker = tmp_path / "marker"
    if where == "replaces-the-recorded-one":
        _pickle_checkpoint(recorded[0], marker, 1)
    else:
        _pickle_checkpoint(trial_dir / "step-0000000009", marker, 9)
    done = subprocess.run([sys.executable, "-m", "sweeplab", "repro", f"{sweep}/0", "--store", str(store)],
                          cwd=base, capture_output=True, text=True, timeout=120)
    assert not marker.exists(), "the foreign checkpoint was unpickled"
    assert "Traceback" not in done.stderr and "│" not in done.stderr, done.stderr
    if where == "replaces-the-recorded-one":
        assert done.returncode == 2, done.stdout + done.stderr
        assert "step-0000000001" in done.stderr and "refusing" in done.stderr, done.stderr
    return done


@pytest.mark.parametrize("where", ["replaces-the-recorded-one", "beside-it"])
def test_repro_never_unpickles_a_checkpoint_the_store_did_not_record(checkpointed_store, tmp_path, where):
    done = _tamper_and_repro(checkpointed_store, "c", tmp_path, where)
    if where == "beside-it":   # not the store's: left out of the replay, which restores the recorded one
        assert done.returncode == 1, done.stdout + done.stderr
        assert "step-0000000009" in done.stdout and "restored {'epoch': 1}" in done.stdout, done.stdout


COMMAND = """
import os, sys
from sweeplab.checkpoint import CheckpointManager
mgr = CheckpointManager(os.environ["SWEEPLAB_CHECKPOINT_DIR"])
found = mgr.latest()
print("restored", found[1] if found else None, flush=True)
mgr.save({"epoch": 1}, step=1)
sys.exit(3)
"""


@pytest.fixture(scope="module")
def command_store(tmp_path_factory):
    base = tmp_path_factory.mktemp("trust-cmd")
    (base / "ck_prog.py").write_text(COMMAND)
    (base / "cmd.yaml").write_text("program: ck_prog.py\nmethod: grid\nmetric: {name: loss, goal: minimize}\n"
                                   "parameters:\n  lr: {value: 0.5}\ntrial: {retries: 0}\n")
    done = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "cmd.yaml", "--name", "k", "-q", "--store",
                           str(base / "st")], cwd=base, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr   # its one trial failed
    return base


@pytest.mark.parametrize("where", ["replaces-the-recorded-one", "beside-it"])
def test_command_repro_never_restores_a_checkpoint_the_store_did_not_record(command_store, tmp_path, where):
    """A command trial's replay got a copy of its checkpoint directory as it was on disk: a checkpoint replaced
    there (or put beside the trial's) was restored and unpickled by the program's `CheckpointManager`. Now its
    copy is checked against the store as a function trial's is."""
    done = _tamper_and_repro(command_store, "k", tmp_path, where)
    if where == "beside-it":   # not the store's: left out of the replay, which restores the recorded one
        assert done.returncode == 3, done.stdout + done.stderr
        assert "step-0000000009" in done.stdout and "restored {'epoch': 1}" in done.stdout, done.stdout
