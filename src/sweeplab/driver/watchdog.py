"""The watchdog: what the passing of time asks of running trials, as orders the driver carries out.

Checked after every poll: `budget.time` spent (the sweep stops), a trial asked to stop that outlives
`trial.grace`, one over `trial.timeout` (summed over its attempts), one silent for `trial.heartbeat_timeout`,
and what `idle` monitors say of a trial that stopped reporting.
The watchdog decides; it never stops, kills or writes anything itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweeplab._clock import Clock
from sweeplab.driver.budget import BudgetAccountant
from sweeplab.driver.records import TrialRecord
from sweeplab.types import Decision, Origin, Verdict

if TYPE_CHECKING:
    from sweeplab.monitors import Monitor
    from sweeplab.spec import TrialPolicy

__all__ = ["Judge", "Kill", "Watchdog"]


@dataclass(frozen=True)
class Kill:
    """Kill the trial's attempt now (after fencing its checkpoints); `final`: no retry follows."""

    trial_id: int
    reason: str
    final: bool = False


@dataclass(frozen=True)
class Judge:
    """Apply a monitor's verdict (stop or warn) to a trial."""

    trial_id: int
    verdict: Verdict


Order = Kill | Judge

#: a driver turn that starts this much later than its poll's timeout allowed, the driver having used little CPU
#: meanwhile: it did not run (stopped, frozen with its trials: `docker pause`, a cgroup freeze), and that time is
#: no trial's silence. A driver late because it was busy (a large batch of metrics to write) used the CPU: its
#: trials' heartbeats waited in the pipe, and a hung trial's silence counts as ever
PAUSE_S = 1.0


class Watchdog:
    def __init__(self, policy: TrialPolicy, monitors: Sequence[Monitor], budget: BudgetAccountant,
                 clock: Clock) -> None:
        self.policy = policy
        self.monitors = list(monitors)
        self.budget = budget
        self.clock = clock
        self._next_turn: float | None = None          # when the next turn was due (monotonic)
        self._cpu: float | None = None                 # the driver's CPU time at its last turn
        self._pauses: list[tuple[float, float]] = []   # (from, to) of the driver's recent pauses

    def turn(self, at: float, timeout: float, cpu: float | None = None) -> None:
        """The driver starts reading its backend at `at`, for at most `timeout` seconds; `cpu`: its process's
        CPU time then. A turn late by more than PAUSE_S, with less than half of that lateness spent on the CPU,
        marks a pause of the driver, which silences are not judged on: trials frozen with their driver (a
        whole-sweep freeze, the driver woken first) said nothing because they could not."""
        due, used = self._next_turn, None if cpu is None or self._cpu is None else cpu - self._cpu
        if due is not None and at - due > PAUSE_S and (used is None or used < (at - due) / 2):
            self._pauses.append((due, at))
            del self._pauses[:-32]
        self._next_turn, self._cpu = at + timeout, cpu

    def _paused(self, since: float, until: float) -> float:
        """Seconds of the driver's pauses between `since` and `until`."""
        return sum(max(0.0, min(b, until) - max(a, since)) for a, b in self._pauses)

    def time_up(self, *, ending: bool) -> str | None:
        """Why the sweep stops now because `budget.time` is spent (stop every running trial), or None.
        `ending`: the time budget already did (nothing more to order)."""
        return None if ending else self.budget.time_reached()

    def due(self, running: Iterable[TrialRecord], *, ending: bool) -> bool:
        """Whether a deadline falls now: budget.time spent, or a running trial past trial.timeout or
        trial.grace (what `time_up` and `orders` would act on; silences are judged as of a read already)."""
        if self.time_up(ending=ending) is not None:
            return True
        now = self.clock.monotonic()
        return any(t.started_mono is not None and t.kill_reason is None and self._deadline(t, now) is not None
                   for t in running)

    def orders(self, running: Iterable[TrialRecord], at: float | None = None) -> list[Order]:
        """At most one order per running trial: the first of grace, timeout, heartbeat, idle monitors.

        `at`: the monotonic time the driver last started reading its backend (default: now). Silences (the
        heartbeat, idle monitors) are judged as of then, so a driver that was itself paused (SIGSTOP, a
        debugger) and has not yet read what its trials sent meanwhile takes none of them for hung."""
        now = self.clock.monotonic()
        seen = now if at is None else min(at, now)
        out: list[Order] = []
        for t in running:
            if t.started_mono is None:
                continue
            order: Order | None = self._kill(t, now, seen) if t.kill_reason is None else None
            if order is None and self.monitors and t.stop_verdict is None:
                order = self._idle(t, seen)
            if order is not None:
                out.append(order)
        return out

    def _kill(self, t: TrialRecord, now: float, seen: float) -> Kill | None:
        order = self._deadline(t, now)
        policy = self.policy
        if (order is None and policy.heartbeat_timeout is not None and t.last_seen is not None
                and seen - t.last_seen - self._paused(t.last_seen, seen) > policy.heartbeat_timeout):
            return Kill(t.id, f"no heartbeat for {policy.heartbeat_timeout:g}s (trial.heartbeat_timeout; hung)")
        return order

    def _deadline(self, t: TrialRecord, now: float) -> Kill | None:
        """trial.grace after a stop, or trial.timeout, passed."""
        policy = self.policy
        started = t.started_mono if t.started_mono is not None else now
        if t.stop_at is not None and now - t.stop_at > policy.grace:
            return Kill(t.id, f"did not stop within trial.grace ({policy.grace:g}s)")
        if policy.timeout is not None and t.spent + now - started > policy.timeout:
            return Kill(t.id, f"trial.timeout ({policy.timeout:g}s over all its attempts) exceeded", final=True)
        return None

    def _idle(self, t: TrialRecord, now: float) -> Judge | None:
        last = self._wall_of(t.last_report)
        # the driver's pauses since the trial's last report are not time it kept quiet in
        since = t.last_report if t.last_report is not None else t.started_mono
        paused = self._paused(since, now) if since is not None else 0.0
        wall = self.clock.time() - (self.clock.monotonic() - now) - paused
        for m in self.monitors:
            v = m.idle(t.number, last, wall)
            if v.decision is not Decision.CONTINUE:
                return Judge(t.id, v.by(Origin.MONITOR))
        return None

    def _wall_of(self, mono: float | None) -> float | None:
        """The wall-clock time of a monotonic instant (monitors think in wall time)."""
        if mono is None:
            return None
        return self.clock.time() - (self.clock.monotonic() - mono)
