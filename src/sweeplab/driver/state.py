"""What one driver knows about its sweep, and the few operations on it every part of the driver shares.

`Driver` (loop.py) is this state plus the loop; `Recovery` (recovery.py) and `EventWriter` (events.py) are
the parts that rebuild it from the store and that record events into it and the store.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from sweeplab._clock import Clock, RealClock
from sweeplab.backends.base import Backend
from sweeplab.driver.budget import BudgetAccountant
from sweeplab.driver.objectives import ParetoTracker
from sweeplab.driver.rank_feed import RankFeed
from sweeplab.driver.records import Progress, SweepOutcome, TrialRecord
from sweeplab.driver.retry import RetryPolicy
from sweeplab.driver.tasks import TaskBuilder
from sweeplab.driver.watchdog import Watchdog
from sweeplab.store import Store
from sweeplab.types import Goal, SweepState, TrialState

if TYPE_CHECKING:
    from sweeplab.monitors import Monitor
    from sweeplab.schedulers.base import Scheduler
    from sweeplab.search.base import Searcher
    from sweeplab.spec import SweepSpec

__all__ = ["DriverState"]


class DriverState:
    """The state of one sweep's driver; everything in it can be rebuilt from the store (`resume`)."""

    searcher: Searcher | None
    scheduler: Scheduler | None

    def __init__(
        self,
        spec: SweepSpec,
        store: Store,
        backend: Backend,
        *,
        sweep_name: str,
        overrides: Sequence[str] = (),
        smoke: bool = False,
        hard_budget: bool = False,
        clock: Clock | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        on_note: Callable[[str], None] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.spec = spec
        self.store = store
        self.backend = backend
        self.name = sweep_name
        self.overrides = list(overrides)
        self.smoke = smoke
        self.hard_budget = hard_budget
        self.clock = clock or RealClock()
        self.on_progress = on_progress or (lambda p: None)
        self.on_note = on_note or (lambda s: None)
        self.cwd = cwd or os.getcwd()
        self.metric: str | None = spec.metric.name
        self.goal: Goal = spec.metric.goal
        self.trials: dict[int, TrialRecord] = {}          # by trial id
        self.by_number: dict[int, TrialRecord] = {}
        self.requeue: deque[TrialRecord] = deque()
        self.sweep_id = 0
        self.seed = 0
        self.searcher = None
        self.scheduler = None
        self._sched_metric: str | None = None
        self._sched_rule: str | None = None        # several objectives: which one rungs are judged on
        self._rank_keys: tuple[str, ...] = ()      # ... or all of them, by non-dominated rank (ASHA)
        self._rank_feed: RankFeed | None = None    # when a trial's objective vector is judged (rank_feed.py)
        self.monitors: list[Monitor] = []
        self._exhausted = False
        self._ending: str | None = None            # why no new trials are created
        self._ending_state = SweepState.FINISHED
        self._halt = False                         # no retries / requeues either (time budget, crash loop)
        self._time_spent = False                   # budget.time reached (and its running trials stopped)
        self._resources_spent = False              # a cpu/gpu-hours or cost budget reached
        self._bad_input: str | None = None         # a config no trial can build: the sweep ends, exit 2
        self._completed_any = False
        self._signal: int | None = None
        self._signalled = 0.0                      # when it came (time.monotonic)
        self._hurry = False                        # a second SIGTERM: stop waiting for trial.grace
        self._stopping: str | None = None          # the sweep stops at once, resumable: a trial found the disk full
        self._crash: str | None = None             # ... or the searcher raised (a bug, a MemoryError): its error line
        self._crash_trace = ""                     # and its traceback, shown with the sweep's end
        self._crash_code = 1                       # and the exit code (2: bad input found mid-sweep)
        self._last_progress = 0.0
        self._best: tuple[float, int, dict[str, Any]] | None = None
        self._durations: list[float] = []
        self._seen_keys: set[str] = set()
        self._checked_monitor_metrics = False
        self.max_trials: int | None = spec.budget.trials
        self.pareto = ParetoTracker(spec)          # several objectives: the front and its hypervolume
        self._resources_json: dict[str, Any] | None = None
        self._touched = -1e9
        self._spend_saved = -1e9                   # monotonic time of the last running-spend save
        self._failures = 0
        self._where: list[TrialRecord] = []
        self._lock_file: IO[str] | None = None
        self.budget = BudgetAccountant(spec.budget, spec.resources, self.clock, cpu_only=smoke)
        self.retry = RetryPolicy(spec.trial.retries, sweep=sweep_name)
        self.watchdog = Watchdog(spec.trial, (), self.budget, self.clock)   # its monitors: _build_logic
        self.tasks = TaskBuilder(spec, sweep=sweep_name, root=str(store.root.resolve()), cwd=self.cwd,
                                 overrides=self.overrides, smoke=smoke)

    @property
    def _searcher(self) -> Searcher:
        """The searcher, once `create`/`resume` built it."""
        if self.searcher is None:
            raise RuntimeError("the driver has no searcher before create() or resume()")
        return self.searcher

    # ------------------------------------------------------------------------------------------ shared
    def _end(self, reason: str, state: SweepState = SweepState.FINISHED) -> None:
        """No new trials from now on (the first reason given is the one recorded)."""
        if state is SweepState.FAILED:
            self._halt = True
        if self._ending is None:
            self._ending = reason
            self._ending_state = state
            if state is SweepState.FAILED:
                self.on_note(reason)

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in TrialState}
        for t in self.trials.values():
            out[t.state.value] += 1
        return out

    def _note_best(self, t: TrialRecord) -> None:
        if t.value is None or t.feasible is False:   # an infeasible trial is never best
            return
        if self._best is None or self.goal.better(t.value, self._best[0]):
            self._best = (t.value, t.number, t.params)

    def _account(self, t: TrialRecord) -> None:
        """The trial's attempt ended: book the time and resources it held."""
        if t.started_mono is None:
            return
        t.spent += self.budget.release(t.started_mono)
        t.started_mono = None

    def _reported(self) -> dict[str, float]:
        """The sum over trials of what each budget.cost name reported."""
        names = self.spec.budget.cost or {}
        return {name: sum(t.costs.get(name, 0.0) for t in self.trials.values()) for name in names}

    def _fence(self, t: TrialRecord) -> None:
        """Declare the trial's current attempt dead in its checkpoint directory (checkpoint.fence): a write
        it makes from now on is refused or ignored, never restored by the next attempt."""
        from sweeplab.checkpoint import fence

        with contextlib.suppress(Exception):   # a location this host cannot reach: the kill still happens
            fence(self.tasks.paths(t)["checkpoint"], t.attempt)

    def _take_where(self, t: TrialRecord) -> dict[str, Any]:
        where, t.where = t.where, None
        return where or {}

    def _outcome(self, state: SweepState, reason: str, code: int) -> SweepOutcome:
        best = self._best
        return SweepOutcome(sweep=self.name, state=state, reason=reason, counts=self.counts(),
                            best_trial=best[1] if best else None, best_value=best[0] if best else None,
                            best_params=best[2] if best else None, exit_code=code)
