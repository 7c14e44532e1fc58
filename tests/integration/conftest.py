from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


class CLI:
    """Runs the real `sweeplab` command in a subprocess against a temporary store."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.store = tmp / "store"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SWEEPLAB_STORE"] = str(self.store)
        env["COLUMNS"] = "200"
        return env

    def __call__(self, *args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
        cp = subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=self.tmp, env=self.env(),
                            capture_output=True, text=True, timeout=timeout)
        if check and cp.returncode != 0:
            raise AssertionError(f"sweeplab {' '.join(args)} exited {cp.returncode}:\n{cp.stdout}\n{cp.stderr}")
        return cp

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "sweeplab", *args], cwd=self.tmp, env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    def spec(self, name: str, body: str) -> Path:
        p = self.tmp / f"{name}.yaml"
        p.write_text(body)
        return p

    def status(self, sweep: str) -> dict:
        cp = self(("status"), sweep, "--json", check=True)
        return json.loads(cp.stdout)


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    return CLI(tmp_path)
