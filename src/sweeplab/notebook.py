"""Notebook support for the Python API: a live progress line in Jupyter, and the check that a trial
function can be imported by worker processes.

Worker processes are fresh interpreters: they import a trial function by name (`module:function`) when
it lives in a module. A function no other process can import by name (defined in a notebook cell, in the
interactive interpreter, a lambda or a nested function, a callable object such as a class instance with
`__call__` or a `functools.partial`) is shipped by value instead: `shipped_target`
writes it with cloudpickle into the store (`functions/<digest>.pkl`, sweeplab's own file) and the workers
load it from there; the modules it uses (numpy, torch, your own) must still be importable by the workers.
What cloudpickle cannot serialise (an open file, a lock, a live connection captured by the function) is a
UserError with the fix: move the function into a `.py` file next to the notebook and import it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from sweeplab._process import Shared
from sweeplab.errors import UserError

__all__ = ["Progress", "in_notebook", "optuna_settings_kept", "shipped_target", "shipping", "target_of"]


def in_notebook() -> bool:
    """True inside a Jupyter (IPython kernel) session."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:
        return False
    return shell is not None and hasattr(shell, "kernel")


@contextlib.contextmanager
def optuna_settings_kept() -> Iterator[None]:
    """Optuna's log level and the warnings filters as they were, once the last sweep of this process inside
    this ends. sweeplab's searchers and the sweep's study quiet Optuna for the whole process (its level set
    to WARNING, its ExperimentalWarning ignored): after one `sl.sweep(method=tpe)`, `sl.optimize` or
    `sweep.study()` in a notebook, the user's own `study.optimize` in the next cell printed no "Trial 0
    finished" line and no experimental warning for the rest of the session. The first sweep in saves them,
    the last one out puts back what sweeplab changed (a level the user set in between is kept)."""
    with _OPTUNA_SETTINGS.held():
        yield


def _save_optuna_settings() -> tuple[int, list[Any]]:
    return logging.getLogger("optuna").level, list(warnings.filters)


def _restore_optuna_settings(saved: tuple[int, list[Any]]) -> None:
    level, filters = saved
    optuna = sys.modules.get("optuna")
    if optuna is None:
        return
    logger = logging.getLogger("optuna")
    if logger.level == logging.WARNING:   # as sweeplab left it; optuna's own default is INFO
        logger.setLevel(level if level != logging.NOTSET else logging.INFO)
    experimental = getattr(getattr(optuna, "exceptions", None), "ExperimentalWarning", None)
    added = [f for f in warnings.filters if f not in filters and f[0] == "ignore" and f[2] is experimental]
    for f in added:   # sweeplab's own `filterwarnings("ignore", ExperimentalWarning)`, and only that
        warnings.filters.remove(f)  # type: ignore[attr-defined]
    if added:
        warnings._filters_mutated()  # type: ignore[attr-defined]


_OPTUNA_SETTINGS = Shared(_save_optuna_settings, _restore_optuna_settings)


def shipped_target(fn: Any, store_root: str | os.PathLike[str], what: str = "trial function") -> str:
    """The target naming `fn` for worker processes: `target_of(fn)` when it can be imported by name, else
    `fn` written by value (cloudpickle) into `<store_root>/functions/<digest>.pkl`, named `<file>:<name>`."""
    target, write = shipping(fn, store_root, what)
    write()
    return target


