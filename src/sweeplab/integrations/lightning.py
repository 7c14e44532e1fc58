"""PyTorch Lightning: a `Callback` that reports a `Trainer`'s metrics through the trial's Run, checkpoints
through `run.checkpoint`, and stops the Trainer when the trial should stop.

    from sweeplab.integrations.lightning import SweeplabCallback

    def train(config, run):
        callback = SweeplabCallback(run)
        trainer = L.Trainer(max_epochs=config.epochs, callbacks=[callback], enable_checkpointing=False)
        trainer.fit(model, datamodule, ckpt_path=callback.resume_path())   # None on a first attempt
        return callback.metrics

Multi-process (DDP) trials (`resources.workers` > 1): `L.Trainer(**trainer_options(), ...)` makes the Trainer
DDP over the trial's ranks (it finds them through the torchrun environment sweeplab sets); the callback's
decisions are then agreed across ranks (see `SweeplabCallback`).

Works with the `lightning` package (`lightning.pytorch`) and with the older `pytorch_lightning`.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeplab.integrations import scalars
from sweeplab.run import Run

__all__ = ["CHECKPOINT_FILE", "SweeplabCallback", "trainer_options"]

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


def _config_loads_with_weights_only() -> None:
    """Let `torch.load(weights_only=True)` (Lightning's resume with `ckpt_path`, torch >= 2.6) rebuild the trial's
    `Config`: a module built from it with `self.save_hyperparameters()` (the usual `MyModule(config)`) puts it
    into every checkpoint, and the load refused it ("Unsupported global: sweeplab.config.Config"), so every
    attempt after a preemption failed. A Config is plain data (a read-only copy of a dict)."""
    try:
        import torch.serialization

        from sweeplab.config import Config

        torch.serialization.add_safe_globals([Config])
    except (ImportError, AttributeError):   # no torch, or one older than safe globals (weights_only off there)
        pass


_config_loads_with_weights_only()


def trainer_options() -> dict[str, Any]:
    """The `L.Trainer` arguments that match this process's launch: `{}` in a single-process trial; in a
    multi-process one (sweeplab's `resources.workers`, or torchrun: `WORLD_SIZE` > 1), DDP over its ranks:
    `{"strategy": "ddp", "devices": LOCAL_WORLD_SIZE, "num_nodes": WORLD_SIZE // LOCAL_WORLD_SIZE}`.
    Lightning finds the ranks themselves through the torchrun variables (its TorchElasticEnvironment)."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return {}
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)) or world)
    if local < 1 or world % local:
        raise ValueError(f"trainer_options: Lightning needs the same number of ranks on every node, but "
                         f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local}")
    return {"strategy": "ddp", "devices": local, "num_nodes": world // local}


class SweeplabCallback(pl.Callback):  # type: ignore[misc,name-defined]
    """Connects a Lightning `Trainer` to a trial's `Run`.

    At the end of each training epoch that ran validation (sanity checks excluded; of every training epoch
    when the Trainer has no validation loop) it logs `trainer.callback_metrics` with
    `run.log(..., step=trainer.current_epoch)`: the epoch's validation metrics and its training metrics
    logged with `on_epoch=True` (which Lightning reduces after the epoch's validation run). It
    writes a checkpoint when `trial.checkpoint_every` says one is due (`trainer.save_checkpoint` into a
    directory that `run.checkpoint` keeps), and sets `trainer.should_stop` once `run.should_stop` is true.
    A stop that arrives during an epoch (a SIGTERM) is seen at the next training batch: a last checkpoint is
    written there, on the way out, and the next attempt resumes from it via `resume_path()`.

    Under DDP every rank runs the callback, and each decision is agreed by all of them before anyone acts,
    so that collective calls match: whether to stop (any rank has seen the stop request: they see it at
    slightly different moments) is reduced across ranks after every training batch and every report;
    whether a checkpoint is due is rank 0's decision (its `Run` keeps the policy), reduced with it; every
    rank then calls `trainer.save_checkpoint` (a collective call: Lightning writes the file on rank 0) and
    rank 0 hands it to `run.checkpoint`. Lightning's own SIGTERM handler, which broadcasts from inside the
    signal handler and can leave ranks one batch apart, is replaced for the run of `fit` by the trial's
    (which sets `run.should_stop`), so a preemption stops every rank at the same batch like any other stop.

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
        self._saved_for_stop = False          # the same on every rank: set only after agreed decisions
        self._stopping = False
        self._sigterm: Any = None             # the trial's SIGTERM handler, from before Lightning's
        self._validated = False               # a validation run of `fit` ended during this training epoch
        self._stage = ""                      # setup's stage: "fit", "validate", "test", "predict"

    def __getstate__(self) -> dict[str, Any]:
        # Lightning's `ddp_spawn` pickles the Trainer, callbacks and all, for processes it starts itself: they
        # would hold a copy of the Run cut off from the trial (the pickling failed deep inside multiprocessing
        # with "Can't pickle local object 'fd_writer.<locals>.write'")
        raise TypeError(
            "SweeplabCallback cannot be pickled: it holds the trial's Run, which only this process can report "
            "through. Lightning's strategy='ddp_spawn' (and 'ddp' or devices > 1 in a trial of one process) starts "
            "processes of its own; let sweeplab start the trial's processes instead: `resources: {workers: N}` "
            "in the spec and `L.Trainer(**trainer_options(), ...)` (docs/integrations.md, multi-process trials)")

    # ------------------------------------------------------------------ whose checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Written into every Lightning checkpoint while this callback is on the Trainer (its own, and those of
        the Trainer's `ModelCheckpoint`): which trial wrote it."""
        return {"sweep": self.run.sweep, "trial": self.run.trial}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Refuse to resume `fit` from another trial's checkpoint. Lightning's own files (`ModelCheckpoint`'s
        `last.ckpt`, found by `fit(ckpt_path="last")`) go under the working directory, which every trial of a
        sweep shares: a trial restored a sibling's (or an earlier sweep's) weights, optimizer and epoch, and
        trained from there, or not at all."""
        sweep, trial = state_dict.get("sweep"), state_dict.get("trial")
        if sweep is None or self.run.sweep is None or (sweep, trial) == (self.run.sweep, self.run.trial):
            return
        if self._stage not in ("", "fit"):   # trainer.test(ckpt_path=...): reads weights, trains nothing on
            return
        if sweep != self.run.sweep and trial == 0 and self.run.trial == 0:
            # a local run (`sweeplab run`, `python train.py`: each a sweep of one trial) going on from the last one
            warnings.warn(f"resuming from a checkpoint of sweep {sweep!r} (its trial 0) in sweep {self.run.sweep!r}",
                          stacklevel=2)
            return
        raise RuntimeError(
            f"the checkpoint Lightning restores was written by trial {trial} of sweep {sweep!r}, not by this trial "
            f"({self.run.trial} of {self.run.sweep!r}): the trials of a sweep share its working directory, where "
            "Lightning keeps its checkpoints (ModelCheckpoint, `ckpt_path=\"last\"`). Resume with "
            "`ckpt_path=callback.resume_path()`, or give each trial its own directory: "
            "`L.Trainer(default_root_dir=f\"runs/{run.sweep}/trial-{run.trial}\")`. To start from another run's "
            "weights, load them: `MyModule.load_from_checkpoint(path)`")

    # ------------------------------------------------------------------ resume
    def resume_path(self) -> str | None:
        """The Lightning checkpoint file of this trial's newest run checkpoint (for `trainer.fit(ckpt_path=)`),
        or None when there is none (a first attempt). Every rank of a DDP trial gets the same checkpoint."""
        if not self.checkpoint:
            return None
        found = self.run.restore()
        if not isinstance(found, (str, os.PathLike)):
            return None
        path = Path(found) / CHECKPOINT_FILE
        return str(path) if path.is_file() else None

    # ------------------------------------------------------------------ hooks
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._stage = str(getattr(stage, "value", stage))   # before Lightning restores a checkpoint (load_state_dict)
        if _main_thread():   # before `fit` registers Lightning's handler (on top of this one)
            self._sigterm = signal.getsignal(signal.SIGTERM)
        ranks = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if ranks > 1 and not _distributed(trainer) and self.run.rank == 0:
            warnings.warn(f"this trial runs {ranks} processes but the Trainer uses one (each rank trains alone): "
                          "pass `**trainer_options()` (sweeplab.integrations.lightning) to L.Trainer for DDP",
                          stacklevel=2)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # DDP: leave SIGTERM to the trial's handler (it sets run.should_stop, which every rank then agrees on);
        # Lightning restores the handlers it replaced when `fit` ends
        if _distributed(trainer) and callable(self._sigterm) and _main_thread():
            signal.signal(signal.SIGTERM, self._sigterm)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":   # not a sanity check, nor trainer.validate()
            return
        self._validated = True   # reported at the epoch's end, with the epoch's training metrics

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        # Lightning runs an epoch's validation before it reduces the epoch's `on_epoch=True` training metrics:
        # reported here, `train_loss` is this epoch's value, not the previous one's
        validated, self._validated = self._validated, False
        if validated or not getattr(trainer, "enable_validation", True):   # else: an epoch without validation
            self._report(trainer)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._stopping:
            return
        stop, _ = self._agree(trainer, due=False)
        if stop:
            # mid-epoch (preempted, pruned, or the sweep ends): save now, Lightning may not reach the epoch's end
            if not self._saved_for_stop:
                self._save(trainer)
                self._saved_for_stop = True
            self._stop(trainer)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        # Lightning ends `fit` on a SIGTERM with a SIGTERMException (a SystemExit) at its next check, also between
        # two batches of a validation run, where no training batch ends for `on_train_batch_end` to save at: the
        # stop's checkpoint was never written, and the next attempt went back to an older one. Saved here. (Under
        # DDP the trial's handler replaces Lightning's for `fit`, and a save here would be a collective call
        # that the ranks might not all make.)
        if (isinstance(exception, SystemExit) and self.run.should_stop and not self._saved_for_stop
                and not _distributed(trainer)):
            self._saved_for_stop = True
            self._save(trainer)

    # ------------------------------------------------------------------ work
    def _report(self, trainer: Any) -> None:
        metrics = scalars(trainer.callback_metrics, self.keys)
        if metrics:
            self.metrics = metrics
            if trainer.is_global_zero:
                self.run.log(metrics, step=int(trainer.current_epoch))   # at a rung: waits for the verdict
        due = self.checkpoint and not self._saved_for_stop and self.run.checkpoint_due(int(trainer.current_epoch))
        stop, due = self._agree(trainer, due=due)   # `due`: rank 0's decision (checkpoint_due is False elsewhere)
        if (due or stop) and not self._saved_for_stop:   # a stop always lets a checkpoint through
            self._save(trainer)
            self._saved_for_stop = stop
        if stop:
            self._stop(trainer)

    def _stop(self, trainer: Any) -> None:
        self._stopping = True
        trainer.should_stop = True

    def _agree(self, trainer: Any, *, due: bool) -> tuple[bool, bool]:
        """(stop, due) as every rank will see them: stop if any rank's Run says so; `due` if any rank says so
        (only rank 0's Run can). One all-reduce under DDP, nothing in a single process."""
        stop = self.run.should_stop
        if not _distributed(trainer):
            return stop, due
        import torch

        flags = torch.tensor([float(stop), float(due)], device=trainer.strategy.root_device)
        flags = trainer.strategy.reduce(flags, reduce_op="sum")
        return bool(flags[0].item() > 0), bool(flags[1].item() > 0)

    def _save(self, trainer: Any) -> None:
        """`trainer.save_checkpoint` (by every rank) into a temporary directory that rank 0 hands to
        `run.checkpoint`. The caller has decided (on every rank alike) that this checkpoint is written."""
        if not self.checkpoint:
            return
        tmp = tempfile.mkdtemp(prefix="sweeplab-lightning-")
        try:
            trainer.save_checkpoint(os.path.join(tmp, CHECKPOINT_FILE))
            if trainer.is_global_zero:
                self.run.checkpoint(tmp, step=int(trainer.current_epoch), force=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _distributed(trainer: Any) -> bool:
    return int(getattr(trainer, "world_size", 1) or 1) > 1


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
