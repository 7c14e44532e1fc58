"""A sweeplab trial function, `train(config, run)`, that keeps its own W&B logging beside its reports, as
docs/integrations.md promises ("Your own TensorBoard, MLflow or W&B logging keeps working"): W&B gets a row
per batch, the trial a report per epoch. Lightning's `WandbLogger` beside `SweeplabCallback` does the same
(`trainer/global_step` rows in W&B, `run.log(step=current_epoch)` from the callback)."""

import wandb


def train(config, run):
    wandb.init(project="own-logging", config=dict(config))
    val = None
    for epoch in range(config.epochs):
        for batch in range(3):
            wandb.log({"batch_loss": config.lr * (batch + 1)})
        val = config.lr / (epoch + 1)
        wandb.log({"val_loss": val, "epoch": epoch})
        run.log({"val_loss": val}, step=epoch)   # at a rung: waits for the verdict
        if run.should_stop:   # pruned: the function ends as it chooses (a last checkpoint, a note)
            print(f"stopped cleanly after epoch {epoch}")
            break
    wandb.finish()
    return {"val_loss": val}
