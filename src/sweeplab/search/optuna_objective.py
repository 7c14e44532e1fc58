"""Define-by-run Optuna objectives: the driver owns an Optuna study kept in a journal file in the store.

`def objective(trial): x = trial.suggest_float(...)` decides its parameters while it runs, so they cannot be
asked for before the trial starts. Optuna runs such objectives in many processes by sharing one study
storage; sweeplab does the same with a `JournalStorage` file (Optuna's multi-process storage, file locks) in
`<store>/optuna/<sweep>/`:

- the driver's `ObjectiveSearcher.ask` creates each Optuna trial in that study (an enqueued one first, as
  `study.ask` does) and records which sweeplab trial number it belongs to;
- the worker attaches `optuna.trial.Trial(study, trial_id)` to it, so `suggest_*`, `report`, `should_prune`
  and `set_user_attr` run the user's sampler and pruner against the shared storage, exactly as in Optuna's
  own distributed mode;
- the driver alone ends Optuna trials (`study.tell`), when sweeplab ends the trial: a crashed attempt is
  retried on the same Optuna trial (its suggested parameters are kept), and a trial running when the driver
  was killed stays RUNNING until `resume` requeues it.

The sampler and pruner reach the workers pickled in `settings.pkl` (cloudpickle: a sampler class defined in
the user's script travels by value), a file sweeplab itself wrote when the sweep was created; nothing else
is ever unpickled.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from sweeplab.search.base import Searcher
from sweeplab.search.optuna import _reseed, _silence_optuna
from sweeplab.types import TrialSnapshot, TrialState

__all__ = [
    "METRIC",
    "VIOLATION",
    "ObjectiveSearcher",
    "StudySettings",
    "metric_names",
    "note_stop",
    "open_study",
    "optimize_loop",
    "read_settings",
    "study_dir",
    "trial_id_of",
    "violation",
    "write_settings",
]

METRIC = "value"             # the sweep's metric: the objective's return value (and its reported values)
#: the largest of a trial's Optuna constraint values (trial.set_constraint, a sampler's constraints_func), 0
#: without any: the sweep's one constraint is that it stays <= 0, Optuna's feasibility
VIOLATION = "constraint_violation"
_NUMBER_KEY = "sweeplab:trial:"   # study system attr: sweeplab trial number -> Optuna trial id
_STOP_KEY = "sweeplab:stopped"    # study system attr: study.stop() was called (objective or sampler)
_SETTINGS = "settings.pkl"


def metric_names(objectives: int) -> list[str]:
    """The sweep's metrics for an objective returning `objectives` values: `value`, or `values_0`,
    `values_1`... (the columns of Optuna's `trials_dataframe`)."""
    return [METRIC] if objectives == 1 else [f"values_{i}" for i in range(objectives)]
_JOURNAL = "journal.log"


@dataclass
class StudySettings:
    """What both sides need to open the study: written once by sweeplab when the sweep is created."""

    objective: str                      # "module:function" or "file.py:function"
    study_name: str
    directions: list[str]               # "minimize" / "maximize"
    sampler: Any = None                 # an Optuna sampler object (None: Optuna's default, TPE)
    pruner: Any = None                  # an Optuna pruner object (None: Optuna's default, median)
    python_path: list[str] = field(default_factory=list)
    timeout: float | None = None        # seconds after which no trial starts (study.optimize's timeout)


def violation(constraints: Any) -> float:
    """A trial's `VIOLATION` from its Optuna constraint values (a dict by name, or a sequence)."""
    values = list(constraints.values()) if isinstance(constraints, Mapping) else list(constraints or ())
    return max((float(v) for v in values), default=0.0)


def study_dir(root: str | Path, sweep: str) -> Path:
    """The directory of a sweep's Optuna study in the store (the sweep's name made safe as the store's
    layout does; search sits below the store in the layers)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in sweep) or "sweep"
    return Path(root) / "optuna" / safe


def write_settings(directory: Path, settings: StudySettings) -> None:
    """Pickle `settings` with cloudpickle: a sampler or pruner class defined in the user's script or notebook
    (`__main__`, which worker processes cannot import) and a lambda it holds (`constraints_func=lambda t:
    ...`) are written by value; classes of importable modules by name, as pickle does."""
    import cloudpickle

    from sweeplab.errors import UserError

    try:
        blob = cloudpickle.dumps(settings)
    except Exception as exc:   # cloudpickle raises many kinds (TypeError, PicklingError, ...)
        raise UserError(f"the sampler or pruner cannot be sent to worker processes ({type(exc).__name__}: "
                        f"{exc}): it holds something that cannot be serialised (an open file, a lock, a "
                        "connection)") from exc
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"{_SETTINGS}.tmp"
    tmp.write_bytes(blob)
    tmp.replace(directory / _SETTINGS)


def read_settings(directory: Path) -> StudySettings:
    """The settings sweeplab wrote in `directory` (a file of ours: pickled sampler and pruner)."""
    data = pickle.loads((directory / _SETTINGS).read_bytes())
    if not isinstance(data, StudySettings):
        raise TypeError(f"{directory / _SETTINGS} does not hold sweeplab study settings")
    return data


class _FlockLock:
    """The journal's lock as an flock on `journal.log.flock`: the OS drops it when its holder dies.

    Optuna's file locks (a symlink or a created file) outlive a process killed while it appends, and are
    broken only after a 30 s grace period: every worker and a resumed driver would wait that long after a
    kill -9. flock works on local disks and NFSv4 (as POSIX locks).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fh: Any = None

    def acquire(self) -> bool:
        import fcntl

        fh = open(self.path, "a+")
        fcntl.flock(fh, fcntl.LOCK_EX)
        self._fh = fh
        return True

    def release(self) -> None:
        import fcntl

        fh, self._fh = self._fh, None
        if fh is not None:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()


def _plain(value: Any) -> Any:
    """A numpy or torch value as the JSON the journal holds (a list or a number): Optuna's in-memory study
    keeps any object as a user or system attr, and objectives written for it store `np.int64(3)` or an
    array of scores (`optuna.terminator.report_cross_validation_scores`). Anything else is refused as
    `json` refuses it."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def journal_storage(directory: Path) -> Any:
    """Optuna's multi-process journal storage on `directory/journal.log`, locked by `_FlockLock`."""
    optuna = _silence_optuna()
    try:
        from optuna.storages.journal import JournalFileBackend
    except ImportError:   # Optuna 3.x
        JournalFileBackend = optuna.storages.JournalFileStorage  # type: ignore[misc]

    class _Backend(JournalFileBackend):  # type: ignore[misc,valid-type]
        """Optuna's journal file, appended under the flock and without an fsync per append: as durable as
        the store (SQLite WAL, synchronous=NORMAL), so a killed process loses nothing, while the fsync that
        Optuna does for every suggest/report (~10 ms each here) is left to the OS."""

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            import json

            text = "".join(json.dumps(log, separators=(",", ":"), default=_plain) + "\n" for log in logs)
            self._lock.acquire()
            try:
                with open(self._file_path, "ab") as f:
                    f.write(text.encode("utf-8"))
            finally:
                self._lock.release()

    lock = _FlockLock(str(directory / f"{_JOURNAL}.flock"))   # duck-typed: the backend calls acquire/release
    return optuna.storages.JournalStorage(_Backend(str(directory / _JOURNAL), lock_obj=lock))  # type: ignore[arg-type]


def open_study(directory: Path, settings: StudySettings | None = None, *, create: bool = False) -> Any:
    """The sweep's study with the user's sampler and pruner (created when `create`)."""
    optuna = _silence_optuna()
    settings = settings or read_settings(directory)
    storage = journal_storage(directory)
    kwargs = {"study_name": settings.study_name, "storage": storage, "sampler": settings.sampler,
              "pruner": settings.pruner}
    if create:
        return optuna.create_study(directions=settings.directions, load_if_exists=True, **kwargs)
    return optuna.load_study(**kwargs)


def trial_id_of(study: Any, number: int) -> int | None:
    """The Optuna trial id created for sweeplab trial `number`, or None."""
    value = study._storage.get_study_system_attrs(study._study_id).get(f"{_NUMBER_KEY}{number}")
    return None if value is None else int(value)


def link(study: Any, number: int, trial_id: int, *, running: bool = True) -> None:
    """Record that sweeplab trial `number` runs Optuna trial `trial_id` (also on the trial while it runs:
    a finished trial cannot be updated)."""
    study._storage.set_study_system_attr(study._study_id, f"{_NUMBER_KEY}{number}", trial_id)
    if running:
        study._storage.set_trial_system_attr(trial_id, "sweeplab_number", number)


def note_stop(study: Any) -> None:
    """If `study.stop()` was called in this process (by the objective, or a sampler such as GridSampler once
    its grid is used up), record it in the storage: the driver then creates no more trials."""
    if study._stop_flag:
        study._storage.set_study_system_attr(study._study_id, _STOP_KEY, True)


class optimize_loop:
    """Inside it, `study.stop()` works as in `study.optimize` (Optuna refuses it elsewhere)."""

    def __init__(self, study: Any) -> None:
        self.study = study

    def __enter__(self) -> None:
        self.study._thread_local.in_optimize_loop = True

    def __exit__(self, *exc: Any) -> None:
        self.study._thread_local.in_optimize_loop = False
        note_stop(self.study)


def reseed(sampler: Any, seed: int | None, number: int) -> None:
    """Each trial's sampler draws from its own seed: every worker unpickles the same generator state, and
    without this all parallel trials would suggest the same random startup points."""
    if seed is not None and _reseed(sampler, seed, number):
        return
    if hasattr(sampler, "reseed_rng"):
        sampler.reseed_rng()


class ObjectiveSearcher(Searcher):
    """The driver's side of a define-by-run Optuna objective (see the module docstring).

    `ask` returns no parameters (the objective suggests them in the worker); the worker reports them back
    and the driver records them when the trial ends.
    """

    method = "optuna"
    accepted_options: ClassVar[Mapping[str, type]] = {**Searcher.accepted_options}

    def __init__(self, space: Any, goal: Any, seed: int | None = None, **options: Any) -> None:
        super().__init__(space, goal, seed, **options)
        self._optuna = _silence_optuna()
        self._study: Any = None
        self._next = 0
        self._deadline: float | None = None
        self._timeout: float | None = None
        self.end_reason: str | None = None   # why ask() returned None, for the sweep's end reason
        self.callbacks: list[Any] = []       # study.optimize's callbacks(study, frozen_trial), this process only
        self._callback_failed = False

    def bind(self, *, root: str, sweep: str) -> None:
        directory = study_dir(root, sweep)
        if not (directory / _SETTINGS).exists():
            from sweeplab.errors import UserError

            raise UserError(f"sweep {sweep!r} has no Optuna study in {directory}: method 'optuna' is set by "
                            "`sweeplab sweep --optuna module:objective` or `sl.optimize(objective)`")
        settings = read_settings(directory)
        self._study = open_study(directory, settings, create=True)
        timeout = getattr(settings, "timeout", None)   # settings written before it had one: none
        self._timeout = timeout   # counted from the first ask (see ask), afresh for each driver (a resume)

    @property
    def study(self) -> Any:
        if self._study is None:
            raise RuntimeError("ObjectiveSearcher.bind() was not called")
        return self._study

    def ask(self) -> dict[str, Any] | None:
        study = self.study
        if self._callback_failed:
            return None
        if study._stop_flag or study._storage.get_study_system_attrs(study._study_id).get(_STOP_KEY):
            self.end_reason = "study.stop() was called (running trials finish)"
            return None   # study.stop(): the sweep ends as an exhausted search space does
        if self._timeout is not None:
            import time

            # from the first ask, once the workers are up, as study.optimize's first trial starts at its call:
            # a slow start (a loaded machine, a Ray cluster) does not use up the timeout before any trial ran
            if self._deadline is None:
                self._deadline = time.monotonic() + self._timeout
            elif time.monotonic() >= self._deadline:
                self.end_reason = f"timeout {self._timeout:g}s reached (running trials finish)"
                return None
        study._thread_local.cached_all_trials = None
        trial_id = study._pop_waiting_trial_id()   # enqueue_trial() first, as study.ask does
        if trial_id is None:
            trial_id = study._storage.create_new_trial(study._study_id)
        link(study, self._next, trial_id)
        self._next += 1
        return {}

    def tell(self, number: int, params: Mapping[str, Any], state: TrialState,
             value: float | Sequence[float | None] | None, intermediate: Mapping[int, float] | None = None,
             constraints: Sequence[float] | None = None) -> None:
        if state.is_terminal:   # a number (one objective), the values (several), or None
            self._finish(number, state, value)
            if self.callbacks:
                self._call_back(number)

    def _call_back(self, number: int) -> None:
        """Run the callbacks on the trial just ended, as `study.optimize` does after each trial (in this, the
        driver's, process; `study.stop()` works in them). One that raises ends the sweep: no new trials."""
        import copy
        import traceback

        study = self.study
        trial_id = trial_id_of(study, number)
        if trial_id is None:
            return
        frozen = study._storage.get_trial(trial_id)
        for callback in self.callbacks:
            try:
                with optimize_loop(study):
                    callback(study, copy.deepcopy(frozen))
            except Exception as exc:
                name = getattr(callback, "__qualname__", None) or type(callback).__name__
                self.end_reason = f"callback {name} raised {type(exc).__name__}: {exc}"
                self._callback_failed = True
                traceback.print_exc()
                return

    def _finish(self, number: int, state: TrialState, value: float | Sequence[float | None] | None) -> None:
        """End Optuna trial of sweeplab trial `number` as sweeplab ended it (no-op if already ended)."""
        study = self.study
        trial_id = trial_id_of(study, number)
        if trial_id is None:
            return
        frozen = study._storage.get_trial(trial_id)
        if frozen.state.is_finished():
            return
        TS = self._optuna.trial.TrialState
        with optimize_loop(study):   # a sampler's after_trial may call study.stop() (GridSampler)
            if isinstance(value, Sequence) and not isinstance(value, str):
                value = None if any(v is None for v in value) else [float(v) for v in value]  # type: ignore[arg-type]
            if state is TrialState.COMPLETED and value is not None:
                study.tell(frozen.number, value, skip_if_finished=True)
            elif state in (TrialState.PRUNED, TrialState.STOPPED, TrialState.STOPPED_BY_RULE):
                study.tell(frozen.number, state=TS.PRUNED, skip_if_finished=True)
            else:
                study.tell(frozen.number, state=TS.FAIL, skip_if_finished=True)

    def replay(self, history: Sequence[TrialSnapshot]) -> None:
        """After a restart: end the Optuna trials whose sweeplab trial ended while the journal did not hear of
        it, fail the orphans (created by an ask whose trial the store never recorded), keep the requeued."""
        study = self.study
        self._next = len(history)
        live = set()
        for snap in history:
            if snap.state.is_terminal:
                self._finish(snap.number, snap.state, snap.values if snap.values is not None else snap.value)
            else:
                tid = trial_id_of(study, snap.number)
                if tid is not None:
                    live.add(tid)
        TS = self._optuna.trial.TrialState
        for frozen in study.get_trials(deepcopy=False, states=(TS.RUNNING,)):
            if frozen._trial_id not in live:
                with optimize_loop(study):
                    study.tell(frozen.number, state=TS.FAIL, skip_if_finished=True)


def params_of(study: Any, trial_id: int) -> dict[str, Any]:
    """The parameters an Optuna trial suggested so far."""
    return dict(study._storage.get_trial(trial_id).params)
