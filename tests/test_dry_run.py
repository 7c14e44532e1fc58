"""`sweeplab sweep SPEC --dry-run`'s cost estimate: found after `make smoke` of an `init` project (whose
smoke writes its own store), and computed as docs/debugging.md says. Its accuracy against the real sweep's
wall time is measured by benchmarks/dry_run_estimate.py."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweeplab.smoke import SMOKE_RECORD, estimate_lines, expected_steps
from sweeplab.spec import load_spec

_WALL = re.compile(r"= ([\d.]+) (s|min|h) wall")


def sweeplab_command() -> list[str]:
    script = Path(sys.executable).parent / "sweeplab"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sweeplab"]


def _run(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "COLUMNS": "240"}  # one cost line per line, unwrapped
    t0 = time.monotonic()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)
    return done, time.monotonic() - t0


def _estimated_seconds(text: str) -> float:
    m = _WALL.search(text)
    assert m, text
    return float(m.group(1)) * {"s": 1, "min": 60, "h": 3600}[m.group(2)]


@pytest.mark.slow
def test_dry_run_after_make_smoke_prints_the_estimate_of_what_the_smoke_measured(tmp_path: Path) -> None:
    """The xgboost template (the lighter one): `make smoke` (store .sweeplab-smoke) records what it measured
    next to the spec, and a dry-run without --store finds it and prints the model's estimate of a 10-trial,
    2-worker sweep from those figures, writing no store. How close that estimate comes to the real sweep's
    wall time is a benchmark's figure (benchmarks/dry_run_estimate.py), not this test's."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    project = tmp_path / "proj"
    cmd = sweeplab_command()
    done, _ = _run([*cmd, "init", str(project), "--template", "xgboost"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    done, _ = _run([make, "-s", "smoke", f"SWEEPLAB={shlex.join(cmd)}"], project)
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(project / ".sweeplab-smoke" / "store.db") as db:   # rounds count from 1: two
        last = [r[0] for r in db.execute("SELECT last_step FROM trials ORDER BY id DESC LIMIT 2")]
        assert [s >= 2 for s in last] == [True, True]   # reports each

    record = project / "sweeps" / SMOKE_RECORD
    assert record.is_file()   # where the smoke recorded it
    timing = json.loads(record.read_text())["tpe_asha.yaml"]
    assert timing["per_step_s"] > 0 and timing["fixed_s"] > 0, timing
    dry, _ = _run([*cmd, "sweep", "sweeps/tpe_asha.yaml", "--dry-run", "--trials", "10", "--workers", "2"], project)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert not (project / ".sweeplab").exists()   # the dry-run wrote no store
    spec = load_spec(project / "sweeps" / "tpe_asha.yaml")
    spec = spec.with_overrides(budget=dataclasses.replace(spec.budget, trials=10))
    expected = estimate_lines(spec, timing, 2)
    assert ".sweeplab-smoke" in dry.stdout and "unknown" not in dry.stdout, dry.stdout
    assert expected[1] in dry.stdout and _estimated_seconds(expected[1]) > 0, (expected, dry.stdout)


@pytest.mark.slow
def test_the_smoke_checks_own_import_of_the_target_is_not_the_commands_overhead(tmp_path: Path) -> None:
    """`--smoke` imports the target in the driver to check its config before any trial; a real sweep does
    not. A target whose import takes 3 s in the driver (and no time in the workers) must not add those
    3 s to the recorded overhead, which every estimate pays (it did: estimates of the xgboost template
    came out ~1.9x the real sweep)."""
    (tmp_path / "t.py").write_text(
        "import sys, time\n"
        "if 'sweeplab.driver' in sys.modules:   # the driver's smoke check, not a worker\n"
        "    time.sleep(3)\n"
        "def train(config, run):\n"
        "    for step in range(1, 4):\n"
        "        run.log({'loss': config.x / step}, step=step)\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("function: t.py:train\nmethod: random\nmetric: {name: loss, goal: minimize}\n"
                    "budget: {trials: 4}\nparameters:\n  x: {min: 0.0, max: 1.0}\n")
    done, wall = _run([*sweeplab_command(), "sweep", str(spec), "--smoke", "--store", str(tmp_path / "sm")],
                      tmp_path)
    assert done.returncode == 0 and "smoke check passed" in done.stdout, done.stdout + done.stderr
    assert wall > 3   # the import did take its 3 s in the driver
    timing = json.loads((tmp_path / SMOKE_RECORD).read_text())["s.yaml"]
    # without the 3 s: less than the command's whole time minus most of them (a load that slows the command
    # slows both sides; a fixed bound of 3 s failed at load 10 with an overhead of 4.4 s in a 9 s command)
    assert timing["overhead_s"] < wall - 2.5, (timing, wall)


def test_dry_run_without_a_smoke_says_so(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("function: t.py:train\nmethod: random\nmetric: {name: loss, goal: minimize}\n"
                    "budget: {trials: 4}\nparameters:\n  x: {min: 0.0, max: 1.0}\n")
    (tmp_path / "t.py").write_text("def train(config, run):\n    return {'loss': config.x}\n")
    dry, _ = _run([*sweeplab_command(), "sweep", str(spec), "--dry-run"], tmp_path)
    assert dry.returncode == 0 and "cost     unknown: run `sweeplab sweep SPEC --smoke` first" in dry.stdout


@pytest.mark.parametrize("et,trials,expected", [
    ({"type": "asha", "min_iter": 1, "max_iter": 9, "eta": 3}, 0, 1 + 2 / 3 + 6 / 9),     # n -> infinity
    ({"type": "asha", "min_iter": 20, "max_iter": 200, "eta": 3}, 0, 20 + 40 / 3 + 120 / 9 + 20 / 27),
    # 2 trials: the 2nd continues if no worse than the 1st (1/2): 3/4 go on at rung 1, 3/4 of those at rung 3
    ({"type": "asha", "min_iter": 1, "max_iter": 9, "eta": 3}, 2, 1 + (3 / 4) * 2 + (3 / 4) ** 2 * 6),
    # 3 trials: at rung 1 the m-th continues if best of m (1, 1/2, 1/3): 11/18 go on; 2 reach rung 3 (3/4)
    ({"type": "asha", "min_iter": 1, "max_iter": 9, "eta": 3}, 3, 1 + (11 / 18) * 2 + (11 / 24) * 6),
    ({"type": "hyperband", "min_iter": 1, "max_iter": 27, "eta": 3}, 10, 27),
    ({"type": "median", "max_iter": 50}, 10, 50),
])
def test_expected_steps_follow_ashas_promotion_rate(et: dict, trials: int, expected: float) -> None:
    got = expected_steps(et, trials)
    assert got is not None and got[0] == pytest.approx(expected) and got[1] == et["max_iter"]


def test_estimate_separates_worker_start_up_from_steps(tmp_path: Path) -> None:
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text("function: t.py:train\nmethod: random\nmetric: {name: loss, goal: minimize}\n"
                         "budget: {trials: 40}\nearly_terminate: {type: median, max_iter: 100}\n"
                         "parameters:\n  x: {min: 0.0, max: 1.0}\n")
    spec = load_spec(spec_file)
    timing = {"fixed_s": 5.0, "trial_s": 0.5, "per_step_s": 0.01, "overhead_s": 2.0, "trials": 2, "store": "s"}
    lines = estimate_lines(spec, timing, 4)
    # 2 s overhead + 5 s cold start once + 40 trials x (0.5 s + 100 x 0.01 s) / 4 workers = 22 s
    assert _estimated_seconds(lines[1]) == pytest.approx(22, abs=0.5)
