"""What `sweeplab repro` restores and replays for a trial stopped at a NaN: the state from before the NaN,
through the real CLI and real worker processes."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.slow

NAN_AT_2 = """\
import math
import numpy as np

def train(config, run):
    run.capture("dataset", np.empty(10_000_000))   # 80 MB: above a capture's bound, skipped and named
    state = run.restore()
    print(f"restored step {state['step'] if state else None}", flush=True)
    w = state["w"] if state else 0.0
    for step in range(state["step"] + 1 if state else 0, 5):
        batch = run.captured("batch") or {"index": step, "x": math.nan if step == 2 else 1.0}
        run.capture("batch", batch)
        w = w + batch["x"]                    # NaN from step 2 on: every later checkpoint holds it
        run.log({"loss": w}, step=step)
        run.checkpoint({"step": step, "w": w}, step=step, force=True)
        if run.should_stop or run.captured("batch"):
            break
    return {"loss": w}
"""


def test_repro_of_a_nan_trial_restores_the_checkpoint_from_before_the_nan(cli):
    """The `nan` monitor's stop reaches the trial after it logged the NaN and checkpointed (the stop even
    forces that checkpoint): the latest checkpoints hold the NaN state. Restored, the replay starts where the
    trial already was broken and replays nothing; the state before the NaN step is the one to start from."""
    (cli.tmp / "nan_at_2.py").write_text(NAN_AT_2)
    f = cli.spec("na", "function: nan_at_2.py:train\nmethod: grid\nmonitors: [nan]\n"
                       "trial: {keep_checkpoints: 10}\nparameters:\n  a: {value: 1}\n")
    cli("sweep", str(f), "--name", "na", "-q")
    (t,) = cli.status("na")["trials"]
    assert t["state"] == "stopped_by_rule" and "NaN at step 2" in t["reason"], t
    cp = cli("repro", "na/0")
    out = cp.stdout + cp.stderr
    assert "restored step 1" in out, out                       # not 2 or later: they hold the NaN
    assert "step 2: loss = nan" in out and cp.returncode == 1, out
    assert "the failure reproduced: loss = nan at step 2" in out, out
    assert "captured: batch" in out and "not captured: dataset (too large: 80000" in " ".join(out.split()), out


FAILS_ONCE = """\
from pathlib import Path

HEALED = Path(__file__).with_name("healed")   # the first failure heals the cause (a flaky input)

def train(config, run):
    state = run.restore()
    print(f"restored step {state['step'] if state else None}", flush=True)
    for step in range(state["step"] + 1 if state else 0, 4):
        if step == 1 and not HEALED.exists():
            HEALED.touch()
            raise ValueError("the first attempt breaks at step 1")
        run.checkpoint({"step": step}, step=step, force=True)
    return {"loss": 1.0}
"""


def test_repro_of_a_failed_attempt_restores_what_that_attempt_had_not_a_later_attempts_checkpoints(cli):
    """Attempt 1 failed at step 1 (after checkpointing step 0); its retry went on to step 3. The replay of the
    failure used the trial's latest checkpoint, the retry's step 3: it replayed nothing of the failure (and
    could not reach it). It starts from step 0, the checkpoint attempt 1 had."""
    (cli.tmp / "fails_once.py").write_text(FAILS_ONCE)
    f = cli.spec("fo", "function: fails_once.py:train\nmethod: grid\ntrial: {retries: 1, keep_checkpoints: 10}\n"
                       "parameters:\n  a: {value: 1}\n")
    cli("sweep", str(f), "--name", "fo", "-q")
    (t,) = cli.status("fo")["trials"]
    assert t["state"] == "completed" and t["attempts"] == 2, t
    (cli.tmp / "healed").unlink()   # the cause is back: the replay must reach step 1 to show it
    cp = cli("repro", "fo/0")
    out = cp.stdout + cp.stderr
    assert "restored step 0" in out and cp.returncode == 1, out
    assert "the failure reproduced" in out and "the first attempt breaks at step 1" in out, out
    assert "written after attempt 1" in " ".join(out.split()), out


FAILS_OTHERWISE = """\
from pathlib import Path

def train(config, run):
    seen = Path(__file__).with_name("seen")
    if seen.exists():
        raise KeyError("something else this time")
    seen.touch()
    raise ValueError("the recorded failure")
"""


def test_a_replay_that_fails_with_another_exception_says_so_instead_of_reproduced(cli):
    (cli.tmp / "fails_otherwise.py").write_text(FAILS_OTHERWISE)
    f = cli.spec("fw", "function: fails_otherwise.py:train\nmethod: grid\ntrial: {retries: 0}\n"
                       "parameters:\n  a: {value: 1}\n")
    cli("sweep", str(f), "--name", "fw", "-q")
    cp = cli("repro", "fw/0")
    out = " ".join((cp.stdout + cp.stderr).split())
    assert cp.returncode == 1 and "the failure reproduced" not in out, out
    assert "the replay failed differently: attempt 1 raised ValueError, the replay KeyError" in out, out


BAD_VALUE = """\
import json, math, sys

def train(config, run):   # as a function trial: returns its value
    run.log({"seen": 0.5}, step=0)
    return {"nan": {"loss": math.nan}, "missing": {"acc": 1.0}, "text": {"loss": "n/a"}}[config["how"]]

if __name__ == "__main__":   # as a command trial: prints its reports
    how = sys.argv[1].split("=")[1]
    print("@sweeplab " + json.dumps({"acc": 1.0} if how == "missing" else {"loss": math.nan}), flush=True)
"""


@pytest.mark.parametrize("kind", ["function", "command"])
def test_a_replay_that_ends_without_a_finite_objective_again_reproduced_the_failure(cli, kind):
    """A trial that ended with its objective NaN, missing or not a number failed without an exception or an
    exit code; its replay, ending the same way, said 'the trial did not fail this time' (exit 0). The replay
    judges the objective as the driver does."""
    (cli.tmp / "bad_value.py").write_text(BAD_VALUE)
    target = ("function: bad_value.py:train" if kind == "function"
              else f"command: ['{sys.executable}', bad_value.py, '${{args}}']")
    hows = ["nan", "missing", "text"] if kind == "function" else ["nan", "missing"]
    f = cli.spec("bv", f"{target}\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\ntrial: {{retries: 0}}\n"
                       f"parameters:\n  how: {{values: {hows}}}\n")
    cli("sweep", str(f), "--name", "bv", "-q")
    for number, t in enumerate(cli.status("bv")["trials"]):
        assert t["state"] == "failed", t
        cp = cli("repro", f"bv/{number}")
        out = " ".join((cp.stdout + cp.stderr).split())
        assert cp.returncode == 1, out
        assert f"the failure reproduced: {t['reason'].split(':')[0]}" in out, out
