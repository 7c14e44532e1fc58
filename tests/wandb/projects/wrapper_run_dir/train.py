import argparse
import os

import wandb

parser = argparse.ArgumentParser()
parser.add_argument("--where")
args = parser.parse_args()
if args.where == "dir":   # a folder of the program's own, below its working directory
    run = wandb.init(config=args, dir=os.path.join("outputs", "logs"))
elif args.where == "env":   # WANDB_DIR set by the program itself
    os.environ["WANDB_DIR"] = "runs"
    os.makedirs("runs", exist_ok=True)
    run = wandb.init(config=args)
elif args.where == "settings":
    run = wandb.init(config=args, settings=wandb.Settings(root_dir=os.path.abspath("by_settings")))
else:   # outside the working directory
    run = wandb.init(config=args, dir=os.path.join(os.path.dirname(os.getcwd()), "elsewhere"))
for value in (3.0, 1.0, 2.0):
    run.log({"val_loss": value + len(args.where)})
run.finish()
