import wandb


def train():
    run = wandb.init()
    config = run.config
    for epoch in range(config.epochs):
        wandb.log({"val_loss": config.first_layer_convs / (epoch + 1), "dense_layer_size": config.dense_layer_size})
    run.finish()


if __name__ == "__main__":
    train()
