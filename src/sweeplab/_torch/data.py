"""Data helpers of `sweeplab.torch`: the rank-sharding loader and moving nested batches to a device.

Every loader uses a `DistributedSampler`, also in a single process (one replica): the shuffled order of an
epoch then depends only on `seed` and the epoch, and the global batch `k` holds the same samples whatever
the number of processes. That is what makes a 2-process run reproduce the 1-process run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

from sweeplab.errors import ConfigError

__all__ = ["EpochSampler", "build_loader", "move_to"]


class EpochSampler(DistributedSampler):  # type: ignore[type-arg]
    """A DistributedSampler whose epoch advances by itself after each pass.

    `set_epoch(e)` chooses the epoch of the *next* pass (for a resumed run); without it, pass `n` of
    the loader uses epoch `n`, so reshuffling never depends on the user remembering `set_epoch`.
    """

    def __iter__(self) -> Any:
        indices = super().__iter__()  # the order is fixed here, from the current epoch
        self.epoch += 1
        return indices


def build_loader(
    dataset: Dataset[Any],
    batch_size: int,
    *,
    rank: int,
    world_size: int,
    shuffle: bool,
    seed: int,
    drop_last: bool,
    **kwargs: Any,
) -> tuple[DataLoader[Any], EpochSampler | None]:
    """A DataLoader for this rank: `batch_size` is the global batch, split evenly over the ranks."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError("bad batch size", key="batch_size", value=batch_size, expected="an integer >= 1")
    if batch_size % world_size:
        raise ConfigError(
            "the global batch size must split evenly over the processes", key="batch_size",
            value=batch_size, expected=f"a multiple of the world size {world_size}",
            hint="batch_size is the global batch; each process loads batch_size // world_size",
        )
    for name in ("sampler", "batch_sampler"):
        if kwargs.get(name) is not None:
            raise ConfigError(
                f"strategy.loader chooses the {name} itself", key=name,
                hint="build a DataLoader yourself for a custom sampler",
            )
    per_rank = batch_size // world_size
    if isinstance(dataset, IterableDataset):
        if shuffle:
            raise ConfigError(
                "an IterableDataset shuffles and shards itself", key="shuffle", value=True,
                expected="shuffle=False", hint="use strategy.rank and strategy.world_size to shard it",
            )
        return DataLoader(dataset, batch_size=per_rank, drop_last=drop_last, **kwargs), None
    sampler = EpochSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
    )
    loader = DataLoader(dataset, batch_size=per_rank, sampler=sampler, drop_last=drop_last, **kwargs)
    return loader, sampler


def move_to(obj: Any, device: torch.device, *, non_blocking: bool = False) -> Any:
    """`obj` with every tensor moved to `device`: tensors, (named) tuples, lists, dicts; others as-is."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, Mapping):
        moved = {k: move_to(v, device, non_blocking=non_blocking) for k, v in obj.items()}
        if type(obj) is dict:
            return moved
        try:
            return type(obj)(moved)  # type: ignore[call-arg]
        except TypeError:  # a mapping type that cannot be built from a dict (e.g. defaultdict)
            return moved
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(move_to(v, device, non_blocking=non_blocking) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(move_to(v, device, non_blocking=non_blocking) for v in obj)
    return obj
