"""A stop's trial state follows who decided it (scheduler: PRUNED, monitor: STOPPED_BY_RULE), never the rule's
name: a monitor of your own called `median` (or `asha`) is a rule, not a scheduler."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sweeplab import monitors as sm
from sweeplab.types import TrialState

CURVES = Path(__file__).resolve().parents[1] / "fixtures" / "curves.py"


@pytest.mark.parametrize("name", ["median", "asha", "scheduler_like"])
def test_a_custom_monitor_named_like_a_scheduler_stops_by_rule_not_pruned(tmp_path, name):
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    rule = sm.custom(lambda trial, points: any(p.step >= 2 for p in points), name=name)
    spec = parse_spec({"function": f"{CURVES}:curve", "method": "grid",
                       "metric": {"name": "val_loss", "goal": "minimize"},
                       "trial": {"retries": 0},
                       "parameters": {"kind": {"values": ["good"]}, "steps": {"value": 50},
                                      "delay": {"value": 0.05}}}, file="<test>")
    spec = dataclasses.replace(spec, monitors=(rule,))   # a Python rule: the spec file cannot name one
    store = Store.open(tmp_path / "store")
    driver = Driver(spec, store, LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[])), sweep_name="own")
    driver.create(spec_path=None)
    outcome = driver.run()
    rows = store.trial_rows(driver.sweep_id)
    store.close()
    assert outcome.counts.get(TrialState.STOPPED_BY_RULE.value) == 1, outcome.counts
    assert outcome.counts.get(TrialState.PRUNED.value) == 0, outcome.counts
    assert [r["state"] for r in rows] == [TrialState.STOPPED_BY_RULE.value]


def test_a_verdict_stamped_by_its_origin_keeps_everything_else():
    from sweeplab.types import Decision, Origin, Verdict

    v = Verdict(Decision.STOP, "slow", "median", {"step": 3})
    by = v.by(Origin.SCHEDULER)
    assert (by.decision, by.reason, by.rule, dict(by.data), by.origin) == (
        Decision.STOP, "slow", "median", {"step": 3}, Origin.SCHEDULER)
    assert v.origin is None and by.by(Origin.SCHEDULER) is by


@pytest.mark.parametrize(("origin", "state", "event"), [
    ("scheduler", TrialState.PRUNED, "pruned"),
    ("monitor", TrialState.STOPPED_BY_RULE, "rule"),
], ids=["scheduler", "monitor"])
def test_the_stop_state_follows_the_origin_whatever_the_rule_is_called(tmp_path, origin, state, event):
    """The same rule name ("median") from either seam: only the origin decides (real store, no processes)."""
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.driver import Driver
    from sweeplab.driver.records import TrialRecord
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store
    from sweeplab.types import Decision, Origin, Verdict

    spec = parse_spec({"function": "t.py:f", "method": "grid", "metric": {"name": "loss"},
                       "parameters": {"x": {"values": [1]}}}, file="<test>")
    store = Store.open(tmp_path / "store")
    d = Driver(spec, store, LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[])), sweep_name="o")
    d.create(spec_path=None)
    t = TrialRecord(id=store.add_trial(d.sweep_id, 0, {"x": 1}, {"x": 1}, 0), number=0, params={"x": 1},
                    config={"x": 1}, seed=0, attempt=1)
    with store.transaction():
        d._apply_verdict(t, Verdict(Decision.STOP, "median: slow", "median").by(Origin(origin)))
    kinds = [r[0] for r in store.conn.execute("SELECT kind FROM events WHERE trial_id = ?", (t.id,))]
    store.close()
    assert t.stop_state is state
    assert kinds == [event]
