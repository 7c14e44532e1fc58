"""What the store says about checkpoints matches what exists, and a dead attempt's late writes are never restored.

Real sweeps (the CLI) for the store's rows; real processes for the fencing of a stale attempt.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_the_store_lists_only_the_checkpoints_retention_kept(chaos):
    body = chaos.faulty_spec("stepper", params=chaos.params(x=0.5, steps=10, delay=0.0),
                             extra="trial: {keep_checkpoints: 2}\nbudget: {trials: 1}")
    cp = chaos("sweep", str(chaos.spec("keep", body)), "--name", "keep", "-q", "--workers", "1")
    assert cp.returncode == 0, cp.stderr
    trial = chaos.trial("keep", 0)
    assert trial["state"] == "completed"
    rows = chaos.checkpoints(trial["id"])
    on_disk = sorted(p.name for p in (chaos.store / "checkpoints" / "keep" / "0").iterdir()
                     if p.name.startswith("step-"))
    assert len(on_disk) == 2
    assert sorted(Path(r["path"]).name for r in rows) == on_disk, [r["path"] for r in rows]
    assert [r["step"] for r in rows] == [8, 9]


def test_a_moved_store_still_lists_only_the_checkpoints_that_exist(chaos, reap, tmp_path):
    """A store moved between two drivers (`mv`, a copy to another disk): the checkpoints retention deletes after
    the move are forgotten too (the store held them by their old absolute paths, which no deletion matched)."""
    import signal

    ready = tmp_path / "ready"
    body = chaos.faulty_spec("checkpoint_then_wait", params=chaos.params(x=0.5, steps=4, ready_file=str(ready)),
                             extra="trial: {retries: 1, keep_checkpoints: 2}")
    proc = chaos.start("sweep", str(chaos.spec("mv", body)), "--name", "mv", "-q", "--workers", "1")
    reap.append(proc.pid)
    chaos.wait_for(ready.exists, what="attempt 1 checkpointed and waiting", proc=proc)
    trial_id = chaos.wait_for(lambda: chaos.running_attempt("mv", 0), what="attempt 1 row", proc=proc)["trial_id"]
    chaos.wait_for(lambda: [c["step"] for c in chaos.checkpoints(trial_id, 1)] == [2, 3],
                   what="checkpoints of steps 2 and 3 recorded", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    chaos.wait_for(lambda: not chaos.stray_workers(), what="the workers end with their driver")
    moved = tmp_path / "moved-store"
    chaos.store.rename(moved)
    chaos.store = moved
    cp = chaos("resume", "mv", "-q")
    assert cp.returncode == 0, cp.stderr
    assert chaos.trial("mv", 0)["state"] == "completed"
    rows = chaos.checkpoints(trial_id)
    on_disk = sorted(p.name for p in (moved / "checkpoints" / "mv" / "0").iterdir() if p.name.startswith("step-"))
    assert on_disk == ["step-0000000004", "step-0000000005"]
    assert sorted(Path(r["path"]).name for r in rows) == on_disk, [r["path"] for r in rows]
    assert all((moved / r["path"]).is_dir() for r in rows), [r["path"] for r in rows]


# ------------------------------------------------------------------------------------------------ fencing
_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from sweeplab.checkpoint import CheckpointManager, register_serializer

    class Slow:
        name, suffix = "slow", ".bin"
        def dump(self, obj, f):
            Path(sys.argv[2]).write_text("writing")   # the test fences the attempt now
            while not Path(sys.argv[3]).exists():
                time.sleep(0.02)
            f.write(obj)
        def load(self, f):
            return f.read()

    register_serializer(Slow())
    mgr = CheckpointManager(sys.argv[1], attempt=1, serializer="slow")
    try:
        mgr.save(b"late from attempt 1", step=7)
    except Exception as exc:
        print(type(exc).__name__, exc)
        sys.exit(3)
""")


def _python(*args: str, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60, env=env, **kw)


