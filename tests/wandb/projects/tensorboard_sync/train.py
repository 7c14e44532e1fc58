"""Stable-Baselines3's W&B integration (its docs and rl-baselines3-zoo): `wandb.init(sync_tensorboard=True)`,
and the metrics written by a TensorBoard writer (SB3's logger), never by `wandb.log`. W&B syncs them into the
run's history and summary; the sweep's metric is `rollout/ep_rew_mean`."""

import wandb
from torch.utils.tensorboard import SummaryWriter


def train():
    run = wandb.init(project="sb3", config={"lr": 0.1}, sync_tensorboard=True)
    writer = SummaryWriter(f"runs/{run.id}")
    lr = run.config.lr
    for step in range(4):
        writer.add_scalar("rollout/ep_rew_mean", lr * step, step * 100)
        writer.add_scalar("train/loss", 1.0 / (step + 1), step * 100)
    writer.close()
    run.finish()


if __name__ == "__main__":
    train()
