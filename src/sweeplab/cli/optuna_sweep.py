"""`sweeplab sweep --optuna module:objective`: an Optuna objective, unchanged, run as a sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from sweeplab.cli.app import _open_store
from sweeplab.cli.driving import _report
from sweeplab.cli.output import console, err, escape
from sweeplab.cli.progress import _LiveProgress
from sweeplab.errors import UserError

__all__ = ["run_optuna"]


def run_optuna(target: str, *, trials: Optional[int], workers: Optional[int], backend: Optional[str],
               address: Optional[str], name: Optional[str], store: Optional[Path], quiet: bool,
               direction: Optional[list[str]], sampler: Optional[str], pruner: Optional[str], seed: Optional[int],
               from_study: Optional[str], workdir: Optional[str] = None) -> None:
    """Run `target` (an Optuna objective) for `trials` trials (default 100); exits with the sweep's code."""
    from sweeplab.optuna_compat import optimize

    noted: set[str] = set()

    def note(text: str) -> None:
        noted.add(text)
        err.print(f"[yellow]{escape(text)}[/yellow]", markup=True)

    built_sampler = _optuna_object("samplers", sampler, seed=seed) if sampler else None
    built_pruner = _optuna_object("pruners", pruner) if pruner else None
    study = _load_study(from_study) if from_study else None
    goals = [d.strip() for text in direction or () for d in text.split(",") if d.strip()]
    store = store.expanduser() if store is not None else None   # `--store=~/runs`, as every command takes it
    with _LiveProgress(quiet) as live:
        handle = optimize(target, trials or 100, workers=workers, sampler=built_sampler, pruner=built_pruner,
                          direction=goals[0] if len(goals) == 1 else None, workdir=workdir,
                          directions=goals if len(goals) > 1 else None, study=study, name=name, store=store,
                          backend=backend, address=address, seed=seed, progress=False, on_progress=live.update,
                          on_note=note, raise_interrupt=False)   # Ctrl-C: reported below, as a spec sweep's
    outcome = handle.outcome
    if outcome is None:   # pragma: no cover - a blocking optimize always has one
        raise typer.Exit(1)
    if not quiet:
        console.print(f"Optuna objective {escape(target)} -> sweep [bold]{escape(handle.name)}[/bold] in "
                      f"{escape(handle.store)}", markup=True)
    st = _open_store(store, readonly=True)
    try:
        _report(outcome, st, quiet, noted=noted)
    finally:
        st.close()
    raise typer.Exit(outcome.exit_code)


def _optuna_object(kind: str, name: str, **kwargs: Any) -> Any:
    """An Optuna sampler or pruner by class name (`--sampler RandomSampler`, `--pruner HyperbandPruner`)."""
    import inspect

    import optuna

    module = getattr(optuna, kind)
    cls = getattr(module, name, None)
    known = sorted(n for n in dir(module) if n.endswith(kind[:-1].capitalize()) and not n.startswith("Base"))
    if not inspect.isclass(cls):
        raise UserError(f"--{kind[:-1]}: {name!r} is not an Optuna {kind[:-1]}; expected one of: "
                        f"{', '.join(known)}")
    accepted = inspect.signature(cls).parameters
    needed = [n for n, p in accepted.items() if p.default is inspect.Parameter.empty
              and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in kwargs]
    if needed:   # GridSampler(search_space), PartialFixedSampler(...), PatientPruner(wrapped_pruner, patience)
        raise UserError(f"--{kind[:-1]}: {name} needs {', '.join(needed)}, which the command line cannot give: "
                        f"build it in Python, sl.optimize(objective, {kind[:-1]}=optuna.{kind}.{name}(...))")
    return cls(**{k: v for k, v in kwargs.items() if k in accepted and v is not None})


def _load_study(text: str) -> Any:
    """`STORAGE_URL::STUDY_NAME` (e.g. sqlite:///optuna.db::my-study) -> the Optuna study to import."""
    import optuna

    storage, sep, study_name = text.rpartition("::")
    if not sep or not storage or not study_name:
        raise UserError(f"--from-study: {text!r} is not STORAGE_URL::STUDY_NAME "
                        "(e.g. sqlite:///optuna.db::my-study)")
    if storage.startswith("sqlite:///") and not Path(storage[len("sqlite:///"):]).exists():
        raise UserError(f"--from-study: no database file {storage[len('sqlite:///'):]}")   # Optuna would create one
    try:
        optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        raise UserError(f"--from-study: no study named {study_name!r} in {storage}") from None
    # an in-memory copy: the command imports the study, it does not write to it (sl.optimize(study=...) adds
    # the sweep's trials to the study it is given, as study.optimize does)
    copy = optuna.storages.InMemoryStorage()
    optuna.copy_study(from_study_name=study_name, from_storage=storage, to_storage=copy)
    return optuna.load_study(study_name=study_name, storage=copy)
