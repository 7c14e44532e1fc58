"""A metric of -0.0 keeps its sign through the store: `best --json`, the CSV export and the dashboard's API show
-0.0 as the trial reported it. The store's REAL columns wrote -0.0 as the integer 0 (SQLite stores a whole
REAL as an integer), so every reader got 0."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sweeplab.dashboard import create_app
from sweeplab.store import Store
from sweeplab.store import queries as q
from tests.dashboard.conftest import make_client

TRAIN = """
def train(config, run):
    run.log({"loss": -0.0, "other": 1.0}, step=0)
    return {"loss": -0.0}
"""
SPEC = {"name": "z", "function": "train.py:train", "method": "grid", "metric": {"name": "loss", "goal": "minimize"},
        "parameters": {"x": {"values": [1]}}, "preload": False}


def _negative_zero(v: Any) -> bool:
    return isinstance(v, float) and v == 0 and math.copysign(1.0, v) < 0


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SWEEPLAB_STORE=str(root / "store"))
    return subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("negzero")
    (root / "train.py").write_text(TRAIN)
    (root / "sweep.yaml").write_text(json.dumps(SPEC))
    cp = _cli(root, "sweep", "sweep.yaml")
    assert cp.returncode == 0, (cp.stdout, cp.stderr)
    return root


def test_a_metric_of_negative_zero_keeps_its_sign_in_queries_export_and_dashboard(swept: Path) -> None:
    cp = _cli(swept, "best", "z", "--json")
    assert cp.returncode == 0, cp.stderr
    assert _negative_zero(json.loads(cp.stdout)["value"]), cp.stdout

    st = Store.open(swept / "store", readonly=True)
    try:
        assert _negative_zero(q.best_trial(st, "z")["value"])   # type: ignore[index]
        points = q.metric_history(st, "z")[0]["loss"]
        assert [p[1] for p in points] == [0.0] and _negative_zero(points[0][1]), points
    finally:
        st.close()

    cp = _cli(swept, "export", "z", "-o", "z.csv")
    assert cp.returncode == 0, cp.stderr
    row = next(csv.DictReader((swept / "z.csv").open()))
    assert [v for k, v in row.items() if "loss" in k] and all(v == "-0.0" for k, v in row.items() if "loss" in k), row

    with make_client(create_app(swept / "store")) as c:
        trials = c.get("/api/sweeps/z/trials").json()
        detail = c.get("/api/sweeps/z/trials/0").json()
        curve = c.get("/api/sweeps/z/curves?key=loss&trials=0").json()
    assert _negative_zero(trials["value"][0]) and _negative_zero(trials["sweep"]["best"]), trials
    assert _negative_zero(detail["value"]), detail["value"]
    assert _negative_zero(curve["trials"][0]["values"][0]), curve
