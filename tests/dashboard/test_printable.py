"""The dashboard and the command line show the store's text the same way: the same control and bidirectional
characters written as the same escapes (cli/output.py `printable`, static/util.js `printable`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sweeplab.cli.output import CONTROL_CLASS, printable

UTIL_JS = Path(__file__).resolve().parents[2] / "src" / "sweeplab" / "dashboard" / "static" / "util.js"


def test_the_dashboard_escapes_the_characters_the_command_line_escapes() -> None:
    found = re.search(r"^const CONTROL = /\[(.*)\]/g;$", UTIL_JS.read_text(encoding="utf-8"), re.M)
    assert found is not None and found.group(1) == CONTROL_CLASS


@pytest.mark.parametrize(("text", "shown"), [
    ("report\u202efdp.exe", "report\\u202efdp.exe"),            # right-to-left override
    ("a\u2066b\u2069", "a\\u2066b\\u2069"),                       # isolates
    ("x\u200fy\u200ez\u061c", "x\\u200fy\\u200ez\\u061c"),       # marks: move the neutral characters near them
    ("\x1b[2J\ttab\nline", "\\x1b[2J\ttab\nline"),               # tab and line feed stay
    ("שלום and ü 🚀", "שלום and ü 🚀"),                           # right-to-left letters themselves stay
], ids=["override", "isolate", "marks", "c0", "letters"])
def test_printable_writes_controls_as_escapes(text: str, shown: str) -> None:
    assert printable(text) == shown
