"""The fake itself: time moves only as scripted, heartbeats flow while a trial is alive, calls are recorded."""

from __future__ import annotations

import signal

import pytest

from sweeplab._clock import FakeClock
from sweeplab.backends.base import TrialTask
from sweeplab.backends.events import EventKind
from sweeplab.errors import BackendError
from sweeplab.testing.fake import DECISION_WAIT, FakeBackend, Script


def task(trial: int = 1, attempt: int = 1, **kw) -> TrialTask:
    return TrialTask(trial_id=trial, number=trial - 1, attempt=attempt, sweep="fake", kind="function",
                     target="x.py:f", heartbeat_interval=kw.pop("heartbeat_interval", 5.0), **kw)


def drain(b: FakeBackend, timeout: float = 0.1, until: float = 1e6):
    """(monotonic time, kind) of every event until the backend has nothing running or `until` passes."""
    out = []
    while b.running() and b.clock.monotonic() < until:
        out += [(b.clock.monotonic(), e.kind) for e in b.poll(timeout)]
    return out


def test_poll_jumps_to_the_next_scripted_moment_but_never_past_its_timeout():
    clock = FakeClock()
    b = FakeBackend(clock, Script().metrics(0, {"loss": 1.0}, after=3.0).finish(after=2.0))
    b.submit(task(heartbeat_interval=100.0))
    assert [e.kind for e in b.poll(1.0)] == [EventKind.STARTED] and clock.monotonic() == 0.0
    assert b.poll(1.0) == [] and clock.monotonic() == pytest.approx(1.0)
    assert b.poll(10.0)[0].kind is EventKind.METRICS and clock.monotonic() == pytest.approx(3.0)
    end = b.poll(10.0)
    assert [e.kind for e in end] == [EventKind.FINISHED] and clock.monotonic() == pytest.approx(5.0)
    assert end[0].data == {"metrics": {"loss": 1.0}, "stopped": False, "retire": False}
    assert end[0].time == clock.time()
    assert b.running() == [] and b.free_slots() == 1


def test_heartbeats_flow_while_the_trial_lives_and_stop_when_it_hangs():
    b = FakeBackend(FakeClock(), Script().hang(after=12.0))
    b.submit(task(heartbeat_interval=5.0))
    seen = drain(b, until=60.0)
    assert [t for t, k in seen if k is EventKind.HEARTBEAT] == pytest.approx([5.0, 10.0])


@pytest.mark.parametrize("script, act, kind, data", [
    (Script().finish(after=50.0), lambda b: b.kill(1, "too slow"), EventKind.FAILED,
     {"reason": "too slow (killed by signal SIGKILL)", "error_type": "Killed", "exit_code": None, "signal": 9,
      "message": "too slow (killed by signal SIGKILL)"}),
    (Script().crash(sig=signal.SIGSEGV, after=1.0), None, EventKind.FAILED,
     {"reason": "worker process killed by signal SIGSEGV", "error_type": "WorkerDied", "exit_code": None,
      "signal": 11, "message": "worker process killed by signal SIGSEGV"}),
    (Script().finish(after=50.0).on_stop(after=2.0), lambda b: b.stop(1), EventKind.FINISHED,
     {"metrics": {}, "stopped": True, "retire": False}),
    (Script().finish(after=50.0), lambda b: b.preempt(1), EventKind.PREEMPTED,
     {"reason": "SIGTERM (preemption)", "retire": True}),
    (Script().finish(after=50.0).ignore_stop(), lambda b: b.preempt(1), EventKind.PREEMPTED,
     {"reason": "SIGTERM; grace of 7s expired", "retire": True}),
], ids=["kill", "segfault", "stop", "preempt", "preempt-past-grace"])
def test_attempts_end_with_the_data_the_local_backend_sends(script, act, kind, data):
    b = FakeBackend(FakeClock(), script)
    b.submit(task(grace=7.0))
    b.poll(0.1)                                   # STARTED
    if act is not None:
        act(b)
    events = []
    while b.running():
        events += b.poll(1.0)
    assert events[-1].kind is kind and events[-1].data == data


