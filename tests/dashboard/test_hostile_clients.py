"""Hostile requests the dashboard must answer as a client error, never a 500 or invalid JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HUGE = "99999999999999999999999"   # beyond SQLite's 64-bit INTEGER


@pytest.mark.parametrize("path", [
    f"/api/sweeps/demo/trials/{HUGE}",
    f"/api/sweeps/demo/trials/{HUGE}/curves",
    f"/api/sweeps/demo/trials/{HUGE}/log",
    f"/api/sweeps/demo/curves?key=loss&trials={HUGE}",
    f"/api/sweeps/demo/events?trial={HUGE}",
])
def test_a_trial_number_beyond_the_store_is_not_found(client: Any, path: str) -> None:
    r = client.get(path)
    assert r.status_code in (200, 404), (r.status_code, r.text)
    body = json.loads(r.text)
    assert body.get("trials", []) == [] and body.get("events", []) == []


@pytest.mark.parametrize("command, ref, message", [
    ("repro", f"demo/{HUGE}", f"error: sweep 'demo' has no trial {HUGE}"),
    ("profile", f"demo/{HUGE}", f"error: sweep 'demo' has no trial {HUGE}"),
    ("repro", "demo/\u00b2", "error: expected SWEEP/TRIAL"),      # str.isdigit() is true for a superscript 2
])
def test_cli_trial_number_beyond_the_store_is_a_one_line_error(demo_store: Path, command: str, ref: str,
                                                                message: str) -> None:
    cp = subprocess.run([sys.executable, "-m", "sweeplab", command, ref, "--store", str(demo_store)],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2, cp.stderr
    assert len(cp.stderr.splitlines()) == 1 and cp.stderr.startswith(message), cp.stderr
