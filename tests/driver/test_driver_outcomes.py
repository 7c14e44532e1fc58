"""Every way a trial can end reaches the searcher exactly once, with the state and value the store holds;
the scheduler holds trials at its rungs and prunes them there."""

from __future__ import annotations

import math

import pytest

from sweeplab.testing.fake import Script
from sweeplab.types import TrialState

GOOD = Script().reports("loss", [0.9, 0.5], every=10.0).finish()


def by_attempt(*scripts: Script):
    return lambda task: scripts[min(task.attempt, len(scripts)) - 1]


OUTCOMES = [
    # id, scripts, spec changes, state, value, reason (prefix)
    ("completed", GOOD, {}, "completed", 0.5, None),
    ("returned-value-wins", Script().metrics(0, {"loss": 0.9}).finish({"loss": 0.25}), {}, "completed", 0.25, None),
    ("last-report-when-nothing-returned", Script().metrics(0, {"loss": 0.9}).metrics(1, {"loss": 0.7}).finish({}),
     {}, "completed", 0.7, None),
    ("metric-never-reported", Script().metrics(0, {"acc": 0.9}).finish(), {}, "failed", None,
     "metric 'loss' was never reported (reported: acc)"),
    ("objective-nan", Script().metrics(0, {"loss": 0.9}).finish({"loss": math.nan}), {}, "failed", None,
     "objective loss is nan"),
    ("raised-twice-the-same", Script().fail("KeyError", "'lr'"), {"trial": {"retries": 3}}, "failed", None,
     "KeyError: 'lr' (failed the same way twice"),
    ("nan-monitor", Script().metrics(0, {"loss": 0.9}).metrics(1, {"loss": math.nan}).metrics(2, {"loss": 0.1}),
     {"monitors": ["nan"]}, "stopped_by_rule", None, ""),
    ("preempted-then-completed", by_attempt(Script().preempt(after=5.0), GOOD), {}, "completed", 0.5, None),
    ("hung-then-completed", by_attempt(Script().hang(after=1.0), GOOD), {"trial": {"heartbeat_timeout": 10}},
     "completed", 0.5, None),
    ("killed-by-timeout", Script().reports("loss", [0.9] * 20, every=10.0), {"trial": {"timeout": 50}},
     "failed", None, "trial.timeout (50s over all its attempts) exceeded"),
]


@pytest.mark.parametrize("scripts, changes, state, value, reason", [c[1:] for c in OUTCOMES],
                         ids=[c[0] for c in OUTCOMES])
def test_the_searcher_is_told_each_outcome_once_as_stored(sim, scripts, changes, state, value, reason):
    sim.run(scripts, budget={"trials": 1}, **changes)
    t = sim.trial(0)
    assert t["state"] == state
    assert t["value"] == (pytest.approx(value) if value is not None else None)
    if reason is not None:
        assert (t["reason"] or "").startswith(reason), t["reason"]
    assert [(x.number, x.state.value, x.value) for x in sim.tells] == [(0, state, t["value"])]


def test_a_mixed_sweep_tells_every_trial_once_in_the_order_they_ended(sim):
    """Three slots; each trial number has its own fate."""
    fates = {
        0: GOOD,
        1: Script().fail("ValueError", "bad", after=3.0),
        2: by_attempt(Script().preempt(after=4.0), GOOD),
        3: Script().metrics(0, {"loss": math.nan}, after=6.0).reports("loss", [0.1] * 5, start=1),
        4: by_attempt(Script().hang(after=2.0), GOOD),
        5: Script().metrics(0, {"acc": 0.5}, after=1.0).finish(),
    }

    def script(task):
        fate = fates[task.number]
        return fate if isinstance(fate, Script) else fate(task)

    sim.run(script, slots=3, budget={"trials": 6}, monitors=["nan"], trial={"heartbeat_timeout": 10})
    stored = {t["number"]: (t["state"], t["ended"]) for t in sim.trials()}
    assert {n: s for n, (s, _) in stored.items()} == {
        0: "completed", 1: "failed", 2: "completed", 3: "stopped_by_rule", 4: "completed", 5: "failed"}
    assert sorted(x.number for x in sim.tells) == list(range(6))
    assert [x.number for x in sim.tells] == sorted(stored, key=lambda n: (stored[n][1], n))
    assert {x.number: x.state.value for x in sim.tells} == {n: s for n, (s, _) in stored.items()}


ASHA = {"early_terminate": {"type": "asha", "min_iter": 1, "max_iter": 9, "eta": 3},
        "method": "grid", "parameters": {"x": {"values": [0.2, 0.1, 0.9]}}, "budget": {}}


def curve(task):
    x = float(task.params["x"])
    return Script().reports("loss", [x + 1 / (s + 1) for s in range(9)], every=1.0).finish()


def test_asha_holds_each_trial_at_its_rungs_and_prunes_the_worst_there(sim):
    """One slot: trials 0 and 1 pass both rungs (steps 1 and 3), each the best at a rung so far (x=0.2, then
    0.1); trial 2 (x=0.9) is the worst of three at step 1 and stops there without training further."""
    out = sim.run(curve, **ASHA)
    assert out.reason == "search space exhausted (grid finished)"
    assert sim.states() == ["completed", "completed", "pruned"]
    assert [tuple(t.decision_steps) for t in sim.backend.tasks] == [(1, 3)] * 3
    assert [(c.number, c.arg) for c in sim.backend.calls_to("go")] == [(0, 1), (0, 3), (1, 1), (1, 3)]
    (stop,) = sim.backend.calls_to("stop")
    assert stop.number == 2
    steps = [r["step"] for r in sim.rows("SELECT step FROM metrics WHERE trial_id=? ORDER BY step",
                                          sim.trial(2)["id"])]
    assert steps == [0, 1]                       # held at the rung, stopped: nothing trained past it
    assert sim.trial(2)["reason"].startswith("rung 1 (step 1): loss 1.4 not in top 1/3 of 3 trials")
    assert [(x.number, x.state) for x in sim.tells][-1] == (2, TrialState.PRUNED)
    assert ("end", 2, TrialState.PRUNED) in sim.scheduler_calls


def test_without_decision_support_a_pruned_trial_runs_until_it_notices_the_stop(sim):
    out = sim.run(lambda task: curve(task).on_stop(after=2.5), decisions=False, **ASHA)
    assert out.counts["pruned"] == 1
    assert [t.decision_steps for t in sim.backend.tasks] == [()] * 3
    assert sim.backend.calls_to("go") == []
    steps = [r["step"] for r in sim.rows("SELECT step FROM metrics WHERE trial_id=? ORDER BY step",
                                          sim.trial(2)["id"])]
    assert steps == [0, 1, 2, 3]                 # two more reports in the 2.5 s before it stopped
