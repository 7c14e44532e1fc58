# Shaped like wandb/examples' nested-config CLI example program: `wandb.init(project=..., config=args)` with an
# argparse Namespace whose `--optimizer` is a string, nested values read through `wandb.config[...][...]`, a
# fake loss per epoch, `wandb.finish()`.
import argparse

import wandb

parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--project", type=str, default=None, help="project")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch_size", type=int, default=16)
parser.add_argument("--optimizer", type=str, default=None)

if __name__ == "__main__":
    args = parser.parse_args()
    wandb.init(project=args.project, config=args)
    for epoch in range(wandb.config["epochs"]):
        _batch_size = wandb.config["batch_size"]
        _lr = wandb.config["optimizer"]["lr"]
        _beta = wandb.config["optimizer"]["nadam"]["beta"]
        print(f"Fake training with batch size {_batch_size} and lr {_lr} and beta {_beta}")
        _fake_loss = 1 - (epoch / wandb.config["epochs"]) * _lr * _batch_size
        wandb.log({"loss": _fake_loss})
    wandb.finish()
