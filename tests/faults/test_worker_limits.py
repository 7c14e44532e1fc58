"""A function trial that uses up a resource of its worker process (file descriptors) fails alone: its reason
names what ran out, and the trials after it, on a new worker, run as if it had not been there."""

from __future__ import annotations

import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TRIALS = Path(__file__).resolve().parent / "leaky_trials.py"


def _few_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def test_a_trial_that_uses_up_its_file_descriptors_fails_alone_and_says_so(tmp_path: Path) -> None:
    """Trial 0 leaks every file descriptor its worker may open (`ulimit -n 256`), then fails opening one. Its
    failure's report imported a module (a file to open): the worker died, the reason "worker process killed by
    signal SIGABRT". And the worker was kept for the next trial with its descriptors still held: trials 1 and 2
    failed opening their logs ("Too many open files"), a crash loop that stopped the sweep. The leaking trial's
    reason is its own error, and its worker retires: trials 1 and 2 complete."""
    spec = tmp_path / "s.yaml"
    spec.write_text(f"function: {TRIALS}:fd_leak\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
                    "parameters: {x: {values: [1.0, 2.0, 3.0]}}\ntrial: {retries: 0}\n")
    store = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", str(spec), "--name", "fd", "--store", str(store),
                         "-w", "1", "-q"], env=env, capture_output=True, text=True, timeout=120, preexec_fn=_few_fds)
    conn = sqlite3.connect(f"file:{store / 'store.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT number, state, reason FROM trials ORDER BY number").fetchall()
    finally:
        conn.close()
    assert [(n, s) for n, s, _ in rows] == [(0, "failed"), (1, "completed"), (2, "completed")], (rows, cp.stderr)
    assert "Too many open files" in rows[0][2], rows[0]
    assert cp.returncode == 0, cp.stderr
