"""Issue 6 end to end, through the real CLI and real worker processes: smoke mode catches the common
mistakes before the real sweep, `run.track` profiles where a step's time goes, a failed trial leaves what
is needed to replay it and `sweeplab repro` replays it, and seeds make trials repeatable."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sweeplab.driver import trial_seed

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROJECT = FIXTURES / "smoke_project"
HAS_TORCH = importlib.util.find_spec("torch") is not None


def flat(text: str) -> str:
    """Output with line wrapping undone (rich wraps long lines)."""
    return " ".join(text.split())


def db(cli) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{cli.store / 'store.db'}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    return conn


def trial_row(cli, sweep: str, number: int) -> sqlite3.Row:
    with db(cli) as conn:
        return conn.execute("SELECT t.* FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
                            "WHERE s.name=? AND t.number=?", (sweep, number)).fetchone()


def sweep_names(cli) -> list[str]:
    if not (cli.store / "store.db").exists():
        return []
    return [s["name"] for s in json.loads(cli("status", "--json", check=True).stdout)["sweeps"]]


# ------------------------------------------------------------------------------------------- smoke mode
SMOKE_MISTAKES = [
    # spec, exit code, what the message must name, whether it is caught before any trial starts
    ("import_error", 2, ["cannot import", "ModuleNotFoundError", "sweeplab_fixture_missing_dependency"], True),
    ("bad_key", 2, ["optim={'name': 'adam', 'bta1': 0.8}", "optim.bta1", "unknown key for Optim",
                    "did you mean 'beta1'"], True),
    ("wrong_metric", 1, ["smoke check FAILED", "'val_accuracy' was never reported", "val_loss"], False),
    ("bad_checkpoint", 1, ["smoke check FAILED", "checkpoint: cannot save", "pickle", "<lambda>"], False),
    ("diverging", 1, ["smoke check FAILED", "2 of 2 trial(s)", "val_loss is NaN at step 0", "stopped by a rule"],
     False),
]


@pytest.mark.parametrize("spec, code, names, before_trials", SMOKE_MISTAKES,
                         ids=[m[0] for m in SMOKE_MISTAKES])
def test_smoke_names_each_common_mistake(cli, spec, code, names, before_trials):
    cp = cli("sweep", str(PROJECT / f"{spec}.yaml"), "--smoke", "--workers", "2", "-q")
    out = flat(cp.stderr)
    assert cp.returncode == code, cp.stdout + cp.stderr
    for name in names:
        assert name in out, f"{name!r} missing from:\n{cp.stderr}"
    assert "Traceback" not in cp.stderr
    if before_trials:   # caught in the driver's process: no sweep was created, no trial ran
        assert "before any trial ran" in out
        assert sweep_names(cli) == []
    else:
        trials = cli.status(f"smoke-{spec.split('_')[-1]}")["trials"]
        assert trials and all(t["state"] in ("failed", "stopped_by_rule") for t in trials)


def test_smoke_checks_every_categorical_choice_and_names_only_the_bad_one(cli):
    cp = cli("sweep", str(PROJECT / "bad_key.yaml"), "--smoke", "-q")
    problems = [line for line in cp.stderr.splitlines() if line.startswith("smoke check:")]
    assert cp.returncode == 2 and len(problems) == 1, cp.stderr
    assert "'sgd'" not in flat(cp.stderr)


def test_smoke_message_prints_the_target_verbatim(cli):
    cp = cli("sweep", str(PROJECT / "import_error.yaml"), "--smoke", "-q")
    assert cp.returncode == 2
    assert "broken.py:train" in cp.stderr, cp.stderr


def test_clean_spec_passes_smoke_with_tiny_cpu_trials_and_dry_run_prices_the_sweep(cli):
    project = cli.tmp / "project"   # a copy: the smoke records its timing next to the spec
    shutil.copytree(PROJECT, project)
    spec = str(project / "clean.yaml")
    before = cli("sweep", spec, "--dry-run", check=True)
    assert "cost unknown" in flat(before.stdout) and "--smoke" in before.stdout

    cp = cli("sweep", spec, "--smoke", "--workers", "2", "-q")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "smoke check passed" in cp.stdout
    st = cli.status("smoke-clean")
    assert st["sweep"]["counts"]["completed"] == len(st["trials"]) == 2   # a handful, not budget.trials=12
    for t in st["trials"]:
        m = t["metrics"]
        assert m["smoke"] == 1.0                           # run.smoke is True inside the trial
        assert 1 <= m["batches_per_epoch"] <= 5            # run.track stopped a 1000-batch loader early
        assert m["epochs_run"] < 50                        # the driver stopped the trial after a few reports
        assert m["gpus_hidden"] == 1.0                     # CUDA_VISIBLE_DEVICES is set and empty

    after = flat(cli("sweep", spec, "--dry-run", check=True).stdout)
    assert "cost unknown" not in after
    assert "per step" in after and "start-up per trial" in after and "~12 trials x" in after
    assert re.search(r"= [\d.]+ (s|min|h) wall", after), after
    assert (project / ".sweeplab-smoke.json").is_file()
    assert "CPU-hours" in after and "GPU-hours" in after
    assert sweep_names(cli) == ["smoke-clean"]            # --dry-run ran nothing


def test_smoke_without_categorical_parameters_says_so_once_and_still_runs(cli):
    cp = cli("sweep", str(PROJECT / "no_categorical.yaml"), "--smoke", "-q")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    said = [line for line in cp.stdout.splitlines() if "no categorical parameters" in line]
    assert len(said) == 1
    assert "smoke check passed" in cp.stdout
    assert cli.status("smoke-continuous")["sweep"]["counts"]["completed"] == 2


def test_run_smoke_runs_one_tiny_trial(cli):
    cp = cli("run", f"{PROJECT / 'train.py'}:train", "--config", str(PROJECT / "configs" / "base.yaml"),
             "--smoke", "--name", "one", "-q", "lr=0.2")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "smoke check passed" in cp.stdout
    (t,) = cli.status("one")["trials"]
    assert t["state"] == "completed" and t["metrics"]["smoke"] == 1.0 and t["metrics"]["lr"] == 0.2
    assert t["metrics"]["batches_per_epoch"] <= 5 and t["metrics"]["gpus_hidden"] == 1.0


def test_smoke_ends_a_trial_that_never_reads_should_stop_after_a_couple_of_reports(cli):
    """A loop over `config.train.epochs` (a nested key smoke mode cannot shrink) that never reads
    `run.should_stop` ran all its 300 epochs in a smoke run (or, longer than `trial.grace`, failed with "did
    not stop within trial.grace"). It now ends a couple of reports after the stop, completed."""
    (cli.tmp / "epochs.py").write_text(
        "import time\n"
        "def train(config, run):\n"
        "    for epoch in range(config['train']['epochs']):\n"
        "        time.sleep(0.005)\n"
        "        try:\n"
        "            run.log({'loss': 1.0 / (epoch + 1)}, step=epoch)\n"
        "        except Exception:\n"
        "            raise AssertionError('the trial caught the end of its smoke run')\n"
        "    return {'loss': 0.0}\n")
    (cli.tmp / "config.yaml").write_text("train:\n  epochs: 300\n")
    cp = cli("run", "epochs.py:train", "--config", "config.yaml", "--smoke", "--name", "long", "-q")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    (t,) = cli.status("long")["trials"]
    assert t["state"] == "completed", t
    assert t["metrics"]["loss"] >= 0.25, t   # its last report (epoch 4 at most), not epoch 300's return




NAN_LOSS = """\
import math

def batches():
    for i in range(8):
        yield {"index": i, "x": [1.0, float("nan") if i == 3 else 2.0]}

def train(config, run):
    replay = run.captured("batch")
    for batch in run.track([replay] if replay is not None else batches()):
        run.capture("batch", batch)
        run.log({"loss": sum(batch["x"])}, step=batch["index"])   # NaN at batch 3; no exception
        if run.should_stop:
            break
    return {"loss": 0.0}
"""


def test_a_nan_loss_stopped_by_a_monitor_keeps_its_input_and_repro_replays_it(cli):
    """No exception: the `nan` monitor stops the trial. What run.capture held when the NaN was logged
    (batch 3, not a later one) is kept, and repro replays it and reports the NaN again (exit 1)."""
    (cli.tmp / "nan_loss.py").write_text(NAN_LOSS)
    f = cli.spec("nl", "function: nan_loss.py:train\nmethod: grid\nmetric: {name: loss, goal: minimize}\n"
                       "monitors: [nan]\nparameters:\n  a: {value: 1}\n")
    cli("sweep", str(f), "--name", "nl", "-q")
    (t,) = cli.status("nl")["trials"]
    assert t["state"] == "stopped_by_rule" and "NaN" in t["reason"], t
    cp = cli("repro", "nl/0")
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "captured: batch" in cp.stdout and "logged loss = nan at step 3" in cp.stdout
    assert "step 3: loss = nan" in cp.stdout and "step 4" not in cp.stdout    # the batch of the NaN
    assert "the failure reproduced: loss = nan at step 3" in cp.stdout


WANDB_FUNCTION = """\
import wandb

def main():
    wandb.init(config={"lr": 0.1, "hidden": 8})     # the defaults; the sweep's parameters override them
    for step in range(3):
        if step == 2 and wandb.config.hidden == 64:
            raise ValueError(f"hidden {wandb.config.hidden} lr {wandb.config.lr}")
        wandb.log({"loss": wandb.config.lr * step})
    wandb.finish()
"""


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="pip install 'sweeplab[wandb]'")
def test_repro_of_a_wandb_function_trial_gives_wandb_config_the_trials_parameters(cli):
    """A W&B program written as a function reads its parameters from wandb.config: the replay must see the
    trial's (hidden=64), not wandb.init's defaults, or the failure does not come back."""
    (cli.tmp / "wbfn.py").write_text(WANDB_FUNCTION)
    f = cli.spec("wbf", "function: wbfn.py:main\nmethod: grid\nmetric: {name: loss, goal: minimize}\n"
                        "trial: {retries: 0}\nparameters:\n  lr: {value: 0.5}\n  hidden: {values: [64]}\n")
    cli("sweep", str(f), "--name", "wbf", "-q", timeout=180)
    (t,) = cli.status("wbf")["trials"]
    assert t["state"] == "failed" and t["reason"] == "ValueError: hidden 64 lr 0.5", t
    cp = cli("repro", "wbf/0", timeout=180)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "step 1: loss = 0.5" in cp.stdout                 # wandb.log reached the replay
    assert "the failure reproduced" in cp.stdout and "ValueError: hidden 64 lr 0.5" in cp.stdout


