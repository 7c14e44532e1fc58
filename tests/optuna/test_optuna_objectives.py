"""Optuna objectives run unchanged under sweeplab: `sl.optimize`, `sweeplab sweep --optuna`, resume after a
driver kill -9, an imported Optuna study, and the Ray backend. Real Optuna, real worker processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

import sweeplab as sl  # noqa: E402
from sweeplab.search.optuna_objective import open_study, study_dir  # noqa: E402

HERE = Path(__file__).resolve().parent
SRC = str(Path(__file__).resolve().parents[2] / "src")
pytestmark = pytest.mark.slow


def _journal(store: Path, name: str):
    return open_study(study_dir(store.resolve(), name))


def _cli(*args: str, cwd: Path, **kw):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=240, **kw)


def test_define_by_run_objective_with_conditional_params_pruning_and_user_attrs(workdir):
    store = workdir / "st"
    sweep = sl.optimize("objectives:conditional", n_trials=8, workers=2, store=store, seed=0,
                        sampler=optuna.samplers.RandomSampler(seed=0), pruner=optuna.pruners.ThresholdPruner(upper=5.0))
    assert sweep.outcome.exit_code == 0
    frame = sweep.trials()
    study = _journal(store, sweep.name)
    by_number = {t.system_attrs["sweeplab_number"]: t for t in study.trials}
    assert len(frame) == 8 and len(by_number) == 8
    xs = set()
    for number, row in frame.iterrows():
        frozen = by_number[number]
        x = row["params.x"]
        xs.add(x)
        assert x == frozen.params["x"]                                       # suggested in the worker
        assert (row["params.kind"] == "a") == ("y" in frozen.params)         # conditional branch
        if x > 5:
            assert row["state"] == "pruned" and frozen.state.name == "PRUNED"   # the user's pruner decided
        else:
            assert row["state"] == "completed" and frozen.state.name == "COMPLETE"
            assert row["value"] == pytest.approx(frozen.value)
            assert row["metrics.user_attrs.double_x"] == pytest.approx(2 * x)
        assert frozen.user_attrs["double_x"] == pytest.approx(2 * x)
    assert len(xs) == 8                                   # every worker's sampler was reseeded per trial
    curves = sweep.metrics()
    assert set(curves["key"]) == {"value"} and len(curves) >= 8    # trial.report -> the sweep's curves
    best = min(t.value for t in study.trials if t.state.name == "COMPLETE")
    assert sweep.best["value"] == pytest.approx(best)


def test_an_objective_defined_in_a_notebook_cell_or_a_closure_runs_in_the_workers(workdir):
    """No module to import it from: it is shipped by value (cloudpickle, into the store) like sl.sweep's."""
    scale = 3.0

    def objective(trial):
        x = trial.suggest_float("x", 0.0, 1.0)
        trial.set_user_attr("pid", os.getpid())
        return scale * x

    sweep = sl.optimize(objective, n_trials=4, workers=2, store=workdir / "st", seed=0, progress=False)
    frame = sweep.trials()
    assert list(frame["state"]) == ["completed"] * 4
    assert all(v == pytest.approx(scale * x) for v, x in zip(frame["value"], frame["params.x"], strict=True))
    assert os.getpid() not in set(frame["metrics.user_attrs.pid"])                 # ran in worker processes
    assert list((workdir / "st" / "functions").glob("*.pkl"))


def test_a_failing_objective_fails_its_trial_with_its_params_and_the_study_agrees(workdir):
    sweep = sl.optimize("objectives:fails", n_trials=1, workers=1, store=workdir / "st", retries=1)
    row = sweep.trials().loc[0]
    frozen = _journal(workdir / "st", "fails").trials[0]
    assert row["state"] == "failed" and row["attempts"] == 2 and "planted failure" in row["reason"]
    assert row["params.x"] == frozen.params["x"]              # the retry reused the Optuna trial's suggestion
    assert frozen.state.name == "FAIL" and len(_journal(workdir / "st", "fails").trials) == 1
    assert sweep.outcome.exit_code == 1


