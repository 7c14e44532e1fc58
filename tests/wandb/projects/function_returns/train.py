# In the style of W&B function sweeps whose function also returns its last metrics, for callers outside the
# sweep (`return {"val_loss": val_loss, ...}`): W&B's agent ignores what the function returns, and the sweep
# sees the run's summary (here the best val_loss, `define_metric(summary="min")`).
import wandb


def train(config=None):
    with wandb.init(config=config) as run:
        run.define_metric("val_loss", summary="min")
        val_loss = None
        for epoch in range(3):
            val_loss = run.config.lr * (1 + abs(epoch - 1))   # best at epoch 1: lr
            run.log({"val_loss": val_loss, "epoch": epoch})
    return {"val_loss": val_loss, "epochs": 3}
