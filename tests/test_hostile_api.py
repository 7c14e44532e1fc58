"""Wrong argument types to the Python API: a clear UserError (or TypeError) naming the argument, raised
before anything is written (the store directory is not even created)."""

from __future__ import annotations

import math

import pytest

import sweeplab as sl
from sweeplab.errors import UserError

SPEC = {"method": "random", "metric": {"name": "loss", "goal": "minimize"},
        "parameters": {"lr": {"min": 0.1, "max": 1.0}}, "budget": {"trials": 1}}


def objective(trial):
    return trial.suggest_float("x", 0, 1)


CASES = {
    "sweep-name-int": (lambda st: sl.sweep(SPEC, fn="m:f", store=st, name=5), "name"),
    "run_sweep-name-int": (lambda st: sl.run_sweep({**SPEC, "function": "m:f"}, store=st, name=5), "name"),
    "optimize-name-int": (lambda st: sl.optimize(objective, 1, store=st, name=5), "name"),
    "optimize-name-control": (lambda st: sl.optimize(objective, 1, store=st, name="a\nb"), "name"),
    "sweep-store-int": (lambda st: sl.sweep(SPEC, fn="m:f", store=5), "store"),
    "run_sweep-store-int": (lambda st: sl.run_sweep({**SPEC, "function": "m:f"}, store=5), "store"),
    "run_sweep-store-empty": (lambda st: sl.run_sweep({**SPEC, "function": "json:dumps"}, store=""), "store"),
    "sweep-store-empty": (lambda st: sl.sweep(SPEC, fn="json:dumps", store=""), "store"),
    "optimize-store-int": (lambda st: sl.optimize(objective, 1, store=5), "store"),
    "sweep-spec-list": (lambda st: sl.sweep([1, 2], fn="m:f", store=st), "spec"),
    "sweep-spec-none": (lambda st: sl.sweep(None, fn="m:f", store=st), "spec"),
    "run_sweep-spec-int": (lambda st: sl.run_sweep(3, store=st), "spec"),
    "sweep-overrides-int": (lambda st: sl.sweep(SPEC, fn="m:f", store=st, overrides=5), "overrides"),
    "optimize-timeout-nan": (lambda st: sl.optimize(objective, 1, store=st, timeout=math.nan), "timeout"),
    "optimize-callbacks-not-callable": (lambda st: sl.optimize(objective, 1, store=st, callbacks=[5]), "callbacks"),
    "optimize-callbacks-one-function": (lambda st: sl.optimize(objective, 1, store=st, callbacks=len), "callbacks"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_a_wrong_argument_is_refused_by_name_before_the_store_is_written(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    call, argument = CASES[case]
    with pytest.raises((UserError, TypeError)) as info:
        call(str(tmp_path / "st"))
    assert argument in str(info.value), info.value
    assert not (tmp_path / "st").exists()
    assert not (tmp_path / ".sweeplab").exists()
    assert not (tmp_path / "store.db").exists()   # store="" is the working directory


class _ReduceRaises:
    def __reduce__(self):
        raise RuntimeError("no pickling this")


def _run(tmp_path):
    from sweeplab.run import Run

    return Run(config={}, sink=lambda kind, data: None, checkpoint_dir=str(tmp_path / "ckpt"))


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda run: run.log({1: 2.0}, step=0), TypeError, "metric name"),
    (lambda run: run.log({("a", "b"): 2.0}, step=0), TypeError, "metric name"),
    (lambda run: run.log([("loss", 1.0)], step=0), TypeError, "mapping"),
    (lambda run: run.log(0.5, step=0), TypeError, "mapping"),
    (lambda run: run.checkpoint({"a": 1}, step="3", force=True), TypeError, "step must be an integer"),
    (lambda run: run.checkpoint({"a": 1}, step=2.5, force=True), TypeError, "step must be an integer"),
], ids=["int-key", "tuple-key", "list", "float", "ckpt-step-str", "ckpt-step-float"])
def test_run_refuses_a_wrong_argument_with_a_clear_type_error(tmp_path, call, error, words):
    run = _run(tmp_path)
    with pytest.raises(error) as info:
        call(run)
    assert words in str(info.value), info.value
    run.flush()


