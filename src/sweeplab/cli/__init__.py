"""The `sweeplab` command line (typer + rich). Exit codes: 0 ok, 1 runtime failure, 2 bad input, 130 interrupted.

The package, one concern a module: `app` (the typer app and shared options), `output` (consoles, one-line
errors), `progress` (live progress), `driving` (run a sweep, report it, the smoke verdict), then the commands
in the order `sweeplab --help` lists them: `start` (sweep), `resuming` (resume), `single` (run), `reading`
(status, best), `tools` (stop, repro, profile, init, dashboard); `entry` holds `main`, the console script.
"""

from __future__ import annotations

# first: `sweeplab sweep` starts its workers (cli/_early.py), which boot while the rest of the CLI is imported
from sweeplab.cli import _early  # isort: skip
# each command module registers its commands on `app` when imported: this order is the order of `--help`
# isort: off
from sweeplab.cli import start as _start  # noqa: F401  (sweep)
from sweeplab.cli import resuming as _resuming  # noqa: F401  (resume)
from sweeplab.cli import single as _single  # noqa: F401  (run)
from sweeplab.cli import reading as _reading  # noqa: F401  (status, best)
from sweeplab.cli import tools as _tools  # noqa: F401  (stop, repro, profile, init, dashboard)
from sweeplab.cli import export as _export  # noqa: F401  (export)
# isort: on
from sweeplab.cli.app import app
from sweeplab.cli.entry import main
from sweeplab.cli.output import print_error

__all__ = ["app", "main", "print_error"]

_early.start_rest()   # the workers `_early` kept back while the command line imported
