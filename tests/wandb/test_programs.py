"""Real W&B programs (the real `wandb` client, real processes) run unchanged under `sweeplab sweep`, offline.

Each project under projects/ is a sweep.yaml + program in the style of public W&B sweep projects; the
network variables point nowhere, so anything that tried to reach W&B would fail."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("wandb", reason="pip install 'sweeplab[wandb]'")
pytestmark = pytest.mark.slow

PROJECTS = Path(__file__).parent / "projects"
SRC = Path(__file__).resolve().parents[2] / "src"


def _offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    nowhere = "http://127.0.0.1:9"
    env.update({"WANDB_BASE_URL": nowhere, "HTTP_PROXY": nowhere, "HTTPS_PROXY": nowhere,
                "http_proxy": nowhere, "https_proxy": nowhere, "NO_PROXY": "", "no_proxy": "",
                "WANDB_API_KEY": "", "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)})
    return env


def _sweep(project: str, tmp_path: Path, *extra: str, how: str | None = None, replace: tuple[str, str] | None = None
           ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the project's sweep.yaml; `how`: "command" adds `program: train.py`, "function" runs
    `train.py:train` as a function trial; `replace`: (old, new) text of the sweep.yaml."""
    work = tmp_path / project
    shutil.copytree(PROJECTS / project, work)
    if replace:
        (work / "sweep.yaml").write_text((work / "sweep.yaml").read_text().replace(*replace))
    if how == "command":
        (work / "sweep.yaml").write_text((work / "sweep.yaml").read_text() + "program: train.py\n")
    elif how == "function":
        extra = (*extra, "--function", "train.py:train")
    store = tmp_path / "store"
    workers = () if "--workers" in extra else ("--workers", "2")   # an option given twice is refused
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(store), "-q",
                           *workers, *extra], cwd=work, env=_offline_env(), capture_output=True,
                          text=True, timeout=600)
    return proc, store


def _trials(store: Path) -> list[dict]:
    con = sqlite3.connect(store / "store.db")
    con.row_factory = sqlite3.Row
    rows = [dict(r) for r in con.execute("SELECT * FROM trials ORDER BY number")]
    for r in rows:
        r["metrics"] = json.loads(r["metrics"] or "{}")
        r["history"] = [tuple(x) for x in con.execute(
            "SELECT step, key, value FROM metrics WHERE trial_id=? ORDER BY step, key", (r["id"],))]
    return rows


