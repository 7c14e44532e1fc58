"""Feeding many workers with the GP (issue 18): the Kriging believer fits its kernel once per set of completed
trials (a batch of free slots shares it; running trials only update the posterior), leaves the random startup
once half its trials have completed, runs torch on one thread; Prefetching computes the next suggestion as
soon as one is handed out while other trials run, and warms the GP up in the background."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest

import sweeplab.search.optuna as searchopt
from sweeplab.search import Prefetching, make_searcher
from sweeplab.search.random import RandomSearcher
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal, TrialSnapshot, TrialState

XY = {"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}}
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


def quadratic(params: dict[str, Any]) -> float:
    return (params["x"] - 0.3) ** 2 + (params["y"] - 0.7) ** 2


def _history(n: int, running: int = 0) -> list[TrialSnapshot]:
    points = [{"x": (k * 0.37) % 1.0, "y": (k * 0.61) % 1.0} for k in range(n + running)]
    return [TrialSnapshot(k, p, TrialState.COMPLETED, value=quadratic(p)) if k < n
            else TrialSnapshot(k, p, TrialState.RUNNING) for k, p in enumerate(points)]


def _gp(seed: int = 0) -> Any:
    return make_searcher("gp", parse_parameters(XY), Goal.MINIMIZE, seed, prefetch=False, n_startup_trials=4)


@needs_torch
def test_a_batch_of_free_slots_costs_one_kernel_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    from optuna._gp import gp

    fits: list[int] = []
    fit = gp.fit_kernel_params

    def counting(*args: Any, **kwargs: Any) -> Any:
        fits.append(len(kwargs["X"]))
        return fit(*args, **kwargs)

    monkeypatch.setattr(gp, "fit_kernel_params", counting)
    searcher = _gp()
    searcher.replay(_history(8, running=1))
    batch = [searcher.ask() for _ in range(4)]   # 4 free slots, no result in between
    assert fits == [8]                           # one fit on the 8 completed trials, none for the running ones
    searcher.tell(8, _history(8, running=1)[8].params, TrialState.COMPLETED, 0.5)
    searcher.ask()
    assert fits == [8, 9]                        # a new result: fitted again (warm-started)
    assert len({tuple(p.values()) for p in batch}) == 4


@needs_torch
def test_the_random_startup_ends_once_half_of_it_completed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With k workers the startup trials do not all wait to complete (that made n_startup + k - 1 random)."""
    modelled: list[int] = []
    believe = searchopt._believer_suggestion

    def spy(sampler: Any, study: Any, *args: Any) -> Any:
        modelled.append(len(study.get_trials(deepcopy=False)) - 1)   # the number of the trial being asked
        return believe(sampler, study, *args)

    monkeypatch.setattr(searchopt, "_believer_suggestion", spy)
    searcher = _gp()
    searcher.replay(_history(1, running=2))
    for _ in range(3):
        searcher.ask()            # trials 3-5: one completed of the 2 needed, random
    assert modelled == []
    searcher = _gp()
    searcher.replay(_history(2, running=1))
    searcher.ask()                # trial 3: below n_startup_trials, random
    searcher.ask()                # trial 4: 2 of 4 completed, the model
    assert modelled == [4]


