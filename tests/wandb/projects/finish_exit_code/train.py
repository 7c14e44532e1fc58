"""In the style of W&B training functions that catch a failure (an out-of-memory batch size), log what they
have and mark the run failed with `wandb.finish(exit_code=1)` before returning: W&B marks such a run failed."""
import wandb


def train():
    run = wandb.init()
    wandb.log({"loss": run.config.batch_size / 100})
    try:
        if run.config.batch_size > 64:
            raise RuntimeError("CUDA out of memory (simulated)")
    except RuntimeError as exc:
        print("failed:", exc)
        wandb.finish(exit_code=1)
        return
    wandb.finish()


if __name__ == "__main__":
    train()
