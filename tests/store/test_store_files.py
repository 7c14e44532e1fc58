"""The store's file as the command line finds it after real faults: a driver killed with its last commits in
the write-ahead log, a directory mounted read-only, a database damaged on disk, one still being created.
Each read runs `sweeplab` in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def cli(store: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "sweeplab", *args, "--store", str(store)], env=env,
                          capture_output=True, text=True, timeout=120)


def killed_writer(store: Path, sweeps: int = 2, trials: int = 3) -> None:
    """A real process writes sweeps as the driver does and dies without closing the store (os._exit, as
    after `kill -9`). The first sweep is checkpointed into store.db; automatic checkpoints are off after
    it, so the later commits are only in store.db-wal."""
    code = textwrap.dedent(f"""
        import os
        from sweeplab.store import Store
        s = Store.open({str(store)!r})
        s.conn.execute("PRAGMA wal_autocheckpoint=0")
        for k in range({sweeps}):
            sid = s.create_sweep(name=f"s{{k}}", method="grid", metric="loss", goal="minimize", spec={{}},
                                 spec_path=None, seed=0)
            with s.transaction():
                for i in range({trials}):
                    tid = s.add_trial(sid, i, {{"x": i}}, None, seed=i)
                    s.update_trial(tid, state="completed", value=float(i) + k)
            if k == 0:
                s.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert (store / "store.db-wal").stat().st_size > 0


def test_a_read_only_store_left_by_a_killed_driver_shows_every_commit(tmp_path: Path, read_only) -> None:
    """The driver was killed with commits still in store.db-wal, then the store was shared read-only: every
    committed sweep and trial is read, not the stale main file (which holds only the first sweep)."""
    store = tmp_path / "store"
    killed_writer(store)
    read_only(store)
    cp = cli(store, "status", "--json")
    assert cp.returncode == 0, cp.stderr
    sweeps = json.loads(cp.stdout)["sweeps"]
    assert [(s["name"], s["trials"], s["best"]) for s in sweeps] == [("s0", 3, 0.0), ("s1", 3, 1.0)]
    cp = cli(store, "best", "s1", "--json")
    assert cp.returncode == 0 and json.loads(cp.stdout)["value"] == 1.0, cp.stderr


def _page_of(db: Path, table: str) -> int:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT rootpage FROM sqlite_master WHERE name=?", (table,)).fetchone()[0])
    finally:
        conn.close()


def _clobber_page(db: Path, page: int, size: int = 4096) -> None:
    """Overwrite one whole page of the database with noise, as a bad disk block or a torn copy would."""
    with db.open("r+b") as f:
        f.seek((page - 1) * size)
        f.write(os.urandom(size))


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """A store whose trials table has a page of noise (its sweeps table and schema are intact): the damage
    shows only once a command reads the trials. Written by a real sweep, closed cleanly."""
    import sweeplab as sl

    trials = Path(__file__).resolve().parents[1] / "fixtures" / "trials.py"
    store = tmp_path / "store"
    outcome = sl.run_sweep({"function": f"{trials}:quick", "method": "grid",
                            "metric": {"name": "loss", "goal": "minimize"},
                            "parameters": {"x": {"values": [1.0, 2.0, 3.0]}}}, store=store, name="sw", workers=1)
    assert outcome.exit_code == 0
    db = store / "store.db"
    assert not Path(f"{db}-wal").exists()
    _clobber_page(db, _page_of(db, "trials"))
    return store


def test_a_damaged_store_is_one_error_line_exit_1(damaged: Path, tmp_path: Path) -> None:
    """Every reading command, and a new sweep, on a store with a damaged page: one line naming the store and
    the damage, exit 1, no traceback. A read leaves the file byte for byte. (A sweep writes until it meets
    the damage, its batch then rolled back: checking every page first would cost each sweep's start seconds
    on a large store.)"""
    db = damaged / "store.db"
    before = db.read_bytes()
    spec = tmp_path / "s.yaml"
    trials = Path(__file__).resolve().parents[1] / "fixtures" / "trials.py"
    spec.write_text(f"function: {trials}:quick\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
                    "parameters: {x: {values: [1.0]}}\n")
    for args in (("status",), ("status", "sw"), ("status", "sw", "--json"), ("best", "sw", "--json"),
                 ("export", "sw", "-o", str(tmp_path / "sw.csv")), ("sweep", str(spec), "-q")):
        cp = cli(damaged, *args)
        lines = cp.stderr.strip().splitlines()
        assert cp.returncode == 1 and len(lines) == 1, (args, cp.returncode, cp.stderr[-2000:])
        assert lines[0].startswith("error: ") and str(db) in lines[0] and "damaged" in lines[0], (args, lines)
        assert args[0] == "sweep" or db.read_bytes() == before, args
    assert not (tmp_path / "sw.csv").exists()


