"""Where a sweep's recorded paths are now: its project directory may have moved since (`mv proj proj2`).

`sweeplab resume` and `sweeplab repro` read the sweep's directory, spec file, base config, function file and
program from the store as absolute paths; `relocate` moves those under a directory that is gone to the same
relative place under where the project is now, `moved_path` maps one more such path (a command trial's argv).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweeplab.errors import UserError

__all__ = ["moved_path", "relocate"]


def relocate(raw: dict[str, Any], meta: dict[str, Any], spec_path: str | None, store_root: Path,
             echo: Callable[[str], None]) -> str | None:
    """A sweep whose directory is gone (the project moved: `mv proj proj2`) runs from where it is now.

    The store recorded the sweep's directory, spec file and base config (and any absolute function file or
    program) as absolute paths. When the directory is gone, the new one is the store's parent, else the current
    directory, whichever holds the sweep's files at the same relative paths; every recorded path under the old
    directory is moved there (`raw` and `meta` edited in place), and one line says so (`echo`). A file missing
    there too is an error naming both paths. Returns the spec file's path now.
    """
    old = str(meta["cwd"])
    if Path(old).is_dir():
        return spec_path
    inside = old.rstrip(os.sep) + os.sep

    def under(path: Any) -> str | None:   # a path in the old directory, relative to it
        return path[len(inside):] if isinstance(path, str) and path.startswith(inside) else None

    function = raw.get("function")
    function_file = function.rpartition(":")[0] if isinstance(function, str) and ":" in function else None
    command: list[Any] = raw["command"] if isinstance(raw.get("command"), list) else []
    named = [p for p in (spec_path, raw.get("config"), function_file, raw.get("program"), *command)
             if under(p) is not None]
    candidates = list(dict.fromkeys(os.path.abspath(p) for p in (Path(store_root).absolute().parent, ".")))
    new = next((c for c in candidates if all(os.path.exists(os.path.join(c, under(p) or "")) for p in named)),
               candidates[0])

    def moved(path: Any, what: str, *, must: bool = True) -> Any:
        rel = under(path)
        if rel is None or os.path.exists(path):
            return path
        there = os.path.join(new, rel)
        if must and not os.path.exists(there):
            raise UserError(f"{what}: {path} is gone (the sweep's directory {old} no longer exists) and "
                            f"{there}, the same place under {new}, is missing too; put the file back at either "
                            "path and run the command again")
        return there

    if raw.get("config") is not None:
        raw["config"] = moved(raw["config"], "config")
    if function_file is not None and under(function_file) is not None:
        raw["function"] = moved(function_file, "function") + ":" + str(function).rpartition(":")[2]
    if raw.get("program") is not None:
        raw["program"] = moved(raw["program"], "program")
    if command:
        raw["command"] = [moved(item, "command", must=False) for item in command]
    if raw.get("checkpoint_dir") is not None:
        raw["checkpoint_dir"] = moved(raw["checkpoint_dir"], "checkpoint_dir", must=False)
    meta["cwd"] = new
    echo(f"the sweep's directory {old} is gone: running it from {new}, its files at the same relative paths")
    return moved(spec_path, "spec", must=False) if spec_path else spec_path


def moved_path(path: str, old: str, new: str) -> str:
    """`path` under directory `old` at the same place under `new` (as given when it is not under `old`)."""
    if path == old or path.startswith(old.rstrip(os.sep) + os.sep):
        return os.path.join(new, os.path.relpath(path, old)) if path != old else new
    return path
