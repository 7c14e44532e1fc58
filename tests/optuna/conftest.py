"""Fixtures of the Optuna-objective tests: a working directory holding the user's objective module."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory holding the user's objective module, as a user's project would."""
    shutil.copy(HERE / "objectives.py", tmp_path / "objectives.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path

