"""Where a trial's files live under the store (or under `checkpoint_dir:` for checkpoints).

    <store>/logs/<sweep>/<trial>-<attempt>.log            stdout + stderr of the attempt
    <store>/checkpoints/<sweep>/<trial>/                   checkpoints, shared by all attempts of the trial
    <store>/artifacts/<sweep>/<trial>/                     traces, failure captures (captures/)
"""

from __future__ import annotations

__all__ = ["safe_name", "trial_paths"]


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "sweep"


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
    }