SMALL_DATA_BUG = """\
import os

def train(config, run):
    seen = 0
    for _ in run.track(range(1000)):
        seen += 1
    print("gpus hidden:", os.environ.get("CUDA_VISIBLE_DEVICES") == "")
    if seen < 10:                      # a bug that only a tiny data set shows
        raise RuntimeError(f"only {seen} batches")
    return {"loss": 0.0}
"""


def test_repro_of_a_smoke_trial_replays_it_in_smoke_mode(cli):
    """The smoke trial failed with run.smoke set (3 batches per loop, no GPU): the replay must run the same
    way, not the full-size training."""
    (cli.tmp / "small.py").write_text(SMALL_DATA_BUG)
    cp = cli("run", "small.py:train", "--smoke", "--name", "small", "-q")
    assert cp.returncode == 1 and "only 3 batches" in cp.stderr, cp.stdout + cp.stderr
    rp = cli("repro", "small/0")
    assert rp.returncode == 1, rp.stdout + rp.stderr
    assert "RuntimeError: only 3 batches" in rp.stdout and "gpus hidden: True" in rp.stdout

FAST_EPOCHS = """\
def train(config, run):
    epoch = -1
    for epoch in range(50):             # epochs far faster than a round trip to the driver
        for _ in run.track(range(10)):
            pass
        run.log({"loss": 1.0 / (epoch + 1)}, step=epoch)
        if run.should_stop:
            break
    return {"loss": 0.0, "epochs_run": epoch + 1.0}
"""


