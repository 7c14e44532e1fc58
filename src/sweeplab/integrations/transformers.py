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
from sweeplab.integrations import claim_directory, release_directory, scalars
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

    Multi-process trials (`resources.workers` > 1): the Trainer runs DDP over the ranks by itself (it reads
    the torchrun environment sweeplab sets). Every rank runs the callback, and its decisions are agreed
    before anyone acts on them, so the Trainer's collective calls (the gradients' all-reduce, the saves)
    stay matched: after every optimizer step the ranks all-reduce whether any of them has seen the stop
    request (they see it at slightly different moments), and after an evaluation whether a checkpoint is
    due (rank 0's decision: its `Run` keeps the policy). All ranks then set the same `control` flags, so
    they save (the Trainer writes the checkpoint from rank 0) and stop at the same step; rank 0 keeps the
    checkpoint with `run.checkpoint` and reports the metrics.

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
        # the same on every rank of a DDP trial: changed only after decisions all ranks agreed on
        self._save_due = False                # this callback asked for the save that on_save will see
        self._saved_for_stop = False
        self._stopping = False

    # ------------------------------------------------------------------ resume
    def resume_path(self) -> str | None:
        """The Trainer checkpoint directory of this trial's newest run checkpoint (for
        `trainer.train(resume_from_checkpoint=...)`), or None when there is none (a first attempt). Every
        rank of a DDP trial gets the same checkpoint."""
        if not self.checkpoint:
            return None
        found = self.run.restore()
        if not isinstance(found, (str, os.PathLike)) or not (Path(found) / _STATE_FILE).is_file():
            return None
        return str(found)

    # ------------------------------------------------------------------ hooks
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # the trials of a sweep share its working directory: a fixed output_dir is one for all of them
        if self.checkpoint and state.is_world_process_zero and args.output_dir:
            claim_directory(args.output_dir, self.run.sweep, self.run.trial)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if args.output_dir:
            release_directory(args.output_dir)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        metrics = scalars(logs or {}, self.keys)
        if metrics and state.is_world_process_zero:
            self.metrics.update(metrics)
            self.run.log(metrics, step=self._step(state))   # at a scheduler's rung: waits for the verdict
        if _collective() is None:   # under DDP the stop is agreed at the next step's end instead
            self._check(args, control)

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, Any] | None = None,
                    **kwargs: Any) -> None:
        due = self.checkpoint and not self._save_due and self.run.checkpoint_due(self._step(state))
        self._check(args, control, due=due)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._check(args, control)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        stopping = self._stopping if _collective() is not None else self.run.should_stop
        if self.checkpoint and state.is_world_process_zero:
            folder = Path(args.output_dir) / f"{_PREFIX}-{state.global_step}"
            step = self._step(state)
            if folder.is_dir() and (self._save_due or self.run.checkpoint_due(step)):
                self.run.checkpoint(str(folder), step=step, force=True)
        if self.checkpoint and (self._save_due or stopping):   # on every rank alike (rank 0 kept it)
            self._saved_for_stop = self._saved_for_stop or stopping
        self._save_due = False

    # ------------------------------------------------------------------ work
    def _check(self, args: Any, control: Any, *, due: bool = False) -> None:
        """Set `control`'s flags from the stop request and `due` (a checkpoint rank 0 wants), both agreed
        across the ranks first under DDP."""
        stop, due = self._agree(args, self.run.should_stop and not self._stopping, due)
        if due and not self._save_due:
            control.should_save = True
            self._save_due = True
        if not (stop or self._stopping):
            return
        self._stopping = True
        control.should_training_stop = True
        if self.checkpoint and not self._saved_for_stop and not self._save_due:
            control.should_save = True
            self._save_due = True

    def _agree(self, args: Any, stop: bool, due: bool) -> tuple[bool, bool]:
        """(stop, due), each true if it is on any rank: one all-reduce under DDP, nothing in one process."""
        dist = _collective()
        if dist is None:
            return stop, due
        import torch

        flags = torch.tensor([float(stop), float(due)], device=args.device)
        dist.all_reduce(flags)   # a sum
        return bool(flags[0].item() > 0), bool(flags[1].item() > 0)

    def _step(self, state: Any) -> int:
        if self.step_unit == "epoch":   # the epoch being trained, 1-based: 3.25 (a stop mid-epoch) is epoch 4
            return math.ceil((state.epoch or 0) - 1e-9)
        return int(state.global_step)


def _collective() -> Any:
    """`torch.distributed` when this process is one of several ranks of an initialised process group, else None."""
    import sys

    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() <= 1:
        return None
    return dist
