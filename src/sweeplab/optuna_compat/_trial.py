"""The worker's side of an Optuna objective: the sweeplab trial function that runs `objective(trial)`.

Each sweeplab trial attaches an `optuna.trial.Trial` to the Optuna trial the driver created for it, in the
sweep's journal study (see `sweeplab.search.optuna_objective`), so everything the objective does with its
`trial` is Optuna's own code against the shared storage: `suggest_*` (the user's sampler), `report` and
`should_prune` (the user's pruner), `set_user_attr`. On top of that, reported values are logged as the
sweep's metric (curves in the dashboard), and the suggested parameters and a pruning are told to the
driver, which ends the Optuna trial.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from sweeplab.run import Run
from sweeplab.search.optuna_objective import (
    METRIC,
    VIOLATION,
    metric_names,
    open_study,
    optimize_loop,
    read_settings,
    reseed,
    trial_id_of,
    violation,
)

__all__ = ["objective_trial"]

STUDY_KEY = "optuna_study"   # the trial config's key holding the study directory


def _trial_class() -> type:
    import optuna

    class SweeplabTrial(optuna.trial.Trial):
        """Optuna's Trial, whose reports also reach the sweep's metric history."""

        _run: Run

        def suggest_categorical(self, name: str, choices: Any) -> Any:  # type: ignore[override]
            """numpy choices (`np.arange(...)`, np.int64) as Python values: an in-memory study takes them,
            a persistent one (the journal) stores choices as JSON, which refuses numpy integers. A choice
            JSON cannot hold (a function, a class, an object), which an in-memory study takes, is refused
            with the way to write it (Optuna's JournalStorage and RDBStorage fail on it deep in json)."""
            values = tuple(_python(c) for c in choices)
            _check_choices(name, values)
            return super().suggest_categorical(name, values)

        def set_user_attr(self, key: str, value: Any) -> None:
            """A value JSON cannot hold (a datetime, a Path, a set, a model), which an in-memory study keeps
            as it is, is refused naming the call and the fix: the journal, as Optuna's own multi-process
            storages, stores attrs as JSON (numpy and torch values are taken, as lists or numbers)."""
            _check_json(f"trial.set_user_attr({key!r}, {value!r})", value)
            super().set_user_attr(key, value)

        def report(self, value: float, step: int) -> None:
            super().report(value, step)   # Optuna's checks: a float(value) that fails raises here, as in Optuna
            logged: set[int] = self.__dict__.setdefault("_logged_steps", set())
            if int(step) in logged:      # Optuna ignored it (with its warning): the pruner saw the first value
                return
            logged.add(int(step))
            number = _number(value)      # np.float32, a 0-d tensor: Optuna stores float(value), so do we
            if number is not None:
                self._run.log({METRIC: number}, step=int(step))

    return SweeplabTrial


_STUDIES: dict[str, tuple[Any, Any]] = {}   # study directory -> (settings, study), per worker process


def _study(directory: Path) -> tuple[Any, Any]:
    """The sweep's settings and study, opened once per worker process: the journal storage then reads only
    what was appended since the last trial, as one process of Optuna's own multi-process mode does."""
    key = str(directory)
    if key not in _STUDIES:
        settings = read_settings(directory)
        _STUDIES[key] = (settings, open_study(directory, settings))
    return _STUDIES[key]


def objective_trial(config: Any, run: Run) -> dict[str, Any]:
    """Run the sweep's Optuna objective for this trial; returns {"value": ..., numeric user attrs}."""
    import optuna

    directory = Path(config[STUDY_KEY])
    settings, study = _study(directory)
    study._thread_local.cached_all_trials = None
    trial_id = trial_id_of(study, run.trial)
    if trial_id is None:
        raise RuntimeError(f"trial {run.trial} has no Optuna trial in {directory}")
    reseed(study.sampler, _attempt_seed(run.seed, run.attempt), run.trial)
    from sweeplab.backends.targets import load_target

    objective = load_target(settings.objective, list(settings.python_path))
    trial = _trial_class()(study, trial_id)
    trial._run = run
    try:
        with optimize_loop(study):   # trial.study.stop() works as in study.optimize
            result = objective(trial)
    except optuna.TrialPruned as exc:
        run.prune(f"pruned by {type(study.pruner).__name__}" + (f": {exc}" if str(exc) else ""))
        return {}
    finally:
        run.suggest(trial.params)
    attrs = {f"user_attrs.{k}": n for k, v in trial.user_attrs.items() if (n := _number(v)) is not None}
    values = _values(result, len(settings.directions))
    return {**dict(zip(metric_names(len(values)), values, strict=True)), **attrs,
            VIOLATION: _violation(study, trial_id)}


def _attempt_seed(seed: int | None, attempt: int) -> int | None:
    """The seed of an attempt's sampler: the trial's for its first attempt; mixed with the attempt number for
    a retry, which keeps the parameters already suggested and draws the rest: reseeded as the failed
    attempt was, its first new draw repeated the failed attempt's first one (y == x)."""
    if seed is None or attempt <= 1:
        return seed
    return (seed * 1_000_003 + attempt * 0x9E3779B1) % 2**32


def _violation(study: Any, trial_id: int) -> float:
    """How far the trial is from Optuna's feasibility (<= 0: feasible), from the constraints it set
    (`trial.set_constraint`) and its sampler's `constraints_func`, which Optuna calls on the trial as it is
    told (here, on the same running trial, before the driver tells it)."""
    frozen = study._storage.get_trial(trial_id)
    constraints: dict[str, Any] = dict(getattr(frozen, "constraints", None) or {})
    sampler = study.sampler
    func = getattr(sampler, "_constraints_func", None) or getattr(
        getattr(sampler, "_base_sampler", None), "_constraints_func", None)   # PartialFixedSampler(base)
    if callable(func):
        constraints.update({f"constraints_func[{i}]": v for i, v in enumerate(func(frozen))})
        if any(math.isnan(float(v)) for v in constraints.values()):   # Optuna's tell would raise in the driver
            raise ValueError("constraints_func returned NaN: Constraint values cannot be NaN.")
    return violation(constraints)


def _check_choices(name: str, choices: tuple[Any, ...]) -> None:
    """Raise a TypeError naming the call and the fix if a choice cannot be stored in the shared study."""
    import json

    for choice in choices:
        try:
            json.dumps(choice)
        except (TypeError, ValueError):
            shown = getattr(choice, "__name__", None) or type(choice).__name__
            raise TypeError(
                f"trial.suggest_categorical({name!r}, ...): the choice {choice!r} is not None, a bool, int, float "
                f"or str, and the study the worker processes share (a journal file, as Optuna's own "
                f"multi-process storages) stores choices as JSON. Suggest a name and look it up: "
                f"options = {{{shown!r}: ..., ...}}; value = options[trial.suggest_categorical({name!r}, "
                f"list(options))]") from None


def _check_json(call: str, value: Any) -> None:
    """Raise a TypeError naming `call` and the fix if the journal cannot store `value`."""
    import json

    from sweeplab.search.optuna_objective import _plain

    try:
        json.dumps(value, default=_plain)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{call}: {exc}. The study the worker processes share (a journal file, as Optuna's own "
            f"multi-process storages) stores attrs as JSON: None, bool, int, float, str, lists and dicts of "
            f"them, numpy and torch values. Store str(value) (or value.isoformat(), a list, a number), or "
            f"save an object to a file and store its path") from None


def _python(value: Any) -> Any:
    """A numpy scalar as the Python value it holds; anything else as is."""
    item = getattr(value, "item", None)
    if type(value).__module__ == "numpy" and callable(item) and getattr(value, "ndim", None) == 0:
        return item()
    return value


def _number(value: Any) -> float | None:
    """A finite number as a float (a Python, numpy or 0-d torch number; not a bool or a string), or None."""
    if isinstance(value, (bool, str, bytes)) or type(value).__name__ == "bool_":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _values(result: Any, objectives: int) -> list[float]:
    """The objective's return value as Optuna reads it (a number, or a sequence of one per objective), or
    Optuna's reason for failing the trial (`study.optimize` fails it with these messages). NaN passes: the
    driver fails a trial whose metric is not finite."""
    from collections.abc import Sequence

    if result is None:
        raise ValueError("the objective returned None: The value None could not be cast to float.")
    values = list(result) if isinstance(result, Sequence) and not isinstance(result, (str, bytes)) else [result]
    out = []
    for v in values:
        try:
            if isinstance(v, (str, bytes)):   # float("0.5") is 0.5; Optuna takes no text as a value
                raise TypeError(v)
            out.append(float(v))
        except (TypeError, ValueError):
            raise ValueError(f"the objective returned {result!r}: The value {v!r} could not be cast to float."
                             ) from None
    if len(out) != objectives:
        hint = (" (several objectives: sl.optimize(..., directions=[...]), or --direction once per objective)"
                if objectives == 1 else "")
        raise ValueError(f"the objective returned {result!r}: The number of the values {len(out)} did not "
                         f"match the number of the objectives {objectives}{hint}.")
    return out
