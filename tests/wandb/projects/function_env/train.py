# Records, per trial, what a W&B function trial sees of its W&B environment: before wandb.init, in a process
# it forks before wandb.init (as a DataLoader's workers are), and after it. The trial with lr 0.3 starts no
# W&B run (a function that uses W&B only sometimes).
import json
import multiprocessing
import os

import wandb


def _child(queue):
    queue.put(os.environ.get("WANDB_SWEEP_PARAM_PATH"))


def train(config):
    seen = {"lr": config["lr"], "before": os.environ.get("WANDB_SWEEP_PARAM_PATH")}
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue,))
    child.start()
    seen["forked"] = queue.get(timeout=60)
    child.join()
    if config["lr"] != 0.3:
        run = wandb.init(config=config)   # sweeplab's config object, taken as the dict it holds
        seen.update(config_lr=run.config.lr, after=os.environ.get("WANDB_SWEEP_PARAM_PATH"),
                    mode=os.environ.get("WANDB_MODE"))
        run.log({"loss": run.config.lr})
        run.finish()
    with open(os.environ["FUNCTION_ENV_OUT"], "a") as f:
        f.write(json.dumps(seen) + "\n")
    return {"loss": config["lr"]}