@needs_torch
def test_a_gp_suggestion_runs_torch_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from optuna._gp import acqf

    seen: list[int] = []
    init = acqf.LogEI.__init__

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(torch.get_num_threads())
        init(self, *args, **kwargs)

    monkeypatch.setattr(acqf.LogEI, "__init__", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        searcher = _gp()
        searcher.replay(_history(6, running=1))
        searcher.ask()
        searcher.replay(_history(7))
        searcher.ask()            # no running trial: Optuna's own path, inside the same limit
        assert seen == [1, 1]
        assert torch.get_num_threads() == 2   # restored
    finally:
        torch.set_num_threads(before)


@needs_torch
def test_warm_up_changes_no_suggestion() -> None:
    warmed, cold = _gp(5), _gp(5)
    warmed.warm_up()
    for s in (warmed, cold):
        s.replay(_history(5, running=1))
    assert [warmed.ask(), warmed.ask()] == [cold.ask(), cold.ask()]


class _Counting(RandomSearcher):
    def __init__(self) -> None:
        super().__init__(parse_parameters(XY), Goal.MINIMIZE, 0)
        self.asks = 0
        self.warmed = threading.Event()

    def ask(self) -> dict[str, Any] | None:
        self.asks += 1
        return super().ask()

    def warm_up(self) -> None:
        self.warmed.set()


def test_prefetching_computes_ahead_when_other_trials_run() -> None:
    inner = _Counting()
    wrapped = Prefetching(inner)
    try:
        first = wrapped.ask()          # prefetched at construction; one trial in flight: nothing ahead
        assert not wrapped.exhausted and inner.asks == 1
        second = wrapped.ask()         # computed now; two in flight: the next one is computed at once
        assert not wrapped.exhausted and inner.asks == 3
        assert inner.warmed.wait(30)   # once a trial runs and a suggestion is ready: warm up, in the background
        wrapped.tell(0, first, TrialState.COMPLETED, 0.1)
        wrapped.tell(1, second, TrialState.COMPLETED, 0.2)
        assert not wrapped.exhausted and inner.asks == 3   # the ready one is kept (random cannot withdraw it)
    finally:
        wrapped.close()


def test_prefetching_a_sequential_sweep_waits_for_each_result() -> None:
    inner = _Counting()
    wrapped = Prefetching(inner)
    try:
        for number in range(3):
            params = wrapped.ask()
            assert not wrapped.exhausted and inner.asks == number + 1   # nothing computed before the result
            wrapped.tell(number, params, TrialState.COMPLETED, quadratic(params))
    finally:
        wrapped.close()


class _SlowWarmUp(_Counting):
    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.finished = threading.Event()

    def warm_up(self) -> None:
        self.warmed.set()
        self.release.wait(30)
        self.finished.set()


def test_close_waits_for_a_warm_up_in_progress() -> None:
    """The driver closes its searcher before the process exits; a GP warm-up (torch) still running in a
    daemon thread at interpreter exit aborted the driver (SIGABRT: 'terminate called without an active
    exception') instead of its exit 130 after Ctrl-C."""
    inner = _SlowWarmUp()
    wrapped = Prefetching(inner)
    wrapped.ask()
    wrapped.ask()                      # two in flight: the next is computed ahead, then the warm-up starts
    assert inner.warmed.wait(30)
    closer = threading.Thread(target=wrapped.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive() and not inner.finished.is_set()   # close is waiting for the warm-up
    inner.release.set()
    closer.join(30)
    assert not closer.is_alive() and inner.finished.is_set()


def test_no_warm_up_starts_after_close() -> None:
    inner = _Counting()
    wrapped = Prefetching(inner)
    wrapped.close()
    wrapped.ask()
    wrapped.ask()
    wrapped.close()
    assert not inner.warmed.is_set()


@needs_torch
def test_gp_suggestions_of_two_threads_leave_the_process_threads_and_environment_as_they_were(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Optuna's GP sets OPENBLAS_NUM_THREADS=1 and torch's threads to 1 around its fits and puts back what it
    saw on entry. Two suggestions at once (a prefetching searcher beside another, two sweeps in one notebook)
    interleave: the second saves the first's 1, the first restores, the second writes its 1 back. The 1 then
    stayed for the process's life: every worker a local backend started after had one OpenBLAS thread in a slot
    of 2 CPUs (CI failed on it), and the notebook's torch ran on one thread. Here the interleaving is forced
    through Optuna's real limiter: A enters it, B enters it, A leaves, B leaves."""
    import os

    import torch
    from optuna._gp import gp, optim_mixed

    real = gp.limit_threads_in_optimization
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    first: dict[str, bool] = {}

    @contextlib.contextmanager
    def forced(*args: Any, **kwargs: Any) -> Any:
        name = threading.current_thread().name
        once = name in ("A", "B") and not first.get(name)
        first[name] = True
        if once and name == "B":
            assert a_in.wait(30)
        with real(*args, **kwargs):
            if once and name == "A":
                a_in.set()
                assert b_in.wait(30)
            elif once:
                b_in.set()
            yield
        if once and name == "A":
            a_out.set()
        elif once:
            assert a_out.wait(30)

    monkeypatch.setattr(gp, "limit_threads_in_optimization", forced)
    monkeypatch.setattr(optim_mixed, "limit_threads_in_optimization", forced)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    errors: list[BaseException] = []

    def suggest() -> None:
        try:
            searcher = _gp()
            searcher.replay(_history(7))
            searcher.ask()
        except BaseException as exc:   # reported below, in the test's thread
            errors.append(exc)

    try:
        threads = [threading.Thread(target=suggest, name=n) for n in ("A", "B")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert first == {"A": True, "B": True}   # both went through Optuna's limiter, interleaved
        assert os.environ.get("OPENBLAS_NUM_THREADS") is None
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
