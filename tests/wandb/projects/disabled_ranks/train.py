"""In the style of DDP training scripts run by W&B sweeps: every rank calls wandb.init, the ranks other than 0
with a disabled run so that their wandb.log calls do nothing (`mode="disabled" if rank > 0 else "online"`, or
`os.environ["WANDB_MODE"] = "disabled"` on non-zero ranks, as `maybe_disable_wandb_for_non_zero_ranks` does).
Rank 0 keeps the best validation loss as the run's summary (define_metric summary="min"); the other rank logs
its own, larger, losses and ends last. Under W&B's agent only rank 0's run reaches the sweep. `--disable none`:
the other rank's run is enabled too (scripts that call wandb.init on every rank); sweeplab keeps rank 0's."""
import os
import subprocess
import sys

import wandb

rank = int(os.environ.get("RANK", "0"))
how = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--disable=")), "mode")   # W&B's ${args}
if rank > 0 and how == "env":
    os.environ["WANDB_MODE"] = "disabled"
if rank == 0:
    other = subprocess.Popen([sys.executable, *sys.argv], env={**os.environ, "RANK": "1"})
# "mode": disabled by `mode=`; "env": by WANDB_MODE alone (no mode= given); "none": every rank's run enabled
mode = "disabled" if rank > 0 and how == "mode" else None if how == "env" else "online"
run = wandb.init(project="ddp", mode=mode)
wandb.define_metric("val_loss", summary="min")
scale = 1 if rank == 0 else 10
for epoch in range(3):
    wandb.log({"val_loss": [3, 1, 2][epoch] * scale * wandb.config.lr, "rank": rank})
wandb.finish()
if rank == 0:
    sys.exit(other.wait())
