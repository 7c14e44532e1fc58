"""What the command line prints: the stdout and stderr consoles, values, JSON, one-line errors."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

#: the width of output that is not a terminal (a pipe, a file, CI): wide enough that nothing is cut or wrapped
PIPE_WIDTH = 1_000_000


def _make_console(*, stderr: bool) -> Console:
    """A console for stdout or stderr. Not a terminal: no width limit, so tables print whole values and lines
    are not wrapped (rich would assume 80 columns). Stderr never wraps: each message stays one line.

    No markup by default: what is printed is mostly the user's text (sweep names, parameter values, a trial's
    reason, an exception naming `[/data]`), which rich would read as style tags, dropping `[red]` or ending
    the command with a MarkupError on `[/]`. A line that styles passes `markup=True` and `escape`s the
    user's text in it."""
    # no emoji: "train.py:train:" stays as written
    out = Console(stderr=stderr, highlight=False, emoji=False, soft_wrap=stderr, markup=False)
    if not out.is_terminal:
        out.width = PIPE_WIDTH
    return out


console = _make_console(stderr=False)
err = _make_console(stderr=True)


def escape(text: Any) -> str:
    """`text` as literal text inside a `markup=True` line (rich.markup.escape)."""
    from rich.markup import escape as _escape

    return _escape(str(text))


def Table(*columns: Any, **options: Any) -> Any:   # stands in for the class, imported on first use
    """A rich Table (rich.table.Table(*columns, **options)); rich.table is imported by the commands that print
    one, not by every command's start."""
    from rich.table import Table as _Table

    return _Table(*columns, **options)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def print_error(message: str, *, prefix: str = "error: ") -> None:
    """Every error the command line reports: one line on stderr, whatever the terminal or pipe.

    A message that spans lines is joined with '; ' (a log line must not be cut from its error).
    """
    text = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    err.print(f"{prefix}{text}", markup=False, highlight=False, soft_wrap=True)
