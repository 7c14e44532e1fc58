"""`wandb.init(sync_tensorboard=True)` with no `run.finish()`: the run ends with the process, as wandb's exit
hook ends it (rl-baselines3-zoo-style scripts)."""

import wandb
from torch.utils.tensorboard import SummaryWriter

run = wandb.init(project="sb3", sync_tensorboard=True)
writer = SummaryWriter(f"runs/{run.id}")
for step in range(4):
    writer.add_scalar("rollout/ep_rew_mean", run.config.lr * step, step * 100)
writer.close()
