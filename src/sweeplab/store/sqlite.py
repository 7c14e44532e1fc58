"""SQLite store. The driver is its only writer (batched transactions); readers open it read-only.

Durability: WAL mode with synchronous=NORMAL, so a committed transaction survives a crash of any process
(the driver, a worker); only an OS crash / power loss may lose the last commits.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeplab.errors import StoreError, UserError

__all__ = ["EVENT_KINDS", "INTEGERS", "SCHEMA_VERSION", "Store", "default_store_dir"]

SCHEMA_VERSION = 5
DB_NAME = "store.db"
BUSY_TIMEOUT_S = 10.0   # how long a write waits for another connection's lock before it fails ("database is locked")
#: what an INTEGER column holds: a trial number outside it (`repro sweep/99999999999999999999`) names no row,
#: and binding it would raise OverflowError instead of finding nothing
INTEGERS = range(-(1 << 63), 1 << 63)


class StorePathError(StoreError, UserError):
    """--store (or SWEEPLAB_STORE) names something that is no store's directory (a file; a directory whose
    store.db is a directory): the user's mistake, as a store that does not exist is (exit 2, not 1)."""


# What each schema version added to the one before, as (table, column, declaration): `Store.open` (the
# writer) applies the missing steps to an older store; readers read older stores as they are.
_MIGRATIONS: dict[int, tuple[tuple[str, str, str], ...]] = {
    2: (("sweeps", "backend", "TEXT"),    # where the sweep last ran: `sweeplab resume` goes back there
        ("sweeps", "address", "TEXT")),
    3: (("trials", "objective_values", "TEXT"),   # JSON list, one value per objective (several objectives)
        ("trials", "feasible", "INTEGER")),       # 1 / 0 against the spec's constraints; NULL: none or unknown
    4: (("trials", "seq", "INTEGER"),),   # the sweep's change number of the trial's shown columns (`_SEQ`)
}
# Version 5 took the type off `trials.value` and `metrics.value` (`_untype_values`): in a REAL column SQLite
# writes a whole number as an integer, so a stored -0.0 came back as 0. A column's type cannot be altered in
# place: the writer rebuilds the two tables, rows and row ids as they were (metric points are read in rowid
# order), with the indexes and triggers of schema.sql.
_UNTYPED_VALUES = ("trials", "metrics")

# `trial_counts` holds, for each sweep and state, how many trials are in it, the total of their last steps
# and `changes`, a count of the trial changes that touched the row (a trial entering or leaving the state, or
# changing its value or last step in it), kept by these triggers in the same transaction as the change:
# `status`, `best` and the dashboard (its counts, its change token for ended trials) read a few rows instead
# of every trial. A store that predates the table gets it, filled, from its next writer. (`value_total`, a
# float sum of values kept before schema version 4, overflowed to inf for values near 1e308 and then stopped
# moving when a value changed; it is no longer kept. `changes` is an integer and moves on every change.)
_ADD = ("INSERT INTO trial_counts(sweep_id, state, n, value_total, step_total, changes) VALUES (NEW.sweep_id, "
        "NEW.state, 1, 0, coalesce(NEW.last_step, 0), 1) ON CONFLICT(sweep_id, state) DO UPDATE SET "
        "n = n + 1, step_total = step_total + excluded.step_total, changes = changes + 1")
_TAKE = ("UPDATE trial_counts SET n = n - 1, step_total = step_total - coalesce(OLD.last_step, 0), "
         "changes = changes + 1 WHERE sweep_id = OLD.sweep_id AND state = OLD.state")
_COUNT_TRIGGERS = ("trial_counts_insert", "trial_counts_update", "trial_counts_delete")
_TRIAL_COUNTS = (
    "CREATE TABLE IF NOT EXISTS trial_counts (sweep_id INTEGER NOT NULL, state TEXT NOT NULL, "
    "n INTEGER NOT NULL, value_total REAL NOT NULL, step_total INTEGER NOT NULL, "
    "changes INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (sweep_id, state)) WITHOUT ROWID",
    f"CREATE TRIGGER IF NOT EXISTS trial_counts_insert AFTER INSERT ON trials BEGIN {_ADD}; END",
    "CREATE TRIGGER IF NOT EXISTS trial_counts_update AFTER UPDATE OF state, sweep_id, value, last_step ON trials "
    "WHEN OLD.state IS NOT NEW.state OR OLD.sweep_id IS NOT NEW.sweep_id OR OLD.value IS NOT NEW.value "
    f"OR OLD.last_step IS NOT NEW.last_step BEGIN {_TAKE}; {_ADD}; END",
    f"CREATE TRIGGER IF NOT EXISTS trial_counts_delete AFTER DELETE ON trials BEGIN {_TAKE}; END",
)

# `sweep_keys` holds each sweep's metric keys, one row per (sweep, key), added by `Store.add_metrics` in the
# same transaction as the first point of a key a trial logs: the dashboard's list of keys is one indexed
# read, not a seek per trial and key. A store that predates it gets it, filled, from its next writer.
_SWEEP_KEYS = ("CREATE TABLE IF NOT EXISTS sweep_keys (sweep_id INTEGER NOT NULL, key TEXT NOT NULL, "
               "PRIMARY KEY (sweep_id, key)) WITHOUT ROWID")
