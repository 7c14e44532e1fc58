"""The Python API of a whole sweep, and the code path the CLI shares with it.

    import sweeplab as sl

    outcome = sl.run_sweep("sweep.yaml", store="runs/.sweeplab", workers=4)
    print(outcome.state, outcome.best_value, outcome.best_params)

    sweep = sl.sweep("sweep.yaml", fn=train, workers=4, background=True)   # a handle (notebook-friendly)
    sweep.wait(); sweep.best; sweep.trials()                                # pandas DataFrame
    sl.load("my-sweep").status()                                          # an existing sweep

`run_sweep` does what `sweeplab sweep SPEC` does, minus the terminal: validate the spec and its config files
(nothing is written for bad input), open the store, build the backend from the registry
(`sweeplab.backends.make_backend`), create the sweep and drive it to its end. The CLI calls the same
functions (`check_config_files`, `unique_name`, `build_backend`, `record_backend`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeplab.handle import Sweep

if TYPE_CHECKING:
    from sweeplab.backends.base import Backend
    from sweeplab.driver import Progress, SweepOutcome
    from sweeplab.spec import SweepSpec
    from sweeplab.store import Store

__all__ = [
    "Sweep", "backend_name", "build_backend", "check_backend_plan", "check_config_files", "check_spec",
    "default_name", "load", "name_taken", "record_backend", "run_sweep", "sweep", "unique_name",
]


def check_config_files(spec: SweepSpec, *, config_key: str = "config", profile_key: str = "profile") -> None:
    """Read the base config and profile now, as the driver will: a bad file is an error before the store
    is opened, so nothing is written for it. A missing one is named with the spec's key, or with the option that
    gave it (`config_key="--config"`)."""
    if spec.config is None and not spec.profile:
        return
    from sweeplab.config import load_base_config

    load_base_config(spec.config, spec.profile, spec_file=spec.source, cwd=os.getcwd(), config_key=config_key,
                     profile_key=profile_key)


def _refuse_workdir_override(spec: SweepSpec, overrides: Sequence[str]) -> None:
    """`trial.workdir=trial` among the KEY=VALUE arguments: they override the trials' config, so it would set a
    config key the function never reads (or be refused for a command trial as a config override) while every
    trial ran in the sweep's directory. Refused, naming the spec key and the option, unless the base config
    has such a key of its own."""
    from sweeplab.config import parse_override

    if not any(parse_override(text)[0] == "trial.workdir" for text in overrides):
        return
    if spec.config is not None or spec.profile:
        from sweeplab.config import load_base_config

        base = load_base_config(spec.config, spec.profile, spec_file=spec.source, cwd=os.getcwd())
        trial = base.get("trial") if isinstance(base, Mapping) else None
        if isinstance(trial, Mapping) and "workdir" in trial:
            return   # the config's own key
    from sweeplab.errors import UserError

    raise UserError("trial.workdir=...: KEY=VALUE arguments override the trials' config, and trial.workdir is a "
                    "key of the sweep spec: write `sweeplab sweep SPEC --workdir trial`, or `trial: {workdir: "
                    "trial}` in the spec")


def check_spec(spec: SweepSpec, overrides: Sequence[str] = (), *, new_sweep: bool = True,
               config_key: str = "config", profile_key: str = "profile", backend: str | None = None) -> None:
    """Build now what the driver builds from the spec and the overrides once the store is open: the base
    config and profile with the overrides applied, the early-stopping scheduler and the monitors. A mistake
    in any of them is an error before the store is opened, so nothing is written for it.

    For a new sweep, an override may not set a sweep parameter, and with a base config its key must exist
    (`+key=` adds one); a resumed sweep's overrides were accepted when it was created (`new_sweep=False`).
    `config_key` / `profile_key` name the option that gave the base config / profile (`--config`), if not the spec;
    `backend` the one given beside the spec (`--backend`), if any."""
    from sweeplab.config import override_list

    overrides = override_list(overrides)
    check_config_files(spec, config_key=config_key, profile_key=profile_key)
    _check_function_file(spec, remote=(backend or spec.backend or "local") != "local")
    if new_sweep:
        from sweeplab.config import check_config_reaches_trials, check_distinct_overrides, parse_override

        for text in overrides:   # a malformed override is named as such first
            parse_override(text)
        check_distinct_overrides(overrides)
        _refuse_workdir_override(spec, overrides)
        check_config_reaches_trials(function_trials=spec.is_function, config=spec.config, profile=spec.profile,
                                    overrides=list(overrides), file=str(spec.source) if spec.source else None)
    if overrides or (new_sweep and (spec.config is not None or spec.profile)):
        from sweeplab.config import apply_overrides, check_overrides_against_parameters, load_base_config
        from sweeplab.config import check_parameters_against_config as _check_params

        base = (load_base_config(spec.config, spec.profile, spec_file=spec.source, cwd=os.getcwd())
                if spec.config is not None or spec.profile else {})
        if new_sweep:   # `model.hidden` searched, the config's one key 'model.hidden' kept stale in every trial
            _check_params(base, list(spec.space.params))
        apply_overrides(base, list(overrides))
        if new_sweep:
            check_overrides_against_parameters(list(overrides), list(spec.space.params))
            if spec.config is not None:   # a key the base config lacks is a typo unless `+key=` adds it (Hydra)
                apply_overrides(base, list(overrides), strict=True)
    if not spec.is_function:   # the driver builds every trial's command in this environment
        from sweeplab.spec import check_command_paths, check_envvars, check_program_file

        check_envvars(spec)
        check_program_file(spec)
        check_command_paths(spec)
    file = str(spec.source) if spec.source else None
    metric, goal = spec.metric.name, spec.metric.goal
    if spec.early_terminate:
        from sweeplab.errors import SpecError
        from sweeplab.schedulers import make_scheduler

        if not metric:
            raise SpecError("early_terminate needs metric.name: the value schedulers compare", file=file,
                            key="early_terminate")
        make_scheduler(spec.early_terminate, goal=spec.scheduler_goal, file=file, metric=metric)
    if spec.monitors:
        from sweeplab.monitors import parse_monitors

        parse_monitors(list(spec.monitors), file=file, metric=metric, goal=goal)
    if new_sweep:
        completed_points(spec, overrides)


def completed_points(spec: SweepSpec, overrides: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The spec's `points_to_evaluate` as its first trials will run them: each completed from the base config,
    profile and overrides as the driver completes them (a point they cannot complete is a SpecError)."""
    if not spec.points:
        return []
    from sweeplab.driver.tasks import TaskBuilder
    from sweeplab.spec.points import complete_points

    tasks = TaskBuilder(spec, sweep="", root="", cwd=os.getcwd(), overrides=list(overrides), smoke=False)
    return complete_points(spec, tasks.resolve_config({}))