def test_a_wandb_program_gets_its_parameters_and_its_logs_become_the_trials_metrics(tmp_path: Path) -> None:
    proc, store = _sweep("nested_vae", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed", "completed"]
    for t, lr in zip(trials, (0.1, 0.3)):
        # define_metric(summary="max") decides the objective, as W&B's summary does
        assert t["value"] == pytest.approx(2 * lr)
        assert t["metrics"]["best_epoch"] == 1 and t["metrics"]["val_acc.max"] == pytest.approx(2 * lr)
        # commit=False rows join the next commit; nested dicts are dotted; step=10 moves on
        steps = {(s, n) for s, n, _ in t["history"]}
        assert {(0, "train_loss"), (0, "val_acc"), (0, "nested.x"), (3, "val_acc"), (10, "late")} <= steps
    logs = list((store / "logs").rglob("0-1.log"))
    text = logs[0].read_text()
    env = json.loads(next(ln for ln in text.splitlines() if ln.startswith("# env: "))[len("# env: "):])
    assert "PATH, as W&B's agent runs it" in env["SWEEPLAB_INTERPRETER"] and env["WANDB_MODE"] == "offline"
    # wandb's own offline runs stay where W&B puts them (./wandb), for `wandb sync`
    assert len(list((tmp_path / "nested_vae" / "wandb").glob("offline-run-*"))) == 2


def test_a_wandb_agent_function_sweep_runs_with_the_function_option(tmp_path: Path) -> None:
    proc, _ = _sweep("agent_function", tmp_path)
    assert proc.returncode == 2 and "--function train.py:train" in " ".join(proc.stderr.split())
    proc, store = _sweep("agent_function", tmp_path / "again", "--function", "train.py:train")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed", "completed"]
    assert sorted(t["value"] for t in trials) == pytest.approx([0.25 / 3, 0.5 / 3])
    assert all(len(t["history"]) == 3 for t in trials)
    # the worker ended wandb's service process after each trial, and its exit then printed wandb's
    # "Exception ignored in atexit callback ... ConnectionResetError: Connection lost" once per trial
    assert "Exception ignored" not in proc.stderr and "Connection lost" not in proc.stderr, proc.stderr


def test_args_reach_an_argparse_program_as_wandbs_agent_passes_them(tmp_path: Path) -> None:
    proc, store = _sweep("argparse_nested", tmp_path)
    trials = _trials(store)
    by_bn = {json.loads(t["params"])["use_bn"]: t for t in trials}
    assert by_bn[True]["state"] == "completed" and by_bn[True]["value"] == 2.0, proc.stderr
    # wandb.finish(exit_code=1) fails the run under W&B; so it fails the trial here
    assert by_bn[False]["state"] == "failed"


def test_a_script_that_creates_its_own_sweep_and_agent_runs_for_its_train_function(tmp_path: Path) -> None:
    proc, store = _sweep("script_sweep_agent", tmp_path, "--function", "tune.py:train_model", "--trials", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed"] * 2
    assert all(t["value"] == t["metrics"]["mse"] and t["metrics"]["mae"] > 0 for t in trials)


def test_a_script_that_hands_wandb_agent_a_closure_runs_it_once_per_trial(tmp_path: Path) -> None:
    # `wandb.agent(sweep_id, function=lambda: main(args))` in the script's __main__: run as the sweep's program,
    # the agent's function is the trial's run (it returned at once: every trial failed, "never reported")
    proc, store = _sweep("agent_closure", tmp_path)
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed", "failed"], proc.stdout + proc.stderr
    assert trials[0]["value"] == pytest.approx(2.01)   # --offset 2 reached main
    assert "ValueError: lr 0.5 diverged" in trials[1]["reason"]   # the function's failure fails its trial
    proc, store = _sweep("agent_closure", tmp_path / "function", "--function", "train.py:sweep_main")
    trials = _trials(store)   # from a function trial's function: the same, once per trial
    assert [t["state"] for t in trials] == ["completed", "failed"], proc.stdout + proc.stderr
    assert trials[0]["value"] == pytest.approx(3.01)
    assert "ValueError: lr 0.5 diverged" in trials[1]["reason"]


def test_fold_runs_that_clear_the_wandb_environment_do_not_report_to_the_trial(tmp_path: Path) -> None:
    proc, store = _sweep("cross_validation", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed"] * 2
    for t in trials:
        scale = json.loads(t["params"])["scale"]
        assert t["value"] == pytest.approx(0.15 * scale)   # the mean of the 2 folds, logged by the sweep run
        assert [n for _, n, _ in t["history"]] == ["val_accuracy"]   # the fold runs' values are not here


def test_boolean_flags_reach_the_program_as_wandbs_agent_passes_them(tmp_path: Path) -> None:
    work = tmp_path / "bool_flags"
    shutil.copytree(PROJECTS / "bool_flags", work)
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep-bool.yaml", "--store",
                           str(tmp_path / "store"), "-q"], cwd=work, env=_offline_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    values = {(json.loads(t["params"])["flag1"], t["value"]) for t in _trials(tmp_path / "store")}
    assert values == {(False, 0.0), (True, 2.0)}   # --flag1=True parsed by the program, config agrees


@pytest.mark.skipif(not os.environ.get("SWEEPLAB_TEST_WANDB_PYTHON"),
                    reason="opt-in: SWEEPLAB_TEST_WANDB_PYTHON=<a python with another wandb, e.g. 0.16>")
def test_an_older_wandb_client_in_the_users_environment(tmp_path: Path) -> None:
    """The program runs under the user's `python` (from PATH) with its own wandb; the hook needs nothing
    of sweeplab there. Run with e.g. a venv holding wandb==0.16.6 and pyyaml (no sweeplab)."""
    python = Path(os.environ["SWEEPLAB_TEST_WANDB_PYTHON"])
    work = tmp_path / "nested_vae"
    shutil.copytree(PROJECTS / "nested_vae", work)
    env = _offline_env()
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(tmp_path / "s"),
                           "-q"], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(tmp_path / "s")
    assert [t["value"] for t in trials] == pytest.approx([0.2, 0.6])
    log = next((tmp_path / "s" / "logs").rglob("0-1.log")).read_text()
    env = json.loads(next(ln for ln in log.splitlines() if ln.startswith("# env: "))[len("# env: "):])
    assert env["SWEEPLAB_INTERPRETER"].startswith(f"{python.parent}{os.sep}python ")   # the user's python


def test_what_a_wandb_program_logs_drives_hyperband_as_in_wandb(tmp_path: Path) -> None:
    work = tmp_path / "hyperband"
    shutil.copytree(PROJECTS / "hyperband", work)
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(tmp_path / "s"),
                           "-q", "--workers", "1"], cwd=work, env=_offline_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(tmp_path / "s")
    assert [t["state"] for t in trials] == ["completed", "pruned"]
    assert "band 1" in trials[1]["reason"]


