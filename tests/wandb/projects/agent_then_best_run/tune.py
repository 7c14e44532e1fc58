# In the style of public scripts whose code after `wandb.agent(...)` is the sweep's end: it asks W&B's API for
# the sweep's best run and retrains with its config (alexander-ratzan gx2conn `run_sim_torch`: `wandb.agent(
# sweep_id, function=train_sweep_wrapper, count=...)`, then `wandb.Api().sweep(...).best_run()`; found by
# searching for `.best_run()`). Offline, with no W&B account, `wandb.Api()` fails.
import wandb


def train_sweep(cfg):
    with wandb.init() as run:
        run.log({"val_loss": wandb.config.lr * cfg["scale"]})


def find_best(cfg):
    sweep_id = wandb.sweep({"method": "grid", "metric": {"name": "val_loss", "goal": "minimize"},
                            "parameters": {"lr": {"values": [0.01, 0.05]}}}, project="agent-then-best-run")
    wandb.agent(sweep_id, function=lambda: train_sweep(cfg), count=2)
    best_run = wandb.Api().sweep(f"me/agent-then-best-run/{sweep_id}").best_run()
    with open("retrained.txt", "a") as f:   # the retraining on the best config
        f.write(f"{best_run.config}\n")


def sweep_main():
    """The same from a function the sweep calls (`--function tune.py:sweep_main`)."""
    find_best({"scale": 3})


if __name__ == "__main__":
    find_best({"scale": 2})
