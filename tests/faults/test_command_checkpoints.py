"""Command trials that checkpoint through the documented way (`CheckpointManager` on SWEEPLAB_CHECKPOINT_DIR):
killed by a signal as the OOM killer does, they are retried from their last checkpoint.

Real sweeps (the CLI), real programs, real signals.
"""

from __future__ import annotations

import json
import textwrap

import pytest

pytestmark = pytest.mark.slow

# Checkpoints {"next": s + 1} after step s; attempt a < `die_until` kills itself (how: "kill" SIGKILL itself,
# "137" exits as a shell does whose child the OOM killer took) after checkpointing step 2a - 1.
PROGRAM = textwrap.dedent("""
    import json, os, signal, sys
    from sweeplab.checkpoint import CheckpointManager
    args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    attempt = int(os.environ["SWEEPLAB_ATTEMPT"])
    mgr = CheckpointManager(os.environ["SWEEPLAB_CHECKPOINT_DIR"])
    found = mgr.latest()
    start = found[1]["next"] if found else 0
    for step in range(start, int(args["steps"])):
        print("@sweeplab " + json.dumps({"loss": 1.0 / (step + 1), "step": step}), flush=True)
        mgr.save({"next": step + 1}, step=step)
        if attempt < int(args["die_until"]) and step == 2 * attempt - 1:
            if args["how"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(137)
    print("@sweeplab " + json.dumps({"loss": 0.0, "start": start}), flush=True)
""")


def _sweep(chaos, name: str, how: str, *, retries: int, die_until: int, trial: str = "") -> tuple:
    (chaos.tmp / "prog.py").write_text(PROGRAM)
    body = (f"program: prog.py\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\nparameters:\n"
            f"  steps: {{value: 8}}\n  how: {{value: {how}}}\n  die_until: {{value: {die_until}}}\n"
            f"trial: {{retries: {retries}{trial}}}\n")
    cp = chaos("sweep", str(chaos.spec(name, body)), "--name", name, "-q", "--workers", "1")
    trial = chaos.trial(name, 0)
    return cp, trial, chaos.attempts(trial["id"])


@pytest.mark.parametrize("how", ["kill", "137"], ids=["sigkill", "exit-137"])
def test_a_command_killed_by_a_signal_twice_is_retried_from_its_last_checkpoint(chaos, how):
    """The OOM killer may take a program twice and not a third time: a program killed by a signal (or a
    wrapper reporting it as exit 137) is never a deterministic failure, as a killed worker is not. It used
    to be "failed the same way twice: not retried" at its second kill."""
    cp, trial, attempts = _sweep(chaos, f"oom-{how}", how, retries=2, die_until=3)
    assert cp.returncode == 0, cp.stderr
    assert (trial["state"], trial["attempts"]) == ("completed", 3), trial["reason"]
    assert [a["state"] for a in attempts] == ["failed", "failed", "completed"]
    # each attempt restored the newest checkpoint of the one before: steps 0-1, then 2-3, then 4-7
    assert json.loads(trial["metrics"])["start"] == 4
    steps = [chaos.steps(trial["id"], a) for a in (1, 2, 3)]
    assert steps[:2] == [[0, 1], [2, 3]] and steps[2][:4] == [4, 5, 6, 7], steps
    _assert_the_store_lists_what_exists(chaos, f"oom-{how}", trial, [(3, 6), (3, 7)])


def test_a_command_killed_more_often_than_its_retries_fails_naming_the_signal(chaos):
    cp, trial, attempts = _sweep(chaos, "oom-out", "kill", retries=1, die_until=9)
    assert cp.returncode == 1
    assert (trial["state"], trial["attempts"]) == ("failed", 2)
    assert trial["reason"] == "command killed by signal SIGKILL", trial["reason"]
    assert [a["signal"] for a in attempts] == [9, 9]


def test_a_command_program_s_checkpoint_manager_keeps_trial_keep_checkpoints(chaos):
    """`CheckpointManager(os.environ["SWEEPLAB_CHECKPOINT_DIR"])` in a program keeps the spec's
    trial.keep_checkpoints, as `run.checkpoint` does (it kept 2 whatever the spec said)."""
    cp, trial, _ = _sweep(chaos, "keep3", "kill", retries=0, die_until=0, trial=", keep_checkpoints: 3")
    assert cp.returncode == 0, cp.stderr
    kept = sorted(p.name for p in (chaos.store / "checkpoints" / "keep3" / "0").glob("step-*"))
    assert kept == ["step-0000000005", "step-0000000006", "step-0000000007"], kept
    _assert_the_store_lists_what_exists(chaos, "keep3", trial, [(1, 5), (1, 6), (1, 7)])


def _assert_the_store_lists_what_exists(chaos, sweep: str, trial, expected: list[tuple[int, int]]) -> None:
    """The store's checkpoints of a command trial are those on disk, as for a function trial (the dashboard
    and `sweeplab status` showed none): (attempt, step), path and checksum of each."""
    rows = chaos.checkpoints(trial["id"])
    assert [(r["attempt"], r["step"]) for r in rows] == expected, [tuple(r) for r in rows]
    on_disk = sorted((chaos.store / "checkpoints" / sweep / "0").glob("step-*"))
    assert [str(chaos.store / r["path"]) for r in rows] == [str(d) for d in on_disk]   # relative to the store
    assert [r["checksum"] for r in rows] == [json.loads((d / "manifest.json").read_text())["checksum"]
                                             for d in on_disk]


