"""Checkpoints the store vouches for: what a trial wrote is what the driver recorded (name and checksum).

A checkpoint's manifest proves its payload intact, not that the trial wrote it: one replaced or rewritten on
disk (by hand, a sync tool, another program) while the sweep was down is self-consistent and would be restored
and unpickled. `untrusted` compares the checkpoints under a trial's directory with the store's rows; the
driver sets those aside before a retried attempt restores (`set_aside`), `sweeplab repro` refuses them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from sweeplab.checkpoint._common import _MANIFEST, _NAME_RE
from sweeplab.checkpoint._locations import _is_url, _Local, _Remote

#: the prefix of a checkpoint set aside: no checkpoint's name, so neither `latest()` nor retention sees it
_ASIDE = ".untrusted."


def recorded_checksums(rows: Iterable[Mapping[str, Any] | Any]) -> dict[str, str | None]:
    """{checkpoint name: checksum} of a trial's store rows (`Store.checkpoint_rows`), by the last part of
    their path (a row may name it by a path of a store since moved)."""
    return {str(row["path"]).rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]: row["checksum"] for row in rows}


def untrusted(root: str, recorded: Mapping[str, str | None], *, unrecorded: bool = True) -> list[tuple[str, str]]:
    """(name, why) of the checkpoints under `root` (a local path or an fsspec URL) the store does not vouch
    for: one it never recorded (written by an attempt whose event never reached the store, a late write of a
    dead attempt, another program's), or whose manifest does not hold the checksum recorded for it (replaced,
    rewritten). A row without a checksum vouches for its name only. Names that are no checkpoint's (temporary
    directories, the fence, a command program's own files) are left out. `unrecorded=False`: only recorded ones
    that changed (a retry: a checkpoint whose event was lost with its node or driver is the trial's newest work,
    and a dead attempt's late writes are the fence's to refuse)."""
    root = root.removeprefix("file://")
    fs: _Local | _Remote = _Remote(root) if _is_url(root) else _Local(root)
    found: list[tuple[str, str]] = []
    for name in sorted(fs.names(fs.root)):
        if not _NAME_RE.match(name):
            continue
        try:
            manifest = json.loads(fs.read_bytes(fs.join(fs.root, name, _MANIFEST)).decode("utf-8"))
        except (OSError, ValueError):
            continue   # no manifest or an unreadable one: `latest()` skips it as corrupt and says so
        checksum = manifest.get("checksum") if isinstance(manifest, dict) else None
        if name not in recorded:
            if not unrecorded:
                continue
            found.append((name, "the store has no record of it (written by an attempt whose checkpoint event "
                                "never reached the store, or not by this trial)"))
        elif recorded[name] and checksum != recorded[name]:
            found.append((name, f"it does not hold the checksum the store recorded for it ({recorded[name]}): it "
                                "was replaced or changed since"))
    return found


def set_aside(root: str, name: str) -> str:
    """Move checkpoint `name` under `root` out of every restore's way (`.untrusted.<name>.<time>` beside it,
    kept for a look); returns where it went (deleted, "", where it cannot be moved)."""
    root = root.removeprefix("file://")
    fs: _Local | _Remote = _Remote(root) if _is_url(root) else _Local(root)
    src = fs.join(fs.root, name)
    dst = fs.join(fs.root, f"{_ASIDE}{name}.{time.time_ns()}")
    try:
        fs.rename(src, dst)
        return fs.url(dst)
    except OSError:
        fs.rmtree(src)
        return ""
