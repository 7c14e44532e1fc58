"""The WANDB_SWEEP_PARAM_PATH file reads back, as YAML, to exactly the values W&B's agent would write."""

from __future__ import annotations

import math

import pytest
import yaml

from sweeplab.wandb_compat import write_sweep_params

CASES = {
    "floats and ints": {"lr": 0.0123, "epochs": 3, "big": 12345678901234567890},
    "nested and lists": {"optimizer": {"lr": 1e-3, "nadam": {"beta": 0.9}}, "layers": [64, 128], "e": []},
    "bools, None, text": {"flag": True, "off": False, "none": None, "name": "é 'x' \"y\": z # w", "yes": "yes"},
    "dotted and odd keys": {"model.width": 64, "a b": 1, "": 2, "1": 3},
    # Python writes these without a dot (1e-05, 1e+16), which YAML 1.1 (PyYAML, wandb's reader) takes for text:
    # `values: [0.00001, 0.0001]` reached wandb.config as the string '1e-05'; W&B's agent writes 1.0e-05
    "exponent floats": {"lr": 1e-05, "big": 1e16, "tiny": -5e-324, "grid": [1e-05, 5e-06], "opt": {"eps": 1e-08}},
    # JSON writes a character beyond U+FFFF as a surrogate pair (`\\ud83d\\ude80`), which YAML reads as two lone
    # surrogates: `values: ["rocket <emoji>"]` reached wandb.config as text that print() cannot encode
    "beyond the BMP": {"tag": "rocket \U0001f680", "greek": "\U0001d6fc=0.1", "\U0001f525": {"k": ["\U0001f600"]}},
    # what YAML cannot hold raw (C0/C1 controls, DEL, U+FFFE, a lone surrogate) or folds (its line breaks) reads
    # back as the same text
    "unprintable": {"ctl": "a\x00\x07\x1b\x7f\x9f\ufeff\ufffe b", "lone": "x\udc80y",
                    "breaks": "a\n\tb\r c\x85d\u2028e\u2029f"},
}


@pytest.mark.parametrize("args", CASES.values(), ids=CASES.keys())
def test_the_params_file_reads_back_exactly(tmp_path, args):
    path = tmp_path / "p.yaml"
    write_sweep_params(path, args)
    assert yaml.safe_load(path.read_text()) == {"wandb_version": 1, **{k: {"value": v} for k, v in args.items()}}


def test_non_finite_values_read_back_as_floats(tmp_path):
    path = tmp_path / "p.yaml"
    write_sweep_params(path, {"x": math.inf, "y": 1.5})
    read = yaml.safe_load(path.read_text())
    assert read["x"]["value"] == math.inf and read["y"]["value"] == 1.5


def test_wandb_reads_the_params_file_with_the_types_it_was_given(tmp_path):
    config_util = pytest.importorskip("wandb.sdk.lib.config_util")
    path = tmp_path / "p.yaml"
    write_sweep_params(path, {"lr": 1e-05, "n": 3, "big": 1e16})
    read = config_util.dict_from_config_file(str(path))
    assert read == {"lr": 1e-05, "n": 3, "big": 1e16} and isinstance(read["lr"], float)
