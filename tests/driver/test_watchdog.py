"""Watchdog: the orders time gives (time budget, grace kills, timeouts, heartbeats, idle monitors), on a fake
clock with plain trial records: nothing is stopped or killed here, the orders are only checked."""

from __future__ import annotations

from sweeplab._clock import FakeClock
from sweeplab.driver.budget import BudgetAccountant
from sweeplab.driver.records import TrialRecord
from sweeplab.driver.watchdog import Judge, Kill, Watchdog
from sweeplab.monitors import StalledMonitor
from sweeplab.spec import Budget, Resources, TrialPolicy
from sweeplab.types import Decision, MetricPoint, Origin, Verdict


def setup(policy: TrialPolicy = TrialPolicy(), monitors=(), budget: Budget = Budget()):
    clock = FakeClock()
    dog = Watchdog(policy, list(monitors), BudgetAccountant(budget, Resources(), clock), clock)
    return dog, clock


def running(clock: FakeClock, tid: int = 1, **kw) -> TrialRecord:
    t = TrialRecord(id=tid, number=tid - 1, params={}, config={}, seed=0)
    t.started_mono = t.last_seen = clock.monotonic()
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def test_a_quiet_healthy_trial_gets_no_order():
    dog, clock = setup(TrialPolicy(timeout=100.0, heartbeat_timeout=10.0, grace=5.0))
    t = running(clock)
    clock.advance(9.0)
    assert dog.orders([t]) == []


def test_the_time_budget_stops_the_sweep_once():
    dog, clock = setup(budget=Budget(time=60.0))
    clock.advance(59.0)
    assert dog.time_up(ending=False) is None
    clock.advance(1.0)
    assert dog.time_up(ending=False) == "budget.time 60s reached"
    assert dog.time_up(ending=True) is None          # already ending: nothing more to order


def test_a_trial_that_outlives_its_grace_is_killed_and_may_be_retried():
    dog, clock = setup(TrialPolicy(grace=5.0, heartbeat_timeout=None))
    t = running(clock, stop_at=clock.monotonic())
    clock.advance(5.0)
    assert dog.orders([t]) == []
    clock.advance(0.5)
    assert dog.orders([t]) == [Kill(1, "did not stop within trial.grace (5s)")]


def test_trial_timeout_counts_earlier_attempts_and_is_final():
    dog, clock = setup(TrialPolicy(timeout=30.0, heartbeat_timeout=None))
    t = running(clock, spent=25.0)
    clock.advance(5.5)
    assert dog.orders([t]) == [Kill(1, "trial.timeout (30s over all its attempts) exceeded", final=True)]


def test_a_silent_trial_is_killed_as_hung():
    dog, clock = setup(TrialPolicy(heartbeat_timeout=10.0))
    t = running(clock)
    clock.advance(10.5)
    assert dog.orders([t]) == [Kill(1, "no heartbeat for 10s (trial.heartbeat_timeout; hung)")]


def test_a_trial_being_killed_is_not_killed_again():
    dog, clock = setup(TrialPolicy(heartbeat_timeout=10.0))
    t = running(clock, kill_reason="earlier")
    clock.advance(100.0)
    assert dog.orders([t]) == []


def test_a_not_yet_started_trial_is_left_alone():
    dog, clock = setup(TrialPolicy(heartbeat_timeout=1.0))
    t = running(clock, started_mono=None)
    clock.advance(100.0)
    assert dog.orders([t]) == []


def reported(clock: FakeClock, dog: Watchdog, t: TrialRecord, at: float | None = None) -> TrialRecord:
    """`t` reported a loss at the monotonic time `at` (default now), as the driver tells the monitors."""
    at = clock.monotonic() if at is None else at
    t.last_report = at
    for m in dog.monitors:
        m.heard(t.number, [MetricPoint(int(at * 1000), "loss", 0.5, 0.0)], clock.time() - (clock.monotonic() - at))
    return t


