"""The Python API of a whole sweep, and the code path the CLI shares with it.

    import sweeplab as sl

    outcome = sl.run_sweep("sweep.yaml", store="runs/.sweeplab", workers=4)
    print(outcome.state, outcome.best_value, outcome.best_params)

`run_sweep` does what `sweeplab sweep SPEC` does, minus the terminal: validate the spec and its config files
(nothing is written for bad input), open the store, build the backend from the registry
(`sweeplab.backends.make_backend`), create the sweep and drive it to its end. The CLI calls the same
functions (`check_config_files`, `unique_name`, `build_backend`, `record_backend`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweeplab.backends.base import Backend
    from sweeplab.driver import Progress, SweepOutcome
    from sweeplab.spec import SweepSpec
    from sweeplab.store import Store

__all__ = [
    "backend_name", "build_backend", "check_config_files", "default_name", "record_backend", "run_sweep",
    "unique_name",
]


def check_config_files(spec: SweepSpec) -> None:
    """Read the base config and profile now, as the driver will: a bad file is an error before the store
    is opened, so nothing is written for it."""
    if spec.config is None and not spec.profile:
        return
    from sweeplab.config import load_base_config

    load_base_config(spec.config, spec.profile, spec_file=spec.source, cwd=os.getcwd())


def unique_name(st: Store, base: str) -> str:
    """`base`, or `base-2`, `base-3`... when the store already has a sweep of that name."""
    if st.sweep_row(base) is None:
        return base
    i = 2
    while st.sweep_row(f"{base}-{i}") is not None:
        i += 1
    return f"{base}-{i}"


def default_name(spec: SweepSpec) -> str:
    """The spec's name, else its file's stem (`sweep.yaml` in `examples/cli_program/` -> cli_program)."""
    if spec.name:
        return spec.name
    if spec.source is None:
        return "sweep"
    stem = spec.source.stem
    if stem in ("sweep", "config", "spec") and spec.source.resolve().parent.name:
        return spec.source.resolve().parent.name
    return stem


def backend_name(spec: SweepSpec, backend: str | None = None) -> str:
    """The registry name a sweep runs on (`backend`, else the spec's, else local); a UserError if unknown."""
    from sweeplab.backends import backend_factory

    kind = backend or getattr(spec, "backend", None) or "local"
    backend_factory(kind)
    return kind


def build_backend(spec: SweepSpec, *, workers: int | None = None, backend: str | None = None,
                  address: str | None = None, gpu_ids: Sequence[int] | None = None, smoke: bool = False,
                  store_root: str | Path | None = None) -> Backend:
    """The backend a sweep runs on: `backend`, else the spec's, else local (see `sweeplab.backends`)."""
    from sweeplab.backends import make_backend

    return make_backend(backend_name(spec, backend), spec=spec, workers=workers or spec.workers, address=address,
                        gpu_ids=gpu_ids, smoke=smoke, store_root=store_root)


def record_backend(st: Store, sweep_id: int, be: Backend) -> None:
    """Store where the sweep runs (backend name, Ray address as given), so that `resume` goes back there."""
    address = None
    if be.name == "ray":   # no address: RAY_ADDRESS if set (what Ray connects to), else a new local cluster
        address = getattr(be, "address", None) or os.environ.get("RAY_ADDRESS") or None
    with st.transaction():
        st.update_sweep(sweep_id, backend=be.name, address=address)


def _as_spec(spec: SweepSpec | Mapping[str, Any] | str | Path) -> SweepSpec:
    from sweeplab.spec import SweepSpec, load_spec, parse_spec

    if isinstance(spec, SweepSpec):
        return spec
    if isinstance(spec, Mapping):
        return parse_spec(spec, file="<run_sweep>", base_dir=Path.cwd())
    return load_spec(spec)


def run_sweep(
    spec: SweepSpec | Mapping[str, Any] | str | Path,
    *,
    store: str | Path | None = None,
    backend: str | None = None,
    workers: int | None = None,
    address: str | None = None,
    gpu_ids: Sequence[int] | None = None,
    name: str | None = None,
    overrides: Sequence[str] = (),
    hard_budget: bool = False,
    on_progress: Callable[[Progress], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> SweepOutcome:
    """Run a sweep to its end, as `sweeplab sweep` does, and return how it ended.

    spec         a spec file, a spec mapping (as YAML would load it) or a `SweepSpec`
    store        the store directory (default: $SWEEPLAB_STORE or ./.sweeplab)
    backend      a name from `sweeplab.backends.BACKENDS` (default: the spec's, else local)
    workers      trials at once (default: the spec's, else one per core)
    name         the sweep's name (default: the spec's name or file name; made unique in the store)
    overrides    `key=value` config overrides for every trial

    Bad input raises a UserError (SpecError, ConfigError) before anything is written to the store. The
    outcome's `exit_code` is what the CLI would exit with (0 finished, 1 failed, 2 bad input).
    """
    from sweeplab.driver import Driver
    from sweeplab.store import Store, default_store_dir

    the_spec = _as_spec(spec)
    check_config_files(the_spec)
    backend = backend_name(the_spec, backend)   # a typo is refused before the store is opened
    st = Store.open(Path(store) if store is not None else default_store_dir())
    try:
        sweep_name = unique_name(st, name or default_name(the_spec))
        be = build_backend(the_spec, workers=workers, backend=backend, address=address, gpu_ids=gpu_ids,
                           store_root=st.root)
        try:
            driver = Driver(the_spec, st, be, sweep_name=sweep_name, overrides=list(overrides),
                            hard_budget=hard_budget, on_progress=on_progress, on_note=on_note)
            spec_path = str(the_spec.source.resolve()) if the_spec.source is not None else None
            driver.create(spec_path=spec_path)
            record_backend(st, driver.sweep_id, be)
            return driver.run()
        finally:
            be.shutdown(grace=0.0)
    finally:
        st.close()
