"""A retried attempt restores only checkpoints the store recorded, with the checksum it recorded: one replaced on
disk while the sweep was down (a self-consistent manifest and payload that are not what the trial wrote) is
set aside, said in the trial's events, and the retry restores the newest checkpoint that still matches.

Real sweeps (the CLI), real worker processes, the driver killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import textwrap

import pytest

from sweeplab.checkpoint import CheckpointManager

pytestmark = pytest.mark.slow

# attempt 1 checkpoints {"next": s + 1} for steps 0-3, writes the ready file and waits to be killed; attempt 2
# restores (the documented CheckpointManager of SWEEPLAB_CHECKPOINT_DIR), runs to step 5 and reports its start
PROGRAM = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from sweeplab.checkpoint import CheckpointManager
    args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    mgr = CheckpointManager(os.environ["SWEEPLAB_CHECKPOINT_DIR"])
    found = mgr.latest()
    start = found[1]["next"] if found else 0
    for step in range(start, 4 if os.environ["SWEEPLAB_ATTEMPT"] == "1" else 6):
        print("@sweeplab " + json.dumps({"loss": 1.0 / (step + 1), "step": step}), flush=True)
        mgr.save({"next": step + 1}, step=step)
    if os.environ["SWEEPLAB_ATTEMPT"] == "1":
        Path(args["ready_file"]).write_text(str(os.getpid()))
        while True:
            time.sleep(0.1)
    print("@sweeplab " + json.dumps({"loss": 0.0, "resumed_from": start}), flush=True)
""")


def _start(chaos, kind: str, ready) -> object:
    if kind == "function":
        body = chaos.faulty_spec("checkpoint_then_wait", params=chaos.params(x=0.5, steps=4, ready_file=str(ready)),
                                 extra="trial: {retries: 1, keep_checkpoints: 2}")
    else:
        (chaos.tmp / "prog.py").write_text(PROGRAM)
        body = (f"program: prog.py\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\nparameters:\n"
                f"  ready_file: {{value: {ready}}}\ntrial: {{retries: 1, keep_checkpoints: 2}}\n")
    return chaos.start("sweep", str(chaos.spec("t", body)), "--name", "t", "-q", "--workers", "1")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("kind", ["function", "command"])
def test_resume_never_restores_a_checkpoint_replaced_while_the_driver_was_down(chaos, reap, tmp_path, kind):
    """Attempt 1 checkpointed steps 2 and 3 (recorded with their checksums); its driver is killed, and step 3's
    checkpoint is replaced by another, self-consistent one ({"next": 100}). `resume` used to restore it (its
    manifest's checksum matches its payload) and the trial ran from step 100. Now the retry restores step 2's
    checkpoint (it starts at 3) and the trial's events name the one set aside."""
    ready = tmp_path / "ready"
    proc = _start(chaos, kind, ready)
    reap.append(proc.pid)
    chaos.wait_for(ready.exists, what="attempt 1 checkpointed and waiting", proc=proc)
    trial_id = chaos.wait_for(lambda: chaos.running_attempt("t", 0), what="attempt 1 row", proc=proc)["trial_id"]
    chaos.wait_for(lambda: [c["step"] for c in chaos.checkpoints(trial_id, 1)][-2:] == [2, 3],
                   what="checkpoints of steps 2 and 3 recorded", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    chaos.wait_for(lambda: not chaos.stray_workers(), what="the workers end with their driver")
    chaos.wait_for(lambda: _gone(int(ready.read_text())), what="the trial's process ends with its driver")
    forged = CheckpointManager(str(tmp_path / "forged")).save({"next": 100}, step=3)
    victim = chaos.store / "checkpoints" / "t" / "0" / "step-0000000003"
    shutil.rmtree(victim)
    shutil.copytree(forged.path, victim)
    manifest = json.loads((victim / "manifest.json").read_text())
    (victim / "manifest.json").write_text(json.dumps({**manifest, "seq": 1000}))   # the newest one
    cp = chaos("resume", "t", "-q")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    trial = chaos.trial("t", 0)
    assert trial["state"] == "completed", trial["reason"]
    assert json.loads(trial["metrics"])["resumed_from"] == 3
    said = [e["message"] for e in chaos.events("checkpoint_untrusted", trial_id)]
    assert len(said) == 1 and "step-0000000003" in said[0] and "checksum" in said[0], said
    assert not victim.exists()   # set aside: no later attempt (nor repro) restores it
