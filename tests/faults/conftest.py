"""Chaos-suite fixtures: the real CLI in subprocesses, plus ways to look into the store and the processes.

`chaos` extends the integration suite's `cli` fixture (same temporary store, same environment) with
read-only queries on store.db, `wait_for`, spec building for tests/fixtures/faulty.py, and process helpers
(psutil) to find and kill workers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
FAULTY = HERE.parent / "fixtures" / "faulty.py"


def _load_cli_class() -> type:
    spec = importlib.util.spec_from_file_location("_sweeplab_integration_conftest",
                                                  HERE.parent / "integration" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CLI


CLI = _load_cli_class()


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05,
             what: str = "condition", proc: Any = None) -> Any:
    """Poll `predicate` until it returns something truthy; fail the test after `timeout` seconds,
    or as soon as `proc` (a Popen the condition depends on) has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"{what}: the process exited ({proc.returncode}) first\n{out}\n{err}")
        time.sleep(interval)
    raise AssertionError(f"{what} not met within {timeout:g}s")


def params(**values: Any) -> str:
    """The `parameters:` block of a spec: a string starting with "{" is a distribution, anything else a
    constant. params(x="{min: 0, max: 1}", steps=10) -> "  x: {min: 0, max: 1}\\n  steps: {value: 10}"."""
    lines = []
    for key, v in values.items():
        text = v if isinstance(v, str) and v.startswith("{") else f"{{value: {v!r}}}"
        lines.append(f"  {key}: {text}")
    return "\n".join(lines)


def spec(function: str, *, params: str, extra: str = "", method: str = "grid", seed: int = 1) -> str:
    """A sweep spec running `tests/fixtures/faulty.py:<function>`, minimising `loss`."""
    return (f"function: {FAULTY}:{function}\nmethod: {method}\nseed: {seed}\n"
            f"metric: {{name: loss, goal: minimize}}\nparameters:\n{params}\n{extra}\n")


class Chaos(CLI):  # type: ignore[misc,valid-type]
    """The CLI runner plus read-only views of the store and of the processes it started."""

    wait_for = staticmethod(wait_for)
    faulty_spec = staticmethod(spec)
    params = staticmethod(params)

    @property
    def db_path(self) -> Path:
        return self.store / "store.db"

    def _connect(self) -> sqlite3.Connection:
        # on a read-only directory SQLite cannot create store.db-shm; nobody can write there either,
        # so the file may be read as immutable
        immutable = "" if os.access(self.store, os.W_OK) else "&immutable=1"
        return sqlite3.connect(f"file:{self.db_path}?mode=ro{immutable}", uri=True, timeout=10)

    def rows(self, sql: str, *args: Any) -> list[sqlite3.Row]:
        """Run a read-only query on store.db (empty when the store or its tables do not exist yet)."""
        if not self.db_path.exists():
            return []
        conn = self._connect()
        conn.row_factory = sqlite3.Row
        try:
            return conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc) or "locked" in str(exc) or "busy" in str(exc):
                return []
            raise
        finally:
            conn.close()

    def trial(self, sweep: str, number: int) -> sqlite3.Row | None:
        got = self.rows("SELECT t.* FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
                        "WHERE s.name=? AND t.number=?", sweep, number)
        return got[0] if got else None

    def trials(self, sweep: str) -> list[sqlite3.Row]:
        return self.rows("SELECT t.* FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
                         "WHERE s.name=? ORDER BY t.number", sweep)

    def attempts(self, trial_id: int) -> list[sqlite3.Row]:
        return self.rows("SELECT * FROM attempts WHERE trial_id=? ORDER BY number", trial_id)

    def steps(self, trial_id: int, attempt: int, key: str = "loss") -> list[int]:
        return [r[0] for r in self.rows("SELECT step FROM metrics WHERE trial_id=? AND attempt=? AND key=? "
                                        "ORDER BY step", trial_id, attempt, key)]

    def checkpoints(self, trial_id: int, attempt: int | None = None) -> list[sqlite3.Row]:
        if attempt is None:
            return self.rows("SELECT * FROM checkpoints WHERE trial_id=? ORDER BY id", trial_id)
        return self.rows("SELECT * FROM checkpoints WHERE trial_id=? AND attempt=? ORDER BY id",
                         trial_id, attempt)

    def events(self, kind: str, trial_id: int | None = None) -> list[sqlite3.Row]:
        if trial_id is None:
            return self.rows("SELECT * FROM events WHERE kind=? ORDER BY id", kind)
        return self.rows("SELECT * FROM events WHERE kind=? AND trial_id=? ORDER BY id", kind, trial_id)

    def running_attempt(self, sweep: str, number: int, attempt: int = 1) -> sqlite3.Row | None:
        """The attempt row once its worker reported its pid (the trial is really running)."""
        t = self.trial(sweep, number)
        if t is None:
            return None
        got = self.rows("SELECT * FROM attempts WHERE trial_id=? AND number=? AND pid IS NOT NULL "
                        "AND state='running'", t["id"], attempt)
        return got[0] if got else None

    def stray_workers(self) -> list[int]:
        """Pids of live worker processes started for this store (none may outlive their driver)."""
        import psutil

        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            with contextlib.suppress(psutil.Error):
                if "sweeplab.backends.worker" not in " ".join(proc.info["cmdline"] or ()):
                    continue
                if proc.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                if proc.environ().get("SWEEPLAB_STORE") == str(self.store):
                    found.append(proc.pid)
        return found

    def integrity(self) -> str:
        conn = self._connect()
        try:
            return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
        finally:
            conn.close()

    def dump_sweep(self, sweep: str) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of `sweep` (trials, attempts, metrics, checkpoints), to compare before and after."""
        q = {
            "trials": "SELECT t.* FROM trials t JOIN sweeps s ON s.id=t.sweep_id WHERE s.name=? "
                      "ORDER BY t.id",
            "attempts": "SELECT a.* FROM attempts a JOIN trials t ON t.id=a.trial_id JOIN sweeps s "
                        "ON s.id=t.sweep_id WHERE s.name=? ORDER BY a.id",
            "metrics": "SELECT m.* FROM metrics m JOIN trials t ON t.id=m.trial_id JOIN sweeps s "
                       "ON s.id=t.sweep_id WHERE s.name=? ORDER BY m.rowid",
            "checkpoints": "SELECT c.* FROM checkpoints c JOIN trials t ON t.id=c.trial_id JOIN sweeps s "
                           "ON s.id=t.sweep_id WHERE s.name=? ORDER BY c.id",
        }
        return {k: [tuple(r) for r in self.rows(sql, sweep)] for k, sql in q.items()}


@pytest.fixture
def chaos(tmp_path: Path) -> Iterator[Chaos]:
    yield Chaos(tmp_path)


@pytest.fixture
def reap() -> Iterator[list[int]]:
    """Pids a test started or found; any still alive at teardown are killed (never leave processes behind)."""
    import psutil

    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            for child in proc.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
            proc.kill()


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[Path, str], Path]]:
    """`tmpfs(dir, "1m")`: a small tmpfs mounted on `dir` (created), a full disk to fill (the test is skipped
    where mounting is not permitted); unmounted at teardown."""
    mounted: list[Path] = []

    def make(disk: Path, size: str) -> Path:
        disk.mkdir(parents=True, exist_ok=True)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                          capture_output=True, check=False).returncode != 0:
            pytest.skip("mounting a tmpfs is not permitted here")
        mounted.append(disk)
        return disk

    yield make
    for disk in reversed(mounted):
        if subprocess.run(["umount", str(disk)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True, check=False)
