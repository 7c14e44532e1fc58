import argparse
import ast

import wandb

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int)
parser.add_argument("--use_bn", type=ast.literal_eval)
parser.add_argument("--optimizer", type=ast.literal_eval)
args = parser.parse_args()
assert isinstance(args.use_bn, bool) and args.optimizer == {"lr": 0.001}
wandb.init(config=vars(args))
assert wandb.config.use_bn == args.use_bn
for epoch in range(args.epochs):
    wandb.log({"score": float(args.use_bn) + epoch})
if not args.use_bn:
    wandb.finish(exit_code=1)   # W&B marks such a run failed
