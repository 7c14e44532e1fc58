"""metric.impute: what model-based searchers assume for a failed trial (the `impute` searcher option).

Unset (the default) a failed trial is a FAIL in the Optuna study, which TPE and GP ignore, except one a
monitor stopped before any finite report (NaN, divergence), which is told as `worst`. Set, it is a completed
trial with the imputed value, marked with the user attribute `sweeplab_imputed`; `impute: none` ignores even
the monitor-stopped ones.
"""

from __future__ import annotations

from typing import Any

import pytest

from sweeplab.errors import SpecError
from sweeplab.search import make_searcher
from sweeplab.search.optuna import OptunaSearcher
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal, TrialSnapshot, TrialState

SPACE = {"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}}
METHODS = ["tpe", pytest.param("gp", marks=pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed"))]


def _searcher(method: str = "tpe", goal: Goal = Goal.MINIMIZE, **options: Any) -> OptunaSearcher:
    s = make_searcher(method, parse_parameters(SPACE), goal, 3, prefetch=False, metric="loss", **options)
    s = getattr(s, "model", s)   # TPE: the model searcher behind its random startup (search/deferred.py)
    assert isinstance(s, OptunaSearcher)
    return s


def _study_trial(searcher: OptunaSearcher, params: dict[str, Any]) -> Any:
    found = [t for t in searcher.study.get_trials(deepcopy=False) if t.params == params]
    assert len(found) == 1, found
    return found[0]


def _run(searcher: OptunaSearcher, outcomes: list[tuple[TrialState, float | None, dict[int, float]]]
         ) -> list[dict[str, Any]]:
    asked = [searcher.ask() for _ in outcomes]
    for number, (params, (state, value, steps)) in enumerate(zip(asked, outcomes, strict=True)):
        searcher.tell(number, params, state, value, steps)
    return asked


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("impute", "goal", "expected"), [
    ("worst", Goal.MINIMIZE, 3.0), ("best", Goal.MINIMIZE, 1.0),
    ("worst", Goal.MAXIMIZE, 1.0), ("best", Goal.MAXIMIZE, 3.0),
    ("latest", Goal.MINIMIZE, 7.0),
])
def test_a_failed_trial_is_told_with_the_imputed_value(method: str, impute: str, goal: Goal,
                                                       expected: float) -> None:
    searcher = _searcher(method, goal, impute=impute)
    asked = _run(searcher, [(TrialState.COMPLETED, 1.0, {}), (TrialState.COMPLETED, 3.0, {}),
                            (TrialState.FAILED, None, {0: 9.0, 1: 7.0})])
    failed = _study_trial(searcher, asked[2])
    assert failed.state.name == "COMPLETE" and failed.value == expected
    assert failed.user_attrs["sweeplab_imputed"] == impute
    assert _study_trial(searcher, asked[0]).user_attrs == {}
    assert searcher.ask() is not None


@pytest.mark.parametrize("state", [TrialState.COMPLETED, TrialState.STOPPED_BY_RULE])
def test_a_trial_that_ended_without_a_value_is_imputed_too(state: TrialState) -> None:
    """A completed trial whose objective is NaN, or one a monitor stopped before any finite report."""
    searcher = _searcher(impute="worst")
    asked = _run(searcher, [(TrialState.COMPLETED, 2.0, {}), (state, float("nan"), {})])
    assert _study_trial(searcher, asked[1]).value == 2.0


def test_user_stopped_and_pruned_trials_are_not_imputed() -> None:
    searcher = _searcher(impute="worst")
    asked = _run(searcher, [(TrialState.COMPLETED, 2.0, {}), (TrialState.STOPPED, None, {}),
                            (TrialState.PRUNED, None, {0: 5.0})])
    assert _study_trial(searcher, asked[1]).state.name == "FAIL"
    pruned = _study_trial(searcher, asked[2])
    assert pruned.state.name == "PRUNED" and "sweeplab_imputed" not in pruned.user_attrs


def test_without_impute_a_failed_trial_stays_a_failure_the_model_ignores() -> None:
    searcher = _searcher()
    asked = _run(searcher, [(TrialState.COMPLETED, 1.0, {}), (TrialState.FAILED, None, {0: 4.0})])
    failed = _study_trial(searcher, asked[1])
    assert failed.state.name == "FAIL" and failed.value is None


def test_a_failure_before_any_completed_trial_is_imputed_once_one_completes() -> None:
    """worst/best need a completed value: until then the failed trial waits as a running one."""
    searcher = _searcher(impute="worst")
    first = searcher.ask()
    searcher.tell(0, first, TrialState.FAILED, None)
    assert _study_trial(searcher, first).state.name == "RUNNING"
    searcher.tell(0, first, TrialState.FAILED, None)       # a repeated tell changes nothing
    second = searcher.ask()
    searcher.tell(1, second, TrialState.COMPLETED, 4.0)
    waited = _study_trial(searcher, first)
    assert waited.state.name == "COMPLETE" and waited.value == 4.0


@pytest.mark.parametrize("method", METHODS)
def test_replay_imputes_failed_trials_as_they_were_imputed_live(method: str) -> None:
    """After a resume the rebuilt study holds the failed trial with the imputed value as well: the value
    `tell` gave it live, from the trials completed before it (trial 0 waited for trial 1's value)."""
    history = [TrialSnapshot(0, {"x": 0.1, "y": 0.2}, TrialState.FAILED, history={"loss": ((0, 6.0),)}),
               TrialSnapshot(1, {"x": 0.5, "y": 0.5}, TrialState.COMPLETED, value=2.0),
               TrialSnapshot(2, {"x": 0.9, "y": 0.1}, TrialState.COMPLETED, value=5.0)]
    for impute, expected in (("worst", 2.0), ("best", 2.0), ("latest", 6.0)):
        searcher = _searcher(method, impute=impute)
        searcher.replay(history)
        failed = _study_trial(searcher, {"x": 0.1, "y": 0.2})
        assert failed.state.name == "COMPLETE" and failed.value == expected, impute
        assert failed.user_attrs["sweeplab_imputed"] == impute
    plain = _searcher(method)
    plain.replay(history)
    assert _study_trial(plain, {"x": 0.1, "y": 0.2}).state.name == "FAIL"


def test_replay_of_only_failures_defers_them_until_a_trial_completes() -> None:
    searcher = _searcher(impute="best")
    searcher.replay([TrialSnapshot(0, {"x": 0.1, "y": 0.2}, TrialState.FAILED)])
    assert _study_trial(searcher, {"x": 0.1, "y": 0.2}).state.name == "RUNNING"
    searcher.tell(0, {"x": 0.1, "y": 0.2}, TrialState.FAILED, None)   # already told before the restart
    params = searcher.ask()
    searcher.tell(1, params, TrialState.COMPLETED, 3.0)
    assert _study_trial(searcher, {"x": 0.1, "y": 0.2}).value == 3.0


def test_an_unknown_impute_is_a_spec_error_naming_the_key() -> None:
    with pytest.raises(SpecError) as info:
        _searcher(impute="mean")
    assert "metric.impute" in str(info.value)


@pytest.mark.parametrize("method", ["grid", "random", "sobol"])
def test_searchers_without_a_model_accept_and_ignore_impute(method: str) -> None:
    space = parse_parameters({"a": {"values": [1, 2]}})
    searcher = make_searcher(method, space, Goal.MINIMIZE, 0, metric="loss", impute="worst")
    assert searcher.ask() is not None


@pytest.mark.parametrize("method", METHODS)
def test_without_impute_a_trial_a_monitor_stopped_before_any_value_is_told_as_worst(method: str) -> None:
    """A diverged trial (the nan rule stopped it at its first report) is a verdict on its configuration: a
    model that ignored it would keep proposing the region that diverges (benchmarks/time_to_target.py)."""
    searcher = _searcher(method)
    asked = _run(searcher, [(TrialState.COMPLETED, 1.0, {}), (TrialState.COMPLETED, 3.0, {}),
                            (TrialState.STOPPED_BY_RULE, float("nan"), {}), (TrialState.FAILED, None, {})])
    stopped = _study_trial(searcher, asked[2])
    assert stopped.state.name == "COMPLETE" and stopped.value == 3.0
    assert stopped.user_attrs["sweeplab_imputed"] == "worst"
    assert _study_trial(searcher, asked[3]).state.name == "FAIL"     # a crash is still ignored
    replayed = _searcher(method)
    replayed.replay([TrialSnapshot(0, {"x": 0.1, "y": 0.2}, TrialState.STOPPED_BY_RULE),
                     TrialSnapshot(1, {"x": 0.5, "y": 0.5}, TrialState.COMPLETED, value=2.0)])
    assert _study_trial(replayed, {"x": 0.1, "y": 0.2}).value == 2.0


def test_impute_none_ignores_monitor_stopped_trials_too() -> None:
    searcher = _searcher(impute="none")
    asked = _run(searcher, [(TrialState.COMPLETED, 1.0, {}), (TrialState.STOPPED_BY_RULE, float("nan"), {})])
    assert _study_trial(searcher, asked[1]).state.name == "FAIL"
