"""What public W&B sweep files do that W&B runs and sweeplab used to refuse or misread.

Each case is a minimal spec written for the test, in the style of the public files where it was found;
W&B's behaviour is that of its sweeps library (config/schema.json, schema_violations_from_proposed_config:
a schema violation is a warning `wandb sweep` prints, and the sweep runs) and of its agent
(wandb_agent.py, Agent._command_run: every command item goes through str())."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeplab.errors import SpecError
from sweeplab.spec import build_command, parse_spec

BASE = {"method": "grid", "program": "train.py", "parameters": {"seed": {"values": [0, 1]}}}


def _sweeplab(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The real `sweeplab` command in `cwd`, this checkout's sweeplab first on its path."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def _spec(strict: bool = False, **changes):
    return parse_spec({**BASE, **changes}, file="sweep.yaml", strict=strict)


# -- parameter names W&B's schema does not match: W&B warns and hands them over as they are --------------

HYDRA_NAMES = {"+experiment": {"values": ["a", "b"]}, "model/encoder": {"value": "resnet"},
               "2nd_stage": {"value": 3}}


def test_parameter_names_wandb_only_warns_about_run_with_a_warning() -> None:
    spec = _spec(parameters=HYDRA_NAMES, command=["${env}", "python", "${program}", "${args_no_hyphens}"])
    assert list(spec.space.params) == ["+experiment", "model/encoder", "2nd_stage"]
    assert len(spec.warnings) == 3
    assert spec.warnings[0].startswith("sweep.yaml: parameters.+experiment: parameter name W&B's schema does not "
                                       "match; got '+experiment'")
    argv = build_command(spec, {"+experiment": "a", "model/encoder": "resnet", "2nd_stage": 3},
                         interpreter="py", args_json_file="p.json")
    assert argv[-3:] == ["+experiment=a", "2nd_stage=3", "model/encoder=resnet"]   # as W&B's agent passes them (sorted)
    with pytest.raises(SpecError, match=r"parameters\.\+experiment: parameter name W&B's schema does not match"):
        _spec(strict=True, parameters=HYDRA_NAMES)


def test_a_nested_odd_name_is_warned_about_at_its_key_path() -> None:
    spec = _spec(parameters={"model": {"parameters": {"enc/depth": {"value": 2}}}})
    assert spec.warnings[0].startswith("sweep.yaml: parameters.model.parameters.enc/depth: ")


def test_a_name_that_is_not_a_string_is_still_an_error() -> None:
    with pytest.raises(SpecError, match=r"parameters\.1: invalid parameter name"):
        _spec(parameters={1: {"value": 1}})


# -- log_uniform's min/max are exponents: W&B warns on each, and a lr of 1e-4..1e-3 samples about 1.0 ----------


@pytest.mark.parametrize(("kind", "drawn"), [("log_uniform", "from 1.0001 to 1.001"),
                                             ("q_log_uniform", "from 1.0001 to 1.001"),
                                             ("inv_log_uniform", "from 0.999 to 0.9999")])
def test_exponent_log_distributions_are_warned_about_as_wandb_does(kind: str, drawn: str) -> None:
    spec = _spec(method="random", parameters={"lr": {"distribution": kind, "min": 0.0001, "max": 0.001}})
    warning, *more = spec.warnings
    # q_log_uniform's default q (1) is also wider than what it draws: every value is 1.0, warned about too
    assert [w.split(": ")[1] for w in more] == (["parameters.lr.q"] if kind.startswith("q_") else [])
    assert warning.startswith(f"sweep.yaml: parameters.lr.distribution: {kind} takes min and max as natural-log "
                              "exponents")
    assert f"{kind}_values to give min and max as the values" in warning and drawn in warning   # about 1.0
    with pytest.raises(SpecError, match=r"parameters\.lr\.distribution: .*exponents"):
        _spec(strict=True, method="random", parameters={"lr": {"distribution": kind, "min": -9.2, "max": -2.3}})


def test_the_warning_names_values_too_large_for_a_float() -> None:
    spec = _spec(method="random", parameters={"x": {"distribution": "log_uniform", "min": 0, "max": 1000}})
    assert "draws values from 1 to e^1000" in spec.warnings[0]


def test_log_uniform_values_is_not_warned_about() -> None:
    spec = _spec(method="random", parameters={"lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-3}})
    assert spec.warnings == ()


# -- command items that are not strings: W&B's agent passes str(item) ----------------------------------------


def test_a_boolean_command_item_passes_as_wandbs_agent_passes_it() -> None:
    spec = _spec(command=["${env}", "python", "${program}", "--amp", True, "--workers", 4, "${args}"])
    assert spec.warnings == ()
    argv = build_command(spec, {"seed": 0}, interpreter="py", args_json_file="p.json")
    assert argv[1:] == ["python", "train.py", "--amp", "True", "--workers", "4", "--seed=0"]


def test_a_null_or_mapping_command_item_passes_as_text_with_a_warning() -> None:
    spec = _spec(command=["python", "${program}", None, {"--lr": 3}, "${args}"])
    assert len(spec.warnings) == 2
    assert spec.warnings[0].startswith("sweep.yaml: command[2]: a command item that is not a string")
    argv = build_command(spec, {"seed": 0}, interpreter="py", args_json_file="p.json")
    assert argv == ["python", "train.py", "None", "{'--lr': 3}", "--seed=0"]
    with pytest.raises(SpecError, match=r"command\[2\]: a command item that is not a string"):
        _spec(strict=True, command=["python", "${program}", None])


# -- the "passes no parameters" warning only speaks of a program it could read ----------------------------------


def test_no_claim_about_a_program_that_cannot_be_read(tmp_path) -> None:
    spec = parse_spec({**BASE, "command": ["${env}", "python", "${program}", "cfg.py"]},
                      file=str(tmp_path / "sweep.yaml"))
    assert spec.warnings == ()   # train.py is not there: nothing is known about what it reads


# -- ${name} of a parameter inside a command item: W&B's agent does not substitute it -----------------------------


def test_a_parameter_written_as_a_macro_is_named_as_a_parameter_not_a_typo() -> None:
    params = {"aug_on": {"values": [True]}, "batch-size": {"values": [1, 2]}}
    command = ["${env}", "python", "train.py", "-b ${batch-size}", "--aug_on=${aug_on}", "--x=${now:%H}"]
    spec = _spec(parameters=params, command=command)
    assert len(spec.warnings) == 2   # one per parameter reference; Hydra's ${now:...} is no parameter
    for warning, name, i in zip(spec.warnings, ["batch-size", "aug_on"], [3, 4], strict=True):
        assert warning.startswith(f"sweep.yaml: command[{i}]: ${{{name}}} names a parameter, but W&B's agent "
                                  "does not put parameter values into command items")
        assert "did you mean" not in warning and "${args}" in warning
    argv = build_command(spec, {"aug_on": True, "batch-size": 1}, interpreter="py", args_json_file="p.json")
    assert argv[-3:] == ["-b ${batch-size}", "--aug_on=${aug_on}", "--x=${now:%H}"]   # passed as they are
    spec = _spec(parameters=params, command=["python", "train.py", "${aug_on}"])   # a whole item: dropped
    assert "names a parameter" in spec.warnings[0] and "W&B's agent drops this item" in spec.warnings[0]
    assert build_command(spec, {"aug_on": True, "batch-size": 1}, interpreter="py",
                         args_json_file="p.json") == ["python", "train.py"]


def test_the_program_checked_is_the_one_the_command_runs(tmp_path) -> None:
    # `program` names one script, the command runs another (without ${program}) that reads wandb.config
    (tmp_path / "offline.py").write_text("print('reads nothing')\n")
    (tmp_path / "train_md.py").write_text("import wandb\nrun = wandb.init()\nprint(wandb.config.lr)\n")
    raw = {**BASE, "program": "offline.py", "command": ["python", "train_md.py", "--mode", 1]}
    assert parse_spec(raw, file=str(tmp_path / "sweep.yaml")).warnings == ()
    (tmp_path / "train_md.py").write_text("print('reads nothing either')\n")
    (warning,) = parse_spec(raw, file=str(tmp_path / "sweep.yaml")).warnings
    assert "passes no parameters" in warning and "train_md.py does not read wandb.config" in warning


# -- a number where W&B's schema wants a string or an integer ------------------------------------------------------


def test_a_numeric_name_or_description_is_text_with_a_warning() -> None:
    spec = _spec(name=2024, description=42)
    assert spec.name == "2024" and spec.description == "42"
    assert [w.split(":")[1].strip() for w in spec.warnings] == ["name", "description"]
    with pytest.raises(SpecError, match=r"sweep\.yaml: name: .*2024"):
        _spec(strict=True, name=2024)


def test_run_cap_written_as_a_float_counts_as_wandb_counts_it() -> None:
    assert _spec(run_cap=10.0).budget.trials == 10   # jsonschema's integer takes 10.0; W&B runs it
    with pytest.raises(SpecError, match="run_cap: not an integer"):
        _spec(run_cap=10.5)


# -- min/max of mixed types without a distribution: W&B's client refuses the file ----------------------------------
# (wandb/apis/public/sweeps.py, _validate_config_and_fill_distribution: "Parameter lr is ambiguous, please specify
# bounds as both floats ... or ints", for `wandb sweep` and `wandb.sweep` alike, top-level parameters only);
# found in LegoSorter/NNUtils configs/sweeps/sweep.yaml (`fine_tuning_min_delta: {min: 0, max: 0.1}`)

def test_mixed_int_and_float_bounds_are_warned_about_as_wandb_refuses_them() -> None:
    spec = _spec(method="random", parameters={"delta": {"min": 0, "max": 0.1}, "lr": {"min": 0.0001, "max": 1}})
    assert [w.split(": ")[1] for w in spec.warnings] == ["parameters.delta", "parameters.lr"]
    assert "W&B refuses this file" in spec.warnings[0] and "uniform" in spec.warnings[0]
    assert spec.space.params["delta"].kind == "uniform"   # run as what the bounds say: a float range
    with pytest.raises(SpecError, match=r"sweep\.yaml: parameters\.delta: min and max mix an integer and a float"):
        _spec(strict=True, method="random", parameters={"delta": {"min": 0, "max": 0.1}})


def test_bounds_wandb_takes_are_not_warned_about() -> None:
    spec = _spec(method="random", parameters={
        "a": {"min": 0.0, "max": 0.1}, "b": {"min": 1, "max": 5},                    # both floats, both ints
        "c": {"distribution": "uniform", "min": 0, "max": 0.1},                     # a distribution given
        "opt": {"parameters": {"lr": {"min": 0, "max": 0.1}}}})                     # nested: W&B's client skips it
    assert spec.warnings == ()


def test_the_program_checked_is_found_where_the_sweep_runs_it(tmp_path, monkeypatch) -> None:
    # configs/sweeps/sweep.yaml run from the project's root (LegoSorter/NNUtils, ktroyan/compgen-reasoning lay
    # their sweeps out so): W&B's agent, and sweeplab, run `program` from the working directory
    (tmp_path / "configs" / "sweeps").mkdir(parents=True)
    (tmp_path / "train.py").write_text("print('reads nothing')\n")
    monkeypatch.chdir(tmp_path)
    raw = {**BASE, "command": ["${env}", "python", "${program}", "--fast"]}
    (warning,) = parse_spec(raw, file="configs/sweeps/sweep.yaml", base_dir=tmp_path / "configs" / "sweeps").warnings
    assert "passes no parameters" in warning and "train.py does not read wandb.config" in warning


# -- a parameter and a dotted name under it (`model` and `model.dropout`, Hydra overrides) -------------------------


def test_a_parameter_and_a_dotted_name_under_it_run_as_wandb_runs_them(tmp_path) -> None:
    # mohamedkhayat/modern-training-pipeline conf/sweep.yaml sweeps `model: {values: [resnet50, ...]}` and
    # `model.dropout` with ${args_no_hyphens} (Hydra: model=resnet50 model.dropout=0.3); W&B runs it, each a
    # key of its own. sweeplab failed before the first trial: "'model' is both a value and a group"
    import json

    (tmp_path / "main.py").write_text(
        "import json, sys\nargs = dict(a.split('=', 1) for a in sys.argv[1:])\n"
        "print('@sweeplab ' + json.dumps({'f1': float(args['model.dropout'])}))\n")
    (tmp_path / "sweep.yaml").write_text(
        "program: main.py\nmethod: grid\nmetric: {name: f1, goal: maximize}\n"
        "command: ['${env}', '${interpreter}', '${program}', '${args_no_hyphens}']\n"
        "parameters:\n  model: {values: [resnet50, effnet]}\n  model.dropout: {values: [0.25]}\n")
    proc = _sweeplab(tmp_path, "sweep", "sweep.yaml", "--store", "store", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import sqlite3

    rows = sqlite3.connect(tmp_path / "store" / "store.db").execute(
        "SELECT state, value, config FROM trials ORDER BY number").fetchall()
    assert [(r[0], r[1]) for r in rows] == [("completed", 0.25), ("completed", 0.25)]
    assert json.loads(rows[0][2]) == {"model": "resnet50", "model.dropout": 0.25}   # one key each, as in W&B


def test_an_empty_string_and_a_number_among_command_items_pass_as_wandbs_agent_passes_them() -> None:
    """An RL project's sweep passes `--other_algorithms ""` and `--n_envs 4` (an int item) before `${args}`:
    W&B's agent keeps the empty argument and passes str(4)."""
    spec = _spec(command=["${env}", "${interpreter}", "${program}", "--other_algorithms", "", "--n_envs", 4,
                          "--use_wandb", "true", "${args}"])
    argv = build_command(spec, {"seed": 0}, interpreter="py", args_json_file="p.json")
    assert argv[1:] == ["py", "train.py", "--other_algorithms", "", "--n_envs", "4", "--use_wandb", "true",
                        "--seed=0"]