@pytest.mark.parametrize("how", ["function", "command"])
def test_wandb_files_are_under_wandb_in_the_working_directory_as_under_wandbs_agent(tmp_path: Path,
                                                                                      how: str) -> None:
    # W&B's own sweep check copies wandb/debug.log after each run: W&B keeps a run's files under ./wandb
    work = tmp_path / "run_files"
    shutil.copytree(PROJECTS / "run_files", work)
    extra = ["--function", "sweep_check.py:train"] if how == "function" else []
    spec = work / "sweep.yaml"
    if how == "command":
        spec.write_text(spec.read_text() + "program: sweep_check.py\n")
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(tmp_path / "store"),
                           "-q", *extra], cwd=work, env=_offline_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(tmp_path / "store")
    assert sorted(t["value"] for t in trials) == pytest.approx([2.0, 42.0])
    copies = [p for p in (work / "wandb").glob("debug-*.log") if p.name != "debug-internal.log"]
    assert len(copies) == 2   # the program's copy of wandb/debug.log after each run
    assert len(list((work / "wandb").glob("offline-run-*"))) == 2   # for `wandb sync wandb/offline-run-*`


def test_a_program_reading_stdin_gets_eof_as_under_wandbs_agent(tmp_path: Path) -> None:
    work = tmp_path / "stdin_readline"
    shutil.copytree(PROJECTS / "stdin_readline", work)
    env = _offline_env()
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))   # `python` here
    # sweeplab's own stdin stays open (a pipe nobody writes to): the trial must not inherit it
    with subprocess.Popen([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store",
                           str(tmp_path / "store"), "-q"], cwd=work, env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    # W&B's `name:` is free text: the commands sweeplab suggests must paste into a shell as they are
    assert "sweeplab status 'Train with import readline' --store" in " ".join(out.split())
    [trial] = _trials(tmp_path / "store")
    assert trial["metrics"]["got_eof"] == 1.0 and trial["metrics"]["test_param"] == 1.0


def test_a_program_that_passes_the_sweep_yaml_to_wandb_init_gets_the_sweeps_values(tmp_path: Path) -> None:
    work = tmp_path / "sweep_yaml_defaults"
    shutil.copytree(PROJECTS / "sweep_yaml_defaults", work)
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "config.yaml", "--store", str(tmp_path / "store"),
                           "-q"], cwd=work, env=_offline_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    values = {json.loads(t["params"])["batch_size"]: t["value"] for t in _trials(tmp_path / "store")}
    assert values == pytest.approx({16: 0.2 + 0.016, 64: 0.2 + 0.064})   # last epoch 2 of range(1, 3)


def test_a_wandb_function_run_stopped_by_hyperband_ends_at_its_band_as_under_wandbs_agent(tmp_path: Path) -> None:
    work = tmp_path / "hyperband_function"
    shutil.copytree(PROJECTS / "hyperband_function", work)
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(tmp_path / "s"),
                           "-q", "--workers", "1", "--function", "sweep_check.py:train"], cwd=work,
                          env=_offline_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    best, loser = _trials(tmp_path / "s")
    assert (best["state"], loser["state"]) == ("completed", "pruned")
    assert max(s for s, _, _ in best["history"]) == 29
    assert max(s for s, _, _ in loser["history"]) <= 3, "the stopped run went on training"


def test_a_function_trials_wandb_environment_is_its_own_and_leaves_with_it(tmp_path: Path) -> None:
    # one worker runs the four trials in turn: each wandb.init reads its own trial's parameters, a process
    # the trial forks inherits its W&B environment (as under W&B's agent), and nothing of a trial's W&B
    # environment is left for the next
    work = tmp_path / "function_env"
    shutil.copytree(PROJECTS / "function_env", work)
    out = tmp_path / "seen.jsonl"
    env = dict(_offline_env(), FUNCTION_ENV_OUT=str(out))
    store = tmp_path / "store"
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(store), "-q",
                           "--workers", "1", "--function", "train.py:train"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [t["state"] for t in _trials(store)] == ["completed"] * 4
    seen = [json.loads(line) for line in out.read_text().splitlines()]
    assert [s["lr"] for s in seen] == [0.1, 0.2, 0.3, 0.4]
    params = sorted((store / "logs").rglob("*.wandb-params.yaml"))
    # the program imports wandb: each trial's parameters file is made before its function runs, as W&B's
    # agent makes it (a trial of a process that never imports wandb gets none: test_run_id)
    assert [p.name for p in params] == [f"{n}-1.wandb-params.yaml" for n in range(4)]
    for number, s in enumerate(seen):
        own = str(params[0].parent / f"{number}-1.wandb-params.yaml")
        assert s["before"] == own and s["forked"] == own    # never another trial's
        if s["lr"] == 0.3:
            assert "config_lr" not in s
        else:
            assert s["after"] == own and s["config_lr"] == s["lr"] and s["mode"] == "offline"


