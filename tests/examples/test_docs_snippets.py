"""The documentation's snippets are true: every YAML block in README.md and docs/*.md is valid YAML (a user
copies it into a spec file), and every `--option` written after `sweeplab COMMAND` is an option of COMMAND.
Fast: no process is started."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
import yaml

from sweeplab.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]
FENCE = re.compile(r"^[ \t]*```(\w*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)
COMMANDS = "sweep|status|best|resume|stop|run|profile|repro|dashboard|export|init"
COMMAND_LINE = re.compile(rf"\bsweeplab ({COMMANDS})\b([^`|#\n]*)")


def _blocks(lang: str) -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) == lang:
                found.append((f"{doc.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 2}", m.group(2)))
    return found


YAML_BLOCKS = _blocks("yaml")


@pytest.mark.parametrize("text", [b for _, b in YAML_BLOCKS], ids=[i for i, _ in YAML_BLOCKS])
def test_every_yaml_block_of_the_docs_is_valid_yaml(text: str):
    yaml.safe_load(text)


def _options() -> dict[str, set[str]]:
    group = typer.main.get_command(app)
    ctx = group.make_context("sweeplab", ["--help"], resilient_parsing=True)
    return {name: {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
            for name in group.list_commands(ctx) if (cmd := group.get_command(ctx, name)) is not None}


def test_every_option_the_docs_give_a_command_is_one_of_its_options():
    options = _options()
    wrong = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for m in COMMAND_LINE.finditer(line):
                args = re.split(r"&&|;|\$\(", m.group(2))[0]   # not a next command's (&&, ;) or a $(...)'s
                for opt in re.findall(r"(?<![\w-])--?[a-zA-Z][\w-]*", args):
                    if opt not in options[m.group(1)]:
                        wrong.append(f"{doc.relative_to(ROOT)}:{n}: sweeplab {m.group(1)} {opt}")
    assert not wrong, "\n".join(wrong)
