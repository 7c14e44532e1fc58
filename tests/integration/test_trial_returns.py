"""What a function trial returns, in real worker processes: a bare number is the sweep's metric (as an Optuna
objective returns its value), numpy and torch scalars included; a value that is no number is named where the
metric is missing, instead of "never reported (reported: nothing)"."""

from __future__ import annotations

import pytest

import sweeplab as sl

pytestmark = pytest.mark.slow

TRAIN = '''
import numpy as np

def bare(config, run):
    return config["x"] + 1.0

def numpy32(config, run):
    return np.float32(config["x"])

def torch0d(config, run):
    import torch
    return torch.tensor(config["x"])

def logged_then_returned(config, run):
    run.log({"loss": 5.0}, step=0)
    return 0.5

def text_in_dict(config, run):
    return {"loss": "abc", "acc": 0.5}

def text(config, run):
    return "abc"
'''


def _sweep(tmp_path, fn: str):
    (tmp_path / "rets.py").write_text(TRAIN)
    spec = {"function": f"{tmp_path / 'rets.py'}:{fn}", "method": "random", "seed": 0,
            "metric": {"name": "loss", "goal": "minimize"}, "budget": {"trials": 1},
            "parameters": {"x": {"min": 0.25, "max": 0.5}}}
    return sl.sweep(spec, store=tmp_path / "store", workers=1, name=fn, progress=False)


@pytest.mark.parametrize("fn", ["bare", "numpy32", "torch0d", "logged_then_returned"])
def test_a_bare_number_returned_is_the_sweeps_metric(tmp_path, fn):
    if fn == "torch0d":
        pytest.importorskip("torch")
    sweep = _sweep(tmp_path, fn)
    row = sweep.trials().iloc[0]
    assert row["state"] == "completed", row["reason"]
    x = row["params.x"]
    expected = {"bare": x + 1.0, "numpy32": x, "torch0d": x, "logged_then_returned": 0.5}[fn]
    assert row["value"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(("fn", "reason"), [
    ("text_in_dict", "metric 'loss' is not a number: the trial returned 'abc' (str)"),
    ("text", "the trial returned 'abc' (str), neither a number nor a mapping of metrics"),
])
def test_a_returned_value_that_is_no_number_is_named_in_the_reason(tmp_path, fn, reason):
    sweep = _sweep(tmp_path, fn)
    row = sweep.trials().iloc[0]
    assert row["state"] == "failed" and reason in row["reason"]
