"""What every part of the checkpoint package shares: the on-disk names, the errors, `CheckpointInfo`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sweeplab.errors import SweeplabError, TrialError

_MANIFEST = "manifest.json"
_FENCE = ".fence.json"        # {"dead": {"<attempt>": time declared dead}}: see `fence`
_DIR_FORMAT = "dir"
_AUTO = "auto"
_CHUNK = 1 << 20
_NAME_RE = re.compile(r"^(step|seq)-(-?\d+)(?:-(\d+))?$")
_STALE_TMP_SECONDS = 24 * 3600.0

_Entries = list[tuple[str, dict[str, Any]]]
_Bad = list[tuple[str, str]]


class CheckpointCorruptError(SweeplabError):
    """A checkpoint failed verification (missing payload, truncated, checksum mismatch, unreadable)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"checkpoint {path} is corrupt: {reason}")


class StaleAttemptError(TrialError):
    """A save by an attempt that was declared dead (a newer attempt of the trial runs): refused."""

    def __init__(self, root: str, attempt: int) -> None:
        super().__init__(f"checkpoint under {root} refused: attempt {attempt} of this trial was declared dead "
                         "(a newer attempt owns the checkpoints)")


@dataclass(frozen=True)
class CheckpointInfo:
    """Metadata of one written checkpoint (what the store keeps; the payload stays in `path`)."""

    path: str
    step: int | None
    checksum: str
    bytes: int
    seconds: float
    format: str
    time: float
    removed: tuple[str, ...] = ()   # paths of the older checkpoints this save's retention deleted

