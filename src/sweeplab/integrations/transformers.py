"""Hugging Face Transformers: a `TrainerCallback` that reports a `Trainer`'s logs and evaluation metrics
through the trial's Run, keeps its checkpoint directories through `run.checkpoint`, and stops training when
the trial should stop.

    from sweeplab.integrations.transformers import SweeplabCallback

    def train(config, run):
        callback = SweeplabCallback(run)
        trainer = Trainer(model=model, args=TrainingArguments(output_dir=..., eval_strategy="epoch",
                                                               save_strategy="no", report_to="none"),
                          train_dataset=train_set, eval_dataset=val_set, callbacks=[callback])
        trainer.train(resume_from_checkpoint=callback.resume_path())   # None on a first attempt
        return callback.metrics
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeplab._imports import optional_import
from sweeplab.integrations import scalars
from sweeplab.run import Run

__all__ = ["SweeplabCallback"]

_transformers = optional_import("transformers", "transformers", "the Hugging Face Trainer callback")
TrainerCallback = _transformers.TrainerCallback
_PREFIX = getattr(_transformers.trainer_utils, "PREFIX_CHECKPOINT_DIR", "checkpoint")
_STATE_FILE = "trainer_state.json"   # what makes a directory a Trainer checkpoint


class SweeplabCallback(TrainerCallback):  # type: ignore[misc,valid-type]
    """Connects a Hugging Face `Trainer` to a trial's `Run`.

    - every `Trainer.log` (training loss, learning rate, `eval_*` metrics) goes to `run.log` at
      `step=state.global_step` (`step="epoch"`: the epoch number, 1-based: epochs trained, or the epoch a
      stop interrupted); schedulers judge
      the sweep's metric, typically `eval_loss`;
    - after an evaluation, when `trial.checkpoint_every` says a checkpoint is due, the callback asks the
      Trainer to save (`control.should_save`) and keeps the checkpoint directory it writes with
      `run.checkpoint`; the Trainer's own saves (`save_strategy`) are kept the same way when due. So
      `save_strategy="no"` leaves the rhythm to the sweep's policy;
    - once `run.should_stop` is true (pruned, stopped by a rule, preempted, the sweep ending), at the next
      step it sets `control.should_training_stop`, and `control.should_save` so that a last checkpoint is
      written on the way out; `resume_path()` gives it to `trainer.train(resume_from_checkpoint=...)`.

    run         the trial's Run
    metrics     names to report (default: every number the Trainer logs)
    checkpoint  False: never checkpoint (and `resume_path()` is None)
    step        "global_step" (optimizer steps, the default) or "epoch"
    """

    def __init__(self, run: Run, *, metrics: Sequence[str] | None = None, checkpoint: bool = True,
                 step: str = "global_step") -> None:
        if step not in ("global_step", "epoch"):
            raise ValueError(f"SweeplabCallback: step must be 'global_step' or 'epoch', got {step!r}")
        self.run = run
        self.keys = list(metrics) if metrics is not None else None
        self.checkpoint = checkpoint
        self.step_unit = step
        self.metrics: dict[str, float] = {}   # the last value of every reported name (what `train` can return)
        self._save_due = False                # this callback asked for the save that on_save will see
        self._saved_for_stop = False

    # ------------------------------------------------------------------ resume
    def resume_path(self) -> str | None:
        """The Trainer checkpoint directory of this trial's newest run checkpoint (for
        `trainer.train(resume_from_checkpoint=...)`), or None when there is none (a first attempt)."""
        if not self.checkpoint:
            return None
        found = self.run.restore()
        if not isinstance(found, (str, os.PathLike)) or not (Path(found) / _STATE_FILE).is_file():
            return None
        return str(found)

    # ------------------------------------------------------------------ hooks
    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        metrics = scalars(logs or {}, self.keys)
        if metrics and state.is_world_process_zero:
            self.metrics.update(metrics)
            self.run.log(metrics, step=self._step(state))   # at a scheduler's rung: waits for the verdict
        self._check(control)

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, Any] | None = None,
                    **kwargs: Any) -> None:
        if self.checkpoint and not self._save_due and self.run.checkpoint_due(self._step(state)):
            control.should_save = True
            self._save_due = True
        self._check(control)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._check(control)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.checkpoint or not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"{_PREFIX}-{state.global_step}"
        step = self._step(state)
        stopping = self.run.should_stop
        if folder.is_dir() and (self._save_due or self.run.checkpoint_due(step)):
            self.run.checkpoint(str(folder), step=step, force=True)
            self._saved_for_stop = stopping
        self._save_due = False

    # ------------------------------------------------------------------ work
    def _check(self, control: Any) -> None:
        if not self.run.should_stop:
            return
        control.should_training_stop = True
        if self.checkpoint and not self._saved_for_stop and not self._save_due:
            control.should_save = True
            self._save_due = True

    def _step(self, state: Any) -> int:
        if self.step_unit == "epoch":   # the epoch being trained, 1-based: 3.25 (a stop mid-epoch) is epoch 4
            return math.ceil((state.epoch or 0) - 1e-9)
        return int(state.global_step)
