"""BudgetAccountant: what a sweep spent and which budget that reaches, on a fake clock (no processes)."""

from __future__ import annotations

import pytest

from sweeplab._clock import FakeClock
from sweeplab.driver.budget import BudgetAccountant
from sweeplab.spec import Budget, Resources


def accountant(budget: Budget, resources: Resources = Resources()) -> tuple[BudgetAccountant, FakeClock]:
    clock = FakeClock()
    return BudgetAccountant(budget, resources, clock), clock


def test_time_budget_counts_this_run_and_earlier_runs():
    acc, clock = accountant(Budget(time=100.0))
    acc.restore({"seconds": 60.0})
    clock.advance(39.0)
    assert acc.time_reached() is None
    clock.advance(1.0)
    assert acc.time_reached() == "budget.time 100s reached"


def test_no_time_budget_is_never_reached():
    acc, clock = accountant(Budget())
    clock.advance(1e9)
    assert acc.time_reached() is None


def test_released_attempts_book_the_resources_they_held():
    acc, clock = accountant(Budget(), Resources(cpus=2.0, gpus=0.5))
    start = clock.monotonic()
    clock.advance(10.0)
    assert acc.release(start) == pytest.approx(10.0)
    assert acc.spend["cpu_seconds"] == pytest.approx(20.0)
    assert acc.spend["gpu_seconds"] == pytest.approx(5.0)


@pytest.mark.parametrize(("budget", "held", "running", "reached"), [
    (Budget(cpu_hours=1.0), 3599.0, 0.0, None),
    (Budget(cpu_hours=1.0), 3000.0, 600.0, "budget.cpu_hours 1 reached (1 cpu-hours held by trials)"),
    (Budget(gpu_hours=1.0), 7200.0, 0.0, None),          # the trials hold no GPU
], ids=["cpu-short", "cpu-with-running", "gpu-none-held"])
def test_resource_hours_count_running_trials(budget, held, running, reached):
    acc, clock = accountant(budget, Resources(cpus=1.0, gpus=0.0))
    start = clock.monotonic()
    clock.advance(held)
    acc.release(start)
    assert acc.resources_reached(running, {}) == reached


def test_a_cost_sums_what_trials_report_plus_priced_resource_hours():
    acc, clock = accountant(Budget(cost={"usd": 1.0}, prices={"cpu_hour": 0.5}), Resources(cpus=1.0))
    assert acc.watches_resources
    assert acc.resources_reached(0.0, {"usd": 0.9}) is None
    start = clock.monotonic()
    clock.advance(720.0)                                  # 0.2 cpu-hours = 0.1 usd
    acc.release(start)
    reason = acc.resources_reached(0.0, {"usd": 0.9})
    assert reason is not None and reason.startswith("budget.cost.usd 1 reached (1 usd spent by trials")


def test_totals_round_trip_through_restore():
    acc, clock = accountant(Budget(cost={"usd": 5.0}))
    clock.advance(12.0)
    saved = dict(acc.totals(3, {"usd": 1.5}))
    assert saved["seconds"] == pytest.approx(12.0) and saved["trials"] == 3.0 and saved["cost.usd"] == 1.5
    again, clock2 = accountant(Budget(time=20.0))
    again.restore({**saved, "note": "not a number"})
    assert "note" not in again.spend
    clock2.advance(8.0)
    assert again.time_reached() == "budget.time 20s reached"


@pytest.mark.parametrize(("resources", "cpus", "gpus"), [
    (Resources(cpus=2.0, gpus=1.0, workers=4), 2.0, 1.0),                     # cpus / gpus: the trial's totals
    (Resources(workers=4, cpus_per_worker=2.0, gpus_per_worker=1.0), 8.0, 4.0),   # per process x processes
    (Resources(cpus=3.0, workers=2, gpus_per_worker=0.5), 3.0, 1.0),
])
def test_a_multi_process_trial_spends_what_it_holds_per_process_times_processes(resources, cpus, gpus):
    """`gpus_per_worker: 1` with `workers: 4` holds 4 GPUs (as the backends place it); the accountant used
    `resources.gpus` alone (0 by default), so such a sweep never spent any GPU-hours."""
    acc, clock = accountant(Budget(cpu_hours=1.0, gpu_hours=1.0), resources)
    started = clock.monotonic()
    clock.advance(3600.0)
    acc.release(started)
    assert acc.spend["cpu_seconds"] == pytest.approx(cpus * 3600.0)
    assert acc.spend["gpu_seconds"] == pytest.approx(gpus * 3600.0)