# Every sweep's keys from its metrics: a skip-scan of the (trial_id, key, step) index, one seek per (trial, key).
_FILL_SWEEP_KEYS = (
    "INSERT OR IGNORE INTO sweep_keys(sweep_id, key) WITH RECURSIVE k(sid, tid, key) AS ("
    " SELECT t.sweep_id, t.id, (SELECT MIN(m.key) FROM metrics m WHERE m.trial_id = t.id) FROM trials t"
    " UNION ALL"
    " SELECT k.sid, k.tid, (SELECT MIN(m.key) FROM metrics m WHERE m.trial_id = k.tid AND m.key > k.key)"
    " FROM k WHERE k.key IS NOT NULL"
    ") SELECT DISTINCT sid, key FROM k WHERE key IS NOT NULL")

# `trials.seq`: a trial's change number within its sweep, set by the writer whenever a column the dashboard's
# trial list shows changes (`_SEQ_COLUMNS`), from the sweep's highest so far plus one (an index seek). A live
# page asks for the trials with a seq above the highest it has (`queries.trial_columns(since=...)`), so a
# refresh reads the trials that changed, not the whole sweep. Trials of a store before version 4 have none
# until they next change.
_SEQ_COLUMNS = frozenset({"state", "value", "params", "attempts", "started", "ended", "reason", "metrics",
                          "objective_values", "feasible", "number", "sweep_id"})
_NEXT_SEQ = "(SELECT coalesce(MAX(o.seq), 0) + 1 FROM trials o WHERE o.sweep_id = {})"
_SEQ_INDEX = "CREATE INDEX IF NOT EXISTS trials_sweep_seq ON trials (sweep_id, seq)"

# Kinds of rows in the `events` table (the sweep's event log, shown by status and the dashboard).
EVENT_KINDS = (
    "sweep_created", "sweep_resumed", "sweep_ended", "trial_started", "trial_ended", "retry",
    "preempted", "interrupted", "pruned", "rule", "warning", "info", "budget", "checkpoint_corrupt",
    "restored", "failure", "hypervolume",
)


def _schema_sql() -> str:
    """schema.sql, next to this module; through importlib.resources only when the package is not plain files
    (a zip): importing its readers costs a sweep's start a few milliseconds for nothing otherwise."""
    try:
        return (Path(__file__).parent / "schema.sql").read_text(encoding="utf-8")
    except OSError:
        from importlib import resources

        return resources.files("sweeplab.store").joinpath("schema.sql").read_text(encoding="utf-8")


def _why(exc: BaseException) -> str:
    """The SQLite error, with a hint when it usually means the disk (or a file-size limit) is full, or that
    the database file is damaged."""
    text = str(exc)
    if "disk I/O error" in text or "full" in text:
        text += " (is the disk full, or a file-size limit reached?)"
    elif "malformed" in text or "not a database" in text:
        text += " (the database file is damaged; `sqlite3 store.db .recover` may save what is left, into a new file)"
    return text


def _shm_in_use(db: Path) -> bool:
    """Whether a connection to `db` is open: SQLite holds a shared lock on byte 128 of -shm (its "DMS" byte)
    for each connection's life, so a write lock on it is refused while one is. True when it cannot tell."""
    import fcntl

    try:
        fd = os.open(f"{db}-shm", os.O_RDWR)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)
    except OSError:
        return True
    finally:
        os.close(fd)   # drops the probe's lock (this process holds no other lock on -shm)
    return False


def _about_the_file(exc: BaseException) -> bool:
    """An SQLite error about the store's file or access to it (damage, a lock, I/O, a full disk, a table an
    older store lacks), which a command reports in one line as a StoreError; not a misuse of the API
    (ProgrammingError, IntegrityError: bugs, raised as they are)."""
    return type(exc) in (sqlite3.DatabaseError, sqlite3.OperationalError)


def _refuse_a_cut_file(db: Path) -> None:
    """A store.db shorter than SQLite's 100-byte header beside a store.db-wal with commits is a file cut short (a
    failed copy, `> store.db`): SQLite would take it for a new database and delete the log, whose commits a read
    (`status`) or a new sweep then destroyed. A store being created has its header before its log exists."""
    import stat

    for suffix in ("-wal", "-shm"):   # SQLite's own files beside it: a directory (a sync tool, a stray mkdir) there
        try:                          # read as "unable to open", or as a full disk, or a read-only store
            mode = os.stat(f"{db}{suffix}").st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):
            raise StoreError(f"the store {db} cannot be opened: {db.name}{suffix} is not a file (SQLite keeps its "
                             f"{'write-ahead log' if suffix == '-wal' else 'shared memory index'} there); move it "
                             "aside and run the command again") from None
    try:
        size, logged = db.stat().st_size, Path(f"{db}-wal").stat().st_size
    except OSError:
        return
    if size < 100 and logged > 0:
        raise StoreError(f"the store {db} is damaged: it is {size} bytes long, cut short, while its write-ahead log "
                         f"{db.name}-wal holds {logged} bytes of commits; nothing was read or changed: restore "
                         f"{db.name} from a copy, or move the store directory aside and start a new one") from None


def default_store_dir() -> Path:
    # `~` expanded: SWEEPLAB_STORE="~/runs" from a .env file or a container's environment means $HOME/runs
    return Path(os.environ.get("SWEEPLAB_STORE") or ".sweeplab").expanduser()


