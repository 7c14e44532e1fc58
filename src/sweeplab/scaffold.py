"""`sweeplab init DIR --template NAME`: a new project laid out the way sweeplab recommends.

A template is a directory tree shipped as package data under `sweeplab/templates/<name>/`. Scaffolding
copies it into DIR, replacing the token `__project__` in text files by a name derived from DIR, and
restoring dotfiles (package data globs skip them, so `gitignore` is stored without its dot). DIR must be
missing or empty: it is checked before anything is written, so an existing project is never touched.
See docs/init.md for the layout and the reasons behind it.
"""

from __future__ import annotations

import difflib
import re
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from sweeplab.errors import UserError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = ["scaffold", "templates"]

_TOKEN = "__project__"
_RENAMES = {"gitignore": ".gitignore"}          # stored name -> scaffolded name
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def templates() -> tuple[str, ...]:
    """The names of the templates this installation ships, sorted."""
    root = _templates_root()
    return tuple(sorted(e.name for e in root.iterdir() if e.is_dir() and not _skipped(e.name)))


def scaffold(directory: Path | str, template: str) -> list[Path]:
    """Write the `template` project into `directory` (created if missing) and return the files written.

    Raises UserError, before writing anything, when the template is unknown (listing the templates,
    with a did-you-mean hint) or when `directory` exists and is not an empty directory.
    """
    names = templates()
    if template not in names:
        close = difflib.get_close_matches(template, names, n=1, cutoff=0.5)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise UserError(f"unknown template {template!r}; expected one of: {', '.join(names)}{hint}")
    target = Path(directory)
    _check_target(target)
    files = _collect(_templates_root() / template)   # read everything first: no half-written project
    project = _project_name(target)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:                           # a file on the way, no permission, a name too long
        raise UserError(f"cannot create {target}: {exc.strerror or exc}; nothing was written") from None
    written: list[Path] = []
    for rel, data in files:
        dest = target.joinpath(*rel.parts)
        if _is_text(data):
            data = data.decode("utf-8").replace(_TOKEN, project).encode("utf-8")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "xb") as fh:             # "x": never replace a file, even one created meanwhile
                fh.write(data)
        except OSError as exc:                       # a full disk, a file created meanwhile
            raise UserError(f"cannot write {dest}: {exc.strerror or exc}; {len(written)} of {len(files)} "
                            f"files were written into {target}") from None
        written.append(dest)
    return written


def _templates_root() -> Traversable:
    return resources.files("sweeplab") / "templates"


def _check_target(target: Path) -> None:
    try:
        exists = target.exists()
    except OSError as exc:                           # e.g. a name longer than the file system allows
        raise UserError(f"cannot create {target}: {exc.strerror or exc}; nothing was written") from None
    if not exists:
        return
    if not target.is_dir():
        raise UserError(f"{target} exists and is not a directory; nothing was written "
                        "(choose a new or empty directory)")
    if any(target.iterdir()):
        raise UserError(f"{target} is not empty; nothing was written "
                        "(sweeplab init only writes into a new or empty directory)")


def _collect(root: Traversable) -> list[tuple[PurePosixPath, bytes]]:
    """(relative path, content) of every file of a template, dotfiles restored, caches skipped."""
    found: list[tuple[PurePosixPath, bytes]] = []

    def walk(node: Traversable, rel: PurePosixPath) -> None:
        for entry in sorted(node.iterdir(), key=lambda e: e.name):
            if _skipped(entry.name):
                continue
            if entry.is_dir():
                walk(entry, rel / entry.name)
            else:
                found.append((rel / _RENAMES.get(entry.name, entry.name), entry.read_bytes()))

    walk(root, PurePosixPath())
    return found


def _skipped(name: str) -> bool:
    return name in _SKIP_DIRS or name.endswith(_SKIP_SUFFIXES)


def _project_name(target: Path) -> str:
    """A name for sweeps and headings: the directory's name, lowercased, reduced to [a-z0-9_-]."""
    raw = target.resolve().name.lower()
    name = re.sub(r"[^a-z0-9_-]+", "-", raw).strip("-_")
    return name or "project"


def _is_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
