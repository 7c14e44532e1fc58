"""One source of truth per seam: searchers, schedulers and backends each have one registry, and the spec, the
CLI and the Python API read it; the typed options of the spec, `early_terminate` and monitors go through one
validator, so the same mistake reads the same everywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sweeplab.api import build_backend
from sweeplab.backends import BACKENDS, make_backend
from sweeplab.errors import SpecError, UserError
from sweeplab.monitors import parse_monitors
from sweeplab.schedulers import SCHEDULERS, MedianScheduler, make_scheduler
from sweeplab.search import DEFINE_BY_RUN, SEARCHERS, GridSearcher, make_searcher
from sweeplab.spec import parse_spec
from sweeplab.types import Goal

TRIALS = Path(__file__).resolve().parent / "fixtures" / "trials.py"
BASE: dict[str, Any] = {"function": "m:f", "method": "grid", "parameters": {"x": {"values": [1, 2]}},
                        "metric": {"name": "loss"}}


class MyGrid(GridSearcher):
    method = "mygrid"


class MyMedian(MedianScheduler):
    type = "mymedian"


def test_a_searcher_registered_once_is_a_valid_method(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SEARCHERS, "mygrid", MyGrid)
    spec = parse_spec({**BASE, "method": "mygrid"}, file="sweep.yaml")
    assert isinstance(make_searcher(spec.method, spec.space, Goal.MINIMIZE, 0), MyGrid)
    assert spec.with_overrides(method="mygrid").method == "mygrid"


def test_unknown_method_lists_the_registry() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, "method": "grdi"}, file="sweep.yaml")
    nameable = [m for m in SEARCHERS if m not in DEFINE_BY_RUN]   # `optuna` is sweeplab.optimize's, not a spec's
    assert str(info.value) == ("sweep.yaml: method: unknown method; got 'grdi'; expected one of "
                               + ", ".join(nameable) + " (did you mean 'grid'?)")


def test_a_scheduler_registered_once_is_a_valid_early_terminate_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SCHEDULERS, "mymedian", MyMedian)
    spec = parse_spec({**BASE, "early_terminate": {"type": "mymedian", "warmup": 1}}, file="sweep.yaml")
    sched = make_scheduler(spec.early_terminate, goal=Goal.MINIMIZE, metric="loss")
    assert isinstance(sched, MyMedian) and sched.warmup == 1


def test_unknown_early_terminate_type_lists_the_registry() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, "early_terminate": {"type": "ahsa"}}, file="sweep.yaml")
    assert str(info.value) == ("sweep.yaml: early_terminate.type: unknown early_terminate type; got 'ahsa'; "
                               "expected one of " + ", ".join(SCHEDULERS) + " (did you mean 'asha'?)")


def test_a_backend_registered_once_is_built_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def mine(spec: Any = None, **options: Any) -> Any:
        seen.update(options, spec=spec)
        return BACKENDS["local"](spec, **{**options, "workers": 1})

    monkeypatch.setitem(BACKENDS, "mine", mine)
    spec = parse_spec(BASE, file="sweep.yaml")
    be = build_backend(spec, backend="mine", workers=3)
    try:
        assert be.name == "local" and len(be.slots) == 1   # type: ignore[attr-defined]
        assert seen["spec"] is spec and seen["workers"] == 3
    finally:
        be.shutdown(grace=0.0)


def test_unknown_backend_names_the_registry() -> None:
    with pytest.raises(UserError, match=r"unknown backend 'lcoal'; expected local or ray"):
        make_backend("lcoal")


def test_cli_backend_option_reads_the_registry(tmp_path: Path) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"function: {TRIALS}:quick\nmethod: grid\nparameters: {{x: {{values: [1]}}}}\n")
    env = {**os.environ, "SWEEPLAB_STORE": str(tmp_path / "store")}
    help_text = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "--help"], env=env,
                               capture_output=True, text=True, timeout=120).stdout
    assert " | ".join(BACKENDS) in help_text
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", str(spec), "--backend", "nope"], env=env,
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 2, cp.stderr
    assert cp.stderr.strip() == "error: --backend: unknown backend 'nope'; expected local or ray"
    assert not (tmp_path / "store").exists()   # refused before the store is created


@pytest.mark.parametrize(
    ("build", "key", "minimum"),
    [
        (lambda: parse_spec({**BASE, "seed": 1.5}, file="sweep.yaml"), "seed", 0),
        (lambda: make_scheduler({"type": "asha", "min_iter": 1.5}, goal=Goal.MINIMIZE, file="sweep.yaml"),
         "early_terminate.min_iter", 1),
        (lambda: parse_monitors([{"plateau": {"metric": "loss", "patience": 1.5}}], file="sweep.yaml"),
         "monitors[0].plateau.patience", 1),
    ],
    ids=["spec", "early_terminate", "monitor"],
)
def test_one_validator_one_message(build: Any, key: str, minimum: int) -> None:
    with pytest.raises(SpecError) as info:
        build()
    assert str(info.value) == f"sweep.yaml: {key}: not an integer; got 1.5; expected an integer >= {minimum}"
