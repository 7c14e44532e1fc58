"""`study.optimize(objective, ...)` replaced by `sl.optimize(objective, ..., study=study)` in Optuna's own
examples and notebooks (quickstart.ipynb, basic/quadratic.py, faq/enqueue_trial.py): what they read from
`study` afterwards must be there, as after `study.optimize`. Real Optuna, real worker processes."""

from __future__ import annotations

import pytest

optuna = pytest.importorskip("optuna")

import sweeplab as sl  # noqa: E402

pytestmark = pytest.mark.slow


def test_the_given_study_holds_the_sweeps_trials_afterwards_as_after_study_optimize(workdir):
    """quickstart.ipynb: `study.optimize(objective, n_trials=100)` then `trial = study.best_trial`. Given to
    sl.optimize, the study stayed empty: best_trial raised 'No trials are completed yet', and a second call
    (basic/quadratic.py optimizes one study three times) ran its enqueued trials again."""
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({"svc_c": 1})
    study.enqueue_trial({"svc_c": 10})
    sweep = sl.optimize("objectives:svc_like", n_trials=3, workers=1, store=workdir / "st", study=study)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    assert [t.number for t in study.trials] == [0, 1, 2]
    assert [t.params["svc_c"] for t in study.trials[:2]] == [1, 10]
    assert study.best_trial.value == sweep.best["value"]
    assert study.best_params == sweep.best["params"]
    assert list(study.trials_dataframe()["params_svc_c"]) == list(sweep.trials()["params.svc_c"])
    assert "sweeplab_number" not in study.trials[2].system_attrs    # the sweep's own link stays in its journal
    again = sl.optimize("objectives:svc_like", n_trials=2, workers=1, store=workdir / "st", study=study)
    assert len(again.trials()) == 5                               # 3 imported, 2 new: the queue is used up
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 5
    assert [t.number for t in study.trials] == list(range(5))


def test_tuple_choices_read_back_as_tuples_in_the_given_study_as_optuna_holds_them(workdir):
    """The journal stores choices as JSON lists; written back as lists, `study.best_params` was not the
    value the objective got, and the next `study.optimize` on that study met two distributions of one name."""
    study = optuna.create_study()
    sl.optimize("objectives:tuple_choices", n_trials=2, workers=1, store=workdir / "st", study=study, seed=0)
    assert study.best_params["layers"] in ((50,), (50, 50))
    import objectives

    study.optimize(objectives.tuple_choices, n_trials=1)      # plain Optuna continues the same study
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3


def test_a_number_as_text_fails_the_trial_as_optuna_refuses_it(workdir):
    """`return "0.5"` (a score read back from a file): Optuna never takes a string (it is a Sequence of
    characters to `study.tell`), sweeplab's float("0.5") completed the trial with it."""
    sweep = sl.optimize("objectives:returns_text", n_trials=1, workers=1, store=workdir / "st", retries=0)
    row = sweep.trials().loc[0]
    assert row["state"] == "failed" and "could not be cast to float" in row["reason"], row["reason"]


def test_n_trials_none_runs_until_the_study_stops_as_optuna_does(workdir):
    """The ablation tutorial's `study.optimize(objective)` with a BruteForceSampler runs every point, then
    the sampler stops the study; `n_trials=None` without a timeout was refused."""
    study = optuna.create_study(sampler=optuna.samplers.BruteForceSampler(seed=0))
    sweep = sl.optimize("objectives:brute", None, workers=1, store=workdir / "st", study=study)
    assert sweep.outcome.exit_code == 0 and "study.stop()" in sweep.outcome.reason
    assert {(t.params["a"], t.params["b"]) for t in study.trials} == {(a, b) for a in range(12) for b in (0, 10)}
    assert len(study.trials) == 24


def test_the_given_study_gets_each_trial_as_it_ends_also_for_a_background_sweep(workdir):
    """A callback that reads the notebook's `study` (a closure, not its argument) saw no trial, and a
    background sweep's study stayed empty for good."""
    study = optuna.create_study()
    seen = []

    def callback(sweeps_study, frozen):
        seen.append((frozen.number, len(study.trials)))
        sweeps_study.set_user_attr("last", frozen.number)

    sweep = sl.optimize("objectives:quadratic", n_trials=3, workers=1, store=workdir / "st", study=study,
                        callbacks=[callback], background=True)
    sweep.wait()
    assert seen == [(0, 1), (1, 2), (2, 3)]
    assert study.user_attrs == {"last": 2}                     # what a callback set on its study argument
    assert [(t.number, t.state.name) for t in study.trials] == [(0, "COMPLETE"), (1, "COMPLETE"), (2, "COMPLETE")]
    assert study.best_value == sweep.best["value"]


def test_a_user_attr_json_cannot_hold_fails_the_trial_naming_the_call_and_the_fix(workdir):
    """`trial.set_user_attr("finished_at", datetime(...))` (kept as is by an in-memory study) failed the
    trial with json's bare 'Object of type datetime is not JSON serializable', naming neither the call nor
    why a study that Optuna takes it in refuses it here."""
    sweep = sl.optimize("objectives:datetime_attr", n_trials=1, workers=1, store=workdir / "st", retries=0)
    reason = sweep.trials().loc[0, "reason"]
    assert "trial.set_user_attr('finished_at', datetime.datetime(2026, 1, 2, 0, 0))" in reason, reason
    assert "str(value)" in reason, reason