def name_taken(st: Store, name: str) -> bool:
    """True when a sweep of the store has this name, or another name with the same directories (`my sweep`
    and `my_sweep` are both `logs/my_sweep/`: their logs, checkpoints and locks would mix)."""
    from sweeplab.store.layout import safe_name

    if st.sweep_row(name) is not None:
        return True
    safe = safe_name(name)
    return any(safe_name(other) == safe for other in st.sweep_names())


def _is_file(path: Path) -> bool:
    """`path.is_file()`, False for a name the OS refuses (ENAMETOOLONG raises on Python 3.11)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _check_function_file(spec: SweepSpec, *, remote: bool = False) -> None:
    """A `file.py:fn` target's file exists where the driver looks for it (beside the spec, then the working
    directory, as `driver.tasks.function_target`): else every trial would fail to import it, after the store
    was written. A module target (`pkg.module:fn`) is found as the workers' import finds it, and its source
    read for the function, but not imported: importing runs the user's code. `remote` (a Ray backend): a module
    not found here may be installed on the cluster's nodes only, and is left to the trials."""
    module = str(spec.function or "").rpartition(":")[0]
    if not module or module.endswith(".pkl"):   # no function, or one shipped by value (sl.sweep(fn=...))
        return
    from sweeplab.errors import SpecError

    found: Path | None
    if module.endswith(".py"):
        path = Path(module)
        places = [path] if path.is_absolute() else list(dict.fromkeys([   # once each: the spec may be in the cwd
            *([spec.source.resolve().parent / path] if spec.source is not None else []), Path.cwd() / path]))
        found = next((p for p in places if _is_file(p)), None)
        if found is None:
            raise SpecError("function file not found", file=str(spec.source) if spec.source else None,
                            key="function", value=module, expected="a Python file beside the spec or in the "
                            "working directory: " + ", ".join(str(p) for p in places))
    else:   # found as the workers' import looks (working directory, spec directory, sys.path), not imported
        from sweeplab.spec.target import find_module

        search = list(dict.fromkeys([os.getcwd(), *([str(spec.source.resolve().parent)] if spec.source else [])]))
        importable, found = find_module(module, search)
        if not importable and remote:   # a package installed on the cluster's nodes only (their image)
            return
        if not importable:
            raise SpecError(f"module '{module}' not found", file=str(spec.source) if spec.source else None,
                            key="function", value=spec.function, expected="'module:function' with a module "
                            "importable from the working directory, the spec's directory or the Python path ("
                            + ", ".join(search) + ", sys.path), or 'file.py:function'")
        if found is None:
            return
    from sweeplab.spec.target import top_level_names

    fn = str(spec.function).rpartition(":")[2].partition(".")[0]
    names = top_level_names(found)   # read, not imported: None when only running it could tell
    if names is not None and fn not in names:
        import difflib

        functions = sorted(n for n in names if not n.startswith("_"))
        close = difflib.get_close_matches(fn, functions, n=1)
        raise SpecError(f"{found} has no function '{fn}'", file=str(spec.source) if spec.source else None,
                        key="function", value=spec.function,
                        expected="one of its top-level names: " + (", ".join(functions[:20]) or "none"),
                        hint=f"did you mean '{close[0]}'?" if close else None)


