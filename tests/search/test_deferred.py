"""TPE's random startup without Optuna (search/deferred.py): the first `n_startup_trials` asks are drawn from
the prior before the model searcher exists, which is built in the background once trials run."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from sweeplab.errors import MissingExtraError, SpecError
from sweeplab.search import make_searcher
from sweeplab.search.deferred import Deferred
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal, TrialSnapshot, TrialState

SPACE = {"x": {"min": -2.0, "max": 2.0}, "y": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1.0},
         "k": {"values": ["a", "b", "c"], "probabilities": [0.6, 0.2, 0.2]}}


def _value(p: dict[str, Any]) -> float:
    return (p["x"] - 0.5) ** 2 + abs(p["y"] - 0.01) + (p["k"] == "b")


def _tpe(seed: int = 4, method: str = "tpe") -> Deferred:
    s = make_searcher(method, parse_parameters(SPACE), Goal.MINIMIZE, seed, prefetch=False, metric="loss")
    assert isinstance(s, Deferred)
    return s


def _sequential(s: Deferred, n: int, *, warm_at: int | None = None, start: int = 0) -> list[dict[str, Any]]:
    asked = []
    for number in range(start, start + n):
        if number == warm_at:
            s.warm_up()
        p = s.ask()
        assert p is not None
        asked.append(p)
        s.tell(number, p, TrialState.COMPLETED, _value(p), {0: _value(p) + 1})
    return asked


@pytest.mark.parametrize(("method", "startup", "model"),
                         [("tpe", [], "optuna"), ("bayes", ["numpy", "optuna"], "torch")])
def test_the_startup_asks_import_no_model_and_the_first_model_ask_does(method: str, startup: list[str],
                                                                      model: str) -> None:
    """In a fresh interpreter, as a sweep's driver: TPE's ten startup asks import neither Optuna nor numpy, the
    GP's import no torch (they need Optuna's distributions to map the design as the GP does). With
    `Prefetching`, as the driver builds it, the first ask does not either: a warm-up imports them once trials
    run."""
    code = f"""
import sys
from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.types import Goal, TrialState
space = parse_parameters({SPACE!r})
driven = make_searcher({method!r}, space, Goal.MINIMIZE, 0)
driven.ask()
assert "torch" not in sys.modules and ("optuna" in sys.modules) == ("optuna" in {startup!r})
driven.close()
s = make_searcher({method!r}, space, Goal.MINIMIZE, 0, prefetch=False)
for n in range(10):
    p = s.ask()
    s.tell(n, p, TrialState.COMPLETED, float(n))
print(sorted(m for m in ("optuna", "numpy", "torch") if m in sys.modules))
s.ask()
print({model!r} in sys.modules)
s.close()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split("\n")[:2] == [repr(startup), "True"], out.stdout + out.stderr


def test_suggestions_do_not_depend_on_when_the_model_was_built() -> None:
    never, early, late = _tpe(), _tpe(), _tpe()
    a = _sequential(never, 25)
    assert _sequential(early, 25, warm_at=1) == a     # built in the background during the startup
    assert _sequential(late, 25, warm_at=14) == a     # built after it
    assert len({(p["x"], p["y"]) for p in a}) == 25
    for s in (never, early, late):
        s.close()


@pytest.mark.parametrize("k", [4, 10, 13])
def test_a_resume_before_during_and_after_the_startup_continues_the_sweep(k: int) -> None:
    whole = _tpe()
    full = _sequential(whole, 20)
    resumed = _tpe()
    resumed.replay([TrialSnapshot(i, p, TrialState.COMPLETED, history={"loss": ((0, _value(p) + 1),)},
                                  value=_value(p)) for i, p in enumerate(full[:k])])
    assert _sequential(resumed, 20 - k, start=k) == full[k:]


def test_the_model_holds_the_startup_trials_asked_running_and_told() -> None:
    s = _tpe()
    asked = [s.ask() for _ in range(3)]
    s.tell(1, asked[1], TrialState.COMPLETED, 0.25, {0: 0.5, 1: 0.25})
    s.tell(2, asked[2], TrialState.PRUNED, None, {0: 3.0})
    trials = s.study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["RUNNING", "COMPLETE", "PRUNED"]
    assert trials[1].value == 0.25 and trials[2].intermediate_values == {0: 3.0}
    s.tell(0, asked[0], TrialState.COMPLETED, 0.125)   # a trial asked before the model existed, told after
    assert s.study.get_trials(deepcopy=False)[0].value == 0.125
    s.close()


def test_a_withdrawn_startup_ask_is_asked_again_with_the_same_draw() -> None:
    s = _tpe()
    first = s.ask()
    second = s.ask()
    assert not s.withdraw(first)   # only the latest can be taken back
    assert s.withdraw(second)
    assert s.ask() == second
    assert len(s.study.get_trials(deepcopy=False)) == 2
    s.close()


def test_bad_options_and_a_missing_optuna_are_refused_when_the_searcher_is_made(monkeypatch) -> None:
    space = parse_parameters(SPACE)
    with pytest.raises(SpecError, match="metric.impute"):
        make_searcher("tpe", space, Goal.MINIMIZE, 0, impute="mean")
    with pytest.raises(SpecError, match="unknown option"):
        make_searcher("tpe", space, Goal.MINIMIZE, 0, population_size=4)
    monkeypatch.setitem(sys.modules, "optuna", None)   # what an install without the extra looks like
    with pytest.raises(MissingExtraError, match=r"sweeplab\[bayes\]"):
        make_searcher("tpe", space, Goal.MINIMIZE, 0)


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
@pytest.mark.parametrize("k", [4, 10])   # later, its kernel fit's warm start differs (search/optuna.py)
def test_a_gp_resumed_before_or_after_its_startup_design_continues_the_sweep(k: int) -> None:
    whole = _tpe(method="bayes")
    full = _sequential(whole, 15, warm_at=2)
    resumed = _tpe(method="bayes")
    resumed.replay([TrialSnapshot(i, p, TrialState.COMPLETED, history={"loss": ((0, _value(p) + 1),)},
                                  value=_value(p)) for i, p in enumerate(full[:k])])
    assert _sequential(resumed, 15 - k, start=k) == full[k:]


def test_trials_of_another_space_count_as_the_model_counts_them() -> None:
    """A forked sweep's history holds trials of the old space: the model skips them, so the startup does too
    (trial k of the startup is then the k-th of this space's trials, as the model numbers its asks)."""
    plain, forked = _tpe(), _tpe()
    expected = [plain.ask() for _ in range(4)]
    forked.replay([TrialSnapshot(0, {"x": 0.5, "old": 1}, TrialState.COMPLETED, value=1.0),
                   TrialSnapshot(1, expected[0], TrialState.COMPLETED, value=2.0)])
    assert [forked.ask() for _ in range(3)] == expected[1:]
    assert len(forked.study.get_trials(deepcopy=False)) == 4
