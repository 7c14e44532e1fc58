"""Reads that must cost the same at 10,000 trials as at 100 (issue 18): `best`, `status`, the sweep list and the
dashboard's change token. Cost is counted in SQLite virtual-machine steps (deterministic, no clock): a read
that scans or sorts a sweep's trials takes ~10x the steps on a sweep 10x as large."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sweeplab.store import Store
from sweeplab.store import queries as q

T0 = 1_700_000_000.0


def _fill(root: Path, trials: int, goal: str = "minimize", running: int = 2) -> None:
    """A sweep as the driver writes it: each trial added running, its attempt, 4 metrics at 3 steps, then
    completed with its value; the last `running` trials still run."""
    s = Store.open(root)
    with s.transaction():
        sid = s.create_sweep(name="s", method="random", metric="loss", goal=goal, spec={}, spec_path=None, seed=0)
        for n in range(trials):
            tid = s.add_trial(sid, n, {"x": n / trials}, {"x": n / trials}, seed=n, state="running",
                              started=T0 + n, attempts=1)
            s.add_attempt(tid, 1, started=T0 + n)
            s.add_metrics(tid, 1, [(step, key, (n * 7919 % 1000) / 1000 + step, T0 + n)
                                   for step in range(3) for key in ("loss", "val_loss", "acc", "lr")])
            if n < trials - running:
                s.update_attempt(tid, 1, state="completed", ended=T0 + n + 1)
                s.update_trial(tid, state="completed", value=(n * 7919 % 1000) / 1000, ended=T0 + n + 1,
                               metrics={"loss": 0.0})
    s.close()


def _steps(root: Path, read: Callable[[Store], Any]) -> int:
    """SQLite VM steps (in units of 10) that `read` costs on a fresh read-only store."""
    store = Store.open(root, readonly=True)
    counter = [0]

    def tick() -> int:
        counter[0] += 1
        return 0

    store.conn.set_progress_handler(tick, 10)
    read(store)
    store.close()
    return counter[0]


def _seq(s: Store) -> int:
    return int(s.conn.execute("SELECT seq FROM trials WHERE sweep_id=1 ORDER BY seq DESC LIMIT 1").fetchone()[0])


READS: dict[str, Callable[[Store], Any]] = {
    "best_trial": lambda s: q.best_trial(s, "s"),
    "list_sweeps": q.list_sweeps,
    "sweep_summary": lambda s: q.sweep_summary(s, "s"),
    "sweep_status(limit=20)": lambda s: q.sweep_status(s, "s", limit=20),
    "changed_since": lambda s: q.changed_since(s, "s", None),
    "finished_version": lambda s: q.finished_version(s, "s"),
    "sweep_metric_keys (the dashboard's keys)": lambda s: q.sweep_metric_keys(s, 1),
    "trial_columns(since=) (a live page's 3 changed trials)": lambda s: q.trial_columns(s, "s", since=_seq(s) - 3),
    "trial_columns(limit=50) (the table's first page)": lambda s: q.trial_columns(s, "s", limit=50),
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    out = {}
    for n in (50, 500):
        out[n] = tmp_path_factory.mktemp(f"s{n}")
        _fill(out[n], n)
    return out


@pytest.mark.parametrize("read", list(READS))
def test_a_read_costs_the_same_on_a_sweep_ten_times_as_large(stores: dict[int, Path], read: str) -> None:
    small, large = (_steps(stores[n], READS[read]) for n in (50, 500))
    assert large - small <= 0.1 * small + 10, (read, small, large)


def _counts(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The sweep's counts as the queries report them, and as counted from its trials."""
    store = Store.open(root, readonly=True)
    reported = {k: v for k, v in q.sweep_summary(store, "s")["sweep"]["counts"].items() if v}
    counted = dict(store.conn.execute("SELECT state, COUNT(*) FROM trials GROUP BY state").fetchall())
    store.close()
    return reported, counted


