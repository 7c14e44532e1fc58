"""A project directory moved (`mv proj proj2`) between `sweep` and `resume`.

The store records the sweep's directory, its spec file and its base config as absolute paths; once they are
gone, `resume` finds each at the same place relative to the store's parent (or the current directory), says so
in one line, and names both paths when a file is missing there too. Real CLI processes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TRAIN = "def train(config, run):\n    return {'loss': (config['lr'] - 0.3) ** 2 + config['base']}\n"
PROG = ("import json, sys\nargs = dict(a.lstrip('-').split('=', 1) for a in sys.argv[1:])\n"
        "print('@sweeplab ' + json.dumps({'loss': float(args['lr'])}))\n")
COMMON = ("method: random\nseed: 0\nmetric: {name: loss, goal: minimize}\n"
          "parameters: {lr: {min: 0.0, max: 1.0}}\nbudget: {trials: 1}\n")
KINDS = {   # what a trial needs from the project: a function's file, base config and profile; a program
    "function": "function: train.py:train\nconfig: configs/base.yaml\nprofile: local\n",
    "function-absolute": "function: {proj}/train.py:train\nconfig: {proj}/configs/base.yaml\nprofile: local\n",
    "program": "program: {proj}/prog.py\n",
}


def _sweeplab(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SWEEPLAB_STORE"}
    return subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=120)


def _project(root: Path, kind: str) -> Path:
    proj = root / "proj"
    (proj / "configs").mkdir(parents=True)
    (proj / "profiles").mkdir()
    (proj / "train.py").write_text(TRAIN)
    (proj / "prog.py").write_text(PROG)
    (proj / "configs" / "base.yaml").write_text("lr: 0.1\nbase: 1.0\n")
    (proj / "profiles" / "local.yaml").write_text("base: 0.5\n")
    (proj / "spec.yaml").write_text(KINDS[kind].format(proj=proj) + COMMON)
    done = _sweeplab(["sweep", "spec.yaml", "--name", "s", "-q"], proj)
    assert done.returncode == 0, done.stdout + done.stderr
    return proj


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("where", ["inside", "outside"], ids=["resume-in-project", "resume-with-store"])
def test_resume_after_the_project_directory_moved_runs_from_its_new_place(tmp_path, kind, where):
    proj = _project(tmp_path, kind)
    moved = tmp_path / "proj2"
    proj.rename(moved)
    if where == "inside":
        done = _sweeplab(["resume", "s", "--trials", "+1", "-q"], moved)
    else:   # from elsewhere: the store's parent is where the project now is
        done = _sweeplab(["resume", "s", "--trials", "+1", "-q", "--store", "proj2/.sweeplab"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{proj} is gone" in done.stdout and str(moved) in done.stdout
    with contextlib.closing(sqlite3.connect(moved / ".sweeplab" / "store.db")) as db:
        states = [r[0] for r in db.execute("SELECT state FROM trials ORDER BY number")]
    assert states == ["completed", "completed"], done.stdout + done.stderr


def test_resume_after_a_move_that_lost_the_base_config_names_both_paths(tmp_path):
    proj = _project(tmp_path, "function")
    moved = tmp_path / "proj2"
    proj.rename(moved)
    (moved / "configs" / "base.yaml").unlink()
    done = _sweeplab(["resume", "s", "--trials", "+1", "-q"], moved)
    assert done.returncode == 2, done.stdout + done.stderr
    assert str(proj / "configs" / "base.yaml") in done.stderr
    assert str(moved / "configs" / "base.yaml") in done.stderr
    assert "Traceback" not in done.stderr


FAILING = {   # a trial that checkpoints, then fails: its replay restores the checkpoint and fails again
    "function": ("function: train.py:train\nconfig: configs/base.yaml\n",
                 "def train(config, run):\n    print('restored', run.restore())\n"
                 "    run.checkpoint({'epoch': 1}, step=1)\n    raise ValueError('boom')\n"),
    "program": ("program: train.py\n",
                "import os, sys\nfrom sweeplab.checkpoint import CheckpointManager\n"
                "mgr = CheckpointManager(os.environ['SWEEPLAB_CHECKPOINT_DIR'])\nfound = mgr.latest()\n"
                "print('restored', found[1] if found else None, 'in', os.getcwd(), flush=True)\n"
                "mgr.save({'epoch': 1}, step=1)\nsys.exit(3)\n"),
}


@pytest.mark.parametrize("kind", list(FAILING))
@pytest.mark.parametrize("where", ["inside", "outside"], ids=["repro-in-project", "repro-with-store"])
def test_repro_after_the_project_directory_moved_replays_from_its_new_place(tmp_path, kind, where):
    """`sweeplab repro` of a moved project: a command trial's was refused ("ran in .../proj, which is gone"), a
    function trial's run from outside the project imported train.py from the current directory (a
    FileNotFoundError traceback), and both warned that the source file "is gone". Now the sweep's files are
    found where they are now, as `resume` finds them, and the replay restores the trial's checkpoint there."""
    spec, code = FAILING[kind]
    proj = tmp_path / "proj"
    (proj / "configs").mkdir(parents=True)
    (proj / "configs" / "base.yaml").write_text("lr: 0.1\n")
    (proj / "train.py").write_text(code)
    (proj / "spec.yaml").write_text(spec + "method: grid\nmetric: {name: loss, goal: minimize}\n"
                                    "parameters: {lr: {value: 0.5}}\ntrial: {retries: 0}\n")
    done = _sweeplab(["sweep", "spec.yaml", "--name", "s", "-q"], proj)
    assert done.returncode == 1, done.stdout + done.stderr   # its one trial failed
    moved = tmp_path / "proj2"
    proj.rename(moved)
    args, cwd = (["repro", "s/0"], moved) if where == "inside" else (["repro", "s/0", "--store", "proj2/.sweeplab"],
                                                                     tmp_path)
    done = _sweeplab(args, cwd)
    assert done.returncode == (1 if kind == "function" else 3), done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "error" not in done.stderr, done.stderr
    assert f"running it from {moved}" in done.stdout and "the failure reproduced" in done.stdout, done.stdout
    assert "restored {'epoch': 1}" in done.stdout and "since the trial failed" not in done.stdout, done.stdout
    if kind == "program":
        assert f"in {moved}\n" in done.stdout, done.stdout
