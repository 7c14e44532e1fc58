"""The libraries a trial imports: read from its source before the sweep starts, imported by each worker before
its first trial (`execution.import_libraries`; once for all of them by the fork server, backends/forkserver.py).

Imported early by `sweeplab sweep` (cli/_early.py) to start that fork server while the command line imports:
only the standard library at the top, `ast` when a scan runs.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["import_all", "trial_imports"]


#: files of the user's own code read at most, following its imports from the trial's module
_SCAN_FILES = 64
#: a source file larger than this is not parsed (a generated module, data written as Python: parsing 30 MB
#: takes minutes and gigabytes); its imports are left to the trial
_SCAN_BYTES = 2 << 20


def trial_imports(target: str | None, python_path: Sequence[str] = ()) -> tuple[str, ...]:
    """The installed libraries (not the standard library, not the user's own modules, not sweeplab) that the
    module of `target` ('pkg.mod:fn' or 'file.py:fn') imports at its top or inside the function (and inside the
    module's functions and classes it uses), and so do the user's modules it imports (found on `python_path`,
    read, never imported). What only `if __name__ == "__main__":` or another function uses is left out.

    Read from the source without running any of it: what the worker imports before the first trial (and the
    fork server once for all workers, backends/forkserver.py), so that `import torch` inside `train` is paid
    once, and the trial's seed seeds torch and numpy whichever way the trial imports them. An import under
    `if TYPE_CHECKING:` is left out; one that fails later is only skipped (the trial's own import reports it).
    """
    try:
        return _trial_imports(target, python_path)
    except (OSError, ValueError):   # a name the OS refuses (too long): the spec's check reports the target
        return ()


def _trial_imports(target: str | None, python_path: Sequence[str]) -> tuple[str, ...]:
    if not target or ":" not in target:
        return ()
    module_part = target.rpartition(":")[0]
    if module_part.endswith(".pkl"):
        return ()
    roots = [str(Path(p).resolve()) for p in python_path if p]
    first: Path | None
    if module_part.endswith(".py") or os.sep in module_part or "/" in module_part:
        first = Path(module_part)
        if not first.is_absolute():   # relative to the first of `python_path` that has it, else to the cwd
            first = next((Path(r, first) for r in roots if Path(r, first).is_file()), first)
        first = first.resolve()
        roots.insert(0, str(first.parent))
    else:
        first = _local_source(module_part, roots)
    found: dict[str, None] = {}
    seen: set[Path] = set()
    todo = [first] if first is not None else []
    while todo and len(seen) < _SCAN_FILES:
        path = todo.pop()
        if path in seen:
            continue
        entry = target.rpartition(":")[2] if path == first else None
        seen.add(path)
        names, sets_env = _imported_names(path, entry)
        if sets_env:   # `os.environ["KERAS_BACKEND"] = ...` before `import keras`: importing it first would
            return ()  # ignore the setting (libraries read their variables when imported)
        for name in names:
            if isinstance(name, Path):   # a relative import: a module of the user's package, read in turn
                todo.append(name)
                continue
            top = name.partition(".")[0]
            if top in sys.stdlib_module_names or top in sys.builtin_module_names or top == "sweeplab":
                continue
            local = _local_source(name, roots)
            if local is not None:
                todo.append(local)
            elif _installed(top, roots):
                found.setdefault(name)
    return tuple(found)


def _imported_names(path: Path, entry: str | None = None) -> tuple[list[str | Path], bool]:
    """Absolute module names the file imports (`import a.b` -> a.b; `from a.b import c` -> a.b), and the files
    of its package its relative imports name (`from .model import Net` -> model.py beside it): at its top
    (not under `if __name__ == "__main__":` or `if TYPE_CHECKING:`), and in its functions and classes: all of
    them, or with `entry`, those that function uses by name, directly or through one another. And whether
    that code sets an environment variable (`os.environ[...] =`, `.setdefault`, `.update`, `os.putenv`)."""
    import ast
    import stat

    try:   # a regular file only: `function: /dev/zero:f` or a pipe must not fill memory or block the CLI
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > _SCAN_BYTES:
            return [], False
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError, MemoryError, RecursionError):
        return [], False

    def skipped(node: ast.AST) -> bool:
        if not isinstance(node, ast.If):
            return False
        test = ast.unparse(node.test)
        return "TYPE_CHECKING" in test or ("__name__" in test and "__main__" in test)

    defs: dict[str, ast.AST] = {}
    top: list[ast.AST] = []
    todo: list[ast.AST] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
            if entry is None:
                todo.append(node)
        elif not skipped(node):
            top.append(node)
    if entry is not None and entry in defs:
        todo.append(defs[entry])
    names: list[str | Path] = []
    done: set[int] = set()
    sets_env = False
    for statement in top:
        for n in _walk(statement, skipped):
            _import_of(n, names, path)
            sets_env = sets_env or _sets_env(n)
    while todo:
        used = todo.pop()
        if id(used) in done:
            continue
        done.add(id(used))
        for n in _walk(used, skipped):
            _import_of(n, names, path)
            sets_env = sets_env or _sets_env(n)
            if isinstance(n, ast.Name) and n.id in defs:
                todo.append(defs[n.id])
    return names, sets_env


def _sets_env(node: Any) -> bool:
    """Whether `node` changes the process's environment: `os.environ[k] = v` (also `environ[k] += ...`),
    `os.environ.setdefault/update(...)`, `os.putenv(...)`."""
    import ast

    if isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Subscript) and ast.unparse(t.value).endswith("environ") for t in targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        owner = ast.unparse(node.func.value)
        return (node.func.attr in ("setdefault", "update", "__setitem__") and owner.endswith("environ")) or (
            node.func.attr == "putenv" and owner == "os")
    return False


def _walk(node: Any, skipped: Callable[[Any], bool]) -> list[Any]:
    """`ast.walk` without the subtrees `skipped` names."""
    import ast

    out, todo = [], [node]
    while todo:
        n = todo.pop()
        if skipped(n):
            continue
        out.append(n)
        todo.extend(ast.iter_child_nodes(n))
    return out


def _import_of(node: Any, names: list[str | Path], path: Path) -> None:
    import ast

    if isinstance(node, ast.Import):
        names.extend(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module != "__future__":
        names.append(node.module)
    elif isinstance(node, ast.ImportFrom) and node.level > 0:   # `from .a.b import c`, `from .. import c`
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        if node.module:
            base = base.joinpath(*node.module.split("."))
            candidates = [base.with_suffix(".py"), base / "__init__.py"]
        else:
            candidates = []
        candidates += [base / f"{alias.name}.py" for alias in node.names] + [
            base / alias.name / "__init__.py" for alias in node.names]   # `c` may be a module of its own
        names.extend(c for c in candidates if c.is_file())


def _local_source(name: str, roots: Sequence[str]) -> Path | None:
    """The source file of module `name` when it is the user's own (found under one of `roots`), else None."""
    parts = name.split(".")
    for root in roots:
        base = Path(root, *parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _installed(top: str, roots: Sequence[str]) -> bool:
    """Whether the top-level package `top` is installed (found on sys.path outside the user's `roots`), looked
    up without importing anything."""
    from importlib.machinery import PathFinder

    own = {str(Path(r)) for r in roots} | {os.getcwd(), ""}
    path = [p for p in sys.path if p not in own and str(Path(p or ".").resolve()) not in own]
    try:
        return PathFinder.find_spec(top, path) is not None
    except (ImportError, ValueError):
        return False


#: what a library imports lazily the first time nearly every training loop uses it, imported with it. torch
#: imports torch._dynamo (with sympy, mpmath, optree: ~800 modules, ~1 CPU-s) when the first optimizer is
#: built (`torch.optim.Optimizer.__init__` is wrapped by `torch._disable_dynamo`): in each worker's first
#: trial, after the fork server had imported torch itself (measured on examples/torch_digits: a first trial
#: of 1.4 CPU-s against 0.2 for the next ones, all of the difference this import).
FIRST_USE: dict[str, tuple[str, ...]] = {"torch": ("torch._dynamo",)}


def import_all(names: Sequence[str]) -> list[str]:
    """Import each of `names`, skipping those that fail (the trial's own import reports them); the names
    that failed. A worker throws their output away (`execution.import_libraries`); `sweeplab repro` shows it.
    What a library imported by then (by these names or through them) imports at its first use (`FIRST_USE`)
    is imported too, failures ignored."""
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException:   # a library's import may raise anything, SystemExit included
            failed.append(name)
    if len(failed) < len(names):   # the library itself or through another (lightning, transformers: torch)
        for name in (extra for top, more in FIRST_USE.items() if top in sys.modules for extra in more):
            with contextlib.suppress(BaseException):
                importlib.import_module(name)
    return failed
