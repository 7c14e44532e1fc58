"""Trial policy on a fake clock: retries, deterministic failures, crash loops, timeouts, grace kills, heartbeats,
preemption. Every trial is scripted; times are simulated seconds, so every assertion on a time is exact."""

from __future__ import annotations

import signal

import pytest

from sweeplab.testing.fake import Script
from sweeplab.types import TrialState

GOOD = Script().reports("loss", [0.9, 0.5], every=10.0).finish()


def by_attempt(*scripts: Script):
    """Attempt k (1-based) follows scripts[k-1]; later attempts the last one."""
    return lambda task: scripts[min(task.attempt, len(scripts)) - 1]


def test_a_trial_failing_once_is_retried_and_then_completes(sim):
    out = sim.run(by_attempt(Script().fail("RuntimeError", "flaky disk", after=5.0), GOOD), budget={"trials": 1})
    assert out.counts["completed"] == 1
    t = sim.trial(0)
    assert (t["state"], t["attempts"], t["value"]) == ("completed", 2, 0.5)
    assert [(a["number"], a["state"]) for a in sim.attempts(0)] == [(1, "failed"), (2, "completed")]
    assert [(c.number, c.arg.attempt) for c in sim.backend.calls_to("submit")] == [(0, 1), (0, 2)]
    assert sim.tells == [sim.tells[0]] and sim.tells[0].state is TrialState.COMPLETED   # told once, at the end


def test_a_trial_failing_twice_the_same_way_is_not_retried_again(sim):
    out = sim.run(Script().fail("ValueError", "bad shape (3, 4)", after=1.0), budget={"trials": 1},
                  trial={"retries": 5})
    t = sim.trial(0)
    assert t["state"] == "failed" and t["attempts"] == 2
    assert t["reason"] == "ValueError: bad shape (3, 4) (failed the same way twice: not retried)"
    assert len(sim.backend.calls_to("submit")) == 2
    assert [(x.number, x.state) for x in sim.tells] == [(0, TrialState.FAILED)]
    assert out.counts["failed"] == 1


def test_different_failures_are_retried_until_retries_run_out(sim):
    sim.run(lambda task: Script().fail("OSError", f"disk {task.attempt} full", after=1.0),
            budget={"trials": 1}, trial={"retries": 2})
    t = sim.trial(0)
    assert (t["state"], t["attempts"], t["reason"]) == ("failed", 3, "OSError: disk 3 full")
    assert [r["message"] for r in sim.events("retry")] == [
        "trial 0 attempt 1 failed (OSError: disk 1 full); retrying (1/2)",
        "trial 0 attempt 2 failed (OSError: disk 2 full); retrying (2/2)"]


@pytest.mark.parametrize("crash, reason", [
    (Script().crash(sig=signal.SIGSEGV, after=1.0), "worker process killed by signal SIGSEGV"),
    (Script().crash(exit_code=3, after=1.0), "worker process exited with code 3"),
], ids=["segfault", "os._exit"])
def test_a_dying_worker_is_never_taken_for_a_deterministic_failure(sim, crash, reason):
    """The same signal twice says nothing about the trial's code (OOM killer, a bad node): all retries run."""
    sim.run(crash, budget={"trials": 1}, trial={"retries": 2})
    t = sim.trial(0)
    assert (t["state"], t["attempts"], t["reason"]) == ("failed", 3, reason)


def test_zero_retries_fails_a_trial_at_its_first_failure(sim):
    sim.run(by_attempt(Script().fail(after=1.0), GOOD), budget={"trials": 2}, trial={"retries": 0})
    assert [(t["state"], t["attempts"]) for t in sim.trials()] == [("failed", 1), ("failed", 1)]


