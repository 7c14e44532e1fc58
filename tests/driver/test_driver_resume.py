"""Resume on a fake clock: interrupted trials are requeued with their parameters, completed ones never rerun,
the searcher is replayed and then told only new outcomes, the scheduler is replayed in original order.

Two ways a driver goes away: Ctrl-C (a real SIGINT to this process, caught by the driver's handler, which
stops the running trials and marks them interrupted) and a crash (an exception out of `poll`, which leaves
the running trials 'running' in the store, as kill -9 would).
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from sweeplab.backends.events import EventKind
from sweeplab.testing.fake import Script
from sweeplab.types import TrialState

TWENTY = Script().reports("loss", [0.9, 0.5], every=10.0).finish()


class DriverKilled(BaseException):
    """Raised from the backend's poll: the driver dies where it stands (nothing is cleaned up in the store)."""


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def crash() -> None:
    raise DriverKilled


def snapshot(sim):
    return {t["number"]: (t["state"], t["attempts"], t["params"], t["value"], t["ended"]) for t in sim.trials()}


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "crash"])
def test_resume_requeues_interrupted_trials_and_never_reruns_completed_ones(sim, how):
    """Two slots, 20 s trials: at 30 s trials 0 and 1 are done and 2 and 3 are half way. Ctrl-C stops them
    (interrupted), SIGTERM preempts them (they may checkpoint; preempted), a crash leaves them 'running'."""
    driver, backend = sim.make(TWENTY, slots=2, budget={"trials": 6})
    driver.create(spec_path=None)
    backend.at(30.0, {"ctrl-c": ctrl_c, "sigterm": sigterm, "crash": crash}[how])
    if how == "ctrl-c":
        out = driver.run()
        assert (out.state.value, out.exit_code) == ("stopped", 130)
        assert sim.states() == ["completed", "completed", "interrupted", "interrupted"]
        assert [s.number for s in backend.calls_to("stop")] == [2, 3]
    elif how == "sigterm":
        out = driver.run()
        assert (out.state.value, out.exit_code) == ("stopped", 0)
        assert sim.states() == ["completed", "completed", "preempted", "preempted"]
        assert [s.number for s in backend.calls_to("preempt")] == [2, 3]
    else:
        with pytest.raises(DriverKilled):
            driver.run()
        assert sim.states() == ["completed", "completed", "running", "running"]
    before = snapshot(sim)
    first_tells = list(sim.tells)
    assert [(x.number, x.state) for x in first_tells] == [(0, TrialState.COMPLETED), (1, TrialState.COMPLETED)]

    out = sim.resume(TWENTY, slots=2, budget={"trials": 6})
    assert out.state.value == "finished" and out.counts["completed"] == 6
    # the interrupted trials first (attempt 2, same parameters), then new ones; nothing completed again
    assert [(c.number, c.attempt) for c in sim.backend.calls_to("submit")] == [(2, 2), (3, 2), (4, 1), (5, 1)]
    after = snapshot(sim)
    assert after[0] == before[0] and after[1] == before[1]
    assert after[2][2] == before[2][2] and after[3][2] == before[3][2]
    first = {"ctrl-c": ("interrupted", "interrupted"), "sigterm": ("preempted", "SIGTERM (preemption)"),
             "crash": ("interrupted", "the driver stopped while it ran")}[how]
    for n in (2, 3):
        assert [(a["state"], a["reason"]) for a in sim.attempts(n)] == [first, ("completed", None)]
    # the searcher saw the four stored trials, then was told each new outcome once
    lost = TrialState.PREEMPTED if how == "sigterm" else TrialState.INTERRUPTED
    assert sim.replayed[-1] == [(0, TrialState.COMPLETED), (1, TrialState.COMPLETED), (2, lost), (3, lost)]
    assert sorted(x.number for x in sim.tells) == list(range(6))


