"""Shapes of objective taken from Optuna's own examples (optuna/optuna-examples) that must run unchanged:
numpy values where an in-memory study takes them, callable classes and functools.partial, a study with
enqueued trials and user attrs, several objectives. Real Optuna, real worker processes."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

import sweeplab as sl  # noqa: E402
from sweeplab.search.optuna_objective import open_study, study_dir  # noqa: E402

HERE = Path(__file__).resolve().parent


def _python(args: list[str], cwd: Path):
    """`python ARGS` in a fresh process that imports this checkout's sweeplab (a script, or -m sweeplab)."""
    import os
    import subprocess
    import sys

    src = str(HERE.parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
pytestmark = pytest.mark.slow


def _journal(store: Path, name: str):
    return open_study(study_dir(store.resolve(), name))


@pytest.fixture
def objectives(workdir):
    import importlib

    import objectives as module

    return importlib.reload(module)


def test_numpy_values_in_attrs_reports_and_return_value_complete_the_trial(workdir):
    """terminator_simple.py stores a numpy array (report_cross_validation_scores): the journal's JSON
    refused it and every trial failed; numpy scalars as user attrs or categorical choices failed the same
    way, and float32 reports were left out of the curves."""
    sweep = sl.optimize("objectives:numpy_values", n_trials=2, workers=1, store=workdir / "st", seed=0)
    frame = sweep.trials()
    assert list(frame["state"]) == ["completed"] * 2, list(frame["reason"])
    assert list(frame["metrics.user_attrs.best_epoch"]) == [2, 2]
    assert set(frame["params.n"]) <= {1, 2}                    # numpy choices (np.arange) are suggested
    study = _journal(workdir / "st", sweep.name)
    for t in study.trials:
        assert t.state.name == "COMPLETE" and t.value == pytest.approx(t.params["x"])
        assert t.user_attrs["scores"] == [0.5, 0.25] and t.system_attrs["cv_scores"] == [1.0, 2.0]
        assert t.intermediate_values == pytest.approx({0: t.params["x"], 1: t.params["x"] + 1,
                                                       2: t.params["x"] + 2})
    curves = sweep.metrics()
    assert len(curves[curves["key"] == "value"]) == 6            # 3 reports per trial, all in the curves


def test_a_callable_class_and_a_functools_partial_run_as_objectives(workdir, objectives):
    """sklearn_additional_args.py passes an instance with __call__; Optuna's FAQ binds extra arguments with
    functools.partial or a lambda. sweeplab named them as `module:<repr>` and refused them."""
    runs = {
        "class": (objectives.Objective(2.0), 2.0),
        "partial": (functools.partial(objectives.with_data, data=3.0), 3.0),
        "lambda": (lambda trial: objectives.with_data(trial, 4.0), 4.0),
    }
    for label, (objective, scale) in runs.items():
        sweep = sl.optimize(objective, n_trials=2, workers=1, store=workdir / "st", seed=0)
        frame = sweep.trials()
        assert list(frame["state"]) == ["completed"] * 2, (label, list(frame["reason"]))
        assert list(frame["value"]) == pytest.approx([scale * x for x in frame["params.x"]]), label
    names = set(sl.load(n, store=workdir / "st").name for n in ("Objective", "with_data"))
    assert names == {"Objective", "with_data"}                 # named after the class and the function


def test_a_given_studys_enqueued_trials_run_first_and_its_user_attrs_are_kept(workdir):
    """faq/enqueue_trial.py: `study.enqueue_trial` before optimizing. With `study=` the enqueued trials
    were dropped (only finished ones were copied), and so were the study's user attrs."""
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("dataset", "iris")
    study.enqueue_trial({"svc_c": 1})
    study.enqueue_trial({"svc_c": 10})
    sweep = sl.optimize("objectives:svc_like", n_trials=3, workers=1, store=workdir / "st", study=study)
    frame = sweep.trials()
    assert len(frame) == 3 and list(frame["state"]) == ["completed"] * 3
    assert list(frame["params.svc_c"][:2]) == [1, 10]
    journal = _journal(workdir / "st", sweep.name)
    assert journal.user_attrs == {"dataset": "iris"}
    assert [t.user_attrs["dataset"] for t in journal.trials] == ["iris"] * 3


def test_several_objectives_run_with_directions_as_in_create_study(workdir):
    """basic/quadratic_multi_objective.py returns a tuple for `directions=["minimize", "maximize"]`: there
    was no way to say so, and the tuple failed every trial as 'metric value was never reported'."""
    sweep = sl.optimize("objectives:two_objectives", n_trials=4, workers=2, store=workdir / "st", seed=0,
                        directions=["minimize", "maximize"])
    assert sweep.outcome.exit_code == 0
    frame = sweep.trials()
    assert list(frame["state"]) == ["completed"] * 4, list(frame["reason"])
    study = _journal(workdir / "st", sweep.name)
    assert [d.name for d in study.directions] == ["MINIMIZE", "MAXIMIZE"]
    by_number = {t.system_attrs["sweeplab_number"]: t for t in study.trials}
    for number, row in frame.iterrows():
        assert by_number[number].values == pytest.approx([row["metrics.values_0"], row["metrics.values_1"]])
    front = {p["trial"] for p in sweep.pareto}
    assert front == {by_number[t.number].system_attrs["sweeplab_number"] for t in study.best_trials}


def test_a_multi_objective_study_given_is_imported_and_continued(workdir):
    old = optuna.create_study(directions=["minimize", "maximize"], sampler=optuna.samplers.RandomSampler(seed=1))
    import objectives

    old.optimize(objectives.two_objectives, n_trials=2)
    sweep = sl.optimize("objectives:two_objectives", n_trials=2, workers=1, store=workdir / "st", study=old)
    frame = sweep.trials()
    assert list(frame["state"]) == ["completed"] * 4
    assert [list(v) for v in frame[["metrics.values_0", "metrics.values_1"]].values[:2]] == \
        [pytest.approx(t.values) for t in old.trials[:2]]
    assert len(old.trials) == 4                                 # as after old.optimize(n_trials=2)
    assert len(_journal(workdir / "st", sweep.name).trials) == 4


def test_a_value_optuna_refuses_fails_the_trial_with_optunas_reason(workdir):
    """A tuple from a single-objective objective, or None, failed as 'metric value was never reported'."""
    one = sl.optimize("objectives:two_objectives", n_trials=1, workers=1, store=workdir / "st", retries=0)
    reason = one.trials().loc[0, "reason"]
    assert "number of the values 2 did not match the number of the objectives 1" in reason, reason
    none = sl.optimize("objectives:returns_none", n_trials=1, workers=1, store=workdir / "st", retries=0)
    reason = none.trials().loc[0, "reason"]
    assert "None could not be cast to float" in reason, reason
    study = _journal(workdir / "st", none.name)
    assert [t.state.name for t in study.trials] == ["FAIL"]


def test_cli_direction_once_per_objective(workdir):
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}

    def cli(*args: str):
        return subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=240)

    ran = cli("sweep", "--optuna", "objectives:two_objectives", "--trials", "3", "--workers", "2", "--store", "st",
              "--direction", "minimize", "--direction", "maximize", "-q")
    assert ran.returncode == 0, ran.stderr
    front = json.loads(cli("best", "two_objectives", "--json", "--store", "st").stdout)
    assert front and all(set(p["values"]) == {"values_0", "values_1"} for p in front)
    study = _journal(workdir / "st", "two_objectives")
    assert [d.name for d in study.directions] == ["MINIMIZE", "MAXIMIZE"]
    comma = cli("sweep", "--optuna", "objectives:two_objectives", "--trials", "1", "--store", "st",
                "--direction", "minimize,maximize", "--name", "comma", "-q")
    assert comma.returncode == 0, comma.stderr


