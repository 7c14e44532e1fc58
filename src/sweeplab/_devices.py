"""The GPUs this process may give its trials, as CUDA names them.

A scheduler (Slurm, Kubernetes' device plugin, a shared workstation's convention) hands a job its GPUs through
CUDA_VISIBLE_DEVICES; everything the job starts must stay inside them. So the devices to hand out are the ones
that variable names when it is set (physical indices or UUIDs, as CUDA reads them: up to the first invalid
entry), else every device NVML counts; and a GPU id the user gives (`--gpus 0,1`, `gpu_ids=`) is an ordinal
among those, as `cuda:0` is the first visible device: under CUDA_VISIBLE_DEVICES=2,3, GPU 0 is device 2.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from sweeplab.errors import UserError

__all__ = ["nvml_count", "select_gpus", "visible_gpus"]


def visible_gpus(value: str | None) -> list[int | str] | None:
    """Devices named by a CUDA_VISIBLE_DEVICES value: None = all, [] = none, else indices or UUIDs."""
    if value is None:
        return None
    out: list[int | str] = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        if part.lstrip("-").isdigit():
            if int(part) < 0:
                break  # CUDA stops at the first invalid index
            out.append(int(part))
        else:
            out.append(part)
    return out


def nvml_count() -> int | None:
    """How many GPUs NVML sees (nvidia-ml-py and a driver); None when it cannot tell."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def select_gpus(ids: Sequence[int] | None, *, environ: Mapping[str, str] | None = None, count: int | None = None,
                key: str = "gpu_ids", given: str | None = None) -> list[int | str]:
    """The devices (CUDA_VISIBLE_DEVICES entries) for the GPU ordinals `ids`, or every usable one when None.

    `count` is how many devices the machine has (NVML's, looked up when needed and None), `environ` the
    environment the job was started with. An ordinal past the visible devices is an error naming `key`
    (the option or argument that gave `ids`, shown as `given`); when nothing can tell how many exist (no
    NVML, no CUDA_VISIBLE_DEVICES) ordinals are taken as device numbers, unchecked.
    """
    env = os.environ if environ is None else environ
    raw = env.get("CUDA_VISIBLE_DEVICES")
    visible = visible_gpus(raw)
    count = nvml_count() if count is None else count
    if visible is not None and count is not None:   # CUDA stops at the first index past the machine's devices
        cut = next((i for i, d in enumerate(visible) if isinstance(d, int) and d >= count), len(visible))
        visible = visible[:cut]
    if ids is None:
        return list(visible) if visible is not None else list(range(count or 0))
    shown = given if given is not None else repr(list(ids))
    if visible is not None:
        for gpu in ids:
            if gpu >= len(visible):
                seen = (f"GPUs 0-{len(visible) - 1} here" if len(visible) > 1 else
                        "GPU 0 here" if visible else "no GPU")
                raise UserError(f"{key}: GPU {gpu} is not visible: CUDA_VISIBLE_DEVICES={raw!r} leaves this job "
                                f"{seen}, and GPU ids count the visible ones (as cuda:0 is the first); got {shown}")
        return [visible[gpu] for gpu in ids]
    if count is not None:
        for gpu in ids:
            if gpu >= count:
                raise UserError(f"{key}: GPU {gpu} does not exist: this machine has "
                                f"{f'GPUs 0-{count - 1}' if count > 1 else 'GPU 0' if count else 'no GPU'}; "
                                f"got {shown}")
    return list(ids)
