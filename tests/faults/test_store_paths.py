"""A store named by a relative path: `sweeplab resume --store ../runs` from another directory than the sweep's.

`resume` runs the sweep in the directory it was started in (its config and code resolve there); a store named
relative to where the command was typed must still be that store, for the driver's lock, the trials' logs and
checkpoints. Real CLI processes, a real kill -9 of the driver.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _sweeplab(args: list[str], cwd: Path, **kw) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "SWEEPLAB_STORE"}
    return subprocess.Popen([sys.executable, "-m", "sweeplab", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, **kw)


def test_resume_from_another_directory_with_relative_paths_continues_from_the_checkpoints(chaos, reap, tmp_path):
    project = tmp_path / "a" / "project"   # the sweep's directory; its store is `runs`, beside the spec
    elsewhere = project / "sub"            # resume from here: `--store ../runs`
    elsewhere.mkdir(parents=True)
    ready = tmp_path / "ready"
    body = chaos.faulty_spec("checkpoint_then_wait", params=chaos.params(x=0.5, steps=4, ready_file=str(ready)),
                             extra="trial: {retries: 1}")
    (project / "s.yaml").write_text(body)
    proc = _sweeplab(["sweep", "s.yaml", "--name", "rel", "-q", "--workers", "1", "--store", "runs"], project)
    reap.append(proc.pid)
    chaos.store = project / "runs"
    chaos.wait_for(ready.exists, what="attempt 1 checkpointed and waiting", proc=proc)
    trial_id = chaos.wait_for(lambda: chaos.running_attempt("rel", 0), what="attempt 1 row", proc=proc)["trial_id"]
    chaos.wait_for(lambda: [c["step"] for c in chaos.checkpoints(trial_id, 1)] == [2, 3],
                   what="checkpoints of steps 2 and 3 recorded", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    chaos.wait_for(lambda: not chaos.stray_workers(), what="the workers end with their driver")

    again = _sweeplab(["resume", "rel", "-q", "--store", "../runs", "--spec", "../s.yaml"], elsewhere)
    reap.append(again.pid)
    out, err = again.communicate(timeout=90)
    assert again.returncode == 0, f"{out}\n{err}"
    assert not (tmp_path / "a" / "runs").exists()   # `../runs` from the sweep's directory: another store
    assert chaos.trial("rel", 0)["state"] == "completed"
    restored = chaos.events("restored", trial_id)
    assert [json.loads(e["data"])["step"] for e in restored] == [3]   # attempt 2 went on from step 3
    assert chaos.steps(trial_id, 2) == [4, 5]
    assert (project / "runs" / "logs" / "rel" / "0-2.log").is_file()
    assert chaos.rows("SELECT spec_path FROM sweeps")[0][0] == str(project / "s.yaml")   # --spec, as typed here