def test_the_users_sampler_runs_in_the_workers_and_study_stop_ends_the_sweep(workdir):
    store = workdir / "st"
    grid = optuna.samplers.GridSampler({"x": [0.0, 1.0, 2.0, 3.0]})
    sweep = sl.optimize("objectives:grid", n_trials=10, workers=2, store=store, sampler=grid)
    assert sweep.outcome.exit_code == 0
    frame = sweep.trials()
    done = frame[frame["state"] == "completed"]
    assert set(done["params.x"]) == {0.0, 1.0, 2.0, 3.0}    # the grid, across workers (it repeats a point
    assert len(frame) <= 5   # only while all are running, as in Optuna); then GridSampler stopped the study


def test_cli_sweep_optuna_runs_and_bad_objective_is_exit_2_with_nothing_written(workdir):
    ok = _cli("sweep", "--optuna", "objectives:grid", "--trials", "3", "--workers", "2", "--store", "st",
              "--sampler", "RandomSampler", "--seed", "1", "-q", cwd=workdir)
    assert ok.returncode == 0, ok.stderr
    best = _cli("best", "grid", "--json", "--store", "st", cwd=workdir)
    assert json.loads(best.stdout)["params"].keys() == {"x"}
    bad = _cli("sweep", "--optuna", "objectives:missing", "--store", "st2", cwd=workdir)
    assert bad.returncode == 2 and "objectives:missing" in bad.stderr
    assert not (workdir / "st2").exists()
    nodb = _cli("sweep", "--optuna", "objectives:grid", "--from-study", "sqlite:///none.db::old", "--store", "st2",
                cwd=workdir)
    assert nodb.returncode == 2 and "no database file none.db" in nodb.stderr
    assert not (workdir / "st2").exists() and not (workdir / "none.db").exists()
    old = optuna.create_study(study_name="old", storage=f"sqlite:///{workdir / 'old.db'}")
    old.optimize(lambda t: t.suggest_float("x", 0, 3), n_trials=2)
    seeded = _cli("sweep", "--optuna", "objectives:grid", "--from-study", "sqlite:///old.db::old", "--trials", "1",
                  "--store", "st3", "--name", "seeded", "-q", cwd=workdir)
    assert seeded.returncode == 0, seeded.stderr
    status = json.loads(_cli("status", "seeded", "--json", "--store", "st3", cwd=workdir).stdout)
    assert [t["state"] for t in status["trials"]] == ["completed"] * 3
    assert [t["params"]["x"] for t in status["trials"][:2]] == [t.params["x"] for t in old.trials]
    assert len(old.trials) == 2                   # --from-study imports: the command writes nothing there


def _closed_port() -> int:
    import socket

    with socket.socket() as s:   # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_MUTE = f"127.0.0.1:{_closed_port()}"
BAD_PLAN = {   # what the run refuses before it writes anything (a machine of fewer than 1,000 CPUs)
    "too-many-workers": (["--workers", "1000"], {"workers": 1000}, "CPUs but this machine has"),
    "unknown-backend": (["--backend", "nope"], {"backend": "nope"}, "unknown backend 'nope'"),
    # a Ray address that does not answer: the store and the sweep's study were written before it was refused
    "ray-address-not-answering": (["--backend", "ray", "--address", _MUTE], {"backend": "ray", "address": _MUTE},
                                  f"--address {_MUTE}: nothing answers there"),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.ray] if "ray" in c else []) for c in BAD_PLAN],
                         ids=list(BAD_PLAN))
def test_a_plan_the_machine_cannot_run_is_refused_with_nothing_written(workdir, case):
    """It was refused, but only after the store, the sweep's study directory and a pickled objective had
    been written: sweeplab's own bad-input rule (nothing written) held for specs, not for objectives."""
    if "ray" in case:
        pytest.importorskip("ray")
    args, kwargs, fragment = BAD_PLAN[case]
    bad = _cli("sweep", "--optuna", "objectives:grid", *args, "--store", "st", cwd=workdir)
    assert bad.returncode == 2 and fragment in bad.stderr, bad.stderr
    assert bad.stdout == "" and len(bad.stderr.splitlines()) == 1
    with pytest.raises(sl.UserError, match=fragment):
        sl.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2, store=workdir / "st", **kwargs)
    assert not (workdir / "st").exists()
    spec = {"method": "random", "metric": {"name": "loss", "goal": "minimize"}, "parameters": {"x": {"value": 1}},
            "budget": {"trials": 1}}
    with pytest.raises(sl.UserError, match=fragment):   # sl.sweep with a function shipped by value: the same
        sl.sweep(spec, fn=lambda config, run: {"loss": 0.0}, store=workdir / "st", **kwargs)
    assert not (workdir / "st").exists()


