"""The `sweeplab` command line (typer + rich). Exit codes: 0 ok, 1 runtime failure, 2 bad input, 130 interrupted."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from sweeplab.api import backend_name, build_backend, default_name
from sweeplab.api import check_config_files as _check_config_files
from sweeplab.api import record_backend as _record_backend
from sweeplab.api import unique_name as _unique_name
from sweeplab.backends import BACKENDS
from sweeplab.errors import SweeplabError, UserError

__all__ = ["app", "main"]

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Run many ML experiments at once, from a laptop to a Ray cluster.")
#: the width of output that is not a terminal (a pipe, a file, CI): wide enough that nothing is cut or wrapped
PIPE_WIDTH = 1_000_000


def _make_console(*, stderr: bool) -> Console:
    """A console for stdout or stderr. Not a terminal: no width limit, so tables print whole values and lines
    are not wrapped (rich would assume 80 columns). Stderr never wraps: each message stays one line."""
    # no emoji: "train.py:train:" stays as written
    out = Console(stderr=stderr, highlight=False, emoji=False, soft_wrap=stderr)
    if not out.is_terminal:
        out.width = PIPE_WIDTH
    return out


console = _make_console(stderr=False)
err = _make_console(stderr=True)

BACKEND_NAMES = " | ".join(BACKENDS)   # the backend registry's names, for --backend help
STORE_HELP = "store directory (default: $SWEEPLAB_STORE or ./.sweeplab)"


def _store_path(store: Optional[Path]) -> Path:
    from sweeplab.store import default_store_dir

    return store if store is not None else default_store_dir()


def _open_store(store: Optional[Path], readonly: bool = False):  # type: ignore[no-untyped-def]
    from sweeplab.store import Store

    return Store.open(_store_path(store), readonly=readonly)


def _parse_gpus(text: Optional[str]) -> Optional[list[int]]:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--gpus: expected a comma-separated list of GPU ids such as 0,1; got {text!r}") from None


def _split_overrides(args: list[str]) -> list[str]:
    for a in args:
        if "=" not in a:
            raise UserError(f"expected key=value overrides after the target; got {a!r}")
    return list(args)


# ---------------------------------------------------------------------------------------------- sweep
@app.command()
def sweep(
    spec_file: Path = typer.Argument(..., metavar="SPEC", help="sweep spec (YAML; W&B sweep files work as is)"),
    overrides: Optional[list[str]] = typer.Argument(None, metavar="[KEY=VALUE]...",
                                                    help="config overrides for every trial"),
    workers: Optional[int] = typer.Option(None, "--workers", "-w",
                                          help="parallel trials (default: spec, or one per core)"),
    backend: Optional[str] = typer.Option(None, "--backend", help=f"{BACKEND_NAMES} (default: spec, or local)"),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (ray backend)"),
    name: Optional[str] = typer.Option(None, "--name", help="sweep name (default: spec name or file name)"),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU ids to use, e.g. 0,1 (default: detected)"),
    trials: Optional[int] = typer.Option(None, "--trials", help="override budget.trials"),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate and describe the sweep; run nothing"),
    smoke: bool = typer.Option(False, "--smoke", help="a few tiny trials on the CPU before the real thing"),
    hard: bool = typer.Option(False, "--hard", help="when a budget is hit, stop running trials too"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no live progress"),
    function: Optional[str] = typer.Option(None, "--function", help="run this function for each trial "
                                           "(train.py:train), e.g. for a W&B sweep run by wandb.agent(function=)"),
    strict: bool = typer.Option(False, "--strict", help="what W&B only warns about in a spec is an error"),
) -> None:
    """Run a sweep from a spec file."""
    from sweeplab.spec import load_spec

    spec = load_spec(spec_file, strict=strict, function=function)
    for warning in spec.warnings:
        from rich.markup import escape

        err.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    for key in spec.ignored:
        err.print(f"[dim]info: {spec_file}: '{key}' is a W&B setting that does not apply offline; ignored[/dim]")
    if trials is not None:
        spec = _with_budget_trials(spec, trials)
    if smoke:
        spec = _with_budget_trials(spec, min(spec.budget.trials or 2, 2))
    _check_config_files(spec)
    if dry_run:
        _describe(spec, spec_file)
        _estimate(spec, spec_file, store, workers)
        raise typer.Exit(0)
    backend_name(spec, backend)   # an unknown --backend is refused before the store is created
    st = _open_store(store)
    sweep_name = _unique_name(st, name or default_name(spec))   # cli_program/sweep.yaml -> cli_program
    be = _make_backend(spec, workers=workers, backend=backend, address=address, gpus=gpus, smoke=smoke,
                       store_root=st.root)
    if be.name == "local":
        be.start()   # workers boot while the driver sets up: the first result comes sooner
    try:
        _run_driver(spec, st, be, sweep_name=sweep_name, overrides=_split_overrides(overrides or []),
                    smoke=smoke, hard=hard, quiet=quiet, create=True, spec_path=str(spec_file.resolve()))
    finally:
        be.shutdown(grace=0.0)


def _with_budget_trials(spec: Any, n: int) -> Any:
    import dataclasses

    return spec.with_overrides(budget=dataclasses.replace(spec.budget, trials=n))


def _describe(spec: Any, spec_file: Path) -> None:
    from sweeplab.monitors import parse_monitors
    from sweeplab.schedulers import make_scheduler

    file = str(spec_file)
    metric, goal = spec.metric.name, spec.metric.goal
    scheduler = (make_scheduler(spec.early_terminate, goal=goal, file=file, metric=metric)
                 if spec.early_terminate else None)
    monitors = parse_monitors(list(spec.monitors), file=file, metric=metric, goal=goal) if spec.monitors else []
    console.print(f"[bold]{spec.name or spec_file.stem}[/bold]: valid")
    console.print(f"  method   {spec.method}" + (f" (seed {spec.seed})" if spec.seed is not None else ""))
    if spec.metric.name:
        console.print(f"  metric   {spec.metric.goal.value} {spec.metric.name}")
    target = spec.function or " ".join(spec.command or ()) or spec.program
    console.print(f"  runs     {target}")
    console.print("  search space:")
    for line in spec.space.describe():
        console.print(f"    {line}")
    if spec.method == "grid":
        console.print(f"  grid     {spec.space.grid_size()} combinations")
    b = spec.budget
    limits = {"trials": b.trials, "time": b.time, "cpu_hours": b.cpu_hours, "gpu_hours": b.gpu_hours,
              **{f"cost.{k}": v for k, v in (b.cost or {}).items()}}
    console.print("  budget   " + (" ".join(f"{k}={v:g}" for k, v in limits.items() if v is not None) or "none"))
    if scheduler is not None:
        console.print(f"  early stopping: {scheduler.describe()}")
    for m in monitors:
        console.print(f"  monitor: {getattr(m, 'name', m)}")


def _estimate(spec: Any, spec_file: Path, store: Optional[Path], workers: Optional[int]) -> None:
    """Cost estimate from this spec's latest smoke run (recorded next to the spec, or in the store)."""
    from sweeplab.smoke import estimate_lines, load_smoke_timing

    db = _store_path(store) / "store.db"
    st = _open_store(store, readonly=True) if db.exists() else None
    try:
        timing = load_smoke_timing(spec_file, st)
    finally:
        if st is not None:
            st.close()
    if timing is None:
        console.print("  cost     unknown: run `sweeplab sweep SPEC --smoke` first to time a step")
        return
    n = workers or spec.workers or max(1, os.cpu_count() or 1)
    for i, line in enumerate(estimate_lines(spec, timing, n)):
        console.print(("  cost     " if i == 0 else "           ") + line, markup=False)


