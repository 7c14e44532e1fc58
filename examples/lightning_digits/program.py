#!/usr/bin/env python3
"""The Lightning training of train.py as a plain script with its own arguments, run by a sweep as a command
line (sweep_program.yaml: W&B's `program` / `command`) instead of as a function. `sl.Run.from_env()` builds
the trial's Run from the environment sweeplab sets for the program, so the same `SweeplabCallback` reports
`val_loss` each epoch (ASHA judges it), checkpoints, resumes a preempted or retried trial, and stops the
Trainer when the trial is pruned or the program gets a SIGTERM. Run by hand, the Run is a local one that
reports nowhere and the script just trains:

    sweeplab sweep examples/lightning_digits/sweep_program.yaml
    python examples/lightning_digits/program.py --lr=0.01 --epochs=3
"""

from __future__ import annotations

import argparse

import lightning.pytorch as L
import torch
from torch.utils.data import DataLoader
from train import load_data, make_module  # beside this script: its directory is on sys.path

import sweeplab as sl
from sweeplab.integrations.lightning import SweeplabCallback


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=9)
    args = p.parse_args()

    run = sl.Run.from_env(vars(args))   # the trial's Run under sweeplab; a local, silent one otherwise
    torch.set_num_threads(1)
    L.seed_everything(run.seed or 0, verbose=False)
    train_set, val_set = load_data()
    callback = SweeplabCallback(run)
    trainer = L.Trainer(max_epochs=2 if run.smoke else args.epochs, limit_train_batches=3 if run.smoke else 1.0,
                        callbacks=[callback], accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(make_module(args.hidden, args.lr), DataLoader(train_set, batch_size=args.batch_size, shuffle=True),
                DataLoader(val_set, batch_size=256), ckpt_path=callback.resume_path())
    print(f"val_loss {callback.metrics.get('val_loss')}")


if __name__ == "__main__":
    main()