def unique_name(st: Store, base: str) -> str:
    """`base`, or `base-2`, `base-3`... when the store already has a sweep of that name (or directory)."""
    if not name_taken(st, base):
        return base
    i = 2
    while name_taken(st, f"{base}-{i}"):
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
    from sweeplab.backends import BACKENDS, backend_factory

    kind = backend or getattr(spec, "backend", None) or "local"
    if backend is None and kind not in BACKENDS:   # the spec's `backend:`: named as a mistake in the spec file
        import difflib

        from sweeplab.errors import SpecError

        close = difflib.get_close_matches(str(kind), list(BACKENDS), n=1)
        raise SpecError("unknown backend", file=str(spec.source) if spec.source else None, key="backend",
                        value=kind, expected=" or ".join(BACKENDS),
                        hint=f"did you mean {close[0]!r}?" if close else None)
    backend_factory(kind)
    return kind


def check_gpu_ids(gpu_ids: Sequence[int] | None, *, key: str = "gpu_ids", given: str | None = None) -> list[int] | None:
    """`gpu_ids` as a list, refusing what would give trials GPUs other than those meant: an id that is not a whole
    number, a negative one (CUDA_VISIBLE_DEVICES hides every device from it on), one given twice (two trials
    on a device each thinks its own), one past the GPUs this job sees (`_devices.select_gpus`: ids count the
    visible devices). None (detect them) stays None; an empty list means no GPUs."""
    if gpu_ids is None:
        return None
    from sweeplab.errors import UserError

    if isinstance(gpu_ids, (str, bytes)) or not isinstance(gpu_ids, Sequence):
        raise UserError(f"{key}: expected a list of GPU ids such as [0, 1]; got {gpu_ids!r}")
    ids = list(gpu_ids)
    shown = given if given is not None else repr(gpu_ids)
    for i, gpu in enumerate(ids):
        if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
            raise UserError(f"{key}: GPU id {gpu!r} is not a device number; expected whole numbers from 0, such as "
                            f"0,1; got {shown}")
        if gpu in ids[:i]:
            raise UserError(f"{key}: GPU {gpu} is given twice; expected each GPU once (two trials would share it, "
                            f"each thinking it its own); got {shown}")
    from sweeplab._devices import select_gpus

    select_gpus(ids, key=key, given=shown)   # one this job cannot see (past CUDA_VISIBLE_DEVICES or the machine's)
    return ids