def _make_backend(spec: Any, *, workers: Optional[int], backend: Optional[str], address: Optional[str],
                  gpus: Optional[str], smoke: bool, store_root: Optional[Path] = None) -> Any:
    """The backend from the registry (sweeplab.backends.BACKENDS), as `sweeplab.run_sweep` builds it."""
    return build_backend(spec, workers=workers, backend=backend, address=address, gpu_ids=_parse_gpus(gpus),
                         smoke=smoke, store_root=store_root)


class _LiveProgress:
    """Live progress with rich: trials done/running/failed, best so far, elapsed and ETA."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.live: Any = None
        self.last: Any = None

    def __enter__(self) -> _LiveProgress:
        if not self.quiet and console.is_terminal:
            from rich.live import Live

            self.live = Live(console=console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, p: Any) -> None:
        self.last = p
        if self.live is not None:
            self.live.update(self.render(p))
        elif not self.quiet and not console.is_terminal:
            now = time.monotonic()
            if now - getattr(self, "_printed", 0.0) > 5:
                self._printed = now
                console.print(self.line(p))

    @staticmethod
    def line(p: Any) -> str:
        c = p.counts
        done = sum(c.get(k, 0) for k in ("completed", "pruned", "stopped_by_rule", "stopped"))
        total = p.budget_trials if p.budget_trials is not None else "?"
        best = f"{p.best_value:.6g} (trial {p.best_trial})" if p.best_value is not None else "-"
        eta = f"{p.eta:.0f}s" if p.eta is not None else "-"
        return (f"{p.sweep}: {done}/{total} done, {p.running} running, {c.get('failed', 0)} failed, "
                f"{c.get('pruned', 0)} pruned | best {best} | elapsed {p.elapsed:.0f}s, ETA {eta}")

    def render(self, p: Any) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table as T

        c = p.counts
        done = sum(c.get(k, 0) for k in ("completed", "pruned", "stopped_by_rule", "stopped", "failed"))
        grid = T.grid(padding=(0, 2))
        total = p.budget_trials or max(done, 1)
        grid.add_row(ProgressBar(total=total, completed=done, width=30),
                     f"{done}/{p.budget_trials or '?'} trials")
        grid.add_row("running", str(p.running))
        grid.add_row("completed", str(c.get("completed", 0)))
        if c.get("pruned") or c.get("stopped_by_rule"):
            grid.add_row("pruned / stopped by rule", f"{c.get('pruned', 0)} / {c.get('stopped_by_rule', 0)}")
        grid.add_row("failed", str(c.get("failed", 0)))
        best = f"{p.best_value:.6g}  (trial {p.best_trial})" if p.best_value is not None else "-"
        grid.add_row("best so far", best)
        eta = f"{p.eta:.0f}s" if p.eta is not None else "-"
        grid.add_row("elapsed / ETA", f"{p.elapsed:.1f}s / {eta}")
        return grid


def _run_driver(spec: Any, st: Any, be: Any, *, sweep_name: str, overrides: list[str], smoke: bool, hard: bool,
                quiet: bool, create: bool, spec_path: Optional[str] = None, extra_trials: Optional[int] = None,
                total_trials: Optional[int] = None, fork_from: Optional[str] = None,
                new_spec_path: Optional[str] = None, single: bool = False) -> None:
    from sweeplab.driver import Driver

    def note(text: str) -> None:
        err.print(f"[yellow]{text}[/yellow]")

    with _LiveProgress(quiet) as live:
        driver = Driver(spec, st, be, sweep_name=sweep_name, overrides=overrides, smoke=smoke,
                        hard_budget=hard, on_progress=live.update, on_note=note)
        if smoke and create:
            problems, notes = driver.smoke_check()
            for line in notes:
                console.print(f"smoke: {line}")
            if problems:
                for p in problems:
                    err.print(f"smoke check: {p}", markup=False)
                raise UserError(f"smoke check failed before any trial ran ({len(problems)} problem(s) above)")
        if fork_from is not None:
            n = driver.fork(fork_from, spec_path=spec_path)
            if not quiet:
                console.print(f"forked {n} completed trial(s) of {fork_from} that fit the new space")
        elif create:
            driver.create(spec_path=spec_path)
        else:
            driver.resume(extra_trials=extra_trials, total_trials=total_trials, new_spec_path=new_spec_path)
        _record_backend(st, driver.sweep_id, be)
        if not quiet:
            console.print(f"sweep [bold]{sweep_name}[/bold] on {be.describe()} -> store {st.root}")
        outcome = driver.run()
    _report(outcome, st, quiet, single=single, smoke=smoke)
    if smoke:
        raise typer.Exit(2 if outcome.exit_code == 2 else _smoke_verdict(st, sweep_name))
    raise typer.Exit(outcome.exit_code)


def _smoke_verdict(st: Any, sweep_name: str) -> int:
    from sweeplab.store import queries

    data = queries.sweep_status(st, sweep_name)
    failed = [t for t in data["trials"] if t["state"] == "failed"]
    if failed or not data["trials"]:
        err.print(f"smoke check FAILED: {len(failed)} of {len(data['trials'])} trial(s) failed:")
        for t in failed:
            err.print(f"  trial {t['number']}: {t.get('reason')}", markup=False)
        return 1
    _record_smoke(st, sweep_name)
    console.print(f"smoke check passed: {len(data['trials'])} tiny trial(s) ran on the CPU and reported "
                  f"{data['sweep'].get('metric') or 'their metrics'}; run the sweep without --smoke")
    return 0


def _record_smoke(st: Any, sweep_name: str) -> None:
    """Keep what the smoke trials measured next to the spec, where `--dry-run` looks for it."""
    import psutil

    from sweeplab.smoke import record_smoke_timing, smoke_timing

    timing = smoke_timing(st, sweep_name, process_started=psutil.Process().create_time())
    row = st.sweep_row(sweep_name)
    if timing is not None and row is not None and row["spec_path"]:
        record_smoke_timing(row["spec_path"], timing)


def _report(outcome: Any, st: Any, quiet: bool, single: bool = False, smoke: bool = False) -> None:
    """How the sweep ended (stdout); a failure's reason on stderr: one line for bad input (exit 2), the first
    failure and its traceback when no trial completed (exit 1). `single`: a `run`, whose metrics are shown."""
    c = outcome.counts
    summary = ", ".join(f"{n} {s}" for s, n in c.items() if n)
    lines = outcome.reason.splitlines() or [""]
    if outcome.exit_code == 2:
        err.print(f"error: {lines[0]}", markup=False, soft_wrap=True)
        return
    if outcome.exit_code == 1 and not smoke:   # smoke mode's verdict lists every failed trial instead
        err.print(f"error: sweep {outcome.sweep} {outcome.state.value}: {lines[0]}", markup=False, soft_wrap=True)
        if len(lines) > 1:
            err.print("\n".join(lines[1:]), markup=False, soft_wrap=True)
    else:
        console.print(f"\nsweep [bold]{outcome.sweep}[/bold] {outcome.state.value}: ", end="")
        console.print(lines[0], markup=False)
    console.print(f"trials: {summary or 'none'}")
    if single:
        _print_run_metrics(st, outcome.sweep)
    if outcome.best_trial is not None:
        console.print(f"best: trial {outcome.best_trial}, value {outcome.best_value:.6g}")
        for k, v in (outcome.best_params or {}).items():
            console.print(f"    {k} = {v!r}")
    console.print(f"results: {Path(st.root) / 'store.db'}")
    default = str(st.root) in (".sweeplab", str(Path(".sweeplab")))
    store_flag = "" if default else f" --store {shlex.quote(str(st.root))}"
    name = shlex.quote(outcome.sweep)   # a W&B `name:` is free text; the commands must paste into a shell
    console.print("next: "
                  f"sweeplab status {name}{store_flag}  |  sweeplab best {name} --json{store_flag}"
                  f"  |  sweeplab dashboard{store_flag}"
                  + (f"  |  sweeplab resume {name}{store_flag}" if outcome.state.value != "finished" else ""))


def _print_run_metrics(st: Any, sweep_name: str) -> None:
    """The final metrics of a `run`'s trial (what it returned, else the last value it logged of each)."""
    from sweeplab.store import queries

    trials = queries.sweep_status(st, sweep_name)["trials"]
    if trials and trials[0]["state"] == "completed":
        console.print("metrics:" if trials[0].get("metrics") else "metrics: none reported")
        for k, v in (trials[0].get("metrics") or {}).items():
            console.print(f"    {k} = {_fmt(v)}", markup=False)


