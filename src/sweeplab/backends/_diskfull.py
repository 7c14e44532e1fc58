"""A trial that found its disk full (ENOSPC, EDQUOT), a file-size limit (EFBIG, SIGXFSZ) or its storage read-only
(EROFS: a file system remounted read-only after a disk error, a read-only share).

Such a trial did nothing wrong: failing it would fail every trial after it the same way and burn the retries.
The worker ends its attempt with a FAILED event marked `"disk_full": true` (its reason names the full place);
the driver records the attempt as interrupted, stops the sweep with that reason (exit 1), and `sweeplab resume`
runs the trial again once there is room.

How it is recognised:
- a function trial: its exception, or one in its chain (`raise ... from`, as a checkpoint save's StoreError
  wraps the OSError), is an OSError with errno ENOSPC, EDQUOT, EFBIG or EROFS;
- a command trial: the program exited non-zero and the last line of its stderr names one of those errors
  ("No space left on device", "Disk quota exceeded", "[Errno 27] File too large" / "os error 27", "Read-only
  file system"), as a Python,
  C, Go or Rust program's error does, or a shell's "File size limit exceeded"; or it was killed by SIGXFSZ
  (a file-size limit, RLIMIT_FSIZE); or sweeplab's own files for it (the report file) could not be created
  so. Its log is another matter: a log that cannot be written is noted and dropped, the program goes on
  (backends/command_trial.py);
- a worker process (or a rank) killed by SIGXFSZ under a trial (Python ignores the signal, so only a trial
  that restored its default action dies of it).
"""

from __future__ import annotations

import errno
import os
import re
import signal
from collections.abc import Iterable
from typing import Any

__all__ = ["FULL_ERRNOS", "disk_full_data", "full_disk_error", "names_full_disk", "trial_places"]

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})

# strerror texts, as printed by programs in any language ("File too large" only with its number: it is also
# what an upload limit or a parser may say), and a shell's words for a child killed by SIGXFSZ
_TEXT = re.compile(r"no space left on device|disk quota exceeded|\[errno 27\]|os error 27\b|\befbig\b"
                   r"|file size limit exceeded|read-only file system", re.IGNORECASE)


def full_disk_error(exc: BaseException | None) -> OSError | None:
    """The OSError with a full-disk errno in `exc`'s chain (its cause and context), if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def names_full_disk(line: str, sig: int | None = None) -> bool:
    """Whether a command that ended so (the last line of its stderr, the signal that killed it) found its
    disk full or a file-size limit."""
    return sig == signal.SIGXFSZ or bool(_TEXT.search(line))


def trial_places(task: Any) -> list[str]:
    """Where a trial's files go: its checkpoints, its log, its artifacts, its working directory."""
    return [str(p) for p in (task.checkpoint_dir, os.path.dirname(task.log_path or ""), task.artifacts_dir,
                             task.cwd) if p]


def _full_place(paths: Iterable[str]) -> str | None:
    """The first of `paths` (or its nearest existing parent) on a filesystem with less than 1 MiB free."""
    for path in paths:
        p = path
        while p and not os.path.exists(p):
            p = os.path.dirname(p.rstrip("/"))
        try:
            st = os.statvfs(p or "/")
        except OSError:
            continue
        if st.f_bavail * st.f_frsize < 1 << 20:
            return path
    return None


#: an exception's module path before its class, as a traceback's last line names it (`sweeplab.errors.StoreError:`)
_DOTTED_CLASS = re.compile(r"^(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*(?:Error|Exception|Full)): ")


def disk_full_data(message: str, places: Iterable[str] = (), **extra: Any) -> dict[str, Any]:
    """The data of the FAILED event that says so: `message` (the error as it was raised or printed), with
    the full place named when the message does not (an OSError of a write has no file name)."""
    message = _DOTTED_CLASS.sub(r"\1: ", " ".join(message.split()))[:500]   # a program's `sweeplab.errors.X:`
    shown = message
    if not any(p and p in message for p in places):
        where = _full_place(p for p in places if p)
        if where is not None:
            shown = f"{message} (no room left under {where})"
    what = "its storage read-only" if "read-only file system" in shown.lower() else "the disk full"
    return {"disk_full": True, "reason": f"found {what}: {shown}", "error_type": "DiskFull",
            "message": shown, **extra}
