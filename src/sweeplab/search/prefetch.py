"""Prefetching: compute the next suggestion in a background thread so that `ask()` returns at once.

A GP suggestion costs 0.1-0.5 s. The wrapper asks the inner searcher right after construction, after
each `tell` and after `replay`, and hands that suggestion out on the next `ask`. Used sequentially
(ask, tell, ask, ...) it calls the inner searcher in exactly the plain order, so results are identical.

With several trials in flight it also computes ahead right after handing a suggestion out (not only
after a result): the next free slot then finds its suggestion ready instead of waiting for one, which is
what keeps 8 workers of 1 s trials fed by a GP whose suggestion costs tens of milliseconds. With one trial
in flight (a sequential sweep) it waits for that trial's result, so sequential use is unchanged.

A prefetched suggestion goes stale when another result is told before it is handed out: it was computed
with that trial still running. When a fresh one is cheap the stale one is withdrawn from the inner searcher
(`Searcher.withdraw`) and computed again from the fresher history. Cheap means: the last ask took under
`FRESH_UNDER` seconds of CPU (TPE's do), or under `FRESH_SHARE` of the trials' median duration (a GP's
30-50 ms against trials of seconds to minutes), so recomputing costs a worker at most that share of a
trial. Otherwise (a GP with 1 s trials) it is kept: it already treated the now-finished trial as pending
(the GP as a Kriging believer), and recomputing it would idle a worker. Freshness is worth it: with 8
workers on Hartmann6 a GP whose suggestions lag one result behind reached a median best of -2.78 at 40
trials over 20 seeds, against -3.04 with fresh ones (benchmarks/parallel_quality.py).
So a searcher that is cheap in that sense and can withdraw computes nothing ahead while trials run: a slot
frees when a trial ends, its result is told first, and the suggestion computed before it would only be
withdrawn (TPE's 3-4 ms of driver CPU per trial, taken from the workers on a machine they fill).

`deferring()` holds background work back while the driver hands trials out: a thread computing a
suggestion holds the GIL for up to `sys.getswitchinterval()` (5 ms) each time the driver's thread releases
it for a store write or a pipe write, which delayed each dispatch by several such slices (GP sweeps).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sweeplab.search.base import Searcher
from sweeplab.types import TrialSnapshot, TrialState

__all__ = ["FRESH_SHARE", "FRESH_UNDER", "Prefetching", "fresh_limit"]

_NOTHING: Any = object()
#: recompute a stale prefetched suggestion when the inner searcher's last ask took less than this (CPU
#: seconds of the thread that asked: a loaded machine does not make a cheap searcher look expensive)
FRESH_UNDER = 0.02
#: ... or less than this share of the trials' median duration (wall time from handout to result)
FRESH_SHARE = 0.01
#: trials whose durations `fresh_limit` reads (the latest ones)
DURATIONS_KEPT = 20


def fresh_limit(durations: Sequence[float]) -> float:
    """CPU seconds under which an ask is cheap enough to recompute a stale suggestion, given the latest
    trials' durations (seconds; none known yet: FRESH_UNDER)."""
    return max(FRESH_UNDER, FRESH_SHARE * statistics.median(durations)) if durations else FRESH_UNDER


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, default=repr)


