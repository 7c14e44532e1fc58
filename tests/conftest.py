"""Suite-wide setup: trials run as from an activated virtualenv.

`${interpreter}` is `python` on PATH, as under W&B's agent; a user runs sweeplab with their environment
active, so the suite puts the interpreter that runs it first on PATH for the trials it starts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_bin = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _bin:
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


@pytest.fixture
def read_only() -> Iterator[Callable[[Path], None]]:
    """Remount a directory read-only (a bind mount onto itself), as a results share or a snapshot is;
    undone at teardown. Skipped where mounting is not permitted."""
    mounted: list[Path] = []

    def make(path: Path) -> None:
        if not _mount("--bind", str(path), str(path)):
            pytest.skip("bind mounts are not permitted here")
        mounted.append(path)
        if not _mount("-o", "remount,ro,bind", str(path)):
            pytest.skip("read-only remounts are not permitted here")

    yield make
    for path in reversed(mounted):
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
