"""SQL lives in the store: no sweeplab module outside `sweeplab.store` writes SQL or runs it on a connection.

import-linter forbids them `import sqlite3` (pyproject.toml); these checks catch what it cannot see: SQL text
run through a store's `conn`, and a new top-level module missing from that contract's list.
"""

from __future__ import annotations

import ast
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import sweeplab

tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")

PACKAGE = Path(sweeplab.__file__).parent
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|PRAGMA|BEGIN|COMMIT|ROLLBACK|CREATE|ALTER|DROP|"
                 r"WITH RECURSIVE)\s")
RUNS_SQL = {"execute", "executemany", "executescript"}


def _outside_store() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if PACKAGE / "store" not in p.parents]


def _sql_sites(source: str) -> list[str]:
    """Lines of `source` that hold SQL text or run a statement on a `conn`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.match(node.value):
            found.append(f"l.{node.lineno}: {node.value[:60]!r}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RUNS_SQL
              and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "conn"):
            found.append(f"l.{node.lineno}: .conn.{node.func.attr}(...)")
    return found


def test_the_check_sees_sql_where_it_is() -> None:
    assert sorted(_sql_sites('rows = store.conn.execute("SELECT id FROM sweeps").fetchall()')) == [
        "l.1: 'SELECT id FROM sweeps'", "l.1: .conn.execute(...)"]
    assert _sql_sites("self.store.conn.executemany(sql, rows)") == ["l.1: .conn.executemany(...)"]
    assert _sql_sites('msg = "Select a sweep"; execute(task); proc.conn.their_state') == []


def test_no_module_outside_the_store_holds_sql() -> None:
    found = {str(p.relative_to(PACKAGE)): s for p in _outside_store() if (s := _sql_sites(p.read_text()))}
    assert found == {}, "move these into sweeplab.store (a Store method or a queries function)"


def test_the_sqlite3_contract_names_every_module_but_the_store() -> None:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c.get("forbidden_modules") == ["sqlite3"]]
    modules = {f"sweeplab.{m.name}" for m in pkgutil.iter_modules(sweeplab.__path__)}
    assert "sweeplab.store" in modules and "sweeplab.cli" in modules
    assert set(contract["source_modules"]) == modules - {"sweeplab.store"}