def test_a_sampler_whose_package_is_missing_is_refused_before_anything_is_written(workdir):
    """`--sampler CmaEsSampler` (docs/optuna.md) without the `cmaes` package: Optuna imports it lazily, at the
    first relative sample, so every trial after the first failed with ModuleNotFoundError in its worker and
    the sweep ended `finished` with exit 0. The driver here runs with `cmaes` unimportable (whether or not
    this machine has it): the missing package is one line, exit 2, nothing written."""
    code = ("import sys, runpy; sys.modules['cmaes'] = None; "
            "sys.argv = ['sweeplab', *sys.argv[1:]]; runpy.run_module('sweeplab', run_name='__main__')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    bad = subprocess.run([sys.executable, "-c", code, "sweep", "--optuna", "objectives:grid", "--trials", "2",
                          "--sampler", "CmaEsSampler", "--store", "st"], cwd=workdir, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2, (bad.returncode, bad.stderr)
    assert "CmaEsSampler needs the package 'cmaes'" in bad.stderr and "pip install cmaes" in bad.stderr, bad.stderr
    assert len(bad.stderr.splitlines()) == 1, bad.stderr
    assert not (workdir / "st").exists()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"sampler": "tpe"}, "sampler='tpe' is not an Optuna sampler"),
    ({"pruner": optuna.pruners.MedianPruner}, r"pruner=MedianPruner: a class.*pruner=optuna.pruners.MedianPruner\(\)"),
], ids=["a-string-sampler", "a-pruner-class"])
def test_a_sampler_or_pruner_that_is_not_one_is_refused_before_anything_is_written(workdir, kwargs, message):
    """`sampler="tpe"` created the sweep, whose driver then failed at its first trial ("'str' object has no
    attribute 'after_trial'"); a pruner class (not an instance) failed each trial at `should_prune()`."""
    with pytest.raises(sl.UserError, match=message):
        sl.optimize("objectives:grid", n_trials=1, workers=1, store=workdir / "st", **kwargs)
    assert not (workdir / "st").exists()


def test_resume_after_driver_kill_9_keeps_completed_trials_and_reaches_n_trials(workdir):
    (workdir / "STALL").write_text("")   # trials 2 and later stay in flight until it goes
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeplab", "sweep", "--optuna", "objectives:waits", "--trials", "6",
         "--workers", "2", "--store", "st", "--seed", "3", "-q"],
        cwd=workdir, env={**os.environ, "PYTHONPATH": SRC}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import sqlite3

    def completed() -> dict[int, tuple[str, float]]:
        if not (workdir / "st" / "store.db").exists():
            return {}
        try:
            with sqlite3.connect(workdir / "st" / "store.db") as db:
                rows = db.execute("SELECT number, params, value FROM trials WHERE state='completed'").fetchall()
        except sqlite3.OperationalError:   # the store is being created
            return {}
        return {n: (p, v) for n, p, v in rows}

    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and len(completed()) < 2:
            time.sleep(0.05)
        time.sleep(1.0)   # trials 2 and 3 are in flight, waiting for STALL to go
        before = completed()
        assert sorted(before) == [0, 1]
        os.killpg(proc.pid, signal.SIGKILL)   # the driver and its workers, at once
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    (workdir / "STALL").unlink()
    resumed = _cli("resume", "waits", "--store", "st", "-q", cwd=workdir)
    assert resumed.returncode == 0, resumed.stderr
    after = completed()
    assert len(after) == 6                                   # n_trials in total
    assert {n: after[n] for n in before} == before           # nothing completed was redone
    study = _journal(workdir / "st", "waits")
    states = [t.state.name for t in study.trials]
    assert "RUNNING" not in states and states.count("COMPLETE") == 6
    values = sorted(t.value for t in study.trials if t.state.name == "COMPLETE")
    assert values == sorted(v for _, v in after.values())    # the study and the store agree


def test_a_crash_loop_prints_its_traceback_once(workdir):
    failed = _cli("sweep", "--optuna", "objectives:fails", "--trials", "5", "--workers", "1", "--store", "st", "-q",
                  cwd=workdir)
    assert failed.returncode == 1 and "error: sweep fails failed: crash loop" in failed.stderr
    assert failed.stderr.count("Traceback (most recent call last)") == 1, failed.stderr   # it was printed twice