def test_a_checkpoint_whose_reduce_raises_is_a_clear_checkpoint_error(tmp_path):
    from sweeplab.errors import SweeplabError

    run = _run(tmp_path)
    with pytest.raises(SweeplabError, match=r"checkpoint: cannot save a dict .*no pickling this"):
        run.checkpoint({"obj": _ReduceRaises()}, step=1, force=True)
    assert run.restore() is None   # nothing half-written was kept


@pytest.fixture(scope="module")
def one_trial(tmp_path_factory):
    root = tmp_path_factory.mktemp("handle")
    (root / "handle_trial.py").write_text("def train(config, run):\n    run.log({'loss': 1.0}, step=0)\n"
                                          "    return {'loss': 1.0}\n")
    spec = {"method": "grid", "metric": {"name": "loss", "goal": "minimize"}, "parameters": {"lr": {"value": 0.5}}}
    sl.sweep(spec, fn=f"{root / 'handle_trial.py'}:train", store=str(root / "st"), workers=1, name="h")
    return root / "st"


@pytest.mark.parametrize(("trial", "words"), [
    ("0", "not a trial number"), (True, "not a trial number"), (-1, "not a trial number"), (0.0, "not a trial number"),
    (5, "has no trial 5"),
], ids=["str", "bool", "negative", "float", "unknown"])
def test_handle_metrics_of_a_wrong_trial_says_so_instead_of_an_empty_table(one_trial, trial, words):
    handle = sl.load("h", store=one_trial)
    assert len(handle.metrics(0)) == 1
    with pytest.raises(UserError, match=words):
        handle.metrics(trial)


def test_load_with_a_wrong_argument_type_names_it(one_trial):
    with pytest.raises(UserError, match="name"):
        sl.load(5, store=one_trial)
    with pytest.raises(UserError, match="store"):
        sl.load("h", store=5)


def _train(config, run):
    return {"loss": 1.0}


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"argv": "lr=1"}, "argv"), ({"argv": [1, 2]}, "argv"), ({"argv": [], "config": 5}, "config"),
    ({"argv": [], "profile": 5}, "profile"),
], ids=["argv-str", "argv-ints", "config-int", "profile-int"])
def test_main_refuses_a_wrong_argument_as_bad_input(tmp_path, monkeypatch, capsys, kwargs, words):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SWEEPLAB_STORE", str(tmp_path / "st"))
    with pytest.raises(SystemExit) as info:
        sl.main(_train, **kwargs)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err
    assert not (tmp_path / "st").exists()


@pytest.mark.parametrize("fn, words", [
    ("nomodule:f", "module 'nomodule' not found"),
    ("json.nomodule:f", "module 'json.nomodule' not found"),
    ("json:dumpz", "has no function 'dumpz'"),
], ids=["missing-module", "missing-submodule", "missing-function"])
def test_sweep_of_a_target_that_cannot_be_imported_fails_before_the_store(tmp_path, fn, words):
    """`sl.sweep(fn="nomodule:f")` ran every trial into a ModuleNotFoundError (after the store was written),
    where `sl.optimize` refuses such an objective up front."""
    with pytest.raises(UserError, match=words) as info:
        sl.sweep({**SPEC, "function": "m:f"}, fn=fn, store=tmp_path / "st", workers=1)
    assert fn in str(info.value)
    assert not (tmp_path / "st").exists()
    with pytest.raises(UserError, match=words):
        sl.run_sweep({**SPEC, "function": fn}, store=tmp_path / "st", workers=1)
    assert not (tmp_path / "st").exists()


def test_a_module_target_not_found_here_is_left_to_a_ray_cluster(tmp_path):
    """On a Ray cluster the trials import the module on its nodes, where a package of their image may be
    installed that this machine lacks: only a local sweep refuses it up front."""
    from sweeplab.api import check_spec
    from sweeplab.spec import parse_spec

    spec = parse_spec({**SPEC, "function": "only_on_the_cluster.train:main"}, file="<test>")
    with pytest.raises(UserError, match="only_on_the_cluster"):
        check_spec(spec)
    check_spec(spec, backend="ray")
    check_spec(parse_spec({**SPEC, "function": "only_on_the_cluster.train:main", "backend": "ray"}, file="<t>"))