def test_counts_by_state_follow_every_trial_change_and_an_older_store_gets_them(tmp_path: Path) -> None:
    _fill(tmp_path, 12, running=3)
    reported, counted = _counts(tmp_path)
    assert reported == counted == {"completed": 9, "running": 3}
    s = Store.open(tmp_path)
    sid = s.sweep_row("s")["id"]
    with s.transaction():
        s.update_trial(s.trial_by_number(sid, 9)["id"], state="failed")
        s.update_trial(s.trial_by_number(sid, 10)["id"], state="running", value=1.0)   # no state change
        s.add_trial(sid, 12, {"x": 1}, None, seed=12)                                   # queued
        s.add_trial(sid, 13, {"x": 1}, None, seed=13, state="running")
        s.conn.execute("DELETE FROM trials WHERE sweep_id=? AND number=13", (sid,))
    s.close()
    reported, counted = _counts(tmp_path)
    assert reported == counted == {"completed": 9, "running": 2, "failed": 1, "queued": 1}
    conn = sqlite3.connect(tmp_path / "store.db")   # a store from before the counts table
    conn.executescript("DROP TRIGGER trial_counts_insert; DROP TRIGGER trial_counts_update; "
                       "DROP TRIGGER trial_counts_delete; DROP TABLE trial_counts;")
    conn.close()
    assert _counts(tmp_path)[0] == counted                     # a reader counts the trials
    Store.open(tmp_path).close()                               # its next writer adds the table, filled
    assert _counts(tmp_path)[0] == counted
    assert _steps(tmp_path, lambda st: st.conn.execute("SELECT n FROM trial_counts").fetchall()) > 0


def test_finished_version_moves_when_a_trial_ends_or_an_ended_trials_value_or_step_changes(tmp_path: Path) -> None:
    _fill(tmp_path, 6, running=2)
    s = Store.open(tmp_path)
    sid = s.sweep_row("s")["id"]
    seen = [q.finished_version(s, "s")]
    assert seen[0][0] == 4
    tid = s.trial_by_number(sid, 4)["id"]
    s.update_trial(tid, last_step=7)                      # a running trial reports: no change
    assert q.finished_version(s, "s") == seen[-1]
    for change in ({"state": "pruned", "value": 0.5}, {"value": 0.25}, {"last_step": 9}):
        s.update_trial(tid, **change)
        seen.append(q.finished_version(s, "s"))
        assert seen[-1] != seen[-2], change
    assert seen[-1][0] == 5
    s.close()


def test_best_trial_is_an_index_seek_not_a_sort_of_the_completed_trials(stores: dict[int, Path]) -> None:
    store = Store.open(stores[500], readonly=True)
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    q.best_trial(store, "s")
    store.conn.set_trace_callback(None)
    picked = [sql for sql in statements if "t.value" in sql]
    assert picked, statements
    plan = " | ".join(r[3] for r in store.conn.execute("EXPLAIN QUERY PLAN " + picked[0]))
    store.close()
    assert "trials_sweep_best" in plan and "TEMP B-TREE FOR ORDER BY" not in plan, plan


@pytest.mark.parametrize("goal", ["minimize", "maximize"])
def test_every_read_names_the_same_best_trial_lowest_number_among_ties(tmp_path: Path, goal: str) -> None:
    _fill(tmp_path, 30, goal=goal)
    s = Store.open(tmp_path)
    sid = s.sweep_row("s")["id"]
    rows = s.conn.execute("SELECT id, number FROM trials WHERE sweep_id=? AND number IN (7, 3, 20)", (sid,))
    with s.transaction():
        for tid, number in rows.fetchall():   # three trials tie at the best value; 20 is infeasible
            s.update_trial(tid, value=-5.0 if goal == "minimize" else 5.0, feasible=number != 20)
    s.close()
    store = Store.open(tmp_path, readonly=True)
    best = q.best_trial(store, "s")
    assert best is not None and best["trial"] == 3
    assert q.list_sweeps(store)[0]["best_trial"] == 3 == q.sweep_summary(store, "s")["sweep"]["best_trial"]
    store.close()


