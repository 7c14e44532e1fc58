"""Parallel trials and prefetching (issue 18): a suggestion handed out reflects every result told before it.

With several workers two trials can end in one driver turn: the suggestion prefetched after the first
result would otherwise be handed out although the second is already known. When suggestions are cheap the
wrapper withdraws the stale one and asks again; the withdrawn ask leaves no trace (same trial number and
seed), so a resumed sweep still asks what the uninterrupted one asked.
"""

from __future__ import annotations

from typing import Any

import pytest
from optuna.trial import TrialState as OptunaState

from sweeplab.search import Prefetching
from sweeplab.search.optuna import TPESearcher
from sweeplab.space import parse_parameters
from sweeplab.types import Goal, TrialSnapshot, TrialState

XY = {"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}}


def quadratic(params: dict[str, Any]) -> float:
    return (params["x"] - 0.3) ** 2 + (params["y"] - 0.7) ** 2


def _tpe() -> TPESearcher:
    return TPESearcher(parse_parameters(XY), Goal.MINIMIZE, 3, n_startup_trials=2)


def _wait_for_prefetch(searcher: Prefetching) -> None:
    assert not searcher.exhausted   # waits for the suggestion being computed in the background


def test_a_suggestion_prefetched_before_the_last_result_is_computed_again_with_it() -> None:
    plain, wrapped = _tpe(), Prefetching(_tpe())
    try:
        for number in range(4):   # sequential start: past TPE's startup trials
            a, b = plain.ask(), wrapped.ask()
            assert a == b
            plain.tell(number, a, TrialState.COMPLETED, quadratic(a))
            wrapped.tell(number, b, TrialState.COMPLETED, quadratic(b))
        batch = [wrapped.ask(), wrapped.ask()]   # two workers
        assert batch == [plain.ask(), plain.ask()]
        plain.tell(4, batch[0], TrialState.COMPLETED, quadratic(batch[0]))
        wrapped.tell(4, batch[0], TrialState.COMPLETED, quadratic(batch[0]))
        _wait_for_prefetch(wrapped)               # computed while trial 5 still runs ...
        plain.tell(5, batch[1], TrialState.COMPLETED, -1.0)     # ... which ends, the best so far, before it is used
        wrapped.tell(5, batch[1], TrialState.COMPLETED, -1.0)
        fresh = plain.ask()
        assert wrapped.ask() == fresh
        states = [t.state for t in wrapped.inner.study.get_trials(deepcopy=False)]
        # the stale suggestions, taken back, invisible to TPE: the one computed ahead when the second worker's
        # was handed out (stale at trial 4's result) and the one computed after trial 4's
        assert states.count(OptunaState.FAIL) == 2

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
