"""What a `file.py:fn` target's file defines, read without running it (the trials import it; the command line
must not: importing runs the user's code, and may take torch's import time)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["find_module", "top_level_names"]

_DYNAMIC = frozenset({"globals", "setattr", "exec", "eval", "vars", "__import__", "locals"})
MAX_SOURCE_BYTES = 16 * 1024 * 1024   # a larger "source file" is not parsed here: the trials will say


def top_level_names(path: Path) -> set[str] | None:
    """The names a module binds at its top level (functions, classes, assignments, imports, and those bound
    inside top-level `if`/`try`/`with`/loops), or None when that cannot be known without running it: a file
    that does not parse or cannot be read, a `from m import *`, a module `__getattr__`, or `globals()`, `setattr`,
    `exec`, `vars()` or `sys.modules` anywhere in it."""
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):   # anywhere, a function's body included: names bound by hand
        if ((isinstance(node, ast.Name) and node.id in _DYNAMIC)
                or (isinstance(node, ast.Attribute) and node.attr in ("modules", "__dict__"))):
            return None
    names: set[str] = set()
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.partition(".")[0])
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
            stack.extend(ast.iter_child_nodes(node))   # their bodies bind at the top level too
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)
            if node.name:
                names.add(node.name)
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
                elif isinstance(sub, ast.MatchAs | ast.MatchStar) and sub.name:
                    names.add(sub.name)
    if "__getattr__" in names:
        return None
    return names


def find_module(module: str, search: Sequence[str]) -> tuple[bool, Path | None]:
    """Whether `module` (`pkg.sub`) is importable from `search` (then sys.path and the import hooks), and
    its source file when it has one, found without importing it or its packages (importing runs the user's
    code). "Importable" errs on the safe side: a name a package's `__init__.py` may bind at run time (a
    `from . import x`, a dynamic `__path__`), a submodule of a plain module (`os.path`) or a finder that
    raises count as found, so that only a module no import could find is refused."""
    import importlib.machinery
    import importlib.util

    loaded = sys.modules.get(module)
    if loaded is not None:
        origin = getattr(loaded, "__file__", None)
        return True, Path(origin) if isinstance(origin, str) else None
    parts = module.split(".")
    if not all(part.isidentifier() for part in parts):
        return False, None
    paths = [*search, *sys.path]
    try:
        spec = importlib.machinery.PathFinder.find_spec(parts[0], paths)
        if spec is None:   # a builtin, a frozen module, an editable install's finder: a top-level name only
            spec = importlib.util.find_spec(parts[0])   # imports nothing for a top-level name
    except Exception:   # a broken finder or path entry: the trial's import will say
        return True, None
    for i, part in enumerate(parts[1:], start=1):
        if spec is None:
            return False, None
        locations = spec.submodule_search_locations
        init = Path(spec.origin) if isinstance(spec.origin, str) and spec.origin.endswith(".py") else None
        if locations is None:   # a plain module: `os.path` is set by running `os`
            return True, None
        if init is not None:
            names = top_level_names(init)
            if names is None or part in names or "__path__" in names:
                return True, None   # bound (or the package's path changed) when the package runs
        try:
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:i + 1]), list(locations))
        except Exception:
            return True, None
    if spec is None:
        return False, None
    origin = spec.origin if isinstance(spec.origin, str) and spec.origin.endswith(".py") else None
    return True, Path(origin) if origin is not None else None
