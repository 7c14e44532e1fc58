"""The torchrun-style process environment, parsed and checked without importing torch.

A multi-process trial is started with the standard variables `RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
`MASTER_ADDR` and `MASTER_PORT` (torchrun, sweeplab's backends, Slurm wrappers). A mistake in them is a
`ConfigError` naming the variable, raised before any process group is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sweeplab.errors import ConfigError

__all__ = ["DistEnv", "read_env"]

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