@pytest.mark.parametrize("how", ["command", "function"])
def test_a_trials_run_has_a_sweep_id_and_a_name_as_under_wandbs_agent(tmp_path: Path, how: str) -> None:
    # programs take wandb.config only when `wandb.run.sweep_id` says they run in a sweep, and name paths
    # after `wandb.run.name`: with None, every trial ran the program's defaults, or failed in os.path.join
    work = tmp_path / "run_identity"
    proc, store = _sweep("run_identity", tmp_path, how=how)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [t["value"] for t in _trials(store)] == pytest.approx([0.1, 0.2])   # the sweep's values were taken
    runs = sorted((work / "checkpoints" / "idsweep").iterdir())
    assert [r.name for r in runs] == ["idsweep-0", "idsweep-1"]
    for r in runs:
        seen = json.loads((r / "seen.json").read_text())
        # the run's offline files hold no sweep id: `wandb sync` of a sweep W&B's server does not know fails
        assert seen["files_sweep_id"] is None
        assert seen["env"] == "idsweep"   # before wandb.init too, as W&B's agent sets it
        # a fixed wandb.init(id=...) is ignored in a sweep's run, as W&B does: one run per trial, of the agent's id
        assert seen["id"] == seen["agent_id"] != "fixed-run-id"
        assert seen["url"] == Path(seen["dir"]).resolve().parent.as_uri()   # the offline run's folder


def test_disabled_runs_of_other_ranks_do_not_report_to_the_trial(tmp_path: Path) -> None:
    # DDP scripts give ranks other than 0 a disabled run (`mode="disabled" if rank > 0`, or WANDB_MODE=disabled
    # set by the script); under W&B's agent only rank 0's run reaches the sweep. The other rank's summary (its
    # last, larger, val_loss) used to replace rank 0's define_metric(summary="min") as the trial's value; and a
    # rank whose run was not disabled at all ("none") wrote its rows and summary into the trial as well
    proc, store = _sweep("disabled_ranks", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed"] * 3
    assert {json.loads(t["params"])["disable"] for t in trials} == {"mode", "env", "none"}   # mode=, WANDB_MODE
    for t in trials:
        lr = json.loads(t["params"])["lr"]
        assert t["value"] == pytest.approx(lr), json.loads(t["params"])   # rank 0's best epoch
        assert "rank" in t["metrics"] and t["metrics"]["rank"] == 0
        assert {v for _, n, v in t["history"] if n == "rank"} == {0.0}   # rank 0's rows only


@pytest.mark.parametrize("how", ["command", "function"])
def test_a_run_finished_with_a_nonzero_exit_code_fails_its_trial(tmp_path: Path, how: str) -> None:
    # `wandb.finish(exit_code=1)` after a caught failure: W&B marks the run failed. A function trial completed
    # with the loss it had logged (or failed saying the metric was never reported)
    proc, store = _sweep("finish_exit_code", tmp_path, how=how)
    ok, oom = _trials(store)
    assert (ok["state"], ok["value"]) == ("completed", pytest.approx(0.32))
    assert oom["state"] == "failed" and "wandb.finish(exit_code=1)" in oom["reason"], proc.stdout + proc.stderr


@pytest.mark.parametrize(("start", "target"), [("fork", "ddp:main"), ("spawn", "ddp:main"), ("spawn", "ddp.py:main")])
def test_a_function_trials_rank_processes_report_their_wandb_run(tmp_path: Path, start: str, target: str) -> None:
    # DDP started by a W&B sweep's function (torch.multiprocessing.spawn): rank 0's run inherits the trial's
    # W&B environment, as under W&B's agent, but what it logged never reached the trial ("never reported");
    # and the spawned ranks could not import a file target (`No module named '_sweeplab_user_ddp'`)
    work = tmp_path / "ddp_function"
    shutil.copytree(PROJECTS / "ddp_function", work)
    store = tmp_path / "store"
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(store), "-q",
                           "--function", target], cwd=work, env=dict(_offline_env(), DDP_START=start),
                          capture_output=True, text=True, timeout=600)
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed"] * 2, proc.stdout + proc.stderr
    for t in trials:
        lr = json.loads(t["params"])["lr"]
        assert t["value"] == pytest.approx(lr)   # rank 0's define_metric(summary="min")
        assert [(s, v) for s, n, v in t["history"] if n == "loss"] == [(0, 3 * lr), (1, lr), (2, 2 * lr)]
        assert {v for _, n, v in t["history"] if n == "rank"} == {0.0}


def _hyperband_sweep(tmp_path: Path, project: str) -> tuple[dict, dict]:
    """Run a project whose sweep.yaml's hyperband stops its second trial; its (completed, pruned) trials."""
    work = tmp_path / project
    shutil.copytree(PROJECTS / project, work)
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(tmp_path / "s"),
                           "-q", "--workers", "1"], cwd=work, env=_offline_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    best, stopped = _trials(tmp_path / "s")
    assert (best["state"], stopped["state"]) == ("completed", "pruned")
    return best, stopped


