"""Every example runs, in smoke size, through the real CLI with a temporary store (examples are tests).

Each `examples/<name>/sweep*.yaml` is run with `sweeplab sweep SPEC --smoke`: two tiny trials on the CPU (one for
a multi-process `*_ddp` spec).
A new example is picked up by itself; the list below only guards against one silently disappearing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KNOWN = {"quadratic", "xgboost_diabetes", "cli_program", "torch_digits", "wandb_sklearn"}
KNOWN |= {"lightning_digits", "transformers_digits", "keras_digits"}   # the framework callbacks
NEEDS = {"xgboost_diabetes": ["xgboost", "sklearn"], "torch_digits": ["torch", "sklearn"],
         "wandb_sklearn": ["wandb", "sklearn"]}
NEEDS |= {"lightning_digits": ["lightning", "sklearn"], "transformers_digits": ["transformers", "sklearn"],
          "keras_digits": ["keras", "torch", "sklearn"]}
SPECS = sorted(p for p in EXAMPLES.glob("*/sweep*.yaml"))
# run in smoke size by a dedicated test below, which checks more of its result: not run twice
DEDICATED = {EXAMPLES / "torch_digits" / "sweep_multiobjective.yaml"}


def test_every_known_example_has_a_sweep_spec():
    assert KNOWN <= {p.parent.name for p in SPECS}


def run_cli(tmp: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    # WANDB_DIR: wandb keeps W&B examples' run files there rather than in ./wandb beside the example
    env = dict(os.environ, SWEEPLAB_STORE=str(tmp / "store"), COLUMNS="200", WANDB_DIR=str(tmp))
    return subprocess.run([sys.executable, "-m", "sweeplab", *args], check=False, cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=timeout)


SMOKE = [p for p in SPECS if p not in DEDICATED]


@pytest.mark.parametrize("spec", SMOKE, ids=[f"{p.parent.name}/{p.stem}" for p in SMOKE])
def test_example_runs_in_smoke_mode(spec: Path, tmp_path: Path):
    for module in NEEDS.get(spec.parent.name, []):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{spec.parent.name} needs {module}")
    # a multi-process (DDP) example's trial starts a process per rank: one trial shows it runs
    trials = ["--trials", "1"] if spec.stem.endswith("_ddp") else []
    cp = run_cli(tmp_path, "sweep", str(spec), "--smoke", *trials, "--name", "smoke", "-q")
    assert cp.returncode == 0, f"exit {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    status = run_cli(tmp_path, "status", "smoke", "--json")
    assert status.returncode == 0, status.stderr
    st = json.loads(status.stdout)
    metric = st["sweep"]["metric"]
    assert st["sweep"]["state"] == "finished"
    assert len(st["trials"]) == (1 if trials else 2), st["trials"]
    for t in st["trials"]:
        # a smoke trial may be cut short or stopped by a rule, but it must run and report without failing
        assert t["state"] in ("completed", "pruned", "stopped_by_rule", "stopped"), t
        assert metric in (t.get("metrics") or {}), t
    assert any(t["state"] == "completed" and t["value"] is not None for t in st["trials"]), st["trials"]


def test_torch_digits_multiobjective_smoke_prints_a_feasible_front(tmp_path: Path):
    """Accuracy vs parameter count with a size constraint: the smoke sweep's `best` is its Pareto front."""
    for module in ("torch", "sklearn"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module}")
    spec = EXAMPLES / "torch_digits" / "sweep_multiobjective.yaml"
    cp = run_cli(tmp_path, "sweep", str(spec), "--smoke", "--name", "mo", "-q")
    assert cp.returncode == 0, f"exit {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    st = json.loads(run_cli(tmp_path, "status", "mo", "--json").stdout)
    assert [o["name"] for o in st["sweep"]["objectives"]] == ["val_acc", "params"]
    for t in st["trials"]:
        if t["state"] == "completed":
            assert t["feasible"] is (t["values"]["params"] <= 20000), t
    front = json.loads(run_cli(tmp_path, "best", "mo", "--json").stdout)
    assert isinstance(front, list)
    done = {t["number"] for t in st["trials"] if t["state"] == "completed" and t["feasible"]}
    assert {f["trial"] for f in front} <= done and (front or not done)
    for f in front:
        assert set(f["values"]) == {"val_acc", "params"} and f["values"]["params"] <= 20000


@pytest.mark.ray
def test_torch_digits_ddp_runs_unchanged_on_the_ray_backend(tmp_path: Path):
    """The same example, 2 DDP processes per trial, on a local Ray cluster (ranks in a placement group)."""
    for module in ("torch", "sklearn", "ray"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module}")
    spec = EXAMPLES / "torch_digits" / "sweep_ddp.yaml"
    cp = run_cli(tmp_path, "sweep", str(spec), "--backend", "ray", "--trials", "1", "--name", "rayddp", "-q")
    assert cp.returncode == 0, f"exit {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    st = json.loads(run_cli(tmp_path, "status", "rayddp", "--json").stdout)
    (t,) = st["trials"]
    assert t["state"] == "completed" and t["value"] is not None and 0 < t["metrics"]["val_acc"] <= 1
    logs = [p.name for p in (tmp_path / "store" / "logs" / "rayddp").iterdir()]
    assert any("rank1" in name for name in logs), logs   # the second rank was a process of its own


def test_torch_digits_conditional_trials_get_only_their_choices_parameters(tmp_path: Path):
    """sweep_conditional.yaml: each trial holds the parameters of its optimizer and model family only,
    and trains with them (one epoch each: the example's own config, overridden)."""
    for module in ("torch", "sklearn"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module}")
    spec = EXAMPLES / "torch_digits" / "sweep_conditional.yaml"
    cp = run_cli(tmp_path, "sweep", str(spec), "--trials", "6", "--name", "cond", "-q", "epochs=1")
    assert cp.returncode == 0, f"exit {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    st = json.loads(run_cli(tmp_path, "status", "cond", "--json").stdout)
    assert len(st["trials"]) == 6
    own = {"sgd": {"momentum", "nesterov"}, "adam": {"beta1", "beta2"},
           "mlp": {"model.hidden", "model.layers", "model.activation"}, "cnn": {"model.channels", "model.kernel"}}
    for t in st["trials"]:
        p = t["params"]
        assert set(p) == {"lr", "optimizer", "model.family"} | own[p["optimizer"]] | own[p["model.family"]], p
        assert t["state"] in ("completed", "pruned"), t
    assert {t["params"]["model.family"] for t in st["trials"]} == {"mlp", "cnn"}