# ---------------------------------------------------------------------------------------------- resume
@app.command()
def resume(
    sweep_name: str = typer.Argument(..., metavar="SWEEP"),
    trials: Optional[str] = typer.Option(None, "--trials", help="+N more trials, or a new total N"),
    workers: Optional[int] = typer.Option(None, "--workers", "-w"),
    backend: Optional[str] = typer.Option(None, "--backend",
                                          help=f"{BACKEND_NAMES} (default: where the sweep last ran)"),
    address: Optional[str] = typer.Option(None, "--address",
                                          help="Ray cluster address (default: the one the sweep last ran on)"),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    gpus: Optional[str] = typer.Option(None, "--gpus"),
    hard: bool = typer.Option(False, "--hard", help="when a budget is hit, stop running trials too"),
    spec_file: Optional[Path] = typer.Option(None, "--spec", help="a changed spec (budgets, early stopping...)"),
    fork: Optional[str] = typer.Option(None, "--fork", help="start a new sweep NAME from --spec, seeded with "
                                                             "the old trials that fit its space"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Continue a sweep after a crash, Ctrl-C or budget end; nothing completed is redone.

    It runs where it last ran (backend and Ray address, recorded in the store); --backend / --address override.

    --spec NEW.yaml changes budgets, early stopping, monitors, resources or trial policy of the sweep;
    a different search space needs --fork NEW_NAME: a new sweep seeded with the old trials that fit it.
    """
    from sweeplab.spec import SweepSpec, load_spec

    st = _open_store(store)
    row = st.sweep_row(sweep_name)
    if row is None:
        raise UserError(f"no sweep named {sweep_name!r} in {st.root}")
    raw = json.loads(row["spec"])
    meta = raw.pop("_sweeplab", {}) or {}
    source = row["spec_path"] if row["spec_path"] and Path(row["spec_path"]).exists() else None
    spec = SweepSpec.from_jsonable(raw, source=source)
    if fork is not None and spec_file is None:
        raise UserError("--fork needs --spec NEW.yaml: the spec of the new sweep")
    if spec_file is not None:
        new = load_spec(spec_file)
        if fork is None:
            _check_compatible(spec, new, spec_file, sweep_name)
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
            raise UserError(f"--trials: expected +N (more trials) or N (a new total); got {trials!r}") from None
    backend, address, where = _resume_target(row, spec, backend, address)
    console.print(where, markup=False)
    be = _make_backend(spec, workers=workers, backend=backend, address=address, gpus=gpus,
                       smoke=bool(meta.get("smoke")), store_root=st.root)
    if meta.get("cwd") and Path(meta["cwd"]).is_dir():
        os.chdir(meta["cwd"])
    _check_config_files(spec)
    if fork is not None:
        if st.sweep_row(fork) is not None:
            raise UserError(f"--fork: a sweep named {fork!r} already exists in {st.root}")
        assert spec_file is not None   # --fork needs --spec: checked above
        _run_driver(spec, st, be, sweep_name=fork, overrides=list(meta.get("overrides") or []),
                    smoke=bool(meta.get("smoke")), hard=hard, quiet=quiet, create=True,
                    spec_path=str(Path(spec_file).resolve()), fork_from=sweep_name)
        return
    _run_driver(spec, st, be, sweep_name=sweep_name, overrides=list(meta.get("overrides") or []),
                smoke=bool(meta.get("smoke")), hard=hard, quiet=quiet, create=False,
                extra_trials=extra, total_trials=total,
                new_spec_path=str(Path(spec_file).resolve()) if spec_file is not None else None)


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


def _check_compatible(old: Any, new: Any, spec_file: Path, sweep: str) -> None:
    """Only budgets, early stopping, monitors, resources and trial policy may change on resume."""
    same = [("parameters", old.space.params, new.space.params), ("method", old.method, new.method),
            ("metric", (old.metric.name, old.metric.goal), (new.metric.name, new.metric.goal)),
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


# ---------------------------------------------------------------------------------------------- run
@app.command(context_settings={"allow_extra_args": False})
def run(
    target: str = typer.Argument(..., help="a function, e.g. train.py:train or pkg.module:train"),
    overrides: Optional[list[str]] = typer.Argument(None, metavar="[KEY=VALUE]..."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="base config YAML"),
    profile: Optional[str] = typer.Option(None, "--profile", "-p", help="environment profile name"),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    smoke: bool = typer.Option(False, "--smoke"),
    name: Optional[str] = typer.Option(None, "--name"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Run one trial of a function (recorded as a single-trial sweep): the same code path as a sweep."""
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.spec import parse_spec

    raw: dict[str, Any] = {"function": target, "method": "grid", "parameters": {}, "run_cap": 1}
    if config is not None:
        raw["config"] = str(config.resolve())
    if profile:
        raw["profile"] = profile
    spec = parse_spec(raw, file="<sweeplab run>", base_dir=Path.cwd())
    _check_config_files(spec)
    st = _open_store(store)
    stem = Path(target.split(":")[0]).stem.replace(".", "-") or "run"
    sweep_name = _unique_name(st, name or f"run-{stem}")
    be = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]), hide_gpus=smoke)
    _run_driver(spec, st, be, sweep_name=sweep_name, overrides=_split_overrides(overrides or []), smoke=smoke,
                hard=False, quiet=quiet, create=True, spec_path=None, single=True)


