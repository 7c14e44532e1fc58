import wandb

run = wandb.init()
for epoch in range(1, 4):
    wandb.log({"loss": run.config.offset + 1.0 / epoch, "epoch": epoch}, step=epoch)   # steps from 1
