"""The chaos suite's helpers (tests/faults/conftest.py) for the framework tests: `Chaos` (the real CLI in
subprocesses, queries on its store), `wait_for` and the `reap` fixture. Loaded by path under one module name,
so that the framework modules and tests/faults share one copy."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "_sweeplab_faults_conftest"


def _load(path: Path):
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    spec = importlib.util.spec_from_file_location(_NAME, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_faults = _load(Path(__file__).resolve().parents[1] / "faults" / "conftest.py")
Chaos, wait_for, reap = _faults.Chaos, _faults.wait_for, _faults.reap
