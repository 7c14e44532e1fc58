"""Failure capture: objects a trial registered with `run.capture(name, obj)`, saved when it fails.

Saved with pickle beside a manifest holding their SHA-256, in a file whose name holds it too
(`capture-<id>-<sha256>.pkl`): the store's record of the capture (its artifact row, written by the driver)
names that file, so `load_captures` unpickles only a payload whose checksum matches the name sweeplab wrote
and its manifest (nothing unpickles data it did not write: a pickle another program wrote, with a manifest
that matches it, is refused, as is a truncated, tampered or missing one).
A capture is bounded: at most MAX_CAPTURE_BYTES pickled in all; a larger object is skipped and named.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import platform
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeplab.errors import UserError

__all__ = ["MAX_CAPTURE_BYTES", "capture_manifest", "environment_facts", "exception_message", "failure_reason",
           "load_captures", "save_captures", "source_changes", "source_fact", "source_of_argv", "source_of_function"]


MAX_CAPTURE_BYTES = 64 * 2**20   # a failing batch is a few MB; a whole dataset is not an input to replay
_MAX_DEPTH = 20


def exception_message(exc: BaseException) -> str:
    """`str(exc)`, or what Python's own traceback shows when that raises (a user's `__str__` that fails must
    not turn the trial's failure into a crash of its worker, with the reason lost)."""
    try:
        return str(exc)
    except Exception as err:
        try:
            return f"<exception str() failed: {type(err).__name__}>"
        except Exception:
            return "<exception str() failed>"


def failure_reason(exc: BaseException, loading: Mapping[str, Any] | None = None) -> str:
    """One line saying why a trial failed: `Type: message`, at most 500 characters.

    An error re-raised from a DataLoader worker process carries the worker's whole traceback in its message
    ("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback ..."): the reason is the
    original error line, with where it happened. `loading` (`Run.loading_failure`) adds which batch of
    which `run.track` loop was being fetched."""
    message = exception_message(exc).strip()
    where: list[str] = []
    head, _, rest = message.partition("\n")
    if head.startswith("Caught ") and "Original Traceback" in rest:
        last = [line for line in rest.splitlines() if line.strip()]
        reason = last[-1].strip() if last else f"{type(exc).__name__}: {head}"
        place = head.split(" ", 2)[-1].rstrip(".")          # "in DataLoader worker process 0"
        if place.startswith("in "):
            where.append(place)
    else:
        reason = f"{type(exc).__name__}: {message}" if message else type(exc).__name__   # a bare `raise X`
    if loading:
        where.append(f"while loading batch {loading['batch']} of run.track loop {loading['loop']}")
    if where:
        reason += f" ({'; '.join(where)})"
    return reason[:500]