def test_timeout_is_the_studys_as_in_study_optimize_and_trial_timeout_each_trials(workdir):
    """`study.optimize(objective, n_trials=100, timeout=600)` (xgboost_simple.py, pytorch_simple.py) means no
    trial starts after 600 s; sl.optimize took `timeout` as each trial's limit, so the same call ran every
    trial. n_trials=None runs until the timeout, as in Optuna."""
    sweep = sl.optimize("objectives:sleeps", n_trials=40, workers=1, store=workdir / "st", timeout=1.0)
    status = sweep.status()
    assert "timeout 1s reached" in status["end_reason"], status
    assert 1 <= status["trials"] < 40 and set(status["counts"]) == {"completed"}
    until = sl.optimize("objectives:sleeps", n_trials=None, workers=1, store=workdir / "st", timeout=1.0)
    assert "timeout" in until.status()["end_reason"] and until.outcome.exit_code == 0
    limited = sl.optimize("objectives:hangs", n_trials=1, workers=1, store=workdir / "st", trial_timeout=1,
                          retries=0)
    row = limited.trials().loc[0]
    assert row["state"] == "failed" and "timeout" in row["reason"], row["reason"]


def test_a_timeout_shorter_than_the_workers_start_still_runs_a_trial(workdir):
    """`timeout` counts from the first trial's start, as study.optimize's does (its first trial starts at its
    call): it counted from the driver's start, so a loaded machine's slow worker start (seconds) used up a short
    timeout and the sweep ended with no trial at all."""
    sweep = sl.optimize("objectives:sleeps", n_trials=5, workers=1, store=workdir / "st", timeout=0.001)
    status = sweep.status()
    assert "timeout" in status["end_reason"] and status["trials"] == 1, status
    assert status["counts"] == {"completed": 1}, status