def test_a_second_ctrl_c_while_stopping_gives_up_waiting_and_still_resumes(sim):
    """Trials that ignore the stop: the first Ctrl-C waits for them, the second stops the wait."""
    stubborn = Script().reports("loss", [0.9] * 100, every=1.0).ignore_stop()
    driver, backend = sim.make(stubborn, slots=2, budget={"trials": 2}, trial={"grace": 60})
    driver.create(spec_path=None)
    backend.at(10.0, ctrl_c)
    backend.at(12.0, ctrl_c)
    out = driver.run()
    assert out.exit_code == 130 and sim.states() == ["interrupted", "interrupted"]
    assert sim.clock.monotonic() == pytest.approx(12.0)
    out = sim.resume(TWENTY, slots=2, budget={"trials": 2})
    assert sim.states() == ["completed", "completed"]


def test_time_budget_carries_over_a_ctrl_c(sim):
    """budget.time 50 s: 30 s before the interruption, so the resumed run has 20 s left."""
    driver, backend = sim.make(TWENTY, budget={"time": 50})
    driver.create(spec_path=None)
    backend.at(30.0, ctrl_c)
    driver.run()
    sim.clock.advance(3600.0)                         # an hour later
    resumed_at = sim.clock.monotonic()
    out = sim.resume(TWENTY, budget={"time": 50})
    assert out.reason == "budget.time 50s reached"
    assert sim.clock.monotonic() - resumed_at == pytest.approx(20.0, abs=0.2)


def test_time_budget_carries_over_a_driver_crash(sim):
    driver, backend = sim.make(TWENTY, budget={"time": 50})
    driver.create(spec_path=None)
    backend.at(30.0, crash)
    with pytest.raises(DriverKilled):
        driver.run()
    resumed_at = sim.clock.monotonic()
    sim.resume(TWENTY, budget={"time": 50})
    assert sim.clock.monotonic() - resumed_at <= 20.2


def test_trial_timeout_does_not_count_the_time_the_driver_was_down(sim):
    """trial.timeout 100 s; the trial runs 30 s, the driver crashes and is resumed an hour later, the retry runs
    10 s and is Ctrl-C'd; after a second resume the trial still has 60 s of its timeout left."""
    long = Script().reports("loss", [0.9] * 50, every=10.0).finish()
    driver, backend = sim.make(long, budget={"trials": 1}, trial={"timeout": 100})
    driver.create(spec_path=None)
    backend.at(30.0, crash)
    with pytest.raises(DriverKilled):
        driver.run()
    sim.clock.advance(3600.0)
    driver, backend = sim.make(long, budget={"trials": 1}, trial={"timeout": 100})
    driver.resume()
    backend.at(sim.clock.monotonic() + 10.0, ctrl_c)
    driver.run()
    sim.resume(long, budget={"trials": 1}, trial={"timeout": 100})
    (submit,) = sim.backend.calls_to("submit")
    (kill,) = sim.backend.calls_to("kill")
    assert (submit.attempt, kill.arg) == (3, "trial.timeout (100s over all its attempts) exceeded")
    assert kill.at - submit.at >= 50.0   # 100 s minus what attempts 1 and 2 really ran (30 s + 10 s)


ASHA = {"early_terminate": {"type": "asha", "min_iter": 1, "max_iter": 9, "eta": 3},
        "method": "grid", "parameters": {"x": {"values": [0.1, 0.9, 0.5, 0.7, 0.2, 0.8, 0.3, 0.6]}},
        "budget": {}}


def curve(task):
    """loss = x + 1 / (step + 1), a report every 1.0 + 0.01 * number s (no two events at one instant)."""
    x = float(task.params["x"])
    every = 1.0 + 0.01 * task.number
    return Script().reports("loss", [x + 1 / (s + 1) for s in range(9)], every=every).finish(after=every / 2)


def _rungs(scheduler):
    return {step: list(values) for step, values in scheduler._inner._rungs[0].items()}


