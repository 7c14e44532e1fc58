"""How a sweep or a run ends, through the real CLI and real worker processes: exit codes (0 a trial
completed, 1 none did, 2 bad input), what is printed, and what a failed command trial leaves behind
(its reason, its log header) so that `sweeplab repro` can run it again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

TYPED_TRAIN = '''
from dataclasses import dataclass


@dataclass
class Config:
    lr: float = 0.1
    steps: int = 3


def train(config: Config, run):
    loss = 1.0
    for step in range(config.steps):
        loss = loss * (1 - config.lr)
        run.log({"loss": loss}, step=step)
    return {"loss": loss}
'''


def flat(text: str) -> str:
    """Output with line wrapping undone (rich wraps long lines)."""
    return " ".join(text.split())


@pytest.fixture
def project(cli):
    (cli.tmp / "train.py").write_text(TYPED_TRAIN)
    (cli.tmp / "configs").mkdir()
    (cli.tmp / "configs" / "base.yaml").write_text("lr: 0.1\nsteps: 3\n")
    return cli


# ------------------------------------------------------------------------------------------- run
def test_run_with_an_unknown_config_key_is_bad_input_not_retried(project):
    # no base config: only the function's typed config knows the keys, in the worker
    cp = project("run", "train.py:train", "lrr=3")
    assert cp.returncode == 2, cp.stdout + cp.stderr
    lines = [ln for ln in cp.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, cp.stderr
    assert "lrr" in lines[0] and "unknown key" in lines[0] and "did you mean 'lr'" in lines[0]
    assert "lrr=3" in lines[0]                       # where it came from: the command-line override
    t = project.status("run-train")["trials"][0]
    assert t["state"] == "failed" and t["attempts"] == 1   # deterministic: never retried


def test_run_with_an_override_its_base_config_does_not_have_stores_nothing(project):
    cp = project("run", "train.py:train", "lrr=3", "--config", "configs/base.yaml")
    assert cp.returncode == 2, cp.stdout + cp.stderr
    lines = [ln for ln in cp.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "unknown key 'lrr'" in lines[0] and "did you mean 'lr'" in lines[0], cp.stderr
    assert "'+lrr=3' adds it" in lines[0]
    assert not project.store.exists()


def test_run_with_a_wrong_type_in_the_config_file_names_the_file(project):
    (project.tmp / "configs" / "base.yaml").write_text("lr: fast\nsteps: 3\n")
    cp = project("run", "train.py:train", "--config", "configs/base.yaml")
    assert cp.returncode == 2, cp.stdout + cp.stderr
    lines = [ln for ln in cp.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "configs/base.yaml" in lines[0] and "lr" in lines[0] and "fast" in lines[0]


def test_run_prints_its_final_metrics_and_best_answers_for_it(project):
    cp = project("run", "train.py:train", "lr=0.5", "--config", "configs/base.yaml", check=True)
    assert "loss = 0.125" in flat(cp.stdout) or "loss=0.125" in flat(cp.stdout), cp.stdout
    best = json.loads(project("best", "run-train", "--json", check=True).stdout)
    assert best["trial"] == 0 and best["metrics"]["loss"] == pytest.approx(0.125)
    assert best["params"] == {} and best["value"] is None     # no metric declared: no value, its metrics
    head = (project.store / "logs" / "run-train" / "0-1.log").read_text().splitlines()[:4]
    assert head[1] == f"# function: {json.dumps(str(project.tmp / 'train.py') + ':train')}"
    assert head[2] == f"# cwd: {json.dumps(str(project.tmp))}" and head[3].startswith("# env: {")


def test_best_of_a_sweep_without_a_metric_and_several_trials_has_no_answer(project):
    spec = project.spec("nometric", "function: train.py:train\nconfig: configs/base.yaml\nmethod: grid\n"
                        "parameters: {lr: {values: [0.1, 0.2]}}\n")
    project("sweep", str(spec), "--workers", "1", "-q", check=True)
    cp = project("best", "nometric")
    assert cp.returncode == 1 and "declares no metric.name" in flat(cp.stdout)
    assert json.loads(project("best", "nometric", "--json").stdout) is None


def test_a_failed_run_exits_1_with_the_reason_on_stderr(project):
    (project.tmp / "boom.py").write_text("def train(config, run):\n    raise RuntimeError('exploded')\n")
    cp = project("run", "boom.py:train", "-q")
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "RuntimeError: exploded" in cp.stderr


# ------------------------------------------------------------------------------------------- sweeps
@pytest.mark.parametrize("trials", [1, 2], ids=["one-trial", "two-trials"])
def test_a_sweep_whose_program_cannot_start_exits_1(cli, trials):
    spec = cli.spec("nostart", "method: random\nparameters: {x: {min: 0.0, max: 1.0}}\n"
                    "command: [./no-such-program, '${args}']\n")
    cp = cli("sweep", str(spec), "--trials", str(trials), "-q")
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "cannot start ./no-such-program" in flat(cp.stderr)
    assert cli.status("nostart")["sweep"]["state"] == "failed"


def test_a_sweep_of_failing_function_trials_exits_1(cli):
    (cli.tmp / "boom.py").write_text("def train(config, run):\n    raise RuntimeError('exploded')\n")
    spec = cli.spec("boom", "function: boom.py:train\nmethod: random\nparameters: {x: {min: 0.0, max: 1.0}}\n"
                    "trial: {retries: 0}\n")
    cp = cli("sweep", str(spec), "--trials", "2", "-q")
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "RuntimeError: exploded" in cp.stderr


def test_an_override_the_config_does_not_know_ends_the_sweep_at_once_with_2(project):
    # no `config:` (with one, the override is refused before the store: tests/test_config_overrides.py)
    spec = project.spec("ov", "function: train.py:train\nmethod: random\n"
                        "parameters: {lr: {min: 0.1, max: 0.5}}\nbudget: {trials: 20}\n")
    cp = project("sweep", str(spec), "lrr=3", "--workers", "1", "-q")
    assert cp.returncode == 2, cp.stdout + cp.stderr
    lines = [ln for ln in cp.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "lrr" in lines[0] and "did you mean 'lr'" in lines[0], cp.stderr
    trials = project.status("ov")["trials"]
    assert len(trials) == 1 and trials[0]["attempts"] == 1   # every trial would fail the same way


def test_a_sampled_configuration_that_does_not_fit_fails_alone_without_retry(project):
    spec = project.spec("cat", "function: train.py:train\nconfig: configs/base.yaml\nmethod: grid\n"
                        "metric: {name: loss, goal: minimize}\n"
                        "parameters: {steps: {values: [2, many, 3]}}\n")
    cp = project("sweep", str(spec), "--workers", "1", "-q")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    trials = project.status("cat")["trials"]
    states = {t["params"]["steps"]: (t["state"], t["attempts"]) for t in trials}
    assert states == {2: ("completed", 1), "many": ("failed", 1), 3: ("completed", 1)}
    bad = next(t for t in trials if t["params"]["steps"] == "many")
    assert "steps" in bad["reason"] and "many" in bad["reason"]


# ------------------------------------------------------------------------------------------- command trials
MISSING_MODULE = "import sweeplab_no_such_module_xyz\n"

ECHO_PROGRAM = '''
import json, os, sys
out = os.environ["ECHO_OUT"]
with open(out, "a") as fh:
    fh.write(json.dumps({"argv": sys.argv, "cwd": os.getcwd(),
                         "env": {k: v for k, v in os.environ.items() if k.startswith("SWEEPLAB_")}}) + "\\n")
sys.exit(3)
'''


def test_a_failed_command_trial_says_why_and_its_log_says_how_it_ran(cli):
    (cli.tmp / "prog.py").write_text(MISSING_MODULE)
    spec = cli.spec("mm", "program: prog.py\nmethod: grid\nparameters: {x: {values: [1]}}\n"
                    "trial: {retries: 0}\n")
    cp = cli("sweep", str(spec), "-q")
    assert cp.returncode == 1
    assert "ModuleNotFoundError" in cp.stderr
    status = cli.status("mm")
    t = status["trials"][0]
    assert "ModuleNotFoundError" in t["reason"] and "sweeplab_no_such_module_xyz" in t["reason"]
    assert "\n" not in t["reason"] and len(t["reason"]) < 600
    log = next((cli.store / "logs" / "mm").glob("0-1.log")).read_text()
    head = log.splitlines()[:6]
    text = "\n".join(head)
    assert "argv" in text and "prog.py" in text and "--x=1" in text
    assert f"cwd: {json.dumps(str(cli.tmp))}" in text
    assert "SWEEPLAB_SEED" in text and "SWEEPLAB_CHECKPOINT_DIR" in text
    env = json.loads(next(ln for ln in head if ln.startswith("# env: "))[len("# env: "):])
    assert "PATH" not in env and "HOME" not in env           # only what sweeplab added, not the environment
    python_vars = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "CUDA_VISIBLE_DEVICES")
    assert all(k.startswith(("SWEEPLAB_", "WANDB_")) or k.endswith("_NUM_THREADS") or k in python_vars
               for k in env), env


def test_repro_of_a_retried_command_trial_that_wrote_no_checkpoint_says_none_were_copied(cli):
    """A retried attempt leaves the trial's checkpoint directory holding only sweeplab's attempt fence:
    `repro` said "checkpoints copied: yes" for a program that died importing a module (docs/debugging.md
    shows "none" for that very failure)."""
    (cli.tmp / "prog.py").write_text(MISSING_MODULE)
    spec = cli.spec("mm1", "program: prog.py\nmethod: grid\nparameters: {x: {values: [1]}}\n"
                    "trial: {retries: 1}\n")
    assert cli("sweep", str(spec), "-q").returncode == 1
    assert cli.status("mm1")["trials"][0]["attempts"] == 2
    rp = cli("repro", "mm1/0")
    assert rp.returncode == 1, rp.stdout + rp.stderr
    assert "checkpoints copied: none" in rp.stdout, rp.stdout

def test_repro_runs_a_command_trial_again_with_its_argv_and_environment(cli, tmp_path):
    (cli.tmp / "prog.py").write_text(ECHO_PROGRAM)
    out = tmp_path / "echo.jsonl"
    spec = cli.spec("echo", "program: prog.py\nmethod: grid\nparameters: {lr: {values: [0.25]}}\n"
                    "trial: {retries: 0}\n")
    env = cli.env()
    env["ECHO_OUT"] = str(out)
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", str(spec), "-q"], cwd=cli.tmp, env=env,
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rp = subprocess.run([sys.executable, "-m", "sweeplab", "repro", "echo/0"], cwd=elsewhere, env=env,
                        capture_output=True, text=True, timeout=120)
    assert rp.returncode == 3, rp.stdout + rp.stderr           # the program's own exit code
    first, again = [json.loads(line) for line in out.read_text().splitlines()]
    assert again["argv"] == first["argv"] and "--lr=0.25" in first["argv"]
    assert again["cwd"] == first["cwd"] == str(cli.tmp)
    for key in ("SWEEPLAB_SEED", "SWEEPLAB_TRIAL", "SWEEPLAB_SWEEP"):
        assert again["env"][key] == first["env"][key]
    # the replay never writes the store: its checkpoint directory is a copy
    assert again["env"]["SWEEPLAB_CHECKPOINT_DIR"] != first["env"]["SWEEPLAB_CHECKPOINT_DIR"]
    assert str(cli.store) not in again["env"]["SWEEPLAB_REPORT_FILE"]
    assert "warning" not in rp.stdout
    # it wrote no checkpoint: nothing was copied (the runner's empty directory said "yes")
    assert "checkpoints copied: none" in rp.stdout, rp.stdout
    # the program changed since it failed: repro says so, and runs it as it is now
    (cli.tmp / "prog.py").write_text(ECHO_PROGRAM + "# edited\n")
    rp = subprocess.run([sys.executable, "-m", "sweeplab", "repro", "echo/0"], cwd=elsewhere, env=env,
                        capture_output=True, text=True, timeout=120)
    assert rp.returncode == 3
    assert f"warning: {cli.tmp / 'prog.py'} changed since the trial failed" in " ".join(rp.stdout.split())
