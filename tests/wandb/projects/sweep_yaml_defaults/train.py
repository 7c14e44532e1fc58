# In the style of wandb/gitbook guides/sweeps/add-w-and-b-to-your-code.md (CLI tab): the program loads the
# sweep's own config.yaml and passes it to wandb.init(config=...); the sweep's values still reach wandb.config.
import numpy as np
import wandb
import yaml


def main():
    with open("./config.yaml") as file:
        config = yaml.load(file, Loader=yaml.FullLoader)
    wandb.init(config=config)
    bs = wandb.config.batch_size
    for epoch in np.arange(1, wandb.config.epochs):
        wandb.log({"epoch": epoch, "val_acc": epoch / 10 + bs / 1000})


main()