def _dumps(obj: Any) -> str | None:
    if obj is None:
        return None
    return json.dumps(obj, separators=(",", ":"), default=str)


def _finite(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode. Turning a new store's file to WAL takes an exclusive lock, and SQLite
    answers "database is locked" at once, without its busy handler, while another connection opens the same
    new file (two sweeps started together in threads or processes on one new store: one was refused). So
    it is tried again until the busy timeout; a store already in WAL mode answers at once."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class Store:
    """Handle to a store directory. `Store.open(path)` for the writer, `readonly=True` for readers."""

    def __init__(self, root: Path, conn: sqlite3.Connection, readonly: bool) -> None:
        self.root = root
        self.conn = conn
        self.readonly = readonly
        self._depth = 0      # nesting of write transactions (`transaction`)
        self._reading = 0    # nesting of read snapshots (`snapshot`)
        self._sweep_keys: dict[int, set[str]] = {}   # sweep id -> its metric keys known in `sweep_keys`
        self._trial_sweep: dict[int, int] = {}       # trial id -> sweep id, for the trials this writer added

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, root: str | os.PathLike[str] | None = None, *, readonly: bool = False) -> Store:
        root_path = Path(root) if root is not None else default_store_dir()
        db = root_path / DB_NAME
        if root_path.exists() and not root_path.is_dir():
            raise StorePathError(f"the store path {root_path} is a file, not a directory; --store (or "
                             "SWEEPLAB_STORE) names the store's directory")
        if root_path.is_symlink() and not root_path.exists():   # mkdir fails on it with "File exists"
            raise StorePathError(f"the store path {root_path} is a symbolic link to {os.readlink(root_path)}, which "
                                 "does not exist (or loops back on itself); point --store (or SWEEPLAB_STORE) at the "
                                 "store's directory, or create the directory the link names")
        if db.is_dir():
            raise StorePathError(f"{db} is a directory, not an SQLite database; expected a sweeplab store")
        _refuse_a_cut_file(db)
        if readonly:
            if not db.exists():
                raise UserError(f"no sweeplab store at {root_path} (no {DB_NAME}); run a sweep first "
                                "or pass --store / SWEEPLAB_STORE")
            return cls(root_path, cls._open_reader(db), readonly=True)
        try:
            for sub in ("", "checkpoints", "artifacts", "logs"):
                (root_path / sub).mkdir(parents=True, exist_ok=True)
            # a name of this process and thread: two writers opening one store at once (two sweeps started in
            # threads of a notebook, or two processes) removed each other's probe ("not writable: No such file")
            probe = root_path / f".write-probe-{os.getpid()}-{threading.get_ident()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StoreError(f"the store directory {root_path} is not writable: {exc.strerror or exc}") from None
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(str(db), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            cls._refuse_foreign(conn, db)   # before the first write: even WAL mode changes the file
            _wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA foreign_keys=ON")
            store = cls(root_path, conn, readonly=False)
            store._migrate(db)
        except sqlite3.Error as exc:
            if conn is not None:   # (a process that goes on, a notebook, must not keep the failed open's locks)
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            raise StoreError(f"cannot open the store {db}: {_why(exc)}") from None
        return store

    @staticmethod
    def _refuse_foreign(conn: sqlite3.Connection, db: Path) -> None:
        """A database with tables but no `meta` table is another program's: never written into."""
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        if tables and "meta" not in tables:
            conn.close()
            shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
            raise StoreError(f"{db} is an SQLite database of another program (tables: {shown}), not a "
                             "sweeplab store; nothing was written to it. Pass --store a sweeplab store "
                             "or a new directory")

    @classmethod
    def _open_reader(cls, db: Path) -> sqlite3.Connection:
        """A read-only connection that sees every committed transaction, the ones still in store.db-wal too
        (a driver killed before its last checkpoint, a store shared while its sweep runs).

        In a read-only directory (or on a full disk) SQLite reads the WAL through the -wal and -shm files that
        are there; where they are not (a store its last writer closed cleanly) it cannot create them, and the
        main file is then the whole store: it is read as immutable. A WAL with commits but no -shm beside it
        there cannot be read, and is refused rather than silently left out.
        """
        try:
            return cls._connect_ro(db, immutable=False)
        except sqlite3.Error as exc:
            first = exc
        if "malformed" in str(first) or "not a database" in str(first):   # damage, whatever -shm can do
            raise StoreError(f"cannot read the store {db}: {_why(first)}") from None
        # a live connection (a driver) holds -shm: immutable would read past its locks. Where none does, SQLite could
        # not create (or grow) -shm: a read-only directory, or a full disk (where a failed open leaves a stub -shm)
        writable = os.access(db.parent, os.W_OK)
        if writable and _shm_in_use(db):
            raise StoreError(f"cannot read the store {db}: {_why(first)}") from None
        wal = Path(f"{db}-wal")
        try:
            pending = wal.stat().st_size > 0
        except OSError:
            pending = False
        if pending:
            where = "on a full disk" if writable else "in a read-only directory"
            raise StoreError(f"cannot read the store {db}: {_why(first)}; its write-ahead log {wal.name} holds "
                             f"commits that cannot be read {where} without {db.name}-shm: "
                             + ("free some space and run the command again" if writable else
                                "copy the store directory to a writable place and read it there")) from None
        try:
            return cls._connect_ro(db, immutable=True)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the store {db}: {_why(exc)}") from None

    @classmethod
    def _connect_ro(cls, db: Path, *, immutable: bool) -> sqlite3.Connection:
        flags = "mode=ro&immutable=1" if immutable else "mode=ro"
        from urllib.parse import quote

        # the path percent-encoded: a directory named `runs#1` or `what?x` would end the path at `#` / `?` (and
        # drop `mode=ro` with it), `p%20q` would be decoded; as its bytes, so a path that is not UTF-8 (`caf\xe9/`,
        # which the writer opens) is read too, not a UnicodeEncodeError
        conn = sqlite3.connect(f"file:{quote(os.fsencode(db))}?{flags}", uri=True, timeout=10,
                               check_same_thread=False)
        try:
            conn.execute("PRAGMA query_only=ON")
            conn.row_factory = sqlite3.Row
            cls._check_version(conn, db)
        except BaseException:
            conn.close()   # now, not when the traceback is dropped: its locks on -shm would hide a live writer's
            raise
        return conn

    @staticmethod
    def _check_version(conn: sqlite3.Connection, db: Path) -> None:
        # one statement, one read: the schema a first sweep commits between two reads is seen whole or not
        meta, anything = conn.execute("SELECT (SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'), "
                                      "(SELECT 1 FROM sqlite_master LIMIT 1)").fetchone()
        if meta is None:
            if anything is None:
                # no table at all: a first sweep is creating the store (its schema is not committed yet), or
                # the file is empty; either way there are no sweeps yet, as when there is no store.db
                raise UserError(f"no sweeplab store at {db.parent} yet ({db.name} is empty: a first sweep may be "
                                "creating it); run a sweep first or pass --store / SWEEPLAB_STORE")
            raise StoreError(f"{db} is not a sweeplab store (it has no meta table); expected a store that "
                             "sweeplab wrote")
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        try:
            version = int(row[0]) if row else 0
        except (TypeError, ValueError):
            raise StoreError(f"the store {db} has a schema version sweeplab cannot read ({row[0]!r}); expected "
                             f"a whole number up to {SCHEMA_VERSION}") from None
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the store {db} has schema version {version}, newer than this sweeplab "
                f"understands ({SCHEMA_VERSION}); upgrade sweeplab"
            )

    def _migrate(self, db: Path) -> None:
        """Create the schema in a new store, or bring an older store's schema up to `SCHEMA_VERSION`.

        Runs inside one write transaction, so two processes opening an old store at once migrate it once.
        Readers never migrate: they read older stores as they are (see `columns`).
        """
        have = self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name='meta'"
        ).fetchone()
        if have:
            self._check_version(self.conn, db)
        sql = _schema_sql()
        # a table rebuild (`_untype_values`) drops `trials`, which `attempts` references: foreign keys are
        # off for the migration (the pragma is a no-op inside a transaction)
        self.conn.execute("PRAGMA foreign_keys=OFF")
        try:
            self._migrate_in_one_transaction(db, sql, have is not None)
        finally:
            self.conn.execute("PRAGMA foreign_keys=ON")

    def _migrate_in_one_transaction(self, db: Path, sql: str, have: bool) -> None:
        with self.transaction():
            row = self.conn.execute(
                "SELECT value FROM meta WHERE key='schema_version'"
            ).fetchone() if have else None
            for statement in sql.split(";"):   # CREATE ... IF NOT EXISTS: new tables and indexes only
                if statement.strip():
                    self.conn.execute(statement)
            self._add_trial_counts()
            version = int(row[0]) if row else (0 if have else SCHEMA_VERSION)
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for table, column, decl in _MIGRATIONS.get(target, ()):
                    if column not in self.columns(table):
                        self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
            self._untype_values(sql)
            self.conn.execute(_SEQ_INDEX)
            self._add_sweep_keys()
            self.conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (str(SCHEMA_VERSION),)
            )

    def _untype_values(self, sql: str) -> None:
        """Rebuild each table of `_UNTYPED_VALUES` whose `value` column still has a type (a store before
        version 5) as schema.sql declares it; its indexes and triggers are made again."""
        rebuilt = False
        for table in _UNTYPED_VALUES:
            info = self.conn.execute(f"PRAGMA table_info({table})").fetchall()
            if not any(r[1] == "value" and r[2] for r in info):
                continue
            found = re.search(rf"CREATE TABLE IF NOT EXISTS {table} \((.*?)\n\);", sql, re.S)
            if found is None:   # schema.sql and this list disagree: a bug, not a store problem
                raise RuntimeError(f"schema.sql has no CREATE TABLE {table}")
            cols = ", ".join(f'"{r[1]}"' for r in info)
            self.conn.execute(f"CREATE TABLE {table}__v5 ({found.group(1)})")
            self.conn.execute(f"INSERT INTO {table}__v5 (rowid, {cols}) SELECT rowid, {cols} FROM {table}")
            self.conn.execute(f"DROP TABLE {table}")
            self.conn.execute(f"ALTER TABLE {table}__v5 RENAME TO {table}")
            rebuilt = True
        if rebuilt:   # the dropped tables' indexes and triggers
            for statement in sql.split(";"):
                if statement.strip():
                    self.conn.execute(statement)
            for statement in _TRIAL_COUNTS:
                self.conn.execute(statement)

    def _add_trial_counts(self) -> None:
        """Create `trial_counts` and its triggers; a store that had trials before them gets them counted."""
        had = self.conn.execute("SELECT 1 FROM sqlite_master WHERE name='trial_counts'").fetchone()
        if had and "changes" not in self.columns("trial_counts"):   # a store of schema version 3
            self.conn.execute("ALTER TABLE trial_counts ADD COLUMN changes INTEGER NOT NULL DEFAULT 0")
        trigger = self.conn.execute("SELECT sql FROM sqlite_master WHERE name='trial_counts_insert'").fetchone()
        if trigger and "changes" not in trigger[0]:   # version 3's triggers summed values: replaced
            for name in _COUNT_TRIGGERS:
                self.conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        for statement in _TRIAL_COUNTS:
            self.conn.execute(statement)
        if not had:
            self.conn.execute("INSERT INTO trial_counts(sweep_id, state, n, value_total, step_total, changes) "
                              "SELECT sweep_id, state, COUNT(*), 0, TOTAL(last_step), COUNT(*) FROM trials "
                              "GROUP BY sweep_id, state")

    def _add_sweep_keys(self) -> None:
        """Create `sweep_keys`; a store that had metrics before it gets every sweep's keys filled in."""
        had = self.conn.execute("SELECT 1 FROM sqlite_master WHERE name='sweep_keys'").fetchone()
        self.conn.execute(_SWEEP_KEYS)
        if not had:
            self.conn.execute(_FILL_SWEEP_KEYS)

    def columns(self, table: str) -> set[str]:
        """The column names `table` has in this store (an older store may lack newer ones)."""
        return {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()

    # ---------------------------------------------------------------- reading one snapshot
    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: every query inside sees the same committed state of the store.

        Without it each SELECT is its own transaction, and an answer assembled from several of them (a
        sweep's counts and its trial list) can mix states from before and after one of the driver's commits.
        In WAL mode a read transaction never blocks the writer, and the writer never blocks it. Nested uses
        (and uses inside a write transaction, which is a snapshot already) join the outer one.
        """
        if self._reading or self._depth:
            self._reading += 1
            try:
                yield
            finally:
                self._reading -= 1
            return
        try:
            self.conn.execute("BEGIN DEFERRED")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"cannot read the store {self.root / DB_NAME}: {_why(exc)}") from None
        self._reading = 1
        try:
            yield
        except sqlite3.DatabaseError as exc:   # a damaged page met by a query of the snapshot, a lock...
            if not _about_the_file(exc):
                raise
            raise StoreError(f"cannot read the store {self.root / DB_NAME}: {_why(exc)}") from None
        finally:
            self._reading = 0
            with contextlib.suppress(sqlite3.Error):   # a read transaction: nothing to keep or lose
                self.conn.execute("ROLLBACK")

    # ---------------------------------------------------------------- writing
    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction; nested uses join the outer one. Errors roll back everything."""
        if self._reading and not self._depth:
            raise RuntimeError("a write transaction cannot start inside a read snapshot (Store.snapshot)")
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"cannot write the store {self.root / DB_NAME}: {_why(exc)}") from None
        self._depth = 1
        try:
            yield
        except BaseException as exc:
            self._depth = 0
            self._sweep_keys.clear()   # a key added in the rolled-back transaction is not in `sweep_keys`
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.DatabaseError) and _about_the_file(exc):   # damage met mid-batch
                raise StoreError(f"cannot write the store {self.root / DB_NAME}: {_why(exc)}") from None
            raise
        self._depth = 0
        try:
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._sweep_keys.clear()
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")
            raise StoreError(f"cannot write the store {self.root / DB_NAME}: {_why(exc)}") from None

    @contextlib.contextmanager
    def background_checkpoints(self, interval: float = 0.5) -> Iterator[None]:
        """Move WAL checkpoints off the writer's thread while the block runs.

        SQLite checkpoints the WAL into the database every ~1000 pages, inside whichever COMMIT crosses
        that mark, and a checkpoint fsyncs: milliseconds on the driver's loop every couple of hundred
        short trials. Here a thread with its own connection runs a PASSIVE checkpoint (it never blocks the
        writer or readers) every `interval` s instead. Durability is unchanged: a transaction is durable
        once its COMMIT is in the WAL; a checkpoint only copies pages into the main file.
        """
        if self.readonly:
            yield
            return
        import threading

        stop = threading.Event()
        db = str(self.root / DB_NAME)

        def checkpoint() -> None:
            try:
                conn = sqlite3.connect(db, timeout=0, isolation_level=None, check_same_thread=False)
            except sqlite3.Error:
                return
            try:
                while not stop.wait(interval):
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                conn.close()

        self.conn.execute("PRAGMA wal_autocheckpoint=0")
        thread = threading.Thread(target=checkpoint, daemon=True, name="sweeplab-wal-checkpoint")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("PRAGMA wal_autocheckpoint=1000")

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        try:
            return self.conn.execute(sql, params)
        except sqlite3.DatabaseError as exc:
            if not _about_the_file(exc):
                raise
            raise StoreError(f"store {self.root / DB_NAME}: {_why(exc)}") from None

    def create_sweep(self, *, name: str, method: str, metric: str | None, goal: str,
                     spec: Mapping[str, Any], spec_path: str | None, seed: int | None,
                     state: str = "running") -> int:
        now = time.time()
        with self.transaction():
            cur = self._exec(
                "INSERT INTO sweeps(name, state, method, metric, goal, spec, spec_path, seed, created, "
                "updated, spend) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (name, state, method, metric, goal, _dumps(spec), spec_path, seed, now, now, _dumps({})),
            )
            sweep_id = int(cur.lastrowid or 0)
            self.add_event(sweep_id, "sweep_created", f"sweep {name} created")
        return sweep_id

    def update_sweep(self, sweep_id: int, **fields: Any) -> None:
        fields["updated"] = time.time()
        for k in ("spec", "spend"):
            if k in fields and not isinstance(fields[k], str):
                fields[k] = _dumps(fields[k])
        cols = ", ".join(f"{k}=?" for k in fields)
        self._exec(f"UPDATE sweeps SET {cols} WHERE id=?", (*fields.values(), sweep_id))

    def touch_sweep(self, sweep_id: int) -> None:
        self._exec("UPDATE sweeps SET updated=? WHERE id=?", (time.time(), sweep_id))

    def add_trial(self, sweep_id: int, number: int, params: Mapping[str, Any],
                  config: Mapping[str, Any] | None, seed: int | None,
                  resources: Mapping[str, Any] | None = None, *, state: str = "queued",
                  started: float | None = None, attempts: int = 0) -> int:
        """A new trial; created `running` (with `started`, `attempts=1`) when it is submitted at once."""
        cur = self._exec(
            "INSERT INTO trials(sweep_id, number, state, params, config, seed, created, resources, started, "
            f"attempts, seq) VALUES (?,?,?,?,?,?,?,?,?,?,{_NEXT_SEQ.format('?')})",
            (sweep_id, number, state, _dumps(dict(params)), _dumps(config), seed, time.time(),
             _dumps(resources), started, attempts, sweep_id),
        )
        trial_id = int(cur.lastrowid or 0)
        if len(self._trial_sweep) >= 100_000:   # bounded: a forgotten trial's sweep is read back once
            self._trial_sweep.clear()
        self._trial_sweep[trial_id] = sweep_id
        return trial_id

    def update_trial(self, trial_id: int, **fields: Any) -> None:
        for k in ("params", "config", "metrics", "resources", "profile"):
            if k in fields and fields[k] is not None and not isinstance(fields[k], str):
                fields[k] = _dumps(fields[k])
        if "value" in fields:
            fields["value"] = _finite(fields["value"])
        if fields.get("objective_values") is not None and not isinstance(fields["objective_values"], str):
            fields["objective_values"] = _dumps([_finite(v) for v in fields["objective_values"]])
        if fields.get("feasible") is not None:
            fields["feasible"] = int(bool(fields["feasible"]))
        cols = ", ".join(f"{k}=?" for k in fields)
        if _SEQ_COLUMNS.intersection(fields):   # a change the dashboard's trial list shows: the next seq
            self._exec(f"UPDATE trials SET {cols}, seq = {_NEXT_SEQ.format('trials.sweep_id')} WHERE id=?",
                       (*fields.values(), trial_id))
            return
        self._exec(f"UPDATE trials SET {cols} WHERE id=?", (*fields.values(), trial_id))

    def add_attempt(self, trial_id: int, number: int, *, started: float, host: str | None = None,
                    pid: int | None = None, log_path: str | None = None,
                    slot: Mapping[str, Any] | None = None) -> None:
        self._exec(
            "INSERT OR REPLACE INTO attempts(trial_id, number, state, started, host, pid, log_path, slot) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (trial_id, number, "running", started, host, pid, log_path, _dumps(slot)),
        )

    def update_attempt(self, trial_id: int, number: int, **fields: Any) -> None:
        cols = ", ".join(f"{k}=?" for k in fields)
        self._exec(f"UPDATE attempts SET {cols} WHERE trial_id=? AND number=?",
                   (*fields.values(), trial_id, number))

    def add_metrics(self, trial_id: int, attempt: int, points: Iterable[Sequence[Any]]) -> None:
        rows = [(trial_id, attempt, int(p[0]), str(p[1]), _finite(p[2]), float(p[3])) for p in points]
        if rows:
            try:
                self.conn.executemany(
                    "INSERT INTO metrics(trial_id, attempt, step, key, value, time) VALUES (?,?,?,?,?,?)", rows
                )
                self._add_keys(trial_id, {r[3] for r in rows})
            except sqlite3.DatabaseError as exc:
                if not _about_the_file(exc):
                    raise
                raise StoreError(f"store {self.root / DB_NAME}: {_why(exc)}") from None

    def _add_keys(self, trial_id: int, keys: set[str]) -> None:
        """Record in `sweep_keys` the keys of the trial's sweep not seen before: a set difference per batch of
        points in the steady state, one row per new key of the sweep (per writer process)."""
        sweep_id = self._trial_sweep.get(trial_id)
        if sweep_id is None:   # a trial added by another process (or forgotten): read its sweep once
            row = self.conn.execute("SELECT sweep_id FROM trials WHERE id=?", (trial_id,)).fetchone()
            if row is None:
                return
            sweep_id = self._trial_sweep[trial_id] = int(row[0])
        known = self._sweep_keys.setdefault(sweep_id, set())
        new = keys - known
        if new:
            self.conn.executemany("INSERT OR IGNORE INTO sweep_keys(sweep_id, key) VALUES (?, ?)",
                                  [(sweep_id, key) for key in sorted(new)])
            known.update(new)

    def add_event(self, sweep_id: int, kind: str, message: str = "", *, trial_id: int | None = None,
                  attempt: int | None = None, data: Mapping[str, Any] | None = None,
                  at: float | None = None) -> None:
        self._exec(
            "INSERT INTO events(sweep_id, trial_id, attempt, time, kind, message, data) VALUES (?,?,?,?,?,?,?)",
            (sweep_id, trial_id, attempt, at or time.time(), kind, message, _dumps(data)),
        )

    def add_checkpoint(self, trial_id: int, attempt: int, *, step: int | None, path: str,
                       checksum: str | None, nbytes: int | None, seconds: float | None, at: float) -> None:
        self._exec(
            "INSERT INTO checkpoints(trial_id, attempt, step, path, checksum, bytes, seconds, time) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (trial_id, attempt, step, self.relpath(path), checksum, nbytes, seconds, at),
        )

    def remove_checkpoints(self, trial_id: int, paths: Iterable[str]) -> None:
        """Forget checkpoints of a trial that no longer exist (deleted by retention).

        Matched by name: a trial's checkpoints share one directory, and a row may name it by a path that is no
        longer the one retention reports (an absolute path of a store since moved, which kept its rows forever)."""
        names = {_last_part(p) for p in paths}
        if not names:
            return
        rows = self.conn.execute("SELECT id, path FROM checkpoints WHERE trial_id=?", (trial_id,)).fetchall()
        self.conn.executemany("DELETE FROM checkpoints WHERE id=?",
                              [(r["id"],) for r in rows if _last_part(str(r["path"])) in names])

    def add_artifact(self, trial_id: int, attempt: int | None, name: str, path: str, at: float) -> None:
        self._exec("INSERT INTO artifacts(trial_id, attempt, name, path, time) VALUES (?,?,?,?,?)",
                   (trial_id, attempt, name, path, at))

    def add_system_samples(self, trial_id: int, attempt: int, samples: Iterable[Mapping[str, Any]]) -> None:
        rows = [(trial_id, attempt, float(s["time"]), s.get("cpu"), s.get("rss"), s.get("gpu_util"),
                 s.get("gpu_mem")) for s in samples]
        if rows:
            self.conn.executemany(
                "INSERT INTO system_samples(trial_id, attempt, time, cpu, rss, gpu_util, gpu_mem) "
                "VALUES (?,?,?,?,?,?,?)", rows)

    # ---------------------------------------------------------------- reading (shared by writer and readers)
    def sweep_row(self, name: str) -> sqlite3.Row | None:
        try:   # a command-line argument that is not UTF-8 (lone surrogates) names no sweep; SQLite cannot bind it
            name.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return self._exec("SELECT * FROM sweeps WHERE name=?", (name,)).fetchone()

    def sweep_names(self) -> list[str]:
        return [r[0] for r in self._exec("SELECT name FROM sweeps ORDER BY id", ()).fetchall()]

    def sweep_by_id(self, sweep_id: int) -> sqlite3.Row | None:
        return self._exec("SELECT * FROM sweeps WHERE id=?", (sweep_id,)).fetchone()

    def trial_rows(self, sweep_id: int) -> list[sqlite3.Row]:
        return self._exec("SELECT * FROM trials WHERE sweep_id=? ORDER BY number", (sweep_id,)).fetchall()

    def trial_row(self, trial_id: int) -> sqlite3.Row | None:
        return self._exec("SELECT * FROM trials WHERE id=?", (trial_id,)).fetchone()

    def trial_by_number(self, sweep_id: int, number: int) -> sqlite3.Row | None:
        """Trial `number` of a sweep (numbers count from 0 in the order trials were created)."""
        if number not in INTEGERS:
            return None
        return self._exec("SELECT * FROM trials WHERE sweep_id=? AND number=?", (sweep_id, number)).fetchone()

    def trial_count(self, sweep_id: int) -> int:
        return int(self._exec("SELECT count(*) FROM trials WHERE sweep_id=?", (sweep_id,)).fetchone()[0])

    def last_failed_attempt(self, trial_id: int) -> sqlite3.Row | None:
        """The trial's latest attempt that failed (what `sweeplab repro` replays), or None."""
        return self._exec("SELECT * FROM attempts WHERE trial_id=? AND state='failed' ORDER BY number DESC",
                          (trial_id,)).fetchone()

    def attempt_failures(self, trial_id: int) -> list[tuple[str, str]]:
        """(error type, reason) of each failed attempt of the trial, in order: what its retries have used."""
        return [(str(r[0]), str(r[1] or "")) for r in self._exec(
            "SELECT error_type, reason FROM attempts WHERE trial_id=? AND state='failed' ORDER BY number",
            (trial_id,)).fetchall()]

    def attempt_seconds(self, trial_id: int) -> float:
        """Wall seconds the trial's finished attempts ran (a running attempt counts once it ends)."""
        return float(self._exec("SELECT coalesce(sum(ended - started), 0) FROM attempts "
                                "WHERE trial_id=? AND ended IS NOT NULL", (trial_id,)).fetchone()[0])

    def attempt_started(self, trial_id: int, attempt: int) -> float | None:
        row = self._exec("SELECT started FROM attempts WHERE trial_id=? AND number=?",
                         (trial_id, attempt)).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def stop_requests(self, sweep_id: int) -> dict[int, float]:
        """trial id -> when the driver first asked it to stop (a scheduler's, a monitor's or a budget's
        verdict; `[warn]` rule events asked nothing): what a trial reported after that, its scheduler never
        saw."""
        rows = self._exec(
            "SELECT trial_id, min(time) FROM events WHERE sweep_id=? AND trial_id IS NOT NULL AND "
            "(kind IN ('pruned', 'stopped') OR (kind='rule' AND message NOT LIKE '[warn]%')) GROUP BY trial_id",
            (sweep_id,)).fetchall()
        return {int(r[0]): float(r[1]) for r in rows}

    def stop_verdicts(self, sweep_id: int) -> dict[int, sqlite3.Row]:
        """trial id -> the first stop a scheduler or a monitor decided for it: a row of (kind 'pruned' or
        'rule', message: the reason, attempt, data: the verdict's JSON, time). A budget's stops ('stopped') are
        not verdicts on the trial."""
        rows = self._exec(
            "SELECT trial_id, kind, message, attempt, data, min(time) AS time FROM events WHERE sweep_id=? AND "
            "trial_id IS NOT NULL AND (kind='pruned' OR (kind='rule' AND message NOT LIKE '[warn]%')) "
            "GROUP BY trial_id", (sweep_id,)).fetchall()
        return {int(r["trial_id"]): r for r in rows}

    def metric_reports(self, sweep_id: int, key: str) -> list[sqlite3.Row]:
        """Every report of metric `key` by the sweep's trials, in the order they were stored.

        Rows of (trial_id, step, value, time); value is None where a non-finite value was reported.
        """
        return self._exec(
            "SELECT m.trial_id, m.step, m.value, m.time FROM metrics m JOIN trials t ON t.id = m.trial_id "
            "WHERE t.sweep_id = ? AND m.key = ? ORDER BY m.rowid", (sweep_id, key)).fetchall()

    def smoke_sweeps(self, spec_path: str) -> list[sqlite3.Row]:
        """The smoke sweeps (`sweeplab sweep --smoke`) of the spec file at `spec_path`, newest first."""
        return self._exec("SELECT * FROM sweeps WHERE spec_path=? AND json_extract(spec, '$._sweeplab.smoke') "
                          "ORDER BY id DESC", (spec_path,)).fetchall()

    def completed_attempts(self, sweep_id: int) -> list[sqlite3.Row]:
        """The finished attempts of the sweep's completed trials: rows of (id = the trial's id, profile,
        started, ended), by trial id."""
        return self._exec(
            "SELECT t.id, t.profile, a.started, a.ended FROM trials t JOIN attempts a ON a.trial_id = t.id "
            "WHERE t.sweep_id=? AND t.state='completed' AND a.ended IS NOT NULL ORDER BY t.id, a.number",
            (sweep_id,)).fetchall()

    def report_times(self, trial_id: int) -> list[tuple[int, float]]:
        """(step, time of its last report) for each step the trial reported any metric at, by step."""
        return [(int(step), float(t)) for step, t in self._exec(
            "SELECT step, MAX(time) FROM metrics WHERE trial_id=? GROUP BY step ORDER BY step", (trial_id,))]

    def attempt_span(self, sweep_id: int) -> tuple[float | None, float | None]:
        """(first start, last end) over every attempt of the sweep's trials; None where there is none."""
        first, last = self._exec(
            "SELECT MIN(a.started), MAX(a.ended) FROM attempts a JOIN trials t ON t.id = a.trial_id "
            "WHERE t.sweep_id=?", (sweep_id,)).fetchone()
        return first, last

    def latest_artifact(self, trial_id: int, name: str) -> sqlite3.Row | None:
        """The trial's newest artifact called `name`, or None."""
        return self._exec("SELECT * FROM artifacts WHERE trial_id=? AND name=? ORDER BY id DESC",
                          (trial_id, name)).fetchone()

    def metric_history(self, trial_id: int) -> dict[str, list[tuple[int, float]]]:
        out: dict[str, list[tuple[int, float]]] = {}
        for key, step, value in self._exec(
            "SELECT key, step, value FROM metrics WHERE trial_id=? ORDER BY rowid", (trial_id,)
        ):
            out.setdefault(key, []).append((step, float("nan") if value is None else value))
        return out

    def metric_points(self, trial_id: int) -> list[sqlite3.Row]:
        """Every point a trial reported, over all its attempts, in the order they were stored: rows of
        (step, key, value, time); value is None where a non-finite value was reported."""
        return self._exec("SELECT step, key, value, time FROM metrics WHERE trial_id=? ORDER BY rowid",
                          (trial_id,)).fetchall()

    def checkpoint_rows(self, trial_id: int) -> list[sqlite3.Row]:
        return self._exec("SELECT * FROM checkpoints WHERE trial_id=? ORDER BY id", (trial_id,)).fetchall()

    def relpath(self, path: str | os.PathLike[str]) -> str:
        """`path` relative to the store root when inside it, else as given (a relative path: already so; a URL)."""
        p = Path(path)
        if not p.is_absolute() or "://" in str(path):
            return str(path)
        try:
            return str(p.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path)


def _last_part(path: str) -> str:
    """The last component of a path or URL (`.../0/step-0000000004/` -> `step-0000000004`)."""
    return path.rstrip("/").rpartition("/")[2]