def check_backend_plan(spec: SweepSpec, *, workers: int | None = None, backend: str | None = None,
                       gpu_ids: Sequence[int] | None = None) -> str:
    """The backend's name, refusing now, without writing or connecting anywhere, what `build_backend` would
    refuse: an unknown backend, and a local plan this machine cannot hold (more workers than its CPUs or GPUs).
    The local backend is built and dropped (it starts no process before `start()`); a Ray cluster is not
    contacted, so a Ray address that does not answer is found only when the backend is built."""
    check_gpu_ids(gpu_ids)
    kind = backend_name(spec, backend)
    if kind == "local":
        build_backend(spec, workers=workers, backend=kind, gpu_ids=gpu_ids).shutdown(grace=0.0)
    return kind


def build_backend(spec: SweepSpec, *, workers: int | None = None, backend: str | None = None,
                  address: str | None = None, gpu_ids: Sequence[int] | None = None, smoke: bool = False,
                  store_root: str | Path | None = None) -> Backend:
    """The backend a sweep runs on: `backend`, else the spec's, else local (see `sweeplab.backends`)."""
    from sweeplab.backends import make_backend

    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        # `workers or spec.workers` ran `workers=0` on the spec's count, and a float or a string failed deep in
        # the backend with a bare TypeError
        from sweeplab.errors import UserError

        raise UserError(f"workers: {workers!r} is not a positive integer (the trials run at once)")
    gpu_ids = check_gpu_ids(gpu_ids)
    return make_backend(backend_name(spec, backend), spec=spec,
                        workers=workers if workers is not None else spec.workers, address=address,
                        gpu_ids=gpu_ids, smoke=smoke, store_root=store_root)


def record_backend(st: Store, sweep_id: int, be: Backend) -> None:
    """Store where the sweep runs (backend name, Ray address as given), so that `resume` goes back there."""
    address = None
    if be.name == "ray":   # no address: RAY_ADDRESS if set (what Ray connects to), else a new local cluster
        address = getattr(be, "address", None) or os.environ.get("RAY_ADDRESS") or None
    with st.transaction():
        st.update_sweep(sweep_id, backend=be.name, address=address)


def check_arguments(*, store: Any = None, name: Any = None) -> None:
    """A UserError naming `store` or `name` when it is not of a type it can be (`store=5`, `name=5` failed
    with a TypeError or an AttributeError from deep inside pathlib or the store)."""
    from sweeplab.errors import UserError

    if store is not None and not isinstance(store, (str, os.PathLike)):
        raise UserError(f"store: {store!r} is not a path; expected the store directory as a str or pathlib.Path")
    if isinstance(store, str) and not store.strip():   # Path("") is the working directory: store.db right in it
        raise UserError(f"store: {store!r} is empty; expected the store directory (None for $SWEEPLAB_STORE or "
                        "./.sweeplab)")
    if name is not None and not isinstance(name, str):
        raise UserError(f"name: {name!r} is not a string; expected the sweep's name, e.g. 'lr-sweep'")


