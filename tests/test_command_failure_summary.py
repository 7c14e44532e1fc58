"""What a failed command trial's reason and traceback keep of its stderr: bounded, and to the point."""

from __future__ import annotations

from sweeplab.backends.command_trial import _STDERR_BYTES, _STDERR_KEEP, _stderr_summary

TRACEBACK = (b"Traceback (most recent call last):\n  File \"prog.py\", line 1, in <module>\n"
             b"    import nope\nModuleNotFoundError: No module named 'nope'\n")


def test_the_last_traceback_is_kept_and_its_exception_line_is_the_reason():
    data = b"warming up\n" + TRACEBACK.replace(b"nope", b"first") + b"retrying\n" + TRACEBACK
    last, shown = _stderr_summary(data)
    assert last == "ModuleNotFoundError: No module named 'nope'"
    assert shown == TRACEBACK.decode().strip()


def test_without_a_traceback_the_last_twenty_lines_are_kept():
    data = b"".join(f"line {i}\n".encode() for i in range(100)) + b"error: bad flag --lr\n"
    last, shown = _stderr_summary(data)
    assert last == "error: bad flag --lr"
    assert shown.splitlines()[0] == "line 81" and len(shown.splitlines()) == 20


def test_a_progress_bar_redrawn_with_carriage_returns_shows_as_a_terminal_would():
    bar = b"".join(f"\r{i}%|{'#' * (i // 10)}".encode() for i in range(101))
    last, shown = _stderr_summary(bar + b"\nKilled\n")
    assert last == "Killed" and shown.splitlines()[0] == "100%|##########"


def test_everything_is_bounded():
    huge = b"x" * (3 * _STDERR_KEEP) + b"\n" + b"y" * 5000
    last, shown = _stderr_summary(huge[-_STDERR_KEEP:])
    assert len(last) <= 303 and len(shown) <= _STDERR_BYTES + 4
