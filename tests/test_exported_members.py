"""The package's public surface is exactly `sweeplab.__all__` (httpx's habit): a name imported into the facade
must be exported on purpose, and an exported name must exist."""

from __future__ import annotations
import __future__

import types

import sweeplab

PUBLIC = [
    "BackendError", "ConfigError", "MissingExtraError", "Run", "SpecError", "StoreError", "SweeplabError",
    "Sweep", "TrialState", "UserError", "__version__", "load", "main", "optimize", "report", "run_sweep", "sweep",
]


def test_all_is_pinned() -> None:
    assert sorted(sweeplab.__all__) == sorted(PUBLIC)


def test_all_names_exist_and_nothing_else_is_public() -> None:
    for name in sweeplab.__all__:
        assert getattr(sweeplab, name) is not None
    not_members = (types.ModuleType, __future__._Feature)   # submodules, `from __future__ import annotations`
    imported = sorted(
        name for name, value in vars(sweeplab).items()
        if (not name.startswith("_") or name == "__version__") and not isinstance(value, not_members)
    )
    assert imported == sorted(sweeplab.__all__)


def test_lazy_submodules_stay_reachable() -> None:
    assert sweeplab.monitors.nan is not None   # `sl.monitors.nan()` without an import of its own