# ---------------------------------------------------------------------------------------------- reading
@app.command()
def status(
    sweep_name: Optional[str] = typer.Argument(None, metavar="[SWEEP]"),
    as_json: bool = typer.Option(False, "--json", help="stable JSON (see docs/api.md)"),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
) -> None:
    """Sweeps in the store, or one sweep's trials (with attempts and reasons)."""
    from sweeplab.store import queries

    st = _open_store(store, readonly=True)
    if sweep_name is None:
        sweeps = queries.list_sweeps(st)
        if as_json:
            _print_json({"sweeps": sweeps})
            return
        table = Table("sweep", "state", "method", "trials", "completed", "pruned", "failed", "running", "best")
        for s in sweeps:
            c = s["counts"]
            table.add_row(s["name"], s["state"], s["method"], str(s["trials"]), str(c.get("completed", 0)),
                          str(c.get("pruned", 0) + c.get("stopped_by_rule", 0)), str(c.get("failed", 0)),
                          str(c.get("running", 0)), _fmt(s["best"]))
        console.print(table)
        return
    data = queries.sweep_status(st, sweep_name)
    if as_json:
        _print_json(data)
        return
    s = data["sweep"]
    console.print(f"[bold]{s['name']}[/bold]  {s['state']}  {s['method']}  "
                  f"{(s.get('goal') or '')} {s.get('metric') or ''}  best {_fmt(s['best'])}")
    if s.get("end_reason"):
        console.print(f"ended: {s['end_reason'].splitlines()[0]}")
    budget, spend = s.get("budget") or {}, s.get("spend") or {}
    if budget or spend:
        parts = []
        if budget.get("trials"):
            parts.append(f"trials {s['trials']}/{budget['trials']}")
        if spend.get("seconds") is not None:
            parts.append(f"time {spend['seconds']:.0f}s" + (f"/{budget['time']:g}s" if budget.get("time") else ""))
        if spend.get("cpu_seconds"):
            parts.append(f"cpu-hours {spend['cpu_seconds'] / 3600:.3f}"
                         + (f"/{budget['cpu_hours']:g}" if budget.get("cpu_hours") else ""))
        if spend.get("gpu_seconds"):
            parts.append(f"gpu-hours {spend['gpu_seconds'] / 3600:.3f}"
                         + (f"/{budget['gpu_hours']:g}" if budget.get("gpu_hours") else ""))
        for name, limit in (budget.get("cost") or {}).items():
            parts.append(f"{name} {spend.get(f'cost.{name}', 0.0):.4g}/{limit:g}")
        console.print("spend: " + ", ".join(parts))
    table = Table("#", "state", "value", "attempts", "params", "reason")
    for t in data["trials"]:
        params = ", ".join(f"{k}={_fmt(v)}" for k, v in (t.get("params") or {}).items())
        reason = " ".join((t.get("reason") or "").split())   # one line per trial
        table.add_row(str(t["number"]), t["state"], _fmt(t.get("value")), str(t.get("attempts", "")),
                      params, reason[:80] if console.is_terminal else reason)   # a pipe gets it whole
    console.print(table)