def test_callbacks_run_after_each_trial_and_may_stop_the_study(workdir):
    """faq/max_trials_callback.py: `callbacks=[MaxTrialsCallback(3, states=(TrialState.COMPLETE,))]`; a
    callback is called with the study and each finished trial, in the calling process."""
    seen: list[tuple[int, str]] = []
    cap = optuna.study.MaxTrialsCallback(3, states=(optuna.trial.TrialState.COMPLETE,))
    sweep = sl.optimize("objectives:grid", n_trials=10, workers=1, store=workdir / "st",
                        callbacks=[lambda study, t: seen.append((t.number, t.state.name)), cap])
    status = sweep.status()
    assert status["counts"] == {"completed": 3} and "study.stop()" in status["end_reason"], status
    assert seen == [(0, "COMPLETE"), (1, "COMPLETE"), (2, "COMPLETE")]

    def broken(study, trial):
        raise RuntimeError("callback bug")

    stopped = sl.optimize("objectives:grid", n_trials=10, workers=1, store=workdir / "st", callbacks=[broken])
    assert stopped.status()["trials"] == 1
    assert "callback" in stopped.status()["end_reason"] and "callback bug" in stopped.status()["end_reason"]


def test_a_sampler_defined_in_the_users_script_and_one_holding_a_lambda_reach_the_workers(workdir):
    """samplers/simulated_annealing_sampler.py defines its sampler class in the script it runs: the workers
    could not unpickle it ('Can't get attribute SimulatedAnnealingSampler') and every trial failed. A
    sampler holding a lambda (constraints_func=lambda t: ...) could not be pickled at all."""
    import json
    import os
    import subprocess
    import sys

    (workdir / "script.py").write_text(
        "import json, optuna, sweeplab as sl\n"
        "class Sampler(optuna.samplers.RandomSampler):\n"
        "    def sample_independent(self, study, trial, name, distribution):\n"
        "        return 0.25\n"
        "def objective(trial):\n"
        "    x = trial.suggest_float('x', 0, 1)\n"
        "    trial.set_constraint('c', x - 0.5)\n"
        "    return x\n"
        "if __name__ == '__main__':\n"
        "    a = sl.optimize(objective, n_trials=2, workers=2, sampler=Sampler(), store='st', progress=False)\n"
        "    tpe = optuna.samplers.TPESampler(n_startup_trials=1, constraints_func=lambda t: (t.params['x'],))\n"
        "    b = sl.optimize(objective, n_trials=2, workers=2, sampler=tpe, store='st', progress=False)\n"
        "    print(json.dumps([[list(s.trials()['state']), list(s.trials()['value'])] for s in (a, b)]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    ran = subprocess.run([sys.executable, "script.py"], cwd=workdir, env=env, capture_output=True, text=True,
                         timeout=240)
    assert ran.returncode == 0, ran.stderr[-3000:]
    (states_a, values_a), (states_b, _) = json.loads(ran.stdout.strip().splitlines()[-1])
    assert states_a == ["completed"] * 2 and values_a == [0.25, 0.25]    # the script's sampler decided
    assert states_b == ["completed"] * 2


def test_a_seeded_sampler_makes_the_sweep_reproducible_as_in_optuna(workdir):
    """Optuna's FAQ: `TPESampler(seed=...)` makes a study reproducible. Each trial's sampler is reseeded from
    the sweep's seed, which was random without `seed=`: the same call gave other trials every time."""
    runs = []
    for i in range(2):
        for sampler in (optuna.samplers.RandomSampler(seed=3), optuna.samplers.TPESampler(seed=3, n_startup_trials=2)):
            sweep = sl.optimize("objectives:grid", n_trials=4, workers=1, store=workdir / f"st{i}", sampler=sampler)
            runs.append(list(sweep.trials()["params.x"]))
    assert runs[0] == runs[2] and runs[1] == runs[3]


