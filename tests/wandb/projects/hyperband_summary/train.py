"""The sweep's metric is the run's best loss (its summary, `define_metric(summary="min")`); the loss goes up
and down. Under W&B's agent a run the sweep stops keeps that summary (W&B's server holds it)."""
import time

import wandb

run = wandb.init()
wandb.define_metric("loss", summary="min")
for epoch in range(1, 40):
    wandb.log({"loss": run.config.offset + [1.0, 0.5, 2.0][epoch % 3], "epoch": epoch})
    time.sleep(0.05)
