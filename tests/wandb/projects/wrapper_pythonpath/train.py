import argparse

import wandb

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
args = parser.parse_args()
run = wandb.init(config=args)
run.define_metric("val_loss", summary="min")
for epoch, scale in enumerate((3, 1, 2)):
    run.log({"val_loss": run.config.lr * scale, "metrics": {"acc": epoch}})
run.finish()
