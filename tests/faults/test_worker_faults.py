"""Faults of one trial's process: SIGKILL, SIGTERM (preemption), a damaged checkpoint, a hang, a timeout.

Every test runs the real CLI, real worker processes and real signals, then reads the store to check what
was kept: which attempt ran, where it resumed, what reason was recorded.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

pytestmark = pytest.mark.slow


def _start(chaos, reap, name: str, body: str, *args: str):
    proc = chaos.start("sweep", str(chaos.spec(name, body)), "--name", name, "-q", *args)
    reap.append(proc.pid)
    return proc


def _finish(proc, timeout: float = 90, code: int = 0) -> tuple[str, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == code, f"exit {proc.returncode}\n{out}\n{err}"
    return out, err


def _restored_step(chaos, trial_id: int, attempt: int) -> int | None:
    got = chaos.rows("SELECT data FROM events WHERE kind='restored' AND trial_id=? AND attempt=?",
                     trial_id, attempt)
    return json.loads(got[0]["data"])["step"] if got else None


def _newest(chaos, trial_id: int, attempt: int = 1) -> int:
    """The step of the newest checkpoint the store lists for an attempt (-1: none); retention keeps only
    the newest few, and the store lists only those."""
    return max((c["step"] for c in chaos.checkpoints(trial_id, attempt)), default=-1)


def test_worker_sigkill_mid_trial_is_retried_from_its_checkpoint(chaos, reap):
    gate = chaos.tmp / "gate"   # attempt 1 waits at its last step until the kill: it cannot end first
    body = chaos.faulty_spec("stepper", params=chaos.params(x=0.5, steps=60, delay=0.03, gate=str(gate)),
                extra="trial: {retries: 1}")
    proc = _start(chaos, reap, "k9", body, "--workers", "1")
    att = chaos.wait_for(lambda: chaos.running_attempt("k9", 0), what="trial 0 running", proc=proc)
    trial_id = att["trial_id"]
    chaos.wait_for(lambda: _newest(chaos, trial_id) >= 4 and len(chaos.steps(trial_id, 1)) >= 5,
                   what="5 steps logged and checkpointed by attempt 1", proc=proc)
    assert proc.poll() is None and chaos.trial("k9", 0)["state"] == "running"
    recorded = _newest(chaos, trial_id)     # (attempt 2's retention later deletes attempt 1's checkpoints)
    os.kill(att["pid"], signal.SIGKILL)
    gate.write_text("")
    _finish(proc)

    trial = chaos.trial("k9", 0)
    attempts = chaos.attempts(trial_id)
    assert trial["state"] == "completed" and trial["attempts"] == 2
    assert [a["state"] for a in attempts] == ["failed", "completed"]
    assert attempts[0]["signal"] == signal.SIGKILL and "SIGKILL" in attempts[0]["reason"]
    first = chaos.steps(trial_id, 1)
    second = chaos.steps(trial_id, 2)
    assert first[0] == 0 and len(first) >= 5
    restored = _restored_step(chaos, trial_id, 2)
    # attempt 2 resumed from the newest checkpoint attempt 1 wrote, and logged from the step after it
    assert restored is not None and restored >= recorded >= 4
    assert second[0] == restored + 1 > 0, second[:3]
    assert second[-1] == 59 and second == list(range(restored + 1, 60))
    metrics = json.loads(trial["metrics"])
    assert metrics["resumed_from"] == restored + 1 and metrics["attempt"] == 2


def test_worker_sigterm_is_a_preemption_then_the_trial_resumes_and_completes(chaos, reap):
    gate = chaos.tmp / "gate"   # attempt 1 waits at its last step until the SIGTERM: it cannot end first
    body = chaos.faulty_spec("stepper", params=chaos.params(x=0.5, steps=50, delay=0.03, gate=str(gate)),
                extra="trial: {retries: 0, grace: 10s}")
    proc = _start(chaos, reap, "pre", body, "--workers", "1")
    att = chaos.wait_for(lambda: chaos.running_attempt("pre", 0), what="trial 0 running", proc=proc)
    trial_id = att["trial_id"]
    chaos.wait_for(lambda: _newest(chaos, trial_id) >= 2, what="3 checkpoints of attempt 1",
                   proc=proc)
    assert proc.poll() is None and chaos.trial("pre", 0)["state"] == "running"
    os.kill(att["pid"], signal.SIGTERM)
    gate.write_text("")
    _finish(proc)

    trial = chaos.trial("pre", 0)
    attempts = chaos.attempts(trial_id)
    # retries: 0, yet it ran again: a preemption is not a failure and does not use up retries
    assert trial["state"] == "completed" and trial["attempts"] == 2
    assert [a["state"] for a in attempts] == ["preempted", "completed"]
    assert "SIGTERM" in attempts[0]["reason"]
    assert chaos.events("preempted", trial_id), "no preempted event recorded"
    # the preempted attempt got its grace period: it wrote a last checkpoint on the way out, and
    # attempt 2 started right after it (the store no longer lists attempt 1's checkpoints: attempt 2's
    # retention deleted them)
    last_ckpt = chaos.steps(trial_id, 1)[-1]
    assert _restored_step(chaos, trial_id, 2) == last_ckpt
    assert chaos.steps(trial_id, 2) == list(range(last_ckpt + 1, 50))


# garbage in place of the newest checkpoint that is still JSON (a manifest whose fields have the wrong types,
# a payload name that is not a file) failed every later attempt (run.restore raised TypeError/ValueError/
# IsADirectoryError, and a save raised too), instead of being skipped as corrupt
@pytest.mark.parametrize("damage", ["truncate", "flip", "seq-null", "bytes-text", "time-text", "step-text",
                                    "payload-dir", "payload-is-dir", "manifest-gone"])
def test_corrupt_latest_checkpoint_falls_back_to_the_previous_one(chaos, reap, tmp_path, damage):
    ready = tmp_path / "ready"
    body = chaos.faulty_spec("checkpoint_then_wait",
                params=chaos.params(x=0.5, steps=4, ready_file=str(ready)),
                extra="trial: {retries: 1, keep_checkpoints: 2}")
    proc = _start(chaos, reap, "cc", body, "--workers", "1")
    chaos.wait_for(ready.exists, what="attempt 1 checkpointed and waiting", proc=proc)
    att = chaos.wait_for(lambda: chaos.running_attempt("cc", 0), what="attempt 1 row", proc=proc)
    trial_id = att["trial_id"]
    rows = chaos.wait_for(lambda: (r := chaos.checkpoints(trial_id, 1)) and r[-1]["step"] == 3 and r,
                          what="4 checkpoints", proc=proc)
    assert [r["step"] for r in rows] == [2, 3]    # the store lists the 2 that retention kept
    ckdir = chaos.store / rows[-1]["path"]        # relative to the store, or absolute (then `/` keeps it)
    assert rows[-1]["step"] == 3 and ckdir.is_dir()
    manifest = json.loads((ckdir / "manifest.json").read_text())
    payload = ckdir / manifest["payload"]
    data = payload.read_bytes()
    fields = {"seq-null": ("seq", None), "bytes-text": ("bytes", "many"), "time-text": ("time", "noon"),
              "step-text": ("step", "three"), "payload-dir": ("payload", ".")}
    if damage == "truncate":
        payload.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        payload.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    elif damage == "payload-is-dir":
        payload.unlink()
        payload.mkdir()
    elif damage == "manifest-gone":   # not a checkpoint any more, but its name is taken: the retry saves step 3
        (ckdir / "manifest.json").unlink()
    else:
        key, value = fields[damage]
        (ckdir / "manifest.json").write_text(json.dumps({**manifest, key: value}))
    os.kill(att["pid"], signal.SIGKILL)      # the attempt dies; the retry must not trust step 3
    _finish(proc)

    trial = chaos.trial("cc", 0)
    assert trial["state"] == "completed" and trial["attempts"] == 2
    assert _restored_step(chaos, trial_id, 2) == 2            # the previous checkpoint
    assert chaos.steps(trial_id, 2) == [3, 4, 5]              # redoes step 3, not from 0
    assert json.loads(trial["metrics"])["resumed_from"] == 3
    corrupt = chaos.events("checkpoint_corrupt", trial_id)   # a missing manifest is said too (it was not)
    assert len(corrupt) >= 1 and str(ckdir.name) in corrupt[0]["message"]
    if damage == "manifest-gone":
        assert "no manifest" in corrupt[0]["message"]


def test_metrics_logged_before_a_checkpoint_survive_a_worker_kill(chaos, reap, tmp_path):
    ready = tmp_path / "ready"
    body = chaos.faulty_spec(
        "checkpoint_then_wait",
        params=chaos.params(x=0.5, steps=4, flush=False, ready_file=str(ready)),
        extra="trial: {retries: 1}")
    proc = _start(chaos, reap, "mk", body, "--workers", "1")
    chaos.wait_for(ready.exists, what="attempt 1 checkpointed and waiting", proc=proc)
    att = chaos.wait_for(lambda: chaos.running_attempt("mk", 0), what="attempt 1 row", proc=proc)
    trial_id = att["trial_id"]
    # 4 written, the 2 newest kept (trial.keep_checkpoints): the store lists those that exist
    chaos.wait_for(lambda: [c["step"] for c in chaos.checkpoints(trial_id, 1)] == [2, 3],
                   what="checkpoints of steps 2 and 3 recorded", proc=proc)
    os.kill(att["pid"], signal.SIGKILL)
    _finish(proc)

    assert chaos.trial("mk", 0)["state"] == "completed"
    assert _restored_step(chaos, trial_id, 2) == 3 and chaos.steps(trial_id, 2) == [4, 5]
    # the trial's history has no hole: steps 0-3 were logged before their checkpoints were written
    assert sorted(chaos.steps(trial_id, 1) + chaos.steps(trial_id, 2)) == list(range(6))


def test_heartbeat_loss_kills_the_frozen_trial_as_a_failure_and_the_sweep_goes_on(chaos, reap):
    body = chaos.faulty_spec("freeze_on", params=chaos.params(x="{values: [1, 2, 3]}", freeze_x=1),
                extra="trial: {heartbeat_timeout: 2s, retries: 0}")
    proc = _start(chaos, reap, "hb", body, "--workers", "1")
    att = chaos.wait_for(lambda: chaos.running_attempt("hb", 0), what="trial 0 running", proc=proc)
    reap.append(att["pid"])
    _finish(proc)

    trials = {t["number"]: t for t in chaos.trials("hb")}
    assert trials[0]["state"] == "failed" and "no heartbeat" in trials[0]["reason"]
    attempt = chaos.attempts(trials[0]["id"])[0]
    assert attempt["state"] == "failed" and "no heartbeat" in attempt["reason"]
    assert attempt["signal"] == signal.SIGKILL
    assert chaos.steps(trials[0]["id"], 1) == [0]            # what it logged before freezing is kept
    assert trials[1]["state"] == trials[2]["state"] == "completed"
    import psutil

    assert not psutil.pid_exists(att["pid"]) or psutil.Process(att["pid"]).status() == psutil.STATUS_ZOMBIE


def test_trial_timeout_bounds_the_trial_and_names_trial_timeout(chaos, reap):
    body = chaos.faulty_spec("stepper",
                             params=chaos.params(x="{values: [0.5, 0.6]}", steps=100000, delay=0.05),
                extra="trial: {timeout: 2s, retries: 2}\nbudget: {trials: 2}")
    proc = _start(chaos, reap, "to", body, "--workers", "2")
    _, err = _finish(proc, code=1)                            # no trial completed
    assert "trial.timeout" in err

    for t in chaos.trials("to"):
        assert t["state"] == "failed" and "trial.timeout" in t["reason"], t["reason"]
        attempts = chaos.attempts(t["id"])
        assert len(attempts) == 1, "a timed-out trial is not retried (it would time out again)"
        a = attempts[0]
        assert a["ended"] - a["started"] < 30
        assert len(chaos.steps(t["id"], 1)) >= 5              # its progress up to the kill is kept


@pytest.mark.parametrize("kind", ["function", "command"])
def test_a_resumed_trial_logging_without_steps_goes_on_after_its_checkpoint(chaos, kind):
    """A trial that logs without a step (`run.log({...})`, an `@sweeplab` line without "step") and is retried
    from its checkpoint of step 2 logs its next epoch at step 3: the implicit step went back to 0 in each
    attempt, so attempt 2 wrote its epochs 3, 4, 5 over steps 0, 1, 2 of the history (the latest attempt's
    value wins there: the curve showed epoch 3's loss at step 0) and schedulers saw rungs it had passed."""
    import sys

    from tests.faults.conftest import FAULTY

    if kind == "function":
        target = f"function: {FAULTY}:stepless\n"
    else:
        target = f"command: [{sys.executable!r}, {str(FAULTY)!r}, stepless]\n"
    body = (f"{target}method: grid\nmetric: {{name: loss, goal: minimize}}\nparameters:\n  steps: {{value: 6}}\n"
            "trial: {retries: 1}\n")
    cp = chaos("sweep", str(chaos.spec("sl", body)), "--name", "sl", "-q", "--workers", "1")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    trial = chaos.trial("sl", 0)
    assert (trial["state"], trial["attempts"]) == ("completed", 2)
    history = chaos.rows("SELECT attempt, step, value FROM metrics WHERE trial_id=? AND key='loss' ORDER BY "
                         "attempt, step", trial["id"])
    by_attempt = {a: [(r["step"], r["value"]) for r in history if r["attempt"] == a] for a in (1, 2)}
    assert by_attempt[1] == [(0, 0.0), (1, 1.0), (2, 2.0)], by_attempt
    assert by_attempt[2][:3] == [(3, 3.0), (4, 4.0), (5, 5.0)], by_attempt