def test_a_direction_against_the_given_studys_is_refused_before_anything_is_written(workdir):
    """`study=` a minimizing study with direction="maximize" ran a maximizing sweep whose trials then went
    into the minimizing study: its best_trial was the sweep's worst."""
    study = optuna.create_study(direction="minimize")
    with pytest.raises(sl.UserError, match=r"study .*\(minimize\).*direction"):
        sl.optimize("objectives:quadratic", n_trials=1, workers=1, store=workdir / "st", study=study,
                    direction="maximize")
    assert not (workdir / "st").exists() and study.trials == []
    same = sl.optimize("objectives:quadratic", n_trials=1, workers=1, store=workdir / "st", study=study,
                       direction="minimize")                      # the study's own: taken
    assert same.outcome.exit_code == 0 and len(study.trials) == 1


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::optuna.exceptions.ExperimentalWarning")
def test_a_stale_trial_of_a_heartbeat_storage_is_failed_and_retried_first_as_study_optimize_does(workdir):
    """pytorch/pytorch_checkpoint.py: an RDB study with `heartbeat_interval` and a RetryFailedTrialCallback,
    rerun after `timeout 20 python ...` killed it mid-trial. `study.optimize` fails the stale trial and runs
    its retry (same params, `failed_trial` system attr) first; sl.optimize left it RUNNING for ever, never
    ran the retry, and the objective's `trial.number` was one less than the trial's number in the study."""
    from optuna.storages import RetryFailedTrialCallback

    storage = optuna.storages.RDBStorage(f"sqlite:///{workdir}/example.db", heartbeat_interval=1, grace_period=1,
                                         failed_trial_callback=RetryFailedTrialCallback())
    study = optuna.create_study(storage=storage, study_name="ckpt", direction="maximize", load_if_exists=True)
    killed = storage.create_new_trial(study._study_id)      # the killed process's trial: it beat once
    dist = optuna.distributions.FloatDistribution(0.0, 1.0)
    storage.set_trial_param(killed, "x", 0.25, dist)
    storage.record_heartbeat(killed)
    import time

    # stale once its heartbeat is more than grace_period old by the database's clock, which SQLite's
    # CURRENT_TIMESTAMP keeps in whole seconds: 1.5 s could read as 1 s (not stale; a clean-clone run failed)
    time.sleep(2.5)
    study = optuna.load_study(storage=storage, study_name="ckpt")
    sl.optimize("objectives:checkpointed", n_trials=2, workers=1, store=workdir / "st", study=study, timeout=600)
    trials = study.trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert trials[1].params == {"x": 0.25} and trials[1].system_attrs.get("failed_trial") == 0
    assert [t.user_attrs.get("number") for t in trials[1:]] == [1, 2]     # the number the objective saw
    assert study.best_trial.number in (1, 2)


def test_a_trial_a_killed_run_left_running_keeps_the_numbers_the_objective_sees(workdir):
    """A notebook's kernel restarted (or a run killed) mid-trial leaves that trial RUNNING in its SQLite study;
    rerun with `load_if_exists=True`, `study.optimize` numbers the next trials after it. The sweep left it out
    of its own study, so the objective saw `trial.number` 2 for the trial the study then recorded as 3 (files
    named after the trial number no longer matched the study's)."""
    import objectives

    study = optuna.create_study(storage=f"sqlite:///{workdir}/nb.db", study_name="nb", load_if_exists=True)
    study.optimize(objectives.checkpointed, n_trials=2)
    study.ask().suggest_float("x", 0.0, 1.0)                 # the killed run's trial: RUNNING for ever
    study = optuna.create_study(storage=f"sqlite:///{workdir}/nb.db", study_name="nb", load_if_exists=True)
    sweep = sl.optimize("objectives:checkpointed", n_trials=2, workers=1, store=workdir / "st", study=study)
    trials = study.trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "RUNNING", "COMPLETE", "COMPLETE"]
    assert [t.user_attrs.get("number") for t in trials] == [0, 1, None, 3, 4]
    frame = sweep.trials()
    assert list(frame["state"]) == ["completed", "completed", "failed", "completed", "completed"]
    assert "running there" in frame["reason"][2], frame["reason"][2]
    assert sweep.best["trial"] in (0, 1, 3, 4)


def test_trials_another_process_adds_to_the_given_study_meanwhile_are_warned_of(workdir):
    """Optuna's distributed mode, the same script in two terminals on one RDB study, ported with sl.optimize:
    each sweep has a study of its own seeded when it starts, so neither's sampler sees the other's new
    trials, and its trials land in the shared study under other numbers than their objective saw. Nothing
    said so; a warning now names it and the fix (one sweep with more workers)."""
    import objectives

    study = optuna.create_study(storage=f"sqlite:///{workdir}/d.db", study_name="d")
    other = optuna.load_study(storage=f"sqlite:///{workdir}/d.db", study_name="d")   # the other terminal's

    def another_process(_study, trial):
        if trial.number == 0:
            other.optimize(objectives.checkpointed, n_trials=1)

    with pytest.warns(UserWarning, match=r"another process.*workers="):
        sl.optimize("objectives:checkpointed", n_trials=2, workers=1, store=workdir / "st", study=study,
                    callbacks=[another_process])
    assert [t.user_attrs["number"] for t in study.trials] == [0, 1, 1]   # its trial 1 is the study's 2
