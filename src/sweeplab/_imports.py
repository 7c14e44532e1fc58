"""Lazy imports of optional dependencies, with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from sweeplab.errors import MissingExtraError

__all__ = ["optional_import"]


def optional_import(module: str, extra: str, purpose: str = "") -> ModuleType:
    """Import `module` or raise MissingExtraError naming `pip install 'sweeplab[extra]'`."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name and exc.name.split(".")[0] != module.split(".")[0]:
            raise  # the module exists but one of *its* imports failed: show the real error
        raise MissingExtraError(module, extra, purpose) from None