# -- hyperband with min_iter, max_iter and eta but no s --------------------------------------------------------------
# Kang-ChangWoo/audio-depth-estimation sweep_config.yaml: `{type: hyperband, min_iter: 20, eta: 2, max_iter: 60}`.
# W&B's schema takes it (hyperband_stopping: anyOf [max_iter with s] or [min_iter]) and `wandb sweep` creates the
# sweep; sweeplab refused it, exit 2: "hyperband with max_iter needs s"

def test_hyperband_max_iter_without_s_beside_min_iter_runs_by_min_iter_with_a_warning() -> None:
    et = {"type": "hyperband", "min_iter": 20, "eta": 2, "max_iter": 60}
    spec = _spec(method="random", metric={"name": "loss", "goal": "minimize"}, early_terminate=et)
    assert spec.early_terminate["min_iter"] == 20 and "max_iter" not in spec.early_terminate
    (warning,) = spec.warnings
    assert warning.startswith("sweep.yaml: early_terminate.max_iter: max_iter is not used without s; got 60")
    assert "min_iter" in warning
    with pytest.raises(SpecError, match=r"early_terminate\.max_iter: max_iter is not used without s"):
        _spec(strict=True, method="random", metric={"name": "loss"}, early_terminate=et)


def test_hyperband_max_iter_without_s_beside_min_iter_dry_runs(tmp_path) -> None:
    (tmp_path / "train.py").write_text("import wandb\nrun = wandb.init()\nwandb.log({'loss': wandb.config.lr})\n")
    (tmp_path / "sweep.yaml").write_text(
        "program: train.py\nmethod: random\nmetric: {name: loss, goal: minimize}\n"
        "parameters: {lr: {min: 0.1, max: 0.9}}\nrun_cap: 2\n"
        "early_terminate: {type: hyperband, min_iter: 20, eta: 2, max_iter: 60}\n")
    proc = _sweeplab(tmp_path, "sweep", "sweep.yaml", "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "early_terminate.max_iter: max_iter is not used without s" in proc.stderr
    assert "hyperband: bands at reports 20, 40, 80" in proc.stdout


# -- int_uniform bounds written as 1.0: W&B's schema (jsonschema's integer) takes an integral float ---------------
# and its sampler draws int(randint.ppf(x, min, max + 1)) (sweeps/params.py): ints; sweeplab refused the file

def test_int_uniform_bounds_written_as_integral_floats_draw_ints() -> None:
    spec = _spec(method="random", parameters={"layers": {"distribution": "int_uniform", "min": 1.0, "max": 10.0}})
    dist = spec.space.params["layers"]
    assert dist.kind == "int_uniform" and (dist.min, dist.max) == (1, 10)
    assert type(dist.min) is int and type(dist.max) is int
    with pytest.raises(SpecError, match=r"parameters\.layers\.min: min must be an integer; got 1\.5"):
        _spec(method="random", parameters={"layers": {"distribution": "int_uniform", "min": 1.5, "max": 10}})


# -- the sweep under a key of a larger config (`sweep: {method: ..., parameters: ...}`), handed to wandb.sweep by a
# script (2catycm/SSF sweep.yaml, AshwinSankar17/da6401_assignment1 sweep_config.yaml): W&B cannot read the file
# as a sweep either; the error said only "missing required key 'method'"

def test_a_sweep_under_a_key_is_named_in_the_error() -> None:
    raw = {"sweep": {"method": "bayes", "metric": {"name": "loss"}, "parameters": {"lr": {"values": [1]}}},
           "seed": 3}
    with pytest.raises(SpecError) as info:
        parse_spec(raw, file="sweep.yaml")
    message = str(info.value)
    assert message.startswith("sweep.yaml: method: missing required key 'method'")
    assert "the sweep is under 'sweep'" in message
    with pytest.raises(SpecError, match="the sweep is under 'sweep'"):   # not "unknown key 'sweep'"
        parse_spec(raw, file="sweep.yaml", strict=True)
    with pytest.raises(SpecError) as info:
        parse_spec({"seed": 3, "lr": {"values": [1]}}, file="sweep.yaml")
    assert "the sweep is under" not in str(info.value)


# -- int_uniform with min equal to max (a range pinned to one value): W&B's schema has no min < max and its
# sampler draws int(randint.ppf(x, 5, 6)) = 5 every time; sweeplab refused the file ("min must be less than max")

def test_int_uniform_pinned_to_one_value_runs_as_that_value() -> None:
    spec = _spec(method="bayes", metric={"name": "loss"},
                 parameters={"epochs": {"distribution": "int_uniform", "min": 5, "max": 5},
                             "lr": {"min": 0.1, "max": 0.2}})
    epochs = spec.space.params["epochs"]
    assert epochs.kind == "constant" and epochs.value == 5 and type(epochs.value) is int
    argv = build_command(_spec(parameters={"epochs": {"distribution": "int_uniform", "min": 5.0, "max": 5.0}},
                               command=["python", "${program}", "${args}"]),
                         {"epochs": 5}, interpreter="py", args_json_file="p.json")
    assert argv == ["python", "train.py", "--epochs=5"]
    for kind in ("uniform", "q_uniform", "log_uniform_values"):   # W&B draws nan from these: still refused
        with pytest.raises(SpecError, match=r"parameters\.x\.min: min must be less than max"):
            _spec(method="random", parameters={"x": {"distribution": kind, "min": 1, "max": 1}})
    with pytest.raises(SpecError, match=r"parameters\.x\.min: min must be less than max"):
        _spec(method="random", parameters={"x": {"distribution": "int_uniform", "min": 6, "max": 5}})