def test_a_checkpoint_a_dead_attempt_writes_late_is_never_restored(tmp_path):
    from sweeplab.checkpoint import CheckpointManager, fence

    root = str(tmp_path / "ckpt")
    CheckpointManager(root, attempt=1).save({"step": 3}, step=3)       # written while attempt 1 was alive
    started, go = tmp_path / "started", tmp_path / "go"
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, root, str(started), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not started.exists():
        assert writer.poll() is None and time.monotonic() < deadline, writer.communicate()
        time.sleep(0.02)
    fence(root, 1)                  # the driver declares attempt 1 dead (it is still writing)
    # attempt 2, another process, restores: it sees only what attempt 1 wrote before it was declared dead
    restore = "from sweeplab.checkpoint import CheckpointManager as M; import sys; " \
              "print(M(sys.argv[1], attempt=2).latest()[1])"
    assert _python("-c", restore, root).stdout.strip() == "{'step': 3}"
    go.write_text("")               # attempt 1's write completes: refused, and nothing of it is left
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 3, (out, err)
    assert "attempt 1" in out and "declared dead" in out
    assert _python("-c", restore, root).stdout.strip() == "{'step': 3}"
    assert [p.name for p in Path(root).iterdir() if p.name.startswith("step-")] == ["step-0000000003"]
    # a save that starts after the fence is refused at once
    late = _python("-c", "from sweeplab.checkpoint import CheckpointManager as M; import sys; "
                   "M(sys.argv[1], attempt=1).save({'step': 9}, step=9)", root)
    assert late.returncode != 0 and "declared dead" in late.stderr
    assert CheckpointManager(root, attempt=2).latest()[1] == {"step": 3}


_LATE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from sweeplab.checkpoint import CheckpointManager

    root, started, done = sys.argv[1:4]
    while not Path(started).exists():   # attempt 2 runs: attempt 1 was declared dead long ago
        time.sleep(0.05)
    try:
        mgr = CheckpointManager(root, attempt=1)
    except TypeError:                   # a sweeplab without attempts: an unfenced writer
        mgr = CheckpointManager(root)
    try:
        mgr.save({"step": 99}, step=99)
        Path(done).write_text("written")
    except Exception as exc:
        Path(done).write_text(type(exc).__name__)
""")


def test_a_sweep_never_restores_what_a_dead_attempt_wrote_after_it_was_killed(chaos, reap, tmp_path):
    """A process of attempt 1 out of the sweep's reach (a partitioned node, say) writes a checkpoint after
    attempt 1 was killed as hung; attempt 2 restores attempt 1's last checkpoint from before its death."""
    program = Path(__file__).resolve().parent / "tree_program.py"
    pids, done = tmp_path / "pids", tmp_path / "late-done"
    pids.mkdir()
    body = (f"command: [{sys.executable!r}, {str(program)!r}, '${{args}}']\nmethod: grid\n"
            f"metric: {{name: loss, goal: minimize}}\nparameters:\n"
            f"  pids: {{value: {str(pids)!r}}}\n  mode: {{value: freeze}}\n  steps: {{value: 4}}\n"
            f"  wait_for: {{value: {str(done)!r}}}\n"
            f"trial: {{heartbeat_timeout: 2s, retries: 1}}\nbudget: {{trials: 1}}\n")
    proc = chaos.start("sweep", str(chaos.spec("late", body)), "--name", "late", "-q", "--workers", "1")
    reap.append(proc.pid)
    root = chaos.store / "checkpoints" / "late" / "0"
    late = subprocess.Popen([sys.executable, "-c", _LATE, str(root), str(pids / "0-2-program.pid"), str(done)])
    reap.append(late.pid)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    late.wait(timeout=30)
    assert done.read_text() == "StaleAttemptError"
    assert chaos.trial("late", 0)["state"] == "completed"
    assert (pids / "0-2-restored").read_text() == "1"      # not 99
    assert not any(p.name.startswith("step-0000000099") for p in root.iterdir())


def test_a_checkpoint_in_place_before_its_writer_saw_the_fence_is_still_never_restored(tmp_path):
    """A writer killed between putting its checkpoint in place and its second look at the fence leaves the
    checkpoint on disk: `latest()` skips it, since its manifest is later than its attempt's death."""
    from sweeplab.checkpoint import CheckpointManager, fence

    root = str(tmp_path / "ckpt")
    CheckpointManager(root, attempt=1).save({"step": 3}, step=3)
    declared = time.time()
    time.sleep(0.05)
    CheckpointManager(root, attempt=1).save({"step": 4}, step=4)   # the late write (no fence yet to see)
    fence(root, 1, at=declared)                                      # ... of an attempt dead since `declared`
    assert CheckpointManager(root, attempt=2).latest()[1] == {"step": 3}
    assert CheckpointManager(root).latest()[1] == {"step": 3}        # whoever reads, without an attempt too
