# In the style of public W&B sweep programs: take wandb.config only when W&B says the run is in a sweep
# (`if wandb.run.sweep_id is not None: experiment_config = wandb.config`), and keep each run's checkpoints
# under `checkpoints/<sweep_id>/<run name>` (os.path.join of None fails), and log `"Wandb url: " + wandb.run.url`.
# Ends with sys.exit(). Records what it saw, per run.
import json
import os
import sys

import wandb


def train():
    in_sweep_env = os.environ.get("WANDB_SWEEP_ID")   # read before wandb.init, as W&B's agent sets it first
    wandb.setup()   # as W&B's guide to distributed training has it: wandb reads its settings here
    wandb.init(project="difficulty_prediction", id="fixed-run-id", resume="allow")   # W&B ignores id in a sweep
    experiment_config = {"lr": 1.0}
    if wandb.run.sweep_id is not None:
        experiment_config = wandb.config
    ckpt = os.path.join("checkpoints", wandb.run.sweep_id, wandb.run.name)
    os.makedirs(ckpt)   # one folder per run: two runs of the sweep must not share one
    with open(os.path.join(ckpt, "seen.json"), "w") as f:
        json.dump({"env": in_sweep_env, "files_sweep_id": wandb.run.settings.sweep_id, "id": wandb.run.id,
                   "agent_id": os.environ.get("WANDB_RUN_ID"), "url": wandb.run.url, "dir": wandb.run.dir}, f)
    print("Wandb url: " + wandb.run.url)   # a string under W&B's agent; None in an offline run
    wandb.log({"test_loss": experiment_config["lr"]})
    wandb.finish()
    sys.exit()   # as public programs end (`wandb_finish(); sys.exit()`): under W&B's agent the job just ends


if __name__ == "__main__":
    train()
