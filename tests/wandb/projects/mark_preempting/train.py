# In the style of W&B's "Resume preemptible Sweeps runs" and "Signal handling and sweep runs" pages: a program on
# preemptible machines (SLURM, spot VMs) catches the scheduler's SIGTERM, calls `run.mark_preempting()`, saves
# and exits with a non-zero code; W&B requeues such a run (exit 0 would mark it finished). Here the first two
# starts are "preempted" (the SIGTERM is sent by the program to itself, standing in for the cluster's).
import os
import signal
import sys

import wandb

run = wandb.init()
starts = int(open("starts").read()) if os.path.exists("starts") else 0
with open("starts", "w") as f:
    f.write(str(starts + 1))


def on_sigterm(signum, frame):
    wandb.run.mark_preempting()
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, on_sigterm)
for epoch in range(3):
    run.log({"loss": run.config.lr / (epoch + 1)})
    if starts < 2 and epoch == 1:
        os.kill(os.getpid(), signal.SIGTERM)
