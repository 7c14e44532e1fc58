"""Budgets and trial timeouts in bad forms, through the real CLI: exit 2 naming the key, and no sweep stored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SPEC = """function: train.py:train
method: random
metric: {name: loss, goal: minimize}
parameters:
  x: {min: 0.0, max: 1.0}
"""


@pytest.mark.parametrize(("extra", "key"), [
    ("budget: {time: 0}", "budget.time"),               # a sweep that would end before its first trial
    ("budget: {time: 0s}", "budget.time"),
    ("budget: {time: -1}", "budget.time"),
    ("budget: {time: 5 parsecs}", "budget.time"),
    ("budget: {cpu_hours: 0}", "budget.cpu_hours"),
    ("budget: {gpu_hours: 0}", "budget.gpu_hours"),
    ("budget: {cost: {usd: 0}}", "budget.cost.usd"),
    ("budget: {trials: 0}", "budget.trials"),
    ("budget: {trials: 2.5}", "budget.trials"),
    ("trial: {timeout: 0}", "trial.timeout"),
    ("trial: {timeout: -1}", "trial.timeout"),
    ("trial: {timeout: .inf}", "trial.timeout"),
])
def test_a_budget_or_timeout_in_a_bad_form_exits_2_naming_the_key_and_stores_nothing(tmp_path: Path, extra, key):
    (tmp_path / "train.py").write_text("def train(config, run):\n    return {'loss': config['x']}\n")
    (tmp_path / "s.yaml").write_text(SPEC + extra + "\n")
    env = {**os.environ, "SWEEPLAB_STORE": str(tmp_path / "store")}
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "s.yaml", "--name", "bad", "-q"],
                        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert key in cp.stderr and "Traceback" not in cp.stderr, cp.stderr
    assert not (tmp_path / "store" / "store.db").exists() or "bad" not in subprocess.run(
        [sys.executable, "-m", "sweeplab", "list"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=60).stdout