def test_smoke_stops_a_trial_at_its_second_report_however_fast_its_epochs(cli):
    (cli.tmp / "fast.py").write_text(FAST_EPOCHS)
    cp = cli("run", "fast.py:train", "--smoke", "--name", "fast", "-q")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    (t,) = cli.status("fast")["trials"]
    assert t["state"] == "completed" and t["metrics"]["epochs_run"] == 2.0


def test_a_command_trial_knows_it_runs_in_smoke_mode(cli):
    """A program has no `run.smoke`: SWEEPLAB_SMOKE=1 in its environment lets it keep everything tiny. Its
    trials hold no GPU (the spec asks for one): the sweep spends no GPU-hours (it booked `resources.gpus`
    as if the trials held them, as a real sweep's do)."""
    (cli.tmp / "prog.py").write_text(
        "import json, os\n"
        "print('@sweeplab ' + json.dumps({'loss': 1.0, 'smoke': float(os.environ.get('SWEEPLAB_SMOKE') == '1'),"
        " 'gpus_hidden': float(os.environ.get('CUDA_VISIBLE_DEVICES') == '')}))\n")
    f = cli.spec("cs", "program: prog.py\nmethod: grid\nmetric: {name: loss, goal: minimize}\n"
                       "parameters:\n  a: {values: [1, 2, 3]}\nresources: {gpus: 1}\n")
    cp = cli("sweep", str(f), "--smoke", "--name", "cs", "-q")
    assert cp.returncode == 0 and "smoke check passed" in cp.stdout, cp.stdout + cp.stderr
    trials = cli.status("cs")["trials"]
    assert len(trials) == 2
    assert all(t["metrics"]["smoke"] == 1.0 and t["metrics"]["gpus_hidden"] == 1.0 for t in trials), trials
    spend = cli.status("cs")["sweep"]["spend"]
    assert spend["cpu_seconds"] > 0 and spend["gpu_seconds"] == 0, spend