def test_fail_sends_what_the_worker_sends_for_an_exception():
    b = FakeBackend(FakeClock(), Script().fail("KeyError", "'lr'", after=1.0))
    b.submit(task())
    (end,) = [e for e in (b.poll(5.0) + b.poll(5.0)) if e.kind.ends_attempt]
    d = end.data
    assert (d["reason"], d["error_type"], d["message"]) == ("KeyError: 'lr'", "KeyError", "'lr'")
    assert d["traceback"].startswith("Traceback") and d["capture"] is None


def test_a_trial_at_a_decision_step_waits_for_go_and_goes_on_alone_after_the_wait():
    script = Script().metrics(1, {"loss": 0.5}, after=1.0).metrics(2, {"loss": 0.4}, after=1.0)
    b = FakeBackend(FakeClock(), script)
    b.submit(task(decision_steps=(1, 2), decision_metric="loss"))
    seen = [(b.clock.monotonic(), e.data.get("decide")) for e in b.poll(5) + b.poll(5) if e.kind is EventKind.METRICS]
    assert seen == [(1.0, 1)]
    b.go(1, 1)
    (m,) = [e for e in b.poll(5.0) if e.kind is EventKind.METRICS]
    assert m.data["decide"] == 2 and b.clock.monotonic() == pytest.approx(2.0)
    assert [e.kind for e in b.poll(60.0)] == [EventKind.HEARTBEAT]    # at 5 s, still waiting
    end = [e for e in b.poll(60.0) + b.poll(60.0) if e.kind.ends_attempt]
    assert end[0].kind is EventKind.FINISHED and b.clock.monotonic() == pytest.approx(2.0 + DECISION_WAIT)


def test_every_call_is_recorded_with_the_trial_and_the_time():
    clock = FakeClock()
    b = FakeBackend(clock, Script().finish(after=10.0), slots=2)
    b.start()
    b.submit(task(1))
    b.submit(task(2))
    with pytest.raises(BackendError, match="no free slot"):
        b.submit(task(3))
    clock.advance(4.0)
    b.stop(2)
    b.kill(1, "why")
    b.go(1, 3)
    b.shutdown(grace=1.5)
    assert [(c.op, c.trial, c.number, c.at, c.arg if c.op != "submit" else c.arg.trial_id) for c in b.calls] == [
        ("start", None, None, 0.0, None), ("submit", 1, 0, 0.0, 1), ("submit", 2, 1, 0.0, 2),
        ("stop", 2, 1, 4.0, None), ("kill", 1, 0, 4.0, "why"), ("go", 1, 0, 4.0, 3),
        ("shutdown", None, None, 4.0, 1.5)]
    assert [t.trial_id for t in b.tasks] == [1, 2] and b.running() == []


@pytest.mark.parametrize("build, message", [
    (lambda: Script().finish(after=-1.0), "before the previous one"),
    (lambda: Script().crash(), "exactly one of exit_code and sig"),
    (lambda: FakeBackend(FakeClock(), Script(), slots=0), "at least 1"),
], ids=["negative-delay", "crash-without-cause", "no-slots"])
def test_mistakes_in_a_script_are_reported_at_once(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_a_driver_that_never_ends_fails_the_test_instead_of_hanging_it():
    b = FakeBackend(FakeClock(), Script().hang(after=1.0), max_polls=50)
    b.submit(task())
    with pytest.raises(AssertionError, match=r"polled 50 times .* running trials by number: \{0: 'hung'\}"):
        while True:
            b.poll(0.1)


def test_the_fake_clock_keeps_small_advances():
    clock = FakeClock()
    for _ in range(100):
        clock.advance(1e-8)
    assert clock.monotonic() == pytest.approx(1e-6)
