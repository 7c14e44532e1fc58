"""`sweeplab resume`: continue a sweep where it last ran, with a changed spec or as a fork."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import typer

from sweeplab._values import shown_digits
from sweeplab.api import check_spec as _check_spec
from sweeplab.api import name_taken
from sweeplab.cli.app import BACKEND_NAMES, _known_sweep, _open_store, app, store_option
from sweeplab.cli.driving import _make_backend, _run_driver
from sweeplab.cli.output import console, utf8_argument
from sweeplab.errors import UserError


# ---------------------------------------------------------------------------------------------- resume
@app.command()
def resume(
    sweep_name: str = typer.Argument(..., callback=utf8_argument, metavar="SWEEP", help="the sweep to continue"),
    trials: Optional[str] = typer.Option(None, "--trials", help="+N more trials, or a new total N"),
    workers: Optional[int] = typer.Option(None, "--workers", "-w",
                                         help="parallel trials (default: the spec's, else as the sweep last ran)"),
    backend: Optional[str] = typer.Option(None, "--backend",
                                          help=f"{BACKEND_NAMES} (default: where the sweep last ran)"),
    address: Optional[str] = typer.Option(None, "--address",
                                          help="Ray cluster address (default: the one the sweep last ran on)"),
    store: Optional[Path] = store_option(),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU ids to use, e.g. 0,1 (default: detected)"),
    hard: Optional[bool] = typer.Option(None, "--hard/--no-hard",
                                        help="when a budget is hit, stop running trials too (default: as the "
                                             "sweep last ran)"),
    spec_file: Optional[Path] = typer.Option(None, "--spec", help="a changed spec (budgets, early stopping...)"),
    fork: Optional[str] = typer.Option(None, "--fork", callback=utf8_argument,
                                       help="start a new sweep NAME from --spec, seeded with the old trials that "
                                            "fit its space"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no live progress"),
) -> None:
    """Continue a sweep after a crash, Ctrl-C or budget end; nothing completed is redone.

    It runs where it last ran (backend and Ray address, recorded in the store); --backend / --address override.

    --spec NEW.yaml changes budgets, early stopping, monitors, resources or trial policy of the sweep;
    a different search space needs --fork NEW_NAME: a new sweep seeded with the old trials that fit it.
    """

    if workers is not None and workers < 1:   # 0 would silently mean one per core
        raise UserError(f"--workers must be at least 1; got {workers}")
    if fork is not None:   # a new sweep's name, checked as `--name` is: '' or a newline made one no command names
        from sweeplab.spec import check_sweep_name

        if not fork.strip():
            raise UserError(f"--fork: expected a sweep name (a non-empty string); got {fork!r}")
        check_sweep_name(fork, key="--fork")
    _known_sweep(store, sweep_name)   # before the writer opens (and would create) the store
    st = _open_store(store)
    row = st.sweep_row(sweep_name)
    if row is None:   # gone since: another process's doing
        raise UserError(f"no sweep named {sweep_name!r} in {st.root}")
    drop_lock: Any = None
    hold: Any = None
    if fork is None:   # the sweep is this command's from now on: a `stop` finds it by the lock, not by the pid of
        # the driver it replaces; a SIGTERM or Ctrl-C before the driver runs is held, and ends it before it starts
        from sweeplab.backends._start_signals import SignalHold
        from sweeplab.driver.recovery import take_sweep_lock_early

        raw_spec = json.loads(row["spec"])
        grace = (raw_spec.get("trial") or {}).get("grace") if isinstance(raw_spec, dict) else None
        drop_lock = take_sweep_lock_early(
            st.root, sweep_name, wait=(float(grace) if isinstance(grace, (int, float)) else 30.0) + 10.0,
            echo=lambda line: console.print(line, markup=False))
        hold = SignalHold.install()
    try:
        _resume(sweep_name, trials, workers, backend, address, store, gpus, hard, spec_file, fork, quiet, st, row,
                hold)
    finally:
        if hold is not None:
            hold.release(restore=True)   # the driver took it over, or the command ended: the signal acts now
        if drop_lock is not None:
            drop_lock()   # unless the driver took it over


def _resume(sweep_name: str, trials: Optional[str], workers: Optional[int], backend: Optional[str],
            address: Optional[str], store: Optional[Path], gpus: Optional[str], hard: Optional[bool],
            spec_file: Optional[Path], fork: Optional[str], quiet: bool, st: Any, row: Any, hold: Any) -> None:
    from sweeplab.spec import SweepSpec, load_spec

    raw = json.loads(row["spec"])
    meta = raw.pop("_sweeplab", {}) or {}
    spec_path = _relocate(raw, meta, row["spec_path"], st.root) if meta.get("cwd") else row["spec_path"]
    source = spec_path if spec_path and Path(spec_path).exists() else None
    spec = SweepSpec.from_jsonable(raw, source=source)
    if meta.get("config_text") is not None and spec.config is not None:   # its base config was a pipe, read once
        from sweeplab._yaml import remember_piped

        remember_piped(spec.config, str(meta["config_text"]))
    if fork is not None and spec_file is None:
        raise UserError("--fork needs --spec NEW.yaml: the spec of the new sweep")
    if spec_file is not None:
        new = load_spec(spec_file)
        if fork is None:
            _check_compatible(spec, new, spec_file, sweep_name, seed=row["seed"])
        spec = new
    extra = total = None
    if trials is not None:
        text = trials.strip()
        try:
            if text.startswith("+"):
                extra = int(text[1:])
            else:
                total = int(text)
        except ValueError:
            digits = text.lstrip("+")
            got = shown_digits(digits) if digits.isascii() and digits.isdigit() else repr(trials)[:80]
            raise UserError(f"--trials: expected +N (more trials) or N (a new total); got {got}") from None
    if workers is None and spec.workers is None:   # as wide as it last ran (`sweep --workers N`), else the default
        workers = _last_workers(row)
    if hard is None:   # budgets as hard as the sweep's last driver held them (`sweep --hard`)
        hard = _last_driver(row).get("hard") is True
    backend, address, where = _resume_target(row, spec, backend, address)
    console.print(where, markup=False)
    be = _make_backend(spec, workers=workers, backend=backend, address=address, gpus=gpus,
                       smoke=bool(meta.get("smoke")), store_root=st.root)
    if meta.get("cwd") and Path(meta["cwd"]).is_dir():
        # the sweep runs in its own directory; paths typed relative to this one (`--store ../runs`, `--spec`) must
        # name what they named here (the lock, logs and checkpoints went to another store, its trials restarted)
        if not st.root.is_absolute() and not os.path.samefile(meta["cwd"], "."):
            st.root = Path(os.path.abspath(st.root))
        if spec_file is not None:
            spec_file = Path(os.path.abspath(spec_file))
        os.chdir(meta["cwd"])
    _check_spec(spec, list(meta.get("overrides") or []), new_sweep=False,   # accepted at its creation
                backend=backend)
    if fork is None:
        _check_same_config(st, row, spec, list(meta.get("overrides") or []))
    else:   # the fork keeps the old sweep's overrides: one of a key the new spec searches would win in every trial
        from sweeplab.config import check_config_reaches_trials, check_overrides_against_parameters
        from sweeplab.errors import ConfigError

        try:
            kept = list(meta.get("overrides") or [])
            check_overrides_against_parameters(kept, list(spec.space.params))
            check_config_reaches_trials(function_trials=spec.is_function, config=None, profile=None,
                                        overrides=kept)   # a command trial would silently ignore them
        except ConfigError as exc:
            raise UserError(f"--fork: {exc} (the override is sweep {sweep_name!r}'s, which a fork keeps: start "
                            f"the new sweep with `sweeplab sweep {spec_file}` and the overrides it needs)") from None
    if fork is not None and name_taken(st, fork):
        from sweeplab.store.layout import safe_name

        raise UserError(f"--fork: a sweep named {fork!r} (or one with the same directories: "
                        f"{safe_name(fork)!r}) already exists in {st.root}")
    if hold is not None and hold.got:   # `sweeplab stop`, Ctrl-C while it started: nothing was changed yet
        import signal

        console.print(f"resume of {sweep_name} stopped before it began ({signal.Signals(hold.got[0]).name}); the "
                      "sweep is as it was", markup=False)
        code = 128 + int(hold.got[0])   # 143 after SIGTERM, 130 after Ctrl-C: as a driver stopped so exits
        hold.got.clear()
        raise typer.Exit(code)
    if be.name == "local":
        be.start()   # workers boot (in the sweep's directory) while the driver replays the sweep's history
    try:
        if fork is not None:
            assert spec_file is not None   # --fork needs --spec: checked above
            _run_driver(spec, st, be, sweep_name=fork, overrides=list(meta.get("overrides") or []),
                        smoke=bool(meta.get("smoke")), hard=hard, quiet=quiet, create=True,
                        spec_path=str(Path(spec_file).resolve()), fork_from=sweep_name)
        else:
            _run_driver(spec, st, be, sweep_name=sweep_name, overrides=list(meta.get("overrides") or []),
                        smoke=bool(meta.get("smoke")), hard=hard, quiet=quiet, create=False,
                        extra_trials=extra, total_trials=total,
                        new_spec_path=str(Path(spec_file).resolve()) if spec_file is not None else None)
    finally:
        be.shutdown(grace=0.0)   # a resume refused after the workers started (nothing to run) leaves none


def _relocate(raw: dict[str, Any], meta: dict[str, Any], spec_path: Optional[str], store_root: Path
              ) -> Optional[str]:
    """A sweep whose directory is gone (the project moved: `mv proj proj2`) runs from where it is now
    (store/moved.py, which `sweeplab repro` uses too)."""
    from sweeplab.store.moved import relocate

    return relocate(raw, meta, spec_path, store_root, lambda line: console.print(line, markup=False))


def _check_same_config(st: Any, row: Any, spec: Any, overrides: list[str]) -> None:
    """The sweep's next trials get the config its trials ran with: a base config or profile changed since (the
    spec's `config:` / `profile:` in --spec, or the files edited) would give them another one, while the sweep
    compares them as one search. The config of the last trial the sweep ran is built again now and compared."""
    from sweeplab.driver.tasks import TaskBuilder

    ran = [r for r in st.trial_rows(int(row["id"])) if int(r["attempts"] or 0) >= 1 and r["config"]]
    if not ran:
        return
    last = ran[-1]
    tasks = TaskBuilder(spec, sweep=row["name"], root="", cwd=os.getcwd(), overrides=overrides, smoke=False)
    was = json.loads(last["config"])
    from sweeplab.optuna_compat._trial import STUDY_KEY

    # an Optuna objective's params are what it suggested while it ran (define-by-run), never its config: its
    # config is built from none, as when it started
    params = {} if isinstance(was, dict) and STUDY_KEY in was else json.loads(last["params"] or "{}")
    now = json.loads(json.dumps(tasks.resolve_config(params), default=str))
    difference = _first_difference(was, now)
    if difference is None:
        return
    from sweeplab.config import _short

    where = ", ".join(([f"config {spec.config}"] if spec.config is not None else [])
                      + ([f"profile {spec.profile}"] if spec.profile else [])) or "no config or profile"
    key, before, after = difference
    change = (f"{key} was {_short(before)!r}, now {_short(after)!r}" if before is not _ABSENT and after is not _ABSENT
              else f"{key} was {_short(before)!r}, now absent" if after is _ABSENT
              else f"{key} is new ({_short(after)!r})")
    raise UserError(
        f"sweep {row['name']!r}: its trials' config changed since trial {last['number']} ran ({change}; now from "
        f"{where}): a resumed sweep keeps the config its trials ran with. Restore the base config and profile, "
        f"or start a new sweep from the changed ones: sweeplab resume {row['name']} --spec SPEC --fork NEW_NAME")


_ABSENT: Any = object()


def _first_difference(was: Any, now: Any, path: str = "") -> Optional[tuple[str, Any, Any]]:
    """(key path, old value, new value) of the first difference of two configs (NaN equal to NaN), or None."""
    if isinstance(was, dict) and isinstance(now, dict):
        for key in [*was, *(k for k in now if k not in was)]:
            sub = f"{path}.{key}" if path else str(key)
            found = _first_difference(was.get(key, _ABSENT), now.get(key, _ABSENT), sub)
            if found is not None:
                return found
        return None
    if json.dumps(was, sort_keys=True, default=str) == json.dumps(now, sort_keys=True, default=str) \
            and was is not _ABSENT and now is not _ABSENT:
        return None
    return path or "the config", was, now


def _last_driver(row: Any) -> dict[str, Any]:
    """What the sweep's last driver recorded of itself (its `driver` JSON: pid, host, workers, hard), or {}."""
    try:
        value = json.loads(row["driver"] or "{}")
    except (ValueError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def _last_workers(row: Any) -> Optional[int]:
    """The `--workers` the sweep's last driver was given (recorded in its `driver` JSON), or None."""
    value = _last_driver(row).get("workers")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _resume_target(row: Any, spec: Any, backend: Optional[str], address: Optional[str]
                   ) -> tuple[str, Optional[str], str]:
    """Where a resumed sweep runs: --backend / --address, else where the store says it last ran.

    Returns (backend, address, a line saying which and why). A sweep recorded before the store kept its
    backend resumes on the spec's backend (local unless the spec says otherwise), as it always did.
    """
    name = row["name"]
    keys = row.keys()
    was = row["backend"] if "backend" in keys else None
    was_address = row["address"] if "address" in keys and was == "ray" else None

    def on(kind: str, addr: Optional[str]) -> str:
        if kind != "ray":
            return f"the {kind} backend"
        return f"ray at {addr}" if addr else "ray (RAY_ADDRESS, else a new local Ray cluster)"

    before = f"it last ran on {on(was, was_address)}" if was else "the store has no record of where it ran"
    if backend is None and address is not None:
        backend = was or spec.backend
        if backend != "ray":
            raise UserError(f"--address {address}: an address is for the ray backend, and sweep {name!r} ran on "
                            f"{backend}; add --backend ray to run it on that cluster")
    if backend is not None:
        if backend == "ray" and address is None and was == "ray":
            address = was_address
        return backend, address, f"resuming {name} on {on(backend, address or spec.address)} (as asked; {before})"
    if was is None:
        kind = spec.backend or "local"
        return kind, spec.address, (
            f"resuming {name} on {on(kind, spec.address)}: the store has no record of where it ran (it was "
            "started by an older sweeplab); --backend ray --address HOST:PORT runs it on a Ray cluster")
    return was, was_address, (f"resuming {name} on {on(was, was_address)}, where it last ran "
                              "(--backend / --address choose another)")


def _check_compatible(old: Any, new: Any, spec_file: Path, sweep: str, *, seed: Any = None) -> None:
    """Only budgets, early stopping, monitors, resources and trial policy may change on resume (the base config
    and profile are checked by what they hold: `_check_same_config`)."""
    def goals(spec: Any) -> list[tuple[Any, Any, Any]]:
        return [(o.name, o.goal, o.target) for o in (spec.objectives or (spec.metric,))]

    same = [("parameters", old.space.params, new.space.params), ("method", old.method, new.method),
            ("parameters", old.space.conditions, new.space.conditions),
            ("metric", goals(old), goals(new)),   # every objective: the front and the ranks are over them all
            ("constraints", old.constraints, new.constraints),   # which stored trials are feasible
            ("seed", seed, seed if new.seed is None else new.seed),   # the sweep's seed is the store's
            ("function", old.function, new.function), ("program", old.program, new.program),
            ("command", old.command, new.command)]
    for key, a, b in same:
        if a != b:
            what = key
            if key == "parameters":
                names = sorted(set(a) ^ set(b)) or sorted(k for k in a if a[k] != b.get(k))
                what = f"parameters.{names[0]}" if names else key
            raise UserError(
                f"{spec_file}: {what}: differs from sweep {sweep!r}; a resumed sweep may change only budget, "
                f"early_terminate, monitors, resources, workers and trial (a new search needs "
                f"`--fork NEW_NAME`, which starts a new sweep seeded with the old trials that fit)")