@pytest.mark.parametrize("slots, created", [(1, 3), (2, 4), (4, 4)], ids=["1-slot", "2-slots", "4-slots"])
def test_a_crash_loop_ends_the_sweep_failed_without_creating_more_trials(sim, slots, created):
    """Every trial fails from the start: at the third failure in a row the sweep ends FAILED. Trials here
    run in lockstep, so the whole batch in flight when the loop is seen fails too (2 slots: 4 trials)."""
    out = sim.run(Script().fail("ImportError", "no module named torchh", after=2.0), slots=slots,
                  budget={"trials": 20}, trial={"retries": 0})
    assert out.state.value == "failed" and out.exit_code == 1
    assert out.reason.startswith("crash loop: the first")
    assert "ImportError: no module named torchh" in out.reason
    assert len(sim.trials()) == created
    assert set(sim.states()) == {"failed"}
    assert sim.sweep()["state"] == "failed"


def test_no_crash_loop_once_a_trial_has_completed(sim):
    out = sim.run(lambda task: GOOD if task.number == 0 else Script().fail(after=1.0),
                  budget={"trials": 6}, trial={"retries": 0})
    assert out.state.value == "finished" and out.reason == "budget.trials reached"
    assert sim.states() == ["completed"] + ["failed"] * 5


def test_trial_timeout_counts_every_attempt_and_is_not_retried(sim):
    """trial.timeout bounds the total over attempts: 60 s failed + 40 s of the retry = 100 s, then a kill."""
    slow = Script().reports("loss", [0.9] * 100, every=10.0).finish()
    out = sim.run(by_attempt(Script().fail("RuntimeError", "first", after=60.0), slow),
                  budget={"trials": 1}, trial={"timeout": 100, "retries": 5})
    kills = sim.backend.calls_to("kill")
    assert [(k.number, k.attempt, k.arg) for k in kills] == [
        (0, 2, "trial.timeout (100s over all its attempts) exceeded")]
    assert 100.0 < kills[0].at <= 100.2
    t = sim.trial(0)
    assert (t["state"], t["attempts"]) == ("failed", 2)
    assert t["reason"] == "trial.timeout (100s over all its attempts) exceeded"
    assert out.counts["failed"] == 1


@pytest.mark.parametrize("script, killed", [
    (Script().reports("loss", [0.9] * 50, every=1.0).on_stop(after=3.0), False),
    (Script().reports("loss", [0.9] * 50, every=1.0).ignore_stop(), True),
], ids=["stops-within-grace", "ignores-stop"])
def test_a_trial_that_does_not_stop_within_grace_is_killed_and_the_stop_stands(sim, script, killed):
    """budget.time stops the running trial at 20 s; grace is 5 s."""
    out = sim.run(script, budget={"time": 20}, trial={"grace": 5})
    assert out.reason.endswith("budget.time 20s reached)")   # no trial completed: exit 1
    stops, kills = sim.backend.calls_to("stop"), sim.backend.calls_to("kill")
    assert [s.number for s in stops] == [0] and 20.0 <= stops[0].at <= 20.2
    t = sim.trial(0)
    assert t["state"] == "stopped" and t["reason"] == "stopped: budget.time 20s reached"
    assert t["value"] == 0.9   # its last report, also when it was killed (that one read None)
    if killed:
        assert [k.arg for k in kills] == ["did not stop within trial.grace (5s)"]
        assert 5.0 < kills[0].at - stops[0].at <= 5.2
        assert sim.attempts(0)[0]["state"] == "failed"   # the attempt was killed; the trial's stop stands
    else:
        assert kills == []
        assert sim.attempts(0)[0]["state"] == "stopped"
    assert [(x.number, x.state) for x in sim.tells] == [(0, TrialState.STOPPED)]


def test_a_hung_trial_is_killed_after_heartbeat_timeout_and_retried(sim):
    hung = Script().metrics(0, {"loss": 0.9}, after=5.0).hang()
    sim.run(by_attempt(hung, GOOD), budget={"trials": 1}, trial={"heartbeat_timeout": 20})
    kills = sim.backend.calls_to("kill")
    assert [(k.attempt, k.arg) for k in kills] == [(1, "no heartbeat for 20s (trial.heartbeat_timeout; hung)")]
    assert 25.0 < kills[0].at <= 25.2        # last sign of life at 5 s (the report), then 20 s of silence
    assert [(a["state"], a["reason"]) for a in sim.attempts(0)] == [
        ("failed", "no heartbeat for 20s (trial.heartbeat_timeout; hung)"), ("completed", None)]
    assert sim.trial(0)["state"] == "completed"


