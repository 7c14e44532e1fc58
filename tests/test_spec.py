"""The sweep spec: W&B files load unchanged, our keys validate, every error names file and key path."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from sweeplab.errors import SpecError
from sweeplab.spec import (
    DEFAULT_COMMAND,
    Budget,
    MetricSpec,
    Resources,
    SweepSpec,
    TrialPolicy,
    args_json,
    build_command,
    load_spec,
    parse_duration,
    parse_spec,
)
from sweeplab.types import Goal

SPECS = Path(__file__).parent / "fixtures" / "specs"
POSIX = os.name != "nt"


# ---------------------------------------------------------------------------------- W&B files


def test_wandb_grid_sweep_loads_unchanged():
    spec = load_spec(SPECS / "wandb_grid.yaml")
    assert spec.method == "grid" and spec.name == "grid-demo"
    assert spec.description.startswith("every combination")
    assert spec.metric == MetricSpec(name="val_acc", goal=Goal.MAXIMIZE)
    assert list(spec.space.params) == ["batch_size", "optimizer", "epochs"]
    assert spec.space.grid_size() == 6
    assert spec.program == "train.py" and spec.command is None and spec.function is None
    assert spec.effective_command == DEFAULT_COMMAND
    assert spec.source == SPECS / "wandb_grid.yaml" and spec.ignored == ()


def test_wandb_random_sweep_with_distributions_nested_params_and_run_cap():
    spec = load_spec(SPECS / "wandb_random.yaml")
    assert spec.method == "random"
    assert spec.budget == Budget(trials=20)
    assert set(spec.ignored) == {"entity", "project"}
    kinds = {name: dist.kind for name, dist in spec.space.params.items()}
    assert kinds == {
        "learning_rate": "log_uniform_values",
        "dropout": "uniform",
        "layers": "int_uniform",
        "activation": "categorical_w_probabilities",
        "weight_decay": "q_uniform",
        "optimizer.name": "categorical",
        "optimizer.momentum": "normal",
    }


def test_wandb_bayes_sweep_with_hyperband_and_command_macros():
    spec = load_spec(SPECS / "wandb_bayes_hyperband.yaml")
    assert spec.method == "bayes"
    assert spec.metric.name == "val_loss" and spec.metric.target == 0.05 and spec.metric.impute is None
    assert spec.early_terminate == {"type": "hyperband", "min_iter": 3, "eta": 3, "strict": True}
    assert spec.command == ("${env}", "${interpreter}", "${program}", "--config", "base-config.json", "${args}")
    assert spec.ignored == ("controller",)
    lr = spec.space.params["lr"]
    assert (lr.min, lr.max) == (1e-5, 1e-1)  # `1e-5` is a float, not YAML 1.1's string
    assert set(spec.space.params) == {"lr", "model.hidden", "model.dropout"}
    argv = build_command(spec, {"lr": 0.001, "model.hidden": 64, "model.dropout": 0.25},
                         interpreter="python3", args_json_file="unused.json")
    assert argv == ["/usr/bin/env"] * POSIX + [
        "python3", "train.py", "--config", "base-config.json",
        "--lr=0.001", "--model={'dropout': 0.25, 'hidden': 64}",   # nested: one argument, sorted, as W&B's agent
    ]


def test_every_sweeplab_key():
    spec = load_spec(SPECS / "sweeplab_full.yaml")
    assert spec.name == "xgb-diabetes" and spec.method == "tpe"
    assert spec.function == "examples.xgboost_diabetes.train:train" and spec.program is None
    assert spec.effective_command is None and spec.is_function
    assert spec.config == SPECS / "configs" / "base.yaml"  # relative to the spec file
    assert spec.profile == "local" and spec.seed == 0 and spec.workers == 2
    assert spec.resources == Resources(cpus=1.0, gpus=0.5, custom={"license": 1.0})
    assert spec.budget == Budget(trials=60, time=1800.0, gpu_hours=4.0, cpu_hours=1.5, cost={"usd": 20.0})
    assert spec.trial == TrialPolicy(timeout=600.0, retries=2, checkpoint_every=300.0, keep_checkpoints=3,
                                     grace=10.0, heartbeat_timeout=120.0)
    assert spec.early_terminate["type"] == "asha" and spec.early_terminate["max_iter"] == 27
    assert spec.monitors[0] == "nan" and spec.monitors[1] == {"plateau": {"metric": "val_loss", "patience": 5}}
    assert spec.backend == "ray" and spec.address == "auto"
    assert spec.checkpoint_dir == "s3://bucket/checkpoints"
    assert spec.raw["budget"]["time"] == "30m"  # the mapping as written is kept


@pytest.mark.parametrize(("written", "parsed"), [
    ("spread", "SPREAD"), ("STRICT_PACK", "STRICT_PACK"), ("none", None), (None, None)])
def test_resources_placement_is_a_ray_strategy_or_none(written, parsed):
    spec = parse_spec({"method": "random", "program": "train.py", "parameters": {"x": {"values": [1]}},
                       "resources": {"workers": 2, "placement": written}})
    assert spec.resources.placement == parsed
    assert Resources().placement == "PACK"


def test_defaults_of_a_minimal_spec():
    spec = parse_spec({"method": "random", "program": "train.py", "parameters": {"x": {"values": [1]}}})
    assert spec.metric == MetricSpec() and spec.metric.name is None
    assert spec.resources == Resources() and spec.budget == Budget() and spec.trial == TrialPolicy()
    assert spec.trial.retries == 1 and spec.trial.keep_checkpoints == 2 and spec.trial.grace == 30.0
    assert spec.backend == "local" and spec.monitors == () and spec.workers is None and spec.seed is None
    assert spec.source is None and spec.config is None


def test_parameters_may_be_absent_for_a_single_configuration():
    spec = parse_spec({"method": "grid", "function": "pkg.mod:train"})
    assert dict(spec.space.params) == {} and spec.space.grid_size() == 1


# ------------------------------------------------------------------------------------- errors


def base_spec() -> dict[str, Any]:
    return {
        "method": "random",
        "program": "train.py",
        "metric": {"name": "loss", "goal": "minimize"},
        "parameters": {"lr": {"min": 0.001, "max": 0.1}, "batch": {"values": [16, 32]}},
    }


def _set(raw: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split("/")
    node = raw
    for p in parents:
        node = node.setdefault(p, {})
    if value is _DELETE:
        node.pop(last, None)
    else:
        node[last] = value


_DELETE = object()

# (id, changes {slash/path: value}, key path in the message, fragment of the message)
ERRORS = [
    ("unknown-top-key", {"metod": "grid"}, "metod", "did you mean 'method'?"),
    ("unknown-top-key-no-hint", {"zzz": 1}, "zzz", "unknown key 'zzz'"),
    ("method-missing", {"method": _DELETE}, "method", "missing required key 'method'"),
    ("method-unknown", {"method": "hyperopt"}, "method", "expected one of grid, random, sobol, bayes, tpe, gp"),
    ("method-custom", {"method": "custom"}, "method", "custom method is not supported"),
    # `method: optuna` is what sl.optimize and `sweeplab sweep objective.py:fn` set for an Optuna objective;
    # written in a spec it passed --dry-run, then the sweep failed with "has no Optuna study"
    ("method-optuna", {"method": "optuna"}, "method", "is set by sweeplab.optimize"),
    ("method-typo", {"method": "radnom"}, "method", "did you mean 'random'?"),
    ("metric-goal", {"metric/goal": "minimise"}, "metric.goal", "expected minimize or maximize"),
    ("metric-not-mapping", {"metric": "loss"}, "metric", "must be a mapping"),
    ("metric-unknown-key", {"metric/goals": "minimize"}, "metric.goals", "did you mean 'goal'?"),
    ("metric-no-name", {"metric/name": _DELETE}, "metric.name", "missing required key 'name'"),
    ("metric-target-type", {"metric/target": "high"}, "metric.target", "got 'high'; expected a number"),
    ("metric-impute", {"metric/impute": "mean"}, "metric.impute", "expected one of worst, best, latest"),
    ("bayes-needs-metric", {"method": "bayes", "metric": _DELETE}, "metric", "method bayes needs a metric"),
    ("tpe-needs-metric", {"method": "tpe", "metric": _DELETE}, "metric", "method tpe needs a metric"),
    ("gp-needs-metric", {"method": "gp", "metric": _DELETE}, "metric", "method gp needs a metric"),
    ("param-min-max", {"parameters/lr/min": 0.5}, "parameters.lr.min", "got 0.5"),
    ("grid-continuous", {"method": "grid"}, "parameters.lr", "parameter 'lr' is uniform"),
    ("grid-continuous-nested", {"method": "grid", "parameters/lr": _DELETE,
                                "parameters/opt": {"parameters": {"mom": {"min": 0.5, "max": 0.9}}}},
     "parameters.opt.parameters.mom", "parameter 'opt.mom' is uniform"),
    ("nothing-to-run", {"program": _DELETE}, None, "nothing to run"),
    ("function-and-program", {"function": "pkg.mod:train"}, "program", "function and program are alternatives"),
    ("function-form", {"program": _DELETE, "function": "pkg.mod.train"}, "function",
     "expected 'pkg.module:fn' or 'path/to/file.py:fn'"),
    ("function-type", {"program": _DELETE, "function": 3}, "function", "got 3"),
    ("program-type", {"program": ["train.py"]}, "program", "must be a non-empty string"),
    ("unknown-macro", {"command": ["${env}", "${interpreter}", "${programm}", "${args}"]}, "command[2]",
     "unknown macro ${programm}: W&B's agent drops this item"),
    ("macro-typo-inside-item", {"command": ["python", "--cfg=${args_jsn_file}"]}, "command[1]",
     "unknown macro ${args_jsn_file}: W&B's agent passes it as it is"),
    ("list-macro-inside-item", {"command": ["python", "x.py", "a${args}"]}, "command[2]", "must be a whole item"),
    ("command-unclosed-macro", {"command": ["${env}", "python", "${args"]}, "command[2]", "unclosed macro"),
    ("command-type", {"command": 5}, "command", "must be a non-empty list"),
    ("command-empty", {"command": []}, "command", "must be a non-empty list"),
    ("command-item-type", {"command": ["python", {"a": 1}]}, "command[1]", "a command item that is not a string"),
    ("command-program-missing", {"program": _DELETE, "command": ["${env}", "python", "${program}"]}, "command[2]",
     "command uses ${program} but no program is given"),
    ("command-no-executable", {"program": _DELETE, "command": ["${env}", "${args}"]}, "command[1]",
     "command must start with an executable"),
    ("workers-zero", {"workers": 0}, "workers", "expected an integer >= 1"),
    ("workers-type", {"workers": "2"}, "workers", "got '2'; expected an integer >= 1"),
    ("seed-type", {"seed": 1.5}, "seed", "not an integer"),
    ("seed-bool", {"seed": True}, "seed", "not an integer"),
    ("name-type", {"name": 5}, "name", "must be a string"),   # W&B warns: strict makes it an error
    ("resources-unknown", {"resources/gpu": 1}, "resources.gpu", "did you mean 'gpus'?"),
    ("resources-negative-cpus", {"resources/cpus": -1}, "resources.cpus", "expected a number >= 0"),
    ("resources-negative-gpus", {"resources/gpus": -0.5}, "resources.gpus", "expected a number >= 0"),
    ("resources-fractional-gpus", {"resources/gpus": 1.5}, "resources.gpus", "a fraction of a GPU must be <= 1"),
    ("resources-workers", {"resources/workers": 0}, "resources.workers", "expected an integer >= 1"),
    ("resources-type", {"resources": [1]}, "resources", "must be a mapping"),
    ("resources-placement", {"resources/placement": "scatter"}, "resources.placement",
     "expected one of pack, spread, strict_pack, strict_spread or none"),
    ("budget-unknown-key", {"budget/trails": 3}, "budget.trails", "did you mean 'trials'?"),
    ("budget-time-unit", {"budget/time": "30x"}, "budget.time", "unknown duration unit 'x'"),
    ("budget-time-type", {"budget/time": [30]}, "budget.time", "a duration must be a string or a number"),
    ("budget-trials-zero", {"budget/trials": 0}, "budget.trials", "expected an integer >= 1"),
    ("budget-gpu-hours", {"budget/gpu_hours": "lots"}, "budget.gpu_hours", "not a duration"),
    ("budget-cost", {"budget/cost": {"usd": "ten"}}, "budget.cost.usd", "not a number"),
    ("budget-time-zero", {"budget/time": 0}, "budget.time", "must be above 0"),
    ("budget-time-zero-text", {"budget/time": "0s"}, "budget.time", "must be above 0"),
    ("budget-cpu-hours-zero", {"budget/cpu_hours": 0}, "budget.cpu_hours", "must be above 0"),
    ("budget-gpu-hours-zero", {"budget/gpu_hours": "0m"}, "budget.gpu_hours", "must be above 0"),
    ("budget-cost-zero", {"budget/cost": {"usd": 0}}, "budget.cost.usd", "must be above 0"),
    ("run-cap-conflict", {"run_cap": 10, "budget/trials": 20}, "run_cap", "run_cap and budget.trials disagree"),
    ("run-cap-type", {"run_cap": "10"}, "run_cap", "not an integer"),
    ("trial-unknown-key", {"trial/retry": 2}, "trial.retry", "did you mean 'retries'?"),
    ("trial-timeout", {"trial/timeout": "10 parsecs"}, "trial.timeout", "unknown duration unit 'parsecs'"),
    ("trial-retries", {"trial/retries": -1}, "trial.retries", "expected an integer >= 0"),
    ("trial-checkpoint-float", {"trial/checkpoint_every": 2.5}, "trial.checkpoint_every",
     "a bare number is a step count"),
    ("trial-checkpoint-zero", {"trial/checkpoint_every": 0}, "trial.checkpoint_every", "at least 1 step"),
    ("trial-keep", {"trial/keep_checkpoints": 0}, "trial.keep_checkpoints", "expected an integer >= 1"),
    ("trial-profiler", {"trial/torch_profiler": "yes"}, "trial.torch_profiler", "must be a mapping"),
    ("early-terminate-type", {"early_terminate": {"type": "hyperbnd", "min_iter": 3}}, "early_terminate.type",
     "did you mean 'hyperband'?"),
    ("early-terminate-no-type", {"early_terminate": {"min_iter": 3}}, "early_terminate.type",
     "missing required key 'type'"),
    ("early-terminate-not-mapping", {"early_terminate": "asha"}, "early_terminate", "must be a mapping"),
    ("early-terminate-no-metric", {"metric": _DELETE, "early_terminate": {"type": "median"}}, "early_terminate",
     "needs a metric"),
    ("monitors-type", {"monitors": "nan"}, "monitors", "must be a list"),
    ("monitors-item", {"monitors": ["nan", 3]}, "monitors[1]", "a monitor must be a name or a mapping"),
    ("wandb-launch-job", {"job": "entity/project/job:v0"}, "job", "W&B Launch jobs are not supported"),
    ("wandb-multi-metric", {"metrics": [{"name": "a"}, {"name": "b"}]}, "metrics", "multi-objective"),
    ("config-type", {"config": 3}, "config", "must be a non-empty string"),
    ("q-over-the-range", {"parameters/lr": {"distribution": "q_log_uniform_values", "min": 0.001, "max": 0.01,
                                            "q": 1}},
     "parameters.lr.q", "q is larger than the range it quantises: every value q_log_uniform_values draws is 0"),
    ("q-too-small", {"parameters/lr": {"distribution": "q_uniform", "min": 0, "max": 1.0e308, "q": 1.0e-300}},
     "parameters.lr.q", "q is too small for the range: a value divided by q is beyond a float"),
    ("goal-abbreviated", {"metric/goal": "max"}, "metric.goal",
     "got 'max'; expected minimize or maximize (did you mean 'maximize'?)"),
    ("checkpoint-dir-env", {"checkpoint_dir": "$SCRATCH/ckpt"}, "checkpoint_dir",
     "environment variables are not expanded here; got '$SCRATCH/ckpt'"),
    ("checkpoint-dir-braces", {"checkpoint_dir": "${oc.env:SCRATCH}/ckpt"}, "checkpoint_dir",
     "environment variables are not expanded here"),
    ("infinite-normal", {"parameters/lr": {"distribution": "normal", "mu": 0, "sigma": 1.0e308}},
     "parameters.lr", "normal draws infinite values"),
    ("q-over-a-uniform", {"parameters/lr": {"distribution": "q_uniform", "min": 0, "max": 1, "q": 5}},
     "parameters.lr.q", "every value q_uniform draws is 0"),
    # `profile: off`, `metric: {name: on}`: YAML 1.1 read the word as a boolean, and the error said "got False"
    ("string-read-as-bool", {"profile": False}, "profile", "YAML reads yes, no, on, off, true and false as "
     "booleans: quote the text ('off', 'no')"),
    ("metric-name-read-as-bool", {"metric/name": True}, "metric.name", "quote the text ('on', 'yes')"),
    ("name-read-as-bool", {"name": True}, "name", "got True; expected a string (YAML reads yes, no, on, off"),
    ("choice-read-as-bool", {"trial": {"workdir": True}}, "trial.workdir", "quote the text ('on', 'yes')"),
]


@pytest.mark.parametrize(("changes", "key", "fragment"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_name_file_and_key_path(changes, key, fragment):
    raw = base_spec()
    for path, value in changes.items():
        _set(raw, path, value)
    with pytest.raises(SpecError) as info:
        parse_spec(raw, file="sweep.yaml", strict=True)   # strict: W&B-only warnings are errors too
    text = str(info.value)
    prefix = f"sweep.yaml: {key}: " if key else "sweep.yaml: "
    assert text.startswith(prefix), text
    assert fragment in text, text
    assert info.value.file == "sweep.yaml" and info.value.key == key


def test_the_base_spec_of_the_error_table_is_valid():
    assert parse_spec(base_spec(), file="sweep.yaml").method == "random"


def test_parameter_error_from_a_file_reads_as_documented():
    path = SPECS / "bad_range.yaml"
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}: parameters.lr.min: ")
    assert "got 0.5" in str(info.value) and "0.1" in str(info.value)


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("bad_yaml.yaml", None, "invalid YAML: line"),
        ("list.yaml", "- method: grid\n", "the sweep spec must be a mapping"),
        ("empty.yaml", "# nothing\n", "the sweep spec is empty"),
        ("missing.yaml", ..., "sweep spec file not found"),
    ],
    ids=["bad-yaml", "not-a-mapping", "empty", "missing"],
)
def test_load_spec_file_errors_name_the_file(tmp_path, name, content, fragment):
    if content is None:
        path = SPECS / name
    else:
        path = tmp_path / name
        if content is not ...:
            path.write_text(content)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}: ")
    assert fragment in str(info.value)


# -------------------------------------------------------------------------------- accepted forms


@pytest.mark.parametrize(
    ("changes", "check"),
    [
        ({"run_cap": 10, "budget/trials": 10}, lambda s: s.budget.trials == 10),
        ({"run_cap": 7}, lambda s: s.budget == Budget(trials=7)),
        ({"resources/gpus": 0.25}, lambda s: s.resources.gpus == 0.25),
        ({"resources/gpus": 2}, lambda s: s.resources.gpus == 2.0),
        ({"resources/workers": 4, "resources/gpus_per_worker": 1}, lambda s: s.resources.workers == 4),
        ({"trial/checkpoint_every": 100}, lambda s: s.trial.checkpoint_every == 100),
        ({"trial/checkpoint_every": "100 steps"}, lambda s: s.trial.checkpoint_every == 100),
        ({"trial/checkpoint_every": "5m"}, lambda s: s.trial.checkpoint_every == 300.0),
        ({"trial/checkpoint_every": "auto"}, lambda s: s.trial.checkpoint_every == "auto"),
        ({"trial/heartbeat_timeout": None}, lambda s: s.trial.heartbeat_timeout is None),
        ({"trial/torch_profiler": True}, lambda s: s.trial.torch_profiler == {}),
        ({"trial/torch_profiler": {"active": 3}}, lambda s: s.trial.torch_profiler == {"active": 3}),
        ({"budget/gpu_hours": "90m"}, lambda s: s.budget.gpu_hours == 1.5),
        # a number as text is hours there too, as the number is (not the duration grammar's seconds: 1/3600 of it)
        ({"budget/gpu_hours": "4", "budget/cpu_hours": " 1.5 "},
         lambda s: s.budget.gpu_hours == 4.0 and s.budget.cpu_hours == 1.5),
        ({"metric/impute_while_running": False}, lambda s: s.metric.impute_while_running is None),
        ({"metric/impute_while_running": "best"}, lambda s: s.metric.impute_while_running == "best"),
        ({"early_terminate": {"type": "hyperband", "max_iter": 27, "s": 2}},
         lambda s: s.early_terminate["s"] == 2),
        ({"early_terminate": {"type": "median", "metric": "acc"}, "metric": _DELETE},
         lambda s: s.early_terminate == {"type": "median", "metric": "acc"}),
        ({"program": _DELETE, "function": "path/to/train.py:main"}, lambda s: s.function == "path/to/train.py:main"),
        ({"program": _DELETE, "function": "pkg.mod:Trainer.fit"}, lambda s: s.is_function),
        ({"program": _DELETE, "command": ["./train.sh", "${args_no_hyphens}"]},
         lambda s: s.command == ("./train.sh", "${args_no_hyphens}") and s.program is None),
        ({"program": _DELETE, "command": ["${env}", "${interpreter}", "-m", "pkg.train", "${args}"]},
         lambda s: s.effective_command[2] == "-m"),
        ({"command": "${env} python3 ${program} --epochs 3 ${args}"},
         lambda s: s.command == ("${env}", "python3", "${program}", "--epochs", "3", "${args}")
         and any("command: a string, not a list" in w and "letter by letter" in w for w in s.warnings)),
        ({"command": ["python", "${program}", "--lr", 0.1]}, lambda s: s.command[-1] == "0.1"),
        ({"command": ["${env}", "${envvar:PYTHON}", "${program}"]}, lambda s: s.command[1] == "${envvar:PYTHON}"),
        ({"entity": "me", "project": "p", "controller": {"type": "local"}, "apiVersion": "v1", "kind": "sweep"},
         lambda s: s.ignored == ("entity", "project", "controller", "apiVersion", "kind")),
        ({"method": "sobol", "metric": _DELETE}, lambda s: s.method == "sobol" and s.metric.name is None),
    ],
    ids=[
        "run-cap-equal", "run-cap-alone", "fractional-gpu", "whole-gpus", "multi-worker",
        "checkpoint-steps", "checkpoint-steps-text", "checkpoint-duration", "checkpoint-auto",
        "heartbeat-off", "profiler-true", "profiler-mapping", "gpu-hours-duration", "hours-as-text",
        "impute-running-false", "impute-running-best", "hyperband-max-iter", "median-own-metric",
        "function-file", "function-method", "command-executable", "command-module",
        "command-string", "command-number-item", "envvar-macro", "wandb-ignored", "sobol-without-metric",
    ],
)
def test_accepted_forms(changes, check):
    raw = base_spec()
    for path, value in changes.items():
        _set(raw, path, value)
    assert check(parse_spec(raw, file="sweep.yaml"))


def test_relative_config_resolves_against_base_dir(tmp_path):
    raw = {**base_spec(), "config": "conf/base.yaml"}
    assert parse_spec(raw, base_dir=tmp_path).config == tmp_path / "conf" / "base.yaml"
    assert parse_spec(raw, file=str(tmp_path / "s.yaml")).config == tmp_path / "conf" / "base.yaml"
    assert parse_spec({**raw, "config": str(tmp_path / "abs.yaml")}, base_dir=Path("/elsewhere")).config == (
        tmp_path / "abs.yaml"
    )


def test_parse_spec_does_not_modify_its_input():
    raw = base_spec()
    raw["command"] = ["${env}", "${interpreter}", "${program}", "${args}"]
    before = copy.deepcopy(raw)
    parse_spec(raw, file="sweep.yaml")
    assert raw == before


# ---------------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45s", 45.0), ("30m", 1800.0), ("2h", 7200.0), ("1h30m", 5400.0), ("1h 30m 10s", 5410.0),
        ("1d", 86400.0), ("1.5h", 5400.0), ("500ms", 0.5), ("90", 90.0), (90, 90.0), (2.5, 2.5),
        ("10 minutes", 600.0), ("2 hours", 7200.0), ("0s", 0.0), ("  5M ", 300.0),
    ],
    ids=str,
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("30x", "unknown duration unit 'x'"),
        ("1h30", "missing duration unit"),
        ("-5m", "cannot be negative"),
        (-5, "finite and >= 0"),
        ("", "empty duration"),
        ("soon", "not a duration"),
        ("5m!", "not a duration"),
        (True, "must be a string or a number"),
        (None, "must be a string or a number"),
        (float("inf"), "finite"),
        ("1 mins", None),  # accepted: sanity check that the table can tell good from bad
    ],
    ids=str,
)
def test_parse_duration_errors(text, fragment):
    if fragment is None:
        assert parse_duration(text) == 60.0
        return
    with pytest.raises(SpecError) as info:
        parse_duration(text, file="sweep.yaml", key="trial.timeout")
    assert str(info.value).startswith("sweep.yaml: trial.timeout: ")
    assert fragment in str(info.value)


# ------------------------------------------------------------------------------ build_command


def _spec(command: list[str] | None = None, program: str | None = "train.py") -> SweepSpec:
    raw: dict[str, Any] = {"method": "random", "parameters": {"lr": {"min": 0.001, "max": 0.1}}}
    if program is not None:
        raw["program"] = program
    if command is not None:
        raw["command"] = command
    return parse_spec(raw, file="sweep.yaml")


PARAMS = {"lr": 0.01, "model.hidden": 64, "name": "abc", "flag": True, "off": False, "layers": [1, 2]}
ENV = ["/usr/bin/env"] if POSIX else []


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # in W&B's order: sorted by name, as its controller sends them (tests/wandb/test_agent_macros.py)
        (None, ENV + ["py", "train.py", "--flag=True", "--layers=[1, 2]", "--lr=0.01", "--model.hidden=64",
                      "--name=abc", "--off=False"]),
        (["${env}"], ENV),
        (["${interpreter}"], ["py"]),
        (["${program}"], ["train.py"]),
        (["${args}"], ["--flag=True", "--layers=[1, 2]", "--lr=0.01", "--model.hidden=64", "--name=abc",
                       "--off=False"]),
        (["${args_no_hyphens}"], ["flag=True", "layers=[1, 2]", "lr=0.01", "model.hidden=64", "name=abc",
                                  "off=False"]),
        (["${args_no_boolean_flags}"], ["--flag", "--layers=[1, 2]", "--lr=0.01", "--model.hidden=64",
                                        "--name=abc"]),
        (["${args_json}"], [('{"flag": true, "layers": [1, 2], "lr": 0.01, "model.hidden": 64, "name": "abc", '
                             '"off": false}')]),   # a dotted name stays flat, as in W&B
        (["${args_json_file}"], ["/tmp/trial-3/params.json"]),
        (["python", "${program}", "--params=${args_json_file}"], ["python", "train.py",
                                                                  "--params=/tmp/trial-3/params.json"]),
        (["${interpreter}", "-u", "${program}", "--fixed", "1"], ["py", "-u", "train.py", "--fixed", "1"]),
        (["${env}", "${envvar:SWEEPLAB_TEST_PY}", "${program}"], ENV + ["python3.11", "train.py"]),
    ],
    ids=["default", "env", "interpreter", "program", "args", "args-no-hyphens", "args-no-boolean-flags",
         "args-json", "args-json-file", "macro-inside-item", "literal-items", "envvar"],
)
def test_build_command_expands_each_macro(command, expected):
    argv = build_command(_spec(command), PARAMS, interpreter="py", args_json_file="/tmp/trial-3/params.json",
                         environ={"SWEEPLAB_TEST_PY": "python3.11"})
    assert argv == expected


def test_args_json_matches_what_args_json_file_should_hold():
    nested = {"a": {"parameters": {"b": {"value": 1}, "c": {"value": "x"}}}, "d": {"value": None}}
    assert json.loads(args_json({"a.b": 1, "a.c": "x", "d": None}, nested)) == {"a": {"b": 1, "c": "x"}, "d": None}
    assert json.loads(args_json({"a.b": 1, "d": None})) == {"a.b": 1, "d": None}   # dotted names stay flat


def test_build_command_unset_envvar_names_the_item():
    spec = _spec(["${env}", "${envvar:SWEEPLAB_SURELY_UNSET}", "${program}"])
    with pytest.raises(SpecError, match=r"command\[1\]: environment variable SWEEPLAB_SURELY_UNSET is not set"):
        build_command(spec, {}, interpreter="py", args_json_file="p.json", environ={})


def test_build_command_for_a_function_spec_is_an_error():
    spec = parse_spec({"method": "random", "function": "m:f", "parameters": {}})
    with pytest.raises(SpecError, match="calls a function"):
        build_command(spec, {}, interpreter="py", args_json_file="p.json")


def test_command_without_program_runs_the_executable():
    spec = _spec(["./run.sh", "${args_no_hyphens}"], program=None)
    assert build_command(spec, {"lr": 0.5}, interpreter="py", args_json_file="p.json") == ["./run.sh", "lr=0.5"]


# ------------------------------------------------------------------------ overrides and storage


def test_with_overrides_replaces_fields_and_validates():
    spec = load_spec(SPECS / "wandb_grid.yaml")
    changed = spec.with_overrides(workers=4, backend="ray", seed=3)
    assert (changed.workers, changed.backend, changed.seed) == (4, "ray", 3)
    assert spec.workers is None and changed.space == spec.space
    with pytest.raises(SpecError, match="workers: must be an integer >= 1"):
        spec.with_overrides(workers=0)
    with pytest.raises(SpecError, match="method: unknown method"):
        spec.with_overrides(method="annealing")
    with pytest.raises(TypeError, match="no field 'wrokers'"):
        spec.with_overrides(wrokers=2)


def _comparable(spec: SweepSpec) -> SweepSpec:
    return dataclasses.replace(spec, raw={}, source=None)


@pytest.mark.parametrize(
    "fixture", ["wandb_grid.yaml", "wandb_random.yaml", "wandb_bayes_hyperband.yaml", "sweeplab_full.yaml"]
)
def test_to_jsonable_round_trips_through_json(fixture):
    spec = load_spec(SPECS / fixture)
    data = json.loads(json.dumps(spec.to_jsonable()))
    rebuilt = SweepSpec.from_jsonable(data, source=spec.source)
    assert _comparable(rebuilt) == _comparable(spec)
    assert rebuilt.source == spec.source and rebuilt.ignored == spec.ignored
    assert parse_spec(data) is not None  # the stored mapping is itself a valid spec


def test_to_jsonable_folds_run_cap_into_budget_and_keeps_overrides():
    spec = load_spec(SPECS / "wandb_random.yaml").with_overrides(workers=8)
    data = spec.to_jsonable()
    assert "run_cap" not in data and data["budget"] == {"trials": 20} and data["workers"] == 8
    assert data["entity"] == "my-team"
    rebuilt = SweepSpec.from_jsonable(json.loads(json.dumps(data)))
    assert rebuilt.workers == 8 and rebuilt.budget.trials == 20 and rebuilt.source is None


def test_to_jsonable_keeps_checkpoint_kinds():
    spec = load_spec(SPECS / "sweeplab_full.yaml")
    rebuilt = SweepSpec.from_jsonable(json.loads(json.dumps(spec.to_jsonable())))
    assert rebuilt.trial.checkpoint_every == 300.0 and isinstance(rebuilt.trial.checkpoint_every, float)
    steps = spec.with_overrides(trial=TrialPolicy(checkpoint_every=300))
    again = SweepSpec.from_jsonable(json.loads(json.dumps(steps.to_jsonable())))
    assert again.trial.checkpoint_every == 300 and isinstance(again.trial.checkpoint_every, int)


def test_stored_config_path_is_absolute(tmp_path, monkeypatch):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "sweep.yaml").write_text("method: grid\nfunction: m:f\nconfig: conf/base.yaml\n")
    monkeypatch.chdir(tmp_path)
    spec = load_spec("exp/sweep.yaml")  # a relative spec path
    assert spec.config == tmp_path / "exp" / "conf" / "base.yaml"
    monkeypatch.chdir(tmp_path / "exp")
    again = SweepSpec.from_jsonable(spec.to_jsonable(), source="exp/sweep.yaml")
    assert again.config == tmp_path / "exp" / "conf" / "base.yaml"


def test_from_jsonable_names_the_stored_spec_in_errors():
    with pytest.raises(SpecError, match="<stored spec>: method: missing required key"):
        SweepSpec.from_jsonable({"function": "m:f"})


def test_hyperband_min_iter_beside_max_iter_is_a_warning_as_w_and_b_uses_max_iter():
    raw = base_spec()
    raw["early_terminate"] = {"type": "hyperband", "max_iter": 5, "min_iter": 10, "s": 2, "eta": 2}
    spec = parse_spec(raw, file="sweep.yaml")
    assert spec.early_terminate["min_iter"] == 10
    assert any("early_terminate.min_iter: " in w and "max_iter wins" in w for w in spec.warnings)


@pytest.mark.parametrize("raw, expect", [
    (None, None), (True, None), (False, ()), ([], ()), ("torch", ("torch",)),
    (["torch", "sklearn.datasets", "torch"], ("torch", "sklearn.datasets")),
])
def test_trial_preload_reads_module_names_and_survives_a_round_trip(raw, expect):
    base = {"function": "t.py:f", "method": "random", "parameters": {"x": {"min": 0, "max": 1}}}
    spec = parse_spec({**base, "trial": {"preload": raw}}, file="s.yaml")
    assert spec.trial.preload == expect
    assert parse_spec(spec.to_jsonable(), file="again").trial.preload == expect


def test_a_trial_preload_name_nothing_here_provides_is_warned_about_with_a_did_you_mean(tmp_path):
    """A typo in `trial.preload` was seen only in the sweep's event log (forked workers) or nowhere (cold ones):
    the spec now warns, naming the key and a close installed name. The user's own module beside the spec is
    found, as the workers find it."""
    (tmp_path / "mymodel.py").write_text("X = 1\n")
    base = {"function": "t.py:f", "method": "random", "parameters": {"x": {"min": 0, "max": 1}}}
    spec = parse_spec({**base, "trial": {"preload": ["nmupy", "json", "mymodel", "yaml"]}},
                      file=str(tmp_path / "s.yaml"))
    assert spec.trial.preload == ("nmupy", "json", "mymodel", "yaml")
    assert len(spec.warnings) == 1, spec.warnings
    assert "trial.preload: no module named 'nmupy'" in spec.warnings[0]
    assert "did you mean 'numpy'?" in spec.warnings[0]


@pytest.mark.parametrize("raw", [["torch", 3], ["a b"], ["torch."], 5, {"torch": 1}])
def test_trial_preload_that_is_not_module_names_is_an_error_naming_the_key(raw):
    base = {"function": "t.py:f", "method": "random", "parameters": {"x": {"min": 0, "max": 1}}}
    with pytest.raises(SpecError, match=r"s\.yaml: trial\.preload: is not a list of module names; got .*expected"):
        parse_spec({**base, "trial": {"preload": raw}}, file="s.yaml")


def test_an_unknown_backend_in_the_spec_names_the_file_and_key_not_the_option(tmp_path):
    import subprocess
    import sys

    (tmp_path / "s.yaml").write_text("function: train.py:train\nmethod: grid\nbackend: rya\n")
    (tmp_path / "train.py").write_text("def train(config, run):\n    return {}\n")
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "s.yaml", "--store", "st"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2, cp.stderr
    assert cp.stderr.strip() == ("error: s.yaml: backend: unknown backend; got 'rya'; expected local or ray "
                                 "(did you mean 'ray'?)"), cp.stderr
    assert not (tmp_path / "st").exists()
