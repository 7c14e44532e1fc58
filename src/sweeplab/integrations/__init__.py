"""Callbacks that connect training frameworks to a trial's `Run` (docs/integrations.md).

One module per framework, each imported only when used, so `import sweeplab` never imports a framework:

    from sweeplab.integrations.lightning import SweeplabCallback      # PyTorch Lightning (the `lightning` extra)
    from sweeplab.integrations.transformers import SweeplabCallback   # Hugging Face Trainer (`transformers`)
    from sweeplab.integrations.keras import SweeplabCallback          # Keras 3 `model.fit` (`keras`)
    from sweeplab.integrations.xgboost import SweeplabCallback        # XGBoost training callback (`xgboost`)
    from sweeplab.integrations.lightgbm import SweeplabCallback       # LightGBM training callback (`lightgbm`)

Each takes a Run: a function trial's argument, or `sweeplab.Run.from_env()` in a program run as a command
trial (inert outside a sweep), and does the same four things through it: reports the framework's metrics
(`run.log`), checkpoints through `run.checkpoint` (when the `trial.checkpoint_every` policy says so, and always
on the way out of a stopped trial), resumes from `run.restore()`, and makes the framework stop training when
`run.should_stop` turns true (pruned by a scheduler, stopped by a monitor rule, preempted by SIGTERM, or the
sweep ending).
In a multi-process (DDP) trial the Lightning and Transformers callbacks run on every rank and agree each
decision (stop, checkpoint) across the ranks before acting on it, so the ranks save and stop together.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["BoosterCallback", "claim_directory", "release_directory", "scalars"]


def scalars(values: Mapping[str, Any], keys: Iterable[str] | None = None) -> dict[str, float]:
    """The entries of `values` that are single numbers (Python numbers, 0-d or 1-element tensors and arrays),
    as floats: what a framework's metric dict holds besides strings and lists. `keys`: keep only these."""
    wanted = set(keys) if keys is not None else None
    out: dict[str, float] = {}
    for key, value in values.items():
        if wanted is not None and key not in wanted:
            continue
        number = _number(value)
        if number is not None:
            out[str(key)] = number
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    size = getattr(value, "numel", None) or getattr(value, "size", None)   # torch tensor / numpy array
    try:
        count = size() if callable(size) else size
        if count == 1:
            item = value.item() if hasattr(value, "item") else value
            return float(item)   # NaN too: the `nan` monitor should see it
    except (TypeError, ValueError, RuntimeError):
        return None
    return None



class BoosterCallback:
    """What the gradient-boosting callbacks (XGBoost, LightGBM) share: the names to report and the last values
    reported (`metrics`, what `train` can return), and the booster a resumed attempt goes on from
    (`resume_model()`, `rounds_done`). A subclass says how its framework reads a checkpoint (`_load`)."""

    def __init__(self, run: Any, *, metrics: Iterable[str] | None = None, checkpoint: bool = True) -> None:
        super().__init__()   # the framework's callback base, where there is one
        self.run = run
        self.keys = list(metrics) if metrics is not None else None
        self.checkpoint = checkpoint
        self.metrics: dict[str, float] = {}   # the last reported round's values
        self.rounds_done = 0                  # rounds of the model `resume_model()` returned
        self._resumed: Any = None
        self._restored = False

    def resume_model(self) -> Any:
        """This trial's newest checkpoint as the framework's booster, to continue training from (`xgb_model=`,
        `init_model=`), or None on a first attempt. The framework then trains `num_boost_round` rounds *more*
        (`n_estimators` more), so pass the rounds left: `config.rounds - callback.rounds_done` (`rounds_done`
        is set by this call)."""
        if self._restored or not self.checkpoint:
            return self._resumed
        self._restored = True
        found = self.run.restore()
        if isinstance(found, (bytes, bytearray, memoryview)):
            self._resumed, self.rounds_done = self._load(bytes(found))
        return self._resumed

    def _load(self, data: bytes) -> tuple[Any, int]:
        """The booster a checkpoint holds and its rounds."""
        raise NotImplementedError

    def _report(self, metrics: dict[str, float], step: int) -> None:
        if self.keys is not None:
            metrics = {k: v for k, v in metrics.items() if k in self.keys}
        if metrics:
            self.metrics = metrics
            self.run.log(metrics, step=step)   # at a scheduler's rung: waits for the verdict


MARKER = ".sweeplab-trial"   # in a framework's output directory: the trial that writes there now
_HELD: dict[str, int] = {}   # marker path -> the descriptor holding its lock, in this process


def claim_directory(directory: str | os.PathLike[str], sweep: str | None, trial: int) -> None:
    """Hold `directory` (a framework's own output directory) for this trial until `release_directory`, or
    raise if another process's trial holds it now: the trials of a sweep share its working directory, so a
    fixed `output_dir="out"` is one directory for all of them, and parallel trials overwrote and deleted each
    other's `checkpoint-N` (one failed with "No such file or directory: 'out/checkpoint-4'", and a checkpoint
    kept for one trial could hold another's weights). The hold is an exclusive `flock` on a marker file,
    which the OS drops with its process; a later trial of this process takes it over."""
    import fcntl

    path = Path(directory) / MARKER
    path.parent.mkdir(parents=True, exist_ok=True)
    release_directory(directory)   # this process's former trial's, if it still held it
    for held in [p for p in _HELD if not os.path.exists(p)]:   # a failed trial's temporary directory, gone
        os.close(_HELD.pop(held))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            theirs = json.loads(os.pread(fd, 4096, 0) or b"{}")
        except ValueError:
            theirs = {}
        os.close(fd)
        raise RuntimeError(
            f"output directory {str(directory)!r} is being written by trial {theirs.get('trial')} of sweep "
            f"{theirs.get('sweep')!r} (pid {theirs.get('pid')}) at the same time: give each trial its own, "
            "e.g. output_dir=f\"out/{run.sweep}/trial-{run.trial}\", or a temporary directory (what a resumed "
            "attempt needs is in the store)") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"sweep": sweep, "trial": trial, "pid": os.getpid(),
                              "host": socket.gethostname()}).encode(), 0)
    _HELD[str(path)] = fd


def release_directory(directory: str | os.PathLike[str]) -> None:
    """Let go of `claim_directory`'s hold (the marker file stays: its lock is what counts)."""
    fd = _HELD.pop(str(Path(directory) / MARKER), None)
    if fd is not None:
        os.close(fd)
