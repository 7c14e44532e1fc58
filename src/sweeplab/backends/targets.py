"""Finding and calling a trial function: what a worker, `sweeplab repro` and the smoke checks share.

'pkg.mod:fn' or 'path/to/file.py:fn' is imported once per target, path and working directory; how the
function is called (positional `(config, run)`, keyword `run=`, or config alone) is worked out once too.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweeplab.run import Run

__all__ = ["call_trial", "load_target", "seed_everything", "takes_run", "trial_facts", "trial_traceback"]

_module_cache: dict[str, Any] = {}


_target_cache: dict[tuple[str, tuple[str, ...], str], Callable[..., Any]] = {}
_importing: list[str] = []   # the trial modules being imported in this process (their top-level code runs)


def importing_trial_module() -> str | None:
    """The file or module a worker is importing for its trial function right now, if any: a script whose
    top level starts a sweep (`sweeplab.sweep(config, fn=train)` with no `if __name__ == "__main__":`)
    would start one in every worker, as it was converted from W&B's `wandb.agent(sweep_id, train)`."""
    return _importing[-1] if _importing else None


def load_target(target: str, python_path: list[str] | tuple[str, ...] = ()) -> Callable[..., Any]:
    """'pkg.mod:fn' or 'path/to/file.py:fn' -> the function (looked up once per target, path and cwd)."""
    key = (target, tuple(python_path), os.getcwd())
    fn = _target_cache.get(key)
    if fn is None:
        fn = _target_cache[key] = _load_target(target, python_path)
    return fn


def _load_target(target: str, python_path: list[str] | tuple[str, ...]) -> Callable[..., Any]:
    for p in python_path:
        if p and p not in sys.path:
            sys.path.insert(0, p)
    module_part, _, attr = target.rpartition(":")
    if not module_part or not attr:
        raise ValueError(f"function {target!r} must look like 'package.module:function' or 'file.py:function'")
    if module_part.endswith(".pkl"):   # a function shipped by value (sweeplab.notebook.shipped_target)
        return _load_shipped(module_part)
    if module_part.endswith(".py") or os.sep in module_part or "/" in module_part:
        path = str(Path(module_part).resolve())
        module = _module_cache.get(path)
        if module is None:
            sys.path.insert(0, str(Path(path).parent))
            name = _own_name(path)
            module = sys.modules.get(name) if name else None   # imported already by that name: the same module
            if module is None:
                name = name or "_sweeplab_user_" + Path(path).stem
                spec = importlib.util.spec_from_file_location(name, path)
                if spec is None or spec.loader is None:
                    raise ImportError(f"cannot import {path}")
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                _importing.append(path)
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(name, None)   # as a failed import leaves nothing: a retry runs it again
                    raise
                finally:
                    _importing.pop()
            _module_cache[path] = module
    else:
        _importing.append(module_part)
        try:
            module = importlib.import_module(module_part)
        finally:
            _importing.pop()
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise AttributeError(f"{module_part} has no function {attr!r}")
    return fn


def _own_name(path: str) -> str | None:
    """The module name of the file `path` (its stem, `ddp` for ddp.py) when `import ddp` finds this very file
    (its folder is first on sys.path), so that processes started by `spawn` (DDP ranks of
    `torch.multiprocessing.spawn`, spawn pools), which import the module of the function they run by name, find
    it, as they do for a script run by `python ddp.py`. None when the name is taken by another module or the
    standard library: the file is then loaded under a private name."""
    stem = Path(path).stem
    if not stem.isidentifier() or stem in sys.stdlib_module_names or stem in sys.builtin_module_names:
        return None
    loaded = sys.modules.get(stem)
    try:
        origin = getattr(loaded, "__file__", None) if loaded is not None else getattr(
            importlib.util.find_spec(stem), "origin", None)
    except (ImportError, ValueError):
        return None
    if not origin:
        return None
    with contextlib.suppress(OSError):
        if os.path.samefile(origin, path):
            return stem
    return None


