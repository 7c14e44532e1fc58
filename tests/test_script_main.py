"""`sl.main(train)`: a plain `python train.py key=value ...` runs one trial and records it as a single-trial
sweep (DESIGN: "`sl.Run` outside a sweep (`sweeplab run`, or plain `python train.py`) works the same"). Real
processes: the script is run by the interpreter as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import sweeplab as sl
import sweeplab.api

SRC = str(Path(sweeplab.api.__file__).resolve().parents[1])

TRAIN = """\
import sweeplab as sl
{imports}

def train(config, run):
    if config.get("fail"):
        raise ValueError("bad batch")
    for step in range(3):
        run.log({{"loss": config.lr * (3 - step)}}, step=step)
    return {{"loss": config.lr * {factor}}}

if __name__ == "__main__":
    sl.main(train)
"""


def _python(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "SWEEPLAB_STORE")}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, base.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=120)


def _states(store: Path, sweep: str) -> list[str]:
    return list(sl.load(sweep, store=store).trials()["state"])


def test_a_plain_python_script_runs_one_recorded_trial_with_its_overrides(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN.format(imports="", factor=1))
    (tmp_path / "base.yaml").write_text("lr: 0.5\nfail: false\n")
    cp = _python(tmp_path, "train.py", "lr=0.1", "--config", "base.yaml", "-q")
    assert cp.returncode == 0, cp.stderr
    assert "run run-train finished" in cp.stdout and "budget" not in cp.stdout   # one trial: no budget talk
    best = json.loads(_python(tmp_path, "-m", "sweeplab", "best", "run-train", "--json").stdout)
    assert best["metrics"]["loss"] == 0.1 and best["trial"] == 0   # the override reached the trial
    assert _states(tmp_path / ".sweeplab", "run-train") == ["completed"]

    cp = _python(tmp_path, "train.py", "fail=true", "--config", "base.yaml", "-q")   # a failing trial: exit 1
    assert cp.returncode == 1 and "ValueError: bad batch" in cp.stdout + cp.stderr


def test_bad_input_to_a_script_exits_2_and_writes_nothing(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN.format(imports="", factor=1))
    (tmp_path / "base.yaml").write_text("lr: 0.5\n")
    cp = _python(tmp_path, "train.py", "lrr=0.1", "--config", "base.yaml")
    assert cp.returncode == 2 and "did you mean 'lr'" in cp.stderr
    assert not (tmp_path / ".sweeplab").exists()


def test_a_module_run_with_dash_m_keeps_its_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("FACTOR = 2.0\n")
    (pkg / "train.py").write_text(TRAIN.format(imports="from .helpers import FACTOR", factor="FACTOR"))
    (tmp_path / "base.yaml").write_text("lr: 0.5\n")
    cp = _python(tmp_path, "-m", "pkg.train", "--config", "base.yaml", "-q")
    assert cp.returncode == 0, cp.stderr
    assert _states(tmp_path / ".sweeplab", "run-train") == ["completed"]   # named after the module


def test_a_script_run_as_a_command_trial_does_not_start_a_sweep_of_its_own(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN.format(imports="", factor=1))
    cp = _python(tmp_path, "train.py", "lr=0.1",
                 env={"SWEEPLAB_REPORT_FILE": str(tmp_path / "report.jsonl")})
    assert cp.returncode == 2 and "function: FILE.py:train" in cp.stderr
    assert not (tmp_path / ".sweeplab").exists()


def test_a_default_config_is_found_beside_the_script_from_any_directory(tmp_path):
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    (project / "profiles").mkdir()
    (project / "configs" / "base.yaml").write_text("lr: 0.5\ndata_dir: none\n")
    (project / "profiles" / "local.yaml").write_text("data_dir: /tmp/data\n")
    (project / "train.py").write_text(TRAIN.format(imports="", factor=1).replace(
        "sl.main(train)", 'sl.main(train, config="configs/base.yaml", profile="local")'))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cp = _python(elsewhere, str(project / "train.py"), "-q")   # the defaults: lr 0.5 from configs/base.yaml
    assert cp.returncode == 0, cp.stderr
    cp = _python(elsewhere, str(project / "train.py"), "lr=0.25", "-q")
    assert cp.returncode == 0, cp.stderr
    frame = sl.load("run-train-2", store=elsewhere / ".sweeplab").trials()
    assert frame["metrics.loss"].tolist() == [0.25]
    assert sl.load("run-train", store=elsewhere / ".sweeplab").trials()["metrics.loss"].tolist() == [0.5]
    cp = _python(elsewhere, str(project / "train.py"), "--profile", "nope")   # an option given wins
    assert cp.returncode == 2 and "nope" in cp.stderr


def test_a_scripts_help_describes_the_script_not_sweeplab_run(tmp_path):
    """`python train.py --help` printed `Usage: train.py run [OPTIONS] {target} ...`: the `sweeplab run`
    command, with a subcommand and a TARGET the script must not be given. It now shows the script's usage,
    its function and its defaults, the options it takes, and writes nothing."""
    (tmp_path / "train.py").write_text(TRAIN.format(imports="", factor=1).replace(
        "sl.main(train)", 'sl.main(train, config="base.yaml", profile="local")'))
    done = _python(tmp_path, "train.py", "--help")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.lstrip().startswith("Usage: train.py [OPTIONS] [[KEY=VALUE]...]"), out
    assert " run " not in out.splitlines()[0] and "target" not in out
    assert "train.py:train" in out and "base.yaml" in out and "local" in out
    assert "--smoke" in out and "--store" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_sweeplab_run_reads_the_config_and_profiles_beside_a_file_target(tmp_path):
    """DESIGN's `sweeplab run examples/torch_digits/train.py:train lr=0.01 model.hidden=256 --profile local
    --smoke`: with no --config, the `config.yaml` beside the target's file is its base config (as `sl.main(train,
    config="config.yaml")` declares it), and its profiles are found beside that config; the run says so."""
    project = tmp_path / "project"
    (project / "profiles").mkdir(parents=True)
    (project / "config.yaml").write_text("lr: 0.5\nmodel: {hidden: 8}\ndata_dir: none\n")
    (project / "profiles" / "local.yaml").write_text("data_dir: /tmp/data\n")
    (project / "train.py").write_text(
        "def train(config, run):\n"
        "    assert config.data_dir == '/tmp/data' and config.model.hidden == 256\n"
        "    return {'loss': config.lr}\n")
    cp = _python(tmp_path, "-m", "sweeplab", "run", "project/train.py:train", "lr=0.01", "model.hidden=256",
                 "--profile", "local", "--smoke", "-q")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "project/config.yaml" in cp.stdout and "--config" in cp.stdout   # which base config, how to choose
    assert "loss = 0.01" in cp.stdout
    cp = _python(tmp_path, "-m", "sweeplab", "run", "project/train.py:train", "lrr=0.01", "-q")
    assert cp.returncode == 2 and "did you mean 'lr'" in cp.stderr


def test_a_script_whose_function_is_under_its_main_guard_is_told_where_to_define_it(tmp_path):
    """`sl.main(train)` runs `train` by name in a worker, which imports the script without running its
    `if __name__ == "__main__":` block: a `train` defined there is refused up front (exit 2, saying where to
    define it) rather than failing the trial with "has no function 'train'"."""
    (tmp_path / "train.py").write_text('import sweeplab as sl\n\nif __name__ == "__main__":\n'
                                       '    def train(config, run):\n        return {"loss": 1.0}\n\n'
                                       '    sl.main(train)\n')
    proc = _python(tmp_path, "train.py")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "if __name__" in proc.stderr and "define it at the top level" in " ".join(proc.stderr.split())
    assert not (tmp_path / ".sweeplab").exists()


def test_a_usage_error_of_a_script_points_to_the_scripts_own_help(tmp_path):
    """`python train.py --nonsense`: the hint names the help that works (`train.py --help`), not `train.py run
    --help`, which the script would read as an override `run` and refuse."""
    (tmp_path / "train.py").write_text(TRAIN.format(imports="", factor=1))
    cp = _python(tmp_path, "train.py", "--nonsense")
    assert cp.returncode == 2, cp.stderr
    assert "(see `train.py --help`)" in cp.stderr and " run --help" not in cp.stderr, cp.stderr
    assert not (tmp_path / ".sweeplab").exists()
