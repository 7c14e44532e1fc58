"""The `stalled` monitor and a crash loop of user-input errors on the Ray backend (a local Ray instance that
`--backend ray` starts): the same driver decisions as on the local backend (test_early_stopping.py,
test_sweeps.py), through Ray actors."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray", reason="pip install 'sweeplab[ray]'")

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STALLING = Path(__file__).resolve().parents[1] / "fixtures" / "stalling.py"


def test_a_stalled_trial_then_a_crash_loop_of_a_missing_config_key_on_ray(cli):
    """One worker, grid order: a trial that only logs a heartbeat is stopped as stalled; then three trials
    read a config key that does not exist, and the crash loop names it without a traceback."""
    f = cli.spec("s", f"function: {STALLING}:train\nmethod: grid\nmetric: {{name: val_loss, goal: minimize}}\n"
                 "parameters:\n  kind: {values: [stuck, missing]}\n  seconds: {values: [3, 4, 5]}\n"
                 "monitors: [{stalled: {after: 1s}}]\ntrial: {retries: 1}\n")
    cp = cli("sweep", str(f), "--name", "rm", "--backend", "ray", "--workers", "1", "-q", timeout=300)
    out = cp.stdout + cp.stderr
    assert cp.returncode == 1 and "crash loop" in out and "Traceback" not in out, out
    assert "ConfigKeyError: model: the config has no such key" in out, out
    trials = cli.status("rm")["trials"]
    stuck = [t for t in trials if t["params"]["kind"] == "stuck"]
    assert stuck and all(t["state"] == "stopped_by_rule" for t in stuck), stuck
    assert stuck[0]["reason"].startswith("stalled: no progress for "), stuck[0]["reason"]
    missing = [t for t in trials if t["params"]["kind"] == "missing"]
    assert missing and all(t["state"] == "failed" and t["attempts"] == 1 for t in missing), missing
