"""PyTorch Lightning on scikit-learn's bundled digits (8x8 images, 10 classes; no download), connected to the
sweep by `sweeplab.integrations.lightning.SweeplabCallback`: the callback logs `val_loss` / `val_acc` each
epoch (ASHA judges them), checkpoints through the trial's Run, resumes a retried or preempted trial from its
last checkpoint, and stops the Trainer when the trial is pruned, stopped by a rule or preempted.

The same `train` runs as one process (sweep.yaml) or as 2-process DDP trials (sweep_ddp.yaml:
`resources: {workers: 2}`): `trainer_options()` gives the Trainer its DDP arguments when the trial has
several processes, and `sync_dist=True` averages the validation metrics over the ranks.

    sweeplab sweep examples/lightning_digits/sweep.yaml
    sweeplab sweep examples/lightning_digits/sweep_ddp.yaml
    sweeplab run examples/lightning_digits/train.py:train lr=0.01 --config examples/lightning_digits/config.yaml
"""

from __future__ import annotations


def load_data(split_seed: int = 0):
    """Digits as float tensors scaled to [0, 1]: 1437 training and 360 validation images."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from torch.utils.data import TensorDataset

    X, y = load_digits(return_X_y=True)
    X_train, X_val, y_train, y_val = train_test_split(X / 16.0, y, test_size=0.2, random_state=split_seed,
                                                      stratify=y)

    def tensors(a, b):
        return TensorDataset(torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.long))

    return tensors(X_train, y_train), tensors(X_val, y_val)


def make_module(hidden: int, lr: float):
    import lightning.pytorch as L
    import torch
    from torch import nn

    class Classifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss, on_step=False, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            logits = self.net(x)
            self.log("val_loss", nn.functional.cross_entropy(logits, y), sync_dist=True)
            self.log("val_acc", (logits.argmax(1) == y).float().mean(), sync_dist=True)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=lr)

    return Classifier()


def train(config, run):
    import lightning.pytorch as L
    import torch
    from torch.utils.data import DataLoader

    from sweeplab.integrations.lightning import SweeplabCallback, trainer_options

    torch.set_num_threads(1)            # one trial = one CPU; parallelism comes from the sweep's workers
    L.seed_everything(run.seed or 0, verbose=False)
    train_set, val_set = load_data()
    callback = SweeplabCallback(run)
    trainer = L.Trainer(
        max_epochs=2 if run.smoke else int(config.epochs),
        limit_train_batches=3 if run.smoke else 1.0,
        callbacks=[callback],
        accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        **{"devices": 1, **trainer_options()},   # DDP over the trial's processes when it has several
    )
    trainer.fit(
        make_module(int(config.hidden), float(config.lr)),
        DataLoader(train_set, batch_size=int(config.batch_size), shuffle=True),
        DataLoader(val_set, batch_size=256),
        ckpt_path=callback.resume_path(),    # the trial's last checkpoint when it is retried, else None
    )
    return callback.metrics
