"""The smoke sweep passes: 2 tiny trials, as `make smoke` runs them.

It catches the common mistakes before real compute is spent (an import error, a config key that does
not exist, a metric never logged, a checkpoint that cannot be saved). Set SWEEPLAB to use another
sweeplab command (e.g. `SWEEPLAB=.venv/bin/sweeplab`); by default this Python's sweeplab runs.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent


def sweeplab_command() -> list[str]:
    if os.environ.get("SWEEPLAB"):
        return shlex.split(os.environ["SWEEPLAB"])
    return [sys.executable, "-m", "sweeplab"]


def test_smoke_sweep_passes(tmp_path: Path) -> None:
    command = [*sweeplab_command(), "sweep", "sweeps/tpe_asha.yaml", "--smoke", "--quiet",
               "--store", str(tmp_path / "store")]
    done = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, f"{shlex.join(command)} failed:\n{done.stdout}\n{done.stderr}"
