"""What the writer keeps up to date so the dashboard's reads do not grow with the sweep (issue 18): each
sweep's metric keys (`sweep_keys`), each trial's change number (`trials.seq`, for a live page's "trials
changed since"), and an integer change count per state (`trial_counts.changes`, the importance cache's
token). Also: a store of schema version 3 is read as it is, then migrated by its next writer."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sweeplab.store import SCHEMA_VERSION, Store
from sweeplab.store import queries as q

T0 = 1_700_000_000.0


def _sweep(s: Store, name: str = "s", spec: dict[str, Any] | None = None) -> int:
    return s.create_sweep(name=name, method="random", metric="loss", goal="minimize", spec=spec or {},
                          spec_path=None, seed=0)


def _trial(s: Store, sid: int, n: int, keys: tuple[str, ...] = ("loss", "acc"), value: float | None = None) -> int:
    with s.transaction():
        tid = s.add_trial(sid, n, {"x": n}, None, seed=n, state="running", started=T0 + n, attempts=1)
        for step in range(3):
            s.add_metrics(tid, 1, [(step, k, 0.5, T0) for k in keys])
            s.update_trial(tid, last_step=step)
        if value is not None:
            s.update_trial(tid, state="completed", value=value, ended=T0 + n + 1, metrics={"loss": value})
    return tid


def test_finished_version_moves_after_values_near_the_float_maximum(tmp_path: Path) -> None:
    """Two ended trials of 1.7e308 overflowed the float sum of values the token was built from to inf; from
    then on a changed value no longer moved it, so the dashboard kept its stale importance (and a +inf and
    a -inf state made it NULL). The token now counts changes in integers."""
    s = Store.open(tmp_path)
    sid = _sweep(s)
    for n, v in enumerate((1.7e308, 1.7e308, -1.7e308, 1.0)):
        _trial(s, sid, n, value=v)
    with s.transaction():
        s.update_trial(s.trial_by_number(sid, 2)["id"], state="pruned")
    before = q.finished_version(s, "s")
    assert q.finished_version(s, "s") == before   # a second read: the same token (a cache hit)
    s.update_trial(s.trial_by_number(sid, 3)["id"], value=2.0)   # an ended trial's value changes
    after = q.finished_version(s, "s")
    assert after != before
    assert all(x == x for x in after), after       # never NaN (NaN != NaN: every cache lookup would miss)
    s.close()


def test_sweep_keys_are_kept_as_points_arrive(tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    a, b = _sweep(s, "a"), _sweep(s, "b")
    _trial(s, a, 0, ("loss", "acc"))
    _trial(s, a, 1, ("loss", "lr"))
    _trial(s, b, 0, ("val",))
    try:   # a key first logged in a transaction that rolls back is not kept
        with s.transaction():
            s.add_metrics(s.trial_by_number(a, 1)["id"], 1, [(9, "ghost", 1.0, T0)])
            raise RuntimeError
    except RuntimeError:
        pass
    with s.transaction():   # ... and is kept when it is logged again
        s.add_metrics(s.trial_by_number(a, 1)["id"], 1, [(9, "late", 1.0, T0)])
    s.close()
    r = Store.open(tmp_path, readonly=True)
    for sid in (a, b):
        scanned = q.metric_keys(r, [tid for tid, _ in q.trial_states(r, sid)])
        assert q.sweep_metric_keys(r, sid) == scanned
    assert q.sweep_metric_keys(r, a) == ["acc", "late", "loss", "lr"]
    r.close()


def _delta_rows(cols: dict[str, Any]) -> dict[int, tuple[Any, ...]]:
    """trial number -> its row (state, value, reason, params) from a trial_columns answer."""
    names = sorted(cols["params"])
    return {cols["number"][i]: (cols["state"][i], cols["value"][i], cols["reason"][i],
                                tuple(cols["params"][p][i] for p in names)) for i in range(cols["n"])}


def test_a_delta_lists_the_trials_changed_since_a_seq_and_merges_into_the_full_list(tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    sid = _sweep(s)
    for n in range(6):
        _trial(s, sid, n, value=n / 10 if n < 4 else None)
    first = q.trial_columns(s, "s")
    assert first["full"] is True and first["seq"] > 0
    with s.transaction():
        s.update_trial(s.trial_by_number(sid, 4)["id"], last_step=9)            # not a listed column: no seq
    assert q.trial_columns(s, "s", since=first["seq"])["n"] == 0
    with s.transaction():
        s.update_trial(s.trial_by_number(sid, 4)["id"], state="failed", reason="boom")
        s.update_trial(s.trial_by_number(sid, 1)["id"], value=0.05)
        s.add_trial(sid, 6, {"x": 6, "y": "new"}, None, seed=6)                 # a new trial, a new parameter
    delta = q.trial_columns(s, "s", since=first["seq"])
    assert delta["full"] is False and delta["since"] == first["seq"] and delta["seq"] > first["seq"]
    assert delta["number"] == [1, 4, 6] and delta["n"] == 3
    merged = _delta_rows(first)
    merged.update(_delta_rows(delta))
    full = _delta_rows(q.trial_columns(s, "s"))
    names = sorted(q.trial_columns(s, "s")["params"])
    assert {n: row[:3] for n, row in merged.items()} == {n: row[:3] for n, row in full.items()}
    assert full[6][3] == (6, "new") and names == ["x", "y"]
    assert q.trial_columns(s, "s", since=delta["seq"])["n"] == 0
    s.close()


def test_a_delta_is_an_index_range_not_a_walk_of_the_sweep(tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    sid = _sweep(s)
    for n in range(40):
        _trial(s, sid, n, value=n / 40)
    seq = q.trial_columns(s, "s")["seq"]
    statements: list[str] = []
    s.conn.set_trace_callback(statements.append)
    q.trial_columns(s, "s", since=seq)
    s.conn.set_trace_callback(None)
    picked = [sql for sql in statements if "seq >" in sql]
    assert len(picked) == 1, statements
    plan = " | ".join(r[3] for r in s.conn.execute("EXPLAIN QUERY PLAN " + picked[0]))
    s.close()
    assert "trials_sweep_seq" in plan and "seq>?" in plan.replace(" ", "") and "SCAN" not in plan, plan


def test_several_objectives_always_get_the_full_list(tmp_path: Path) -> None:
    """A trial's front rank depends on every other trial: a change list could not update the others'."""
    s = Store.open(tmp_path)
    sid = _sweep(s, spec={"metric": [{"name": "a", "goal": "minimize"}, {"name": "b", "goal": "minimize"}]})
    _trial(s, sid, 0, value=1.0)
    seq = q.trial_columns(s, "s")["seq"]
    got = q.trial_columns(s, "s", since=seq)
    assert got["full"] is True and got["n"] == 1 and "rank" in got
    s.close()


# The trial_counts triggers as schema version 3 made them (a float sum of values, no change count).
_V3_ADD = ("INSERT INTO trial_counts(sweep_id, state, n, value_total, step_total) VALUES (NEW.sweep_id, NEW.state, "
           "1, coalesce(NEW.value, 0), coalesce(NEW.last_step, 0)) ON CONFLICT(sweep_id, state) DO UPDATE SET "
           "n = n + 1, value_total = value_total + excluded.value_total, step_total = step_total + excluded.step_total")
_V3_TAKE = ("UPDATE trial_counts SET n = n - 1, value_total = value_total - coalesce(OLD.value, 0), "
            "step_total = step_total - coalesce(OLD.last_step, 0) WHERE sweep_id = OLD.sweep_id AND state = OLD.state")


def _downgrade_to_v3(db: Path) -> None:
    """The store as sweeplab wrote it at schema version 3: no sweep_keys, no trials.seq, no change counts."""
    c = sqlite3.connect(db)
    c.executescript(
        "DROP TABLE sweep_keys; DROP INDEX trials_sweep_seq; ALTER TABLE trials DROP COLUMN seq;"
        "DROP TRIGGER trial_counts_insert; DROP TRIGGER trial_counts_update; DROP TRIGGER trial_counts_delete;"
        "ALTER TABLE trial_counts DROP COLUMN changes;"
        f"CREATE TRIGGER trial_counts_insert AFTER INSERT ON trials BEGIN {_V3_ADD}; END;"
        "CREATE TRIGGER trial_counts_update AFTER UPDATE OF state, sweep_id, value, last_step ON trials "
        "WHEN OLD.state IS NOT NEW.state OR OLD.sweep_id IS NOT NEW.sweep_id OR OLD.value IS NOT NEW.value "
        f"OR OLD.last_step IS NOT NEW.last_step BEGIN {_V3_TAKE}; {_V3_ADD}; END;"
        f"CREATE TRIGGER trial_counts_delete AFTER DELETE ON trials BEGIN {_V3_TAKE}; END;"
        "UPDATE meta SET value='3' WHERE key='schema_version';")
    c.close()


def test_a_schema_3_store_is_read_as_it_is_then_migrated_by_its_next_writer(tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    sid = _sweep(s)
    for n in range(4):
        _trial(s, sid, n, ("loss", "acc") if n % 2 else ("loss",), value=n / 10 if n < 3 else None)
    s.close()
    _downgrade_to_v3(tmp_path / "store.db")
    from starlette.testclient import TestClient

    from sweeplab.dashboard import create_app

    # the dashboard reads it as it is, never writing
    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1:8765") as c:
        assert c.get("/api/sweeps/s/keys").json()["keys"] == ["acc", "loss"]
        got = c.get("/api/sweeps/s/trials?since=0").json()
        assert got["full"] is True and got["n"] == 4 and got["seq"] == 0
    r = Store.open(tmp_path, readonly=True)
    assert "seq" not in r.columns("trials") and q.finished_version(r, "s")[0] == 3
    r.close()

    w = Store.open(tmp_path)   # the writer migrates: keys filled in, seq and change counts from now on
    assert q.sweep_metric_keys(w, sid) == ["acc", "loss"]
    before = q.finished_version(w, "s")
    w.update_trial(w.trial_by_number(sid, 3)["id"], state="completed", value=0.7)
    w.update_trial(w.trial_by_number(sid, 0)["id"], value=0.01)
    assert q.finished_version(w, "s")[0] == 4 and q.finished_version(w, "s") != before
    before = q.finished_version(w, "s")
    w.update_trial(w.trial_by_number(sid, 1)["id"], value=0.02)   # only a value: the new triggers count it
    assert q.finished_version(w, "s") != before
    assert q.trial_columns(w, "s", since=0)["number"] == [0, 1, 3]   # the trials changed since the migration
    _trial(w, sid, 4, ("loss", "new"), value=0.3)
    assert q.sweep_metric_keys(w, sid) == ["acc", "loss", "new"]
    counts = {k: v for k, v in q.sweep_summary(w, "s")["sweep"]["counts"].items() if v}
    assert counts == {"completed": 5}
    assert w.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    w.close()


def test_the_trial_list_decodes_every_row_at_once_and_still_copes_with_nan_and_a_malformed_row(
        tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    sid = _sweep(s)
    for n in range(3):
        _trial(s, sid, n, value=n / 10)
    with s.transaction():
        s.update_trial(s.trial_by_number(sid, 1)["id"], params={"x": float("nan"), "y": [1, 2]})
    cols = q.trial_columns(s, "s")
    assert cols["params"] == {"x": [0, None, 2], "y": [None, "[1, 2]", None]}
    assert cols["metrics"] == {"loss": [0.0, 0.1, 0.2]}
    s.conn.execute("UPDATE trials SET metrics='{\"loss\": 1,' WHERE number=2")   # a row cut short
    cols = q.trial_columns(s, "s")
    assert cols["metrics"] == {"loss": [0.0, 0.1, None]} and cols["params"]["x"] == [0, None, 2]
    s.close()


def _downgrade_to_v4(db: Path) -> None:
    """The store as sweeplab wrote it at schema version 4: `trials.value` and `metrics.value` typed REAL."""
    c = sqlite3.connect(db)
    c.execute("PRAGMA foreign_keys=OFF")
    kept = [r[0] for r in c.execute("SELECT sql FROM sqlite_master WHERE type IN ('index', 'trigger') AND "
                                    "tbl_name IN ('trials', 'metrics') AND sql IS NOT NULL")]
    for table in ("trials", "metrics"):
        create = c.execute("SELECT sql FROM sqlite_master WHERE name=?", (table,)).fetchone()[0]
        typed = create.replace(f"CREATE TABLE {table} (", f"CREATE TABLE {table}_v4 (", 1).replace(
            "    value,", "    value REAL,", 1)
        assert "value REAL" in typed
        c.execute(typed)
        cols = ", ".join(r[1] for r in c.execute(f"PRAGMA table_info({table})"))
        c.execute(f"INSERT INTO {table}_v4 (rowid, {cols}) SELECT rowid, {cols} FROM {table}")
        c.execute(f"DROP TABLE {table}")
        c.execute(f"ALTER TABLE {table}_v4 RENAME TO {table}")
    for statement in kept:
        c.execute(statement)
    c.execute("UPDATE meta SET value='4' WHERE key='schema_version'")
    c.commit()
    c.close()


def test_a_schema_4_store_keeps_every_row_and_its_order_when_its_next_writer_untypes_the_values(
        tmp_path: Path) -> None:
    """Version 5 took the REAL type off the metric values (a REAL column wrote -0.0 as the integer 0): the writer
    rebuilds the two tables of an older store with the same rows, row ids (the order of metric points),
    indexes, triggers and foreign keys; whole values still read as floats."""
    s = Store.open(tmp_path)
    sid = _sweep(s)
    for n in range(3):
        _trial(s, sid, n, value=float(n))
    tid = s.trial_by_number(sid, 1)["id"]
    with s.transaction():   # points whose rowid order is not their step order
        s.add_metrics(tid, 1, [(9, "loss", 2.0, T0), (4, "loss", -3.0, T0)])
    s.close()
    db = tmp_path / "store.db"
    _downgrade_to_v4(db)

    def dump(c: sqlite3.Connection) -> tuple[Any, ...]:
        return tuple([tuple(r) for r in c.execute(sql)] for sql in (
            "SELECT rowid, * FROM metrics ORDER BY rowid", "SELECT * FROM trials ORDER BY id",
            "SELECT * FROM trial_counts ORDER BY sweep_id, state")) + (
                sorted(r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type IN ('index', 'trigger') "
                                               "AND tbl_name IN ('trials', 'metrics')")),)

    with sqlite3.connect(db) as c:
        before = dump(c)
        assert c.execute("SELECT typeof(value) FROM trials WHERE number=1").fetchone()[0] == "real"
    c.close()
    r = Store.open(tmp_path, readonly=True)   # a reader reads version 4 as it is
    assert q.best_trial(r, "s")["value"] == 0.0   # type: ignore[index]
    r.close()

    w = Store.open(tmp_path)
    assert w.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "5"
    assert dump(w.conn) == before
    assert {r[1]: r[2] for r in w.conn.execute("PRAGMA table_info(metrics)")}["value"] == ""
    assert {r[1]: r[2] for r in w.conn.execute("PRAGMA table_info(trials)")}["value"] == ""
    assert {r[0] for r in w.conn.execute("SELECT DISTINCT typeof(value) FROM metrics")} == {"real"}
    assert w.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert w.conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert [p[1] for p in w.metric_history(tid)["loss"]] == [0.5, 0.5, 0.5, 2.0, -3.0]
    version = q.finished_version(w, "s")
    last = w.trial_by_number(sid, 2)["id"]
    w.update_trial(last, value=-0.0)   # the triggers are back; -0.0 keeps its sign
    assert str(w.trial_row(last)["value"]) == "-0.0"   # type: ignore[index]
    assert q.finished_version(w, "s") != version
    assert q.sweep_summary(w, "s")["sweep"]["counts"]["completed"] == 3
    w.close()