def test_a_slow_but_alive_trial_is_not_taken_for_a_hung_one(sim):
    """Minutes between reports with heartbeats flowing: no kill."""
    slow = Script().metrics(0, {"loss": 0.9}, after=1.0).metrics(1, {"loss": 0.4}, after=300.0).finish()
    sim.run(slow, budget={"trials": 1}, trial={"heartbeat_timeout": 20})
    assert sim.backend.calls_to("kill") == []
    assert sim.trial(0)["state"] == "completed" and sim.trial(0)["value"] == 0.4


def test_a_preempted_trial_is_requeued_and_preemption_is_not_a_failure(sim):
    """Even with retries 0: a spot reclaim says nothing about the trial. It checkpoints within its grace."""
    reclaimed = Script().metrics(0, {"loss": 0.9}, after=5.0).checkpoint(0).preempt(after=1.0).on_stop(after=2.0)
    sim.run(by_attempt(reclaimed, GOOD), budget={"trials": 1}, trial={"retries": 0})
    assert [(a["state"], a["reason"]) for a in sim.attempts(0)] == [
        ("preempted", "SIGTERM (preemption)"), ("completed", None)]
    assert sim.trial(0)["state"] == "completed"
    assert [(x.number, x.state) for x in sim.tells] == [(0, TrialState.COMPLETED)]
    assert len(sim.rows("SELECT * FROM checkpoints")) == 1


def test_a_trial_outliving_its_sigterm_grace_is_requeued_as_preempted(sim):
    ignoring = Script().preempt(after=3.0).reports("loss", [0.9] * 50, every=1.0).ignore_stop()
    sim.run(by_attempt(ignoring, GOOD), budget={"trials": 1}, trial={"grace": 7})
    first = sim.attempts(0)[0]
    assert (first["state"], first["reason"]) == ("preempted", "SIGTERM; grace of 7s expired")
    assert first["ended"] - first["started"] == pytest.approx(10.0)
    assert sim.trial(0)["state"] == "completed"


# ------------------------------------------------------------------------------------------ a full disk
def test_a_trial_finding_the_disk_full_is_interrupted_not_failed_and_the_sweep_stops(sim):
    """No retry, no failure, nothing told to the searcher; the other running trial is stopped as by Ctrl-C; the
    sweep ends stopped with the full trial's reason and exit 1. Resumed once there is room, both run again."""
    long = Script().reports("loss", [0.9, 0.8, 0.7, 0.6], every=10.0).finish()

    def first(task):
        return Script().reports("loss", [0.9], every=1.0).disk_full(after=4.0) if task.number == 0 else long

    out = sim.run(first, slots=2, budget={"trials": 4}, trial={"retries": 3})
    assert out.exit_code == 1 and out.state.value == "stopped"
    assert out.reason.startswith("trial 0 found the disk full: cannot write checkpoint under /ckpt: [Errno 28]")
    assert "`sweeplab resume s` runs it again once there is room" in out.reason
    assert sim.states() == ["interrupted", "interrupted"]
    assert [(a["number"], a["state"]) for a in sim.attempts(0)] == [(1, "interrupted")]
    assert "No space left on device" in sim.attempts(0)[0]["reason"]
    assert not sim.events("retry") and not sim.events("failure") and sim.tells == []
    assert len(sim.backend.calls_to("submit")) == 2 and sim.sweep()["state"] == "stopped"

    out = sim.resume(long, slots=2)
    assert out.exit_code == 0 and sim.states() == ["completed"] * 4
    assert [a["state"] for a in sim.attempts(0)] == ["interrupted", "completed"]
