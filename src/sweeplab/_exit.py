"""Ending a process without the interpreter's teardown, which frees every module one by one (tens of
milliseconds for a process that imported numpy, torch, typer or rich) and which nothing needs once the work is
done: what of it matters still happens here, in its order (atexit handlers, logging's flush among them, then
the standard streams). Workers end this way after their last trial, and so does a plain `sweeplab sweep`."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn

__all__ = ["exit_now"]


def exit_now(code: int) -> NoReturn:
    """Run the atexit handlers, flush stdout and stderr, and end the process with `code`."""
    import atexit

    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