def shipping(fn: Any, store_root: str | os.PathLike[str],
             what: str = "trial function") -> tuple[str, Callable[[], None]]:
    """`shipped_target` in two steps: the target, and what writes `fn`'s file into the store (nothing for a
    function imported by name). Bad input (a function that cannot be serialised) raises here, before anything
    is written; the caller checks the rest of its input, then writes."""
    _refuse_async(fn, what)
    by_name: str | None = None   # a script's function that can also be imported by name, if pickling fails
    try:
        target = target_of(fn, what)
        if not _reruns_caller(fn):
            if not _script_with_arguments(fn):
                return target, _nothing
            by_name = target
    except UserError:
        if isinstance(fn, str) or not callable(fn):
            raise
    import hashlib

    try:
        import cloudpickle
    except ImportError as exc:   # a core dependency: only a broken install gets here
        raise UserError(f"{what} {getattr(fn, '__qualname__', fn)!r} is defined where workers cannot import "
                        "it, and cloudpickle (which ships it by value) is not installed: pip install "
                        "cloudpickle") from exc
    qualname = _display_name(fn)
    try:
        blob = _dumps(cloudpickle, fn)
    except Exception as exc:   # cloudpickle raises many kinds (TypeError, PicklingError, ...)
        if by_name is not None:
            return by_name, _nothing
        raise UserError(f"{what} {qualname!r} cannot be sent to worker processes ({type(exc).__name__}: {exc}):"
                        f" it captures something that cannot be serialised; move it into a .py file next to "
                        f"the notebook (e.g. trials.py), then `from trials import {qualname.rsplit('.', 1)[-1]}`"
                        ) from exc
    directory = os.path.join(os.fspath(store_root), "functions")
    path = os.path.join(directory, hashlib.sha256(blob).hexdigest()[:24] + ".pkl")

    def write() -> None:
        os.makedirs(directory, exist_ok=True)
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"   # two threads shipping one function
            with open(tmp, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)

    name = "".join(c if c.isalnum() or c == "_" else "_" for c in qualname.rsplit(".", 1)[-1]) or "function"
    return f"{os.path.abspath(path)}:{name}", write


def _refuse_async(fn: Any, what: str) -> None:
    """An `async def` or generator trial function or objective: a worker calls it and takes what it returns,
    a coroutine never run or a generator never iterated, so every trial failed with "metric 'loss' was never
    reported" or "could not be cast to float" (and a "coroutine was never awaited" warning)."""
    import inspect

    if not callable(fn) or isinstance(fn, str):
        return
    name = _display_name(fn)
    result = "value (trial.report for intermediate ones)" if what == "objective" else \
        "final metrics (run.log for intermediate ones)"
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise UserError(f"{what} {name!r} is an async def: workers call it and take what it returns, a coroutine "
                        f"that would never run; define it with def (async code inside it with asyncio.run(...))")
    if inspect.isgeneratorfunction(fn):
        raise UserError(f"{what} {name!r} is a generator function (it yields): workers call it once and take "
                        f"what it returns; return the {result}")


def _nothing() -> None:
    """Shipping a function imported by name writes nothing."""


def _dumps(cloudpickle: Any, fn: Any) -> bytes:
    """`cloudpickle.dumps(fn)`, keeping where its code was written: cloudpickle names every code object it
    ships `<dynamic-code>`, so a trial's traceback would show neither the cell nor its lines. Each code object
    is sent with its file name (a notebook cell's as IPython shows it, `Cell In[3]`) and that file's lines,
    which the worker puts back (`_code_at`): its tracebacks then read as they would in the kernel.

    A dataclass of a cell (a typed config, `def train(config: Cfg, run)`) travels by value, and its fields'
    `dataclasses.MISSING` (no default, no default_factory) would arrive as a copy that is not `MISSING`:
    cloudpickle keeps the identity of dataclasses' `_FIELD` markers but not of this one (cloudpipe/cloudpickle
    #386, #513). The worker's dataclasses and pydantic then read every field as having both a default and a
    default_factory (pydantic: "cannot specify both default and default_factory", every trial failed), so
    `MISSING` is sent by reference."""
    import dataclasses
    import io

    sources: dict[str, tuple[str, tuple[str, ...]]] = {}

    class Pickler(cloudpickle.Pickler):   # type: ignore[misc, name-defined]
        def reducer_override(self, obj: Any) -> Any:
            if obj is dataclasses.MISSING:   # by reference: see `_dumps`
                return getattr, (dataclasses, "MISSING")
            if isinstance(obj, _LRU_WRAPPER) and not _importable(obj):   # see `_CachedFunction`
                params = obj.cache_parameters()
                return _CachedFunction, (params["maxsize"], params["typed"]), obj.__wrapped__
            if type(obj) is functools.cached_property:   # a cell class's: see `_cached_property`
                return _cached_property, (obj.func, obj.attrname, obj.__doc__)
            if _single_dispatch(obj) and not _importable(obj):   # see `_dispatch_function`
                return (_dispatch_function, (obj.__name__, obj.__qualname__), dict(obj.registry), None, None,
                        _dispatch_to)
            if type(obj) is types.CodeType and obj.co_filename != _DYNAMIC:
                if obj.co_filename not in sources:
                    sources[obj.co_filename] = _source_of(obj.co_filename)
                name, lines = sources[obj.co_filename]
                return _code_at, (obj.replace(co_filename=_DYNAMIC), name, lines)
            return super().reducer_override(obj)

    buffer = io.BytesIO()
    Pickler(buffer).dump(fn)
    paths = [p for p in sys.path if p and os.path.isabs(p)]   # the kernel's, with what its cells added
    return cloudpickle.dumps(_WithPath(paths, buffer.getvalue()))   # type: ignore[no-any-return]


