"""Every budget, on a fake clock: which trials ran, how the last one ended, and why the sweep ended.

Unless a case says otherwise a trial takes 20 simulated seconds (reports at 10 s and 20 s, then returns) and
one slot runs them one after another: trial k holds [20k, 20k + 20].
"""

from __future__ import annotations

import pytest

from sweeplab.testing.fake import Script
from sweeplab.types import TrialState

TWENTY = Script().reports("loss", [0.9, 0.5], every=10.0).finish()


def finishing_with(values: dict[int, dict[str, float]]):
    """Trial k reports at 10 s and returns values[k] at 20 s."""
    return lambda task: Script().metrics(0, {"loss": 0.9}, after=10.0).finish(values[task.number], after=10.0)


CASES = [
    # id, spec changes, hard, scripts, expected trial states, expected end reason (prefix)
    ("trials", {"budget": {"trials": 3}}, False, TWENTY,
     ["completed"] * 3, "budget.trials reached"),
    ("time", {"budget": {"time": 50}}, False, TWENTY,
     ["completed", "completed", "stopped"], "budget.time 50s reached"),
    ("cpu_hours", {"budget": {"cpu_hours": 0.02}, "resources": {"cpus": 2}}, False, TWENTY,
     ["completed", "completed"], "budget.cpu_hours 0.02 reached"),       # 72 cpu-s: spent at 36 s
    ("cpu_hours-hard", {"budget": {"cpu_hours": 0.02}, "resources": {"cpus": 2}}, True, TWENTY,
     ["completed", "stopped"], "budget.cpu_hours 0.02 reached"),
    ("gpu_hours", {"budget": {"gpu_hours": 0.01}, "resources": {"gpus": 1}}, False, TWENTY,
     ["completed", "completed"], "budget.gpu_hours 0.01 reached"),       # 36 gpu-s: spent at 36 s
    ("gpu_hours-hard", {"budget": {"gpu_hours": 0.01}, "resources": {"gpus": 1}}, True, TWENTY,
     ["completed", "stopped"], "budget.gpu_hours 0.01 reached"),
    ("cost-reported", {"budget": {"cost": {"usd": 1.0}}}, False,
     finishing_with({k: {"loss": 0.5, "usd": 0.4} for k in range(9)}),
     ["completed"] * 3, "budget.cost.usd 1 reached (1.2 usd reported by trials)"),
    ("cost-priced", {"budget": {"cost": {"usd": 0.05}, "prices": {"cpu_hour": 3.6}}}, False, TWENTY,
     ["completed"] * 3, "budget.cost.usd 0.05 reached"),                 # 0.001 usd per cpu-s: spent at 50 s
    ("cost-priced-hard", {"budget": {"cost": {"usd": 0.05}, "prices": {"cpu_hour": 3.6}}}, True, TWENTY,
     ["completed", "completed", "stopped"], "budget.cost.usd 0.05 reached"),
    ("target", {"budget": {"trials": 9}, "metric": {"name": "loss", "goal": "minimize", "target": 0.2}}, False,
     finishing_with({k: {"loss": v} for k, v in enumerate([0.5, 0.3, 0.1, 0.05, 0.01])}),
     ["completed"] * 3, "metric.target 0.2 reached by trial 2"),
    ("target-maximize", {"budget": {"trials": 9}, "metric": {"name": "acc", "goal": "maximize", "target": 0.9}},
     False, finishing_with({k: {"acc": v} for k, v in enumerate([0.5, 0.95, 0.99])}),
     ["completed"] * 2, "metric.target 0.9 reached by trial 1"),
]


