"""The torchrun-style process environment, parsed and checked without importing torch.

A multi-process trial is started with the standard variables `RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
`MASTER_ADDR` and `MASTER_PORT` (torchrun, sweeplab's backends, Slurm wrappers). A mistake in them is a
`ConfigError` naming the variable, raised before any process group is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sweeplab.errors import ConfigError

__all__ = ["GPUS_PER_RANK_VAR", "DistEnv", "devices_shared", "gpus_per_rank", "process_group_backend", "read_env"]

#: the GPUs each rank of a multi-process trial holds, set by sweeplab's launchers (0.5: two ranks on one device)
GPUS_PER_RANK_VAR = "SWEEPLAB_GPUS_PER_RANK"

_LAUNCHER_HINT = "these are set by torchrun or by sweeplab for multi-process trials"


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in its job: one process (world_size 1) or one rank of several."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    local_world_size: int | None = None   # ranks on this machine (LOCAL_WORLD_SIZE), when the launcher says

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def _int(environ: Mapping[str, str], name: str, default: int | None, *, minimum: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        if default is None:
            raise ConfigError(
                "missing environment variable for a multi-process run", key=name,
                expected=f"an integer >= {minimum}", hint=_LAUNCHER_HINT,
            )
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(
            "bad environment variable", key=name, value=raw, expected=f"an integer >= {minimum}",
        ) from None
    if value < minimum:
        raise ConfigError(
            "bad environment variable", key=name, value=raw, expected=f"an integer >= {minimum}",
        )
    return value


def read_env(environ: Mapping[str, str]) -> DistEnv:
    """Parse the torchrun variables of `environ`. Without `WORLD_SIZE` (or with 1) this is one process."""
    world_size = _int(environ, "WORLD_SIZE", 1, minimum=1)
    if world_size == 1:
        local_rank = _int(environ, "LOCAL_RANK", 0, minimum=0)
        return DistEnv(local_rank=local_rank)
    rank = _int(environ, "RANK", None, minimum=0)
    if rank >= world_size:
        raise ConfigError(
            "RANK must be smaller than WORLD_SIZE", key="RANK", value=environ["RANK"],
            expected=f"an integer in [0, {world_size - 1}]",
        )
    local_rank = _int(environ, "LOCAL_RANK", None, minimum=0)
    addr = environ.get("MASTER_ADDR", "").strip()
    if not addr:
        raise ConfigError(
            "missing environment variable for a multi-process run", key="MASTER_ADDR",
            expected="the address of rank 0 (e.g. 127.0.0.1)", hint=_LAUNCHER_HINT,
        )
    port = _int(environ, "MASTER_PORT", None, minimum=1)
    if port > 65535:
        raise ConfigError(
            "bad environment variable", key="MASTER_PORT", value=environ["MASTER_PORT"],
            expected="a TCP port in [1, 65535]",
        )
    local_world = _int(environ, "LOCAL_WORLD_SIZE", 0, minimum=0) or None
    if local_world is not None and local_rank >= local_world:
        raise ConfigError(
            "LOCAL_RANK must be smaller than LOCAL_WORLD_SIZE", key="LOCAL_RANK", value=environ["LOCAL_RANK"],
            expected=f"an integer in [0, {local_world - 1}]",
        )
    return DistEnv(rank, local_rank, world_size, addr, port, local_world)


def gpus_per_rank(environ: Mapping[str, str]) -> float | None:
    """`SWEEPLAB_GPUS_PER_RANK` (set by sweeplab's launchers), or None when absent or not a number >= 0."""
    try:
        value = float(environ.get(GPUS_PER_RANK_VAR, "").strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def devices_shared(env: DistEnv, visible: int, per_rank: float | None) -> bool:
    """Whether some GPU of this machine is used by more than one rank of this job: what sweeplab's launcher
    said (`per_rank` < 1: a fractional share, as `resources: {gpus: 0.5, workers: 2}` or Ray's
    `gpus_per_worker: 0.5`), else fewer visible GPUs than ranks on this machine (torchrun's ranks all see the
    same devices)."""
    if not env.is_distributed:
        return False
    if per_rank is not None:
        return per_rank < 1
    return env.local_world_size is not None and 0 < visible < env.local_world_size


def process_group_backend(device_type: str, env: DistEnv, visible: int, per_rank: float | None,
                          requested: str | None = None) -> str:
    """The torch.distributed backend for this rank: `requested` if given, else NCCL when every rank has a
    GPU of its own, gloo on the CPU and when ranks share a GPU.

    NCCL refuses two ranks of one communicator on one device ("Duplicate GPU detected": ncclInvalidUsage), the
    case of a DDP trial whose ranks share a fraction of one GPU; gloo runs its collectives on CUDA tensors
    too, so DDP still trains on the GPU (its gradient all-reduce goes through host memory). Lightning and Ray
    Train leave this to the user (both default to NCCL on GPUs and fail); sweeplab knows the share and picks
    gloo. Asking for NCCL then is a ConfigError naming the share."""
    shared = device_type == "cuda" and devices_shared(env, visible, per_rank)
    if requested == "nccl" and shared:
        raise ConfigError(
            "the NCCL backend cannot run two ranks on one GPU", key="backend", value=requested,
            expected="gloo (the default when ranks share a GPU)",
            hint=f"this trial's ranks share a device ({GPUS_PER_RANK_VAR}={per_rank}, {visible} GPU(s) visible "
                 f"to {env.local_world_size or env.world_size} rank(s)): give each rank a whole GPU "
                 "(resources.gpus_per_worker: 1) for NCCL",
        )
    if requested is not None:
        return requested
    return "nccl" if device_type == "cuda" and not shared else "gloo"
