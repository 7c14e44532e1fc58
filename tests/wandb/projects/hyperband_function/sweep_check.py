# In the style of wandb/wandb tests/standalone_tests/sweep_check.py: train(**kwargs) for wandb.agent, logging
# val_acc once per epoch. W&B's agent ends a run its controller stops (it raises in the run's thread).
import wandb


def train(**kwargs):
    run = wandb.init()
    with run:
        epochs = run.config.get("epochs", 27)
        for e in range(epochs):
            wandb.log(dict(val_acc=2 + run.config.param1 * (e + 1)))
