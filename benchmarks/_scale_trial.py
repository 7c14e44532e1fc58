"""The trial of benchmarks/scale.py's stores (imported by worker processes): a no-op that logs what a small
training loop does, several metrics per step, so the store holds realistic metric rows."""


def logged(config, run):
    x = float(config["x"])
    steps = int(config.get("steps", 10))
    for step in range(steps):
        decay = 1.0 / (1 + step)
        run.log({"loss": x + decay, "val_loss": x + 1.1 * decay, "accuracy": 1.0 - x * decay,
                 "lr": 0.1 * decay}, step=step)
    return {"loss": x}
