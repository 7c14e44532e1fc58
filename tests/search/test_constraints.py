"""Constraints and the Bayesian searchers: every trial Optuna's samplers read as completed carries the
sweep's constraint values, imputed failures included, and a windowed TPE keeps the best feasible trials."""

from __future__ import annotations

import random
from typing import Any

import optuna
import pytest

import sweeplab.search.optuna as searchopt
from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal, TrialSnapshot, TrialState

SPACE = {"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}}
GP = pytest.param("gp", marks=pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed"))
BAYES = pytest.param("bayes", marks=pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed"))
# a failure the searcher imputes: a monitor's stop before any finite report without `impute` (told as worst),
# or a crash with `impute`
NAN = float("nan")
FAILURES = [(TrialState.STOPPED_BY_RULE, {}, NAN), (TrialState.FAILED, {"impute": "worst"}, 0.5),
            (TrialState.FAILED, {"impute": "latest"}, 0.5)]
IDS = ["monitor-stop", "impute-worst", "impute-latest"]


def _run(method: str, state: TrialState, options: dict[str, Any], report: float, n: int = 8) -> Any:
    s = make_searcher(method, parse_parameters(SPACE), Goal.MINIMIZE, 0, prefetch=False, n_startup_trials=3,
                      metric="loss", constraints=1, **options)
    history = []
    for k in range(n):
        p = s.ask()
        if k == 1:   # failed before reporting the constrained metric: the driver has no violations for it
            s.tell(k, p, state, None, {1: report})
            # a resume rates each stored trial from its metrics: the constrained one missing breaks it by 1.0
            history.append(TrialSnapshot(k, p, state, history={"loss": ((1, report),)}, constraints=(1.0,)))
        else:
            cons = (p["x"] - 0.5,)
            s.tell(k, p, TrialState.COMPLETED, p["x"] + p["y"], constraints=cons)
            history.append(TrialSnapshot(k, p, TrialState.COMPLETED, value=p["x"] + p["y"], constraints=cons))
    return s, history


@pytest.mark.parametrize("state,options,report", FAILURES, ids=IDS)
@pytest.mark.parametrize("method", ["tpe", GP, BAYES])
def test_an_imputed_failure_in_a_sweep_with_constraints_does_not_break_the_searcher(method, state, options, report):
    """Optuna's GP needs every completed trial to hold as many constraint values as the others: an imputed
    trial told without any ended the sweep ("the searcher failed: ValueError: The number of constraints must
    be the same for all trials"). An imputed failure that never reported the constrained metric is
    infeasible, as the driver rates any trial without it (and as a resume rebuilt it)."""
    s, _ = _run(method, state, options, report)
    assert set(s.ask()) == {"x", "y"}
    study = getattr(s, "model", s).study
    done = [t for t in study.get_trials(deepcopy=False) if t.state is optuna.trial.TrialState.COMPLETE]
    assert all(len(t.constraints) == 1 for t in done)
    imputed = [t for t in done if searchopt._IMPUTED_ATTR in t.user_attrs]
    assert len(imputed) == 1 and imputed[0].constraints == {"0": 1.0}


@pytest.mark.parametrize("state,options,report", FAILURES, ids=IDS)
def test_a_resumed_tpe_sees_an_imputed_failure_as_the_live_one_did(state, options, report):
    s, history = _run("tpe", state, options, report)
    resumed = make_searcher("tpe", parse_parameters(SPACE), Goal.MINIMIZE, 0, prefetch=False, n_startup_trials=3,
                            metric="loss", constraints=1, **options)
    resumed.replay(history)

    def told(searcher: Any) -> list[Any]:
        return [(t.state, t.value, t.constraints) for t in getattr(searcher, "model", searcher).study.get_trials()]

    assert told(resumed) == told(s)
    assert resumed.ask() == s.ask()


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_the_tpe_window_keeps_the_best_feasible_trials(monkeypatch: pytest.MonkeyPatch, direction: str) -> None:
    """The windowed TPE (long sweeps) keeps the best trials of the whole history so that TPE's good group is
    exact; with constraints that group is the best *feasible* trials. Keeping the best values whatever their
    feasibility dropped the best feasible trials once they left the window, wherever the best values broke a
    constraint (as a memory bound does): TPE's good group then held worse trials than Optuna's own."""
    monkeypatch.setattr(searchopt, "TPE_WINDOW", 12)
    monkeypatch.setattr(searchopt, "_TPE_KEEP_BEST", 4)
    from optuna.samplers._tpe.sampler import _split_trials

    rng = random.Random(2)
    study = optuna.create_study(direction=direction)
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    cache = searchopt._BestCache()
    sign = 1.0 if direction == "minimize" else -1.0
    for k in range(80):
        trial = study.ask(dist)
        if rng.random() < 0.1:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        x = trial.params["x"]
        good = sign * x   # the best values lie where x < 0.4, which breaks the constraint
        trial.set_constraint("0", 0.4 - x + (0.5 if k > 30 else 0.0))   # and late trials are all infeasible
        study.tell(trial, good)
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.RUNNING)
        every = study._get_trials(deepcopy=False, states=states)
        view = searchopt._WindowView(study, searchopt.TPE_WINDOW, cache)._get_trials(deepcopy=False, states=states)
        for n_below in (1, 2, 4):
            below_view, _ = _split_trials(study, view, n_below)
            below_all, _ = _split_trials(study, every, n_below)
            assert [t.number for t in below_view] == [t.number for t in below_all], (k, n_below)


def test_an_infeasible_trial_reaching_metric_target_does_not_end_the_sweep(tmp_path):
    """`metric.target` ends the sweep once a trial reaches it; an infeasible trial is never the best, so its
    value reaching the target ended the sweep with no usable trial at all (`best` None)."""
    from sweeplab._clock import FakeClock
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store
    from sweeplab.testing.fake import FakeBackend, Script

    outcomes = {0: {"loss": 0.01, "mem": 9.0}, 1: {"loss": 0.5, "mem": 1.0}, 2: {"loss": 0.02, "mem": 1.0},
                3: {"loss": 0.3, "mem": 1.0}}
    spec = parse_spec({"function": "fake_trials:train", "method": "random", "seed": 7,
                       "metric": {"name": "loss", "goal": "minimize", "target": 0.05},
                       "parameters": {"x": {"min": 0.0, "max": 1.0}}, "budget": {"trials": 4},
                       "constraints": [{"metric": "mem", "max": 4}]}, file="<test>")
    clock = FakeClock()
    store = Store.open(tmp_path / "store")
    backend = FakeBackend(clock, lambda task: Script().finish(outcomes[task.number], after=1.0), slots=1)
    driver = Driver(spec, store, backend, sweep_name="s", clock=clock, cwd=str(tmp_path))
    driver.create(spec_path=None)
    outcome = driver.run()
    try:
        assert outcome.best_trial == 2
        assert "reached by trial 2" in (outcome.reason or ""), outcome.reason
        assert outcome.counts.get("completed") == 3
    finally:
        driver.unlock()
        store.close()


def test_a_pruned_trial_reaches_tpe_with_the_same_constraints_live_and_resumed():
    """A pruned trial's violations (it reported the constrained metric before its rung) were set on the live
    study's trial, where TPE then ranked it among the infeasible ones, but a resume left them out (`replay`
    gives constraints to completed trials only): the two studies differed. Only completed trials carry them."""
    space = parse_parameters(SPACE)

    def searcher() -> Any:
        return make_searcher("tpe", space, Goal.MINIMIZE, 0, prefetch=False, n_startup_trials=2, metric="loss",
                             constraints=1)

    live, history = searcher(), []
    for k in range(6):
        p = live.ask()
        state = TrialState.PRUNED if k % 2 else TrialState.COMPLETED
        value = None if state is TrialState.PRUNED else p["x"]
        live.tell(k, p, state, value, {1: p["x"]}, constraints=(p["y"] - 0.5,))
        history.append(TrialSnapshot(k, p, state, history={"loss": ((1, p["x"]),)}, value=value,
                                     constraints=(p["y"] - 0.5,)))
    resumed = searcher()
    resumed.replay(history)

    def told(s: Any) -> list[Any]:
        return [(t.state.name, t.constraints) for t in getattr(s, "model", s).study.get_trials()]

    assert told(resumed) == told(live)
    assert all(not c for state, c in told(live) if state == "PRUNED")