# -------------------------------------------------------------------------------------------- profiling
def test_profile_of_an_input_bound_trial(cli):
    # loader sleeps 20 ms per batch of 8, the body 10 ms: 2/3 of each step waits for data; 80 steps > 2 s
    f = cli.spec("p", f"function: {FIXTURES / 'profiled.py'}:train\nmethod: grid\n"
                      "metric: {name: loss, goal: minimize}\n"
                      "parameters:\n  load_s: {value: 0.02}\n  step_s: {value: 0.01}\n  steps: {value: 80}\n")
    cli("sweep", str(f), "--name", "prof", "-q", check=True)
    prof = json.loads(cli("profile", "prof/0", "--json", check=True).stdout)
    assert prof["steps"] == 80
    true = cli.status("prof")["trials"][0]["metrics"]["true_wait_fraction"]   # 2/3 unless the sleeps overslept
    assert prof["data_wait_fraction"] == pytest.approx(true, abs=0.1), true
    assert prof["samples_per_s"] == pytest.approx(8 * prof["steps_per_s"], rel=0.01)
    assert 0.02 <= prof["step_p50"] <= prof["step_p95"]
    assert prof["data_wait_p50"] > prof["compute_p50"] > 0
    assert prof["rss_peak"] > 5_000_000                      # the worker process, in bytes
    assert prof["hint"].startswith("input-bound:") and "DataLoader" in prof["hint"]

    text = flat(cli("profile", "prof/0", check=True).stdout)
    assert "data-wait fraction" in text and "samples/s" in text and "hint: input-bound:" in text

    t = trial_row(cli, "prof", 0)
    with db(cli) as conn:
        samples = conn.execute("SELECT count(*), max(rss), max(cpu) FROM system_samples WHERE trial_id=?",
                               (t["id"],)).fetchone()
    assert samples[0] >= 1 and samples[1] > 0 and samples[2] is not None


def test_profile_of_a_trial_without_track_says_how_to_get_one(cli):
    f = cli.spec("s", f"function: {PROJECT / 'seeded.py'}:train\nmethod: grid\nparameters:\n  x: {{value: 1}}\n")
    cli("sweep", str(f), "--name", "plain", "-q", check=True)
    cp = cli("profile", "plain/0")
    # a trial of a few ms gets no figures (profiling.MIN_LOOK: they would measure the worker), one of 20 ms or
    # more (a loaded machine can make it so) CPU and memory figures (tests/test_profiling.py); either way the
    # output says the step figures need run.track
    assert "run.track" in cp.stdout, cp.stdout
    assert (cp.returncode, "20 ms" in cp.stdout) == (1, True) or (cp.returncode, "CPU %" in cp.stdout) == (0, True), \
        cp.stdout
    assert cli("profile", "plain/5").returncode == 2