def test_the_sweeps_study_answers_what_the_examples_read_after_study_optimize(workdir):
    """Every example ends reading its study (`study.best_trial`, `study.best_trials`, trials_dataframe,
    `trial.system_attrs['constraints']`): sl.optimize gave no way to get it."""
    sweep = sl.optimize("objectives:conditional", n_trials=4, workers=2, store=workdir / "st", seed=0,
                        pruner=optuna.pruners.ThresholdPruner(upper=5.0))
    study = sweep.study()
    frame = study.trials_dataframe()
    assert len(frame) == 4 and set(frame["state"]) <= {"COMPLETE", "PRUNED"}
    if sweep.best is not None:
        assert study.best_value == pytest.approx(sweep.best["value"])
        assert study.best_params == sweep.best["params"]
    several = sl.optimize("objectives:two_objectives", n_trials=3, workers=1, store=workdir / "st",
                          directions=["minimize", "maximize"])
    assert len(several.study().best_trials) == len(several.pareto)
    with pytest.raises(sl.UserError, match="not a sweep of an Optuna objective"):
        sl.Sweep("none", workdir / "st").study()


def test_cli_a_sampler_that_needs_arguments_is_a_clear_error(workdir):
    """`--sampler GridSampler` (it needs a search space) ended in a framed traceback, exit 1."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    for option, name in (("--sampler", "GridSampler"), ("--pruner", "PatientPruner")):
        ran = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "--optuna", "objectives:grid", option, name,
                              "--store", "st"], cwd=workdir, env=env, capture_output=True, text=True, timeout=240)
        assert ran.returncode == 2, ran.stderr
        assert "Traceback" not in ran.stderr and name in ran.stderr and "sl.optimize" in ran.stderr, ran.stderr
        assert not (workdir / "st").exists()


def test_directions_are_taken_as_optuna_takes_them(workdir):
    """optuna.create_study takes "maximize", "MAXIMIZE" or StudyDirection.MAXIMIZE; sl.optimize refused the
    last two."""
    for given in ("MAXIMIZE", optuna.study.StudyDirection.MAXIMIZE):
        sweep = sl.optimize("objectives:grid", n_trials=1, workers=1, store=workdir / "st", direction=given)
        assert sweep.study().direction == optuna.study.StudyDirection.MAXIMIZE
    several = sl.optimize("objectives:two_objectives", n_trials=1, workers=1, store=workdir / "st",
                          directions=[optuna.study.StudyDirection.MINIMIZE, "Maximize"])
    assert [d.name for d in several.study().directions] == ["MINIMIZE", "MAXIMIZE"]


def test_optunas_constraints_keep_infeasible_trials_out_of_the_best_as_in_study_best_trial(workdir):
    """basic/quadratic_constraint.py (constraints_func) and Optuna 5's trial.set_constraint: study.best_trial
    is the best feasible trial, while sweeplab's best named an infeasible one (x = -0.28 for x >= 1)."""
    for target, sampler in (("objectives:constrained", optuna.samplers.RandomSampler(seed=2)),
                            ("objectives:quadratic", optuna.samplers.TPESampler(
                                n_startup_trials=4, seed=2, constraints_func=_constraints()))):
        sweep = sl.optimize(target, n_trials=10, workers=2, store=workdir / "st", sampler=sampler)
        study = sweep.study()
        xs = [t.params["x"] for t in study.trials if t.state.name == "COMPLETE"]
        assert any(x < 1 for x in xs) and any(x >= 1 for x in xs), xs        # both kinds were sampled
        assert sweep.best["params"] == study.best_trial.params and sweep.best["params"]["x"] >= 1
        frame = sweep.trials()
        infeasible = frame[frame["params.x"] < 1]
        assert all(infeasible["reason"].str.contains("infeasible")), list(infeasible["reason"])


def _constraints(name: str = "constraints"):
    import objectives

    return getattr(objectives, name)


def test_a_constraints_func_returning_nan_fails_the_trial_not_the_sweep(workdir):
    """Optuna's tell raises for NaN constraints; told by the driver, it ended the whole sweep with a
    traceback (and a resume would tell it again)."""
    sampler = optuna.samplers.TPESampler(constraints_func=_constraints("nan_constraints"))
    sweep = sl.optimize("objectives:quadratic", n_trials=2, workers=1, store=workdir / "st", sampler=sampler,
                        retries=0)
    frame = sweep.trials()
    assert list(frame["state"]) == ["failed"] * 2 and all(frame["reason"].str.contains("cannot be NaN"))
    assert [t.state.name for t in sweep.study().trials] == ["FAIL"] * 2


