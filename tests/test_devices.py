"""The GPUs a job hands its trials stay inside those its scheduler gave it (CUDA_VISIBLE_DEVICES), and a GPU
id is an ordinal among them, as `cuda:0` is the first visible device. No GPU here: the trials are command
programs that print the CUDA_VISIBLE_DEVICES they were given, which is all a backend decides."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeplab._devices import select_gpus, visible_gpus
from sweeplab.errors import UserError


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("", []), ("0,2", [0, 2]), (" 1 ", [1]), ("GPU-abc,GPU-def", ["GPU-abc", "GPU-def"]),
     ("1,-1,2", [1])],
)
def test_visible_gpus_follow_cuda_visible_devices(value, expected):
    assert visible_gpus(value) == expected


@pytest.mark.parametrize(("env", "count", "ids", "expected"), [
    ({}, 4, None, [0, 1, 2, 3]),                                      # nothing set: every device NVML counts
    ({}, None, None, []),                                             # no NVML, nothing set: no GPU known
    ({"CUDA_VISIBLE_DEVICES": "5,7"}, 8, None, [5, 7]),               # the scheduler's share only
    ({"CUDA_VISIBLE_DEVICES": "5,7"}, None, None, [5, 7]),            # ... even where NVML is not installed
    ({"CUDA_VISIBLE_DEVICES": ""}, 8, None, []),                      # hidden: none
    ({"CUDA_VISIBLE_DEVICES": "1,9,2"}, 4, None, [1]),                # CUDA stops at the first absent device
    ({"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}, 2, [1], ["GPU-b"]),     # UUIDs, by ordinal
    ({"CUDA_VISIBLE_DEVICES": "5,7"}, 8, [1, 0], [7, 5]),             # ordinals among the visible ones
    ({}, 4, [3, 1], [3, 1]),
    ({}, None, [12], [12]),                                           # nothing can tell: taken as given
], ids=["nvml", "nothing", "visible", "visible-no-nvml", "hidden", "past-machine", "uuids", "ordinals",
        "machine-ids", "unchecked"])
def test_the_gpus_handed_out_are_the_visible_ones(env, count, ids, expected):
    assert select_gpus(ids, environ=env, count=count) == expected


@pytest.mark.parametrize(("env", "count", "ids", "fragment"), [
    ({"CUDA_VISIBLE_DEVICES": "5,7"}, None, [2], "--gpus: GPU 2 is not visible: CUDA_VISIBLE_DEVICES='5,7' "
                                                 "leaves this job GPUs 0-1 here"),
    ({"CUDA_VISIBLE_DEVICES": ""}, 8, [0], "GPU 0 is not visible: CUDA_VISIBLE_DEVICES='' leaves this job no GPU"),
    ({}, 2, [0, 2], "--gpus: GPU 2 does not exist: this machine has GPUs 0-1; got '0,2'"),
], ids=["past-visible", "hidden", "past-machine"])
def test_a_gpu_id_the_job_cannot_see_is_refused_naming_why(env, count, ids, fragment):
    with pytest.raises(UserError, match="^--gpus: ") as info:
        select_gpus(ids, environ=env, count=count, key="--gpus", given=repr(",".join(map(str, ids))))
    assert fragment in str(info.value)


SPEC = """\
command: ["{python}", "-c", "import os; print(os.getenv('CUDA_VISIBLE_DEVICES')); print('@sweeplab {{\\"loss\\": 1}}')"]
method: grid
metric: {{name: loss, goal: minimize}}
resources: {{gpus: 1}}
parameters:
  x: {{values: [1, 2]}}
"""


def _sweep(tmp_path: Path, *args: str, visible: str) -> subprocess.CompletedProcess:
    (tmp_path / "s.yaml").write_text(SPEC.format(python=sys.executable))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(SWEEPLAB_STORE=str(tmp_path / "store"), CUDA_VISIBLE_DEVICES=visible)
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)
    return subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "s.yaml", "-q", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)


def _devices_seen(tmp_path: Path) -> list[str]:
    logs = sorted((tmp_path / "store" / "logs").rglob("*.log"))
    return sorted(next(line for line in log.read_text().splitlines() if not line.startswith("#")) for log in logs)


def test_a_sweep_under_a_schedulers_cuda_visible_devices_gives_its_trials_those_gpus(tmp_path):
    cp = _sweep(tmp_path, "--workers", "2", visible="5,7")
    assert cp.returncode == 0, cp.stderr
    assert _devices_seen(tmp_path) == ["5", "7"]   # not GPUs 0 and 1, which are some other job's


def test_gpu_ids_count_the_visible_devices(tmp_path):
    cp = _sweep(tmp_path, "--workers", "1", "--gpus", "1", visible="5,7")
    assert cp.returncode == 0, cp.stderr
    assert _devices_seen(tmp_path) == ["7", "7"]


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_a_gpu_id_past_the_visible_ones_is_refused_before_the_store(tmp_path, dry_run):
    cp = _sweep(tmp_path, "--gpus", "0,2", *(["--dry-run"] if dry_run else []), visible="5,7")
    assert cp.returncode == 2, (cp.stdout, cp.stderr)
    assert cp.stderr.strip() == ("error: --gpus: GPU 2 is not visible: CUDA_VISIBLE_DEVICES='5,7' leaves this job "
                                 "GPUs 0-1 here, and GPU ids count the visible ones (as cuda:0 is the first); "
                                 "got '0,2'")
    assert not (tmp_path / "store").exists()