def _as_spec(spec: SweepSpec | Mapping[str, Any] | str | Path, function: str | None = None) -> SweepSpec:
    """A validated spec; with `function`, that trial function replaces the spec's own (or its program)."""
    from sweeplab.spec import SweepSpec, load_spec, parse_spec

    if isinstance(spec, SweepSpec):
        if function is None:
            return spec
        # its fields as they are now (a `with_overrides(profile=..., budget=...)` included), not its file again
        raw = {k: v for k, v in spec.to_jsonable().items() if k not in ("program", "command")}
        raw["function"] = function
        source = spec.source
        parsed = parse_spec(raw, file=str(source) if source is not None else "<run_sweep>",
                            base_dir=source.parent if source is not None else Path.cwd())
        return dataclasses.replace(parsed, source=source)
    if isinstance(spec, Mapping):
        raw = dict(spec)
        if function is not None:
            for key in ("program", "command"):
                raw.pop(key, None)
            raw["function"] = function
        return parse_spec(raw, file="<run_sweep>", base_dir=Path.cwd())
    if not isinstance(spec, (str, os.PathLike)):
        from sweeplab.errors import UserError

        raise UserError(f"spec: {type(spec).__name__} {spec!r:.80} is not a spec; expected a spec file path, a "
                        "mapping (what the YAML would load to) or a SweepSpec")
    return load_spec(spec, function=function)


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
    from sweeplab.config import override_list
    from sweeplab.driver import Driver
    from sweeplab.notebook import optuna_settings_kept
    from sweeplab.store import Store, default_store_dir

    refuse_in_trial_import()
    check_arguments(store=store, name=name)
    the_spec = _as_spec(spec)
    overrides = override_list(overrides)   # "epochs=5" is one override, not nine
    check_spec(the_spec, overrides, backend=backend)
    if name is not None:
        from sweeplab.spec import check_sweep_name

        check_sweep_name(name)
    backend = backend_name(the_spec, backend)   # a typo is refused before the store is opened
    root = Path(store) if store is not None else default_store_dir()
    # too many workers, or a Ray address that does not answer, is refused before the store is opened too
    be = build_backend(the_spec, workers=workers, backend=backend, address=address, gpu_ids=gpu_ids,
                       store_root=root)
    try:
        st = Store.open(root)
    except BaseException:
        be.shutdown(grace=0.0)
        raise
    try:
        with optuna_settings_kept():   # the searcher quiets Optuna process-wide: put back at the end
            try:
                sweep_name = unique_name(st, name or default_name(the_spec))
                if be.name == "local":
                    be.start()   # workers boot while the driver sets up (its searcher imports Optuna), as in the CLI
                driver = Driver(the_spec, st, be, sweep_name=sweep_name, overrides=list(overrides),
                                hard_budget=hard_budget, on_progress=on_progress, on_note=on_note)
                spec_path = str(the_spec.source.resolve()) if the_spec.source is not None else None
                driver.create(spec_path=spec_path, unique=True)
                record_backend(st, driver.sweep_id, be)
                try:
                    return driver.run()
                finally:
                    driver.unlock()   # not left to garbage collection (a notebook's last traceback keeps frames)
            finally:
                be.shutdown(grace=0.0)
    finally:
        st.close()
        from sweeplab._yaml import forget_piped

        forget_piped()   # a named FIFO config read again by the next sweep of this process: its new text


# ------------------------------------------------------------------------------------------ handles
def sweep(
    spec: SweepSpec | Mapping[str, Any] | str | Path,
    *,
    fn: Callable[..., Any] | str | None = None,
    store: str | Path | None = None,
    workers: int | None = None,
    backend: str | None = None,
    address: str | None = None,
    name: str | None = None,
    trials: int | None = None,
    overrides: Sequence[str] = (),
    background: bool = False,
    progress: bool | None = None,
) -> Sweep:
    """Run a sweep from Python with the CLI's driver, backends, store and guarantees; returns its handle.

    spec         a spec file, a spec mapping (as YAML would load it) or a `SweepSpec`
    fn           the trial function, or "module:function"; replaces the spec's `function`/`program`.
                 A function of a module is imported by name in the workers; one defined in a notebook cell
                 (or a lambda, a nested function) is shipped by value (cloudpickle, into the store)
    trials       override budget.trials
    background   return at once; the sweep runs in a thread (`handle.wait()`, `handle.stop()`)
    progress     a live progress line (default: in Jupyter only)

    Bad input (spec, config files, a trial function that cannot be sent to workers) raises before the
    sweep is created. Blocking, Ctrl-C stops the sweep as in the CLI (resumable with `sweeplab resume NAME`).
    """
    from sweeplab.config import override_list
    from sweeplab.notebook import Progress, shipping
    from sweeplab.store import default_store_dir

    refuse_in_trial_import()
    check_arguments(store=store, name=name)
    root = Path(store) if store is not None else default_store_dir()
    target, ship = shipping(fn, root) if fn is not None else (None, None)
    the_spec = _as_spec(spec, function=target)
    if trials is not None:
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:   # the spec's budget.trials rule
            from sweeplab.errors import UserError

            raise UserError(f"trials: {trials!r} is not a positive integer (budget.trials)")
        the_spec = the_spec.with_overrides(budget=dataclasses.replace(the_spec.budget, trials=trials))
    overrides = override_list(overrides)   # "epochs=5" is one override, not nine
    check_spec(the_spec, overrides, backend=backend)   # bad input writes nothing, not even a shipped function's file
    if name is not None:
        from sweeplab.spec import check_sweep_name

        check_sweep_name(name)
    # built before anything is written: too many workers, or a Ray address that does not answer, is refused
    # with the store, the shipped function's file and the sweep untouched
    be = build_backend(the_spec, workers=workers, backend=backend, address=address, store_root=root)
    try:
        if ship is not None:
            ship()
        shown = Progress(progress)
        runner = _Runner(the_spec, store=root, workers=workers, backend=backend, address=address, name=name,
                         overrides=overrides, on_progress=shown.update, on_note=shown.note, be=be)
    except BaseException:
        be.shutdown(grace=0.0)
        raise
    if background:
        shown.start(runner.name)   # the line under this cell, updated in place by the sweep's thread
    return runner.launch(background)


