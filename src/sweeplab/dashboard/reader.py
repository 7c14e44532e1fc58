"""Read-only access to the store for the web app: one read-only SQLite connection per worker thread and
small caches keyed by the store's change token (so nothing is recomputed until the driver writes).

Every API call reads inside one `snapshot()` (one read transaction on its thread's connection): its change
token, cached answers and fresh queries then all describe the same committed state of the store.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from sweeplab.store import queries
from sweeplab.store.sqlite import DB_NAME, Store
from sweeplab.types import TrialState

__all__ = ["Reader"]

T = TypeVar("T")
_TERMINAL = tuple(s.value for s in TrialState if s.is_terminal)


class Reader:
    """Per-thread read-only stores and per-sweep caches for the expensive answers."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._local = threading.local()
        self._stores: list[Store] = []
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._compute_locks: dict[tuple[str, str], threading.Lock] = {}
        self._keys: dict[str, tuple[frozenset[int], frozenset[str]]] = {}
        self._cache_ident: tuple[int, int] | None = None   # the database file the caches describe

    def _ident(self) -> tuple[int, int] | None:
        """Which file store.db is now (device, inode), None when there is none."""
        try:
            st = os.stat(self.root / DB_NAME)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def store(self) -> Store:
        """This thread's read-only store, opened again when store.db is no longer the file it opened (the
        store was deleted, or deleted and made again: `rm -rf .sweeplab` and a new sweep), so the old
        file's sweeps are not served on; with no store.db left this raises the "no sweeplab store" error."""
        s: Store | None = getattr(self._local, "store", None)
        if s is not None and getattr(self._local, "in_snapshot", False):
            return s   # never swapped under a read transaction: one call reads one file
        ident = self._ident()
        if s is not None and ident != self._local.ident:
            self._local.store = None
            with self._lock:
                if s in self._stores:
                    self._stores.remove(s)
            s.close()
            s = None
        if s is None:
            s = Store.open(self.root, readonly=True)
            self._local.store = s
            self._local.ident = ident
            with self._lock:
                self._stores.append(s)
                if ident != self._cache_ident:   # answers cached from another file describe another store
                    self._cache.clear()
                    self._keys.clear()
                    self._cache_ident = ident
        return s

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Store]:
        """This thread's store, inside one read transaction for the duration of the block."""
        store = self.store()
        with store.snapshot():
            self._local.in_snapshot = True
            try:
                yield store
            finally:
                self._local.in_snapshot = False

    def close(self) -> None:
        with self._lock:
            for s in self._stores:
                s.close()
            self._stores.clear()

    def version(self, sweep: str | None) -> str:
        return str(queries.changed_since(self.store(), sweep, None)["token"])

    def cached(self, kind: str, sweep: str, version: Any, compute: Callable[[], T]) -> T:
        """`compute()` once per (kind, sweep, version); concurrent callers wait for the first."""
        key = (kind, sweep)
        hit = self._cache.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]  # type: ignore[no-any-return]
        with self._lock:
            lock = self._compute_locks.setdefault(key, threading.Lock())
        with lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == version:
                return hit[1]  # type: ignore[no-any-return]
            value = compute()
            if getattr(self._local, "ident", None) == self._cache_ident:   # not from a replaced file
                self._cache[key] = (version, value)
            return value

    def settled_version(self, kind: str, sweep: str, version: tuple[Any, ...]) -> tuple[Any, ...]:
        """The version to cache a summary of a sweep's ended trials under (`version[0]`: how many there are).

        Up to 50 trials it is `version` itself: every trial that ends changes the answer. From 50 on, the
        cached answer's version is kept until 2 % more trials have ended (at 10,000 trials, 200 more), so a
        live page of a long sweep does not refit fANOVA on every refresh: one more trial barely moves it.
        """
        hit = self._cache.get((kind, sweep))
        old = hit[0] if hit is not None else None
        if isinstance(old, tuple) and old and isinstance(old[0], int) and isinstance(version[0], int):
            if old[0] >= 50 and 0 <= version[0] - old[0] < old[0] // 50:
                return old
        return version

    def completed_version(self, sweep: str) -> tuple[Any, ...]:
        """Changes only when the set of completed trials (or their values) changes."""
        return queries.completed_version(self.store(), sweep)

    def finished_version(self, sweep: str) -> tuple[Any, ...]:
        """Changes only when a trial ends (or an ended trial's value changes)."""
        return queries.finished_version(self.store(), sweep)

    def sweep_metric_keys(self, sweep_id: int) -> list[str]:
        """Metric keys of a sweep: the store's `sweep_keys` rows. A store before schema version 4 has none:
        there keys of finished trials never change, so they are scanned only once."""
        store = self.store()
        kept = queries.sweep_metric_keys(store, sweep_id)
        if kept is not None:
            return kept
        rows = queries.trial_states(store, sweep_id)
        with self._lock:
            done, keys = self._keys.get(str(sweep_id), (frozenset(), frozenset()))
        newly_done = [r[0] for r in rows if r[0] not in done and r[1] in _TERMINAL]
        live = [r[0] for r in rows if r[0] not in done and r[1] not in _TERMINAL]
        if newly_done:
            keys = keys | set(queries.metric_keys(store, newly_done))
            done = done | set(newly_done)
            with self._lock:
                if getattr(self._local, "ident", None) == self._cache_ident:
                    self._keys[str(sweep_id)] = (done, keys)
        # Keys of still-running trials are rescanned every time (they are few).
        return sorted(keys | set(queries.metric_keys(store, live)))