def test_a_command_trial_stopped_by_hyperband_keeps_its_define_metric_summary(tmp_path: Path) -> None:
    # the stopped program is terminated before wandb.finish(): its value was its last loss, not its best
    best, stopped = _hyperband_sweep(tmp_path, "hyperband_summary")
    for t in (best, stopped):
        losses = [v for _, n, v in t["history"] if n == "loss"]
        assert t["value"] == pytest.approx(min(losses)) and t["metrics"]["loss.min"] == pytest.approx(min(losses))


def test_a_command_trial_stopped_by_hyperband_keeps_what_it_set_in_its_runs_summary(tmp_path: Path) -> None:
    # `run.summary["best_loss"] = best` each epoch: W&B's server has every change as it is made, so a run the
    # sweep stops keeps it; the hook read the summary only at wandb.finish(), which a stopped program never reaches
    best, stopped = _hyperband_sweep(tmp_path, "hyperband_summary_set")
    losses = [v for _, n, v in stopped["history"] if n == "loss"]
    assert len(losses) >= 2
    assert stopped["metrics"]["best_loss"] == pytest.approx(min(losses[:-1]))   # set before its last log
    assert stopped["metrics"]["best.epoch"] == 1
    assert best["metrics"]["best_loss"] == pytest.approx(0.5)


