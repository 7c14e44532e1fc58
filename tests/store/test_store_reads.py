"""The store's answers to the driver, `repro`, the dry-run's estimate and the dashboard (their SQL lives here).

Store methods (`Store.attempt_seconds`, `Store.metric_reports`, ...) serve the driver, `repro` and the
smoke measurements; query functions (`queries.sweep_id`, `queries.completed_version`, ...) serve the
dashboard, and read one snapshot of the store: an answer never mixes states from before and after one of
the driver's commits.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from sweeplab.dashboard.reader import Reader
from sweeplab.errors import UserError
from sweeplab.store import Store
from sweeplab.store import queries as q

T0 = 1_700_000_000.0
SPEC = "/specs/s.yaml"   # a spec path as the store records it (never opened here)


def _smoke_spec() -> dict[str, Any]:
    return {"_sweeplab": {"smoke": True}}


def _completed(s: Store, sid: int, number: int, *, seconds: float, last_step: int | None,
               attempts: int = 1) -> int:
    """A completed trial whose `attempts` attempts each ran `seconds` (the last one completed)."""
    tid = s.add_trial(sid, number, {"x": number}, None, seed=number)
    for a in range(1, attempts + 1):
        s.add_attempt(tid, a, started=T0 + 100 * a)
        s.update_attempt(tid, a, state="completed" if a == attempts else "failed", ended=T0 + 100 * a + seconds)
    s.update_trial(tid, state="completed", value=0.1 * number, last_step=last_step, attempts=attempts)
    return tid


@pytest.fixture
def writer(tmp_path: Path) -> Any:
    s = Store.open(tmp_path)
    yield s
    s.close()


# ---------------------------------------------------------------------------------------------- driver
def test_attempt_seconds_sums_finished_attempts_only(writer: Store) -> None:
    with writer.transaction():
        sid = writer.create_sweep(name="a", method="grid", metric="loss", goal="minimize", spec={},
                                  spec_path=None, seed=0)
        tid = _completed(writer, sid, 0, seconds=2.5, last_step=3, attempts=2)    # 2 x 2.5 s
        writer.add_attempt(tid, 3, started=T0 + 900)                              # running: not counted
        other = writer.add_trial(sid, 1, {"x": 1}, None, seed=1)
    assert writer.attempt_seconds(tid) == pytest.approx(5.0)
    assert writer.attempt_seconds(other) == 0.0 and isinstance(writer.attempt_seconds(other), float)


def test_metric_reports_are_one_key_of_one_sweep_in_the_order_they_were_stored(writer: Store) -> None:
    with writer.transaction():
        sid = writer.create_sweep(name="a", method="grid", metric="loss", goal="minimize", spec={},
                                  spec_path=None, seed=0)
        other = writer.create_sweep(name="b", method="grid", metric="loss", goal="minimize", spec={},
                                    spec_path=None, seed=0)
        t0 = writer.add_trial(sid, 0, {}, None, None)
        t1 = writer.add_trial(sid, 1, {}, None, None)
        tb = writer.add_trial(other, 0, {}, None, None)
        # interleaved as a sweep with two workers stores them; step order differs from storage order
        writer.add_metrics(t1, 1, [(0, "loss", 1.0, T0 + 1), (0, "acc", 0.5, T0 + 1)])
        writer.add_metrics(t0, 1, [(0, "loss", 2.0, T0 + 2)])
        writer.add_metrics(tb, 1, [(0, "loss", 9.0, T0 + 2)])
        writer.add_metrics(t0, 2, [(0, "loss", float("nan"), T0 + 3)])     # a retry repeats step 0
        writer.add_metrics(t1, 1, [(1, "loss", 0.5, T0 + 4)])
    rows = [tuple(r) for r in writer.metric_reports(sid, "loss")]
    assert rows == [(t1, 0, 1.0, T0 + 1), (t0, 0, 2.0, T0 + 2), (t0, 0, None, T0 + 3), (t1, 1, 0.5, T0 + 4)]
    assert [tuple(r) for r in writer.metric_reports(sid, "acc")] == [(t1, 0, 0.5, T0 + 1)]
    assert writer.metric_reports(sid, "nope") == []


# ---------------------------------------------------------------------------------------------- repro
def test_repro_reads_trial_by_number_its_last_failure_and_newest_capture(tmp_path: Path, writer: Store) -> None:
    with writer.transaction():
        sid = writer.create_sweep(name="a", method="grid", metric="loss", goal="minimize", spec={},
                                  spec_path=None, seed=0)
        writer.add_trial(sid, 0, {"x": 0}, None, seed=0)
        tid = writer.add_trial(sid, 1, {"x": 1}, None, seed=7)
        for a, state in ((1, "failed"), (2, "failed"), (3, "preempted")):
            writer.add_attempt(tid, a, started=T0 + a)
            writer.update_attempt(tid, a, state=state, ended=T0 + a + 1, reason=f"attempt {a}")
        writer.add_artifact(tid, 1, "capture", "artifacts/a/1/old.pkl", T0)
        writer.add_artifact(tid, 2, "capture", "artifacts/a/1/new.pkl", T0 + 1)
        writer.add_artifact(tid, 2, "plot", "artifacts/a/1/plot.png", T0 + 2)
    reader = Store.open(tmp_path, readonly=True)
    try:
        trial = reader.trial_by_number(sid, 1)
        assert trial is not None and (trial["id"], trial["seed"]) == (tid, 7)
        assert reader.trial_by_number(sid, 2) is None
        assert reader.trial_count(sid) == 2
        failed = reader.last_failed_attempt(tid)
        assert failed is not None and (failed["number"], failed["reason"]) == (2, "attempt 2")
        assert reader.last_failed_attempt(reader.trial_by_number(sid, 0)["id"]) is None
        cap = reader.latest_artifact(tid, "capture")
        assert cap is not None and cap["path"] == "artifacts/a/1/new.pkl"
        assert reader.latest_artifact(tid, "model") is None
    finally:
        reader.close()


# ---------------------------------------------------------------------------------------------- dry-run
def test_the_smoke_measurements_the_dry_run_estimate_reads(tmp_path: Path, writer: Store) -> None:
    with writer.transaction():
        old = writer.create_sweep(name="smoke-1", method="grid", metric="loss", goal="minimize",
                                  spec=_smoke_spec(), spec_path=SPEC, seed=0)
        new = writer.create_sweep(name="smoke-2", method="grid", metric="loss", goal="minimize",
                                  spec=_smoke_spec(), spec_path=SPEC, seed=0)
        writer.create_sweep(name="real", method="grid", metric="loss", goal="minimize", spec={},
                            spec_path=SPEC, seed=0)                           # not a smoke run
        writer.create_sweep(name="smoke-other", method="grid", metric="loss", goal="minimize",
                            spec=_smoke_spec(), spec_path="/specs/other.yaml", seed=0)
        t0 = _completed(writer, new, 0, seconds=2.0, last_step=1, attempts=2)   # attempts at T0+100, T0+200
        t1 = _completed(writer, new, 1, seconds=1.0, last_step=None)
        writer.update_trial(t1, profile={"steps": 3})
        failed = writer.add_trial(new, 2, {}, None, None, state="failed")
        writer.add_attempt(failed, 1, started=T0 + 50)
        writer.update_attempt(failed, 1, state="failed", ended=T0 + 1000)
        writer.add_attempt(t1, 2, started=T0 + 400)                             # still running: not finished
        writer.add_metrics(t0, 1, [(0, "loss", 1.0, T0 + 101), (0, "acc", 0.1, T0 + 101.5),
                                   (1, "loss", 0.5, T0 + 102)])
        writer.add_metrics(t0, 2, [(0, "loss", 0.9, T0 + 201)])                 # a retry re-reports step 0
    reader = Store.open(tmp_path, readonly=True)
    try:
        assert [r["name"] for r in reader.smoke_sweeps(SPEC)] == ["smoke-2", "smoke-1"]
        assert reader.smoke_sweeps("/specs/none.yaml") == []
        rows = [(r["id"], r["profile"], r["started"], r["ended"]) for r in reader.completed_attempts(new)]
        assert rows == [(t0, None, T0 + 100, T0 + 102), (t0, None, T0 + 200, T0 + 202),
                        (t1, '{"steps":3}', T0 + 100, T0 + 101)]
        assert reader.completed_attempts(old) == []
        assert reader.report_times(t0) == [(0, T0 + 201), (1, T0 + 102)]
        assert reader.report_times(t1) == []
        assert reader.attempt_span(new) == (T0 + 50, T0 + 1000)
        assert reader.attempt_span(old) == (None, None)
    finally:
        reader.close()


# ---------------------------------------------------------------------------------------------- dashboard
def _sweep_with_trials(writer: Store) -> tuple[int, list[int]]:
    with writer.transaction():
        sid = writer.create_sweep(name="a", method="grid", metric="loss", goal="minimize", spec={},
                                  spec_path=None, seed=0)
        ids = [writer.add_trial(sid, n, {"x": n}, None, None, state=state)
               for n, state in enumerate(("completed", "running", "pruned", "queued"))]
        writer.update_trial(ids[0], value=0.5)
    return sid, ids


def test_sweep_id_names_the_sweeps_there_are_when_the_name_is_unknown(tmp_path: Path, writer: Store) -> None:
    sid, _ = _sweep_with_trials(writer)
    reader = Store.open(tmp_path, readonly=True)
    try:
        assert q.sweep_id(reader, "a") == sid
        with pytest.raises(UserError, match=r"no sweep named 'b'.*sweeps: a"):
            q.sweep_id(reader, "b")
    finally:
        reader.close()


def test_trial_states_are_every_trial_by_number(tmp_path: Path, writer: Store) -> None:
    sid, ids = _sweep_with_trials(writer)
    reader = Store.open(tmp_path, readonly=True)
    try:
        assert q.trial_states(reader, sid) == list(zip(ids, ("completed", "running", "pruned", "queued")))
        assert q.trial_states(reader, sid + 1) == []
    finally:
        reader.close()


def test_completed_version_moves_only_with_the_completed_trials(tmp_path: Path, writer: Store) -> None:
    _, ids = _sweep_with_trials(writer)
    reader = Store.open(tmp_path, readonly=True)
    try:
        v0 = q.completed_version(reader, "a")
        assert v0 == (1, 0.5, 0)
        with writer.transaction():     # a running trial reports, a queued one starts: not a completed change
            writer.add_metrics(ids[1], 1, [(0, "loss", 0.3, T0)])
            writer.update_trial(ids[3], state="running")
        assert q.completed_version(reader, "a") == v0
        with writer.transaction():
            writer.update_trial(ids[1], state="completed", value=0.25)
        assert q.completed_version(reader, "a") == (2, 0.75, 1)
        with writer.transaction():     # a value changes (same count, same highest number)
            writer.update_trial(ids[1], value=0.125)
        assert q.completed_version(reader, "a") == (2, 0.625, 1)
        assert q.completed_version(reader, "nope") == (0, 0.0, None)
    finally:
        reader.close()


def test_a_dashboard_answer_reads_one_snapshot_across_its_store_calls(tmp_path: Path, writer: Store) -> None:
    """An API call runs inside `Reader.snapshot()`: the sweep id, trial states and completed version it reads
    all describe the state the call started with, though the driver commits in between."""
    sid, ids = _sweep_with_trials(writer)
    reader = Reader(tmp_path)
    try:
        with reader.snapshot() as store:
            before = (q.sweep_id(store, "a"), q.trial_states(store, sid), reader.completed_version("a"))
            with writer.transaction():   # trial 1 completes, trial 4 starts
                writer.update_trial(ids[1], state="completed", value=0.25)
                writer.add_trial(sid, 4, {"x": 4}, None, None, state="running")
            during = (q.sweep_id(store, "a"), q.trial_states(store, sid), reader.completed_version("a"))
            assert reader.sweep_metric_keys(sid) == []
        assert during == before
        with reader.snapshot() as store:   # the next answer sees the commit
            assert q.trial_states(store, sid)[1] == (ids[1], "completed") and len(q.trial_states(store, sid)) == 5
            assert reader.completed_version("a") == (2, 0.75, 1)
    finally:
        reader.close()


def test_completed_version_total_is_finite_for_json(tmp_path: Path, writer: Store) -> None:
    """A NaN value is stored as NULL, so the version's total stays a plain number."""
    _, ids = _sweep_with_trials(writer)
    with writer.transaction():
        writer.update_trial(ids[2], state="completed", value=float("nan"))
    reader = Store.open(tmp_path, readonly=True)
    try:
        count, total, _ = q.completed_version(reader, "a")
        assert count == 2 and math.isfinite(total) and total == 0.5
    finally:
        reader.close()