# --------------------------------------------------------------------------------- failure capture + repro
NAN_SPEC = """\
name: nan
function: {fn}
method: grid
seed: 7
metric: {{name: loss, goal: minimize}}
trial: {{retries: 0}}
parameters:
  data: {{values: [good.npy, bad.npy]}}
"""


def failing_sweep(cli) -> int:
    """Two trials: data good.npy completes; bad.npy holds a NaN in batch 3 and fails. Returns the failed one."""
    data = np.random.default_rng(0).normal(size=(6, 4, 3))
    np.save(cli.tmp / "good.npy", data)
    data[3, 1, 2] = np.nan
    np.save(cli.tmp / "bad.npy", data)
    shutil.copy(PROJECT / "nan_batch.py", cli.tmp / "nan_batch.py")   # a copy the tests may edit
    f = cli.spec("nan", NAN_SPEC.format(fn="nan_batch.py:train"))
    cli("sweep", str(f), "--workers", "2", "-q", check=True)
    states = {t["params"]["data"]: t for t in cli.status("nan")["trials"]}
    assert states["good.npy"]["state"] == "completed"
    assert states["bad.npy"]["state"] == "failed"
    return states["bad.npy"]["number"]


def git_repo(path: Path) -> str | None:
    if shutil.which("git") is None:
        return None
    (path / "README").write_text("a project\n")
    for args in (["init", "-q"], ["add", "README"],
                 ["-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_failed_trial_keeps_what_repro_needs_and_repro_replays_it(cli):
    commit = git_repo(cli.tmp)
    n = failing_sweep(cli)
    t = trial_row(cli, "nan", n)
    with db(cli) as conn:
        attempt = conn.execute("SELECT * FROM attempts WHERE trial_id=?", (t["id"],)).fetchone()
        (failure,) = conn.execute("SELECT data FROM events WHERE trial_id=? AND kind='failure'",
                                  (t["id"],)).fetchall()
        captures = conn.execute("SELECT path FROM artifacts WHERE trial_id=? AND name='capture'",
                                (t["id"],)).fetchall()
        checkpoints = conn.execute("SELECT path, step FROM checkpoints WHERE trial_id=? ORDER BY id",
                                   (t["id"],)).fetchall()
    # the traceback, the resolved config, the seed
    assert attempt["state"] == "failed" and attempt["error_type"] == "FloatingPointError"
    assert "Traceback" in attempt["traceback"] and "NaN in batch 3 (row 1)" in attempt["traceback"]
    assert json.loads(t["config"]) == {"data": "bad.npy"}
    assert t["seed"] == trial_seed(7, n)
    # environment facts, the capture and the last checkpoint
    data = json.loads(failure["data"])
    env = data["environment"]
    assert env["python"] == ".".join(map(str, sys.version_info[:3])) and env["host"]
    assert env["numpy"] == np.__version__
    if commit is not None:
        assert env["git_commit"] == commit and env["git_dirty"] is True   # the .npy files are untracked
    assert len(captures) == 1 and data["capture"] == captures[0]["path"]
    assert (cli.store / captures[0]["path"]).is_file()
    assert [c["step"] for c in checkpoints] == [1, 2]     # trial.keep_checkpoints (2) kept; listed as kept
    assert data["checkpoint"] == checkpoints[-1]["path"]

    # the data is gone (a remote machine's disk): the captured batch alone reproduces the failure
    (cli.tmp / "bad.npy").unlink()
    cp = cli("repro", f"nan/{n}")
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "the failure reproduced" in cp.stdout
    assert attempt["traceback"].strip().splitlines()[-1] == "FloatingPointError: NaN in batch 3 (row 1)"
    assert "FloatingPointError: NaN in batch 3 (row 1)" in cp.stdout
    assert "replayed_batch = 3" in cp.stdout          # run.captured("batch") returned the failing batch
    assert "restored_step = 2" in cp.stdout           # run.restore() returned the last checkpoint
    assert f"seed {t['seed']}" in cp.stdout
    assert "warning" not in cp.stdout
    recorded = data["environment"]["source"]
    assert recorded["path"] == str((cli.tmp / "nan_batch.py").resolve())
    assert recorded["sha256"] == hashlib.sha256((cli.tmp / "nan_batch.py").read_bytes()).hexdigest()

    # the source changed since: the replay says it runs today's code
    with open(cli.tmp / "nan_batch.py", "a") as fh:
        fh.write("# edited after the failure\n")
    cp = cli("repro", f"nan/{n}")
    assert cp.returncode == 1 and "the failure reproduced" in cp.stdout
    assert f"warning: {recorded['path']} changed since the trial failed" in flat(cp.stdout)

    # --debug: pdb opens at the raise, in the frame holding the batch
    dbg = subprocess.run([sys.executable, "-m", "sweeplab", "repro", f"nan/{n}", "--debug"], cwd=cli.tmp,
                         env=cli.env(), input="p batch['index']\nq\n", capture_output=True, text=True,
                         timeout=60, check=False)
    assert dbg.returncode == 1, dbg.stdout + dbg.stderr
    assert "(Pdb)" in dbg.stdout and "-> raise FloatingPointError" in dbg.stdout
    assert "(Pdb) 3" in dbg.stdout


def store_snapshot(cli) -> tuple[list[str], dict[str, str]]:
    with db(cli) as conn:
        rows = list(conn.iterdump())
    files = {str(p.relative_to(cli.store)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(cli.store.rglob("*")) if p.is_file() and not p.name.startswith("store.db")}
    return rows, files


def test_repro_refuses_what_it_cannot_replay_and_changes_nothing(cli):
    n = failing_sweep(cli)
    ok = 1 - n
    shutil.rmtree(cli.store / "checkpoints" / "nan" / str(n))
    before = store_snapshot(cli)
    cases = [
        ("nan/9", ["has no trial 9", "0..1"]),
        ("nope/0", ["no sweep named 'nope'"]),
        (f"nan/{ok}", [f"nan/{ok} did not fail", "completed"]),
        (f"nan/{n}", ["wrote checkpoints", "is gone"]),
        ("nan", ["expected SWEEP/TRIAL"]),
    ]
    for ref, names in cases:
        cp = cli("repro", ref)
        assert cp.returncode == 2, (ref, cp.stdout, cp.stderr)
        for name in names:
            assert name in flat(cp.stderr), (ref, cp.stderr)
        assert "Traceback" not in cp.stderr and "replaying" not in cp.stdout
    assert store_snapshot(cli) == before


def test_refused_repro_leaves_no_temporary_directory(cli):
    n = failing_sweep(cli)
    shutil.rmtree(cli.store / "checkpoints" / "nan" / str(n))
    tmp = cli.tmp / "tmpdir"
    tmp.mkdir()
    env = {**cli.env(), "TMPDIR": str(tmp)}
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "repro", f"nan/{n}"], cwd=cli.tmp, env=env,
                        capture_output=True, text=True, timeout=60, check=False)
    assert cp.returncode == 2
    assert list(tmp.iterdir()) == []


# ------------------------------------------------------------------------------------------------ seeds
def test_trial_seeds_are_recorded_repeatable_and_seed_numpy(cli):
    f = cli.spec("s", f"function: {PROJECT / 'seeded.py'}:train\nmethod: grid\nseed: 11\n"
                      "metric: {name: loss, goal: minimize}\nparameters:\n  x: {values: [1, 2]}\n")
    runs = []
    for name in ("a", "b"):
        cli("sweep", str(f), "--name", name, "--workers", "1", "-q", check=True)
        runs.append({t["number"]: (trial_row(cli, name, t["number"])["seed"], t["metrics"])
                     for t in cli.status(name)["trials"]})
    a, b = runs
    assert sorted(a) == sorted(b) == [0, 1]
    for number in (0, 1):
        seed, metrics = a[number]
        assert seed == trial_seed(11, number)               # recorded in trials.seed
        assert metrics["seed"] == seed                       # and handed to the trial as run.seed
        assert b[number][0] == seed                          # the same seed in the second sweep
        assert b[number][1]["np_rand"] == metrics["np_rand"]  # numpy's global RNG was seeded with it
        assert b[number][1]["py_rand"] == metrics["py_rand"]  # and Python's
    assert a[0][0] != a[1][0] and a[0][1]["np_rand"] != a[1][1]["np_rand"]   # each trial its own seed


# ------------------------------------------------------------------------------------------ torch profiler
@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_torch_profiler_writes_a_chrome_trace_artifact(cli):
    f = cli.spec("t", f"function: {PROJECT / 'torch_loop.py'}:train\nmethod: grid\nseed: 5\n"
                      "metric: {name: loss, goal: minimize}\ntrial: {torch_profiler: {start: 1, steps: 2}}\n"
                      "parameters:\n  x: {value: 1}\n")
    cli("sweep", str(f), "--name", "tp", "-q", check=True, timeout=180)
    t = trial_row(cli, "tp", 0)
    with db(cli) as conn:
        (row,) = conn.execute("SELECT path FROM artifacts WHERE trial_id=? AND name='torch_trace'",
                              (t["id"],)).fetchall()
    path = Path(row["path"]) if Path(row["path"]).is_absolute() else cli.store / row["path"]
    assert path.is_file() and cli.store.resolve() in path.resolve().parents
    trace = json.loads(path.read_text())
    assert isinstance(trace["traceEvents"], list) and trace["traceEvents"]
    assert json.loads(t["metrics"])["torch_seed"] == t["seed"]   # torch was seeded with run.seed


# ------------------------------------------------------------------------------- a failing input pipeline
@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_a_dataloader_worker_failure_names_the_error_and_repro_does_not_replay_the_batch_before(cli):
    """The DataLoader worker raises on record 37 (the 5th batch). The reason names that error, not torch's
    multi-line wrapper cut at 500 characters; the batch registered with run.capture is the 4th, which did
    not fail: it is kept but flagged, and repro runs the loader again instead of replaying it (exit 1)."""
    f = cli.spec("ldr", f"function: {PROJECT / 'loader_fails.py'}:train\nmethod: grid\nseed: 3\n"
                        "trial: {retries: 0}\nparameters:\n  workers: {value: 1}\n")
    cli("sweep", str(f), "--name", "ldr", "-q", timeout=180)
    (trial,) = cli.status("ldr")["trials"]
    assert trial["state"] == "failed"
    assert trial["reason"] == ("ValueError: corrupt record 37 (in DataLoader worker process 0; "
                               "while loading batch 5 of run.track loop 1)"), trial["reason"]
    t = trial_row(cli, "ldr", 0)
    with db(cli) as conn:
        (failure,) = conn.execute("SELECT data FROM events WHERE trial_id=? AND kind='failure'",
                                  (t["id"],)).fetchall()
    data = json.loads(failure["data"])
    manifest = json.loads((cli.store / data["capture"]).with_suffix(".json").read_text())
    assert manifest["names"] == ["batch"] and manifest["stale"] == ["batch"]
    assert manifest["failed_loading"] == data["loading"] == {"loop": 1, "batch": 5}

    cp = cli("repro", "ldr/0", timeout=180)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "replaying the captured batch" not in cp.stdout
    assert "failed while loading batch 5 of run.track loop 1" in flat(cp.stdout) and "not replayed" in flat(cp.stdout)
    assert "the failure reproduced" in cp.stdout and "ValueError: corrupt record 37" in cp.stdout


def test_smoke_says_why_a_metric_a_trial_only_returns_is_missing_when_it_ended_the_trial(cli):
    (cli.tmp / "ret.py").write_text(
        "def train(config, run):\n"
        "    for epoch in range(300):\n"
        "        run.log({'train_loss': 1.0 / (epoch + 1)}, step=epoch)\n"
        "    return {'loss': 0.1}\n")
    f = cli.spec("s", "function: ret.py:train\nmethod: grid\nmetric: {name: loss, goal: minimize}\n"
                 "parameters:\n  x: {value: 1}\n")
    cp = cli("sweep", str(f), "--smoke", "--name", "ret", "-q")
    assert cp.returncode == 1, cp.stdout + cp.stderr
    (t,) = cli.status("ret")["trials"]
    assert "smoke mode ended the trial at step 3" in t["reason"] and "run.should_stop" in t["reason"], t