def _load_shipped(path: str) -> Callable[..., Any]:
    """A function sweeplab wrote by value: only a `functions/<digest>.pkl` whose bytes have that digest is
    unpickled (sweeplab's own file, unchanged), never another pickle a spec might name."""
    import hashlib

    with open(path, "rb") as f:
        blob = f.read()
    p = Path(path)
    if p.parent.name != "functions" or hashlib.sha256(blob).hexdigest()[:24] != p.stem:
        raise ValueError(f"{path} is not a function sweeplab shipped by value (functions/<sha256>.pkl); "
                         "name trial functions as 'module:function' or 'file.py:function'")
    import cloudpickle

    fn = cloudpickle.loads(blob)
    if not callable(fn):
        raise TypeError(f"{path} does not hold a function")
    return fn  # type: ignore[no-any-return]


def seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % (2**32))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


_facts_cache: dict[Any, tuple[Any, str]] = {}


def trial_facts(fn: Callable[..., Any]) -> tuple[Any, str]:
    """(typed config schema or None, how to call: 'positional' | 'keyword' | 'config') of a trial function,
    worked out once per function (inspect.signature costs more than a short trial's own work)."""
    try:
        return _facts_cache[fn]
    except (KeyError, TypeError):
        pass
    from sweeplab.config import typed_schema_of

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        style = "positional"
    else:
        positional = [p for p in params.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
        if positional and "run" not in params and _wandb_agent_style(fn, positional):
            style = "none"   # `def train(config=None)`: W&B's agent calls function() with no arguments
        elif len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in positional):
            style = "positional"
        elif not positional and "run" not in params:
            style = "none"   # W&B's wandb.agent(function=train) style: train() reads wandb.config
        else:
            style = "keyword" if "run" in params else "config"
    facts = (typed_schema_of(fn), style)
    with contextlib.suppress(TypeError):   # an unhashable callable object is inspected every time
        _facts_cache[fn] = facts
    return facts


def _wandb_agent_style(fn: Callable[..., Any], positional: list[inspect.Parameter]) -> bool:
    """A W&B program's function whose parameters all have defaults (`def train(config=None)`, as in W&B's
    sweeps notebook): W&B's agent calls it with none (wandb/agents/pyagent.py), so it reads wandb.config.
    W&B's: its module uses wandb (a sweeplab function with a defaulted config still gets the config)."""
    if any(p.default is p.empty or p.kind is p.VAR_POSITIONAL for p in positional):
        return False
    names = getattr(fn, "__globals__", None) or {}
    return any(_from_wandb(v) for v in list(names.values()))


def _from_wandb(value: Any) -> bool:
    """`wandb` itself, or something imported from it (`from wandb import init`)."""
    try:
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
    except Exception:   # a lazy proxy among the module's globals
        return False
    return isinstance(name, str) and name.split(".")[0] == "wandb"


def takes_run(fn: Callable[..., Any]) -> bool:
    """Whether `fn` names a parameter for the trial's Run (`train(config, run)`, `train(cfg, r)`,
    `train(config, *, run)`), through which it reports; a W&B-style function (`train()`,
    `train(config=None)`, `train(config)`, `train(*args, **kwargs)`) reports through its W&B runs."""
    style = trial_facts(fn)[1]
    if style == "keyword":
        return True
    if style != "positional":
        return False
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    named = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(named) >= 2


def call_trial(fn: Callable[..., Any], config: Any, run: Run) -> Any:
    """`fn`'s result; None when smoke mode ended it (`run.SmokeDone`): its metrics are those it reported."""
    from sweeplab.run import SmokeDone

    style = trial_facts(fn)[1]
    try:
        if style == "positional":
            return fn(config, run)
        if style == "keyword":
            return fn(config, run=run)
        if style == "none":
            return fn()
        return fn(config)
    except SmokeDone:
        return None



_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # .../sweeplab/


def trial_traceback(exc: BaseException) -> str:
    """`exc`'s traceback as the trial's author reads it: from the first frame of code that is not sweeplab's
    (their function, or a library it called) on, without the frames that ran it (the worker, the W&B shim,
    `call_trial`). Frames of sweeplab further down (a `run.checkpoint` that raised) stay, and so does every
    frame of a failure inside sweeplab itself (no other code in it). Chained exceptions are shown as Python
    shows them."""
    shown = traceback.TracebackException.from_exception(exc)
    frames = shown.stack
    first = next((i for i, f in enumerate(frames) if not (f.filename or "").startswith(_PACKAGE)), 0)
    if first:
        shown.stack = traceback.StackSummary.from_list(frames[first:])
    return "".join(shown.format())