def _states(db: Path) -> list[str]:
    """The trials' states in a store a sweep is writing ([] while it is being created)."""
    import sqlite3

    if not db.exists():
        return []
    try:
        with sqlite3.connect(db) as conn:
            return [state for (state,) in conn.execute("SELECT state FROM trials")]
    except sqlite3.OperationalError:
        return []


def test_ctrl_c_ends_like_a_spec_sweep_with_the_summary_and_how_to_resume(workdir):
    """Ctrl-C printed only the progress's note and exit 130 (no counts, no best, no next commands), where a
    spec sweep prints its summary: the objective's KeyboardInterrupt, raised for notebooks, reached the CLI."""
    (workdir / "STALL").write_text("")   # trials 2 and later stay in flight until Ctrl-C
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeplab", "sweep", "--optuna", "objectives:waits", "--trials", "6",
         "--workers", "2", "--store", "st", "--seed", "3"],
        cwd=workdir, env={**os.environ, "PYTHONPATH": SRC}, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            states = _states(workdir / "st" / "store.db")
            if states.count("completed") == 2 and states.count("running") == 2:   # 2 and 3 wait for STALL
                break
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)   # Ctrl-C: the terminal signals the whole foreground group
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "sweep waits stopped: interrupted" in out, out + err
    assert "2 completed, 2 interrupted" in out and "best: trial" in out and "sweeplab resume waits" in out


def test_an_existing_optuna_study_seeds_the_search_and_shows_in_the_store(workdir):
    url = f"sqlite:///{workdir / 'old.db'}"
    old = optuna.create_study(study_name="old", storage=url, direction="maximize")
    old.set_metric_names(["score"])   # trials_dataframe's `value_score` column
    old.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    loaded = optuna.load_study(study_name="old", storage=url)
    sweep = sl.optimize("objectives:grid", n_trials=2, workers=1, store=workdir / "st", study=loaded)
    assert sweep.study().metric_names == ["score"]
    assert "value_score" in sweep.study().trials_dataframe().columns
    frame = sweep.trials()
    assert len(frame) == 5
    imported = frame.loc[[0, 1, 2]]
    assert list(imported["params.x"]) == [t.params["x"] for t in old.trials[:3]]
    assert list(imported["value"]) == [t.value for t in old.trials[:3]]
    assert len(old.trials) == 5                   # the sweep's trials are the study's, as after old.optimize
    assert all(imported["reason"].str.contains("imported from old"))
    study = _journal(workdir / "st", sweep.name)
    assert study.direction.name == "MAXIMIZE" and len(study.trials) == 5   # the sampler saw the history
    assert sweep.best["value"] == pytest.approx(max(t.value for t in study.trials))


@pytest.mark.ray
def test_an_optuna_objective_runs_on_a_ray_cluster(workdir):
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        sweep = sl.optimize("objectives:pid", n_trials=3, workers=2, store=workdir / "st", backend="ray",
                            address=cluster.address, seed=0)
        assert sweep.outcome.exit_code == 0
        study = _journal(workdir / "st", "pid")
        assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
        assert list(sweep.trials()["params.x"]) == [t.params["x"] for t in study.trials]   # told back over Ray
        assert all(t.user_attrs["pid"] != os.getpid() for t in study.trials)   # ran in Ray workers
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def test_a_journal_lock_held_by_a_killed_process_does_not_stall_the_study(tmp_path):
    """A worker killed (kill -9) while it appends to the journal leaves its lock behind; Optuna's own file
    locks are broken only after a 30 s grace period, which stalled `resume` after a driver kill. The OS drops
    the study's lock with its holder."""
    from sweeplab.search.optuna_objective import StudySettings, write_settings

    directory = tmp_path / "study"
    write_settings(directory, StudySettings(objective="m:f", study_name="s", directions=["minimize"]))
    open_study(directory, create=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, signal; from pathlib import Path\n"
         "from sweeplab.search.optuna_objective import journal_storage\n"
         f"journal_storage(Path({str(directory)!r}))._backend._lock.acquire()\n"
         "print('locked', flush=True); signal.pause()"],
        env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    t0 = time.monotonic()
    study = open_study(directory)
    study.ask()                               # appends to the journal: needs the lock
    assert time.monotonic() - t0 < 10