@pytest.mark.parametrize("changes, hard, scripts, states, reason", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_spent_budget_ends_the_sweep(sim, changes, hard, scripts, states, reason):
    out = sim.run(scripts, hard_budget=hard, **changes)
    assert sim.states() == states
    assert out.state.value == "finished" and out.exit_code == 0
    assert out.reason.startswith(reason), out.reason
    assert sim.sweep()["end_reason"] == out.reason
    assert len(sim.backend.calls_to("submit")) == len(states)       # nothing submitted past the budget
    assert [(x.number, x.state.value) for x in sim.tells] == list(enumerate(states))   # every end told


@pytest.mark.parametrize("hard", [False, True], ids=["soft", "hard"])
def test_a_resource_budget_stops_running_trials_only_when_hard(sim, hard):
    """cpu_hours spent at 36 s while trial 1 runs: soft lets it finish at 40 s, --hard stops it at once."""
    sim.run(TWENTY, hard_budget=hard, budget={"cpu_hours": 0.02}, resources={"cpus": 2})
    stops = sim.backend.calls_to("stop")
    if hard:
        assert [s.number for s in stops] == [1] and 36.0 <= stops[0].at <= 36.2
        assert sim.trial(1)["reason"].startswith("stopped: budget.cpu_hours 0.02 reached")
    else:
        assert stops == [] and sim.trial(1)["ended"] - sim.trial(1)["started"] == pytest.approx(20.0)


def test_the_time_budget_stops_running_trials_and_skips_their_retries(sim):
    """At budget.time no new trials, no retries: a trial that fails after the budget is not retried."""
    late_failure = Script().metrics(0, {"loss": 0.9}, after=10.0).fail(after=15.0).on_stop(after=30.0)
    out = sim.run(late_failure, budget={"time": 20}, trial={"retries": 3, "grace": 60})
    assert out.reason.endswith("budget.time 20s reached)")   # no trial completed: exit 1
    assert len(sim.backend.calls_to("submit")) == 1
    t = sim.trial(0)
    assert (t["state"], t["attempts"]) == ("stopped", 1)     # the stop decided first; the failure ended it
    assert [(x.number, x.state) for x in sim.tells] == [(0, TrialState.STOPPED)]


def test_the_spend_is_stored_for_a_resumed_driver(sim):
    sim.run(TWENTY, budget={"trials": 3}, resources={"cpus": 2})
    import json

    spend = json.loads(sim.sweep()["spend"])
    assert spend["cpu_seconds"] == pytest.approx(120.0)
    assert spend["seconds"] == pytest.approx(60.0, abs=0.2)
    assert spend["trials"] == 3


@pytest.mark.parametrize("changes", [
    {"budget": {"trials": 1, "time": 30}},                                   # trials reached at once (slot free)
    {"method": "grid", "parameters": {"x": {"values": [0.1]}}, "budget": {"time": 30}},   # space exhausted
], ids=["trials-reached-first", "grid-exhausted-first"])
def test_the_time_budget_stops_a_trial_still_running_after_the_sweep_stopped_creating_trials(sim, changes):
    """budget.time is a deadline for running trials whatever ended trial creation before it: a 100 s trial
    is stopped at 30 s (it used to run to its end once budget.trials or the grid had ended the sweep)."""
    long = Script().reports("loss", [0.9] * 10, every=10.0).finish().on_stop(after=1.0)
    sim.run(long, slots=2, **changes)
    stops = sim.backend.calls_to("stop")
    assert [s.number for s in stops] == [0] and 30.0 <= stops[0].at <= 30.2, stops
    t = sim.trial(0)
    assert (t["state"], t["reason"]) == ("stopped", "stopped: budget.time 30s reached")


def test_a_hard_resource_budget_stops_a_trial_still_running_after_budget_trials_ended_creation(sim):
    """--hard cpu_hours (0.005 h = 18 cpu-s) spent while the only trial of `trials: 1` runs: it is stopped at
    18 s (it used to run its 100 s once budget.trials had ended trial creation)."""
    long = Script().reports("loss", [0.9] * 10, every=10.0).finish().on_stop(after=1.0)
    sim.run(long, slots=2, hard_budget=True, budget={"trials": 1, "cpu_hours": 0.005})
    stops = sim.backend.calls_to("stop")
    assert [s.number for s in stops] == [0] and 18.0 <= stops[0].at <= 18.2, stops
    assert sim.trial(0)["reason"].startswith("stopped: budget.cpu_hours 0.005 reached")


def test_a_trial_queued_for_a_retry_when_a_budget_is_spent_ends_stopped_with_the_budget_reason(sim):
    """Trial 0 reports usd 5 (over budget.cost.usd 4) and fails in the same breath: its retry was queued
    before the budget was checked, and it stayed `queued` in a finished sweep. It ends `stopped`, as a
    running trial a budget stops does, with the budget's reason; it is not run again."""
    def scripts(task):
        if task.number == 0:
            return Script().metrics(0, {"loss": 1.0, "usd": 5.0}, after=1.0).fail(message="once", after=0.0)
        return TWENTY

    out = sim.run(scripts, slots=2, budget={"trials": 4, "cost": {"usd": 4.0}}, trial={"retries": 2})
    assert out.state.value == "finished" and out.reason.startswith("budget.cost.usd 4 reached")
    t = sim.trial(0)
    assert (t["state"], t["attempts"]) == ("stopped", 1), (t["state"], t["reason"])
    assert t["reason"] == f"stopped: {out.reason}"
    assert [a["state"] for a in sim.attempts(0)] == ["failed"]
    assert [s.number for s in sim.backend.calls_to("submit")] == [0, 1]
    assert (0, TrialState.STOPPED) in [(x.number, x.state) for x in sim.tells]
    assert not [r for r in sim.trials() if r["state"] == "queued"]
