"""The data pipeline: a torch Dataset over scikit-learn's bundled digits (8x8 images, 10 classes).

The digits ship with scikit-learn, so the template runs without a download. For your own data, read it
from `data_dir` (a profile value: `data` locally, shared storage on a cluster) in `datasets()`.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

IN_FEATURES = 64
CLASSES = 10


class Digits(Dataset):
    """Images as float vectors in [0, 1] and their labels."""

    def __init__(self, images, labels) -> None:
        self.images = torch.as_tensor(images, dtype=torch.float32) / 16.0
        self.labels = torch.as_tensor(labels, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]


def datasets(data_dir: str, *, seed: int = 0) -> tuple[Digits, Digits]:
    """The training and validation sets (80/20, stratified). `data_dir` is unused by the bundled data."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        images, labels, test_size=0.2, random_state=seed, stratify=labels
    )
    return Digits(x_train, y_train), Digits(x_val, y_val)
