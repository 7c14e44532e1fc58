"""Keras 3: a callback for `model.fit` that reports each epoch's logs through the trial's Run, checkpoints
through `run.checkpoint`, and sets `model.stop_training` when the trial should stop. Any Keras backend
(torch, jax, tensorflow: whichever `KERAS_BACKEND` or ~/.keras/keras.json selects).

    from sweeplab.integrations.keras import SweeplabCallback

    def train(config, run):
        model = build_and_compile(config)
        callback = SweeplabCallback(run)
        start = callback.restore(model)          # 0, or the epoch to resume from (weights and optimizer loaded)
        model.fit(x, y, validation_data=(xv, yv), epochs=config.epochs, initial_epoch=start,
                  callbacks=[callback])
        return callback.metrics
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeplab._imports import optional_import
from sweeplab.integrations import scalars
from sweeplab.run import Run

__all__ = ["SweeplabCallback"]

keras = optional_import("keras", "keras", "the Keras callback")
WEIGHTS_FILE = "model.weights.h5"   # model.save_weights: the layers' and the optimizer's variables
STATE_FILE = "sweeplab-keras.json"  # {"epoch": the epoch to resume at}


class SweeplabCallback(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Connects `model.fit` to a trial's `Run`.

    At the end of each epoch it logs the epoch's logs (`loss`, `val_loss`, metrics...) with
    `run.log(..., step=epoch)` (0-based, as Keras counts), saves the weights with the optimizer's state when
    `trial.checkpoint_every` says a checkpoint is due, and sets `model.stop_training` once `run.should_stop` is
    true. A stop that arrives during an epoch (a SIGTERM) is seen at the next batch: training stops there,
    a last checkpoint is written, and the resumed attempt does that epoch again from the saved weights;
    the cut epoch's partial logs are not reported.

    run         the trial's Run
    metrics     names to report (default: every number in the epoch's logs)
    checkpoint  False: never checkpoint (and `restore()` returns 0)
    """

    def __init__(self, run: Run, *, metrics: Sequence[str] | None = None, checkpoint: bool = True) -> None:
        super().__init__()
        self.run = run
        self.keys = list(metrics) if metrics is not None else None
        self.checkpoint = checkpoint
        self.metrics: dict[str, float] = {}   # the last reported epoch's values (what `train` can return)
        self._epoch = 0
        self._cut = False                     # training was stopped in the middle of `_epoch`
        self._weights: str | None = None      # a checkpoint's weights for a model `fit` has yet to build

    # ------------------------------------------------------------------ resume
    def restore(self, model: Any) -> int:
        """Load this trial's newest checkpoint into `model` (compiled) and return the epoch to pass as
        `model.fit(initial_epoch=...)`; 0 when there is no checkpoint (a first attempt).

        A model that has no weights yet (a `Sequential` without an `Input`, a subclassed model never called:
        `fit` builds them from the first batch) gets them when `fit` has built it, before the first batch
        (`on_train_begin`); Keras refused them here ("loading weights into a model that has not yet been
        built"), and a preempted trial's next attempt failed."""
        if not self.checkpoint:
            return 0
        found = self.run.restore()
        if not isinstance(found, (str, os.PathLike)):
            return 0
        folder = Path(found)
        if not (folder / WEIGHTS_FILE).is_file() or not (folder / STATE_FILE).is_file():
            return 0
        epoch = int(json.loads((folder / STATE_FILE).read_text())["epoch"])
        if not getattr(model, "built", True):
            self._weights = str(folder / WEIGHTS_FILE)   # loaded once `fit` has built the model
            return epoch
        self._load(model, str(folder / WEIGHTS_FILE))
        return epoch

    @staticmethod
    def _load(model: Any, path: str) -> None:
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None and not optimizer.built:   # so that its saved variables have a place to go
            optimizer.build(model.trainable_variables)
        model.load_weights(path)

    # ------------------------------------------------------------------ hooks
    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self._weights is not None:   # `fit` built the model (and its optimizer) from the first batch
            path, self._weights = self._weights, None
            self._load(self.model, path)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = int(epoch)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.run.should_stop and not self._cut:
            self._cut = True
            self.model.stop_training = True
            self._save(self._epoch, resume_at=self._epoch)   # the cut epoch is done again on resume

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._cut:
            return
        metrics = scalars(logs or {}, self.keys)
        if metrics:
            self.metrics = metrics
            self.run.log(metrics, step=int(epoch))   # at a scheduler's rung: waits for the verdict
        self._save(int(epoch), resume_at=int(epoch) + 1)
        if self.run.should_stop:
            self.model.stop_training = True

    # ------------------------------------------------------------------ work
    def _save(self, step: int, resume_at: int) -> None:
        if not self.checkpoint or not self.run.checkpoint_due(step):
            return
        tmp = tempfile.mkdtemp(prefix="sweeplab-keras-")
        try:
            self.model.save_weights(os.path.join(tmp, WEIGHTS_FILE))
            Path(tmp, STATE_FILE).write_text(json.dumps({"epoch": resume_at}))
            self.run.checkpoint(tmp, step=step, force=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