@app.command()
def best(
    sweep_name: str = typer.Argument(..., metavar="SWEEP"),
    as_json: bool = typer.Option(False, "--json"),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
) -> None:
    """The best completed trial of a sweep."""
    from sweeplab.store import queries

    st = _open_store(store, readonly=True)
    data = queries.sweep_status(st, sweep_name)  # a clear error when the sweep does not exist
    b = queries.best_trial(st, sweep_name)
    if b is None and not data["sweep"].get("metric"):
        b = _only_completed(data)
    if b is None:
        if as_json:
            _print_json(None)
        elif not data["sweep"].get("metric") and any(t["state"] == "completed" for t in data["trials"]):
            console.print(f"{sweep_name}: the sweep declares no metric.name, so no trial is best; "
                          f"`sweeplab status {shlex.quote(sweep_name)} --json` lists each trial's metrics")
        else:
            console.print(f"{sweep_name}: no completed trial with a value yet")
        raise typer.Exit(1)
    if as_json:
        _print_json(b)
        return
    if b["value"] is None:
        console.print(f"best of {sweep_name}: trial {b['trial']} (its only completed trial; no metric declared)")
    else:
        console.print(f"best of {sweep_name}: trial {b['trial']}, value {_fmt(b['value'])}")
    for k, v in (b.get("params") or {}).items():
        console.print(f"    {k} = {v!r}", markup=False)
    if b["value"] is None:
        for k, v in (b.get("metrics") or {}).items():
            console.print(f"    metric {k} = {_fmt(v)}", markup=False)