def save_captures(objects: Mapping[str, Any], directory: str, *, stale: Sequence[str] = (),
                  loading: Mapping[str, Any] | None = None, nonfinite: Mapping[str, Any] | None = None,
                  max_bytes: int = MAX_CAPTURE_BYTES) -> str:
    """Pickle `objects` into `directory`/<uuid>.pkl with a manifest; returns the payload path.

    `stale`: names registered in an earlier step than the one that failed (the failure was in fetching the
    next batch); the manifest lists them, with `loading` ({"loop", "batch"}), so that repro does not replay
    them as the failing input. `nonfinite` ({"step", "metric", "value"}): the objects are what the trial held when
    it logged its first NaN or infinite value (a trial a monitor stopped, which raised nothing). At most
    `max_bytes` are pickled in all: an object that does not fit is skipped, named in the manifest with its size."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    saved: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    left = max_bytes
    for name, obj in objects.items():
        try:
            obj = _compact(obj)   # a view of a big tensor pickles its whole storage: keep the view's data only
            hint = _array_bytes(obj)   # arrays' sizes known without pickling them (nor filling their pages)
            size = hint if hint > left else len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception as exc:
            skipped[name] = f"{type(exc).__name__}: {exception_message(exc)}"
            continue
        if size > left:
            skipped[name] = (f"too large: {size} bytes pickled, above the {left} left of a capture's "
                             f"{max_bytes}; capture a slice or the indices of the batch")
            continue
        saved[name] = obj
        left -= size
    payload = pickle.dumps(saved, protocol=pickle.HIGHEST_PROTOCOL)
    digest = hashlib.sha256(payload).hexdigest()
    path = root / f"capture-{uuid.uuid4().hex[:12]}-{digest}.pkl"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(payload)
    os.replace(tmp, path)
    manifest = {"sha256": digest, "names": sorted(saved),
                "skipped": skipped, "time": time.time(), "stale": sorted(set(stale) & set(saved))}
    if loading:
        manifest["failed_loading"] = {"loop": loading["loop"], "batch": loading["batch"]}
    if nonfinite:
        manifest["nonfinite"] = {"step": nonfinite["step"], "metric": nonfinite["metric"],
                                 "value": str(nonfinite.get("value", "nan"))}
    path.with_suffix(".json").write_text(json.dumps(manifest))
    return str(path)


def _compact(obj: Any, depth: int = 0) -> Any:
    """`obj` with every torch tensor that views a larger storage replaced by a copy of its own data (pickling a
    tensor writes its whole storage: a batch sliced from a dataset held in one tensor would write the dataset)."""
    torch = sys.modules.get("torch")
    if torch is None or depth > _MAX_DEPTH:
        return obj
    if isinstance(obj, torch.Tensor):
        if obj.layout == torch.strided and obj.untyped_storage().nbytes() > obj.numel() * obj.element_size():
            return obj.clone()
        return obj
    if type(obj) is dict:
        return {k: _compact(v, depth + 1) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(_compact(v, depth + 1) for v in obj)
    return obj


def _array_bytes(obj: Any, depth: int = 0) -> int:
    """The bytes of the numpy arrays and torch tensors in `obj` (nested in dicts, lists, tuples): a lower bound
    of its pickled size, known without pickling."""
    if depth > _MAX_DEPTH:
        return 0
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int) and type(obj).__module__.split(".")[0] in ("numpy", "torch"):
        return nbytes
    if isinstance(obj, Mapping):
        return sum(_array_bytes(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_array_bytes(v, depth + 1) for v in obj)
    return 0


def capture_manifest(path: str) -> dict[str, Any]:
    """The manifest written beside a capture (names, skipped, stale, failed_loading, sha256)."""
    data = json.loads(Path(path).with_suffix(".json").read_text())
    return data if isinstance(data, dict) else {}


_NAMED = re.compile(r"capture-[0-9a-f]{12}-(?P<sha256>[0-9a-f]{64})")


def load_captures(path: str) -> dict[str, Any]:
    """The objects of the capture `path` (a payload `save_captures` wrote), unpickled only when its SHA-256 is
    the one its name and its manifest hold; else a UserError naming the file and what is wrong."""
    p = Path(path)

    def refuse(why: str) -> UserError:
        return UserError(f"capture {p}: {why}; refusing to load it (sweeplab unpickles only the captures it "
                         "wrote)")

    named = _NAMED.fullmatch(p.stem)
    if p.suffix != ".pkl" or named is None:
        raise refuse("not a capture file sweeplab wrote (capture-<id>-<sha256>.pkl, with its checksum in its "
                     "name; an earlier sweeplab's capture-<id>.pkl cannot be verified)")
    try:
        manifest = json.loads(p.with_suffix(".json").read_text(encoding="utf-8"))
        payload = p.read_bytes()
    except FileNotFoundError as exc:
        raise refuse(f"{Path(exc.filename or p).name} is missing") from None
    except (OSError, ValueError) as exc:   # a directory, unreadable, a manifest that is not JSON
        raise refuse(f"unreadable ({type(exc).__name__}: {exception_message(exc)})") from None
    digest = hashlib.sha256(payload).hexdigest()
    if not isinstance(manifest, dict) or digest != manifest.get("sha256") or digest != named["sha256"]:
        raise refuse("its content does not match the checksum sweeplab recorded for it (tampered, truncated or "
                     "replaced)")
    try:
        data = pickle.loads(payload)
    except RuntimeError as exc:   # tensors captured on a GPU, replayed on a machine without CUDA
        if "CUDA" not in str(exc) or "torch" not in sys.modules:
            raise
        data = _loads_onto_cpu(payload)
    if not isinstance(data, dict):
        raise refuse(f"it holds a {type(data).__name__}, not the mapping of captured objects")
    return data


def _loads_onto_cpu(payload: bytes) -> Any:
    """Unpickle with torch's storages mapped to the CPU (a pickled tensor's storage is rebuilt by
    `torch.storage._load_from_bytes`, which calls torch.load without a map_location)."""
    import io

    import torch
    import torch.storage

    if torch.cuda.is_available():
        return pickle.loads(payload)
    original = torch.storage._load_from_bytes
    torch.storage._load_from_bytes = lambda b: torch.load(io.BytesIO(b), weights_only=False,  # type: ignore[assignment]
                                                           map_location="cpu")
    try:
        return pickle.loads(payload)
    finally:
        torch.storage._load_from_bytes = original


def source_fact(path: str | None) -> dict[str, str] | None:
    """{"path", "sha256"} of a source file (the trial function's module, a command trial's program), or None."""
    if not path:
        return None
    try:
        p = Path(path).resolve()
        return {"path": str(p), "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
    except OSError:
        return None


def source_of_function(fn: Any) -> str | None:
    """The file of the module that defines `fn` (what `sweeplab repro` checks for changes), or None."""
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    return str(path) if path else None


def source_of_argv(argv: Sequence[str], cwd: str | None) -> str | None:
    """A command trial's program: the first argument after the interpreter that names an existing .py
    file (relative to `cwd`), or None (a program in another language is not checked)."""
    for arg in list(argv)[1:]:
        if arg.endswith(".py"):
            p = Path(cwd or ".") / arg
            if p.is_file():
                return str(p)
    return None


def source_changes(recorded: Mapping[str, Any] | None) -> str | None:
    """Why the source file recorded at the failure (`source_fact`) is not the one on disk now, or None."""
    if not isinstance(recorded, Mapping) or not recorded.get("path"):
        return None
    now = source_fact(str(recorded["path"]))
    if now is None:
        return f"{recorded['path']} is gone since the trial failed"
    if now["sha256"] != recorded.get("sha256"):
        return f"{recorded['path']} changed since the trial failed: the replay runs the code as it is now"
    return None


def environment_facts(cwd: str | None = None, source: str | None = None) -> dict[str, Any]:
    """Git commit and dirty flag, Python, host, versions of the imported ML frameworks, and the SHA-256 of
    the trial's source file (`source`), which `sweeplab repro` compares with the file on disk."""
    facts: dict[str, Any] = {"python": sys.version.split()[0], "host": platform.node(),
                             "platform": platform.platform()}
    for mod in ("numpy", "torch", "xgboost", "sklearn", "jax", "lightning", "transformers"):
        m = sys.modules.get(mod)
        if m is not None:
            facts[mod] = getattr(m, "__version__", "?")
    src = source_fact(source)
    if src is not None:
        facts["source"] = src
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                                timeout=5)
        if commit.returncode == 0:
            facts["git_commit"] = commit.stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain"], cwd=cwd, capture_output=True,
                                   text=True, timeout=5)
            facts["git_dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        pass
    return facts
