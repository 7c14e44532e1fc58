"""The deterministic driver suite's harness: a real Driver and SQLite store, a FakeBackend on a FakeClock.

`sim.run(script, ...)` creates and runs a sweep whose trials follow `script` (a Script, or a function of
the TrialTask); the spec is a small random-search spec over `x` minimising `loss`, changed by keyword
arguments (`budget=..., trial=...`). The searcher and scheduler the driver builds are wrapped to record
what they are told, so tests assert on three things: the store's rows, the backend's recorded calls, and
the searcher's / scheduler's inputs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sweeplab._clock import FakeClock
from sweeplab.backends.base import TrialTask
from sweeplab.driver import Driver, SweepOutcome
from sweeplab.spec import SweepSpec, parse_spec
from sweeplab.store import Store
from sweeplab.testing.fake import FakeBackend, Script
from sweeplab.types import TrialState


@dataclass(frozen=True)
class Tell:
    number: int
    state: TrialState
    value: float | None
    intermediate: Any = field(default=None, compare=False)   # what the searcher was told of the trial's curve


class RecordingSearcher:
    """Wraps the driver's searcher: records tell and replay, delegates everything."""

    def __init__(self, inner: Any, sim: Sim) -> None:
        self._inner = inner
        self._sim = sim

    def tell(self, number: int, params: Mapping[str, Any], state: TrialState, value: float | None,
             intermediate: Mapping[int, float] | None = None) -> None:
        self._sim.tells.append(Tell(number, state, value, dict(intermediate or {})))
        self._inner.tell(number, params, state, value, intermediate=intermediate)

    def replay(self, history: Any) -> None:
        history = list(history)
        self._sim.replayed.append([(s.number, s.state) for s in history])
        self._sim.snapshots = history
        self._inner.replay(history)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecordingScheduler:
    """Wraps the driver's scheduler: records ("report", trial, step, value) and ("end", trial, state)."""

    def __init__(self, inner: Any, sim: Sim) -> None:
        self._inner = inner
        self._sim = sim

    def on_report(self, trial: int, step: int, value: float) -> Any:
        self._sim.scheduler_calls.append(("report", trial, step, value))
        return self._inner.on_report(trial, step, value)

    def on_trial_end(self, trial: int, state: TrialState) -> None:
        self._sim.scheduler_calls.append(("end", trial, state))
        self._inner.on_trial_end(trial, state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


Scripts = Script | Callable[[TrialTask], Script]


class Sim:
    """One temporary store, one fake clock; drivers and backends made on demand."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.clock = FakeClock()
        self.store = Store.open(tmp / "store")
        self.tells: list[Tell] = []
        self.replayed: list[list[tuple[int, TrialState]]] = []
        self.snapshots: list[Any] = []   # the trial snapshots the searcher was last replayed
        self.scheduler_calls: list[tuple[Any, ...]] = []
        self.driver: Driver | None = None
        self.backend: FakeBackend | None = None

    # ---------------------------------------------------------------- building
    def spec(self, **changes: Any) -> SweepSpec:
        raw: dict[str, Any] = {
            "function": "fake_trials:train", "method": "random", "seed": 7,
            "metric": {"name": "loss", "goal": "minimize"},
            "parameters": {"x": {"min": 0.0, "max": 1.0}},
            "budget": {"trials": 4},
        }
        raw.update(changes)
        return parse_spec(raw, file="<test>")

    def make(self, scripts: Scripts, *, slots: int = 1, name: str = "s", hard_budget: bool = False,
             decisions: bool = True, **spec: Any) -> tuple[Driver, FakeBackend]:
        """A driver (not yet created or resumed) on a new FakeBackend sharing the sim's clock."""
        if self.driver is not None:
            self.release()
        backend = FakeBackend(self.clock, scripts, slots=slots, supports_decisions=decisions)
        driver = Driver(self.spec(**spec), self.store, backend, sweep_name=name, clock=self.clock,
                        hard_budget=hard_budget, cwd=str(self.tmp))
        self.driver, self.backend = driver, backend
        return driver, backend

    def run(self, scripts: Scripts, **kw: Any) -> SweepOutcome:
        """Create a sweep and run it to its end."""
        driver, _ = self.make(scripts, **kw)
        driver.create(spec_path=None)
        return driver.run()

    def resume(self, scripts: Scripts, **kw: Any) -> SweepOutcome:
        """Resume the sweep with a new driver and backend (as `sweeplab resume` in a new process)."""
        driver, _ = self.make(scripts, **kw)
        driver.resume()
        return driver.run()

    def release(self) -> None:
        """Drop the previous driver's per-sweep lock (a process's exit would)."""
        lock = getattr(self.driver, "_lock_file", None)
        if lock is not None:
            lock.close()
        self.driver = None

    # ---------------------------------------------------------------- reading the store
    def rows(self, sql: str, *args: Any) -> list[sqlite3.Row]:
        conn = self.store.conn
        old = conn.row_factory
        conn.row_factory = sqlite3.Row
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.row_factory = old

    def sweep(self, name: str = "s") -> sqlite3.Row:
        return self.rows("SELECT * FROM sweeps WHERE name=?", name)[0]

    def trials(self, name: str = "s") -> list[sqlite3.Row]:
        return self.rows("SELECT t.* FROM trials t JOIN sweeps s ON s.id=t.sweep_id WHERE s.name=? "
                         "ORDER BY t.number", name)

    def trial(self, number: int, name: str = "s") -> sqlite3.Row:
        return next(t for t in self.trials(name) if t["number"] == number)

    def states(self, name: str = "s") -> list[str]:
        return [t["state"] for t in self.trials(name)]

    def attempts(self, number: int, name: str = "s") -> list[sqlite3.Row]:
        return self.rows("SELECT * FROM attempts WHERE trial_id=? ORDER BY number", self.trial(number, name)["id"])

    def events(self, kind: str) -> list[sqlite3.Row]:
        return self.rows("SELECT * FROM events WHERE kind=? ORDER BY id", kind)

    def close(self) -> None:
        self.release()
        self.store.close()


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    """The harness; the searcher and scheduler every driver builds are wrapped to record their inputs."""
    import sweeplab.schedulers as schedulers
    import sweeplab.search as search

    s = Sim(tmp_path)
    make_searcher, make_scheduler = search.make_searcher, schedulers.make_scheduler
    monkeypatch.setattr(search, "make_searcher", lambda *a, **k: RecordingSearcher(make_searcher(*a, **k), s))
    monkeypatch.setattr(schedulers, "make_scheduler",
                        lambda *a, **k: RecordingScheduler(make_scheduler(*a, **k), s))
    yield s
    s.close()
