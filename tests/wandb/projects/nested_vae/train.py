import wandb

defaults = {"lr": 1.0, "epochs": 4, "optimizer": {"name": "sgd"}}
run = wandb.init(config=defaults, project="vae", entity="someone", mode="online")
config = wandb.config
assert config.optimizer["name"] == "adam" and config.optimizer["betas"]["b1"] == 0.9, dict(config)
assert config.epochs == 4   # a default the sweep does not set
run.define_metric("val_acc", summary="max")
for epoch in range(config.epochs):
    acc = config.lr * (1 + epoch) if epoch < 2 else config.lr   # best at epoch 1
    wandb.log({"train_loss": 1 - acc}, commit=False)
    wandb.log({"val_acc": acc, "nested": {"x": epoch}})
wandb.log({"late": 1.0}, step=10)
run.summary["best_epoch"] = 1
wandb.finish()
