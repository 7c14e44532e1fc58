"""A conditional spec end to end: the real CLI, worker processes and store. A trial's config (function
trials) and its arguments (command trials) hold exactly the active parameters, never an inactive one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TRIAL = '''
import json, sys, uuid
from pathlib import Path

ACTIVE = {"sgd": {"momentum", "nesterov"}, "adam": {"beta1"}, "rmsprop": set()}


def check(config):
    """Raise (the trial fails) unless the config has exactly the parameters active for its choices."""
    top = set(config) - {"lr", "optimizer", "model"}
    assert top == ACTIVE[config["optimizer"]], (config["optimizer"], sorted(top))
    model = dict(config["model"])
    expected = {"family"} | ({"layers"} if model["family"] == "mlp" else {"leaves"})
    if model.get("layers") == 2:
        expected.add("width2")
    assert set(model) == expected, model


def train(config, run):
    plain = json.loads(json.dumps(dict(config), default=lambda c: dict(c)))
    check(plain)
    (Path(__file__).parent / "configs" / f"{uuid.uuid4().hex}.json").write_text(json.dumps(plain))
    loss = plain["lr"] + (0.0 if plain["optimizer"] == "sgd" else 0.5)
    return {"loss": loss}


if __name__ == "__main__":   # a command trial: ${args_json}
    config = json.loads(sys.argv[1])
    check(config)
    print("ok", sorted(config))
'''

PARAMETERS = """
parameters:
  lr: {values: [0.01, 0.1]}
  optimizer:
    values: [adam, sgd, rmsprop]
    when:
      sgd:
        momentum: {values: [0.0, 0.9]}
        nesterov: {values: [true, false]}
      adam:
        beta1: {values: [0.9]}
  model:
    parameters:
      family:
        values: [mlp, tree]
        when:
          mlp:
            layers:
              values: [1, 2]
              when:
                2: {width2: {values: [8, 16]}}
          tree:
            leaves: {values: [4]}
"""
# lr 2 x optimizer (adam 1 + sgd 4 + rmsprop 1 = 6) x model (mlp 1 + 2 + tree 1 = 4)
GRID = 2 * 6 * 4


def _setup(cli, method: str, extra: str = "") -> Path:
    (cli.tmp / "trial.py").write_text(TRIAL)
    (cli.tmp / "configs").mkdir()
    body = (f"function: trial.py:train\nmethod: {method}\nseed: 0\nmetric: {{name: loss, goal: minimize}}\n"
            f"{extra}{PARAMETERS}")
    return cli.spec("conditional", body)


def _run(cli, spec: Path) -> dict:
    cli("sweep", str(spec), "--name", "c", "--workers", "2", "-q", check=True)
    return cli.status("c")


def test_a_conditional_grid_sweep_runs_each_valid_combination_once_with_only_active_keys(cli):
    status = _run(cli, _setup(cli, "grid"))
    trials = status["trials"]
    assert len(trials) == GRID
    assert all(t["state"] == "completed" for t in trials), [t for t in trials if t["state"] != "completed"]
    assert len({json.dumps(t["params"], sort_keys=True) for t in trials}) == GRID
    for t in trials:
        assert ("momentum" in t["params"]) == (t["params"]["optimizer"] == "sgd")
        assert ("model.width2" in t["params"]) == (t["params"].get("model.layers") == 2)
    configs = [json.loads(p.read_text()) for p in (cli.tmp / "configs").iterdir()]
    assert len(configs) == GRID
    assert not any("momentum" in c for c in configs if c["optimizer"] != "sgd")


def test_a_conditional_tpe_sweep_gives_its_trials_only_active_keys(cli):
    status = _run(cli, _setup(cli, "tpe", "budget: {trials: 14}\n"))
    trials = status["trials"]
    assert len(trials) == 14
    assert all(t["state"] == "completed" for t in trials), [t for t in trials if t["state"] != "completed"]
    assert {t["params"]["optimizer"] for t in trials} == {"adam", "sgd", "rmsprop"}


def test_a_command_trial_gets_only_active_parameters_in_its_arguments(cli):
    (cli.tmp / "trial.py").write_text(TRIAL)
    body = ("program: trial.py\ncommand: ['${env}', '${interpreter}', '${program}', '${args_json}']\nmethod: random\n"
            "seed: 0\nbudget: {trials: 8}\n" + PARAMETERS)
    spec = cli.spec("command", body)
    cli("sweep", str(spec), "--name", "c", "--workers", "2", "-q", check=True)
    trials = cli.status("c")["trials"]
    assert len(trials) == 8 and all(t["state"] == "completed" for t in trials), trials


@pytest.mark.parametrize("method", ["grid", "tpe"])
def test_a_conditional_sweep_resumes_from_a_history_with_absent_parameters(cli, method: str):
    """The stored trials lack the parameters inactive for them (and the stored spec is JSON, whose `when`
    keys are strings); resume rebuilds the searcher from them and goes on as an uninterrupted sweep would
    (one worker, so the order of results is fixed)."""
    total = GRID if method == "grid" else 20
    spec = _setup(cli, method, "budget: {trials: 10}\n")
    cli("sweep", str(spec), "--name", "c", "--workers", "1", "-q", check=True)
    cli("resume", "c", "--trials", str(total), "-q", check=True)
    cli("sweep", str(spec), "--name", "whole", "--workers", "1", "--trials", str(total), "-q", check=True)
    resumed, whole = cli.status("c")["trials"], cli.status("whole")["trials"]
    assert len(resumed) == total
    assert all(t["state"] == "completed" for t in resumed), [t for t in resumed if t["state"] != "completed"]
    ordered = [t["params"] for t in sorted(resumed, key=lambda t: t["number"])]
    expected = [t["params"] for t in sorted(whole, key=lambda t: t["number"])]
    if method == "grid":
        assert ordered == expected
        assert len({json.dumps(p, sort_keys=True) for p in ordered}) == GRID
    else:
        # the first trial asked after the replay has the same history as in the uninterrupted sweep (its
        # first model-based one: n_startup_trials is 10); later ones may see a different set of trials
        # still running when asked (the resumed driver asks while its workers start), as without conditions
        assert ordered[:11] == expected[:11]


def test_resume_refuses_a_spec_whose_conditions_differ(cli):
    """Moving a parameter to another branch changes the search space even if no distribution changed."""
    spec = _setup(cli, "grid", "budget: {trials: 3}\n")
    cli("sweep", str(spec), "--name", "c", "--workers", "1", "-q", check=True)
    moved = cli.spec("moved", spec.read_text().replace("      adam:\n        beta1", "      rmsprop:\n        beta1"))
    cp = cli("resume", "c", "--spec", str(moved), "--trials", "6", "-q")
    assert cp.returncode == 2, (cp.stdout, cp.stderr)
    assert "parameters.beta1: differs from sweep 'c'" in cp.stderr
    assert len(cli.status("c")["trials"]) == 3