@pytest.mark.parametrize("how", ["ctrl-c", "crash"])
def test_resume_replays_the_stored_reports_to_the_scheduler_in_their_original_order(sim, how):
    driver, backend = sim.make(curve, slots=2, **ASHA)
    driver.create(spec_path=None)
    backend.at(8.0, ctrl_c if how == "ctrl-c" else crash)
    if how == "ctrl-c":
        assert driver.run().exit_code == 130
    else:
        with pytest.raises(DriverKilled):
            driver.run()
    assert {"interrupted", "running"} & set(sim.states()), "the sweep should end mid-way"
    original, rungs = list(sim.scheduler_calls), _rungs(driver.scheduler)
    assert any(c[0] == "end" and c[2] is TrialState.PRUNED for c in original), "ASHA should have pruned"
    sim.scheduler_calls.clear()
    driver, backend = sim.make(curve, slots=2, **ASHA)
    driver.resume()
    assert sim.scheduler_calls == original
    assert _rungs(driver.scheduler) == rungs
    out = driver.run()
    assert out.state.value == "finished" and len(sim.trials()) == 8


def test_resume_does_not_feed_the_scheduler_reports_it_never_saw(sim):
    """Without decision steps a pruned trial reports on until it notices the stop (2.5 s here)."""
    def late(task):
        return curve(task).on_stop(after=2.5)

    driver, backend = sim.make(late, slots=2, decisions=False, **ASHA)
    driver.create(spec_path=None)
    backend.at(20.0, crash)
    with pytest.raises(DriverKilled):
        driver.run()
    original, rungs = list(sim.scheduler_calls), _rungs(driver.scheduler)
    sim.scheduler_calls.clear()
    driver, backend = sim.make(late, slots=2, decisions=False, **ASHA)
    driver.resume()
    assert _rungs(driver.scheduler) == rungs
    assert sim.scheduler_calls == original


def test_a_resumed_sweep_keeps_its_stored_spend_and_trial_count(sim):
    driver, backend = sim.make(TWENTY, budget={"trials": 3}, resources={"cpus": 2})
    driver.create(spec_path=None)
    backend.at(30.0, ctrl_c)
    driver.run()
    spend = json.loads(sim.sweep()["spend"])
    assert spend["cpu_seconds"] == pytest.approx(60.0, abs=0.5)   # 20 s + 10 s, 2 CPUs each
    sim.resume(TWENTY, budget={"trials": 3}, resources={"cpus": 2})
    assert sim.states() == ["completed"] * 3
    assert json.loads(sim.sweep()["spend"])["cpu_seconds"] == pytest.approx(60.0 + 20.0 * 2 * 2, abs=0.5)


def test_resume_feeds_the_monitors_the_stored_points_so_a_warning_is_not_given_twice(sim):
    """A `plateau` warning given before a Ctrl-C is not given again by the resumed attempt of the same
    plateau: the monitors are fed the stored points (as the scheduler is), so their state is what the driver
    that ran the trial had built, not an empty one."""
    flat = Script().reports("loss", [1.0] * 6, every=10.0).finish()
    monitors = [{"plateau": {"metric": "loss", "patience": 2, "action": "warn"}}]
    driver, backend = sim.make(flat, budget={"trials": 1}, monitors=monitors)
    driver.create(spec_path=None)
    backend.at(35.0, ctrl_c)
    assert driver.run().exit_code == 130
    warned = [e["message"] for e in sim.events("rule")]
    assert len(warned) == 1 and warned[0].startswith("[warn] plateau:"), warned
    out = sim.resume(flat, budget={"trials": 1}, monitors=monitors)
    assert out.counts["completed"] == 1
    assert [e["message"] for e in sim.events("rule")] == warned     # the same plateau: no second warning