def refuse_in_trial_import() -> None:
    """A sweep started by the top-level code of a trial's own module, which a worker is importing for the
    trial function, would start a sweep in every worker (sweeps within sweeps, in the same store): bad input,
    with the fix, as Python's multiprocessing refuses a process started while the main module is imported."""
    from sweeplab.backends.targets import importing_trial_module

    module = importing_trial_module()
    if module is not None:
        from sweeplab.errors import UserError

        raise UserError(f"{module} starts a sweep when a worker imports it for its trial function: put the "
                        "sweeplab.sweep(...) call under `if __name__ == \"__main__\":`")


def load(name: str, *, store: str | Path | None = None) -> Sweep:
    """The handle of an existing sweep in the store (read-only: `best`, `trials()`, `status()`...)."""
    from sweeplab.store import Store, default_store_dir

    check_arguments(store=store, name=name)
    root = Path(store) if store is not None else default_store_dir()
    st = Store.open(root, readonly=True)
    try:
        if st.sweep_row(name) is None:
            from sweeplab.store.queries import unknown_sweep

            raise unknown_sweep(st, name)
    finally:
        st.close()
    return Sweep(name, root)


class _Runner:
    """One sweep's driver, created at once (bad input raises here) and run here or in a thread."""

    def __init__(self, spec: SweepSpec, *, store: str | Path | None, workers: int | None, backend: str | None,
                 address: str | None, name: str | None, overrides: Sequence[str],
                 on_progress: Callable[[Progress], None] | None, on_note: Callable[[str], None] | None = None,
                 create: bool = True, unique: bool = True, be: Backend | None = None) -> None:
        """`be`: the sweep's backend, already built by the caller (who checked it before writing anything);
        else built here, before the store is opened."""
        from sweeplab.driver import Driver
        from sweeplab.store import Store, default_store_dir

        check_spec(spec, overrides, backend=backend)
        backend = backend_name(spec, backend)
        self.store_root = Path(store) if store is not None else default_store_dir()
        self.outcome: SweepOutcome | None = None
        self.error: BaseException | None = None
        self._noted: list[str] = []
        if on_note is not None:
            shown = on_note

            def on_note(text: str) -> None:
                self._noted.append(text)
                shown(text)
        self._on_note = on_note
        self._thread: Any = None
        self._ended: Any = None   # set when a background sweep's thread ends (start_thread)
        # built first: too many workers or a Ray address that does not answer writes nothing to the store
        self.be: Backend | None = be if be is not None else build_backend(
            spec, workers=workers, backend=backend, address=address, store_root=self.store_root)
        try:
            self.st = Store.open(self.store_root)
        except BaseException:
            self.be.shutdown(grace=0.0)
            raise
        from sweeplab.notebook import optuna_settings_kept

        self._kept: Any = optuna_settings_kept()   # left in close(): the searcher quiets Optuna process-wide
        self._kept.__enter__()
        try:
            self.name = unique_name(self.st, name or default_name(spec)) if create else str(name)
            if self.be.name == "local":
                self.be.start()   # workers boot while the driver sets up, as in the CLI
            self.driver = Driver(spec, self.st, self.be, sweep_name=self.name, overrides=list(overrides),
                                 on_progress=on_progress, on_note=on_note)
            if create:
                spec_path = str(spec.source.resolve()) if spec.source is not None else None
                self.driver.create(spec_path=spec_path, unique=unique)
                self.name = self.driver.name
            else:
                self.driver.resume()
            record_backend(self.st, self.driver.sweep_id, self.be)
        except BaseException:
            self.close()
            raise

    def run(self) -> SweepOutcome:
        try:
            self.outcome = self.driver.run()
            reason = self.outcome.reason
            if self.outcome.exit_code == 1 and self._on_note is not None and reason not in self._noted:
                # why it failed, with the first failure's traceback: what the CLI prints at the end
                self._on_note(f"sweep {self.name} {self.outcome.state.value}: {reason}")
            return self.outcome
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.close()

    def launch(self, background: bool) -> Sweep:
        """Run the sweep here (blocking) or in a thread; the handle either way."""
        handle = Sweep(self.name, self.store_root, runner=self)
        if background:
            self.start_thread()
        else:
            code = self.run().exit_code
            if code == 130:   # Ctrl-C (Jupyter's "interrupt kernel"), the trials stopped
                # raised, as Python code does, once the sweep is stopped and recorded: "Run All" stops here
                raise KeyboardInterrupt(f"sweep {self.name!r} interrupted: `sweeplab resume {self.name}` "
                                        "continues it")
            if code == 129:   # the terminal closed (SIGHUP), the sweep stopped and recorded: the script ends as
                import os  # the hang-up would have ended it (the driver put its default action back)
                import signal

                os.kill(os.getpid(), signal.SIGHUP)
        return handle

    def start_thread(self) -> None:
        import signal
        import threading

        from sweeplab.backends._start_signals import SignalHold

        # the backend's start-up hold of SIGTERM and Ctrl-C (backends/_start_signals.py) is released here, in
        # the main thread: the driver's thread can neither take it over nor put the original handlers back, so
        # after a background sweep the kernel kept the hold as its handler for good. A signal it held raises now.
        try:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                held = signal.getsignal(sig)
                if isinstance(held, SignalHold) and threading.current_thread() is threading.main_thread():
                    held.release(restore=True)
        except BaseException:
            self.close()
            raise
        ended = self._ended = threading.Event()

        def body() -> None:
            try:
                self.run()
            except BaseException:   # kept in self.error: wait() raises it in the caller's thread
                pass
            finally:
                ended.set()

        # run in this cell's context: Jupyter's kernel (ipykernel 7) keeps the cell a thread's output belongs
        # to in a context variable, which a new thread does not inherit, so the sweep's notes (why it failed,
        # its warnings) went to whichever cell was running when they were written
        import contextvars

        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(body,),
                                        name=f"sweeplab-{self.name}", daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None) -> bool:
        """Whether the background sweep has ended, waiting up to `timeout` seconds (None: until it ends).
        An Event, not `Thread.join`: a join that Ctrl-C interrupts marks the running thread ended (CPython's
        bpo-45274 handling in `_wait_for_tstate_lock`), after which the handle took the sweep for done."""
        return True if self._ended is None else bool(self._ended.wait(timeout))

    def close(self) -> None:
        driver = getattr(self, "driver", None)
        if driver is not None:
            driver.unlock()
        if self.be is not None:
            self.be.shutdown(grace=0.0)
            self.be = None
        if self.st is not None:
            self.st.close()
            self.st = None   # type: ignore[assignment]
        from sweeplab._yaml import forget_piped

        forget_piped()   # a named FIFO config read again by the next sweep of this process: its new text
        kept, self._kept = getattr(self, "_kept", None), None
        if kept is not None:
            kept.__exit__(None, None, None)