def _only_completed(data: dict[str, Any]) -> Optional[dict[str, Any]]:
    """Without a declared metric, the answer for a sweep with exactly one completed trial (a `run`): it,
    with its final metrics and no value. With several, nothing says which is best."""
    done = [t for t in data["trials"] if t["state"] == "completed"]
    if len(done) != 1:
        return None
    t = done[0]
    return {"sweep": data["sweep"]["name"], "trial": t["number"], "value": None,
            "params": t.get("params") or {}, "metrics": t.get("metrics")}


@app.command()
def stop(
    sweep_name: str = typer.Argument(..., metavar="SWEEP"),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
) -> None:
    """Stop a running sweep: its trials checkpoint within trial.grace and it exits resumable."""
    import signal
    import socket

    import psutil

    st = _open_store(store, readonly=True)
    row = st.sweep_row(sweep_name)
    if row is None:
        raise UserError(f"no sweep named {sweep_name!r} in {st.root}")
    driver = json.loads(row["driver"] or "null") if "driver" in row.keys() else None
    if row["state"] != "running" or not driver:
        raise UserError(f"sweep {sweep_name!r} is not running (state {row['state']})")
    if driver.get("host") != socket.gethostname():
        raise UserError(f"sweep {sweep_name!r} is driven from host {driver.get('host')}; run `sweeplab stop` there")
    try:
        proc = psutil.Process(int(driver["pid"]))
        alive = proc.is_running() and "sweeplab" in " ".join(proc.cmdline())
    except (psutil.Error, ValueError):
        alive = False
    if not alive:
        raise UserError(f"the driver of {sweep_name!r} (pid {driver.get('pid')}) is gone; "
                        f"`sweeplab resume {shlex.quote(sweep_name)}` continues the sweep")
    proc.send_signal(signal.SIGTERM)
    console.print(f"asked the driver of {sweep_name} (pid {proc.pid}) to stop; its trials checkpoint and the sweep "
                  f"stays resumable: sweeplab resume {shlex.quote(sweep_name)}")


