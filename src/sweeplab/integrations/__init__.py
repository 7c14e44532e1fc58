"""Callbacks that connect training frameworks to a trial's `Run` (docs/integrations.md).

One module per framework, each imported only when used, so `import sweeplab` never imports a framework:

    from sweeplab.integrations.lightning import SweeplabCallback      # PyTorch Lightning (the `lightning` extra)
    from sweeplab.integrations.transformers import SweeplabCallback   # Hugging Face Trainer (`transformers`)
    from sweeplab.integrations.keras import SweeplabCallback          # Keras 3 `model.fit` (`keras`)

Each does the same four things through the Run: reports the framework's metrics (`run.log`), checkpoints
through `run.checkpoint` (when the `trial.checkpoint_every` policy says so, and always on the way out of a
stopped trial), resumes from `run.restore()`, and makes the framework stop training when `run.should_stop`
turns true (pruned by a scheduler, stopped by a monitor rule, preempted by SIGTERM, or the sweep ending).
In a multi-process (DDP) trial the Lightning and Transformers callbacks run on every rank and agree each
decision (stop, checkpoint) across the ranks before acting on it, so the ranks save and stop together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["scalars"]


def scalars(values: Mapping[str, Any], keys: Iterable[str] | None = None) -> dict[str, float]:
    """The entries of `values` that are single numbers (Python numbers, 0-d or 1-element tensors and arrays),
    as floats: what a framework's metric dict holds besides strings and lists. `keys`: keep only these."""
    wanted = set(keys) if keys is not None else None
    out: dict[str, float] = {}
    for key, value in values.items():
        if wanted is not None and key not in wanted:
            continue
        number = _number(value)
        if number is not None:
            out[str(key)] = number
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    size = getattr(value, "numel", None) or getattr(value, "size", None)   # torch tensor / numpy array
    try:
        count = size() if callable(size) else size
        if count == 1:
            item = value.item() if hasattr(value, "item") else value
            return float(item)   # NaN too: the `nan` monitor should see it
    except (TypeError, ValueError, RuntimeError):
        return None
    return None
