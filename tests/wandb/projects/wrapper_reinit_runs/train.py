import argparse

import wandb

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
args = parser.parse_args()
accs = []
for seed in range(2):
    run = wandb.init(reinit=True, config=args, name=f"seed {seed}", tags=[f"seed {seed}"])
    with run:
        for epoch in range(2):
            run.log({"acc": run.config.lr * (epoch + 1) + seed})
        accs.append(run.config.lr * 2 + seed)
run = wandb.init(reinit=True, config=args, name="mean")
run.log({"mean_acc": sum(accs) / len(accs)})
run.finish()
