"""Scheduler decisions across the driver's end: a decision taken before a SIGTERM or a kill -9 of the driver
stands after `sweeplab resume`, as in a sweep that was never interrupted.

The sweeps run tests/faults/rung_trials.py:train on real processes: trial 0 (x = 0) is good, trial 1 (x = 5)
is bad, and ASHA with eta 2 prunes trial 1 at its first rung (step 1), with the value it reported there (6.0).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TRAIN = Path(__file__).resolve().parent / "rung_trials.py"


ASHA = "{type: asha, min_iter: 1, max_iter: 4, eta: 2}"


def _spec(chaos, tmp_path: Path, *, xs: str = "[0.0, 5.0]", early: str = ASHA, **config) -> Path:
    params = "\n".join(f"  {k}: {{value: {v!r}}}" for k, v in config.items())
    return chaos.spec("s", f"function: {TRAIN}:train\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
                           f"parameters:\n  x: {{values: {xs}}}\n{params}\n"
                           f"early_terminate: {early}\ntrial: {{grace: 10s}}\n")


def _pruned_at_its_rung_once(chaos, name: str) -> None:
    cp = chaos("resume", name, "-q", timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    trials = chaos.trials(name)
    assert [(t["number"], t["state"]) for t in trials] == [(0, "completed"), (1, "pruned")]
    bad = trials[1]
    attempts = [a["state"] for a in chaos.attempts(bad["id"])]
    assert attempts == ["pruned"], attempts     # not run again past the rung that pruned it
    assert bad["value"] == pytest.approx(6.0)   # the value it was judged on, at step 1
    assert "rung 1 (step 1)" in bad["reason"]
    assert chaos.steps(bad["id"], 1) == [1]


@pytest.mark.parametrize("backend", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_a_trial_pruned_while_the_driver_stops_on_sigterm_stays_pruned_after_resume(chaos, reap, tmp_path, backend):
    if backend == "ray":
        pytest.importorskip("ray", reason="pip install 'sweeplab[ray]'")
    go = tmp_path / "go"
    spec = _spec(chaos, tmp_path, late=1, go=str(go))
    proc = chaos.start("sweep", str(spec), "--name", "term", "--workers", "1", "--backend", backend, "-q")
    reap.append(proc.pid)
    chaos.wait_for(lambda: Path(f"{go}.waiting").exists(), what="trial 1 started", proc=proc, timeout=120)
    os.kill(proc.pid, signal.SIGTERM)   # trial 1 reaches its rung during the driver's grace wait: pruned there
    go.write_text("")
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert chaos.trial("term", 1)["state"] == "pruned"
    _pruned_at_its_rung_once(chaos, "term")


def test_a_trial_pruned_just_before_a_driver_kill_stays_pruned_after_resume(chaos, reap, tmp_path):
    spec = _spec(chaos, tmp_path, linger=3.0)   # trial 1 takes 3 s to end once pruned: the kill falls in them
    proc = chaos.start("sweep", str(spec), "--name", "dk", "--workers", "1", "-q")
    reap.append(proc.pid)
    bad = chaos.wait_for(lambda: chaos.trial("dk", 1), what="trial 1 recorded", proc=proc)
    chaos.wait_for(lambda: chaos.events("pruned", bad["id"]), what="trial 1 pruned", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert chaos.trial("dk", 1)["state"] == "running"   # the kill came before the trial ended
    _pruned_at_its_rung_once(chaos, "dk")


def test_hyperband_does_not_count_the_steps_a_resumed_trial_reports_again(chaos, reap, tmp_path):
    # bands at a trial's 2nd and 4th report. Trial 2 (x = 0, the best) has no checkpoint: killed with its driver
    # after step 3, it runs again from step 1. Its steps 1-3 reported again are no new reports (W&B drops a
    # log whose step does not increase): counted, they took it to band 4 at its step 1 (1.0, the worst) and
    # pruned it there
    go = tmp_path / "go"
    spec = _spec(chaos, tmp_path, xs="[0.1, 0.05, 0.0]", early="{type: hyperband, min_iter: 2, eta: 2}",
                 checkpoint=False, late=2, wait_at=3, go=str(go))
    proc = chaos.start("sweep", str(spec), "--name", "hb", "--workers", "1", "-q")
    reap.append(proc.pid)
    chaos.wait_for(lambda: Path(f"{go}.waiting").exists(), what="trial 2 at its step 3", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    go.write_text("")
    cp = chaos("resume", "hb", "-q", timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    trials = chaos.trials("hb")
    assert [(t["number"], t["state"]) for t in trials] == [(0, "completed"), (1, "completed"), (2, "completed")]
    assert trials[2]["value"] == pytest.approx(0.25) and trials[2]["attempts"] == 2


def test_a_sweep_started_with_hard_resumes_with_hard_budgets(chaos, reap, tmp_path):
    # `sweep --hard` stops running trials at a resource budget; `resume` of its killed driver does the same,
    # as it runs as wide as it last ran (no trial overshoots the budget because the driver was restarted)
    params = "\n".join(f"  {k}: {{value: {v!r}}}" for k, v in {"steps": 40, "delay": 0.05}.items())
    body = (f"function: {TRAIN}:train\nmethod: random\nseed: 0\nmetric: {{name: loss, goal: minimize}}\n"
            f"parameters:\n  x: {{min: 0.0, max: 1.0}}\n{params}\nbudget: {{cpu_hours: 0.0002}}\n")
    proc = chaos.start("sweep", str(chaos.spec("s", body)), "--name", "hard", "--workers", "1", "--hard", "-q")
    reap.append(proc.pid)
    first = chaos.wait_for(lambda: chaos.trial("hard", 0), what="trial 0 recorded", proc=proc)
    chaos.wait_for(lambda: chaos.steps(first["id"], 1), what="trial 0 reporting", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    cp = chaos("resume", "hard", "-q", timeout=60)
    assert cp.returncode == 1 and "no trial completed (1 stopped; budget.cpu_hours" in cp.stderr, cp.stdout + cp.stderr
    trials = chaos.trials("hard")
    assert [(t["number"], t["state"]) for t in trials] == [(0, "stopped")], [dict(t) for t in trials]
    assert "budget.cpu_hours" in trials[0]["reason"]


def test_a_trial_killed_after_its_last_step_completes_with_the_value_it_reported_on_resume(chaos, reap, tmp_path):
    # its attempt 2 restores the checkpoint of its last step and has nothing left to run or return: its value is
    # its last report of the metric, made by attempt 1, as a retry in a sweep never interrupted takes it, and the
    # cost it reported then counts in budget.cost
    go = tmp_path / "go"
    body = (f"function: {TRAIN}:train\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\nparameters:\n"
            f"  x: {{value: 0.5}}\n  steps: {{value: 2}}\n  late: {{value: 0}}\n  wait_at: {{value: 2}}\n"
            f"  go: {{value: {str(go)!r}}}\n  usd: {{value: 0.25}}\nbudget: {{cost: {{usd: 10}}}}\n")
    proc = chaos.start("sweep", str(chaos.spec("s", body)), "--name", "last", "--workers", "1", "-q")
    reap.append(proc.pid)
    chaos.wait_for(lambda: Path(f"{go}.waiting").exists(), what="trial 0 after its last step", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    cp = chaos("resume", "last", "-q", timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    trial = chaos.trial("last", 0)
    assert (trial["state"], trial["value"], trial["attempts"]) == ("completed", 1.0, 2), dict(trial)
    assert chaos.status("last")["sweep"]["spend"]["cost.usd"] == pytest.approx(0.5)   # its last usd report
