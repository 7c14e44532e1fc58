"""`sweeplab resume` runs a sweep where it ran before (the store records backend and address), says so,
and obeys --backend / --address; stores written before that was recorded are migrated and resume on
the local backend as they always did, saying why. (On a real Ray cluster: tests/backends/test_ray_resume.py.)
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sweeplab.store import SCHEMA_VERSION, Store
from sweeplab.store import queries as q

TRIALS = Path(__file__).resolve().parents[1] / "fixtures" / "trials.py"

pytestmark = pytest.mark.slow


def _spec(cli: Any, trials: int = 2) -> Path:
    return cli.spec("s", f"function: {TRIALS}:noop\nmethod: random\nseed: 1\n"
                         f"metric: {{name: loss, goal: minimize}}\nparameters:\n  x: {{min: 0.0, max: 1.0}}\n"
                         f"budget: {{trials: {trials}}}\n")


def _v1_schema() -> str:
    """schema.sql as sweeplab shipped it at schema version 1: without sweeps.backend and sweeps.address."""
    from importlib import resources

    sql = resources.files("sweeplab.store").joinpath("schema.sql").read_text()
    lines = [ln for ln in sql.splitlines() if not ln.lstrip().startswith(("backend ", "address "))]
    text = "\n".join(lines)
    return text.replace("driver     TEXT,", "driver     TEXT ")


def _downgrade_to_v1(db: Path) -> None:
    """Rewrite the store as sweeplab wrote it before schema version 2 (same rows, older schema)."""
    newer = db.with_name("store-v2.db")
    with sqlite3.connect(db) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    db.rename(newer)
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    c = sqlite3.connect(db)
    c.executescript(_v1_schema())
    c.execute("ATTACH DATABASE ? AS v2", (str(newer),))
    for (table,) in c.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        cols = ", ".join(r[1] for r in c.execute(f"PRAGMA main.table_info({table})"))
        c.execute(f"INSERT INTO main.{table} ({cols}) SELECT {cols} FROM v2.{table}")
    c.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    c.commit()
    c.execute("DETACH DATABASE v2")
    c.execute("PRAGMA journal_mode=WAL")
    c.close()
    newer.unlink()
    assert "backend" not in {r[1] for r in sqlite3.connect(db).execute("PRAGMA table_info(sweeps)")}


def test_a_sweep_records_its_backend_and_resume_says_where_it_runs(cli: Any) -> None:
    cli("sweep", str(_spec(cli)), "--name", "rec", "--workers", "1", "-q", check=True)
    s = cli.status("rec")["sweep"]
    assert (s["backend"], s["address"]) == ("local", None)
    cp = cli("resume", "rec", "--trials", "+1", "-q", check=True)
    assert "resuming rec on the local backend, where it last ran" in cp.stdout
    assert cli.status("rec")["sweep"]["counts"]["completed"] == 3


def test_address_on_resume_of_a_local_sweep_is_refused_naming_the_fix(cli: Any) -> None:
    cli("sweep", str(_spec(cli)), "--name", "loc", "--workers", "1", "-q", check=True)
    cp = cli("resume", "loc", "--address", "127.0.0.1:1", "-q")
    assert cp.returncode == 2
    assert "--address 127.0.0.1:1: an address is for the ray backend" in cp.stderr
    assert "add --backend ray" in cp.stderr
    assert cli.status("loc")["sweep"]["counts"]["completed"] == 2   # nothing ran


def test_a_store_from_before_schema_2_is_migrated_and_resumes_on_local_saying_so(cli: Any) -> None:
    cli("sweep", str(_spec(cli)), "--name", "old", "--workers", "1", "-q", check=True)
    db = cli.store / "store.db"
    _downgrade_to_v1(db)
    # readers read the old store as it is (they never write): no backend recorded
    r = Store.open(cli.store, readonly=True)
    assert "backend" not in r.columns("sweeps")
    s = q.list_sweeps(r)[0]
    assert (s["backend"], s["address"], s["counts"]["completed"]) == (None, None, 2)
    r.close()
    assert cli.status("old")["sweep"]["backend"] is None

    cp = cli("resume", "old", "--trials", "+1", check=True)
    assert "resuming old on the local backend: the store has no record of where it ran" in cp.stdout
    assert "--backend ray --address HOST:PORT" in cp.stdout
    with sqlite3.connect(db) as c:   # the writer migrated the store and recorded where it ran this time
        assert c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        assert c.execute("SELECT backend, address FROM sweeps WHERE name='old'").fetchone() == ("local", None)
    st = cli.status("old")
    assert st["sweep"]["counts"]["completed"] == 3 and st["sweep"]["backend"] == "local"


def test_migration_keeps_every_row_and_runs_once(tmp_path: Path) -> None:
    w = Store.open(tmp_path)
    sid = w.create_sweep(name="a", method="grid", metric="loss", goal="minimize", spec={"x": 1},
                         spec_path=None, seed=3)
    w.add_trial(sid, 0, {"x": 1}, None, None)
    w.close()
    _downgrade_to_v1(tmp_path / "store.db")
    for _ in range(2):   # a second open finds nothing left to do
        w = Store.open(tmp_path)
        assert {"backend", "address"} <= w.columns("sweeps")
        row = w.sweep_row("a")
        assert (row["seed"], row["backend"], len(w.trial_rows(sid))) == (3, None, 1)
        w.close()


def test_a_store_newer_than_this_sweeplab_is_refused(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    with sqlite3.connect(tmp_path / "store.db") as c:
        c.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    from sweeplab.errors import StoreError

    for readonly in (False, True):
        with pytest.raises(StoreError, match="newer than this sweeplab understands"):
            Store.open(tmp_path, readonly=readonly)
