"""The Python API in a real Jupyter kernel (nbclient + ipykernel, the `notebook` extra): the progress line
renders and updates in the cell's output, a function from a module next to the notebook runs in worker
processes, and so does a function defined in a cell (shipped by value)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SRC = str(Path(__file__).resolve().parents[1] / "src")
pytestmark = pytest.mark.slow

CELLS = [
    "import sweeplab as sl\nfrom trials import quick",
    "spec = {'method': 'grid', 'metric': {'name': 'loss', 'goal': 'minimize'},\n"
    "        'parameters': {'x': {'values': [1.0, 2.0]}, 'steps': {'values': [2, 4]}}}\n"
    "sweep = sl.sweep(spec, fn=quick, store='st', workers=2, name='nb')",
    "import os\n"
    "def train(config, run):\n    return {'loss': config['x'] * 10, 'pid': os.getpid()}\n"
    "cell = sl.sweep(spec, fn=train, store='st', workers=2, name='cell', progress=False)\n"
    "pids = set(cell.trials()['metrics.pid'])\n"
    "print('cell best', cell.best['value'], len(pids) >= 1, os.getpid() not in pids)",
    "print(sweep.trials().shape, sweep.best['value'])",
]


def test_a_sweep_from_a_notebook_shows_progress_and_runs_cell_functions_in_workers(tmp_path, monkeypatch):
    shutil.copy(FIXTURES / "trials.py", tmp_path / "trials.py")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, *sys.path[1:]]))   # the kernel sees this sweeplab
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    shown = [o for o in nb.cells[1].outputs if o.get("output_type") == "display_data"]
    assert len(shown) == 1                                           # one line, updated in place
    text = shown[0]["data"]["text/plain"]
    assert text.startswith("nb: 4 done (0 running) | best 0.25 (trial"), text   # the last update
    ran = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert ran.strip() == "cell best 10.0 True True", ran         # in worker processes, not the kernel
    assert "".join(o.get("text", "") for o in nb.cells[3].outputs).startswith("(4, ")
