"""Parallel trials and prefetching (issue 18): a suggestion handed out reflects every result told before it.

With several workers two trials can end in one driver turn: the suggestion prefetched after the first
result would otherwise be handed out although the second is already known. When suggestions are cheap the
wrapper withdraws the stale one and asks again; the withdrawn ask leaves no trace (same trial number and
seed), so a resumed sweep still asks what the uninterrupted one asked.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from optuna.trial import TrialState as OptunaState

from sweeplab.search import Prefetching
from sweeplab.search.optuna import TPESearcher
from sweeplab.search.random import RandomSearcher
from sweeplab.space import parse_parameters
from sweeplab.types import Goal, TrialSnapshot, TrialState

XY = {"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}}


def quadratic(params: dict[str, Any]) -> float:
    return (params["x"] - 0.3) ** 2 + (params["y"] - 0.7) ** 2


def _tpe() -> TPESearcher:
    return TPESearcher(parse_parameters(XY), Goal.MINIMIZE, 3, n_startup_trials=2)


def _wait_for_prefetch(searcher: Prefetching) -> None:
    assert not searcher.exhausted   # waits for the suggestion being computed in the background


def _two_workers_then_results(wrapped: Prefetching, plain: TPESearcher, between: Any = None) -> dict[str, Any]:
    """A sequential start past TPE's startup trials, two trials handed out, then both results, the second
    the best so far; returns what the wrapper and the plain searcher ask next (they must agree)."""
    for number in range(4):
        a, b = plain.ask(), wrapped.ask()
        assert a == b
        plain.tell(number, a, TrialState.COMPLETED, quadratic(a))
        wrapped.tell(number, b, TrialState.COMPLETED, quadratic(b))
    batch = [wrapped.ask(), wrapped.ask()]   # two workers
    assert batch == [plain.ask(), plain.ask()]
    if between is not None:
        between()
    plain.tell(4, batch[0], TrialState.COMPLETED, quadratic(batch[0]))
    wrapped.tell(4, batch[0], TrialState.COMPLETED, quadratic(batch[0]))
    _wait_for_prefetch(wrapped)               # anything computed while trial 5 still runs ...
    plain.tell(5, batch[1], TrialState.COMPLETED, -1.0)     # ... which ends, the best so far, before it is used
    wrapped.tell(5, batch[1], TrialState.COMPLETED, -1.0)
    fresh = plain.ask()
    assert wrapped.ask() == fresh
    return fresh


def _failed(searcher: Prefetching) -> int:
    return [t.state for t in searcher.inner.study.get_trials(deepcopy=False)].count(OptunaState.FAIL)


def test_a_cheap_searcher_computes_nothing_ahead_while_trials_run() -> None:
    """A suggestion computed while a trial runs would be withdrawn at its result (TPE: a few ms of the
    driver's CPU per trial for nothing, on the cores the workers use): the next is asked after it."""
    plain, wrapped = _tpe(), Prefetching(_tpe())
    try:
        _two_workers_then_results(wrapped, plain)
        assert _failed(wrapped) == 0   # no suggestion taken back: none was computed before a result
    finally:
        wrapped.close()


def test_a_suggestion_prefetched_before_the_last_result_is_computed_again_with_it(monkeypatch: Any) -> None:
    """One computed ahead while asks were expensive, stale once they are cheap: withdrawn and asked again, and
    the withdrawn ask leaves no trace (a resume asks the same)."""
    import sweeplab.search.prefetch as prefetch

    plain, wrapped = _tpe(), Prefetching(_tpe())
    try:
        monkeypatch.setattr(prefetch, "FRESH_UNDER", 0.0)       # expensive: the next is computed ahead ...
        fresh = _two_workers_then_results(wrapped, plain,       # ... and cheap again by the results
                                          between=lambda: monkeypatch.setattr(prefetch, "FRESH_UNDER", 1e9))
        # the stale suggestions, taken back, invisible to TPE: the one computed ahead when the second worker's
        # was handed out (stale at trial 4's result); none after trial 4's (trial 5 still ran)
        assert _failed(wrapped) == 1

        resumed = Prefetching(_tpe())   # a resume from the same history asks the same trial 6
        try:
            told = [plain._decode(t.params) for t in plain.study.get_trials(deepcopy=False)[:6]]
            resumed.replay([TrialSnapshot(i, p, TrialState.COMPLETED, value=quadratic(p) if i < 5 else -1.0)
                            for i, p in enumerate(told)])
            assert resumed.ask() == fresh
        finally:
            resumed.close()
    finally:
        wrapped.close()


def _stale_after_two_results(wrapped: Prefetching, clock: list[float], seconds: float) -> list[OptunaState]:
    """Two workers; both trials last `seconds` (on `clock`); the suggestion computed ahead when the first
    result came is stale at the second. The inner study's trial states after the next ask."""
    wrapped.clock = lambda: clock[0]
    batch = [wrapped.ask(), wrapped.ask()]
    clock[0] += seconds
    wrapped.tell(0, batch[0], TrialState.COMPLETED, quadratic(batch[0]))
    _wait_for_prefetch(wrapped)
    wrapped.tell(1, batch[1], TrialState.COMPLETED, quadratic(batch[1]))
    wrapped.ask()
    return [t.state for t in wrapped.inner.study.get_trials(deepcopy=False)]


@pytest.mark.parametrize(("seconds", "recomputed"), [(1e4, True), (0.0, False)])
def test_an_expensive_searcher_recomputes_a_stale_suggestion_only_for_long_trials(
        monkeypatch: Any, seconds: float, recomputed: bool) -> None:
    """Above FRESH_UNDER an ask is still cheap against trials 100x longer (FRESH_SHARE): with trials of
    hours a stale GP suggestion is computed again (it lagged a result behind, which costs search quality
    with many workers); with instant trials it is kept (recomputing would idle a worker)."""
    import sweeplab.search.prefetch as prefetch

    monkeypatch.setattr(prefetch, "FRESH_UNDER", 0.0)   # every ask counts as expensive
    wrapped = Prefetching(_tpe())
    try:
        states = _stale_after_two_results(wrapped, [0.0], seconds)
        assert (OptunaState.FAIL in states) is recomputed   # the stale one withdrawn (FAIL) and asked again
    finally:
        wrapped.close()


def test_an_expensive_searcher_keeps_its_stale_suggestion(monkeypatch: Any) -> None:
    """Recomputing a GP suggestion would idle a worker: above FRESH_UNDER seconds the prefetched one stays."""
    import sweeplab.search.prefetch as prefetch

    monkeypatch.setattr(prefetch, "FRESH_UNDER", 0.0)
    wrapped = Prefetching(_tpe())
    try:
        batch = [wrapped.ask(), wrapped.ask()]
        wrapped.tell(0, batch[0], TrialState.COMPLETED, quadratic(batch[0]))
        _wait_for_prefetch(wrapped)
        wrapped.tell(1, batch[1], TrialState.COMPLETED, quadratic(batch[1]))
        wrapped.ask()
        states = [t.state for t in wrapped.inner.study.get_trials(deepcopy=False)]
        assert OptunaState.FAIL not in states
    finally:
        wrapped.close()


class _Blocking(RandomSearcher):
    """Random (cannot withdraw: computes ahead); an ask in a background thread waits for `release`."""

    def __init__(self) -> None:
        super().__init__(parse_parameters(XY), Goal.MINIMIZE, 0)
        self.release = threading.Event()
        self.background = 0

    def ask(self) -> dict[str, Any] | None:
        if threading.current_thread() is not threading.main_thread():
            self.background += 1
            assert self.release.wait(30)
        return super().ask()


def test_nothing_is_computed_in_the_background_inside_deferring() -> None:
    """The driver hands trials out inside `deferring()`: a suggestion computed ahead starts when it ends."""
    inner = _Blocking()
    inner.release.set()
    wrapped = Prefetching(inner)          # computed at construction, in the background
    try:
        wrapped.ask()
        for thread in threading.enumerate():   # the construction's prefetch, ending
            if thread.name == "sweeplab-prefetch":
                thread.join(30)
        inner.release.clear()
        with wrapped.deferring():
            wrapped.ask()                 # two in flight: the next one is wanted ahead ...
            assert inner.background == 1 and not any(t.name == "sweeplab-prefetch" for t in threading.enumerate())
        assert any(t.name == "sweeplab-prefetch" for t in threading.enumerate())   # ... and started now
        inner.release.set()
        assert not wrapped.exhausted and inner.background == 2
    finally:
        inner.release.set()
        wrapped.close()


def test_telling_a_completed_trial_does_not_copy_its_curve_into_optuna(monkeypatch: Any) -> None:
    """No sampler reads a completed trial's intermediate values (TPE and CMA-ES read a pruned one's last):
    reporting each of an xgboost trial's hundreds of steps cost ~0.6 ms of the driver per trial, between the
    trial's end and its slot's next one. A pruned trial keeps its curve."""
    import optuna

    reports: list[int] = []
    report = optuna.trial.Trial.report
    monkeypatch.setattr(optuna.trial.Trial, "report",
                        lambda self, v, step: (reports.append(step), report(self, v, step))[1])
    searcher = _tpe()
    curve = {step: 1.0 / (step + 1) for step in range(300)}
    done, pruned = searcher.ask(), searcher.ask()
    searcher.tell(0, done, TrialState.COMPLETED, 0.01, intermediate=curve)
    assert reports == []
    searcher.tell(1, pruned, TrialState.PRUNED, None, intermediate={0: 2.0, 1: 1.5})
    assert reports == [0, 1]
    trials = searcher.study.get_trials(deepcopy=False)
    assert trials[0].value == 0.01 and trials[1].intermediate_values == {0: 2.0, 1: 1.5} and trials[1].value == 1.5


class _CheapWithSlowWarmUp(RandomSearcher):
    """Cheap and able to withdraw (as TPE, or the GP in its random start): its warm-up blocks until released."""

    def __init__(self) -> None:
        super().__init__(parse_parameters(XY), Goal.MINIMIZE, 0)
        self.warmed, self.release, self.finished = threading.Event(), threading.Event(), threading.Event()

    def withdraw(self, params: Any) -> bool:
        return True

    def warm_up(self) -> None:
        self.warmed.set()
        self.release.wait(30)
        self.finished.set()


def test_a_cheap_searcher_still_warms_up_once_a_trial_runs_and_close_waits_for_it() -> None:
    """Computing nothing ahead must not skip the GP's warm-up (its first model-based ask's imports, paid while
    the random start runs), and closing waits for it (a torch GP at interpreter exit aborted the driver)."""
    inner = _CheapWithSlowWarmUp()
    wrapped = Prefetching(inner)
    with wrapped.deferring():
        wrapped.ask()
        wrapped.ask()                   # two workers fed: nothing computed ahead, the warm-up starts ...
        assert not inner.warmed.is_set()
    assert inner.warmed.wait(30)        # ... once the driver's turn ends
    closer = threading.Thread(target=wrapped.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive() and not inner.finished.is_set()
    inner.release.set()
    closer.join(30)
    assert not closer.is_alive() and inner.finished.is_set()
