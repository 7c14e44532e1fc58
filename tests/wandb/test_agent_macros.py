"""Command macros pass what W&B's agent passes, byte for byte.

The oracle is the real client's own code: wandb/sdk/launch/sweeps/utils.py, create_sweep_command_args,
fed the arguments W&B's controller sends (one per top-level parameter, nested ones as dicts)."""

from __future__ import annotations

import json
import os
import stat

import pytest
import yaml

from sweeplab.errors import SpecError
from sweeplab.spec import args_json, build_command, parse_spec, resolve_interpreter, wandb_args

utils = pytest.importorskip("wandb.sdk.launch.sweeps.utils", reason="pip install 'sweeplab[wandb]'")

PARAMETERS = {
    "lr": {"values": [0.001]},
    "optimizer": {"parameters": {"lr": {"value": 0.001}, "nadam": {"parameters": {"beta": {"value": 0.9}}}}},
    "model.hidden": {"value": 64},          # a dotted name written flat: one key for W&B
    "layers": {"value": ["a", "b"]},
    "flag": {"value": True},
    "off": {"value": False},
    "nothing": {"value": None},
    "name": {"value": "a b"},
}
FLAT = {"lr": 0.001, "optimizer.lr": 0.001, "optimizer.nadam.beta": 0.9, "model.hidden": 64,
        "layers": ["a", "b"], "flag": True, "off": False, "nothing": None, "name": "a b"}
WANDB_ARGS = {"lr": 0.001, "optimizer": {"lr": 0.001, "nadam": {"beta": 0.9}}, "model.hidden": 64,
              "layers": ["a", "b"], "flag": True, "off": False, "nothing": None, "name": "a b"}


def _spec(command: list[str]):
    return parse_spec({"method": "grid", "program": "train.py", "parameters": PARAMETERS, "command": command},
                      file="sweep.yaml")


def _sorted(args: dict) -> dict:
    """A run's parameters in the order W&B's controller sends them to the agent: sorted by name at every
    level (wandb/sweeps params.py, HyperParameterSet.from_config walks `sorted(d.items())`; W&B's agent
    logs them in that order, wandb/wandb#4725)."""
    return {k: _sorted(v) if isinstance(v, dict) else v for k, v in sorted(args.items())}


def _wandb(name: str, args: dict | None = None) -> list[str]:
    sent = _sorted(WANDB_ARGS if args is None else args)
    return utils.create_sweep_command_args({"args": {k: {"value": v} for k, v in sent.items()}})[name]


def test_parameters_are_grouped_as_wandbs_controller_sends_them() -> None:
    assert wandb_args(FLAT, PARAMETERS) == WANDB_ARGS


@pytest.mark.parametrize("macro", ["args", "args_no_equals", "args_no_hyphens", "args_no_boolean_flags",
                                   "args_append_hydra", "args_override_hydra", "args_json"])
def test_each_list_macro_matches_wandbs_agent(macro: str) -> None:
    argv = build_command(_spec([f"${{{macro}}}"]), FLAT, interpreter="py", args_json_file="p.json")
    assert argv == _wandb(macro)


def test_nested_lists_booleans_and_none_use_pythons_form() -> None:
    argv = build_command(_spec(["${args}"]), FLAT, interpreter="py", args_json_file="p.json")
    assert "--optimizer={'lr': 0.001, 'nadam': {'beta': 0.9}}" in argv
    assert "--layers=['a', 'b']" in argv and "--flag=True" in argv and "--nothing=None" in argv
    assert "--model.hidden=64" in argv


# Public sweep files list their parameters in any order (`lr` before `batch_size`); W&B's agent receives them
# sorted by name and passes them so. sweeplab used to pass them in the file's order.
UNSORTED = {"lr": {"values": [0.01]}, "batch_size": {"value": 32}, "Dropout": {"value": 0.1},
            "optimizer": {"parameters": {"momentum": {"value": 0.9}, "beta": {"value": 0.5}}}, "epochs": {"value": 2}}
UNSORTED_FLAT = {"lr": 0.01, "batch_size": 32, "Dropout": 0.1, "optimizer.momentum": 0.9, "optimizer.beta": 0.5,
                 "epochs": 2}


def test_arguments_come_in_the_order_wandbs_controller_sends_them(tmp_path) -> None:
    spec = parse_spec({"method": "grid", "program": "train.py", "parameters": UNSORTED,
                       "command": ["${args}", "${args_no_hyphens}", "${args_json}"]}, file="sweep.yaml")
    argv = build_command(spec, UNSORTED_FLAT, interpreter="py", args_json_file="p.json")
    values = {"lr": 0.01, "batch_size": 32, "Dropout": 0.1, "optimizer": {"momentum": 0.9, "beta": 0.5}, "epochs": 2}
    assert argv == _wandb("args", values) + _wandb("args_no_hyphens", values) + _wandb("args_json", values)
    assert argv[:5] == ["--Dropout=0.1", "--batch_size=32", "--epochs=2", "--lr=0.01",
                        "--optimizer={'beta': 0.5, 'momentum': 0.9}"]
    assert list(json.loads(argv[-1])) == ["Dropout", "batch_size", "epochs", "lr", "optimizer"]
    # the parameters file (wandb.config's order) is written in the same order, as W&B's agent writes it
    from sweeplab.wandb_compat import write_sweep_params
    write_sweep_params(tmp_path / "p.yaml", wandb_args(UNSORTED_FLAT, UNSORTED))
    written = yaml.safe_load((tmp_path / "p.yaml").read_text())
    assert list(written) == ["wandb_version", "Dropout", "batch_size", "epochs", "lr", "optimizer"]
    assert list(written["optimizer"]["value"]) == ["beta", "momentum"]


