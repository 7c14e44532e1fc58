"""Running a sweep from the command line: build the backend, drive it with live progress, report how it ended,
and the smoke check's verdict."""

from __future__ import annotations

import shlex
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any, Optional

import typer

from sweeplab.api import build_backend
from sweeplab.api import record_backend as _record_backend
from sweeplab.cli.app import _parse_gpus
from sweeplab.cli.output import _fmt, command, console, err, escape
from sweeplab.cli.progress import _LiveProgress
from sweeplab.errors import UserError


def _make_backend(spec: Any, *, workers: Optional[int], backend: Optional[str], address: Optional[str],
                  gpus: Optional[str], smoke: bool, store_root: Optional[Path] = None) -> Any:
    """The backend from the registry (sweeplab.backends.BACKENDS), as `sweeplab.run_sweep` builds it."""
    return build_backend(spec, workers=workers, backend=backend, address=address, gpu_ids=_parse_gpus(gpus),
                         smoke=smoke, store_root=store_root)


def _run_driver(spec: Any, st: Any, be: Any, *, sweep_name: str, overrides: list[str], smoke: bool, hard: bool,
                quiet: bool, create: bool, spec_path: Optional[str] = None, extra_trials: Optional[int] = None,
                total_trials: Optional[int] = None, fork_from: Optional[str] = None,
                new_spec_path: Optional[str] = None, single: bool = False) -> None:
    from sweeplab.driver import Driver

    noted: set[str] = set()

    def note(text: str) -> None:
        noted.add(text)
        err.print(f"[yellow]{escape(text)}[/yellow]", markup=True)

    with _LiveProgress(quiet) as live:
        driver = Driver(spec, st, be, sweep_name=sweep_name, overrides=overrides, smoke=smoke,
                        hard_budget=hard, on_progress=live.update, on_note=note)
        checked_s = 0.0   # the smoke check's own time: a real sweep does not pay it
        if smoke and create:
            t0 = time.monotonic()
            problems, notes = driver.smoke_check()
            checked_s = time.monotonic() - t0
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
            driver.create(spec_path=spec_path, unique=True)
            sweep_name = driver.name   # another sweep may have taken the name meanwhile: the next free one
        else:
            driver.resume(extra_trials=extra_trials, total_trials=total_trials, new_spec_path=new_spec_path)
        _record_backend(st, driver.sweep_id, be)
        if not quiet:
            console.print(f"sweep [bold]{escape(sweep_name)}[/bold] on {escape(be.describe())} -> store "
                          f"{escape(st.root)}", markup=True)
        outcome = driver.run()
    _report(outcome, st, quiet, single=single, smoke=smoke, noted=noted)
    if smoke:
        stopped_by = _SIGNAL_STOPS.get(outcome.reason) if outcome.state.value == "stopped" else None
        if stopped_by is not None:   # the check did not fail: it was stopped, and its 0 would read as passed
            how, code = stopped_by
            err.print(f"smoke check interrupted ({how}): no verdict; run it again", markup=False)
            raise typer.Exit(code)
        raise typer.Exit(2 if outcome.exit_code == 2 else _smoke_verdict(st, sweep_name, checked_s))
    raise typer.Exit(outcome.exit_code)


#: a sweep stopped by a signal (its end reason, driver/loop.py) -> how it is named, and a smoke check's exit code:
#: 128 + the signal, SIGTERM's too (a sweep's 0 for a preemption)
_SIGNAL_STOPS = {"interrupted (Ctrl-C)": ("Ctrl-C", 130), "interrupted (SIGHUP)": ("SIGHUP", 129),
                 "interrupted (SIGTERM)": ("SIGTERM", 143)}


def _smoke_verdict(st: Any, sweep_name: str, checked_s: float = 0.0) -> int:
    from sweeplab.store import queries

    data = queries.sweep_status(st, sweep_name)
    # a health rule (NaN, exploding values) that stops a tiny trial is a mistake to fix before the real sweep
    failed = [t for t in data["trials"] if t["state"] in ("failed", "stopped_by_rule")]
    completed = [t for t in data["trials"] if t["state"] == "completed"]
    if failed or not completed:
        err.print(f"smoke check FAILED: {len(failed)} of {len(data['trials'])} trial(s) failed"
                  + ("" if failed else ", and none completed") + ":")
        for t in failed:
            how = " (stopped by a rule)" if t["state"] == "stopped_by_rule" else ""
            err.print(f"  trial {t['number']}: {t.get('reason')}{how}", markup=False)
        for t in data["trials"]:
            if t not in failed and t["state"] != "completed":
                err.print(f"  trial {t['number']}: {t['state']}: {t.get('reason')}", markup=False)
        return 1
    _record_smoke(st, sweep_name, checked_s)
    console.print(f"smoke check passed: {len(data['trials'])} tiny trial(s) ran on the CPU and reported "
                  f"{data['sweep'].get('metric') or 'their metrics'}; run the sweep without --smoke")
    return 0


