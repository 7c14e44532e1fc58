"""A W&B function sweep whose function starts its DDP ranks as processes (torch.multiprocessing.spawn in
public scripts; plain multiprocessing here, started by fork or spawn as DDP_START says). Rank 0 logs to W&B,
the other rank has a disabled run. Under W&B's agent rank 0's run is the sweep's run: it inherits the
agent's W&B environment."""
import multiprocessing
import os

import wandb


def worker(rank):
    run = wandb.init(mode="disabled" if rank > 0 else None)
    wandb.define_metric("loss", summary="min")
    for epoch in range(3):
        wandb.log({"loss": [3, 1, 2][epoch] * run.config.lr, "rank": rank})
    wandb.finish()


def main():
    ctx = multiprocessing.get_context(os.environ.get("DDP_START", "spawn"))
    ranks = [ctx.Process(target=worker, args=(rank,)) for rank in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()
        assert p.exitcode == 0, p.exitcode


if __name__ == "__main__":
    sweep_id = wandb.sweep({"method": "grid", "parameters": {"lr": {"values": [1.0, 2.0]}}})
    wandb.agent(sweep_id, main)
