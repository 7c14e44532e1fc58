"""Where a trial's files live under the store (or under `checkpoint_dir:` for checkpoints).

    <store>/logs/<sweep>/<trial>-<attempt>.log            stdout + stderr of the attempt
    <store>/checkpoints/<sweep>/<trial>/                   checkpoints, shared by all attempts of the trial
    <store>/artifacts/<sweep>/<trial>/                     traces, failure captures (captures/)
    <store>/workdirs/<sweep>/<trial>/                      the trial's working directory (trial.workdir: trial),
                                                           shared by all attempts of the trial
"""

from __future__ import annotations

__all__ = ["MAX_NAME_BYTES", "safe_name", "trial_paths"]


#: bytes of a sweep's directory name at most (a file name may have 255; `.lock` and suffixes are added)
MAX_NAME_BYTES = 200


def safe_name(name: str) -> str:
    """The sweep's directory name under logs/, checkpoints/, artifacts/ and locks/: its letters, digits,
    `-`, `_` and `.`, the rest as `_`. Never `.` or `..` (which would name the directory above), and at most
    MAX_NAME_BYTES: a longer name keeps its head and a hash of the whole. Two names can share one safe name
    (`my sweep`, `my_sweep`); `api.unique_name` gives a new sweep a name no other sweep's directory uses."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "sweep"
    if not _nameable(safe):   # a locale whose file names cannot hold it (LANG=C without UTF-8 mode: `café`)
        import hashlib

        digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        safe = "".join(c if c.isascii() else "_" for c in safe) + f"-{digest}"   # two such names stay apart
    if set(safe) == {"."}:
        safe = safe.replace(".", "_")
    if len(safe.encode()) > MAX_NAME_BYTES:
        import hashlib

        digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        head = safe.encode()[: MAX_NAME_BYTES - 13].decode("utf-8", "ignore")
        safe = f"{head}-{digest}"
    return safe


def _nameable(text: str) -> bool:
    """True when this process can name a file `text`: its file system encoding holds every character (UTF-8
    always; ASCII, in the C locale without UTF-8 mode, none of `café-中`, which open() refused with a
    UnicodeEncodeError traceback for every command that writes a sweep's files)."""
    import os

    try:
        os.fsencode(text)
    except UnicodeError:
        return False
    return True


def trial_paths(root: str, sweep: str, number: int, attempt: int, checkpoint_dir: str | None = None
                ) -> dict[str, str]:
    """Absolute paths (root must be absolute) and `log_rel`, the log path relative to the store."""
    safe = safe_name(sweep)
    ckpt = (f"{str(checkpoint_dir).rstrip('/')}/{safe}/{number}" if checkpoint_dir
            else f"{root}/checkpoints/{safe}/{number}")
    return {
        "log_rel": f"logs/{safe}/{number}-{attempt}.log",
        "log": f"{root}/logs/{safe}/{number}-{attempt}.log",
        "report": f"{root}/logs/{safe}/{number}-{attempt}.report.jsonl",
        "checkpoint": ckpt,
        "capture": f"{root}/artifacts/{safe}/{number}/captures",
        "artifacts": f"{root}/artifacts/{safe}/{number}",
        "workdir": f"{root}/workdirs/{safe}/{number}",
    }
