"""W&B's agent sets WANDB_DIR to the directory it runs in when it is not set (wandb_agent.py, Agent.__init__;
agents/pyagent.py for function runs: `os.environ["WANDB_DIR"] = os.path.abspath(os.getcwd())`), so every run's
files go to that directory's `wandb/`, even for a program that changes directory first (Hydra's job chdir),
and programs read it: `os.path.join(os.getenv("WANDB_DIR"), "wandb", cfg.wandb.dir)` (sweep-aware Hydra
programs). Under sweeplab it was not set: such programs failed (`os.path.join(None, ...)`), and a run's files
followed the program's chdir.

W&B's agent, started as `wandb sweep` prints it (`wandb agent ENTITY/PROJECT/ID`), also sets WANDB_PROJECT and
WANDB_ENTITY for every run (wandb_agent.py: `wandb.env.set_project`), which `wandb sweep` took from the
environment, else from the file's `project`/`entity`. sweeplab ignored the file's keys: `wandb.init()` recorded
its offline run in "uncategorized", and `os.environ["WANDB_PROJECT"]` failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeplab.wandb_compat import sweep_env
from sweeplab.wandb_compat._boot import _sweeplab_wandb_hook as hook

SRC = Path(__file__).resolve().parents[2] / "src"


def _sweep(tmp_path: Path, env_extra: dict[str, str]) -> str:
    (tmp_path / "train.py").write_text(
        "import os, sys\n"
        "os.makedirs('outputs/run', exist_ok=True)\n"
        "os.chdir('outputs/run')   # as Hydra's job chdir does, before wandb.init\n"
        "seen = [os.environ[k] for k in ('WANDB_DIR', 'WANDB_PROJECT', 'WANDB_ENTITY')]\n"
        "open(os.path.join(os.environ['WANDB_DIR'], 'seen'), 'a').write(' '.join(seen) + '\\n')\n")
    (tmp_path / "sweep.yaml").write_text(
        "program: train.py\nmethod: grid\nparameters:\n  lr: {values: [0.1]}\nproject: proj\nentity: team\n"
        "command: [python, train.py, '${args}']\n".replace("python", sys.executable))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(tmp_path / "s"),
                           "-q", "--workers", "1"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_command_trial_gets_the_sweeps_directory_project_and_entity(tmp_path: Path) -> None:
    _sweep(tmp_path, {})
    assert (tmp_path / "seen").read_text() == f"{tmp_path.resolve()} proj team\n"


def test_the_users_wandb_dir_project_and_entity_are_kept(tmp_path: Path) -> None:
    # `wandb sweep` takes WANDB_PROJECT and WANDB_ENTITY before the file's keys
    mine = tmp_path / "mine"
    mine.mkdir()
    _sweep(tmp_path, {"WANDB_DIR": str(mine), "WANDB_PROJECT": "p2", "WANDB_ENTITY": "e2"})
    assert (mine / "seen").read_text() == f"{mine} p2 e2\n"


def test_a_function_trial_gets_its_directory_as_wandb_dir_and_gives_it_back(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.chdir(tmp_path)
    hook.begin_trial(str(tmp_path / "p.yaml"), {"lr": 0.1}, hook.run_env("s1", 3))
    try:
        hook._params_file()   # what wandb.init does first in a trial
        assert os.environ["WANDB_DIR"] == str(tmp_path.resolve())
    finally:
        hook.end_trial()
    assert "WANDB_DIR" not in os.environ
    monkeypatch.setenv("WANDB_DIR", "users-own")
    assert sweep_env({"project": "proj", "entity": 3}) == {"WANDB_PROJECT": "proj"}   # W&B's schema: strings
    hook.begin_trial(str(tmp_path / "q.yaml"), {"lr": 0.1}, hook.run_env("s1", 4))
    try:
        hook._params_file()
        assert os.environ["WANDB_DIR"] == "users-own"
    finally:
        hook.end_trial()


def test_both_kinds_of_trial_get_the_specs_project_and_entity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeplab.driver.records import TrialRecord
    from sweeplab.driver.tasks import TaskBuilder
    from sweeplab.spec import parse_spec

    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.delenv("WANDB_ENTITY", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    t = TrialRecord(id=1, number=0, params={"lr": 0.1}, config={"lr": 0.1}, seed=0)
    paths = {k: str(tmp_path / "logs" / f"0-1.{k}") for k in ("report", "checkpoint", "capture", "artifacts")}
    paths["log"] = str(tmp_path / "logs" / "0-1.log")
    for target in ({"program": "train.py"}, {"function": "train.py:main"}):
        spec = parse_spec({**target, "method": "grid", "project": "proj", "entity": "team",
                           "parameters": {"lr": {"values": [0.1]}}}, file=str(tmp_path / "sweep.yaml"))
        task = TaskBuilder(spec, sweep="s", root=str(tmp_path / "store"), cwd=str(tmp_path), overrides=(),
                           smoke=False).task(t, paths, mtbf=None, decisions={})
        env = task.env if task.kind == "command" else task.wandb["env"]
        assert (env["WANDB_PROJECT"], env["WANDB_ENTITY"]) == ("proj", "team"), task.kind
        if task.kind == "command":
            assert env["WANDB_DIR"] == str(tmp_path)


@pytest.mark.parametrize("kind", ["function", "command"])
def test_with_workdir_trial_each_trials_wandb_dir_and_offline_run_are_its_own(tmp_path: Path, kind: str) -> None:
    """A function trial's WANDB_DIR was its worker's directory (the sweep's) with `--workdir trial`, where a
    command trial's is its own directory: its offline run went to the sweep's `wandb/`, beside every other
    trial's."""
    (tmp_path / "train.py").write_text(
        "import os, wandb\n"
        "def main(config=None):\n"
        "    run = wandb.init()\n"
        "    wandb.log({'loss': 1.0})\n"
        "    path = os.path.join(os.environ['SWEEPLAB_ORIGINAL_CWD'], 'seen')\n"
        "    open(path, 'a').write(os.environ['WANDB_DIR'] + ' ' + os.getcwd() + '\\n')\n"
        "    run.finish()\n"
        "if __name__ == '__main__':\n"
        "    main()\n")
    target = "function: train.py:main" if kind == "function" else "program: train.py"
    (tmp_path / "sweep.yaml").write_text(f"{target}\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
                                         "parameters:\n  lr: {values: [0.1, 0.2]}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(tmp_path / "s"),
                           "-q", "--workers", "1", "--workdir", "trial"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = [line.split(" ") for line in (tmp_path / "seen").read_text().splitlines()]
    assert len(seen) == 2 and seen[0][1] != seen[1][1], seen
    for wandb_dir, cwd in seen:
        assert wandb_dir == cwd != str(tmp_path.resolve()), seen
        assert len(list(Path(cwd, "wandb").glob("offline-run-*"))) == 1, sorted(Path(cwd).rglob("*"))
    assert not (tmp_path / "wandb").exists()