def test_a_store_being_created_reads_as_no_store_yet_not_as_another_programs_file(tmp_path: Path) -> None:
    """`sweeplab status` while the first sweep creates the store: SQLite has created store.db and the
    writer's first transaction (the schema) is not committed yet. A real process holds it open there; the
    reader is told there is no store yet (exit 2, as for no store.db at all), not that store.db is not a
    sweeplab store."""
    store = tmp_path / "store"
    store.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sqlite3, sys
        conn = sqlite3.connect({str(store / "store.db")!r}, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        print("holding", flush=True)
        sys.stdin.readline()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        for args in (("status",), ("status", "sw", "--json"), ("best", "sw")):
            cp = cli(store, *args)
            assert cp.returncode == 2, (args, cp.returncode, cp.stderr)
            assert "no sweeplab store" in cp.stderr and "not a sweeplab store" not in cp.stderr, cp.stderr
    finally:
        holder.communicate("\n", timeout=30)
    (store / "empty").mkdir()
    (store / "empty" / "store.db").write_bytes(b"")   # created, nothing written yet
    cp = cli(store / "empty", "status")
    assert cp.returncode == 2 and "no sweeplab store" in cp.stderr, cp.stderr


def test_a_store_path_with_uri_characters_is_read_where_it_is(tmp_path: Path) -> None:
    """Readers open store.db through an SQLite URI (`file:PATH?mode=ro`): a store directory named `runs#1`,
    `what?x` or `p%20q` was cut at the `#` / `?` or decoded (`%20`), so `status` opened `runs` or `what`
    instead, read-write, creating an empty file there, and said there was no store."""
    from sweeplab.store import Store

    names = ["runs#1", "what?x", "p%20q"]
    for name in names:
        st = Store.open(tmp_path / name)
        st.create_sweep(name=name, method="grid", metric="loss", goal="minimize", spec={}, spec_path=None, seed=0)
        st.close()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    for name in names:
        cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", "--json", "--store", name], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
        assert cp.returncode == 0, (name, cp.stderr)
        assert [s["name"] for s in json.loads(cp.stdout)["sweeps"]] == [name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)   # nothing created beside them


def test_a_store_of_a_newer_or_unreadable_schema_version_is_refused_in_one_line(tmp_path: Path) -> None:
    """A store a newer sweeplab wrote is refused by readers and writers alike (exit 1, one line, the file
    untouched); so is one whose recorded version is not a number (it raised a ValueError traceback)."""
    import sqlite3

    from sweeplab.store import SCHEMA_VERSION, Store

    for version in (str(SCHEMA_VERSION + 1), "4.0x"):
        store = tmp_path / f"v{version}"
        st = Store.open(store)
        st.create_sweep(name="s", method="grid", metric="loss", goal="minimize", spec={}, spec_path=None, seed=0)
        st.close()
        conn = sqlite3.connect(store / "store.db")
        conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (version,))
        conn.commit()
        conn.close()
        before = (store / "store.db").read_bytes()
        for args in (("status",), ("best", "s"), ("resume", "s")):
            cp = cli(store, *args)
            lines = cp.stderr.strip().splitlines()
            assert cp.returncode == 1 and len(lines) == 1 and "schema version" in lines[0], (version, args, cp.stderr)
        assert (store / "store.db").read_bytes() == before


@pytest.mark.parametrize("cut", [0, 50], ids=["emptied", "cut-inside-its-header"])
def test_a_store_file_cut_short_beside_its_write_ahead_log_is_refused_and_the_log_kept(tmp_path: Path,
                                                                                       cut: int) -> None:
    """store.db cut to nothing (a failed copy, `> store.db`, a sync tool) while store.db-wal holds commits of a
    killed driver: SQLite takes an empty main file for a new database and deletes the log, so `status` read
    "no store yet" and destroyed the commits, and a new sweep started a new store over them. Every command
    now refuses in one line naming the damage, exit 1, and leaves both files byte for byte."""
    store = tmp_path / "store"
    killed_writer(store)
    db, wal = store / "store.db", store / "store.db-wal"
    with db.open("r+b") as f:
        f.truncate(cut)
    before = (db.read_bytes(), wal.read_bytes())
    spec = tmp_path / "s.yaml"
    trials = Path(__file__).resolve().parents[1] / "fixtures" / "trials.py"
    spec.write_text(f"function: {trials}:quick\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
                    "parameters: {x: {values: [1.0]}}\n")
    for args in (("status",), ("status", "s1"), ("best", "s1", "--json"), ("resume", "s1", "-q"),
                 ("sweep", str(spec), "-q")):
        cp = cli(store, *args)
        lines = cp.stderr.strip().splitlines()
        assert cp.returncode == 1 and len(lines) == 1, (args, cp.returncode, cp.stderr[-2000:])
        assert lines[0].startswith("error: ") and str(db) in lines[0] and "damaged" in lines[0], (args, lines)
        assert (db.read_bytes(), wal.read_bytes()) == before, args


def test_a_damaged_store_file_with_a_write_ahead_log_is_not_blamed_on_a_full_disk(tmp_path: Path) -> None:
    """store.db cut in half beside a write-ahead log, on a disk with room: the error said the log's commits
    "cannot be read on a full disk without store.db-shm: free some space" (the advice for a full disk) after
    the damage; it names the damage only."""
    store = tmp_path / "store"
    killed_writer(store)
    db = store / "store.db"
    with db.open("r+b") as f:
        f.truncate(db.stat().st_size // 2)
    cp = cli(store, "status", "s1")
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 1 and len(lines) == 1, cp.stderr
    assert "damaged" in lines[0] and "full disk" not in lines[0] and "free some space" not in lines[0], lines


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_directory_in_the_place_of_sqlite_s_own_files_is_named_in_one_line(tmp_path: Path, suffix: str) -> None:
    """store.db-wal (or -shm) a directory: reads said the write-ahead log "cannot be read on a full disk: free some
    space" (-wal), a resume "attempt to write a readonly database" (-shm). Every command names the directory."""
    store = tmp_path / "store"
    killed_writer(store)
    db = store / "store.db"
    side = Path(f"{db}{suffix}")
    side.unlink()
    side.mkdir()
    for args in (("status",), ("best", "s1", "--json"), ("resume", "s1", "-q")):
        cp = cli(store, *args)
        lines = cp.stderr.strip().splitlines()
        assert cp.returncode == 1 and len(lines) == 1, (args, cp.returncode, cp.stderr[-2000:])
        assert f"store.db{suffix} is not a file" in lines[0] and "full disk" not in lines[0], (args, lines)
