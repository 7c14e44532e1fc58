"""How a multi-process trial's ranks find each other on one machine: the torchrun variables of each rank and
a reserved MASTER_PORT. Shared by the local backend's rank supervisor (multiproc.py), the Ray backend's
gangs and `sweeplab repro`'s replay of every rank; imports nothing of a worker's.
"""

from __future__ import annotations

import socket

__all__ = ["THREAD_VARS", "free_port", "rank_env", "reserve_port"]

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def reserve_port(host: str = "127.0.0.1") -> socket.socket:
    """A socket holding a free TCP port (MASTER_PORT) for as long as it stays open.

    Rank 0 binds MASTER_PORT seconds after it is chosen (torch imports first). A port merely found free
    could meanwhile be handed to another trial asking for a free port, or to any process's outgoing
    connection. This socket is bound with SO_REUSEADDR and never listens: the kernel hands its port to no
    one else, while rank 0's TCPStore (SO_REUSEADDR too) can still bind and listen on it.
    """
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
    except OSError:
        s.close()
        raise
    return s


def rank_env(rank: int, world_size: int, port: int, *, threads: int | None = None,
             addr: str = "127.0.0.1") -> dict[str, str]:
    """The torchrun variables of one rank on this machine (all ranks local: LOCAL_RANK = RANK).

    `threads`: this rank's share of the slot's threads, for every threading library (OpenMP, MKL,
    OpenBLAS): torch built with MKL sizes its pool from MKL_NUM_THREADS, not OMP_NUM_THREADS."""
    env = {
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0", "NODE_RANK": "0",
        "MASTER_ADDR": addr, "MASTER_PORT": str(port),
        "TORCHELASTIC_RUN_ID": "sweeplab",
    }
    if threads is not None:
        env.update({var: str(threads) for var in THREAD_VARS})
    return env
