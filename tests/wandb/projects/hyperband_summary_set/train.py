"""W&B's "log summary metrics" idiom: the best loss so far set into the run's summary by hand
(`run.summary["best_loss"] = ...`), not logged. Under W&B's agent a run the sweep stops keeps it (each summary
change reaches W&B as it is made)."""
import time

import wandb

run = wandb.init()
best, best_epoch = None, 0
for epoch in range(1, 40):
    loss = run.config.offset + [1.0, 0.5, 2.0][epoch % 3]
    if best is not None:
        run.summary["best_loss"] = best   # what the epochs before this one reached
        run.summary.update({"best": {"epoch": best_epoch}})
    if best is None or loss < best:
        best, best_epoch = loss, epoch
    wandb.log({"loss": loss})
    time.sleep(0.05)