def test_a_report_the_driver_let_go_on_is_not_pruned_by_the_replay(sim):
    """A trial's report reaches the driver late (a function trial's buffered points, up to a second): trial 2's
    step-1 loss 1.5, logged at 1.8 s, is judged at 3 s, once trial 1 (3.0 at step 1) has completed, so the median
    rule compares it with median(1.0, 3.0) = 2.0 and lets it go on. The replay orders reports by their times and
    put it before trial 1's end (median 1.0): it pruned the trial the live driver had let go on, at its first
    report after the resume. (Trial 1's 3.0 came before any trial completed: nothing to compare it with.)"""
    start = sim.clock.time()

    def script(task):
        n = task.number
        if n == 0:
            return Script().metrics(1, {"loss": 1.0}, after=1.0).finish(after=0.1)
        if n == 1:
            return Script().metrics(1, {"loss": 3.0}, after=0.5).finish(after=2.0)
        late = {"points": [[1, "loss", 1.5, start + 1.8]]}
        return (Script().event(EventKind.METRICS, late, after=3.0).metrics(2, {"loss": 0.5}, after=2.0)
                .metrics(3, {"loss": 0.4}, after=10.0).finish(after=0.1))
    median = {"early_terminate": {"type": "median", "warmup": 1}, "budget": {"trials": 3}}
    driver, backend = sim.make(script, slots=3, **median)
    driver.create(spec_path=None)
    backend.at(8.0, crash)
    with pytest.raises(DriverKilled):
        driver.run()
    assert sim.states() == ["completed", "completed", "running"]
    sim.resume(script, slots=3, **median)
    assert sim.states() == ["completed", "completed", "completed"], [dict(t) for t in sim.trials()]



def test_the_searcher_is_told_a_pruned_curve_up_to_its_verdict_live_and_on_resume(sim):
    """The median rule does not hold a trial at its reports: a pruned trial reports on until it notices the stop
    (2.5 s here, two more reports, as many as its timing allows). The searcher (TPE ranks pruned trials by their
    last intermediate value) is told the curve up to the report that was judged, so what it learns does not
    depend on that timing; a resume replays it the same way."""
    def script(task):
        losses = [1.0, 0.9, 0.8, 0.7, 0.6] if task.number == 0 else [5.0, 4.9, 4.8, 4.7, 4.6]
        return Script().reports("loss", losses, every=1.0).finish().on_stop(after=2.5)
    median = {"early_terminate": {"type": "median", "warmup": 1}, "budget": {"trials": 2}}
    sim.run(script, **median)
    assert sim.states() == ["completed", "pruned"]
    told = [t for t in sim.tells if t.number == 1]
    assert told[0].state is TrialState.PRUNED and told[0].intermediate == {0: 5.0}, told
    reported = sim.rows("SELECT step FROM metrics WHERE trial_id=? ORDER BY step", sim.trial(1)["id"])
    assert len(reported) > 1   # it did report past its verdict
    driver, _ = sim.make(script, **median)
    driver.resume()
    assert dict(sim.snapshots[1].history["loss"]) == {0: 5.0}


def test_a_pruned_trial_preempted_on_its_way_out_stays_pruned(sim):
    """Trial 1 is pruned at its first rung and takes 3 s to notice; meanwhile its node is lost (a SIGTERM to the
    trial, the Ray backend's preemption): its PREEMPTED end does not requeue it, the prune stands."""
    def script(task):
        loss = 1.0 if task.number == 0 else 5.0
        return Script().reports("loss", [loss + 1 / s for s in range(1, 5)], every=1.0, start=1).finish() \
            .on_stop(after=3.0)
    asha = {"early_terminate": {"type": "asha", "min_iter": 1, "max_iter": 4, "eta": 2}, "budget": {"trials": 2}}
    driver, backend = sim.make(script, **asha)
    driver.create(spec_path=None)

    def lose_node() -> None:
        running = backend.running()
        assert running and sim.events("pruned"), "trial 1 should be pruned and still running"
        backend.preempt(running[0])

    backend.at(6.5, lose_node)
    driver.run()
    assert sim.states() == ["completed", "pruned"]
    assert [a["state"] for a in sim.attempts(1)] == ["pruned"]