class Prefetching(Searcher):
    """Wraps a searcher; one lock guards it, one daemon thread at a time computes ahead."""

    def __init__(self, inner: Searcher) -> None:
        self.inner = inner
        self.space, self.goal, self.seed, self.options = inner.space, inner.goal, inner.seed, inner.options
        self._lock = threading.Lock()          # around every call into `inner`
        self._cond = threading.Condition()     # around the prefetch slot below
        self._thread: threading.Thread | None = None
        self._ready: Any = _NOTHING            # a prefetched suggestion (dict or None)
        self._error: BaseException | None = None
        self._closed = False
        self._told = 0                         # results told so far (under `_lock`)
        self._ready_told = 0                   # ... when the prefetched suggestion was computed
        self._ask_seconds = 0.0                # how long the inner searcher's last ask took (thread CPU)
        self._in_flight = 0                    # suggestions handed out whose result is not told yet
        self._warm = False                     # `inner.warm_up()` called
        self._warming: threading.Thread | None = None   # the thread running `inner.warm_up()`, if any
        self._deferred = 0                     # depth of `deferring()` blocks (under `_cond`)
        self._wanted = False                   # a prefetch was asked for inside one
        self._withdraws = type(inner).withdraw is not Searcher.withdraw
        #: the clock trial durations are measured on (a simulation sets its own)
        self.clock: Callable[[], float] = time.monotonic
        self._handed: dict[str, list[float]] = {}   # params key -> when suggestions with them were handed out
        self._durations: deque[float] = deque(maxlen=DURATIONS_KEPT)   # the latest trials' durations
        self._prefetch()

    @property
    def notes(self) -> list[str]:  # type: ignore[override]
        return self.inner.notes

    @contextlib.contextmanager
    def deferring(self) -> Iterator[None]:
        """Start no background work inside the block; what was asked for starts when it ends."""
        with self._cond:
            self._deferred += 1
        try:
            yield
        finally:
            with self._cond:
                self._deferred -= 1
                wanted = self._wanted and not self._deferred
                self._wanted = self._wanted and not wanted
            if wanted:
                self._prefetch()

    def _prefetch(self) -> None:
        with self._cond:
            if self._closed or self._thread is not None or self._ready is not _NOTHING:
                return
            if self._deferred:
                self._wanted = True
                return
            if self._in_flight and self._withdraws and self._ask_seconds < fresh_limit(self._durations):
                warm = self._take_warm_up()   # cheap: the next suggestion is computed after the next result
                if warm:
                    self._warming = threading.Thread(target=contextvars.copy_context().run, args=(self._warm_up,),
                                                     name="sweeplab-warm-up", daemon=True)
                    self._warming.start()
                return
            # in the asker's context (a sweep's in a notebook: its warnings go under the cell that started it)
            self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,),
                                            name="sweeplab-prefetch", daemon=True)
            self._thread.start()

    def _take_warm_up(self) -> bool:
        """Whether to warm the inner searcher up now (caller holds `_cond`): once, once a trial was handed out."""
        warm = not self._warm and not self._closed and self._warming is None and self._told + self._in_flight >= 1
        self._warm = self._warm or warm
        return warm

    def _warm_up(self) -> None:
        try:   # without `_lock`, as after a background ask: a warm-up changes no suggestion
            self.inner.warm_up()
        except Exception:   # only an optimisation: the ask that needs what failed raises it
            pass
        finally:
            with self._cond:
                self._warming = None

    def _run(self) -> None:
        result, error, told = _NOTHING, None, 0
        try:
            with self._lock:
                told = self._told
                result = self._timed_ask()
                warm = not self._warm and self._told + self._in_flight >= 1
                self._warm = self._warm or warm
        except BaseException as exc:
            error, warm = exc, False
        with self._cond:
            self._ready, self._error, self._thread, self._ready_told = result, error, None, told
            warm = warm and not self._closed
            if warm:   # `close` joins it: a GP (torch) still running at interpreter exit aborts the process
                self._warming = threading.current_thread()
            self._cond.notify_all()
        if warm:   # once, after a suggestion is ready while a trial runs: nothing waits on this thread now
            self._warm_up()

    def _timed_ask(self) -> dict[str, Any] | None:
        """The inner searcher's next suggestion (caller holds `_lock`); remembers how long it took."""
        start = time.thread_time()
        try:
            return self.inner.ask()
        finally:
            self._ask_seconds = time.thread_time() - start

    def _refresh(self) -> None:
        """Drop a prefetched suggestion computed before the latest `tell`, when a fresh one is cheap."""
        with self._cond:
            while self._thread is not None:
                self._cond.wait()
            ready = self._ready
            if not isinstance(ready, dict) or self._ready_told >= self._told \
                    or self._ask_seconds >= fresh_limit(self._durations):
                return
            with self._lock:
                if not self.inner.withdraw(ready):
                    return
            self._ready = _NOTHING

    def _take(self) -> Any:
        """Wait for a running prefetch, then take its suggestion (or _NOTHING)."""
        with self._cond:
            while self._thread is not None:
                self._cond.wait()
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            ready, self._ready = self._ready, _NOTHING
            return ready

    def ask(self) -> dict[str, Any] | None:
        ready = self._take()
        if ready is _NOTHING:
            with self._lock:
                ready = self._timed_ask()
        if ready is not None:
            with self._lock:
                self._handed.setdefault(_key(ready), []).append(self.clock())
                self._in_flight += 1
                ahead = self._in_flight >= 2
            if ahead:   # other trials run besides this one: the next free slot's suggestion, now
                self._prefetch()
        return ready

    def tell(
        self,
        number: int,
        params: Mapping[str, Any],
        state: TrialState,
        value: Any,
        intermediate: Mapping[int, float] | None = None,
        constraints: Sequence[float] | None = None,
    ) -> None:
        with self._lock:
            if constraints is None:
                self.inner.tell(number, params, state, value, intermediate)
            else:
                self.inner.tell(number, params, state, value, intermediate, constraints=constraints)
            if state.is_terminal:
                self._told += 1
                self._in_flight = max(0, self._in_flight - 1)
                handed = self._handed.get(_key(params))
                if handed:   # a suggestion of this wrapper (not a replayed or enqueued trial): its duration
                    self._durations.append(self.clock() - handed.pop(0))
                    if not handed:
                        del self._handed[_key(params)]
        self._refresh()
        self._prefetch()

    def replay(self, history: Sequence[TrialSnapshot]) -> None:
        self._take()  # a suggestion made before the replay belongs to the old state: drop it
        with self._lock:
            self.inner.replay(history)
            self._in_flight = sum(not snap.state.is_terminal for snap in history)
        self._prefetch()

    def withdraw(self, params: Mapping[str, Any]) -> bool:
        with self._lock:
            taken = self.inner.withdraw(params)
            handed = self._handed.get(_key(params))
            if taken and handed:   # handed out, taken back: no trial whose duration to measure
                handed.pop()
                if not handed:
                    del self._handed[_key(params)]
            return taken

    @property
    def exhausted(self) -> bool:
        with self._cond:
            while self._thread is not None:
                self._cond.wait()
            if self._ready is not _NOTHING:
                return self._ready is None
        with self._lock:
            return self.inner.exhausted

    def close(self) -> None:
        """Stop prefetching: waits for a suggestion or a warm-up in flight, then asks synchronously from now on."""
        with self._cond:
            self._closed = True
            threads = [t for t in (self._thread, self._warming) if t is not None]
        for thread in threads:
            thread.join()
        self.inner.close()