def test_status_shows_feasibility_only_once_optunas_constraints_set_a_trial_apart(workdir):
    """Every sweep of an objective carries Optuna's feasibility as its one constraint; a `feasible` column of
    "yes" on every row of a sweep without constraints was noise."""
    import subprocess
    import sys

    store = workdir / "st"
    plain = sl.optimize("objectives:quadratic", n_trials=3, workers=1, store=store, seed=0)
    constrained = sl.optimize("objectives:constrained", n_trials=6, workers=1, store=store,
                              sampler=optuna.samplers.RandomSampler(seed=2))
    assert any(constrained.trials()["params.x"] < 1)                         # an infeasible trial

    def header(name: str) -> str:
        cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", name, "--store", str(store)],
                            capture_output=True, text=True, timeout=120, check=True)
        return next(line for line in cp.stdout.splitlines() if "state" in line and "attempts" in line)

    assert "feasible" not in header(plain.name)
    assert "feasible" in header(constrained.name)
    failing = sl.optimize("objectives:fails", n_trials=2, workers=1, store=store, retries=0)   # no constraints
    assert set(failing.trials()["state"]) == {"failed"}
    assert "feasible" not in header(failing.name)   # a failed trial is not infeasible: it has no feasibility


_UNGUARDED = '''
import optuna
import sweeplab as sl
print("top level ran", flush=True)

def objective(trial):
    x = trial.suggest_float("x", -10, 10)
    return (x - 2) ** 2

sweep = sl.optimize(objective, n_trials=3, workers=2, store="st", seed=0, progress=False)
print("best", sorted(sweep.study().best_params), sweep.outcome.exit_code, flush=True)
'''


