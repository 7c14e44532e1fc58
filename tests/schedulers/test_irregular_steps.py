"""Early stopping on a real learning curve reported at irregular steps (every other epoch, as a trial that
evaluates every 2 epochs does): the scheduler judges a rung on the first report at or past it, and the
trial waits there for the verdict, so a pruned trial trains nothing past the report it was judged on."""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

import pytest

from sweeplab.api import run_sweep

TRAIN = textwrap.dedent("""
    def train(config, run):
        floor = {"good": 0.1, "good-b": 0.2, "hopeless": 2.0, "hopeless-b": 2.1}[config["kind"]]
        for step in range(0, 61, 2):            # reports at 0, 2, 4, ...: never at a rung step (1, 3, 9, 27)
            loss = floor + 1.0 / (step + 1)
            run.log({"val_loss": loss if config["goal"] == "minimize" else -loss}, step=step)
            if run.should_stop:
                break
        return {"val_loss": loss if config["goal"] == "minimize" else -loss}
""")


@pytest.mark.parametrize("kind", ["asha", "hyperband"])
@pytest.mark.parametrize("goal", ["minimize", "maximize"])
def test_a_trial_reporting_between_rungs_is_held_at_the_first_report_past_a_rung(tmp_path: Path, goal: str,
                                                                                  kind: str) -> None:
    (tmp_path / "irregular.py").write_text(TRAIN)
    stop = ({"type": "asha", "min_iter": 1, "max_iter": 60, "eta": 3} if kind == "asha"
            else {"type": "hyperband", "min_iter": 1, "eta": 3})
    spec = {"function": f"{tmp_path / 'irregular.py'}:train", "method": "grid", "seed": 0,
            "metric": {"name": "val_loss", "goal": goal}, "early_terminate": stop,
            "parameters": {"kind": {"values": ["good", "good-b", "hopeless", "hopeless-b"]},
                           "goal": {"value": goal}}}
    outcome = run_sweep(spec, store=tmp_path / "store", workers=1, name="irregular")
    assert outcome.exit_code == 0, outcome
    with sqlite3.connect(tmp_path / "store" / "store.db") as c:
        rows = c.execute("SELECT t.state, MAX(m.step) FROM metrics m JOIN trials t ON t.id = m.trial_id "
                         "WHERE m.key = 'val_loss' GROUP BY t.number ORDER BY t.number").fetchall()
    # grid order: good, good-b, hopeless, hopeless-b (W&B order: the values as written)
    assert [r[0] for r in rows] == ["completed", "pruned", "pruned", "pruned"], rows
    assert rows[0][1] == 60
    # ASHA: the first report past rung 1 (step 1) is step 2, where good-b is behind good (top 1 of 2 with
    # fewer than eta values there); hyperband: band 1 is the first report (step 0), judged against the
    # threshold of the trials there
    judged_at = 2 if kind == "asha" else 0
    assert [step for _, step in rows[1:]] == [judged_at] * 3, rows


EVERY_5 = textwrap.dedent("""
    def train(config, run):
        # reports at steps 0, 5, 10, ...: report r (1-based) is at step 5 * (r - 1)
        for report in range(1, 200):
            if config["kind"] == "good":
                loss = 1.0 if report < 9 else 0.1
            else:          # ahead of good at bands 1 and 3, behind it from report 9 (band 9) on
                loss = 0.5 if report < 9 else 2.0
            run.log({"val_loss": loss}, step=5 * (report - 1))
            if run.should_stop:
                break
        return {"val_loss": loss}
""")


def test_a_hyperband_trial_reporting_every_5_steps_is_held_at_the_report_its_band_judged(tmp_path: Path) -> None:
    """Hyperband's bands count reports of the metric (W&B's rule): band 9 is the 9th report, step 40 for a
    trial logging every 5 steps. The trial waits for the verdict there, so pruned at band 9 its last report is
    step 40 (it used to wait only at steps near the band numbers, and trained on past it)."""
    (tmp_path / "every5.py").write_text(EVERY_5)
    spec = {"function": f"{tmp_path / 'every5.py'}:train", "method": "grid", "seed": 0,
            "metric": {"name": "val_loss", "goal": "minimize"},
            "early_terminate": {"type": "hyperband", "min_iter": 1, "eta": 3},
            "parameters": {"kind": {"values": ["good", "late"]}}}
    outcome = run_sweep(spec, store=tmp_path / "store", workers=1, name="every5")
    assert outcome.exit_code == 0, outcome
    with sqlite3.connect(tmp_path / "store" / "store.db") as c:
        rows = c.execute("SELECT t.state, t.reason, MAX(m.step) FROM metrics m JOIN trials t ON t.id = m.trial_id "
                         "WHERE m.key = 'val_loss' GROUP BY t.number ORDER BY t.number").fetchall()
    assert [r[0] for r in rows] == ["completed", "pruned"], rows
    assert rows[0][2] == 5 * 198
    assert "band 3 (report 9)" in rows[1][1] and rows[1][2] == 40, rows


def test_reports_are_counted_as_hyperband_counts_them() -> None:
    """A NaN or infinite value and a step at or below one already reported are no new report (the hyperband
    scheduler's count), so the trial waits at the report its band is judged on, and only there."""
    from sweeplab.run import DecisionPoints

    d = DecisionPoints((1, 3, 9), reports=True)
    # counted: step 0 (report 1), 10 (2), 20 (3: band 3); the NaN at step 5 is no report, yet step 5 is taken
    reports = [(0, 1.0), (5, float("nan")), (5, 0.9), (3, 0.8), (10, 0.7), (15, float("inf")), (20, 0.6)]
    assert [d.passes(step, v) for step, v in reports] == [True, False, False, False, False, False, True]
    steps = DecisionPoints((1, 3, 9))   # ASHA's rungs: steps, the first report at or past each
    assert [steps.passes(s, 0.5) for s in (0, 5, 10, 15)] == [False, True, True, False]


def test_the_simulated_backend_holds_a_hyperband_trial_at_the_reports_its_bands_judge() -> None:
    """The fake backend's trial follows Run.log's rule: reports every 5 steps, bands 1 and 3 in reports."""
    from sweeplab._clock import FakeClock
    from sweeplab.backends.base import TrialTask
    from sweeplab.backends.events import EventKind
    from sweeplab.testing.fake import FakeBackend, Script

    script = Script()
    for i in range(5):
        script = script.metrics(5 * i, {"loss": 1.0 - i / 10}, after=1.0)
    b = FakeBackend(FakeClock(), script.finish())
    b.submit(TrialTask(trial_id=1, number=0, attempt=1, sweep="fake", kind="function", target="x.py:f",
                       decision_steps=(1, 3), decision_metric="loss", decision_reports=True))
    held = []
    for _ in range(40):
        for e in b.poll(1.0):
            if e.kind is EventKind.METRICS and "decide" in e.data:
                held.append(e.data["decide"])
                b.go(1, e.data["decide"])
    assert held == [0, 10]
