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
