# Shaped like lucacorbucci/FlowerFLTemplate, FLTemplate/main.py and Aggregations/aggregations.py: argparse with
# required flags and `type=bool` ones, a SIGINT handler, `wandb.init(project=..., name=run_name)` (every run named
# "Test"), and per federated round: a `{"FL Round": r}` row per client, a train row, then the validation row
# with the sweep's metric (so its _step is not the round); `wandb_run.finish()`.
import argparse
import os
import signal
import sys
from typing import Any

import wandb


def signal_handler(sig: int, frame: Any) -> None:
    print("Gracefully stopping your experiment! Keep calm!")
    sys.exit(0)


parser = argparse.ArgumentParser(description="Flower Simulation with PyTorch")
parser.add_argument("--num_clients", type=int, default=None, required=True)
parser.add_argument("--num_rounds", type=int, default=None, required=True)
parser.add_argument("--sampled_validation_nodes_per_round", type=float, default=None)
parser.add_argument("--sampled_train_nodes_per_round", type=float, default=None)
parser.add_argument("--sampled_test_nodes_per_round", type=float, default=None)
parser.add_argument("--num_epochs", type=int, default=None)
parser.add_argument("--fed_dir", type=str, default=None, required=True)
parser.add_argument("--FL_setting", type=str, default=None, required=True)
parser.add_argument("--dataset_name", type=str, default=None)
parser.add_argument("--sweep", type=bool, default=False)
parser.add_argument("--wandb", type=bool, default=True)
parser.add_argument("--project_name", type=str, default="FLTemplate")
parser.add_argument("--run_name", type=str, default=None)
parser.add_argument("--partitioner_type", type=str, default="iid")
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--optimizer", type=str, default="adam")
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--weight_decay", type=float, default=1e-5)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal_handler)
    args = parser.parse_args()
    assert args.sweep is True and args.sampled_test_nodes_per_round == 0.0 and args.num_rounds == 10
    os.makedirs(args.fed_dir, exist_ok=True)
    wandb_run = wandb.init(project=args.project_name, name=args.run_name) if args.run_name else None
    for server_round in range(1, args.num_rounds + 1):
        for _client in range(args.num_clients):
            wandb_run.log({"FL Round": server_round})
        wandb_run.log({"Train Loss": 1 / server_round, "FL Round": server_round})
        accuracy = min(1.0, args.lr * 10 * server_round * args.num_epochs)
        wandb_run.log({"Validation Loss": 1 - accuracy, "Validation_Accuracy": accuracy, "FL Round": server_round})
    with open(os.path.join(args.fed_dir, f"{wandb_run.id}.done"), "w") as out:
        out.write(str(accuracy))
    if wandb_run:
        wandb_run.finish()
