"""Training: `train(config, run)` is what the sweep calls for every trial.

The same function runs on the CPU, one GPU or as a multi-process DDP trial: `sweeplab.torch.strategy()`
picks the device from the environment. It logs once per epoch at step = epochs trained (the fidelity
ASHA judges), checkpoints every epoch (the sweep's `trial.checkpoint_every` decides how often one is
really written), resumes from the last checkpoint after a retry or preemption, and stops when asked.

    sweeplab run train.py:train lr=0.01 --config configs/base.yaml --profile local
    python train.py lr=0.01                   # the same, from the `sl.main` call at the end
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sweeplab.torch
import torch
from sweeplab import Run
from torch import nn

from data import CLASSES, IN_FEATURES, datasets
from model import build_model


@dataclass(frozen=True)
class ModelConfig:
    hidden: int
    layers: int
    dropout: float


@dataclass(frozen=True)
class TrainConfig:
    """configs/base.yaml (hyperparameters) merged with a profile (environment facts)."""

    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    clip: float | None
    model: ModelConfig
    data_dir: str
    output_dir: str
    num_workers: int


def train(config: TrainConfig, run: Run) -> dict[str, float]:
    strategy = sweeplab.torch.strategy()
    seed = run.seed or 0
    train_set, val_set = datasets(config.data_dir, seed=0)   # a fixed split: trials stay comparable
    model = build_model(IN_FEATURES, CLASSES, hidden=config.model.hidden, layers=config.model.layers,
                        dropout=config.model.dropout)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    model, optimizer = strategy.setup(model, optimizer)

    start = 0
    state = run.restore()                     # this trial's latest checkpoint (after a retry), or None
    if state is not None:
        strategy.load_state_dict(model, state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]

    train_loader = strategy.loader(train_set, batch_size=config.batch_size, seed=seed,
                                   num_workers=config.num_workers)
    val_loader = strategy.loader(val_set, batch_size=256, shuffle=False)
    epochs = min(config.epochs, 2) if run.smoke else config.epochs   # smoke: tiny, just prove it runs
    metrics: dict[str, float] = {}
    grad_norm = 0.0
    for epoch in range(start, epochs):
        strategy.epoch(epoch)
        model.train()
        loss_sum, seen = 0.0, 0
        for x, y in run.track(train_loader):  # times data wait vs compute; a few batches in smoke mode
            x, y = strategy.to_device((x, y))
            with strategy.autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            strategy.backward(loss)
            grad_norm = strategy.grad_norm()  # before step(), which clears the gradients
            strategy.step(optimizer, max_norm=config.clip)
            loss_sum += loss.item() * len(y)
            seen += len(y)

        val_loss, val_acc = evaluate(model, val_loader, strategy)
        metrics = {"train_loss": strategy.all_reduce_mean(loss_sum / max(seen, 1)),
                   "val_loss": val_loss, "val_acc": val_acc, "grad_norm": grad_norm}
        run.log(metrics, step=epoch + 1)      # step = epochs trained: what ASHA compares
        run.checkpoint({"model": strategy.state_dict(model), "optimizer": optimizer.state_dict(),
                        "epoch": epoch + 1}, step=epoch + 1)
        if run.should_stop:                   # pruned by ASHA, stopped by a monitor, or preempted
            break

    if not metrics:                           # resumed after the last epoch: measure, do not retrain
        val_loss, val_acc = evaluate(model, val_loader, strategy)
        metrics = {"val_loss": val_loss, "val_acc": val_acc}
    if strategy.is_main and not run.smoke:    # the final model, where this machine keeps outputs
        out = Path(config.output_dir) / run.sweep / str(run.trial)
        out.mkdir(parents=True, exist_ok=True)
        torch.save(strategy.state_dict(model), out / "model.pt")
    strategy.cleanup()
    return metrics                            # the sweep's metric (val_loss) is read from here


@torch.no_grad()
def evaluate(model: nn.Module, loader, strategy) -> tuple[float, float]:
    """Mean cross-entropy and accuracy over `loader`, averaged over all processes."""
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for x, y in loader:
        x, y = strategy.to_device((x, y))
        with strategy.autocast():
            out = model(x)
        loss_sum += nn.functional.cross_entropy(out.float(), y, reduction="sum").item()
        correct += int((out.argmax(dim=1) == y).sum().item())
        count += len(y)
    return (strategy.all_reduce_mean(loss_sum / max(count, 1)),
            strategy.all_reduce_mean(correct / max(count, 1)))


if __name__ == "__main__":   # a plain `python train.py key=value ...`: one trial, recorded as `sweeplab run` does
    import sweeplab as sl

    sl.main(train, config="configs/base.yaml", profile="local")
