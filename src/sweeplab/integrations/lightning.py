"""PyTorch Lightning: a `Callback` that reports a `Trainer`'s metrics through the trial's Run, checkpoints
through `run.checkpoint`, and stops the Trainer when the trial should stop.

    from sweeplab.integrations.lightning import SweeplabCallback

    def train(config, run):
        callback = SweeplabCallback(run)
        trainer = L.Trainer(max_epochs=config.epochs, callbacks=[callback], enable_checkpointing=False)
        trainer.fit(model, datamodule, ckpt_path=callback.resume_path())   # None on a first attempt
        return callback.metrics

Works with the `lightning` package (`lightning.pytorch`) and with the older `pytorch_lightning`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeplab.integrations import scalars
from sweeplab.run import Run

__all__ = ["CHECKPOINT_FILE", "SweeplabCallback"]

CHECKPOINT_FILE = "lightning.ckpt"   # the file `trainer.save_checkpoint` writes inside a run checkpoint


def _lightning() -> Any:
    """`lightning.pytorch`, else `pytorch_lightning`, else a MissingExtraError naming the extra."""
    try:
        import lightning.pytorch as pl

        return pl
    except ImportError:
        pass
    try:
        import pytorch_lightning as pl  # type: ignore[no-redef]

        return pl
    except ImportError:
        from sweeplab._imports import optional_import

        return optional_import("lightning.pytorch", "lightning", "the PyTorch Lightning callback")


pl = _lightning()


class SweeplabCallback(pl.Callback):  # type: ignore[misc,name-defined]
    """Connects a Lightning `Trainer` to a trial's `Run`.

    After each validation run (sanity checks excluded; after each training epoch when the Trainer has no
    validation loop) it logs `trainer.callback_metrics` with `run.log(..., step=trainer.current_epoch)`,
    writes a checkpoint when `trial.checkpoint_every` says one is due (`trainer.save_checkpoint` into a
    directory that `run.checkpoint` keeps), and sets `trainer.should_stop` once `run.should_stop` is true.
    A stop that arrives during an epoch (a SIGTERM) is seen at the next training batch: a last checkpoint is
    written there, on the way out, and the next attempt resumes from it via `resume_path()`.

    run         the trial's Run
    metrics     names to report (default: every scalar in `trainer.callback_metrics`)
    checkpoint  False: never checkpoint (and `resume_path()` is None)
    """

    def __init__(self, run: Run, *, metrics: Sequence[str] | None = None, checkpoint: bool = True) -> None:
        super().__init__()
        self.run = run
        self.keys = list(metrics) if metrics is not None else None
        self.checkpoint = checkpoint
        self.metrics: dict[str, float] = {}   # the last reported values (what `train` can return)
        self._saved_for_stop = False

    # ------------------------------------------------------------------ resume
    def resume_path(self) -> str | None:
        """The Lightning checkpoint file of this trial's newest run checkpoint (for `trainer.fit(ckpt_path=)`),
        or None when there is none (a first attempt)."""
        if not self.checkpoint:
            return None
        found = self.run.restore()
        if not isinstance(found, (str, os.PathLike)):
            return None
        path = Path(found) / CHECKPOINT_FILE
        return str(path) if path.is_file() else None

    # ------------------------------------------------------------------ hooks
    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":   # not a sanity check, nor trainer.validate()
            return
        self._report(trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if not getattr(trainer, "enable_validation", True):   # no validation loop: report per training epoch
            self._report(trainer)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.run.should_stop and not self._saved_for_stop:
            # mid-epoch (preempted, or the sweep ends): save now, Lightning may not reach the epoch's end
            self._save(trainer)
            trainer.should_stop = True

    # ------------------------------------------------------------------ work
    def _report(self, trainer: Any) -> None:
        metrics = scalars(trainer.callback_metrics, self.keys)
        if metrics:
            self.metrics = metrics
            self.run.log(metrics, step=int(trainer.current_epoch))   # at a scheduler's rung: waits for the verdict
        if not self._saved_for_stop:
            self._save(trainer)
        if self.run.should_stop:
            trainer.should_stop = True

    def _save(self, trainer: Any) -> None:
        """`trainer.save_checkpoint` into a temporary directory handed to `run.checkpoint`, when one is due."""
        if not self.checkpoint:
            return
        step = int(trainer.current_epoch)
        stopping = self.run.should_stop
        if not self.run.checkpoint_due(step):
            return
        tmp = tempfile.mkdtemp(prefix="sweeplab-lightning-")
        try:
            trainer.save_checkpoint(os.path.join(tmp, CHECKPOINT_FILE))
            self.run.checkpoint(tmp, step=step, force=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._saved_for_stop = stopping