def test_an_idle_monitor_judges_a_trial_that_stopped_reporting_as_a_monitor():
    dog, clock = setup(TrialPolicy(heartbeat_timeout=None), monitors=[StalledMonitor(30.0)])
    t = reported(clock, dog, running(clock))
    clock.advance(20.0)
    assert dog.orders([t]) == []
    clock.advance(11.0)
    [order] = dog.orders([t])
    assert isinstance(order, Judge) and order.trial_id == 1
    assert order.verdict.decision is Decision.STOP and order.verdict.origin is Origin.MONITOR
    assert order.verdict.rule == "stalled"


def test_idle_monitors_skip_a_trial_already_asked_to_stop():
    dog, clock = setup(TrialPolicy(heartbeat_timeout=None, grace=1e9), monitors=[StalledMonitor(1.0)])
    t = running(clock, last_report=clock.monotonic(), stop_verdict=Verdict(Decision.STOP, "pruned"),
                stop_at=clock.monotonic())
    clock.advance(50.0)
    assert dog.orders([t]) == []


def test_kills_come_before_monitors_one_order_per_trial():
    dog, clock = setup(TrialPolicy(heartbeat_timeout=5.0), monitors=[StalledMonitor(1.0)])
    quiet = reported(clock, dog, running(clock, tid=1))
    clock.advance(6.0)
    fresh = reported(clock, dog, running(clock, tid=2), clock.monotonic() - 3.0)
    orders = dog.orders([quiet, fresh])
    assert [type(o) for o in orders] == [Kill, Judge]
    assert [o.trial_id for o in orders] == [1, 2]


def _turns(dog: Watchdog, clock: FakeClock, seconds: float, every: float = 0.1) -> None:
    """The driver's turns, each polling `every` seconds, for `seconds`."""
    end = clock.monotonic() + seconds
    while clock.monotonic() < end:
        dog.turn(clock.monotonic(), every)
        clock.advance(every)


def test_a_pause_of_the_driver_is_no_trial_s_silence_but_later_silence_is():
    """Trials frozen with their driver (a whole-sweep freeze, the driver woken first) were not silent: a turn
    that comes late is a pause of the driver, left out of their silence; silence after it still counts."""
    stalled = StalledMonitor(3.0)
    dog, clock = setup(TrialPolicy(heartbeat_timeout=2.0), monitors=[stalled])
    t = running(clock)
    stalled.heard(t.number, [MetricPoint(0, "loss", 1.0, clock.time())], clock.time(), first=True)
    t.last_report = clock.monotonic()
    _turns(dog, clock, 1.0)
    clock.advance(30.0)                                   # the driver frozen, with its trials
    _turns(dog, clock, 0.5)
    assert dog.orders([t], at=clock.monotonic()) == []   # 1.5 s of silence out of 31.5
    _turns(dog, clock, 0.6)
    assert dog.orders([t], at=clock.monotonic()) == [Kill(1, "no heartbeat for 2s (trial.heartbeat_timeout; hung)")]
    t.last_seen = clock.monotonic()                        # heartbeats again, but no report
    _turns(dog, clock, 1.0)
    (judge,) = dog.orders([t], at=clock.monotonic())
    assert isinstance(judge, Judge) and judge.verdict.decision is Decision.STOP


def test_a_driver_that_keeps_its_turns_judges_silence_by_the_clock():
    dog, clock = setup(TrialPolicy(heartbeat_timeout=2.0))
    t = running(clock)
    _turns(dog, clock, 2.05)
    assert dog.orders([t], at=clock.monotonic()) == [Kill(1, "no heartbeat for 2s (trial.heartbeat_timeout; hung)")]


def test_a_driver_late_because_busy_is_not_paused():
    """Late turns with the CPU in use (a large batch to write): the trials' heartbeats waited in the pipe, so
    a hung trial's silence counts in full."""
    dog, clock = setup(TrialPolicy(heartbeat_timeout=2.0))
    t = running(clock)
    cpu = 0.0
    for _ in range(2):
        dog.turn(clock.monotonic(), 0.1, cpu)
        clock.advance(1.6)
        cpu += 1.4
    dog.turn(clock.monotonic(), 0.1, cpu)
    assert dog.orders([t], at=clock.monotonic()) == [Kill(1, "no heartbeat for 2s (trial.heartbeat_timeout; hung)")]
