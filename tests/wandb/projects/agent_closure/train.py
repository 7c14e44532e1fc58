# In the style of public scripts that create their sweep in __main__ and hand wandb.agent a closure over the
# parsed arguments (`wandb.agent(sweep_id, function=lambda: main(args), count=30)`, found by searching for
# `wandb.agent(sweep_id, function=lambda`): no --function target can name it. Run as the sweep's program,
# each trial is one run of the agent's function.
import argparse

import wandb


def main(args):
    with wandb.init(project=args.project) as run:
        lr = wandb.config.lr
        if lr > 0.4:
            raise ValueError(f"lr {lr} diverged")
        run.log({"loss": (lr - 0.2) ** 2 + args.offset})


def sweep_main():
    """The same closure from a function the sweep calls (`--function train.py:sweep_main`)."""
    sweep_id = wandb.sweep({"method": "grid", "parameters": {"lr": {"values": [0.1, 0.5]}}})
    wandb.agent(sweep_id, function=lambda: main(argparse.Namespace(offset=3.0, project="closure-demo")))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--offset", type=float, default=0.0)
    parser.add_argument("--project", default="closure-demo")
    args = parser.parse_args()
    if args.sweep:
        sweep_config = {"method": "grid", "metric": {"name": "loss", "goal": "minimize"},
                        "parameters": {"lr": {"values": [0.1, 0.5]}}}
        sweep_id = wandb.sweep(sweep_config, project=args.project)
        wandb.agent(sweep_id, function=lambda: main(args), count=30)
    else:
        main(args)
