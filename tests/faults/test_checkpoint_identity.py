"""A trial restores only its own checkpoints: never those a sweep of the same name left in a shared
`checkpoint_dir`, nor those of a trial a killed driver started but never recorded.

Real sweeps (the CLI) and real worker processes.
"""

from __future__ import annotations

import json

import pytest

from sweeplab.checkpoint import CheckpointManager

pytestmark = pytest.mark.slow


def _body(chaos, shared) -> str:
    return chaos.faulty_spec("stepper", params=chaos.params(x="{values: [0.1]}", steps=6, delay=0.0),
                             extra=f"checkpoint_dir: {shared}\n")


def test_a_new_sweep_never_resumes_from_a_same_named_sweep_s_checkpoints_in_a_shared_dir(chaos, tmp_path):
    """A sweep X ran with `checkpoint_dir:` on shared storage; a new store (another machine, a deleted
    .sweeplab) starts a sweep X again. Its trial 0 used to restore the old trial 0's last checkpoint and
    return at once without training (resumed_from 6). Now the sweep is refused, naming the directory, before
    anything is written; another name runs from scratch."""
    shared = tmp_path / "shared"
    spec = chaos.spec("x", _body(chaos, shared))
    assert chaos("sweep", str(spec), "--name", "X", "-q").returncode == 0
    chaos.store = tmp_path / "store2"          # a new store, the same shared checkpoints
    cp = chaos("sweep", str(spec), "--name", "X", "-q")
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert str(shared / "X") in cp.stderr and "another name" in cp.stderr, cp.stderr
    assert chaos.trials("X") == []
    assert chaos("sweep", str(spec), "--name", "Y", "-q").returncode == 0
    assert json.loads(chaos.trial("Y", 0)["metrics"])["resumed_from"] == 0


def test_a_trial_number_a_killed_driver_never_recorded_starts_from_scratch(chaos, tmp_path):
    """A driver killed between starting a new trial and committing it leaves that trial's checkpoints with no
    trial in the store; the resumed driver creates trial 1 again (its parameters may differ) and it must not
    restore them. Planted here: a checkpoint for trial 1 of a sweep that has only trial 0."""
    shared = tmp_path / "shared"
    spec = chaos.spec("x", _body(chaos, shared).replace("{values: [0.1]}", "{values: [0.1, 0.2]}"))
    assert chaos("sweep", str(spec), "--name", "O", "-q", "--trials", "1").returncode == 0
    CheckpointManager(str(shared / "O" / "1")).save({"next": 5}, step=4)   # an unrecorded attempt's write
    cp = chaos("resume", "O", "-q", "--trials", "+1")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert json.loads(chaos.trial("O", 1)["metrics"])["resumed_from"] == 0
    assert json.loads(chaos.trial("O", 0)["metrics"])["resumed_from"] == 0