# attempt 1 checkpoints steps 0-3, tears its newest checkpoint (half its payload) and dies; attempt 2 restores
TORN = textwrap.dedent("""
    import json, os, pathlib, signal, sys
    from sweeplab.checkpoint import CheckpointManager
    mgr = CheckpointManager(os.environ["SWEEPLAB_CHECKPOINT_DIR"])
    found = mgr.latest()
    start = found[1]["next"] if found else 0
    for step in range(start, 6):
        print("@sweeplab " + json.dumps({"loss": 1.0 / (step + 1), "step": step}), flush=True)
        info = mgr.save({"next": step + 1, "pad": "x" * 64}, step=step)
        if os.environ["SWEEPLAB_ATTEMPT"] == "1" and step == 3:
            payload = next(p for p in pathlib.Path(info.path).iterdir() if p.name.startswith("payload"))
            payload.write_bytes(payload.read_bytes()[:10])
            os.kill(os.getpid(), signal.SIGKILL)
    print("@sweeplab " + json.dumps({"loss": 0.0, "start": start}), flush=True)
""")


def test_a_command_program_s_skipped_and_restored_checkpoints_are_events_as_a_function_trial_s(chaos):
    """A command program's CheckpointManager that skips a damaged checkpoint and restores the one before records
    `checkpoint_corrupt` and `restored` events, as `run.restore()` does in a function trial (docs: fault-tolerance
    "At a glance"); the program alone knew it (`mgr.corrupt`), the store had nothing."""
    (chaos.tmp / "torn.py").write_text(TORN)
    body = ("program: torn.py\nmethod: grid\nmetric: {name: loss, goal: minimize}\nparameters:\n"
            "  steps: {value: 6}\ntrial: {retries: 1}\n")
    cp = chaos("sweep", str(chaos.spec("torn", body)), "--name", "torn", "-q", "--workers", "1")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    trial = chaos.trial("torn", 0)
    assert (trial["state"], trial["attempts"], json.loads(trial["metrics"])["start"]) == ("completed", 2, 3)
    corrupt = chaos.events("checkpoint_corrupt", trial["id"])
    assert len(corrupt) == 1 and "step-0000000003" in corrupt[0]["message"] and corrupt[0]["attempt"] == 2
    restored = chaos.events("restored", trial["id"])
    assert [(e["attempt"], json.loads(e["data"])["step"]) for e in restored] == [(2, 2)]


# Saves step 0, then finds its checkpoint directory replaced by a file (as a user's `cp` or a bad mount
# might), then saves again. Every attempt restores first.
FILE_IN_THE_WAY_FUNCTION = textwrap.dedent("""
    import os, shutil
    def train(config, run):
        run.restore()
        run.checkpoint({"next": 1}, step=0)
        where = run._ckpt_dir   # the trial's checkpoint directory (nothing public names it)
        shutil.rmtree(where)
        open(where, "w").write("not a directory")
        run.checkpoint({"next": 2}, step=1)
""")
FILE_IN_THE_WAY_PROGRAM = textwrap.dedent("""
    import os, shutil
    import sweeplab as sl
    run = sl.Run.from_env()
    run.restore()
    where = os.environ["SWEEPLAB_CHECKPOINT_DIR"]
    run.checkpoint({"next": 1}, step=0)
    shutil.rmtree(where)
    open(where, "w").write("not a directory")
    from sweeplab.checkpoint import CheckpointManager
    CheckpointManager(where).save({"next": 2}, step=1)
""")


@pytest.mark.parametrize("kind", ["function", "command"])
def test_a_checkpoint_directory_replaced_by_a_file_fails_naming_it(chaos, kind):
    """Each attempt used to fail with a raw NotADirectoryError naming a temp path under the checkpoint
    directory (the cleanup of the failed save's temp dir raised over the StoreError), and a restore there
    found "no checkpoint" and started over. Now the save and the retry's restore fail naming the trial's
    checkpoint directory and what is wrong with it."""
    if kind == "function":
        (chaos.tmp / "inway.py").write_text(FILE_IN_THE_WAY_FUNCTION)
        target = "function: inway.py:train\n"
    else:
        (chaos.tmp / "inway.py").write_text(FILE_IN_THE_WAY_PROGRAM)
        target = "program: inway.py\n"
    body = (f"{target}method: grid\nmetric: {{name: loss, goal: minimize}}\nparameters:\n"
            f"  x: {{value: 1}}\ntrial: {{retries: 1}}\n")
    cp = chaos("sweep", str(chaos.spec(f"inway-{kind}", body)), "--name", f"inway-{kind}", "-q", "--workers", "1")
    trial = chaos.trial(f"inway-{kind}", 0)
    assert cp.returncode == 1, cp.stderr
    assert trial["state"] == "failed", trial["reason"]
    reasons = [a["reason"] or "" for a in chaos.attempts(trial["id"])] + [trial["reason"] or ""]
    for reason in reasons:
        assert "is a file, not a directory" in reason and "/checkpoints/" in reason, reasons
        assert ".tmp." not in reason and "NotADirectoryError" not in reason, reasons
