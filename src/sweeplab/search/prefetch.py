"""Prefetching: compute the next suggestion in a background thread so that `ask()` returns at once.

A GP suggestion costs 0.1-0.5 s. The wrapper asks the inner searcher right after construction, after
each `tell` and after `replay`, and hands that suggestion out on the next `ask`. Used sequentially
(ask, tell, ask, ...) it calls the inner searcher in exactly the plain order, so results are identical.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from sweeplab.search.base import Searcher
from sweeplab.types import TrialSnapshot, TrialState

__all__ = ["Prefetching"]

_NOTHING: Any = object()


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
        self._prefetch()

    @property
    def notes(self) -> list[str]:  # type: ignore[override]
        return self.inner.notes

    def _prefetch(self) -> None:
        with self._cond:
            if self._closed or self._thread is not None or self._ready is not _NOTHING:
                return
            self._thread = threading.Thread(target=self._run, name="sweeplab-prefetch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        result, error = _NOTHING, None
        try:
            with self._lock:
                result = self.inner.ask()
        except BaseException as exc:
            error = exc
        with self._cond:
            self._ready, self._error, self._thread = result, error, None
            self._cond.notify_all()

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
        if ready is not _NOTHING:
            return ready
        with self._lock:
            return self.inner.ask()

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
        self._prefetch()

    def replay(self, history: Sequence[TrialSnapshot]) -> None:
        self._take()  # a suggestion made before the replay belongs to the old state: drop it
        with self._lock:
            self.inner.replay(history)
        self._prefetch()

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
        """Stop prefetching: waits for a suggestion in flight, then asks synchronously from now on."""
        with self._cond:
            self._closed = True
            thread = self._thread
        if thread is not None:
            thread.join()
        self.inner.close()