_LRU_WRAPPER: Any = getattr(functools, "_lru_cache_wrapper", ())


def _importable(obj: Any) -> bool:
    """Whether a worker finds `obj` by its module and qualified name (what pickle does with it)."""
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str) or module == "__main__" or module not in sys.modules:
        return False
    found: Any = sys.modules[module]
    for part in str(getattr(obj, "__qualname__", "")).split("."):
        found = getattr(found, part, None)
    return found is obj


class _CachedFunction:
    """A cell's `functools.lru_cache` / `functools.cache` function in a worker: a cached helper of the trial
    function (`@functools.cache def load_data(): ...`, common in notebooks). Pickle sends such a wrapper by
    its name, which a worker cannot import from a kernel's `__main__` (every trial failed, "Can't get
    attribute 'load_data'"), so it travels as its function and cache parameters, with an empty cache; the
    function arrives after this object (pickle's state), so that a recursive one (a memoized `fib`) finds it.
    It calls, and answers `cache_info()`, `cache_clear()` and `__wrapped__`, as the wrapper does."""

    def __init__(self, maxsize: int | None, typed: bool) -> None:
        self._params = (maxsize, typed)
        self._cached: Any = None

    def __setstate__(self, fn: Callable[..., Any]) -> None:
        maxsize, typed = self._params
        self._cached = functools.lru_cache(maxsize=maxsize, typed=typed)(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._cached(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_cached", "_params"):
            raise AttributeError(name)
        return getattr(self._cached, name)


def _cached_property(func: Callable[..., Any], name: str | None, doc: str | None) -> Any:
    """A `functools.cached_property` of a cell's class, in a worker. Python 3.11's holds a lock, which cannot
    be pickled (every sweep of a cell function using such a class was refused); it travels as its function
    and the name it was set under (cloudpickle rebuilds the class without calling `__set_name__`)."""
    prop = functools.cached_property(func)
    prop.attrname, prop.__doc__ = name, doc
    return prop


def _single_dispatch(obj: Any) -> bool:
    return isinstance(obj, types.FunctionType) and all(hasattr(obj, a) for a in ("registry", "register", "dispatch"))


def _dispatch_function(name: str, qualname: str) -> Any:
    """A cell's `functools.singledispatch` function in a worker, its implementations still to come
    (`_dispatch_to`). cloudpickle cannot send one (its dispatch cache holds weak references: every sweep of a
    cell function using it was refused), so it travels as its registry of implementations, set after the
    function itself exists so that implementations calling it (a tree walker) find it."""
    def unset(*args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{name}: no implementation")

    unset.__name__, unset.__qualname__ = name, qualname
    return functools.singledispatch(unset)


def _dispatch_to(fn: Any, registry: dict[Any, Callable[..., Any]]) -> None:
    for cls, impl in registry.items():
        fn.register(cls, impl)
    base = registry.get(object)
    if base is not None:
        functools.update_wrapper(fn, base)


class _WithPath:
    """A shipped function with this process's import path: unpickled in a worker, it appends the entries
    the worker lacks (a `sys.path.append("../src")` of a notebook cell) before unpickling the function, so
    the modules it uses by reference are found there as they were here. Unpickles to the function itself."""

    def __init__(self, paths: list[str], blob: bytes) -> None:
        self.paths, self.blob = paths, blob

    def __reduce__(self) -> tuple[Any, ...]:
        return _function_with_path, (self.paths, self.blob)


def _function_with_path(paths: list[str], blob: bytes) -> Any:
    import pickle

    sys.path.extend(p for p in paths if p not in sys.path)
    fn = pickle.loads(blob)
    _register_in_main(fn)
    return fn


_in_main: set[str] = set()   # the names `_register_in_main` set on this process's __main__


def _register_in_main(fn: Any) -> None:
    """Put the cell's classes and functions that `fn` reaches (through its globals and closure, and theirs)
    on this process's `__main__`, where they lived in the kernel: pickle finds a class by its module and
    name, so a checkpoint of a cell's class (`run.checkpoint(State(...))`, what docs/python-api.md's cell
    functions do) could not be written ("Can't pickle <class '__main__.State'>: attribute lookup State on
    __main__ failed"), nor read back by a resumed attempt. A name of this process's own is never replaced."""
    main = sys.modules.get("__main__")
    if main is None:
        return
    seen: set[int] = set()
    todo = [fn]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == "__main__":
            name = getattr(obj, "__qualname__", "")
            if name.isidentifier() and (name in _in_main or not hasattr(main, name)):
                setattr(main, name, obj)
                _in_main.add(name)
        if isinstance(obj, types.FunctionType):
            todo.extend(v for v in obj.__globals__.values() if isinstance(v, (type, types.FunctionType)))
            for cell in obj.__closure__ or ():
                try:
                    value = cell.cell_contents
                except ValueError:   # an empty cell
                    continue
                if isinstance(value, (type, types.FunctionType)):
                    todo.append(value)
        elif isinstance(obj, type) and getattr(obj, "__module__", None) == "__main__":
            todo.extend(v for v in vars(obj).values() if isinstance(v, (type, types.FunctionType)))


_DYNAMIC = "<dynamic-code>"


def _source_of(filename: str) -> tuple[str, tuple[str, ...]]:
    """The name to show for a code object's file (`Cell In[3]` for a notebook cell) and its lines, from the
    line cache where IPython keeps its cells (empty when they are not known)."""
    import linecache

    name = filename
    shell = _ipython()
    try:
        cell = shell.compile.format_code_name(filename) if shell is not None else None
    except Exception:   # an IPython without it: the kernel's file name still leads to the lines
        cell = None
    if cell:
        name = " ".join(cell)
    return name, tuple(linecache.getlines(filename))


def _code_at(code: Any, filename: str, lines: tuple[str, ...]) -> Any:
    """In the worker: the shipped code object under its own file name, with that file's lines in the line
    cache (mtime None: `linecache.checkcache` keeps them), so that tracebacks show the user's code."""
    import linecache

    if lines and filename not in linecache.cache:
        linecache.cache[filename] = (sum(len(x) for x in lines), None, list(lines), filename)
    return code.replace(co_filename=filename)


def _ipython() -> Any:
    ipython = sys.modules.get("IPython")
    try:
        return ipython.get_ipython() if ipython is not None else None
    except Exception:
        return None


def _display_name(fn: Any) -> str:
    """What to call a callable: a function's qualified name, a partial's function's, an object's class's."""
    inner = getattr(fn, "func", None)   # functools.partial
    if inner is not None and callable(inner) and not hasattr(fn, "__qualname__"):
        return _display_name(inner)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if isinstance(name, str) and name:
        return name
    return type(fn).__qualname__ if not isinstance(fn, type) else "function"


def target_of(fn: Any, what: str = "trial function") -> str:
    """`module:function` (or `file.py:function`) naming `fn` so that a worker process can import it.

    A string is returned as is. A top-level module outside the working directory is named by its file
    (workers import from the working directory, PYTHONPATH and installed packages). A function of a
    notebook cell or of the interactive interpreter, a lambda or a nested function cannot be imported
    elsewhere: a UserError says so and gives the fix.
    """
    if isinstance(fn, str):
        return fn
    if not callable(fn):
        raise UserError(f"{what} must be a function or a 'module:function' string, not {type(fn).__name__}")
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    module = getattr(fn, "__module__", None)
    fix = (f"move it into a .py file next to the notebook (e.g. trials.py), then `from trials import "
           f"{qualname.split('.')[0]}` and pass that; worker processes import it by name")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise UserError(f"{what} {qualname!r} is a lambda or is defined inside another function: worker "
                        f"processes cannot import it; define it at the top level of a module ({fix})")
    named: Any = sys.modules.get(module) if isinstance(module, str) else None
    for part in qualname.split("."):
        named = getattr(named, part, None)
    if named is not fn:   # a class instance with __call__, a functools.partial, a bound method...
        raise UserError(f"{what} {_display_name(fn)!r} ({type(fn).__name__}) is not a function that worker "
                        f"processes can import by name: pass a top-level function, or {fix}")
    if module in (None, "__main__", "builtins") or module.startswith("__main__"):
        main = sys.modules.get("__main__")
        main_file = getattr(main, "__file__", None)
        run_as = getattr(getattr(main, "__spec__", None), "name", None)
        import inspect

        script = module == "__main__" and not in_notebook()
        source = getattr(getattr(inspect.unwrap(fn), "__code__", None), "co_filename", "")
        if script and isinstance(main_file, str) and source.startswith("<"):   # exec(cell) in the script
            raise UserError(f"{what} {qualname!r} is defined by code the script ran with exec() ({source}), "
                            f"which worker processes importing {main_file} do not run: define it at the top "
                            "level of the script")
        if script and isinstance(main_file, str) and _under_main_guard(fn, main_file):
            raise UserError(f"{what} {qualname!r} is defined under `if __name__ == \"__main__\":` in "
                            f"{main_file}, so worker processes, which import the script without running that "
                            f"block, do not have it: define it at the top level of the script")
        if script and run_as and run_as != "__main__":
            return f"{run_as}:{qualname}"   # `python -m pkg.train`: imported by name, its relative imports work
        if script and isinstance(main_file, str) and main_file.endswith(".py"):
            return f"{os.path.abspath(main_file)}:{qualname}"   # a script: workers load it by path
        raise UserError(f"{what} {qualname!r} is defined in a notebook or the interactive interpreter "
                        f"(module {module!r}), which worker processes cannot import: {fix}")
    file = getattr(sys.modules.get(module), "__file__", None)
    if "." not in module and file and file.endswith(".py") \
            and os.path.dirname(os.path.abspath(file)) != os.path.abspath(os.getcwd()):
        return f"{os.path.abspath(file)}:{qualname}"   # a module found on a path workers may not have
    return f"{module}:{qualname}"


def _script_with_arguments(fn: Any) -> bool:
    """Whether `fn` is a function of a script run with command-line arguments (`python train.py --lr 0.1`):
    workers importing the script run its top level with their own command line, so what it parsed there
    (`args = parser.parse_args()`) would be the defaults, silently, or an argparse exit. Such a function is
    shipped by value, with the values it reads, as multiprocessing gives a child the parent's argv."""
    return getattr(fn, "__module__", None) == "__main__" and not in_notebook() and len(sys.argv) > 1


def _reruns_caller(fn: Any) -> bool:
    """Whether importing `fn`'s script would run this very call again: `fn` is a function of the script run
    as `__main__`, and the script's top level is calling (directly or through a function) outside an `if
    __name__ == "__main__":` block, as Optuna's README does with `study.optimize(objective)`. Workers (and
    the import check) importing the script by path or by name would run the sweep again, nested in each
    of them; such a function is shipped by value instead, as a notebook cell's is."""
    if getattr(fn, "__module__", None) != "__main__" or in_notebook():
        return False
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str):
        return False
    # this thread's calls, then the main thread's: a thread the script's top level started (two sweeps at
    # once, `threading.Thread(target=go).start()` then `join()`) has none of the script's frames, and its
    # function was imported by name: the import check ran the script again, starting its threads and sweeps
    # again, nested without end (the process hung)
    frames = [sys._getframe(1)]
    if threading.current_thread() is not threading.main_thread():
        frames.append(sys._current_frames().get(threading.main_thread().ident))   # type: ignore[arg-type]
    for frame in frames:
        while frame is not None:
            if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main) \
                    and not frame.f_code.co_filename.startswith("<"):   # not code it ran with exec()
                return not _in_main_guard(frame.f_lineno, path)
            frame = frame.f_back   # type: ignore[assignment]
    return False   # the script's top level has finished (an atexit hook): importing it is safe


def _under_main_guard(fn: Any, path: str) -> bool:
    """Whether `fn` is defined inside an `if __name__ == "__main__":` block of the script at `path`: a worker
    importing the script (by path, or by name for `python -m`) does not run that block, so the function is
    not there to load (every trial failed, "has no function 'train'"). It is then shipped by value, as a
    notebook cell's function is; `sl.main`, which runs it by name, says where to define it."""
    line = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
    return line is not None and _in_main_guard(line, path)


def _in_main_guard(line: int, path: str) -> bool:
    """Whether `line` of the script at `path` is inside an `if __name__ == "__main__":` block."""
    import ast

    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return False

    def main_test(node: ast.expr) -> bool:   # `__name__ == "__main__"`, alone or and-ed with more
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            return any(main_test(v) for v in node.values)
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
            return False
        sides = [node.left, node.comparators[0]]
        return any(isinstance(a, ast.Name) and a.id == "__name__" for a in sides) and \
            any(isinstance(a, ast.Constant) and a.value == "__main__" for a in sides)

    return any(isinstance(node, ast.If) and main_test(node.test) and node.lineno <= line <= (node.end_lineno or line)
               for node in tree.body)


class Progress:
    """A one-line live progress display: updated in place in Jupyter; off elsewhere unless asked for, and
    then a line on stderr whenever the counts or the best change."""

    def __init__(self, enabled: bool | None = None, *, every: float = 0.5) -> None:
        self.enabled = in_notebook() if enabled is None else enabled
        self.every = every
        self._handle: Any = None
        self._last = 0.0
        self._printed: str | None = None   # outside a notebook: the last line printed, without its clock

    def update(self, p: Any) -> None:
        """An `on_progress` callback (takes sweeplab.driver.Progress)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.every and p.running:
            return
        self._last = now
        self.show(line(p))

    def start(self, name: str) -> None:
        """Show the line now, in the caller's cell: for a background sweep, whose updates come from its
        thread. Jupyter sends a thread's output to whichever cell runs when it is written (the thread has
        no cell of its own), so the line appeared under an unrelated later cell, or nowhere if none ran;
        created here, the thread's updates replace it in place (by its display id) under this cell."""
        if self.enabled and in_notebook() and self._handle is None:
            self.show(f"{name}: starting")

    def note(self, text: str) -> None:
        """An `on_note` callback: what the CLI prints in yellow (why a sweep failed, with the trial's
        traceback; how to resume after Ctrl-C; a monitor watching a metric nobody logs). Always shown, on
        stderr (a notebook shows it under the cell), whether or not the progress line is on."""
        print(text, file=sys.stderr, flush=True)

    def show(self, text: str) -> None:
        if not in_notebook():   # lines cannot be updated in place: a new one only when more than the clock moved
            changed = text.rpartition(" | ")[0]
            if changed != self._printed:
                self._printed = changed
                print(text, file=sys.stderr)
            return
        from IPython.display import display

        if self._handle is None:
            self._handle = display({"text/plain": text}, raw=True, display_id=True)
        else:
            self._handle.update({"text/plain": text}, raw=True)


def line(p: Any) -> str:
    """`sweep: 12/50 done (3 running) | best 0.123 (trial 7) | 1m05s`."""
    done = sum(n for s, n in p.counts.items() if s not in ("running", "queued", "interrupted", "preempted"))
    total = f"/{p.budget_trials}" if p.budget_trials else ""
    best = f" | best {p.best_value:.6g} (trial {p.best_trial})" if p.best_value is not None else ""
    minutes, seconds = divmod(int(p.elapsed), 60)
    return f"{p.sweep}: {done}{total} done ({p.running} running){best} | {minutes}m{seconds:02d}s"
