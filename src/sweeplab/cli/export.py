"""`sweeplab export`: a sweep's trials as a CSV or Parquet table, or as TensorBoard event files."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Optional

import typer

from sweeplab.cli.app import _store_path, app, store_option
from sweeplab.cli.output import console, err, utf8_argument


@app.command()
def export(
    sweep_name: str = typer.Argument(..., callback=utf8_argument, metavar="SWEEP", help="the sweep to export"),
    format: Optional[str] = typer.Option(None, "--format", "-f",
                                         help="csv | parquet | tensorboard (default: as --out's suffix "
                                              "says, .parquet or .csv; else csv)"),
    out: Optional[str] = typer.Option(None, "--out", "-o", metavar="<path>",
                                       help="file (csv, parquet; - for standard output; a directory: SWEEP.csv in "
                                            "it) or directory (tensorboard) to write; default SWEEP.csv, "
                                            "SWEEP.parquet or SWEEP-tensorboard/"),
    store: Optional[Path] = store_option(),
) -> None:
    """Export a sweep (read-only; written atomically): a table of its trials, or TensorBoard runs with
    curves and the HParams table (`tensorboard --logdir OUT`)."""
    from sweeplab.errors import SweeplabError, UserError
    from sweeplab.export import _format_for, export_sweep

    if out is not None and out.startswith("~"):   # `--out=~/x.csv`: no shell expands a tilde after `=`
        out = os.path.expanduser(out)
    format = _format_for(format, out)
    if out == "-":   # the usual spelling of standard output, not a file named "-"
        if format == "tensorboard":
            raise UserError("export: --format tensorboard writes a directory of event files; -o - (standard "
                            "output) takes csv or parquet")
        out = "/dev/stdout"
    stopped = _end_cleanly_on(signal.SIGTERM, signal.SIGHUP)
    try:
        try:
            path = export_sweep(sweep_name, out, format=format, store=_store_path(store))
        except Exception:
            if stopped:   # the signal's exception, raised wherever the export was, can break what it unwinds
                # (a writer's lock: "RuntimeError: release unlocked lock" replaced it); the export cleaned up
                raise SystemExit(128 + stopped[0]) from None
            raise
    except OSError as exc:   # the target cannot be written (no room, not a directory, no permission...)
        import errno

        if exc.errno == errno.EPIPE:   # `-o - | head`: the reader had enough, as `status` piped to head does
            import sys

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no complaint at exit's flush
            raise typer.Exit(1) from None
        from sweeplab.export import _default_name

        where = out if out is not None else Path(_default_name(sweep_name, format))
        raise SweeplabError(f"export: cannot write {where}: {exc.strerror or exc}; nothing was replaced") from None
    # written into stdout (`-o /dev/stdout`), a pipe or a device: the note goes to stderr, not into the data
    note = console if out != "/dev/stdout" and (path.is_file() or path.is_dir()) else err
    note.print(f"wrote {path}")
    if format == "tensorboard":
        note.print(f"view: tensorboard --logdir {path}")


def _end_cleanly_on(*signals: signal.Signals) -> list[int]:
    """`kill PID` or a closed terminal ends the export as Ctrl-C does: by an exception, so the half-written
    file or directory beside the target is removed on the way out (the default action ends the process at
    once and leaves it there); exit code 128 + the signal's number, as the shell reports a process it ended.
    Returns the signals received so far (empty until one is)."""
    received: list[int] = []

    def stop(signum: int, frame: object) -> None:
        received.append(signum)
        raise SystemExit(128 + signum)

    for sig in signals:
        if signal.getsignal(sig) is signal.SIG_DFL:   # one the caller ignores (nohup) stays ignored
            signal.signal(sig, stop)
    return received
