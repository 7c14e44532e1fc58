"""Budget accounting: what a sweep has spent (wall seconds, resource-seconds held by trials, reported costs)
and which limit of `budget` that reaches. Pure: time comes from the clock, trials' holdings from the caller."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sweeplab._clock import Clock

if TYPE_CHECKING:
    from sweeplab.spec import Budget, Resources

__all__ = ["BudgetAccountant"]


class BudgetAccountant:
    """The spend of one sweep, carried over resumes (`restore`) and saved with the sweep (`totals`).

    `spend` keys: seconds (sweep wall time over all its runs), cpu_seconds / gpu_seconds (held by trials:
    one trial holds `resources.cpus` / `resources.gpus` over all its processes, or `resources.workers` x
    `cpus_per_worker` / `gpus_per_worker`), trials, cost.<name>.
    """

    def __init__(self, budget: Budget, resources: Resources, clock: Clock, *, cpu_only: bool = False) -> None:
        """`cpu_only`: the trials hold no GPU whatever `resources.gpus` says (smoke mode runs them on the
        CPU with no GPU slot): they spend no GPU-hours."""
        self.budget = budget
        self.clock = clock
        # what one trial holds, as the backends place it: per process x processes when the per-worker keys
        # are given, else the trial's totals `cpus` / `gpus`
        world = max(1, int(resources.workers or 1))
        per_cpu, per_gpu = resources.cpus_per_worker, resources.gpus_per_worker
        self.cpus = float(per_cpu) * world if per_cpu is not None else float(resources.cpus or 0.0)
        self.gpus = float(per_gpu) * world if per_gpu is not None else float(resources.gpus or 0.0)
        if cpu_only:
            self.gpus = 0.0
        self.spend: dict[str, float] = {}
        self.seconds_before = 0.0       # wall time of the sweep's earlier runs (before a resume)
        self._t0 = clock.monotonic()

    def restore(self, spend: Mapping[str, object]) -> None:
        """Continue from what the store says earlier runs spent."""
        self.spend = {k: float(v) for k, v in spend.items() if isinstance(v, (int, float)) and k != "saved_at"}
        self.seconds_before = self.spend.get("seconds", 0.0)

    def elapsed(self) -> float:
        """Seconds since this run of the sweep started."""
        return self.clock.monotonic() - self._t0

    def release(self, started_mono: float) -> float:
        """An attempt that started at `started_mono` ended: book the resources it held; return its seconds."""
        held = self.clock.monotonic() - started_mono
        self.spend["cpu_seconds"] = self.spend.get("cpu_seconds", 0.0) + held * self.cpus
        self.spend["gpu_seconds"] = self.spend.get("gpu_seconds", 0.0) + held * self.gpus
        return held

    # -------------------------------------------------------------------------------------------- limits
    def time_reached(self) -> str | None:
        """`budget.time` spent (over all runs of the sweep), or None."""
        limit = self.budget.time
        if limit is not None and self.seconds_before + self.elapsed() >= limit:
            return f"budget.time {limit:g}s reached"
        return None

    @property
    def watches_resources(self) -> bool:
        b = self.budget
        return b.cpu_hours is not None or b.gpu_hours is not None or bool(b.cost)

    def resources_reached(self, running_seconds: float, reported: Mapping[str, float]) -> str | None:
        """Which resource or cost budget is spent, counting `running_seconds` that running trials hold so
        far and `reported` (the sum over trials of each budget.cost name); or None."""
        b = self.budget
        for key, limit, spent, unit in (
                ("cpu_hours", b.cpu_hours, self.spend.get("cpu_seconds", 0.0) + running_seconds * self.cpus, "cpu"),
                ("gpu_hours", b.gpu_hours, self.spend.get("gpu_seconds", 0.0) + running_seconds * self.gpus, "gpu")):
            if limit is not None and spent >= limit * 3600:
                return f"budget.{key} {limit:g} reached ({spent / 3600:.3g} {unit}-hours held by trials)"
        for name, limit in (b.cost or {}).items():
            spent = self.cost(reported.get(name, 0.0), running_seconds)
            if spent >= limit:
                how = "spent by trials (reported and priced resource-hours)" if b.prices else "reported by trials"
                return f"budget.cost.{name} {limit:g} reached ({spent:.4g} {name} {how})"
        return None

    def cost(self, reported: float, running_seconds: float = 0.0) -> float:
        """A cost: what trials reported under its name, plus the priced resource-hours (budget.prices) held."""
        prices = self.budget.prices or {}
        if not prices:
            return reported
        cpu_h = (self.spend.get("cpu_seconds", 0.0) + running_seconds * self.cpus) / 3600
        gpu_h = (self.spend.get("gpu_seconds", 0.0) + running_seconds * self.gpus) / 3600
        return reported + cpu_h * prices.get("cpu_hour", 0.0) + gpu_h * prices.get("gpu_hour", 0.0)

    def snapshot(self, trials: int, reported: Mapping[str, float], running_seconds: float) -> dict[str, float]:
        """The spend as it stands now, counting the `running_seconds` that running trials hold so far, and
        `saved_at` (wall time): what a resume continues from if this run of the driver is killed before its
        clean end (`totals`), and the last moment the driver knew its running attempts alive."""
        out = dict(self.totals(trials, reported))
        out["cpu_seconds"] = out.get("cpu_seconds", 0.0) + running_seconds * self.cpus
        out["gpu_seconds"] = out.get("gpu_seconds", 0.0) + running_seconds * self.gpus
        out["saved_at"] = self.clock.time()
        return out

    def restore_alive(self, spend: Mapping[str, object]) -> float | None:
        """When the run that saved `spend` last knew its running attempts alive (None: it ended cleanly,
        or the store predates this record)."""
        at = spend.get("saved_at")
        return float(at) if isinstance(at, (int, float)) else None

    def totals(self, trials: int, reported: Mapping[str, float]) -> dict[str, float]:
        """The spend to store with the sweep (what `restore` reads back on resume)."""
        self.spend["seconds"] = self.seconds_before + self.elapsed()
        self.spend["trials"] = float(trials)
        for name in self.budget.cost or {}:
            self.spend[f"cost.{name}"] = self.cost(reported.get(name, 0.0))
        return self.spend