def test_a_sweeplab_function_keeps_its_own_wandb_logging_out_of_its_reports(tmp_path: Path) -> None:
    """`train(config, run)` reports through its Run and logs to W&B for itself (docs/integrations.md: your own
    W&B logging keeps working): its W&B rows were mirrored into the trial at W&B's `_step` beside its own
    reports (`val_loss` at epochs 0-3 and again at 3, 7, 11, 15, so hyperband counted two reports an epoch),
    and the next `wandb.log` after the sweep stopped it raised out of the function, past its own stop."""
    proc, store = _sweep("own_logging", tmp_path, "--workers", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    best, loser = _trials(store)
    assert (best["state"], loser["state"]) == ("completed", "pruned")
    assert best["history"] == [(e, "val_loss", pytest.approx(0.1 / (e + 1))) for e in range(4)]
    assert best["value"] == pytest.approx(0.025) and set(best["metrics"]) == {"val_loss"}
    assert loser["history"] == [(0, "val_loss", pytest.approx(0.4))]   # judged at its first epoch
    logs = list((store / "logs").rglob("1-1.log"))
    assert "stopped cleanly after epoch 0" in logs[0].read_text()
    # W&B's own offline runs hold every row, as without sweeplab
    assert len(list((tmp_path / "own_logging" / "wandb").glob("offline-run-*"))) == 2


def test_function_trials_end_wandbs_service_so_the_worker_goes_on_and_exits_quietly(tmp_path: Path) -> None:
    # the wandb-core service a function trial's wandb.init started was killed as a leftover of the trial: its
    # worker retired after every trial (a new worker, wandb imported again) and each worker's exit printed
    # wandb's "Exception ignored in atexit callback ... ConnectionResetError: Connection lost"
    proc, store = _sweep("service_teardown", tmp_path, "--function", "train.py:train", "--workers", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed", "completed"]
    assert trials[0]["metrics"]["pid"] == trials[1]["metrics"]["pid"]   # one worker ran both
    assert "Exception ignored" not in proc.stderr and "Connection lost" not in proc.stderr, proc.stderr


def test_a_run_started_without_the_hook_is_read_back_from_its_offline_files(tmp_path: Path) -> None:
    # `command: [bash, run.sh, ${args}]` whose script runs `PYTHONPATH=. python train.py "$@"`: the hook's folder
    # is gone from PYTHONPATH, so nothing the run logged reached the trial ("metric ... was never reported")
    proc, store = _sweep("wrapper_pythonpath", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed", "completed"]
    for t, lr in zip(trials, (0.5, 0.25)):
        assert t["value"] == pytest.approx(lr)   # the define_metric min, as wandb-core computed the summary
        assert t["metrics"]["val_loss.min"] == pytest.approx(lr)
        assert [(s, n) for s, n, _ in t["history"] if n == "val_loss"] == [(0, "val_loss"), (1, "val_loss"),
                                                                          (2, "val_loss")]
        assert (2, "metrics.acc", 2.0) in t["history"]
    con = sqlite3.connect(store / "store.db")   # and the sweep's events say why the reports came late
    warnings = [m for (m,) in con.execute("SELECT message FROM events WHERE kind = 'warning'")]
    assert len(warnings) == 2 and all("without sweeplab's W&B hook" in m for m in warnings)


@pytest.mark.parametrize(("project", "how"), [("tensorboard_sync", "command"), ("tensorboard_sync", "function"),
                                              ("tensorboard_exit", None)])
def test_metrics_synced_from_tensorboard_reach_the_trial_as_in_the_runs_summary(tmp_path: Path, project: str,
                                                                               how: str | None) -> None:
    # `wandb.init(sync_tensorboard=True)` (Stable-Baselines3's W&B integration): W&B reads the TensorBoard
    # writer's scalars into the run's history and summary, never through `wandb.log`; the trial got nothing
    # ("metric 'rollout/ep_rew_mean' was never reported (reported: nothing)") though W&B's summary had it
    pytest.importorskip("torch.utils.tensorboard", reason="needs torch and tensorboard")
    proc, store = _sweep(project, tmp_path, how=how)   # tensorboard_exit: the run ends with the process
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed"] * 2
    assert sorted(t["value"] for t in trials) == [3.0, 6.0]   # the last value written, as W&B's summary has it
    assert all(t["metrics"].get("train/loss", 0.25) == 0.25 for t in trials)


def test_a_run_without_the_hook_is_read_back_wherever_the_program_put_its_files(tmp_path: Path) -> None:
    # the read-back looked only in WANDB_DIR's and the working directory's wandb/: a run started with
    # wandb.init(dir=...), WANDB_DIR set by the program, or wandb.Settings(root_dir=...) was missed, and its
    # trial failed "metric ... was never reported"
    proc, store = _sweep("wrapper_run_dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed"] * 4, [t["reason"] for t in trials]
    for t, where in zip(trials, ("dir", "env", "settings", "elsewhere")):
        assert t["value"] == pytest.approx(2.0 + len(where))   # the summary's last value
        assert [s for s, n, _ in t["history"] if n == "val_loss"] == [0, 1, 2]


def test_define_metric_called_once_per_aggregate_keeps_them_all_as_wandb_does(tmp_path: Path) -> None:
    # wandb merges repeated define_metric calls for one metric (its summary holds min, max and mean, as for
    # summary="min,max,mean"); the hook kept only the last call's, so the trial's value was the mean
    proc, store = _sweep("define_metric_repeated", tmp_path, "--workers", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (t,) = _trials(store)
    m = t["metrics"]
    assert (m["eval/mean_reward.min"], m["eval/mean_reward.max"]) == pytest.approx((0.1, 0.4))
    assert m["eval/mean_reward.mean"] == pytest.approx(0.25) and m["eval/mean_ep_length.mean"] == pytest.approx(11.5)
    # no one aggregate is the metric: its value is the last logged, as for one define_metric(summary="min,max,mean")
    assert t["value"] == pytest.approx(0.3) and m["eval/mean_ep_length"] == 13


@pytest.mark.parametrize("wrapped", [True, False])
def test_every_run_a_program_starts_with_the_trials_id_reports_also_when_read_back(tmp_path: Path,
                                                                                    wrapped: bool) -> None:
    # a program that starts a run per seed with `wandb.init(reinit=True)`, then one for their mean: wandb names
    # the folders of the later runs with the trial's id `offline-run-<time>-<id>-1`, `-2`, which the read-back
    # (a wrapper without the hook) did not find: it read one run (the first or the last, by the second they
    # started in), and the trial failed with "metric 'mean_acc' was never reported (reported: acc)"
    hooked = None if wrapped else ('[bash, run.sh, "${args}"]', '[python, train.py, "${args}"]')
    proc, store = _sweep("wrapper_reinit_runs", tmp_path, "--workers", "1", replace=hooked)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed", "completed"]
    for t, lr in zip(trials, (0.5, 0.25)):
        assert t["value"] == pytest.approx(2 * lr + 0.5)
        assert t["metrics"]["acc"] == pytest.approx(2 * lr + 1)   # the last seed's run's summary, as hooked
        assert (0, "mean_acc") in {(s, n) for s, n, _ in t["history"]}


@pytest.mark.parametrize("how", ["command", "function"])
def test_a_trial_in_its_own_directory_gets_the_config_defaults_yaml_of_the_sweeps(tmp_path: Path, how: str) -> None:
    # wandb reads config-defaults.yaml from the working directory; with `--workdir trial` the program ran in
    # the trial's own directory and lost its defaults: "'Config' object has no attribute 'dense_layer_size'"
    extra = ("--function", "train.py:train") if how == "function" else ()
    proc, store = _sweep("config_defaults", tmp_path, "--workdir", "trial", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed", "completed"]
    for t, convs in zip(trials, (16, 32)):   # the sweep's values win over the defaults, as under W&B
        assert t["value"] == pytest.approx(convs / 2) and t["metrics"]["dense_layer_size"] == 128


@pytest.mark.parametrize("how", ["command", "function"])
def test_the_code_after_wandb_agent_is_the_sweeps_end_and_does_not_run_in_a_trial(tmp_path: Path, how: str) -> None:
    # a script whose code after `wandb.agent(...)` asks W&B's API for the best run and retrains with it: each
    # trial is one run of the agent's function, and what follows the agent runs after the whole sweep under W&B,
    # so not in a trial (offline `wandb.Api()` failed every trial: "No API key configured")
    extra = ("--function", "tune.py:sweep_main") if how == "function" else ()
    proc, store = _sweep("agent_then_best_run", tmp_path, *extra)
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed", "completed"], proc.stdout + proc.stderr
    assert [t["value"] for t in trials] == pytest.approx([0.02, 0.1] if how == "command" else [0.03, 0.15])
    assert not (tmp_path / "agent_then_best_run" / "retrained.txt").exists()


def test_a_run_marked_preempting_that_exits_non_zero_is_requeued_as_wandb_requeues_it(tmp_path: Path) -> None:
    # `run.mark_preempting()` then a non-zero exit (a SIGTERM handler's `sys.exit(128 + signum)`): W&B requeues
    # the run; it was a failure here, not retried with `retries: 0` (nor when preempted twice the same way)
    proc, store = _sweep("mark_preempting", tmp_path)
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed"], proc.stdout + proc.stderr
    assert trials[0]["value"] == pytest.approx(0.1 / 3) and trials[0]["attempts"] == 3
    con = sqlite3.connect(store / "store.db")
    kinds = [k for (k,) in con.execute("SELECT kind FROM events WHERE trial_id IS NOT NULL ORDER BY id")]
    assert kinds.count("preempted") == 2 and "failed" not in kinds, kinds


def test_a_function_run_marked_preempting_that_raises_is_requeued_as_wandb_requeues_it(tmp_path: Path) -> None:
    # a function trial's `run.mark_preempting()` then an exception: W&B requeues the run, as for a command trial
    # (above); it was a failure, not retried with `retries: 0`
    proc, store = _sweep("mark_preempting_function", tmp_path, "--workers", "1", how="function")
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed"], proc.stdout + proc.stderr
    assert trials[0]["value"] == pytest.approx(0.1 / 3) and trials[0]["attempts"] == 3
    con = sqlite3.connect(store / "store.db")
    kinds = [k for (k,) in con.execute("SELECT kind FROM events WHERE trial_id IS NOT NULL ORDER BY id")]
    assert kinds.count("preempted") == 2 and "failed" not in kinds, kinds


def test_a_sweep_named_in_free_text_gives_its_runs_a_sweep_id_and_names_safe_in_paths(tmp_path: Path) -> None:
    # W&B's runs have an 8-character sweep id and names like `dainty-sweep-3`; here they were the sweep's
    # `name:` as written, so `f"models/{wandb.run.sweep_id}_{wandb.run.name}.pt"` named folders that do not
    # exist ("/" in the name) and every trial failed. Now the name as its folder under logs/ has it.
    proc, store = _sweep("run_name_paths", tmp_path)
    assert [t["state"] for t in _trials(store)] == ["completed", "completed"], proc.stdout + proc.stderr
    safe = "sweep_EleutherAI_pythia-70m__lr__1"
    assert (store / "logs" / safe).is_dir()   # the same name as the sweep's folders
    models = sorted(p.name for p in (tmp_path / "run_name_paths" / "models").iterdir())
    assert models == [f"{safe}_{safe}-0.pt", f"{safe}_{safe}-1.pt"]


def test_what_a_wandb_function_returns_does_not_replace_its_runs_summary(tmp_path: Path) -> None:
    # W&B's agent ignores a function's return; the sweep's metric is the run's summary (define_metric min). The
    # returned dict's `val_loss` (the last epoch's) replaced it: every trial's value was its last, not its best
    proc, store = _sweep("function_returns", tmp_path, how="function")
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed", "completed"], proc.stdout + proc.stderr
    assert [t["value"] for t in trials] == pytest.approx([0.1, 0.2])
    assert all(t["metrics"]["epochs"] == 3 for t in trials)   # what only the return has is kept


def test_a_bayes_sweep_with_nested_pinned_settings_reads_its_config_back_and_updates_it(tmp_path: Path) -> None:
    # karapostK/hassaku (conf/sweeps/protomf/*.yml, sweep_agent.py): `wandb.config.items()` read back whole,
    # `running_settings` a nested dict, `wandb.config.update` with the sweep's own values and new keys,
    # `run.tags +=`, metric names with `@`, the objective logged as a running best in every row
    proc, store = _sweep("hassaku_protomf", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed"] * 3   # run_cap
    for t in trials:
        p = json.loads(t["params"])
        assert 64 <= p["embedding_dim"] <= 256 and 5e-5 <= p["lr"] <= 3e-3
        assert p["running_settings.batch_verbose"] is True
        assert t["value"] == pytest.approx(min(1.0, p["embedding_dim"] / 256 * 5 * p["lr"] * 100))
        assert t["metrics"]["ndcg@10"] == pytest.approx(t["value"])
        assert [s for s, k, _ in t["history"] if k == "ndcg@10"] == [0, 1, 2, 3, 4]
    saved = list((tmp_path / "hassaku_protomf" / "saved_models").rglob("conf.yml"))
    assert len(saved) == 3


def test_a_program_in_a_package_directory_imports_its_package_from_where_the_agent_runs(tmp_path: Path) -> None:
    # WilderLavington/FunctionalStochasticOptimization (configs/aistats/mujoco/funcopt.yaml): `program:
    # mujoco/mujoco_ex.py` puts '' (the agent's directory) on sys.path and imports mujoco.online_learning; a
    # parameter its parser does not know; the program setting WANDB_MODE=online itself: still offline
    proc, store = _sweep("funcopt_mujoco", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed"] * 4
    values = {(json.loads(t["params"])["algo"], json.loads(t["params"])["log_lr"]): t["value"] for t in trials}
    assert values == pytest.approx({("SSO_OGD", -3.0): 2 + 1 / 3, ("SSO_OGD", 0.0): 1 + 1 / 3,
                                    ("SSO_SLS", -3.0): 3 + 1 / 3, ("SSO_SLS", 0.0): 2 + 1 / 3})
    assert all(len([1 for _, k, _ in t["history"] if k == "grad_norm"]) == 3 for t in trials)


def test_a_command_with_uv_numbers_and_a_program_path_up_from_the_sweep_file_runs_and_is_pruned(tmp_path: Path
                                                                                               ) -> None:
    # lucacorbucci/FlowerFLTemplate (FLTemplate/examples/*/..._cross_silo_iid.yaml), run from its folder:
    # `program: ../../main.py`, `command: [${env}, uv, run, python, ${program}, ${args}, --num_rounds, 10, ...]`
    # (YAML numbers and items with trailing spaces among the fixed flags), hyperband on a metric logged in one
    # row of several per round. `uv` is a stand-in on PATH (bin/uv: `uv run CMD` runs CMD).
    work = tmp_path / "fl_template"
    shutil.copytree(PROJECTS / "fl_template", work)
    here = work / "FLTemplate" / "examples" / "mnist"
    env = _offline_env()
    env["PATH"] = os.pathsep.join([str(work / "bin"), str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(tmp_path / "store"),
                           "-q", "--workers", "2", "--trials", "4"], cwd=here, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(tmp_path / "store")
    assert len(trials) == 4 and {t["state"] for t in trials} <= {"completed", "pruned"}, proc.stdout + proc.stderr
    done = {p.stem for p in (work / "training_data" / "mnist").glob("*.done")}   # ../../../ from the sweep's folder
    for t in trials:
        p = json.loads(t["params"])
        assert isinstance(p["batch_size"], int) and 32 <= p["batch_size"] <= 512 and p["num_epochs"] in (1, 2, 3)
        reports = [s for s, k, _ in t["history"] if k == "Validation_Accuracy"]
        if t["state"] == "completed":
            assert len(reports) == 10 and t["value"] == pytest.approx(min(1.0, p["lr"] * 100 * p["num_epochs"]))
        else:
            assert len(reports) < 10   # stopped by hyperband (its band 3 is the metric's 3rd report)
    assert len(done) == sum(t["state"] == "completed" for t in trials)


def test_a_nested_parameter_reaches_a_string_flag_as_wandb_passes_it_and_the_config_as_a_dict(tmp_path: Path
                                                                                             ) -> None:
    # wandb/examples' nested-config CLI example: `--optimizer` is an argparse string, so the nested parameter
    # must come as one `--optimizer=...` argument (W&B's agent passes the dict's text), never as dotted flags
    # argparse refuses; `wandb.config["optimizer"]["nadam"]["beta"]` reads the nested values
    proc, store = _sweep("nested_cli", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(store)
    assert [t["state"] for t in trials] == ["completed"] * 4
    for t in trials:
        p = json.loads(t["params"])
        assert t["value"] == pytest.approx(1 - 2 / 3 * p["optimizer.lr"] * p["batch_size"])
    argv = next(ln for ln in next((store / "logs").rglob("0-1.log")).read_text().splitlines()
                if ln.startswith("# argv: "))
    assert "--optimizer={'lr': 0.001, 'nadam': {'beta': 0.9}}" in json.loads(argv[len("# argv: "):])
