# In the style of wandb/wandb tests/standalone_tests/sweep_check.py: a train(**kwargs) for wandb.agent that
# uses the run as a context manager, reads run.config.get(...) and then copies wandb/debug.log, which W&B
# writes under ./wandb in the working directory.
import shutil

import wandb

L = 10


def train(**kwargs):
    run = wandb.init()
    with run:
        epochs = run.config.get("epochs", 27)
        for e in range(epochs):
            n = float(L) * (float(e + 1) / epochs)
            wandb.log(dict(val_acc=run.config.param0 + run.config.param1 * n))
        run_id = run.id
    shutil.copyfile("wandb/debug.log", f"wandb/debug-{run_id}.log")


if __name__ == "__main__":
    train()
