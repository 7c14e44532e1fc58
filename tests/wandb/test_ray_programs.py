"""W&B programs on the Ray backend (`--backend ray`, no address): a command program and a wandb.agent-style
function, each on a new local Ray cluster of its own even while another Ray cluster runs on the machine.

Ray's `ray.init()` with no address joins a Ray cluster it finds on the machine (the one last started, read
from its temp folder); `sweeplab sweep --backend ray` promises a new local cluster unless RAY_ADDRESS is set.
The other cluster here has no CPU, so a sweep that joined it could not place one trial."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("wandb", reason="pip install 'sweeplab[wandb]'")
pytest.importorskip("ray", reason="pip install 'sweeplab[ray]'")
pytestmark = [pytest.mark.slow, pytest.mark.ray]

PROJECTS = Path(__file__).parent / "projects"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def other_cluster():
    """Someone else's Ray cluster on this machine, started last (so Ray's auto-detection picks it)."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    yield c.address
    c.shutdown()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RAY_ADDRESS"))}
    nowhere = "http://127.0.0.1:9"
    env.update({"WANDB_BASE_URL": nowhere, "HTTP_PROXY": nowhere, "HTTPS_PROXY": nowhere,
                "http_proxy": nowhere, "https_proxy": nowhere, "NO_PROXY": "", "no_proxy": "",
                "WANDB_API_KEY": "",
                # ${interpreter} is `python` from PATH, as under W&B's agent: this test's Python
                "PATH": os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", ""))),
                "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)})
    return env


def _ray_sweep(project: str, tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    work = tmp_path / project
    shutil.copytree(PROJECTS / project, work)
    store = tmp_path / "store"
    proc = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(store), "-q",
                           "--backend", "ray", "--workers", "1", *extra], cwd=work, env=_env(),
                          capture_output=True, text=True, timeout=900)
    status = subprocess.run([sys.executable, "-m", "sweeplab", "status", project, "--json", "--store", str(store)],
                            cwd=work, env=_env(), capture_output=True, text=True, timeout=120)
    data = json.loads(status.stdout) if status.returncode == 0 else {}
    return proc, data


def test_a_wandb_command_program_runs_on_ray_beside_another_cluster(other_cluster, tmp_path: Path) -> None:
    proc, status = _ray_sweep("nested_vae", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep = status["sweep"]
    assert sweep["counts"]["completed"] == 2
    assert sweep["best"] == pytest.approx(0.6)   # define_metric(summary="max") of what the program logged


def test_a_wandb_function_program_runs_on_ray_beside_another_cluster(other_cluster, tmp_path: Path) -> None:
    proc, status = _ray_sweep("agent_function", tmp_path, "--function", "train.py:train")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep = status["sweep"]
    assert sweep["counts"]["completed"] == 2
    assert sweep["best"] == pytest.approx(0.25 / 3)
