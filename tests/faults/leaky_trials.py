"""Trial functions that use up a resource of their worker process (tests/faults/test_worker_limits.py)."""

from __future__ import annotations

import os

__all__ = ["fd_leak"]


def fd_leak(config, run):
    """x == 1: opens files until none is left (a leak), keeps them, then checkpoints (which needs a file) and so
    fails. Any other x: one checkpoint, then its loss."""
    held = []
    if float(config["x"]) == 1.0:
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
    run.log({"loss": float(config["x"])}, step=0)
    run.checkpoint({"x": config["x"]}, step=0)
    return {"loss": float(config["x"])}
