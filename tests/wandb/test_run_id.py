"""W&B's agent gives each run its id in WANDB_RUN_ID before the program starts (wandb_agent.py,
Agent._command_run; agents/pyagent.py for function runs), and public sweeps use it before wandb.init:
`hydra.run.dir=...${oc.env:WANDB_RUN_ID}`, `agent.run_name=${oc.env:WANDB_RUN_ID}` in their command. Under
sweeplab it was not set, so such programs failed ("Environment variable 'WANDB_RUN_ID' not found")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sweeplab.wandb_compat import trial_env
from sweeplab.wandb_compat._boot import _sweeplab_wandb_hook as hook

SRC = Path(__file__).resolve().parents[2] / "src"
W_AND_B_ID = re.compile(r"[0-9a-z]{8}")   # wandb.util.generate_id: 8 base-36 digits


def test_a_command_trial_gets_a_run_id_of_its_own(tmp_path: Path) -> None:
    first, second = (trial_env(param_path=tmp_path / f"{i}.yaml")["WANDB_RUN_ID"] for i in range(2))
    assert W_AND_B_ID.fullmatch(first) and W_AND_B_ID.fullmatch(second) and first != second


def test_a_function_trial_gets_one_at_its_first_wandb_init_and_gives_it_back(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_RUN_ID", "users-own")
    hook.begin_trial(str(tmp_path / "p.yaml"), {"lr": 0.1})
    try:
        hook._params_file()   # what wandb.init does first in a trial
        assert W_AND_B_ID.fullmatch(os.environ["WANDB_RUN_ID"])
    finally:
        hook.end_trial()
    assert os.environ["WANDB_RUN_ID"] == "users-own"


def test_a_program_that_reads_the_run_id_before_wandb_init_runs(tmp_path: Path) -> None:
    # as `hydra.run.dir=runs/${oc.env:WANDB_RUN_ID}` would: the program needs the id before any wandb call
    (tmp_path / "train.py").write_text(
        "import os, sys\n"
        "run_id = os.environ['WANDB_RUN_ID']\n"
        "open(os.path.join('ids', run_id), 'w').write(sys.argv[-1])\n")
    (tmp_path / "ids").mkdir()
    (tmp_path / "sweep.yaml").write_text(
        "program: train.py\nmethod: grid\nparameters:\n  lr: {values: [0.1, 0.2]}\n"
        "command: [python, train.py, '${args_no_hyphens}']\n".replace("python", sys.executable))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(tmp_path / "s"),
                           "-q", "--workers", "1"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = sorted(os.listdir(tmp_path / "ids"))
    assert len(ids) == 2 and all(W_AND_B_ID.fullmatch(i) for i in ids)
    assert sorted((tmp_path / "ids" / i).read_text() for i in ids) == ["lr=0.1", "lr=0.2"]


def test_a_wandb_function_trials_environment_is_set_before_its_function_and_given_back(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # W&B's agent exports its run's environment before it calls the function (programs read WANDB_SWEEP_ID,
    # and wandb.setup() reads it all, before wandb.init): so does a trial of a process that imported wandb
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_SWEEP_ID", raising=False)
    monkeypatch.setenv("WANDB_NAME", "users-own")
    hook.begin_trial(str(tmp_path / "p.yaml"), {"lr": 0.1}, hook.run_env("s1", 3))
    try:
        assert os.environ["WANDB_SWEEP_ID"] == "s1" and os.environ["WANDB_NAME"] == "s1-3"
        assert (tmp_path / "p.yaml").exists()   # programs load it themselves (OmegaConf.load(os.environ[...]))
    finally:
        hook.end_trial()
    assert "WANDB_SWEEP_ID" not in os.environ and os.environ["WANDB_NAME"] == "users-own"


def test_a_function_trial_of_a_process_without_wandb_gets_no_wandb_environment(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "wandb", raising=False)   # a worker whose trials never import wandb
    monkeypatch.delenv("WANDB_SWEEP_ID", raising=False)
    hook.begin_trial(str(tmp_path / "p.yaml"), {"lr": 0.1}, hook.run_env("s1", 3))
    try:
        assert "WANDB_SWEEP_ID" not in os.environ and not (tmp_path / "p.yaml").exists()
    finally:
        hook.end_trial()
