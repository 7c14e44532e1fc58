"""`sweeplab stop`, `repro`, `profile`, `init` and `dashboard`: the commands around a sweep."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Optional

import typer

from sweeplab.cli.app import _open_store, _store_path, app, store_option
from sweeplab.cli.output import Table, _fmt, _print_json, command, console, utf8_argument
from sweeplab.errors import UserError


@app.command()
def stop(
    sweep_name: str = typer.Argument(..., callback=utf8_argument, metavar="SWEEP", help="the running sweep to stop"),
    store: Optional[Path] = store_option(),
) -> None:
    """Stop a running sweep: its trials checkpoint within trial.grace and it exits resumable."""
    import signal

    from sweeplab.store import queries

    st = _open_store(store, readonly=True)
    row = st.sweep_row(sweep_name)
    if row is None:
        raise queries.unknown_sweep(st, sweep_name)
    # the driver is its pid and start time (as `status` tells): `python train.py` runs one too, and a process
    # started after the driver recorded itself holds a reused pid
    status, recorded, proc = queries.driver_status(row)
    driver = recorded or {}
    if status in ("none", "gone"):   # a `resume` starting up holds the sweep's lock before it records itself
        from sweeplab.driver.recovery import read_lock

        holder = read_lock(st.root, sweep_name)
        if holder is not None and holder.elsewhere:   # a store on a shared disk: its pid is not this host's
            raise UserError(f"sweep {sweep_name!r} is being run from {holder.elsewhere} ({holder}); "
                            "run `sweeplab stop` there")
        if holder is not None and holder.pid != os.getpid():
            import psutil

            try:
                proc, status = psutil.Process(holder.pid), "alive"
            except psutil.Error:
                pass
    if status == "none":
        raise UserError(f"sweep {sweep_name!r} is not running (state {row['state']})")
    if status == "elsewhere":   # as the driver records it
        where = queries.elsewhere(driver.get("host"), driver.get("pidns")) or f"host {driver.get('host')}"
        raise UserError(f"sweep {sweep_name!r} is driven from {where}; run `sweeplab stop` there")
    if status != "alive":
        raise UserError(f"the driver of {sweep_name!r} (pid {driver.get('pid')}) is gone; "
                        f"`{command('resume', sweep_name)}` continues the sweep")
    from sweeplab.driver.recovery import read_lock

    holder = read_lock(st.root, sweep_name)
    asked = holder.stopping if holder is not None and holder.pid == proc.pid else None
    proc.send_signal(signal.SIGTERM)
    import psutil

    try:   # a stopped driver (Ctrl-Z, SIGSTOP) acts on nothing until continued: continue it, as a shell's `kill` does
        if proc.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
            proc.send_signal(signal.SIGCONT)
    except psutil.Error:
        pass
    if asked is not None:   # a second stop: the driver ends its trials now rather than at trial.grace
        import time

        again = ("asked again, it ends its trials without waiting for trial.grace" if time.time() - asked >= 1.0
                 else "this stop is the same request (a second one a second later ends its trials at once)")
        console.print(f"the driver of {sweep_name} (pid {proc.pid}) was already asked to stop at "
                      f"{time.strftime('%H:%M:%S', time.localtime(asked))}; {again}; the sweep stays resumable: "
                      f"{command('resume', sweep_name)}")
        return
    console.print(f"asked the driver of {sweep_name} (pid {proc.pid}) to stop; its trials checkpoint and the sweep "
                  f"stays resumable: {command('resume', sweep_name)}")


@app.command()
def repro(
    ref: str = typer.Argument(..., callback=utf8_argument, metavar="SWEEP/TRIAL", help="e.g. xgb-diabetes/17"),
    debug: bool = typer.Option(False, "--debug", help="drop into pdb at the exception"),
    store: Optional[Path] = store_option(),
) -> None:
    """Replay a failed trial in the foreground with its config, seed, checkpoint and captured objects."""
    from sweeplab.repro import repro as replay

    st = _open_store(store, readonly=True)
    raise typer.Exit(replay(st, ref, debug=debug, echo=lambda s: console.print(s, markup=False, highlight=False)))


@app.command()
def profile(
    ref: str = typer.Argument(..., callback=utf8_argument, metavar="SWEEP/TRIAL", help="e.g. xgb-diabetes/17"),
    as_json: bool = typer.Option(False, "--json", help="the whole profile as JSON"),
    store: Optional[Path] = store_option(),
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
        if not prof:   # null, and exit 1 as the table's "no profile recorded" (and `best --json` with no best)
            raise typer.Exit(1)
        return
    if not prof:
        state = detail.get("state")
        if state in ("running", "queued"):   # the profile is stored when an attempt ends
            console.print(f"{ref} is {state}: its profile is recorded when its attempt ends; try again then")
        else:
            console.print(f"{ref} ({state}): no profile recorded (step figures come from `for batch in "
                          "run.track(loader)` in the training loop, CPU and memory figures from an attempt of "
                          "20 ms or more; stored when an attempt ends)")
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
    if prof.get("ranks"):   # a multi-process trial: the table is merged over its ranks (docs/profiling.md)
        console.print(f"{prof.get('world_size', len(prof['ranks']))} ranks: samples/s summed, pace and data wait "
                      "of the slowest rank")
        for r in prof["ranks"]:
            console.print(f"  rank {r.get('rank')}: " + ", ".join(
                f"{label} {_fmt(r[key])}" for key, label in (
                    ("steps", "steps"), ("samples_per_s", "samples/s"), ("data_wait_fraction", "data wait"),
                    ("step_p95", "step p95 (s)"), ("rss_peak", "peak memory"), ("cpu_mean", "CPU %"))
                if r.get(key) is not None))
    if prof.get("hint"):
        console.print(f"hint: {prof['hint']}")
    if prof.get("steps") is None:   # CPU and memory only (every trial gets those)
        console.print("no step figures: they come from `for batch in run.track(loader)` in the training loop")


@app.command()
def init(
    directory: Path = typer.Argument(..., metavar="DIR", help="a new or empty directory for the project"),
    template: str = typer.Option("pytorch", "--template", "-t", help="pytorch | xgboost"),
) -> None:
    """Scaffold a project: configs/, profiles/, model.py, data.py, train.py, sweeps/, a smoke test."""
    from sweeplab.scaffold import scaffold

    files = scaffold(directory, template)
    console.print(f"created {directory} from the {template} template ({len(files)} files)")
    where = str(directory) if not str(directory).startswith("-") else f"./{directory}"   # not an option of make
    console.print(f"next: make -C {shlex.quote(where)} smoke")


@app.command()
def dashboard(
    store: Optional[Path] = store_option(),
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind"),
    port: int = typer.Option(8765, "--port", help="port to listen on"),
    token: Optional[str] = typer.Option(None, "--token", help="required to bind a non-loopback host"),
    insecure: bool = typer.Option(False, "--insecure", help="allow a non-loopback host without a token"),
) -> None:
    """Serve the read-only web dashboard (http://127.0.0.1:8765)."""
    from sweeplab.dashboard.app import serve

    serve(_store_path(store), host=host, port=port, token=token, insecure=insecure)