def test_args_json_file_holds_what_wandb_writes() -> None:
    assert args_json(FLAT, PARAMETERS) == _wandb("args_json")[0]
    assert json.loads(args_json(FLAT, PARAMETERS))["model.hidden"] == 64


def test_wandbs_nested_parameters_example_parses_its_arguments() -> None:
    # W&B's nested-parameters example reads --optimizer as one argument; sweeplab used to split it
    import argparse
    import ast

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float)
    parser.add_argument("--optimizer", type=ast.literal_eval)
    argv = build_command(_spec(["${args}"]), {"lr": 0.001, "optimizer.lr": 0.001, "optimizer.nadam.beta": 0.9},
                         interpreter="py", args_json_file="p.json")
    ns = parser.parse_args(argv)
    assert ns.optimizer == {"lr": 0.001, "nadam": {"beta": 0.9}}


def test_interpreter_is_python_on_path_as_wandbs_agent(tmp_path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    found, why = resolve_interpreter({"PATH": f"{tmp_path}{os.pathsep}/usr/bin"})
    assert found == str(fake) and "PATH" in why


def test_interpreter_falls_back_when_no_python_is_on_path(tmp_path) -> None:
    found, why = resolve_interpreter({"PATH": str(tmp_path)})
    assert found and "own interpreter" in why


# Public sweep files use ${...} that are not W&B's macros: Hydra's interpolations inside an item, and whole
# items such as ${project}. W&B's agent (wandb_agent.py, Agent._command_run) passes the first as they are and
# drops the second; sweeplab used to reject both files with "unknown macro".
HYDRA_COMMAND = ["${env}", "python", "-m", "scripts.train", "+experiment=blue_v5", "${args_no_hyphens}",
                 "hydra.run.dir=runs/${run_name}_sweep/${now:%Y%m%d_%H%M%S}_${oc.env:WANDB_RUN_ID}"]


def _agent_argv(command: list[str], sweep_vars: dict[str, list[str]]) -> list[str]:
    """W&B's agent's expansion loop, as wandb_agent.py writes it (its sweep_vars come from the oracle)."""
    argv: list[str] = []
    for c in command:
        if c.startswith("${") and c.endswith("}"):
            argv += sweep_vars.get(c[2:-1]) or []
        else:
            argv.append(c)
    return argv


def test_interpolations_inside_an_item_pass_as_wandbs_agent_passes_them() -> None:
    spec = parse_spec({"method": "grid", "parameters": PARAMETERS, "command": HYDRA_COMMAND}, file="sweep.yaml")
    assert spec.warnings == ()
    argv = build_command(spec, FLAT, interpreter="py", args_json_file="p.json")
    sweep_vars = {"env": ["/usr/bin/env"], "args_no_hyphens": _wandb("args_no_hyphens")}
    assert argv == _agent_argv(HYDRA_COMMAND, sweep_vars)
    assert argv[-1] == HYDRA_COMMAND[-1]


def test_an_item_that_is_an_unknown_macro_is_dropped_with_a_warning() -> None:
    command = ["${ENVIRONMENT_VARIABLE}", "${interpreter}", "StrategyTransfer.py", "${project}", "${args}"]
    spec = parse_spec({"method": "grid", "parameters": PARAMETERS, "command": command}, file="sweep.yaml")
    assert len(spec.warnings) == 2
    assert spec.warnings[0].startswith("sweep.yaml: command[0]: unknown macro ${ENVIRONMENT_VARIABLE}: "
                                       "W&B's agent drops this item")
    assert "command[3]: unknown macro ${project}" in spec.warnings[1]
    argv = build_command(spec, FLAT, interpreter="py", args_json_file="p.json")
    assert argv == _agent_argv(command, {"interpreter": ["py"], "args": _wandb("args")})
    assert argv[:2] == ["py", "StrategyTransfer.py"]
    with pytest.raises(SpecError, match=r"command\[0\]: unknown macro \$\{ENVIRONMENT_VARIABLE\}"):
        parse_spec({"method": "grid", "parameters": PARAMETERS, "command": command}, file="sweep.yaml",
                   strict=True)


def _go_json_round_trip(value):
    """What W&B's server does to a run's parameters before its agent gets them: it keeps them as JSON in Go,
    whose encoder writes a whole-number float64 below 1e21 without a fraction (`4.0` -> `4`), so the agent's
    JSON reader makes it an int (wandb/wandb#3555, wandb/wandb#2337, wandb/sweeps#109: "3e6 ... becomes an
    int when it becomes part of the run config")."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 1e21 else value
    if isinstance(value, dict):
        return {k: _go_json_round_trip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_go_json_round_trip(v) for v in value]
    return value


def test_whole_number_floats_reach_the_program_as_wandbs_server_sends_them(tmp_path) -> None:
    # `q_uniform` without q (q: 1.0) draws 3.0: W&B's agent passes --layers=3, which argparse's type=int reads;
    # sweeplab passed --layers=3.0 ("invalid int value: '3.0'"), and wandb.config.layers was a float
    parameters = {"layers": {"distribution": "q_uniform", "min": 1, "max": 8},
                  "opt": {"parameters": {"lr": {"value": 0.5}, "warm": {"value": 2.0}}},
                  "sizes": {"value": [4.0, 0.25]}, "big": {"value": 1e21}, "neg": {"value": -0.0}}
    flat = {"layers": 3.0, "opt.lr": 0.5, "opt.warm": 2.0, "sizes": [4.0, 0.25], "big": 1e21, "neg": -0.0}
    spec = parse_spec({"method": "random", "program": "train.py", "parameters": parameters,
                       "command": ["${args}", "${args_json}"]}, file="sweep.yaml")
    served = _go_json_round_trip(wandb_args(flat, parameters))
    assert json.dumps(wandb_args(flat, parameters)) == json.dumps(served)   # 3.0 == 3, but not in JSON
    assert [type(v) for v in served.values()] == [float, int, int, dict, list]   # big, layers, neg, opt, sizes
    argv = build_command(spec, flat, interpreter="py", args_json_file="p.json")
    assert argv == _wandb("args", served) + _wandb("args_json", served)
    assert "--layers=3" in argv and "--big=1e+21" in argv
    from sweeplab.wandb_compat import write_sweep_params

    write_sweep_params(tmp_path / "p.yaml", wandb_args(flat, parameters))
    read = yaml.safe_load((tmp_path / "p.yaml").read_text())
    assert read["layers"] == {"value": 3} and isinstance(read["layers"]["value"], int)


def test_unset_envvar_is_refused_before_the_store_exists(tmp_path):
    """`${envvar:NAME}` of a variable the sweep's environment lacks: `--dry-run` said "valid" and the real run
    created the sweep in the store, then stopped with a driver error that named no file. The driver builds
    every trial's command in its own environment, so this is known before anything is written."""
    import subprocess
    import sys

    spec = tmp_path / "sweep.yaml"
    spec.write_text("program: train.py\nmethod: grid\nparameters: {lr: {values: [0.1]}}\n"
                    "command:\n- ${env}\n- ${interpreter}\n- ${program}\n"
                    "- --data=${envvar:SWEEPLAB_SURELY_UNSET}\n- ${args}\n")
    (tmp_path / "train.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "SWEEPLAB_SURELY_UNSET"}
    env["SWEEPLAB_STORE"] = str(tmp_path / "store")
    for extra in (["--dry-run"], []):
        cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", str(spec), *extra], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
        assert cp.returncode == 2, (extra, cp.stdout, cp.stderr)
        assert cp.stderr.splitlines() == [
            f"error: {spec}: command[3]: environment variable SWEEPLAB_SURELY_UNSET is not set; "
            "got '--data=${envvar:SWEEPLAB_SURELY_UNSET}'; expected a variable set in the environment "
            "where the sweep runs (export SWEEPLAB_SURELY_UNSET=...)"], extra
        assert not (tmp_path / "store").exists()


def test_missing_program_file_is_refused_before_the_store_exists(tmp_path):
    """`program: nothere.py` run as a script (`${interpreter} ${program}`, W&B's default command): `--dry-run`
    said "valid" and the real run wrote the sweep, then every trial failed with python's "can't open file".
    A module (`-m ${program}`) or an executable on PATH is not a file to look for."""
    import subprocess
    import sys

    env = {**os.environ, "SWEEPLAB_STORE": str(tmp_path / "store")}

    def sweep(text: str, *extra: str) -> subprocess.CompletedProcess:
        (tmp_path / "sweep.yaml").write_text("method: grid\nparameters: {lr: {values: [0.1]}}\n" + text)
        return subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", *extra], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)

    for extra in (["--dry-run"], []):
        cp = sweep("program: nothere.py\n", *extra)
        assert cp.returncode == 2, (extra, cp.stdout, cp.stderr)
        assert cp.stderr.splitlines() == [
            "error: sweep.yaml: program: program file not found; got 'nothere.py'; expected a file in the "
            f"working directory ({tmp_path}) or beside the spec file ({tmp_path})"], extra
        assert not (tmp_path / "store").exists()
    cp = sweep("program: nothere.py\ncommand: ['${env}', python3.11, '${program}', '${args}']\n", "--dry-run")
    assert cp.returncode == 2 and "program file not found" in cp.stderr, cp.stderr
    for command in ("['${env}', python, -m, '${program}', '${args}']", "['${env}', '${program}', '${args}']"):
        cp = sweep(f"program: nothere\ncommand: {command}\n", "--dry-run")
        assert cp.returncode == 0, (command, cp.stderr)
