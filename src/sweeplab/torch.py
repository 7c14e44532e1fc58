"""Device-agnostic PyTorch training: one code path for CPU, one GPU and DDP (the [torch] extra).

`strategy()` reads the process environment once: several ranks (torchrun-style `WORLD_SIZE` > 1) give
DistributedDataParallel over gloo (CPU) or NCCL (GPU); otherwise one GPU when CUDA is visible; otherwise
the CPU. The training loop is the same in all three cases::

    import sweeplab.torch

    strategy = sweeplab.torch.strategy()
    model, optimizer = strategy.setup(model, optimizer)
    for x, y in strategy.loader(dataset, batch_size=64):      # 64 is the global batch
        x, y = strategy.to_device((x, y))
        with strategy.autocast():
            loss = loss_fn(model(x), y)
        strategy.backward(loss)
        grad_norm = strategy.grad_norm()
        strategy.step(optimizer)

Importing this module without torch raises MissingExtraError (`pip install 'sweeplab[torch]'`).
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Mapping
from typing import Any, TypeVar, overload

from sweeplab._imports import optional_import
from sweeplab.errors import ConfigError, UserError

optional_import("torch", "torch", "sweeplab.torch")

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from sweeplab._torch.data import EpochSampler, build_loader, move_to
from sweeplab._torch.env import DistEnv, gpus_per_rank, process_group_backend, read_env

__all__ = ["Strategy", "strategy"]

_BACKENDS = ("gloo", "nccl")
OptimizerT = TypeVar("OptimizerT", bound=torch.optim.Optimizer)


def strategy(*, amp: bool | None = None, backend: str | None = None) -> Strategy:
    """The strategy for this process, chosen from its environment.

    - `WORLD_SIZE` > 1 (with `RANK`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`): DDP; the process group is
      created here once (gloo on CPU, NCCL on GPU, or `backend`) unless one already exists. Ranks that share
      a GPU (a fractional `resources.gpus`) get gloo: NCCL refuses two ranks on one device
      (`_torch.env.process_group_backend`).
    - else CUDA visible (`CUDA_VISIBLE_DEVICES` is honoured by torch): `cuda:0`.
    - else the CPU.

    `amp=True` turns on mixed precision (float16 with a GradScaler on CUDA, bfloat16 autocast on CPU);
    `None` and `False` train in full precision.
    """
    env = read_env(os.environ)
    if backend is not None and backend not in _BACKENDS:
        raise ConfigError("unknown process-group backend", key="backend", value=backend,
                          expected=" or ".join(_BACKENDS))
    device = _pick_device(env)
    if backend == "nccl" and device.type != "cuda":
        raise ConfigError("the NCCL backend needs a GPU and none is visible", key="backend",
                          value=backend, hint="use backend='gloo' (the default on CPU)")
    owns_group = False
    if env.is_distributed:
        if dist.is_initialized():
            _check_existing_group(env)
        else:
            visible = torch.cuda.device_count() if device.type == "cuda" else 0
            chosen = process_group_backend(device.type, env, visible, gpus_per_rank(os.environ), backend)
            if device.type == "cuda":
                torch.cuda.set_device(device)
            dist.init_process_group(chosen, init_method="env://", rank=env.rank, world_size=env.world_size)
            owns_group = True
    return Strategy(
        device, rank=env.rank, local_rank=env.local_rank, world_size=env.world_size,
        amp=bool(amp), owns_process_group=owns_group,
    )


def _pick_device(env: DistEnv) -> torch.device:
    if not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if count == 1:  # one visible GPU per process (CUDA_VISIBLE_DEVICES narrowed by the launcher)
        return torch.device("cuda", 0)
    local_world = env.local_world_size if env.is_distributed else None
    if local_world and count > local_world and count % local_world == 0:
        # every rank sees the machine's (or the slot's) GPUs, k per rank (gpus_per_worker: k): rank r holds
        # [r*k, (r+1)*k) and trains on the first of them; cuda:LOCAL_RANK would be another rank's GPU
        return torch.device("cuda", env.local_rank * (count // local_world))
    if local_world and count < local_world:
        # fewer GPUs than ranks (a fractional share: gpus_per_worker 0.5): ranks fill the devices in order,
        # local_world / count to a device, the way the local backend packs fractional trials
        return torch.device("cuda", env.local_rank * count // local_world)
    if env.local_rank < count:
        return torch.device("cuda", env.local_rank)
    raise ConfigError(
        "this process has no GPU of its own", key="LOCAL_RANK", value=env.local_rank,
        expected=f"an integer below the number of visible GPUs ({count})",
        hint="start at most one process per GPU, or check CUDA_VISIBLE_DEVICES",
    )


def _check_existing_group(env: DistEnv) -> None:
    if (dist.get_world_size(), dist.get_rank()) != (env.world_size, env.rank):
        raise ConfigError(
            "an existing process group disagrees with the environment", key="WORLD_SIZE",
            value=env.world_size, expected=f"{dist.get_world_size()} (rank {dist.get_rank()})",
        )


class Strategy:
    """Where and how this process trains. Build it with `strategy()`; the constructor takes explicit
    values (for custom launchers and tests) and never creates a process group itself."""

    def __init__(
        self,
        device: torch.device | str = "cpu",
        *,
        rank: int = 0,
        local_rank: int = 0,
        world_size: int = 1,
        amp: bool = False,
        owns_process_group: bool = False,
    ) -> None:
        self._device = torch.device(device)
        self._rank, self._local_rank, self._world_size = rank, local_rank, world_size
        self._amp = amp
        self._amp_dtype = torch.float16 if self._device.type == "cuda" else torch.bfloat16
        self._scaler = torch.amp.GradScaler("cuda") if amp and self._device.type == "cuda" else None
        self._owns_group = owns_process_group
        self._model: nn.Module | None = None
        self._samplers: weakref.WeakSet[EpochSampler] = weakref.WeakSet()
        self._epoch: int | None = None   # the last `epoch(e)`: loaders built after it start there

    # -- where this process sits ------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def local_rank(self) -> int:
        return self._local_rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def is_main(self) -> bool:
        """True on rank 0 (and in a single process)."""
        return self._rank == 0

    @property
    def is_distributed(self) -> bool:
        return self._world_size > 1

    @property
    def amp(self) -> bool:
        return self._amp

    # -- model, data --------------------------------------------------------------------------------
    @overload
    def setup(
        self, model: nn.Module, optimizer: None = None, **ddp_options: Any
    ) -> tuple[nn.Module, None]: ...
    @overload
    def setup(
        self, model: nn.Module, optimizer: OptimizerT, **ddp_options: Any
    ) -> tuple[nn.Module, OptimizerT]: ...

    def setup(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, **ddp_options: Any
    ) -> tuple[nn.Module, torch.optim.Optimizer | None]:
        """Move `model` (and the optimizer's state) to the device; wrap it in DDP when distributed.

        The optimizer may be built before or after: parameters are moved in place. `ddp_options` (e.g.
        `find_unused_parameters=True`) go to DistributedDataParallel and matter only when distributed.
        """
        model = model.to(self._device)
        if optimizer is not None:
            _move_optimizer_state(optimizer, self._device)
        if self.is_distributed and not isinstance(model, DistributedDataParallel):
            ids = [self._device.index] if self._device.type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=ids, **ddp_options)
        self._model = model
        return model, optimizer

    def loader(
        self,
        dataset: Dataset[Any],
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        **kwargs: Any,
    ) -> DataLoader[Any]:
        """A DataLoader over this rank's share of `dataset`.

        `batch_size` is the **global** batch: each of the `world_size` processes loads
        `batch_size // world_size` samples (it must divide evenly), so a hyperparameter means the same
        on 1 or N processes and, with DDP's gradient averaging, N ranks compute the 1-process update.
        The order depends only on `seed` and the epoch; the epoch advances by itself on each pass over
        the loader (`strategy.epoch(e)` sets it, e.g. after a resume). Other keyword arguments go to
        DataLoader (`num_workers`, `collate_fn`, ...); `pin_memory` defaults to True on CUDA.
        """
        kwargs.setdefault("pin_memory", self._device.type == "cuda")
        loader, sampler = build_loader(
            dataset, batch_size, rank=self._rank, world_size=self._world_size,
            shuffle=shuffle, seed=seed, drop_last=drop_last, **kwargs,
        )
        if sampler is not None:
            if self._epoch is not None:
                sampler.set_epoch(self._epoch)
            self._samplers.add(sampler)
        return loader

    def epoch(self, epoch: int) -> None:
        """Make the next pass of every loader of this strategy use `epoch`'s order (set_epoch); a loader
        built afterwards (e.g. inside the epoch loop) starts at `epoch` too."""
        self._epoch = epoch
        for sampler in list(self._samplers):
            sampler.set_epoch(epoch)

    def to_device(self, batch: Any) -> Any:
        """`batch` on the device: tensors, (named) tuples, lists and dicts of them; other values as-is."""
        return move_to(batch, self._device, non_blocking=self._device.type == "cuda")

    # -- one optimisation step --------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Mixed-precision context for the forward pass (a no-op unless amp=True)."""
        if not self._amp:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self._device.type, dtype=self._amp_dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """`loss.backward()`, through the gradient scaler when AMP runs on CUDA."""
        if self._scaler is not None:
            self._scaler.scale(loss).backward()
        else:
            loss.backward()

    def step(self, optimizer: torch.optim.Optimizer, *, max_norm: float | None = None) -> None:
        """`optimizer.step()` then `zero_grad()`; scaler-aware; clips gradients to `max_norm` if given."""
        if max_norm is not None:
            if self._scaler is not None:
                self._scaler.unscale_(optimizer)
            params = [p for group in optimizer.param_groups for p in group["params"]]
            nn.utils.clip_grad_norm_(params, max_norm)
        if self._scaler is not None:
            self._scaler.step(optimizer)
            self._scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def grad_norm(self, model: nn.Module | None = None) -> float:
        """Global L2 norm of the gradients of `model` (default: the model given to `setup`).

        Call it between `backward` and `step` (which clears gradients). Under DDP the gradients are
        already averaged, so every rank gets the same value; under AMP the loss scale is divided out.
        """
        target = model if model is not None else self._model
        if target is None:
            raise UserError(
                "strategy.grad_norm() needs a model: pass one, or call strategy.setup(model) first"
            )
        norms = [_norm(p.grad) for p in target.parameters() if p.grad is not None]
        if not norms:
            raise UserError(
                "no gradients to measure: call strategy.grad_norm() after strategy.backward(loss) "
                "and before strategy.step(optimizer), which clears them"
            )
        total = float(torch.linalg.vector_norm(torch.stack(norms)).item())
        if self._scaler is not None:
            total /= float(self._scaler.get_scale())
        return total

    def no_sync(
        self, model: nn.Module | None = None, *, enabled: bool = True
    ) -> contextlib.AbstractContextManager[Any]:
        """Context for the backward pass of a micro-batch that only accumulates gradients (gradient
        accumulation): under DDP the gradients are not all-reduced in it, only at the next backward outside
        it, once for the accumulated sum (`model.no_sync()`); a no-op in one process, so the loop is the same::

            for i, (x, y) in enumerate(loader):
                accumulating = (i + 1) % accumulate != 0
                with strategy.no_sync(model, enabled=accumulating):
                    strategy.backward(loss_fn(model(x), y) / accumulate)
                if not accumulating:
                    strategy.step(optimizer)

        `model` defaults to the one given to `setup`. The forward pass may be inside the context or not.
        """
        target = model if model is not None else self._model
        if enabled and isinstance(target, DistributedDataParallel):
            return target.no_sync()
        return contextlib.nullcontext()

    # -- across ranks -------------------------------------------------------------------------------
    def all_reduce_mean(self, value: float | torch.Tensor) -> float:
        """The mean of a scalar over all ranks (every rank must call it); the value itself when alone."""
        local = float(value)
        if not self.is_distributed:
            return local
        buf = torch.tensor([local], dtype=torch.float64, device=self._device)
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        return float(buf.item()) / self._world_size

    def should_stop(self, run: Any) -> bool:
        """`run.should_stop`, agreed by every rank: True on all ranks at the same step once any rank sees it.

        Call it at the same point of the loop on every rank (it is a collective): `if strategy.should_stop(run):
        break` keeps DDP ranks in step when a trial is pruned or preempted.
        """
        local = 1.0 if run.should_stop else 0.0
        if not self.is_distributed:
            return bool(local)
        buf = torch.tensor([local], dtype=torch.float64, device=self._device)
        dist.all_reduce(buf, op=dist.ReduceOp.MAX)
        return bool(buf.item() > 0)

    def barrier(self) -> None:
        """Wait for every rank (no-op in a single process)."""
        if not (self.is_distributed and dist.is_initialized()):
            return
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[self._device.index or 0])
        else:
            dist.barrier()

    def cleanup(self) -> None:
        """Destroy the process group if this strategy created it. Safe to call twice."""
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_group = False

    def __enter__(self) -> Strategy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- checkpoints ----------------------------------------------------------------------------------
    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's module inside DDP / DataParallel / torch.compile wrappers."""
        while True:
            if isinstance(model, (DistributedDataParallel, DataParallel)):
                model = model.module
                continue
            inner = getattr(model, "_orig_mod", None)  # torch.compile
            if not isinstance(inner, nn.Module):
                return model
            model = inner

    def state_dict(self, model: nn.Module) -> dict[str, Any]:
        """The unwrapped model's state (no `module.` prefix), copied to CPU: what `run.checkpoint` saves.

        A CPU copy restores on any device and is not changed by later training steps.
        """
        return {
            key: value.detach().to("cpu", copy=True) if isinstance(value, torch.Tensor) else value
            for key, value in self.unwrap(model).state_dict().items()
        }

    def load_state_dict(self, model: nn.Module, state: Mapping[str, Any], *, strict: bool = True) -> Any:
        """Load `state` (from `state_dict`, e.g. via `run.restore()`) into the unwrapped model, any device."""
        return self.unwrap(model).load_state_dict(state, strict=strict)

    def __repr__(self) -> str:
        return (f"Strategy(device={self._device}, rank={self._rank}, world_size={self._world_size}, "
                f"amp={self._amp})")


def _norm(grad: torch.Tensor) -> torch.Tensor:
    values = grad.coalesce().values() if grad.is_sparse else grad
    return torch.linalg.vector_norm(values.detach(), 2, dtype=torch.float64)


def _move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    for state in optimizer.state.values():
        for key, value in state.items():
            # "step" stays where the optimizer put it (Adam keeps it on the CPU unless capturable)
            if key != "step" and isinstance(value, torch.Tensor) and value.device != device:
                state[key] = value.to(device)
