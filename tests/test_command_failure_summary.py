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


def _ranked(rank: int, text: bytes) -> bytes:
    return b"".join(f"[rank{rank}]: ".encode() + ln + b"\n" for ln in text.rstrip(b"\n").split(b"\n"))


def test_ranks_sharing_stderr_give_the_first_failing_ranks_error_not_a_peers_symptom():
    """torch.distributed prefixes each rank's traceback with `[rankN]: `; rank 1 broke first, rank 0 then lost it.
    The reason was rank 0's symptom (the last line), and no traceback was found (none starts a line)."""
    symptom = TRACEBACK.replace(b"ModuleNotFoundError: No module named 'nope'",
                                b"RuntimeError: Connection closed by peer [127.0.0.1]:1929")
    data = b"rank 1 breaking\n" + _ranked(1, TRACEBACK) + b"\n" + _ranked(0, symptom) + b"\n"
    last, shown = _stderr_summary(data)
    assert last == "rank 1: ModuleNotFoundError: No module named 'nope'"
    assert shown == _ranked(1, TRACEBACK).decode().strip()
    # one rank (a world of 1, or the peer died without a word): its traceback, named
    last, shown = _stderr_summary(_ranked(0, symptom))
    assert last == "rank 0: RuntimeError: Connection closed by peer [127.0.0.1]:1929"
    assert shown.splitlines()[0] == "[rank0]: Traceback (most recent call last):"