def _record_smoke(st: Any, sweep_name: str, checked_s: float) -> None:
    """Keep what the smoke trials measured next to the spec, where `--dry-run` looks for it; `checked_s`,
    the smoke check's import of the target in the driver, is left out of the command's overhead."""
    import psutil

    from sweeplab.smoke import record_smoke_timing, smoke_timing

    timing = smoke_timing(st, sweep_name, process_started=psutil.Process().create_time() + checked_s)
    row = st.sweep_row(sweep_name)
    if timing is not None and row is not None and row["spec_path"]:
        record_smoke_timing(row["spec_path"], timing)


def _report(outcome: Any, st: Any, quiet: bool, single: bool = False, smoke: bool = False,
            noted: Collection[str] = ()) -> None:
    """How the sweep ended (stdout); a failure's reason on stderr: one line for bad input (exit 2), the first
    failure and its traceback when no trial completed (exit 1). `single`: a `run`, whose metrics are shown.
    `noted`: what was already printed as it happened (a crash loop's reason): its details are not repeated."""
    c = outcome.counts
    summary = ", ".join(f"{n} {s}" for s, n in c.items() if n)
    lines = outcome.reason.splitlines() or [""]
    if outcome.exit_code == 2:
        err.print(f"error: {lines[0]}", markup=False, soft_wrap=True)
        return
    if outcome.exit_code == 1 and not smoke:   # smoke mode's verdict lists every failed trial instead
        err.print(f"error: sweep {outcome.sweep} {outcome.state.value}: {lines[0]}", markup=False, soft_wrap=True)
        if len(lines) > 1 and outcome.reason not in noted:   # said in full when the sweep began to fail
            err.print("\n".join(lines[1:]), markup=False, soft_wrap=True)
    elif single and outcome.state.value == "finished":   # a `run`: its budget of one trial is not news
        console.print(f"\nrun [bold]{escape(outcome.sweep)}[/bold] finished", markup=True)
    else:
        console.print(f"\nsweep [bold]{escape(outcome.sweep)}[/bold] {outcome.state.value}: ", end="", markup=True)
        console.print(lines[0], markup=False)
    console.print(f"trials: {summary or 'none'}")
    if single:
        _print_run_metrics(st, outcome.sweep)
    front = _front_line(st, outcome.sweep)
    if front is not None:   # several objectives: no single best trial
        console.print(front, markup=False)
    elif outcome.best_trial is not None:
        console.print(f"best: trial {outcome.best_trial}, value {outcome.best_value:.6g}")
        for k, v in (outcome.best_params or {}).items():
            console.print(f"    {k} = {v!r}")
    console.print(f"results: {Path(st.root) / 'store.db'}")
    default = str(st.root) in (".sweeplab", str(Path(".sweeplab")))
    store_flag = "" if default else f"--store {shlex.quote(str(st.root))}"
    name = outcome.sweep   # a W&B `name:` is free text; the commands must paste into a shell (`command`)
    console.print("next: "
                  f"{command('status', name, store_flag)}  |  {command('best', name, '--json', store_flag)}"
                  f"  |  sweeplab dashboard{' ' + store_flag if store_flag else ''}"
                  + (f"  |  {command('resume', name, store_flag)}" if outcome.state.value != "finished" else ""))


def _print_run_metrics(st: Any, sweep_name: str) -> None:
    """The final metrics of a `run`'s trial (what it returned, else the last value it logged of each)."""
    from sweeplab.store import queries

    trials = queries.sweep_status(st, sweep_name)["trials"]
    if trials and trials[0]["state"] == "completed":
        console.print("metrics:" if trials[0].get("metrics") else "metrics: none reported")
        for k, v in (trials[0].get("metrics") or {}).items():
            console.print(f"    {k} = {_fmt(v)}", markup=False)


def _front_line(st: Any, sweep: str) -> Optional[str]:
    """With several objectives, the one-line summary of the feasible Pareto front; None otherwise."""
    import contextlib

    from sweeplab.errors import SweeplabError
    from sweeplab.store import queries

    with contextlib.suppress(SweeplabError):
        summary = queries.sweep_summary(st, sweep)["sweep"]
        if len(summary.get("objectives") or []) > 1:
            front = queries.pareto_front(st, sweep)
            if not front:
                return "Pareto front: empty (no completed feasible trial with every objective)"
            return (f"Pareto front: {len(front)} trial(s) "
                    f"({', '.join(str(f['trial']) for f in front[:10])}{', ...' if len(front) > 10 else ''}); "
                    f"`{command('best', sweep)}` lists them")
    return None
