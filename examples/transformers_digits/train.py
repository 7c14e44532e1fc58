"""A Hugging Face `Trainer` on scikit-learn's bundled digits (8x8 images, 10 classes; no download, no hub
model: a tiny MLP the Trainer trains like any model), connected to the sweep by
`sweeplab.integrations.transformers.SweeplabCallback`: it logs the Trainer's `loss` and `eval_loss` /
`eval_acc`, checkpoints through the trial's Run (the Trainer's checkpoint directory), resumes a preempted
trial from it, and stops the Trainer when the trial is pruned, stopped by a rule or preempted.

    sweeplab sweep examples/transformers_digits/sweep.yaml
    sweeplab run examples/transformers_digits/train.py:train lr=0.003 --config examples/transformers_digits/config.yaml
"""

from __future__ import annotations

import tempfile


def load_data(split_seed: int = 0):
    """Digits as datasets of {"pixels", "labels"} dicts: 1437 training and 360 validation images."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X_train, X_val, y_train, y_val = train_test_split(X / 16.0, y, test_size=0.2, random_state=split_seed,
                                                      stratify=y)

    class Digits(torch.utils.data.Dataset):
        def __init__(self, a, b) -> None:
            self.x = torch.tensor(a, dtype=torch.float32)
            self.y = torch.tensor(b, dtype=torch.long)

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i):
            return {"pixels": self.x[i], "labels": self.y[i]}

    return Digits(X_train, y_train), Digits(X_val, y_val)


def make_model(hidden: int):
    import torch
    from torch import nn

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))

        def forward(self, pixels: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
            logits = self.net(pixels)
            out = {"logits": logits}
            if labels is not None:
                out["loss"] = nn.functional.cross_entropy(logits, labels)
            return out

    return MLP()


def accuracy(prediction) -> dict:
    return {"acc": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


def train(config, run):
    import torch
    from transformers import Trainer, TrainingArguments, set_seed

    from sweeplab.integrations.transformers import SweeplabCallback

    torch.set_num_threads(1)            # one trial = one CPU; parallelism comes from the sweep's workers
    set_seed(run.seed or 0)
    train_set, val_set = load_data()
    if run.smoke:                       # a few batches, two epochs
        train_set = torch.utils.data.Subset(train_set, range(96))
    callback = SweeplabCallback(run, step="epoch")   # ASHA's rungs in epochs (1, 3, ...)
    with tempfile.TemporaryDirectory(prefix="hf-trainer-") as output_dir:   # run.checkpoint keeps what matters
        args = TrainingArguments(
            output_dir=output_dir, num_train_epochs=2 if run.smoke else int(config.epochs),
            learning_rate=float(config.lr), per_device_train_batch_size=int(config.batch_size),
            per_device_eval_batch_size=256, eval_strategy="epoch", logging_strategy="epoch",
            save_strategy="no",         # the callback saves when trial.checkpoint_every says so
            report_to="none", use_cpu=True, disable_tqdm=True, seed=run.seed or 0,
        )
        trainer = Trainer(model=make_model(int(config.hidden)), args=args, train_dataset=train_set,
                          eval_dataset=val_set, compute_metrics=accuracy, callbacks=[callback])
        trainer.train(resume_from_checkpoint=callback.resume_path())   # None on a first attempt
    return callback.metrics
