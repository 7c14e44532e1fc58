import wandb


def train():
    with wandb.init() as run:
        for step in range(3):
            run.log({"loss": run.config.lr / (step + 1)}, step=step)


if __name__ == "__main__":
    wandb.agent("sweep-id", function=train, count=2)
