"""Attempt fencing: `fence` declares attempts of a trial dead, so their saves are refused and late writes ignored."""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

from sweeplab.checkpoint._common import _FENCE
from sweeplab.checkpoint._locations import _is_url, _Local, _Remote


def fence(root: str, attempt: int, at: float | None = None) -> None:
    """Declare attempt `attempt` (and every earlier one) of the trial whose checkpoints live in `root` dead.

    The driver calls it when it kills an attempt and before it starts the next one. From then on a
    `CheckpointManager` of that attempt refuses to save (StaleAttemptError; a save in progress removes what
    it wrote), and `latest()` ignores a checkpoint of that attempt written after `at` (default: now), so a
    late write of a dead attempt is never restored by the attempts after it."""
    root = os.fspath(root).removeprefix("file://")
    fs: _Local | _Remote = _Remote(root) if _is_url(root) else _Local(root)
    dead = _read_fence(fs)
    dead.setdefault(int(attempt), time.time() if at is None else float(at))
    data = json.dumps({"dead": {str(k): v for k, v in sorted(dead.items())}}).encode("utf-8")
    fs.makedirs(fs.root)
    path = fs.join(fs.root, _FENCE)
    if not fs.atomic_rename:
        with fs.open(path, "wb") as f:
            f.write(data)
        return
    tmp = fs.join(fs.root, f".fence.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    with fs.open(tmp, "wb") as f:
        f.write(data)
        fs.sync(f)
    os.replace(tmp, path)


def _read_fence(fs: _Local | _Remote) -> dict[int, float]:
    """{attempt: time it was declared dead} of the trial under `fs.root` ({} without a fence)."""
    try:
        raw = json.loads(fs.read_bytes(fs.join(fs.root, _FENCE)).decode("utf-8"))
        return {int(k): float(v) for k, v in dict(raw.get("dead", {})).items()}
    except (OSError, ValueError, TypeError, AttributeError, OverflowError):   # a number of hundreds of digits
        return {}


def _attempt_from_env(root: str) -> int | None:
    """A command trial's program using the checkpoint directory sweeplab gave it is that attempt's writer."""
    attempt = os.environ.get("SWEEPLAB_ATTEMPT", "")
    if _given_dir(root) and attempt.isdigit():
        return int(attempt)
    return None


def _keep_from_env(root: str) -> int:
    """How many checkpoints to keep: the trial's `trial.keep_checkpoints` for a command trial's program using
    the checkpoint directory sweeplab gave it, else 2."""
    keep = os.environ.get("SWEEPLAB_KEEP_CHECKPOINTS", "")
    return int(keep) if _given_dir(root) and keep.isdigit() and int(keep) >= 1 else 2


def _given_dir(root: str) -> bool:
    given = os.environ.get("SWEEPLAB_CHECKPOINT_DIR") or ""
    return bool(given) and given.removeprefix("file://").rstrip("/") == root.removeprefix("file://").rstrip("/")


def _late(manifest: dict[str, Any], dead: dict[int, float]) -> bool:
    """Whether a checkpoint was written by its attempt after that attempt was declared dead."""
    attempt = manifest.get("attempt")
    if not dead or not isinstance(attempt, int):
        return False
    declared = min((t for a, t in dead.items() if a >= attempt), default=None)
    return declared is not None and float(manifest.get("time", 0.0)) > declared