@app.command()
def repro(
    ref: str = typer.Argument(..., metavar="SWEEP/TRIAL", help="e.g. xgb-diabetes/17"),
    debug: bool = typer.Option(False, "--debug", help="drop into pdb at the exception"),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
) -> None:
    """Replay a failed trial in the foreground with its config, seed, checkpoint and captured objects."""
    from sweeplab.repro import repro as replay

    st = _open_store(store, readonly=True)
    raise typer.Exit(replay(st, ref, debug=debug, echo=lambda s: console.print(s, markup=False, highlight=False)))


@app.command()
def profile(
    ref: str = typer.Argument(..., metavar="SWEEP/TRIAL"),
    as_json: bool = typer.Option(False, "--json"),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
) -> None:
    """Where a trial's time went: throughput, data-wait vs compute, step-time percentiles, memory, a hint."""
    from sweeplab.repro import parse_trial_ref
    from sweeplab.store import queries

    name, number = parse_trial_ref(ref)
    st = _open_store(store, readonly=True)
    detail = queries.trial_detail(st, name, number)
    prof = detail.get("profile")
    if as_json:
        _print_json(prof)
        return
    if not prof:
        console.print(f"{ref}: no profile recorded (use `for batch in run.track(loader)` in the training loop)")
        raise typer.Exit(1)
    table = Table("measure", "value", title=f"profile of {ref}")
    labels = [("steps", "steps"), ("samples_per_s", "samples/s"), ("steps_per_s", "steps/s"),
              ("data_wait_fraction", "data-wait fraction"), ("step_p50", "step p50 (s)"),
              ("step_p95", "step p95 (s)"), ("data_wait_p50", "data wait p50 (s)"), ("compute_p50", "compute p50 (s)"),
              ("cpu_mean", "CPU % (mean)"), ("cpu_peak", "CPU % (peak)"), ("rss_peak", "peak memory (bytes)"),
              ("gpu_util_mean", "GPU util % (mean)"), ("gpu_mem_peak", "GPU memory peak (bytes)")]
    for key, label in labels:
        if prof.get(key) is not None:
            table.add_row(label, _fmt(prof[key]))
    console.print(table)
    if prof.get("hint"):
        console.print(f"hint: {prof['hint']}")


