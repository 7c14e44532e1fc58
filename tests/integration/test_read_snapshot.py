"""What the store says must be true: every JSON answer is read from one snapshot of the store.

A real sweep (the `sweeplab` CLI in a subprocess, many quick trials) writes while readers ask for its status
again and again: through the query layer on their own read-only connection, through `sweeplab status
--json`, and through the dashboard's API. In every answer the per-state `counts` must equal the tally of
the `trials` list returned with them. Before reads took one snapshot, the counts were read by a later
statement than the trials and were sometimes one trial ahead.
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sweeplab.store import Store
from sweeplab.store import queries as q

TRIALS = Path(__file__).resolve().parents[1] / "fixtures" / "trials.py"

pytestmark = pytest.mark.slow


def _start_sweep(cli: Any, name: str) -> subprocess.Popen:
    """Many short trials (~0.05 s each), without end (the test stops the sweep with Ctrl-C once it has read enough)."""
    f = cli.spec(name, f"function: {TRIALS}:sleeper\nmethod: random\nseed: 1\n"
                       "metric: {name: loss, goal: minimize}\nparameters:\n  x: {min: 0.0, max: 1.0}\n"
                       "  seconds: {value: 0.01}\nbudget: {trials: 1000000, time: 600}\n")
    return cli.start("sweep", str(f), "--name", name, "--workers", "2", "-q")


def _wait_for_sweep(cli: Any, name: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    db = cli.store / "store.db"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the sweep ended early: {proc.communicate()}")
        if db.exists():
            try:
                s = Store.open(cli.store, readonly=True)
            except Exception:   # the writer is still creating the schema
                time.sleep(0.05)
                continue
            try:
                if s.sweep_row(name) is not None:
                    return
            except Exception:
                pass
            finally:
                s.close()
        time.sleep(0.05)
    raise AssertionError("the sweep did not start in time")


def _tally(states: list[str]) -> dict[str, int]:
    c = collections.Counter(states)
    return {k: v for k, v in c.items() if v}


def _nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


def _hammer(proc: subprocess.Popen, read: Callable[[], tuple[dict[str, int], list[str]]], *,
            reads: int, growth: int, deadline: float = 180.0) -> tuple[int, list[str]]:
    """Read while the sweep runs until `reads` answers saw at least `growth` different trial totals.

    Returns (answers read, the answers whose counts disagreed with their own trials list).
    """
    done, bad, totals = 0, [], set()
    stop_at = time.monotonic() + deadline
    while proc.poll() is None and time.monotonic() < stop_at and (done < reads or len(totals) < growth):
        counts, states = read()
        done += 1
        totals.add(len(states))
        if _nonzero(counts) != _tally(states):
            bad.append(f"read {done}: counts {_nonzero(counts)} but the trials list tallies {_tally(states)}")
    assert proc.poll() is None, "the sweep ended before the reads were done"
    # the reads overlapped the writes: they saw the sweep grow
    assert len(totals) >= growth, f"only {len(totals)} different trial totals seen in {done} reads"
    return done, bad


def _finish(proc: subprocess.Popen) -> None:
    """Ctrl-C the sweep; it must have been running all along (so every read overlapped its writes)."""
    running = proc.poll() is None
    if running:
        proc.send_signal(signal.SIGINT)
    try:
        _, errs = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert running and proc.returncode == 130, f"the sweep ended on its own (exit {proc.returncode}): {errs}"


def test_status_counts_always_match_its_trials_while_a_sweep_writes(cli: Any) -> None:
    proc = _start_sweep(cli, "snap")
    try:
        _wait_for_sweep(cli, "snap", proc)
        reader = Store.open(cli.store, readonly=True)

        def via_queries() -> tuple[dict[str, int], list[str]]:
            data = q.sweep_status(reader, "snap")
            return data["sweep"]["counts"], [t["state"] for t in data["trials"]]

        def via_columns() -> tuple[dict[str, int], list[str]]:
            data = q.trial_columns(reader, "snap")
            return data["sweep"]["counts"], data["state"]

        flip = [0]

        def either() -> tuple[dict[str, int], list[str]]:
            flip[0] ^= 1
            return via_queries() if flip[0] else via_columns()

        try:
            reads, bad = _hammer(proc, either, reads=500, growth=40)
        finally:
            reader.close()
        assert not bad, f"{len(bad)} of {reads} answers disagreed with themselves:\n" + "\n".join(bad[:5])
    finally:
        _finish(proc)


def test_status_json_subprocess_counts_match_its_trials(cli: Any) -> None:
    """The command line itself (each call a new process and a new connection) while the sweep runs."""
    proc = _start_sweep(cli, "snapcli")
    try:
        _wait_for_sweep(cli, "snapcli", proc)

        def via_cli() -> tuple[dict[str, int], list[str]]:
            cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", "snapcli", "--json"], cwd=cli.tmp,
                                env=cli.env(), capture_output=True, text=True, timeout=120)
            assert cp.returncode == 0, cp.stderr
            data = json.loads(cp.stdout)
            return data["sweep"]["counts"], [t["state"] for t in data["trials"]]

        reads, bad = _hammer(proc, via_cli, reads=30, growth=10)
        assert not bad, f"{len(bad)} of {reads} answers disagreed with themselves:\n" + "\n".join(bad[:5])
    finally:
        _finish(proc)


def test_dashboard_api_counts_always_match_its_trials_while_a_sweep_writes(cli: Any) -> None:
    pytest.importorskip("starlette")
    import warnings

    from sweeplab.dashboard import create_app

    with warnings.catch_warnings():   # Starlette's httpx deprecation notice is not ours to fix
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    proc = _start_sweep(cli, "snapweb")
    try:
        _wait_for_sweep(cli, "snapweb", proc)
        with TestClient(create_app(cli.store), base_url="http://127.0.0.1:8765") as client:
            flip = [0]

            def via_api() -> tuple[dict[str, int], list[str]]:
                flip[0] ^= 1
                if flip[0]:
                    r = client.get("/api/sweeps/snapweb/status")
                    assert r.status_code == 200, r.text
                    data = r.json()
                    return data["sweep"]["counts"], [t["state"] for t in data["trials"]]
                r = client.get("/api/sweeps/snapweb/trials")
                assert r.status_code == 200, r.text
                data = r.json()
                # its change token (and so its ETag) describes the same snapshot: "updated:trials:event:metric"
                if int(data["version"].split(":")[1]) != data["n"]:
                    return {"version": int(data["version"].split(":")[1])}, data["state"]
                return data["sweep"]["counts"], data["state"]

            reads, bad = _hammer(proc, via_api, reads=250, growth=40)
        assert not bad, f"{len(bad)} of {reads} answers disagreed with themselves:\n" + "\n".join(bad[:5])
    finally:
        _finish(proc)