def test_a_script_calling_optimize_at_its_top_level_without_a_main_guard_runs_once(workdir):
    """Optuna's README form: `study.optimize(objective)` at a script's top level, no `if __name__ ==
    "__main__":`. Ported to sl.optimize, the objective was named by the script's path, so the driver's import
    check and every worker imported the script and ran its top level again: a nested sweep ran inside the
    first, and the outer one died with "has no Optuna study" deep in sweeplab. Its objective is shipped by
    value instead, as a notebook cell's is; the top level runs once."""
    script = workdir / "quick.py"
    script.write_text(_UNGUARDED)
    proc = _python([str(script)], workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("top level ran") == 1, proc.stdout + proc.stderr[-3000:]
    assert "best ['x'] 0" in proc.stdout


def test_a_second_report_at_a_step_is_ignored_in_the_curves_as_optuna_ignores_it(workdir):
    """Optuna ignores a second `trial.report` at a step (its pruner sees the first value); the sweep's curve
    logged the second one as well, so the dashboard showed a value the pruner never saw."""
    sweep = sl.optimize("objectives:reports_a_step_twice", n_trials=1, workers=1, store=workdir / "st", seed=0)
    assert list(sweep.trials()["state"]) == ["completed"]
    study = _journal(workdir / "st", sweep.name)
    assert study.trials[0].intermediate_values == {0: 0.5, 1: 0.25}
    curve = sweep.metrics()
    curve = curve[curve["key"] == "value"].sort_values("step")
    assert list(zip(curve["step"], curve["value"])) == [(0, 0.5), (1, 0.25)]


def test_an_objective_class_rather_than_an_instance_is_refused_with_the_fix(workdir):
    """sklearn_additional_args.py defines `class Objective` and passes `Objective(iris)`. Given the class
    (`--optuna mod:Objective`), every trial constructed an instance and failed ("could not be cast to
    float") until the crash loop ended the sweep; it is refused before anything is written."""
    with pytest.raises(sl.UserError, match=r"'objectives:Objective' is a class.*Objective\(\.\.\.\)"):
        sl.optimize("objectives:Objective", n_trials=2, workers=1, store=workdir / "st")
    assert not (workdir / "st").exists()


_EXEC_CELL = '''
import sweeplab as sl

CELL = """
def objective(trial):
    return trial.suggest_float("x", 0, 1)
"""

if __name__ == "__main__":
    exec(CELL)
    sweep = sl.optimize(objective, n_trials=2, workers=2, store="st", seed=0, progress=False)
    print("states", list(sweep.trials()["state"]), flush=True)
'''


def test_an_objective_from_a_cell_the_script_ran_with_exec_is_shipped_by_value(workdir):
    """A notebook-like runner exec()s a cell into the script's globals: the objective sits on `__main__`,
    so it was named by the script's path, and the script (imported) has no such function: refused with
    "has no function 'objective'". It is shipped by value, as a notebook cell's is."""
    import os
    import subprocess
    import sys

    (workdir / "runner.py").write_text(_EXEC_CELL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "runner.py"], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "states ['completed', 'completed']" in proc.stdout


def test_the_sweeps_study_refuses_to_run_trials_and_seeds_a_new_sweep_instead(workdir):
    """`sweep.study().optimize(objective, n_trials=3)` (the code an example runs to continue a study) ran
    the trials in this process into the sweep's journal: the study then held trials the sweep (best,
    trials(), dashboard, resume) never had. It names what to use instead, which works."""
    sweep = sl.optimize("objectives:quadratic", n_trials=2, workers=1, store=workdir / "st", seed=0)
    study = sweep.study()
    assert isinstance(study, optuna.study.Study)
    for call in (lambda: study.optimize(lambda t: 0.0, n_trials=1), study.ask, lambda: study.tell(0, 1.0)):
        with pytest.raises(sl.UserError, match=r"study\.(optimize|ask|tell)\(\).*sl\.optimize\(objective, "
                                               r"n_trials=N, study=sweep\.study\(\)\)"):
            call()
    assert len(sweep.study().trials) == 2 and study.best_trial.number in (0, 1)
    study.enqueue_trial({"x": 0.25})                              # a waiting trial: kept, runs first below
    more = sl.optimize("objectives:quadratic", n_trials=1, workers=1, store=workdir / "st", study=study)
    assert list(more.trials()["state"]) == ["completed"] * 3     # 2 imported + 1 new
    assert more.study().trials[2].params["x"] == 0.25


_ARGS_SCRIPT = '''
import argparse
import sweeplab as sl

parser = argparse.ArgumentParser()
parser.add_argument("--scale", type=float, default=1.0)
args = parser.parse_args()

def objective(trial):
    return trial.suggest_float("x", 0, 1) * args.scale

if __name__ == "__main__":
    sweep = sl.optimize(objective, n_trials=2, workers=2, store="st", seed=0, progress=False)
    print("ratios", sorted(round(t.value / t.params["x"]) for t in sweep.study().trials), flush=True)
'''


def test_a_script_run_with_arguments_gives_its_objective_the_arguments_it_parsed(workdir):
    """`python train.py --scale 100` with a top-level `args = parser.parse_args()`: the workers imported the
    script by path with their own command line, so the objective silently used the defaults (every value
    100 times too small; with a required argument every trial failed). Such a script's objective is
    shipped by value, with the arguments it parsed, as multiprocessing gives a child the parent's argv."""
    import os
    import subprocess
    import sys

    (workdir / "train.py").write_text(_ARGS_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "train.py", "--scale", "100"], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ratios [100, 100]" in proc.stdout, proc.stdout


def test_an_objective_module_that_exits_on_import_is_a_clear_error(workdir):
    """`--optuna train.py:objective` where train.py runs argparse at its top level: importing it with
    sweeplab's command line exited with argparse's usage of train.py ("unrecognized arguments: sweep
    --optuna ..."), not saying why; it is a UserError naming the cause and the fix, nothing written."""
    (workdir / "argtrain.py").write_text(
        "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--data', required=True)\n"
        "args = parser.parse_args()\n\ndef objective(trial):\n    return trial.suggest_float('x', 0, 1)\n")
    with pytest.raises(sl.UserError, match=r"importing argtrain exited \(SystemExit 2\).*if __name__"):
        sl.optimize("argtrain:objective", n_trials=1, workers=1, store=workdir / "st")
    assert not (workdir / "st").exists()


def test_a_categorical_choice_json_cannot_hold_fails_the_trial_naming_the_call_and_the_fix(workdir):
    """`suggest_categorical("act", [math.tanh, math.sin])` works in an in-memory study; in the shared journal
    every trial failed with "Object of type builtin_function_or_method is not JSON serializable" from deep in
    Optuna's storage. The trial fails with the call and how to write it."""
    sweep = sl.optimize("objectives:function_choices", n_trials=1, workers=1, store=workdir / "st", retries=0)
    row = sweep.trials().loc[0]
    assert row["state"] == "failed"
    assert "trial.suggest_categorical('act', ...): the choice <built-in function tanh>" in row["reason"]
    assert "options[trial.suggest_categorical('act', list(options))]" in row["reason"]


def test_study_optimize_arguments_are_taken_as_they_are(workdir):
    """`study.optimize(objective, n_trials=2, n_jobs=2, show_progress_bar=True, ...)` ported by renaming the call
    was refused ("study.optimize's n_jobs has no counterpart here"): it runs, n_jobs being the workers."""
    sweep = sl.optimize("objectives:quadratic", n_trials=2, store=workdir / "st", n_jobs=2, show_progress_bar=False,
                        catch=(ValueError,), gc_after_trial=True)
    assert sweep.status()["counts"] == {"completed": 2}
    from sweeplab.store import Store

    st = Store.open(workdir / "st")
    try:
        assert json.loads(st.sweep_row(sweep.name)["spec"])["workers"] == 2
    finally:
        st.close()


@pytest.mark.parametrize("kwargs, message", [
    ({"n_jobs": 2, "workers": 3}, "n_jobs=2 and workers=3 disagree"),
    ({"n_jobs": 0}, "n_jobs: expected a whole number of parallel trials >= 1, or -1 for one per CPU; got 0"),
])
def test_study_optimize_arguments_that_cannot_hold_are_refused_before_the_store(workdir, kwargs, message):
    with pytest.raises(sl.UserError, match=re.escape(message)):
        sl.optimize("objectives:quadratic", n_trials=1, store=workdir / "st", **kwargs)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_trial'"):
        sl.optimize("objectives:quadratic", n_trial=1, store=workdir / "st")
    assert not (workdir / "st").exists()


def test_a_retried_attempt_draws_new_values_not_the_failed_attempts_again(workdir):
    """A retry keeps the parameters the failed attempt suggested (x), and draws the rest anew. Its sampler
    was reseeded exactly as the failed attempt's, so the first new draw (y) repeated the failed attempt's
    first draw: y == x in every retried trial, a silent correlation. The retry's draws are seeded by the
    attempt too."""
    sweep = sl.optimize("objectives:fails_once_between_suggests", n_trials=2, workers=1, store=workdir / "st",
                        retries=1, seed=0)
    study = _journal(workdir / "st", sweep.name)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    for t in study.trials:
        assert t.params["y"] != t.params["x"], t.params


def test_an_objective_module_running_study_optimize_at_its_top_level_is_refused(workdir):
    """`sweeplab sweep --optuna quickstart.py:objective` on a script in Optuna's README form (`study =
    optuna.create_study(); study.optimize(objective, n_trials=100)` at its top level): the import check ran
    the whole plain-Optuna study in the driver, and every worker's import ran it again, before any trial of
    the sweep. It is refused, naming the fix; nothing written."""
    (workdir / "quickstart.py").write_text(
        "import optuna\n\ndef objective(trial):\n    return trial.suggest_float('x', 0, 1)\n\n"
        "study = optuna.create_study()\nstudy.optimize(objective, n_trials=100)\n")
    with pytest.raises(sl.UserError, match=r"importing quickstart .*ran study\.optimize\(\.\.\.\) at its top level"
                                           r".*if __name__"):
        sl.optimize("quickstart:objective", n_trials=1, workers=1, store=workdir / "st")
    assert not (workdir / "st").exists()
    assert optuna.study.Study.optimize.__module__ == "optuna.study.study"   # put back


_JOBLIB = '''
import optuna
import sweeplab as sl
from joblib import Parallel, delayed


def objective(trial):
    x = trial.suggest_float("x", -10, 10)
    scores = Parallel(n_jobs=2)(delayed(abs)(x - i) for i in range(4))   # cross_val_score(..., n_jobs=-1)
    return sum(scores)


if __name__ == "__main__":
    sweep = sl.optimize(objective, n_trials=3, workers=1, store="st", seed=0, progress=False)
    print("done", sweep.status()["counts"], flush=True)
'''


def test_an_objective_using_joblib_processes_leaves_no_resource_tracker_noise(workdir):
    """sklearn/sklearn_simple.py scores with `cross_val_score(..., n_jobs=-1)`: joblib keeps its process pool
    and resource tracker alive for reuse, the worker killed them as the trial's leftovers, and the sweep's
    terminal showed "resource_tracker: process died unexpectedly" and a KeyError traceback per semaphore
    after every trial. The pool is shut down as joblib would at exit."""
    pytest.importorskip("joblib")
    script = workdir / "with_joblib.py"
    script.write_text(_JOBLIB)
    proc = _python([str(script)], workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done {'completed': 3}" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "resource_tracker" not in proc.stderr, proc.stderr[-3000:]


def test_workdir_trial_runs_each_trial_in_a_directory_of_its_own(workdir):
    """sl.optimize had no way to give each trial its own working directory (`trial.workdir: trial` of a
    spec): an objective writing `model.txt` by a relative name overwrote one file from every trial."""
    sweep = sl.optimize("objectives:writes_in_cwd", n_trials=3, workers=2, store=workdir / "st", seed=0,
                        workdir="trial")
    frame = sweep.trials()
    assert list(frame["state"]) == ["completed"] * 3, list(frame["reason"])
    assert not (workdir / "model.txt").exists()
    root = (workdir / "st").resolve() / "workdirs" / sweep.name
    files = sorted(root.glob("*/model.txt"))
    assert [p.parent.name for p in files] == sorted(str(t) for t in frame.index)
    for p in files:
        _, cwd = p.read_text().split(" ", 1)
        assert Path(cwd).resolve() == p.parent.resolve()
    assert sorted(int(p.read_text().split(" ")[0]) for p in files) == [0, 1, 2]   # Optuna's trial.number


def test_workdir_is_sweep_or_trial(workdir):
    with pytest.raises(sl.UserError, match=r"workdir: 'trials' is not one of sweep \| trial"):
        sl.optimize("objectives:writes_in_cwd", n_trials=1, store=workdir / "st", workdir="trials")
    assert not (workdir / "st").exists()


def test_cli_sweep_optuna_takes_workdir_trial(workdir):
    """`sweeplab sweep --optuna ... --workdir trial` was refused ("does not apply to --optuna")."""
    run = _python(["-m", "sweeplab", "sweep", "--optuna", "objectives:writes_in_cwd", "--trials", "2",
                   "--workdir", "trial", "--store", "st", "-q"], workdir)
    assert run.returncode == 0, run.stderr
    assert not (workdir / "model.txt").exists()
    files = (workdir / "st" / "workdirs" / "writes_in_cwd").glob("*/model.txt")
    assert sorted(p.parent.name for p in files) == ["0", "1"]


_LIGHTGBM_SIMPLE = '''
import lightgbm as lgb
import numpy as np
import optuna
import sklearn.datasets
import sklearn.metrics
from sklearn.model_selection import train_test_split

import sweeplab as sl


def objective(trial):
    data, target = sklearn.datasets.load_breast_cancer(return_X_y=True)
    train_x, valid_x, train_y, valid_y = train_test_split(data, target, test_size=0.25)
    dtrain = lgb.Dataset(train_x, label=train_y)

    param = {
        "objective": "binary",
        "metric": "binary_logloss",
        "verbosity": -1,
        "boosting_type": "gbdt",
        "num_iterations": 5,
        "lambda_l1": trial.suggest_float("lambda_l1", 1e-8, 10.0, log=True),
        "lambda_l2": trial.suggest_float("lambda_l2", 1e-8, 10.0, log=True),
        "num_leaves": trial.suggest_int("num_leaves", 2, 256),
        "feature_fraction": trial.suggest_float("feature_fraction", 0.4, 1.0),
        "bagging_fraction": trial.suggest_float("bagging_fraction", 0.4, 1.0),
        "bagging_freq": trial.suggest_int("bagging_freq", 1, 7),
        "min_child_samples": trial.suggest_int("min_child_samples", 5, 100),
    }

    gbm = lgb.train(param, dtrain)
    preds = gbm.predict(valid_x)
    pred_labels = np.rint(preds)
    accuracy = sklearn.metrics.accuracy_score(valid_y, pred_labels)
    return accuracy


if __name__ == "__main__":
    study = optuna.create_study(direction="maximize")
    sl.optimize(objective, n_trials=3, study=study, workers=2, store="st", progress=False)

    print("Number of finished trials: {}".format(len(study.trials)))

    print("Best trial:")
    trial = study.best_trial

    print("  Value: {}".format(trial.value))

    print("  Params: ")
    for key, value in trial.params.items():
        print("    {}: {}".format(key, value))
    print("types", sorted((k, type(v).__name__) for k, v in trial.params.items()))
'''


def test_lightgbm_simple_runs_as_a_script_with_its_study_read_as_after_study_optimize(workdir):
    """optuna-examples lightgbm/lightgbm_simple.py (100 boosting rounds cut to 5, 3 trials), its objective
    defined in the script: what it prints from `study` after the sweep is there, with Optuna's param types."""
    pytest.importorskip("lightgbm")
    script = workdir / "lightgbm_simple.py"
    script.write_text(_LIGHTGBM_SIMPLE)
    proc = _python([str(script)], workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Number of finished trials: 3" in proc.stdout, proc.stdout
    value = float(re.search(r"Value: (\S+)", proc.stdout).group(1))   # type: ignore[union-attr]
    assert 0.5 < value <= 1.0
    types = dict(re.findall(r"\('(\w+)', '(\w+)'\)", proc.stdout))
    assert types == {"bagging_fraction": "float", "bagging_freq": "int", "feature_fraction": "float",
                     "lambda_l1": "float", "lambda_l2": "float", "min_child_samples": "int",
                     "num_leaves": "int"}, proc.stdout
