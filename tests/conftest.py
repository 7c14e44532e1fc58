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


def gone(pid: int) -> bool:
    """Whether a process has ended: no such pid, or a zombie its new parent has not reaped yet."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (ProcessLookupError, FileNotFoundError):   # ended, or ended between the two looks
        return True


@pytest.fixture
def killed_driver_frees() -> Callable[..., None]:
    """The end of a held-program test: the program (`out/pid`) waits at its rung while its driver is stopped
    (SIGSTOP, so no verdict can come), then the driver is killed and the program must end rather than wait
    on. `decide` is how its report file spells the wait; the program's `out/returned` means it was not held."""

    def check(driver: subprocess.Popen, out: Path, store: Path, decide: str, start_within: float = 120.0) -> None:
        import signal
        import time

        end = time.monotonic() + start_within
        while not (out / "pid").exists():
            assert driver.poll() is None and time.monotonic() < end, "the program never started"
            time.sleep(0.02)
        pid = int((out / "pid").read_text())
        driver.send_signal(signal.SIGSTOP)
        (out / "on").write_text("")
        end = time.monotonic() + 60
        while not any(decide in p.read_text() for p in store.rglob("*.report.jsonl")):
            assert time.monotonic() < end and not gone(pid), "the program did not wait at its rung"
            time.sleep(0.02)
        assert not (out / "returned").exists()     # held: the driver cannot answer
        driver.kill()
        driver.wait()
        end = time.monotonic() + 60
        while not gone(pid):
            assert time.monotonic() < end, "the program still waits for its killed driver"
            time.sleep(0.05)

    return check