def test_status_with_a_limit_is_the_newest_trials_every_running_one_and_the_best(tmp_path: Path) -> None:
    _fill(tmp_path, 30, running=0)   # values n * 7919 % 1000 / 1000: the best is trial 0 (0.0)
    s = Store.open(tmp_path)
    sid = s.sweep_row("s")["id"]
    with s.transaction():   # trial 4 was requeued (a preempted trial runs again): running, far from the end
        s.update_trial(s.trial_by_number(sid, 4)["id"], state="running")
    s.close()
    store = Store.open(tmp_path, readonly=True)
    data = q.sweep_status(store, "s", limit=5)
    shown = [0, 4, 25, 26, 27, 28, 29]
    assert [t["number"] for t in data["trials"]] == shown
    assert data["omitted"] == 23 and data["sweep"]["trials"] == 30
    assert data["trials"] == [t for t in q.sweep_status(store, "s")["trials"] if t["number"] in shown]
    assert "omitted" not in q.sweep_status(store, "s")
    store.close()


def test_an_older_store_gets_the_index_when_a_writer_opens_it(tmp_path: Path) -> None:
    _fill(tmp_path, 3)
    conn = sqlite3.connect(tmp_path / "store.db")
    conn.execute("DROP INDEX trials_sweep_best")
    conn.commit()
    conn.close()
    Store.open(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "store.db")
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    conn.close()
    assert "trials_sweep_best" in names


def test_rung_values_take_the_same_few_queries_on_a_sweep_ten_times_as_large(stores: dict[int, Path]) -> None:
    """The dashboard's importance reads each ended trial's value at the rung in one query, not one per trial."""
    counts = {}
    for n, root in stores.items():
        store = Store.open(root, readonly=True)
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        got = q.rung_values(store, "s", "loss")
        store.conn.set_trace_callback(None)
        store.close()
        counts[n] = len(statements)
        done = range(n - 2)   # the last two still run
        assert got["step"] == 2 and got["number"] == list(done)
        assert got["value"] == pytest.approx([(k * 7919 % 1000) / 1000 + 2 for k in done])
    assert counts[500] == counts[50] <= 6, counts


def test_the_driver_writes_of_a_trial_cost_the_same_at_trial_500_as_at_trial_50(tmp_path: Path) -> None:
    """Indexes and the trial_counts triggers keep each trial's writes (added, metrics, last step, ended) a
    fixed number of SQLite steps, however many trials the sweep already has."""
    s = Store.open(tmp_path)
    sid = s.create_sweep(name="w", method="random", metric="loss", goal="minimize", spec={}, spec_path=None, seed=0)
    steps, per_trial = [0], []

    def tick() -> int:
        steps[0] += 1
        return 0

    for n in range(505):
        if n in (50, 500):
            steps[0] = 0
            s.conn.set_progress_handler(tick, 1)
        with s.transaction():
            tid = s.add_trial(sid, n, {"x": n}, None, seed=n, state="running", started=T0, attempts=1)
            s.add_attempt(tid, 1, started=T0)
        for step in range(3):
            with s.transaction():
                s.add_metrics(tid, 1, [(step, k, 0.5, T0) for k in ("loss", "acc")])
                s.update_trial(tid, last_step=step)
        with s.transaction():
            s.update_attempt(tid, 1, state="completed", ended=T0 + 1)
            s.update_trial(tid, state="completed", value=(n * 7919 % 1000) / 1000, ended=T0 + 1)
        if n in (54, 504):
            s.conn.set_progress_handler(None, 1)
            per_trial.append(steps[0])
    s.close()
    assert per_trial[1] <= 1.05 * per_trial[0], per_trial