def test_a_sweep_puts_back_the_process_state_it_changed(tmp_path, monkeypatch):
    """In a notebook the kernel lives on after a sweep: `sl.optimize`, `sweep.study()` and a TPE `sl.sweep`
    left Optuna's log level at WARNING and its ExperimentalWarning ignored (the user's own `study.optimize`
    in the next cell printed no "Trial 0 finished" line), and `sl.optimize` left the working directory at the
    head of `sys.path`."""
    import logging
    import warnings

    monkeypatch.chdir(tmp_path)
    (tmp_path / "objs.py").write_text("def objective(trial):\n    return trial.suggest_float('x', 0, 1)\n")
    optuna.logging.set_verbosity(optuna.logging.INFO)
    level, filters, path = logging.getLogger("optuna").level, list(warnings.filters), list(sys.path)

    def objective(trial):
        return trial.suggest_float("x", 0.0, 1.0)

    sweep = sl.optimize(objective, n_trials=2, workers=1, store=tmp_path / "st", progress=False)
    sl.optimize("objs.py:objective", n_trials=1, workers=1, store=tmp_path / "st", progress=False)
    assert len(sweep.study().trials) == 2
    sl.sweep({"method": "tpe", "metric": {"name": "loss"}, "parameters": {"x": {"min": 0.0, "max": 1.0}},
              "budget": {"trials": 2}}, fn=lambda config, run: {"loss": config["x"]}, store=tmp_path / "st",
             workers=1, progress=False)
    assert logging.getLogger("optuna").level == level == logging.INFO
    assert warnings.filters == filters
    assert sys.path == path


def test_two_optimize_calls_at_once_in_threads_of_a_script_both_run(workdir):
    """A script (no `if __name__ == "__main__":`) starting two `sl.optimize` in threads, joined at its top
    level: the objective, seen from a thread, was taken as importable by name, so the import check ran the
    script again, which started its threads and sweeps again, without end (the process hung). Both calls
    also chose the free name `objective` before either created its sweep, and wrote one study and one
    shipped file (one failed: "already being run by pid ...", or FileNotFoundError)."""
    (workdir / "two.py").write_text(
        "import threading\nimport sweeplab as sl\n"
        "def objective(trial):\n    return trial.suggest_float('x', 0, 1)\n"
        "names, errors = [], []\n"
        "gate = threading.Barrier(2)\n"
        "def go():\n    gate.wait()\n    try:\n"
        "        names.append(sl.optimize(objective, n_trials=1, workers=1, store='st', progress=False).name)\n"
        "    except Exception as exc:\n        errors.append(repr(exc))\n"
        "threads = [threading.Thread(target=go) for _ in range(2)]\n"
        "for t in threads:\n    t.start()\nfor t in threads:\n    t.join()\n"
        "print(sorted(names), errors)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "two.py"], cwd=workdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)   # the script, and the sweeps it started again, with their workers
        proc.communicate()
        pytest.fail("the script hung: the import check ran it again")
    assert out.strip() == "['objective', 'objective-2'] []", (out, err[-2000:])


def test_an_async_objective_is_refused_before_anything_is_written(workdir):
    """`async def objective(trial)`: the worker got a coroutine back, never run, and every trial failed
    ("could not be cast to float", with a "coroutine was never awaited" warning)."""
    async def objective(trial):
        return trial.suggest_float("x", 0, 1)

    with pytest.raises(sl.UserError, match="objective '.*objective' is an async def"):
        sl.optimize(objective, n_trials=1, store=workdir / "st")
    assert not (workdir / "st").exists()


def test_resume_with_more_trials_of_an_optuna_sweep_whose_trials_completed(workdir):
    """`sweeplab resume NAME --trials +2` of a finished sl.optimize sweep was refused ("its trials' config
    changed since trial 1 ran (x is new ...)"): the check rebuilt the last trial's config from its params,
    which for an Optuna objective are what it suggested while running, never part of its config."""
    sweep = sl.optimize("objectives:quadratic", n_trials=2, workers=1, store=workdir / "st", seed=0)
    assert sweep.status()["counts"] == {"completed": 2}
    resumed = _cli("resume", sweep.name, "--store", "st", "--trials", "+2", "-q", cwd=workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert sl.load(sweep.name, store=workdir / "st").status()["counts"] == {"completed": 4}
    study = sl.load(sweep.name, store=workdir / "st").study()
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