@app.command()
def init(
    directory: Path = typer.Argument(..., metavar="DIR"),
    template: str = typer.Option("pytorch", "--template", "-t", help="pytorch | xgboost"),
) -> None:
    """Scaffold a project: configs/, profiles/, model.py, data.py, train.py, sweeps/, a smoke test."""
    from sweeplab.scaffold import scaffold

    files = scaffold(directory, template)
    console.print(f"created {directory} from the {template} template ({len(files)} files)")
    console.print(f"next: make -C {directory} smoke")


@app.command()
def dashboard(
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8765, "--port"),
    token: Optional[str] = typer.Option(None, "--token", help="required to bind a non-loopback host"),
    insecure: bool = typer.Option(False, "--insecure", help="allow a non-loopback host without a token"),
) -> None:
    """Serve the read-only web dashboard (http://127.0.0.1:8765)."""
    from sweeplab.dashboard.app import serve

    serve(_store_path(store), host=host, port=port, token=token, insecure=insecure)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def main() -> None:
    """Console entry point: user mistakes print one line and exit 2; no traceback."""
    try:
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print_error("interrupted", prefix="")
        sys.exit(130)
    except UserError as e:
        print_error(str(e))
        sys.exit(2)
    except SweeplabError as e:
        print_error(str(e))
        sys.exit(e.exit_code)
    except Exception as e:  # click usage errors
        if isinstance(e, typer.Abort):
            sys.exit(130)
        if not _is_click_error(e):
            raise
        if type(e).__name__ == "NoArgsIsHelpError":   # `sweeplab` alone: the help
            e.show()  # type: ignore[attr-defined]
            sys.exit(2)
        ctx = getattr(e, "ctx", None)
        usage = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        print_error(f"{e.format_message()}{usage}")  # type: ignore[attr-defined]
        sys.exit(2)


def _is_click_error(e: BaseException) -> bool:
    """A click usage error (bad or missing argument, unknown option or command), from click itself or
    from the copy of click that newer typer releases carry."""
    return any(c.__name__ == "ClickException" and c.__module__.split(".")[0] in ("click", "typer")
               for c in type(e).__mro__)


def print_error(message: str, *, prefix: str = "error: ") -> None:
    """Every error the command line reports: one line on stderr, whatever the terminal or pipe.

    A message that spans lines is joined with '; ' (a log line must not be cut from its error).
    """
    text = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    err.print(f"{prefix}{text}", markup=False, highlight=False, soft_wrap=True)
