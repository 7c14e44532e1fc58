"""What the command line prints: the stdout and stderr consoles, values, JSON, one-line errors."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from typing import Any

from rich.console import Console

from sweeplab.errors import SweeplabError

#: the width of output that is not a terminal (a pipe, a file, CI): wide enough that nothing is cut or wrapped
PIPE_WIDTH = 1_000_000


#: terminal control characters: C0 but tab and line feed, DEL, C1 (0x9b is a one-byte CSI); and Unicode's
#: bidirectional controls (the marks, embeddings, overrides and isolates), which reorder what follows them on
#: the line (a name that shows backwards). The dashboard escapes the same characters (static/util.js
#: `printable`; a test holds the two lists equal).
CONTROL_CLASS = r"\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{CONTROL_CLASS}]")


def printable(text: str) -> str:
    """`text` with its terminal control characters written as escapes (`\\x1b`): what the store holds is the
    user's text (a command trial's colored last error line, a sweep named in YAML with "\\e[31m"), and written
    raw, ESC [2J clears the screen, OSC 0 sets the window's title, colors and cursor moves garble the table."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        text)


class _Console(Console):
    """A rich Console whose printed strings never carry terminal control characters (`printable`); rich's own
    styling is added after, so it is unaffected."""

    #: set while a sweep runs (cli/progress.py): a reader gone from the pipe (`sweeplab sweep ... | head`)
    #: ends the output, never the sweep; elsewhere it ends the command with exit 1, as rich does
    keep_going_on_broken_pipe = False

    def on_broken_pipe(self) -> None:
        """The pipe's reader is gone: this console's stream is sent to /dev/null from now on (rich's own
        handler sends stdout there even when the broken stream is stderr), then exit 1 unless a sweep runs.
        A broken stderr ends nothing: its message is lost, and the command's exit code stays its own (bad
        input exited 1 instead of 2 when its error could not be written)."""
        _to_devnull(self.file)
        if not self.stderr and not _Console.keep_going_on_broken_pipe:
            raise SystemExit(1)

    def _check_buffer(self) -> None:
        """rich's write of what was printed; a stream that cannot be written (a full disk, an I/O error: not a
        broken pipe, see `on_broken_pipe`) is sent to /dev/null from then on, and for stdout the command ends
        with one error line (`OutputError`, exit 1) where rich's traceback of the OSError ended it. A sweep
        goes on (its output is cosmetic); a stderr that cannot be written ends nothing (as above)."""
        if (self._buffer and not self._buffer_index and not self.stderr and sys.stdout is None
                and not self.quiet and not _Console.keep_going_on_broken_pipe):
            del self._buffer[:]   # started with fd 1 closed (`>&-`): rich writes to nowhere and exits 0
            raise SweeplabError(_CLOSED_STDOUT)
        try:
            super()._check_buffer()
        except OSError as exc:
            del self._buffer[:]
            _to_devnull(self.file)
            if not self.stderr and not _Console.keep_going_on_broken_pipe:
                raise OutputError(exc) from None

    def print(self, *objects: Any, **kwargs: Any) -> None:
        objects = tuple(printable(o) if isinstance(o, str) else o for o in objects)
        need = self._table_width(objects)
        if need is None:
            super().print(*objects, **kwargs)
            return
        # a terminal narrower than the table's words: the table is printed as wide as they need and the terminal
        # wraps it, where rich would cut every cell to nothing; a word longer than its column is folded, not cut
        for table in objects:
            for column in getattr(table, "columns", ()):
                column.overflow = "fold"
        width = self._width   # None on a terminal: its size is read at each print (it follows a resize)
        self.width = need
        try:
            super().print(*objects, **kwargs)
        finally:
            self._width = width

    def _table_width(self, objects: tuple[Any, ...]) -> int | None:
        """The width the tables among `objects` need to show every word of every cell, when this console (a
        terminal) is narrower; else None."""
        if not self.is_terminal or not any(type(o).__name__ == "_PrintableTable" for o in objects):
            return None
        from rich.measure import Measurement

        options = self.options.update_width(PIPE_WIDTH)
        need = max(Measurement.get(self, options, o).minimum for o in objects
                   if type(o).__name__ == "_PrintableTable")
        return need if need > self.width else None


_CLOSED_STDOUT = "standard output is closed: nowhere to write (redirect it to a file)"


class OutputError(SweeplabError):
    """Standard output cannot be written (no room, an I/O error): one line on stderr, exit 1."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(f"cannot write standard output: {exc.strerror or exc}")


def _to_devnull(stream: Any) -> None:
    """Point `stream`'s file descriptor at /dev/null: what it still buffers, and the interpreter's flush at
    exit, then go nowhere without an "Exception ignored" complaint."""
    import os

    with contextlib.suppress(Exception):
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, stream.fileno())
        os.close(fd)


def write_stdout(text: str) -> None:
    """`text` on stdout, flushed: a reader gone (`| head -1`) ends the command with exit 1 and nothing on
    stderr, as a console's print does; stdout that cannot be written, with `OutputError`."""
    if sys.stdout is None:   # started with fd 1 closed (`>&-`): say so, rather than an AttributeError's traceback
        raise SweeplabError(_CLOSED_STDOUT)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        _to_devnull(sys.stdout)
        if isinstance(exc, BrokenPipeError):
            raise SystemExit(1) from None
        raise OutputError(exc) from None


def _escape_unencodable(stream: Any) -> None:
    """Let `stream` write what its encoding cannot as escapes (`caf\\xe9`) instead of ending the command with a
    UnicodeEncodeError: stdout in the C locale without UTF-8 coercion, or with PYTHONIOENCODING=ascii, while
    sweep names, parameter values and errors are the user's text, in any script."""
    import codecs

    encoding = getattr(stream, "encoding", None) or ""
    try:
        utf = codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        utf = False
    if not utf and hasattr(stream, "reconfigure"):
        stream.reconfigure(errors="backslashreplace")


def utf8_argument(text: Any) -> Any:
    """A command-line argument naming a sweep as the user typed it: in the C locale without UTF-8 coercion,
    Python decodes the terminal's UTF-8 bytes as ASCII with surrogate escapes (`caf\\udcc3\\udca9`), which no
    name in the store (UTF-8 text) could match; such an argument is decoded as the UTF-8 it is. (File paths
    keep their escapes: they name the bytes on disk.)"""
    if isinstance(text, str) and any("\udc80" <= c <= "\udcff" for c in text):
        import os

        try:
            return os.fsencode(text).decode("utf-8")
        except (UnicodeError, ValueError):
            return text
    return text


def _make_console(*, stderr: bool) -> Console:
    """A console for stdout or stderr. Not a terminal: no width limit, so tables print whole values and lines
    are not wrapped (rich would assume 80 columns). Stderr never wraps: each message stays one line.

    No markup by default: what is printed is mostly the user's text (sweep names, parameter values, a trial's
    reason, an exception naming `[/data]`), which rich would read as style tags, dropping `[red]` or ending
    the command with a MarkupError on `[/]`. A line that styles passes `markup=True` and `escape`s the
    user's text in it."""
    _escape_unencodable(sys.stderr if stderr else sys.stdout)
    # no emoji: "train.py:train:" stays as written
    out = _Console(stderr=stderr, highlight=False, emoji=False, soft_wrap=stderr, markup=False)
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
    """A rich Table (rich.table.Table(*columns, **options)) whose text cells are `printable`; rich.table is
    imported by the commands that print one, not by every command's start."""
    from rich.table import Table as _Table

    class _PrintableTable(_Table):   # type: ignore[misc]
        def add_row(self, *cells: Any, **kwargs: Any) -> None:
            super().add_row(*(printable(c) if isinstance(c, str) else c for c in cells), **kwargs)

    return _PrintableTable(*(printable(c) if isinstance(c, str) else c for c in columns), **options)


def command(verb: str, name: str, *options: str) -> str:
    """`sweeplab VERB NAME OPTIONS` as a shell takes it, to paste: the name quoted (a W&B `name:` is free
    text), and after `--` when it starts with a dash, which the command would read as an option."""
    import shlex

    rest = "".join(f" {o}" for o in options if o)
    if name.startswith("-"):
        return f"sweeplab {verb}{rest} -- {shlex.quote(name)}"
    return f"sweeplab {verb} {shlex.quote(name)}{rest}"


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _print_json(obj: Any) -> None:
    write_stdout(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def print_error(message: str, *, prefix: str = "error: ") -> None:
    """Every error the command line reports: one line on stderr, whatever the terminal or pipe.

    A message that spans lines is joined with '; ' (a log line must not be cut from its error).
    """
    text = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    with contextlib.suppress(OSError):   # a stderr that cannot be written: the message is lost, not the exit code
        err.print(f"{prefix}{text}", markup=False, highlight=False, soft_wrap=True)
