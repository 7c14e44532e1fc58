"""Optuna objectives, unchanged, under sweeplab's driver, backends and store.

    import sweeplab as sl

    def objective(trial):                       # any define-by-run objective, as written for Optuna
        x = trial.suggest_float("x", -10, 10)
        if trial.suggest_categorical("kind", ["a", "b"]) == "a":
            ...
        for step in range(10):
            trial.report(loss, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return loss

    sweep = sl.optimize(objective, n_trials=100, workers=4)   # or: sweeplab sweep --optuna mod:objective
    sweep.best

Each trial runs in a worker process (local or Ray) with Optuna's own `Trial` attached to the sweep's study,
a JournalStorage file in the store; see `sweeplab.search.optuna_objective` for how the driver stays the owner
of the search, and docs/optuna.md.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeplab.errors import UserError
from sweeplab.search import OBJECTIVE_TRIAL

if TYPE_CHECKING:
    from sweeplab.api import Sweep
    from sweeplab.store import Store

__all__ = ["TRIAL_FUNCTION", "optimize", "optuna_spec"]

TRIAL_FUNCTION = OBJECTIVE_TRIAL


def optuna_spec(name: str, n_trials: int | None, *, direction: str | Sequence[str] = "minimize",
                seed: int | None = None, workers: int | None = None, retries: int | None = None,
                timeout: float | None = None, trial_timeout: float | str | None = None,
                workdir: str | None = None) -> dict[str, Any]:
    """The sweep spec of an Optuna objective: method `optuna`, no declared parameters, the metric `value`
    (or, for several directions, the objectives `values_0`, `values_1`...)."""
    from sweeplab.search.optuna_objective import VIOLATION, metric_names

    directions = [direction] if isinstance(direction, str) else list(direction)
    for d in directions:
        if d not in ("minimize", "maximize"):
            raise UserError(f"direction: {d!r} is not one of minimize | maximize")
    if not directions:
        raise UserError("directions: give at least one (minimize | maximize)")
    if n_trials is not None and (isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1):
        raise UserError(f"n_trials: {n_trials!r} is not a positive integer")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout > 0):   # NaN too
        raise UserError(f"timeout: {timeout!r} is not a positive number of seconds (the whole study's, as in "
                        "study.optimize; trial_timeout= limits each trial)")
    metrics = [{"name": m, "goal": d} for m, d in zip(metric_names(len(directions)), directions, strict=True)]
    budget: dict[str, Any] = {"trials": n_trials} if n_trials is not None else {}
    spec: dict[str, Any] = {"name": name, "method": "optuna", "metric": metrics[0] if len(metrics) == 1 else metrics,
                            "parameters": {}, "function": TRIAL_FUNCTION, "budget": budget,
                            # Optuna's feasibility (trial.set_constraint, constraints_func): as study.best_trial,
                            # an infeasible trial is never the best nor on the front
                            "constraints": [{"metric": VIOLATION, "max": 0}]}
    if seed is not None:
        spec["seed"] = seed
    if workers is not None:
        spec["workers"] = workers
    trial: dict[str, Any] = {}
    if retries is not None:
        trial["retries"] = retries
    if trial_timeout is not None:
        trial["timeout"] = trial_timeout
    if workdir is not None:
        if not isinstance(workdir, str) or workdir.strip().lower() not in ("sweep", "trial"):
            raise UserError(f"workdir: {workdir!r} is not one of sweep | trial (sweep: every trial in this "
                            "working directory, shared; trial: each in <store>/workdirs/<sweep>/<trial>/)")
        trial["workdir"] = workdir.strip().lower()
    if trial:
        spec["trial"] = trial
    return spec


def optimize(
    objective: Callable[[Any], Any] | str,
    n_trials: int | None = 100,
    *,
    workers: int | None = None,
    sampler: Any = None,
    pruner: Any = None,
    direction: str | None = None,
    directions: Sequence[str] | None = None,
    study: Any = None,
    name: str | None = None,
    store: str | Path | None = None,
    backend: str | None = None,
    address: str | None = None,
    seed: int | None = None,
    retries: int | None = None,
    timeout: float | None = None,
    trial_timeout: float | str | None = None,
    callbacks: Sequence[Callable[[Any, Any], None]] | None = None,
    background: bool = False,
    progress: bool | None = None,
    on_progress: Callable[[Any], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    raise_interrupt: bool = True,
    workdir: str | None = None,
    **optuna_only: Any,
) -> Sweep:
    """Run an Optuna objective for `n_trials` trials on `workers` processes (or Ray); returns the handle.

    n_trials    new trials to run; None: as in `study.optimize`, until `timeout`, or else until the study is
                stopped (a GridSampler or BruteForceSampler done, `study.stop()`, Ctrl-C)
    timeout     seconds, as in `study.optimize`: no trial starts after that (running ones finish); it counts
                from when the sweep starts (and again from a `sweeplab resume`, as a new `study.optimize`)
    trial_timeout  a trial running longer is stopped and fails (sweeplab's `trial.timeout`, e.g. "10m")
    workdir     where each trial runs (the spec's `trial.workdir`): "sweep" (default: this working directory,
                shared by every trial) or "trial" (a directory of its own, `<store>/workdirs/<sweep>/<trial>/`,
                for an objective writing files by a relative name)
    callbacks   as in `study.optimize`: each `callback(study, frozen_trial)` runs after every trial, in this
                process (the driver's); not kept for a `sweeplab resume`

    objective   `def objective(trial) -> float` importable by worker processes, or "module:function"
    sampler     any Optuna sampler (default: Optuna's, TPE); pruner: any Optuna pruner (default: median)
    direction   "minimize" (default) or "maximize"; directions: one per objective, for an objective
                returning several values (as `optuna.create_study(directions=[...])`)
    study       an existing Optuna study (e.g. `optuna.load_study(storage="sqlite:///old.db", ...)`): its
                finished trials seed the search and show in the dashboard; its direction, sampler and
                pruner are used unless given (a direction must be its own: its trials go into it)
    name        the sweep's name (default: the objective's name; made unique in the store)
    on_progress a callback taking `sweeplab.driver.Progress` (replaces the notebook progress line)
    raise_interrupt  False: a blocking sweep stopped by Ctrl-C returns its handle (outcome exit code 130)
                instead of raising KeyboardInterrupt, for the CLI, which reports it as a spec sweep's

    The sweep is an ordinary sweep of the store: `sweeplab resume NAME` continues it after a crash
    (completed trials kept, running ones rerun, up to `n_trials` in total), the dashboard shows it.
    """
    workers, progress = _study_optimize_arguments(optuna_only, workers, progress)
    from sweeplab.notebook import optuna_settings_kept

    with optuna_settings_kept():   # opening the study quiets Optuna process-wide: put back (the runner's keeps it)
        launched = _optimize(objective, n_trials, workers=workers, sampler=sampler, pruner=pruner,
                             direction=direction, directions=directions, study=study, name=name, store=store,
                             backend=backend, address=address, seed=seed, retries=retries, timeout=timeout,
                             trial_timeout=trial_timeout, callbacks=callbacks, background=background,
                             progress=progress, on_progress=on_progress, on_note=on_note,
                             raise_interrupt=raise_interrupt, workdir=workdir)
    return launched


def _check_callbacks(callbacks: Any) -> list[Callable[[Any, Any], None]] | None:
    """`callbacks` as `study.optimize` takes them: a list of `callback(study, frozen_trial)` callables (one given
    alone, or a non-callable in the list, failed only when the first trial ended)."""
    if callbacks is None:
        return None
    if callable(callbacks) or isinstance(callbacks, (str, bytes, Mapping)) or not isinstance(callbacks, Iterable):
        raise UserError(f"callbacks: {callbacks!r} is not a list; give a list of callback(study, trial) functions, "
                        "e.g. callbacks=[my_callback]")
    listed = list(callbacks)   # a generator is read once, here
    for i, callback in enumerate(listed):
        if not callable(callback):
            raise UserError(f"callbacks[{i}]: {callback!r} is not callable; expected a callback(study, trial) "
                            "function")
    return listed


def _optimize(objective: Callable[[Any], Any] | str, n_trials: int | None, *, workers: int | None, sampler: Any,
              pruner: Any, direction: str | None, directions: Sequence[str] | None, study: Any, name: str | None,
              store: str | Path | None, backend: str | None, address: str | None, seed: int | None,
              retries: int | None, timeout: float | None, trial_timeout: float | str | None,
              callbacks: Sequence[Callable[[Any, Any], None]] | None, background: bool, progress: bool | None,
              on_progress: Callable[[Any], None] | None, on_note: Callable[[str], None] | None,
              raise_interrupt: bool, workdir: str | None) -> Sweep:
    from sweeplab.api import Sweep as _Sweep
    from sweeplab.api import _Runner, build_backend, check_arguments, check_spec
    from sweeplab.notebook import Progress, shipping
    from sweeplab.search.optuna_objective import StudySettings, open_study, write_settings
    from sweeplab.spec import parse_spec
    from sweeplab.store import default_store_dir

    check_arguments(store=store, name=name)
    if name is not None:
        from sweeplab.spec import check_sweep_name

        check_sweep_name(name)
    callbacks = _check_callbacks(callbacks)
    root = Path(store) if store is not None else default_store_dir()
    target, ship = shipping(objective, root, "objective")
    python_path = [os.getcwd()]
    goals = _directions(direction, directions, study)
    if study is not None:
        sampler = sampler if sampler is not None else study.sampler
        pruner = pruner if pruner is not None else study.pruner
    if seed is None:   # a seeded sampler (TPESampler(seed=0)) makes the sweep reproducible, as in Optuna
        seed = _sampler_seed(sampler)
    base = name or target.rpartition(":")[2].rpartition(".")[2] or "optuna"
    spec = parse_spec(optuna_spec(base, n_trials, direction=goals, seed=seed, workers=workers,
                                  retries=retries, timeout=timeout, trial_timeout=trial_timeout,
                                  workdir=workdir),
                      file="<optimize>", base_dir=Path.cwd())
    # bad input writes nothing: the plan (an unknown backend, more workers than the machine holds) is checked,
    # and the backend built (a Ray cluster connected to: an address that does not answer is refused), before
    # the objective's file, the store and the sweep's study are written, as for a spec
    check_spec(spec)
    _check_kinds(sampler, pruner)
    _check_packages(sampler, pruner)
    be = build_backend(spec, workers=workers, backend=backend, address=address, store_root=root)
    try:
        ship()
        _check_importable(target, python_path)
        sweep_name, directory = _reserve_name(root, base)
        settings = StudySettings(objective=target, study_name=sweep_name, directions=goals, sampler=sampler,
                                 pruner=pruner, python_path=python_path,
                                 timeout=float(timeout) if timeout is not None else None)
        write_settings(directory, settings)
        if study is not None:
            _fail_stale_trials(study)
        imported = _seed_journal(open_study(directory, settings, create=True), study) if study is not None else []
        waiting = [t._trial_id for t in study.get_trials(deepcopy=False) if t.state.name == "WAITING"] \
            if study is not None else []
        shown = Progress(progress)
        runner = _Runner(spec, store=root, workers=workers, backend=backend, address=address, name=sweep_name,
                         overrides=[f"optuna_study={directory}"], on_progress=on_progress or shown.update,
                         on_note=on_note or shown.note, unique=False, be=be)   # its study is under this name
    except BaseException:
        be.shutdown(grace=0.0)
        raise
    if imported:
        _seed_store(runner, imported, n_trials, source=getattr(study, "study_name", "an Optuna study"))
    writer = _StudyWriter(study, len(imported), waiting) if study is not None and _writable(study) else None
    if callbacks or writer:
        from sweeplab.search.optuna_objective import ObjectiveSearcher

        searcher = runner.driver.searcher   # as (re)built above
        assert isinstance(searcher, ObjectiveSearcher)
        # the given study first: a callback reading it (a closure over `study`) sees the trial, as in Optuna;
        # and last: the study user attrs a callback set (`study.set_user_attr(...)`) reach it too
        around = [writer] if writer else []
        searcher.callbacks = [*around, *(callbacks or []), *(around if callbacks else [])]
    if background and on_progress is None:
        shown.start(runner.name)   # the line under this cell, updated in place by the sweep's thread
    if background:   # the given study gets each trial as it ends, from the sweep's thread
        return runner.launch(background)
    try:
        if raise_interrupt:
            handle = runner.launch(background)
        else:
            runner.run()
            handle = _Sweep(runner.name, runner.store_root, runner=runner)
    except BaseException:   # Ctrl-C: the trials that ended are the study's too; the error is the one raised
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.write(open_study(directory, settings), final=True)
        raise
    if writer is not None:   # what ended after a trial still running too
        writer.write(open_study(directory, settings), final=True)
    return handle


#: `study.optimize` arguments taken as they are: a call ported by its name keeps them
_STUDY_OPTIMIZE_ONLY = ("n_jobs", "catch", "gc_after_trial", "show_progress_bar")


def _reserve_name(root: Path, base: str) -> tuple[str, Path]:
    """The sweep's name (`base`, else `base-2`...) and its study directory, made here: a name is taken once
    its directory exists. Two `sl.optimize` started at once (threads of a notebook, two processes) both
    chose the free `base` before either created its sweep, then wrote one study: one failed ("already being
    run by pid ...", or a FileNotFoundError of the other's files)."""
    from sweeplab.api import name_taken
    from sweeplab.search.optuna_objective import study_dir
    from sweeplab.store import Store

    st = Store.open(root)
    try:
        i = 1
        while True:
            name = base if i == 1 else f"{base}-{i}"
            i += 1
            if name_taken(st, name):
                continue
            directory = study_dir(root.resolve(), name)
            try:
                directory.mkdir(parents=True)
            except FileExistsError:   # another sl.optimize's, or a former one's that did not start
                continue
            return name, directory
    finally:
        st.close()


def _study_optimize_arguments(kwargs: dict[str, Any], workers: int | None, progress: bool | None
                              ) -> tuple[int | None, bool | None]:
    """`study.optimize(objective, n_trials=50, n_jobs=4, show_progress_bar=True, catch=(ValueError,))` ported by
    renaming the call runs as it reads (they were refused, so the port took edits): `n_jobs` is the number
    of worker processes (-1: one per CPU, as Optuna's threads), unless `workers` says otherwise;
    `show_progress_bar` is `progress`; `gc_after_trial` has nothing left to do (each trial runs in a worker
    process) and `catch` nothing to add (every exception fails its trial and the sweep goes on, as with
    `catch=(Exception,)`). Any other name is the TypeError a misspelt argument gets."""
    for key in kwargs:
        if key not in _STUDY_OPTIMIZE_ONLY:
            raise TypeError(f"optimize() got an unexpected keyword argument {key!r}")
    jobs = kwargs.get("n_jobs")
    if jobs is not None:
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs == 0 or jobs < -1:
            raise UserError(f"n_jobs: expected a whole number of parallel trials >= 1, or -1 for one per CPU; "
                            f"got {jobs!r}")
        jobs = (os.cpu_count() or 1) if jobs == -1 else jobs
        if workers is not None and workers != jobs:
            raise UserError(f"n_jobs={kwargs['n_jobs']!r} and workers={workers!r} disagree; give one of them "
                            "(both set how many trials run at once)")
        workers = jobs
    bar = kwargs.get("show_progress_bar")
    if bar is not None and progress is None:
        progress = bool(bar)
    return workers, progress


def _directions(direction: str | None, directions: Sequence[str] | None, study: Any) -> list[str]:
    """The study's directions: `direction` or `directions` (not both, as `optuna.create_study`), else the
    given study's, else minimize."""
    if direction is not None and directions is not None:
        raise UserError("give direction or directions, not both")
    if isinstance(directions, str):
        raise UserError(f"directions: {directions!r} is a string; give a list, e.g. ['minimize', 'maximize']")
    given = [direction] if direction is not None else list(directions) if directions is not None else None
    goals = None if given is None else [_goal(d) for d in given]
    if study is None:
        return goals or ["minimize"]
    theirs = [d.name.lower() for d in study.directions]
    if goals is not None and goals != theirs:   # the sweep's trials go into that study: one sense of best
        raise UserError(f"study {study.study_name!r} has {len(theirs)} objective(s) ({', '.join(theirs)}); "
                        f"direction(s) given: {', '.join(map(str, goals))}. The sweep's trials are added to "
                        f"that study, so its directions are the sweep's: give none, or a study created with "
                        f"those (optuna.create_study(direction=...))")
    return theirs


def _check_kinds(sampler: Any, pruner: Any) -> None:
    """A sampler or pruner that is not an Optuna sampler or pruner object: `sampler="tpe"` or the class
    `pruner=MedianPruner` (not `MedianPruner()`) created the sweep, then its driver failed at the first trial
    ("'str' object has no attribute 'after_trial'"), or a trial at its first `should_prune()`."""
    import optuna

    for what, value, base in (("sampler", sampler, optuna.samplers.BaseSampler),
                              ("pruner", pruner, optuna.pruners.BasePruner)):
        if value is None or isinstance(value, base):
            continue
        if isinstance(value, type) and issubclass(value, base):
            raise UserError(f"{what}={value.__name__}: a class, not {what} object; pass an instance, as "
                            f"Optuna does: {what}=optuna.{what}s.{value.__name__}()")
        raise UserError(f"{what}={value!r} is not an Optuna {what} (optuna.{what}s.{base.__name__}): pass one, "
                        f"e.g. {what}=optuna.{what}s.{'TPESampler' if what == 'sampler' else 'MedianPruner'}()")


def _check_packages(*objects: Any) -> None:
    """Refuse a sampler or pruner whose optional package is not installed (CmaEsSampler without `cmaes`).

    Optuna imports such a package lazily, at the first sample that needs it: in a sweep that is in the workers,
    where every trial after the first failed with ModuleNotFoundError. Optuna's modules name those packages
    as module-level `_LazyImport("cmaes")` objects (Optuna 4+) or a `try_import()` context kept as `_imports`
    (earlier); both are read here without importing anything.
    """
    import importlib.util
    import types

    for obj in objects:
        if obj is None:
            continue
        inner = [v for v in vars(obj).values() if v is not obj and type(v).__name__.endswith(("Sampler", "Pruner"))] \
            if hasattr(obj, "__dict__") else []
        _check_packages(*inner)   # the sampler a wrapper holds: PartialFixedSampler(..., CmaEsSampler())
        for cls in type(obj).__mro__:
            module = sys.modules.get(cls.__module__)
            if module is None or not cls.__module__.startswith("optuna."):
                continue
            missing: list[str] = []
            for value in list(vars(module).values()):
                if isinstance(value, types.ModuleType) and type(value).__name__ == "_LazyImport":
                    top = value.__name__.partition(".")[0]
                    if top != "optuna" and importlib.util.find_spec(top) is None and top not in missing:
                        missing.append(top)
            deferred = vars(module).get("_imports")   # Optuna 3: `with try_import() as _imports: import cmaes`
            if deferred is not None and callable(getattr(deferred, "is_successful", None)) \
                    and not deferred.is_successful():
                try:
                    deferred.check()
                except ImportError as exc:
                    raise UserError(f"{type(obj).__name__} cannot run here: {exc}") from None
            if missing:
                names = ", ".join(repr(m) for m in missing)
                raise UserError(f"{type(obj).__name__} needs the package{'s' if len(missing) > 1 else ''} "
                                f"{names}, which is not installed; pip install {' '.join(missing)} "
                                "(or choose another sampler / pruner)")


def _sampler_seed(sampler: Any) -> int | None:
    """A sweep seed drawn from a seeded sampler's random state, or None (unseeded, or not an Optuna sampler).

    Each trial's sampler is reseeded from (sweep seed, trial number), so without a sweep seed the seed the
    user gave the sampler would be lost. Optuna's samplers keep a `LazyRandomState` whose generator exists
    before first use only when they were given a seed."""
    import hashlib

    for attr in ("_rng", "_cma_rng"):
        lazy = getattr(sampler, attr, None)
        rng = getattr(lazy, "_rng", lazy)    # LazyRandomState._rng, or a RandomState itself
        get_state = getattr(rng, "get_state", None)
        if callable(get_state):
            kind, keys, pos, *_ = get_state()
            digest = hashlib.sha256(f"{kind}:{pos}:".encode() + bytes(memoryview(keys))).digest()
            return int.from_bytes(digest[:4], "big")
    return None


def _goal(direction: Any) -> str:
    """"minimize" / "maximize" from what optuna.create_study takes: either word in any case, or a
    StudyDirection (anything else is left for optuna_spec to refuse)."""
    name = getattr(direction, "name", direction)   # StudyDirection.MAXIMIZE -> "MAXIMIZE"
    return name.lower() if isinstance(name, str) else direction


class _no_optimize_on_import:
    """While the objective's module is imported: a `study.optimize(...)` at its top level (Optuna's README
    form, `python quickstart.py`) is a UserError. Unguarded, it ran a whole plain-Optuna study inside this
    import, and again inside every worker's import, before the sweep's first trial."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.saved: Any = None

    def __enter__(self) -> None:
        import optuna

        target = self.target
        self.saved = optuna.study.Study.optimize

        def optimize(study: Any, *args: Any, **kwargs: Any) -> None:
            module = target.rpartition(":")[0]
            raise UserError(f"importing {module} (for the objective {target!r}) ran study.optimize(...) at its "
                            "top level, which worker processes importing it would run again: put it under `if "
                            "__name__ == \"__main__\":` (or remove it); sweeplab runs the objective itself")

        optuna.study.Study.optimize = optimize  # type: ignore[method-assign,assignment]

    def __exit__(self, *exc: Any) -> None:
        import optuna

        optuna.study.Study.optimize = self.saved  # type: ignore[method-assign]


def _check_importable(target: str, python_path: Sequence[str]) -> None:
    """Import the objective now, in this process: a typo is an error before anything runs. The import path
    entries the import adds for it (the working directory, a `file.py` target's directory) are taken out
    again: they stayed at the head of the kernel's `sys.path` after every `sl.optimize` of a notebook, where a
    module of that directory would shadow an installed one for the rest of the session."""
    import inspect

    from sweeplab.backends.targets import load_target

    before = set(sys.path)
    try:
        with _no_optimize_on_import(target):
            objective = load_target(target, list(python_path))
    except UserError:
        raise
    except SystemExit as exc:   # argparse at the module's top level, given this process's command line
        module = target.rpartition(":")[0]
        raise UserError(f"objective {target!r}: importing {module} exited (SystemExit {exc.code}), as a module "
                        "that parses the command line at its top level does: worker processes import it with "
                        "their own command line. Parse arguments under `if __name__ == \"__main__\":` (and run "
                        "sl.optimize there), or read settings from the environment or a file") from None
    except Exception as exc:
        raise UserError(f"objective {target!r} cannot be imported: {type(exc).__name__}: {exc}") from None
    finally:
        module = target.rpartition(":")[0]
        added = {*python_path, os.path.dirname(os.path.abspath(module)) if module.endswith(".py") else None}
        sys.path[:] = [p for p in sys.path if p in before or p not in added]
    if inspect.isclass(objective):   # objective(trial) would construct an instance: every trial would fail
        name = target.rpartition(":")[2]
        raise UserError(f"objective {target!r} is a class: calling it with the trial makes an instance, not a "
                        f"value (Optuna fails every trial so). Pass an instance, as Optuna's examples do: "
                        f"sl.optimize({name}(...)), or on the command line a module-level "
                        f"`objective = {name}(...)` and --optuna MODULE:objective")


# ------------------------------------------------------------------------------------------ importing
def _fail_stale_trials(study: Any) -> None:
    """A study on a storage with heartbeats (`RDBStorage(..., heartbeat_interval=1)`, as
    `pytorch/pytorch_checkpoint.py` makes it) may hold a trial whose process was killed: `study.optimize` fails
    it before it runs a trial, and the storage's `failed_trial_callback` (`RetryFailedTrialCallback`) enqueues
    its retry. Done here the same way before the study is imported, so the retry runs first and the trials
    the sweep adds get the numbers their objective saw (a trial left running would hold one)."""
    import warnings

    import optuna
    from optuna.storages._heartbeat import is_heartbeat_enabled

    if is_heartbeat_enabled(study._storage):
        with warnings.catch_warnings():   # as in study.optimize: the call is experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)


def _seed_journal(journal_study: Any, source: Any) -> list[Any]:
    """Copy `source` into the sweep's journal study: its user attrs and metric names, its finished trials, then
    its enqueued (WAITING) trials, which the sweep's first trials run as `study.optimize` would; returns the
    finished ones (frozen), in order. A trial still RUNNING there (its process was killed: a restarted
    kernel, `kill -9`) is copied as failed, in its place: the trials the sweep adds then get the numbers in
    `source` their objective saw (`trial.number`), as `study.optimize` numbers them after it."""
    import datetime

    from sweeplab.search.optuna_objective import link

    trials = source.get_trials(deepcopy=True)
    finished = [t for t in trials if t.state.name != "WAITING"]
    waiting = [t for t in trials if t.state.name == "WAITING"]
    running = [t for t in finished if not t.state.is_finished()]
    for t in running:
        t.state, t.values = type(t.state).FAIL, None
        t.datetime_complete = t.datetime_start = t.datetime_start or datetime.datetime.now()
    for key, value in source.user_attrs.items():
        journal_study.set_user_attr(key, value)
    names = getattr(source, "metric_names", None)   # study.set_metric_names: trials_dataframe's `values_<name>`
    if names:
        journal_study.set_metric_names(list(names))
    journal_study.add_trials(finished)
    for t in running:   # for the store's reason, not in the journal
        t.system_attrs = {**t.system_attrs, _RUNNING_THERE: True}
    for number, frozen in enumerate(journal_study.get_trials(deepcopy=False)[:len(finished)]):
        link(journal_study, number, frozen._trial_id, running=False)
    journal_study.add_trials(waiting)
    return finished


_STATES = {"COMPLETE": "completed", "PRUNED": "pruned", "FAIL": "failed"}
_RUNNING_THERE = "sweeplab_running_there"   # on the journal's copy of a trial left RUNNING in the given study


def _writable(study: Any) -> bool:
    """Not another sweep's study (`study=sweep.study()`): only that sweep writes it."""
    from sweeplab.search.optuna_study import _study_class

    return not isinstance(study, _study_class())


class _StudyWriter:
    """Adds the trials the sweep runs to the study given as `study=`, as `study.optimize` adds its trials:
    Optuna's examples and notebooks read `study.best_trial`, `study.trials`, `trials_dataframe()` and plot
    `study` after optimizing it, and optimize the same study again. Called after each trial ends (a callback
    of the sweep's searcher, in the driver), it writes the finished trials in the order they were created,
    so their numbers are the ones the objective saw (`trial.number`); `write(final=True)` at the end writes
    the rest. An enqueued trial the sweep ran is that trial, finished (its number kept), no longer waiting;
    the study's user attrs the objective set (`trial.study.set_user_attr`) are set too. `sweeplab_number`
    (the sweep's link) stays in the journal."""

    def __init__(self, source: Any, imported: int, waiting: Sequence[int]) -> None:
        import threading

        self.source, self.imported, self.waiting = source, imported, list(waiting)
        self.written: set[int] = set()   # journal trial numbers written
        self.done = 0                    # the first `done` trials after the imported ones are written
        self.warned = False              # another process adds trials to the study (warned once)
        self.lock = threading.Lock()

    def __call__(self, journal_study: Any, frozen: Any) -> None:
        self.write(journal_study, final=False)

    def write(self, journal_study: Any, *, final: bool) -> None:
        import copy

        with self.lock:
            for key, value in journal_study.user_attrs.items():
                if self.source.user_attrs.get(key, _MISSING) != value:
                    self.source.set_user_attr(key, value)
            for frozen in journal_study.get_trials(deepcopy=False)[self.imported + self.done:]:
                if frozen.number in self.written:
                    continue
                if not frozen.state.is_finished():
                    if final:
                        continue
                    break   # a trial created before it still runs: its number comes first
                self._write(copy.deepcopy(frozen), frozen.number - self.imported)
                self.written.add(frozen.number)
            while self.imported + self.done in self.written:   # the prefix written: not read again
                self.done += 1

    def _write(self, frozen: Any, index: int) -> None:
        from optuna.trial import TrialState

        storage = self.source._storage
        frozen.system_attrs.pop("sweeplab_number", None)
        _as_tuples(frozen)
        if index < len(self.waiting) and storage.set_trial_state_values(self.waiting[index], TrialState.RUNNING):
            tid = self.waiting[index]
            for name, value in frozen.params.items():
                dist = frozen.distributions[name]
                storage.set_trial_param(tid, name, dist.to_internal_repr(value), dist)
            for step, value in frozen.intermediate_values.items():
                storage.set_trial_intermediate_value(tid, step, value)
            for key, value in frozen.user_attrs.items():
                storage.set_trial_user_attr(tid, key, value)
            for key, value in frozen.system_attrs.items():
                storage.set_trial_system_attr(tid, key, value)
            storage.set_trial_state_values(tid, frozen.state, frozen.values)
        else:
            self._check_alone(frozen.number)
            self.source.add_trial(frozen)

    def _check_alone(self, number: int) -> None:
        """Warn once if the study holds more trials than the sweep gave it: another process optimizes it too
        (Optuna's distributed mode, one script in several terminals), which the sweep's study, seeded when
        it started, does not see."""
        import warnings

        held = len(self.source.get_trials(deepcopy=False))
        if held > number and not self.warned:
            self.warned = True
            name = getattr(self.source, "study_name", "the study")
            warnings.warn(
                f"study {name!r} got trials from another process while this sweep ran: the sweep's sampler "
                f"does not see them (its study was seeded from {name!r} when it started), and its trials are "
                f"added after them (trial {number} is {held} there). Run one sweep with more workers= "
                "(backend='ray' for several machines) rather than several scripts on one study",
                UserWarning, stacklevel=2)


_MISSING = object()


def _as_tuples(frozen: Any) -> None:
    """Categorical choices that were tuples (`suggest_categorical("layers", [(50,), (50, 50)])`) read back
    from the journal's JSON as lists: make them tuples again, as the objective got them and as an in-memory
    study holds them, so `best_params` are the objective's values and later trials' choices match."""
    import optuna

    def tupled(value: Any) -> Any:
        return tuple(tupled(v) for v in value) if isinstance(value, list) else value

    for name, dist in list(frozen.distributions.items()):
        if isinstance(dist, optuna.distributions.CategoricalDistribution) and \
                any(isinstance(c, list) for c in dist.choices):
            index = dist.to_internal_repr(frozen.params[name])
            new = optuna.distributions.CategoricalDistribution([tupled(c) for c in dist.choices])
            frozen.distributions = {**frozen.distributions, name: new}
            frozen.params = {**frozen.params, name: new.to_external_repr(index)}


def _seed_store(runner: Any, trials: Sequence[Any], n_trials: int | None, *, source: str) -> None:
    """Record imported trials as the sweep's first trials (as `fork` does), then rebuild the driver so the
    searcher and the budget (`n_trials` new ones) count them."""
    from sweeplab.search.optuna_objective import METRIC, VIOLATION, metric_names, violation

    st: Store = runner.st
    driver = runner.driver
    with st.transaction():
        for number, t in enumerate(trials):
            state = _STATES[t.state.name]
            running = ", still running there: taken as failed" if t.system_attrs.get(_RUNNING_THERE) else ""
            started = t.datetime_start.timestamp() if t.datetime_start else None
            ended = t.datetime_complete.timestamp() if t.datetime_complete else started
            tid = st.add_trial(driver.sweep_id, number, dict(t.params), {}, None)
            values = list(t.values) if t.values is not None else []
            metrics: dict[str, Any] = dict(zip(metric_names(len(values)), values, strict=True))
            metrics.update({f"user_attrs.{k}": v for k, v in t.user_attrs.items()
                            if isinstance(v, (int, float)) and not isinstance(v, bool)})
            metrics[VIOLATION] = violation(getattr(t, "constraints", None) or t.system_attrs.get("constraints"))
            extra: dict[str, Any] = {"objective_values": values} if len(values) > 1 and state == "completed" else {}
            if state == "completed":
                extra["feasible"] = metrics[VIOLATION] <= 0
            st.update_trial(tid, state=state, value=values[0] if values and state == "completed" else None,
                            metrics=metrics, started=started, ended=ended,
                            reason=f"imported from {source} (trial {t.number}{running})", **extra)
            points = [(int(step), METRIC, float(v), ended or 0.0) for step, v in t.intermediate_values.items()]
            if points:
                st.add_metrics(tid, 0, points)
        st.add_event(driver.sweep_id, "info", f"imported {len(trials)} finished trial(s) from {source}",
                     data={"source": source, "trials": len(trials)})
    driver.trials.clear()
    driver.by_number.clear()
    driver.resume(extra_trials=n_trials)
