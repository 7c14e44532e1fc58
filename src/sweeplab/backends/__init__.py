"""Backends: where trials run. `make_backend(name, **options)` builds one from the registry.

    local   worker processes on this machine (sweeplab.backends.local)
    ray     Ray actors on a cluster (sweeplab.backends.ray; needs the `ray` extra)

The registry is the one list of backends: the CLI's `--backend` help and check, the Python API
(`sweeplab.run_sweep(backend=...)`) and `resume` all read it. Each entry is a factory imported lazily, so
that naming a backend never imports another one (nor ray).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sweeplab.backends.base import Backend
from sweeplab.errors import UserError

__all__ = ["BACKENDS", "backend_factory", "make_backend", "preload_of"]


def _local(spec: Any = None, *, workers: int | None = None, gpu_ids: Sequence[int] | None = None,
           smoke: bool = False, **_: Any) -> Backend:
    """Worker processes here: `workers` slots (None: as many as the CPUs and GPUs hold one trial each).

    `gpu_ids` None: every GPU this process may use (`_devices.select_gpus`: CUDA_VISIBLE_DEVICES's, else
    NVML's), else ordinals among them; a smoke run hides the GPUs and asks for none.
    """
    from sweeplab._devices import select_gpus
    from sweeplab.backends.local import LocalBackend, plan_slots

    res = getattr(spec, "resources", None)
    ids = [] if smoke else select_gpus(gpu_ids)
    cpus = float(res.cpus) if res is not None else 1.0   # a trial's total, over all of its processes
    gpu_req = 0.0 if smoke or res is None else float(res.gpus)
    n = workers
    if n is None:
        n = max(1, int((os.cpu_count() or 1) // cpus)) if cpus > 0 else (os.cpu_count() or 1)
        if gpu_req > 0 and ids:
            n = min(n, int(len(ids) / gpu_req) if gpu_req >= 1 else int(len(ids) * (1 / gpu_req)))
    return LocalBackend(plan_slots(n, cpus=cpus, gpus=gpu_req, gpu_ids=ids), hide_gpus=smoke,
                        preload=preload_of(spec))


def preload_of(spec: Any) -> tuple[str, ...]:
    """The libraries a function trial's workers import before its first trial: `trial.preload`, else those
    its code imports (backends/preload.trial_imports), found beside the spec file first, then in the working
    directory, as the driver finds the function; none for a command trial. SWEEPLAB_FORK_SERVER=0 turns the
    forking off, not these imports: cold workers import them too, so the trial's seed seeds the same libraries
    (and `sweeplab repro`, which imports them, replays the same draws)."""
    function = getattr(spec, "function", None)
    if not function:
        return ()
    given = getattr(getattr(spec, "trial", None), "preload", None)
    if given is not None:
        return tuple(given)
    from sweeplab.backends.preload import trial_imports

    source = getattr(spec, "source", None)
    roots = [str(Path(source).resolve().parent)] if source is not None else []
    return trial_imports(str(function), [*roots, os.getcwd()])


def _ray(spec: Any = None, *, workers: int | None = None, address: str | None = None, smoke: bool = False,
         store_root: str | Path | None = None, **_: Any) -> Backend:
    """Ray actors; started here, so that a bad address, resources or checkpoint location is an error before
    the sweep is created (start() is idempotent: the driver's own call is then a no-op)."""
    from sweeplab.backends.ray import RayBackend

    be = RayBackend(spec, workers=workers, address=address or getattr(spec, "address", None), smoke=smoke,
                    checkpoint_root=str(Path(store_root) / "checkpoints") if store_root else None,
                    workdir_root=str(Path(store_root) / "workdirs") if store_root else None)
    be.start()
    return be


#: THE backend registry: name -> factory(spec, *, workers, address, gpu_ids, smoke, store_root) -> Backend.
#: A new backend is one entry here.
BACKENDS: dict[str, Callable[..., Backend]] = {
    "local": _local,
    "ray": _ray,
}


def backend_factory(name: str) -> Callable[..., Backend]:
    """The registry's factory for `name`; an unknown name is a UserError listing the known ones (call it
    before anything is written, so that a typo writes nothing)."""
    factory = BACKENDS.get(name) if isinstance(name, str) else None
    if factory is None:
        names = list(BACKENDS)
        known = " or ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else names[0]
        raise UserError(f"--backend: unknown backend {name!r}; expected {known}")
    return factory


def make_backend(name: str, **options: Any) -> Backend:
    """The backend called `name`, built with `options` (spec, workers, address, gpu_ids, smoke, store_root;
    each backend takes what applies to it). An unknown name is a UserError listing the known ones."""
    be = backend_factory(name)(**options)
    be.requested_workers = options.get("workers")
    return be
