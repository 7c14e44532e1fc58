import os

import wandb


def train():
    with wandb.init() as run:
        run.log({"loss": run.config.lr, "pid": os.getpid()})
