"""The model factory: the architecture, built from the `model` section of the config."""

from __future__ import annotations

from torch import nn


def build_model(in_features: int, classes: int, *, hidden: int, layers: int, dropout: float) -> nn.Module:
    """An MLP with `layers` hidden layers of width `hidden`; replace it with your own architecture."""
    blocks: list[nn.Module] = []
    width = in_features
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
        width = hidden
    blocks.append(nn.Linear(width, classes))
    return nn.Sequential(*blocks)
