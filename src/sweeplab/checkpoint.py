"""Checkpoints: atomic saves with checksums, retention of the last K, any fsspec location, and a write policy.

Layout under `root` (a local path or an fsspec URL)::

    root/step-0000000042/payload.pt       the serialized object (or payload/ for a copied directory)
    root/step-0000000042/manifest.json    {"step", "format", "checksum", "bytes", "time", "seq", ...}

A checkpoint exists once its manifest does. Locally the whole directory is written under a temporary name,
fsynced and renamed into place, so a crash at any moment leaves either the complete checkpoint or none. On
object stores (no atomic rename) the payload is written first and the manifest last. Either way, loading
verifies the sha256 in the manifest first: a truncated or bit-flipped checkpoint is skipped, reported in
`CheckpointManager.corrupt`, and the previous one used. Pickle payloads are only unpickled after that check;
the checksum proves integrity, not origin, so point `root` only at storage sweeplab itself writes.

`CheckpointPolicy` decides how often `run.checkpoint` really writes (`trial.checkpoint_every`): every N steps,
every T seconds, always, or "auto", the Young/Daly interval sqrt(2 x cost x MTBF) within bounds.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import json
import math
import operator
import os
import pickle
import re
import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, runtime_checkable

from sweeplab._clock import Clock, RealClock
from sweeplab._imports import optional_import
from sweeplab._values import parse_duration
from sweeplab.errors import ConfigError, StoreError, SweeplabError, TrialError

__all__ = [
    "SERIALIZERS",
    "CheckpointCorruptError",
    "CheckpointInfo",
    "CheckpointManager",
    "CheckpointPolicy",
    "Serializer",
    "StaleAttemptError",
    "fence",
    "register_serializer",
    "young_daly_interval",
]

_MANIFEST = "manifest.json"
_FENCE = ".fence.json"        # {"dead": {"<attempt>": time declared dead}}: see `fence`
_DIR_FORMAT = "dir"
_AUTO = "auto"
_CHUNK = 1 << 20
_NAME_RE = re.compile(r"^(step|seq)-(-?\d+)(?:-(\d+))?$")
_STALE_TMP_SECONDS = 24 * 3600.0

_Entries = list[tuple[str, dict[str, Any]]]
_Bad = list[tuple[str, str]]


class CheckpointCorruptError(SweeplabError):
    """A checkpoint failed verification (missing payload, truncated, checksum mismatch, unreadable)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"checkpoint {path} is corrupt: {reason}")


class StaleAttemptError(TrialError):
    """A save by an attempt that was declared dead (a newer attempt of the trial runs): refused."""

    def __init__(self, root: str, attempt: int) -> None:
        super().__init__(f"checkpoint under {root} refused: attempt {attempt} of this trial was declared dead "
                         "(a newer attempt owns the checkpoints)")


@dataclass(frozen=True)
class CheckpointInfo:
    """Metadata of one written checkpoint (what the store keeps; the payload stays in `path`)."""

    path: str
    step: int | None
    checksum: str
    bytes: int
    seconds: float
    format: str
    time: float
    removed: tuple[str, ...] = ()   # paths of the older checkpoints this save's retention deleted


# ---------------------------------------------------------------------------------------------- serializers
@runtime_checkable
class Serializer(Protocol):
    """Turns an object into bytes on a binary file object and back. `suffix` (optional) names the payload."""

    name: str

    def dump(self, obj: Any, fileobj: BinaryIO) -> None: ...

    def load(self, fileobj: BinaryIO) -> Any: ...


class _BytesSerializer:
    name, suffix = "bytes", ".bin"

    def dump(self, obj: Any, fileobj: BinaryIO) -> None:
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise TypeError(f"expected bytes, bytearray or memoryview, got {type(obj).__name__}")
        fileobj.write(obj)

    def load(self, fileobj: BinaryIO) -> Any:
        return fileobj.read()


class _JsonSerializer:
    name, suffix = "json", ".json"

    def dump(self, obj: Any, fileobj: BinaryIO) -> None:
        fileobj.write(json.dumps(obj, separators=(",", ":")).encode("utf-8"))

    def load(self, fileobj: BinaryIO) -> Any:
        return json.loads(fileobj.read().decode("utf-8"))


class _PickleSerializer:
    """Only for data sweeplab wrote itself: the manager unpickles only after the manifest checksum matches."""

    name, suffix = "pickle", ".pkl"

    def dump(self, obj: Any, fileobj: BinaryIO) -> None:
        pickle.dump(obj, fileobj, protocol=pickle.HIGHEST_PROTOCOL)

    def load(self, fileobj: BinaryIO) -> Any:
        return pickle.load(fileobj)  # only after the manifest checksum matched, see the module docstring


class _NumpySerializer:
    """A dict of arrays as an .npz archive (no pickled objects)."""

    name, suffix = "numpy", ".npz"

    def dump(self, obj: Any, fileobj: BinaryIO) -> None:
        import numpy as np

        if not _is_array_dict(obj):
            raise TypeError("expected a dict of str -> numpy array (non-object dtype)")
        np.savez(fileobj, **obj)  # type: ignore[arg-type]

    def load(self, fileobj: BinaryIO) -> Any:
        import numpy as np

        with np.load(fileobj, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}


class _TorchSerializer:
    """torch.save / torch.load(weights_only=True). Modules, optimizers and schedulers are saved as their
    state_dict (a DDP/DataParallel/compiled wrapper is unwrapped first). Loads onto `map_location`."""

    name, suffix = "torch", ".pt"

    def __init__(self, map_location: Any = "cpu") -> None:
        self.map_location = map_location

    def dump(self, obj: Any, fileobj: BinaryIO) -> None:
        torch = optional_import("torch", "torch", "torch checkpoints")
        torch.save(_to_state(obj, torch), fileobj)

    def load(self, fileobj: BinaryIO) -> Any:
        torch = optional_import("torch", "torch", "torch checkpoints")
        return torch.load(fileobj, map_location=self.map_location, weights_only=True)


SERIALIZERS: dict[str, Serializer] = {
    s.name: s
    for s in (_BytesSerializer(), _JsonSerializer(), _TorchSerializer(), _PickleSerializer(), _NumpySerializer())
}


def register_serializer(serializer: Serializer) -> None:
    """Add (or replace) a serializer under `serializer.name`; the format name is recorded in each manifest."""
    name = getattr(serializer, "name", None)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError("a serializer needs a simple string `name`", value=name,
                          expected="letters, digits, '_', '.', '-'")
    if name in (_AUTO, _DIR_FORMAT):
        raise ConfigError("this serializer name is reserved", value=name)
    if not (callable(getattr(serializer, "dump", None)) and callable(getattr(serializer, "load", None))):
        raise ConfigError(f"serializer {name!r} needs dump(obj, fileobj) and load(fileobj) methods")
    SERIALIZERS[name] = serializer


def _suffix(serializer: Serializer) -> str:
    return str(getattr(serializer, "suffix", "") or f".{serializer.name}")


def _is_torch_object(x: Any, torch: Any) -> bool:
    if isinstance(x, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)):
        return True
    return type(x).__module__.startswith("torch") and callable(getattr(x, "state_dict", None))


def _contains_torch(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:  # nothing can hold a tensor if torch was never imported
        return False
    stack = [obj]
    while stack:
        x = stack.pop()
        if _is_torch_object(x, torch):
            return True
        if isinstance(x, Mapping):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return False


def _to_state(obj: Any, torch: Any) -> Any:
    """Replace modules / optimizers / schedulers (at any depth of dicts, lists, tuples) by their state_dict."""
    if isinstance(obj, torch.nn.Module):
        while isinstance(obj, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            obj = obj.module
        obj = getattr(obj, "_orig_mod", obj)  # torch.compile wrapper
        return obj.state_dict()
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, Mapping):
        return {k: _to_state(v, torch) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_to_state(v, torch) for v in obj]
        return items if isinstance(obj, list) else tuple(items)
    if _is_torch_object(obj, torch):
        return obj.state_dict()
    return obj


def _is_jsonable(obj: Any) -> bool:
    """True when JSON round-trips `obj` exactly (no tuples, no non-str keys, no other types)."""
    stack = [obj]
    while stack:
        x = stack.pop()
        if x is None or type(x) in (str, int, float, bool):
            continue
        if type(x) is dict:
            if not all(type(k) is str for k in x):
                return False
            stack.extend(x.values())
        elif type(x) is list:
            stack.extend(x)
        else:
            return False
    return True


def _is_array_dict(obj: Any) -> bool:
    np = sys.modules.get("numpy")
    if np is None or not isinstance(obj, dict) or not obj:
        return False
    return all(
        isinstance(k, str) and isinstance(v, np.ndarray) and v.dtype != object for k, v in obj.items()
    )


def _is_directory(obj: Any) -> bool:
    return isinstance(obj, (str, os.PathLike)) and os.path.isdir(obj)


def _pick_format(obj: Any) -> str:
    """The "auto" choice, in order: directory, bytes, torch, json, numpy, pickle."""
    if _is_directory(obj):
        return _DIR_FORMAT
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return "bytes"
    if _contains_torch(obj):
        return "torch"
    if _is_jsonable(obj):
        return "json"
    if _is_array_dict(obj):
        return "numpy"
    return "pickle"


# --------------------------------------------------------------------------------------------- file systems
_PARALLEL_HASH = 1 << 20
_HASH_POOL: ThreadPoolExecutor | None = None
_HASH_POOL_LOCK = threading.Lock()


def _hash_pool() -> ThreadPoolExecutor:
    global _HASH_POOL
    with _HASH_POOL_LOCK:
        if _HASH_POOL is None:
            _HASH_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweeplab-checksum")
        return _HASH_POOL


class _HashingWriter:
    """A write-only file object that hashes and counts what passes through (one pass, no re-read)."""

    def __init__(self, raw: Any) -> None:
        self._raw, self._hash, self.bytes = raw, hashlib.sha256(), 0

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        if n >= _PARALLEL_HASH:  # hash and write at once (both release the GIL); done before returning,
            pending = _hash_pool().submit(self._hash.update, data)  # so the caller may reuse its buffer
            try:
                self._raw.write(data)
            finally:
                pending.result()
        else:
            self._hash.update(data)
            self._raw.write(data)
        self.bytes += n
        return n

    def flush(self) -> None:
        self._raw.flush()

    def tell(self) -> int:
        return self.bytes

    def read(self, n: int = -1) -> bytes:  # present so libraries treat us as a file object, not a path
        raise io.UnsupportedOperation("write-only")

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    @property
    def checksum(self) -> str:
        return "sha256:" + self._hash.hexdigest()


class _Local:
    """A local directory: temp dir + fsync + rename."""

    atomic_rename = True

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def url(self, path: str) -> str:
        return path

    def names(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def open(self, path: str, mode: str) -> Any:
        return open(path, mode)

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)  # a directory onto a missing name: atomic, fails if dst exists

    def sync(self, f: Any) -> None:
        f.flush()
        os.fsync(f.fileno())

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def walk_files(self, path: str) -> list[str]:
        out = []
        for dirpath, _dirs, files in os.walk(path):
            for name in files:
                out.append(os.path.relpath(os.path.join(dirpath, name), path).replace(os.sep, "/"))
        return sorted(out)

    def mtime(self, path: str) -> float:
        return os.stat(path).st_mtime


class _Remote:
    """Any fsspec file system: payload first, manifest last (no atomic rename on object stores)."""

    atomic_rename = False

    def __init__(self, url: str) -> None:
        fsspec = optional_import("fsspec", "all", "checkpoints at a URL")
        self.fs, self.root = fsspec.core.url_to_fs(url)
        self.root = self.root.rstrip("/") or "/"

    def join(self, *parts: str) -> str:
        return "/".join(p.rstrip("/") for p in parts)

    def url(self, path: str) -> str:
        return str(self.fs.unstrip_protocol(path))

    def names(self, path: str) -> list[str]:
        try:
            return [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def makedirs(self, path: str) -> None:
        self.fs.makedirs(path, exist_ok=True)

    def open(self, path: str, mode: str) -> Any:
        return self.fs.open(path, mode)

    def read_bytes(self, path: str) -> bytes:
        return bytes(self.fs.cat_file(path))

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))

    def isdir(self, path: str) -> bool:
        return bool(self.fs.isdir(path))

    def rmtree(self, path: str) -> None:
        try:
            self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass

    def rename(self, src: str, dst: str) -> None:  # pragma: no cover - not used without atomic rename
        self.fs.mv(src, dst, recursive=True)

    def sync(self, f: Any) -> None:
        f.flush()

    def sync_dir(self, path: str) -> None:
        pass

    def walk_files(self, path: str) -> list[str]:
        base = self.fs._strip_protocol(path).rstrip("/")
        return sorted(p[len(base) + 1:] for p in self.fs.find(path))

    def mtime(self, path: str) -> float:
        return 0.0


def _is_url(root: str) -> bool:
    return "://" in root and not root.startswith("file://")


# ------------------------------------------------------------------------------------------------- fencing
def fence(root: str, attempt: int, at: float | None = None) -> None:
    """Declare attempt `attempt` (and every earlier one) of the trial whose checkpoints live in `root` dead.

    The driver calls it when it kills an attempt and before it starts the next one. From then on a
    `CheckpointManager` of that attempt refuses to save (StaleAttemptError; a save in progress removes what
    it wrote), and `latest()` ignores a checkpoint of that attempt written after `at` (default: now), so a
    late write of a dead attempt is never restored by the attempts after it."""
    root = os.fspath(root).removeprefix("file://")
    fs: _Local | _Remote = _Remote(root) if _is_url(root) else _Local(root)
    dead = _read_fence(fs)
    dead.setdefault(int(attempt), time.time() if at is None else float(at))
    data = json.dumps({"dead": {str(k): v for k, v in sorted(dead.items())}}).encode("utf-8")
    fs.makedirs(fs.root)
    path = fs.join(fs.root, _FENCE)
    if not fs.atomic_rename:
        with fs.open(path, "wb") as f:
            f.write(data)
        return
    tmp = fs.join(fs.root, f".fence.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    with fs.open(tmp, "wb") as f:
        f.write(data)
        fs.sync(f)
    os.replace(tmp, path)


def _read_fence(fs: _Local | _Remote) -> dict[int, float]:
    """{attempt: time it was declared dead} of the trial under `fs.root` ({} without a fence)."""
    try:
        raw = json.loads(fs.read_bytes(fs.join(fs.root, _FENCE)).decode("utf-8"))
        return {int(k): float(v) for k, v in dict(raw.get("dead", {})).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def _attempt_from_env(root: str) -> int | None:
    """A command trial's program using the checkpoint directory sweeplab gave it is that attempt's writer."""
    attempt = os.environ.get("SWEEPLAB_ATTEMPT", "")
    given = os.environ.get("SWEEPLAB_CHECKPOINT_DIR")
    if given and attempt.isdigit() and given.rstrip("/") == root.rstrip("/"):
        return int(attempt)
    return None


# ------------------------------------------------------------------------------------------------- manager
class CheckpointManager:
    """Save, list, verify and load the checkpoints of one trial under `root`.

    >>> mgr = CheckpointManager("ckpts", keep=2)
    >>> info = mgr.save({"epoch": 3, "weights": [0.1, 0.2]}, step=3)
    >>> info, state = mgr.latest()

    After `latest()`, `corrupt` lists the (path, reason) of newer checkpoints that failed verification.

    `attempt`: the trial attempt this manager writes for (`Run` passes it; a command program using
    SWEEPLAB_CHECKPOINT_DIR gets SWEEPLAB_ATTEMPT by default). Saves of an attempt declared dead with
    `fence` are refused, and late writes of dead attempts are never returned by `latest()`.
    """

    def __init__(self, root: str, *, keep: int = 2, serializer: str = _AUTO, attempt: int | None = None) -> None:
        root = os.fspath(root)
        if not root:
            raise ConfigError("the checkpoint directory is empty", key="checkpoint_dir", value=root)
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ConfigError("invalid number of checkpoints to keep", key="trial.keep_checkpoints",
                              value=keep, expected="an integer >= 1")
        valid = sorted([_AUTO, _DIR_FORMAT, *SERIALIZERS])
        if serializer not in valid:
            raise ConfigError("unknown checkpoint serializer", key="serializer", value=serializer,
                              expected=" | ".join(valid), hint="register_serializer() adds one")
        root = root.removeprefix("file://")
        self._fs: _Local | _Remote = _Remote(root) if _is_url(root) else _Local(root)
        self.root = self._fs.url(self._fs.root)
        self.keep = keep
        self.serializer = serializer
        self.corrupt: list[tuple[str, str]] = []
        self._known_corrupt: set[str] = set()
        self.attempt = attempt if attempt is not None else _attempt_from_env(os.fspath(root))

    # -------------------------------------------------------------------------- public API
    def save(self, obj: Any, step: int | None = None) -> CheckpointInfo:
        """Write `obj` atomically, then keep only the newest `keep` checkpoints."""
        if step is not None:
            step = operator.index(step)
        started = time.perf_counter()
        fmt = _pick_format(obj) if self.serializer == _AUTO else self.serializer
        fs = self._fs
        self._check_fence()
        entries, _bad = self._scan()
        seq = max((int(m.get("seq", 0)) for _, m in entries), default=0) + 1
        name = self._name(step, seq, {n for n, _ in entries})
        if fs.atomic_rename:
            self._clean_stale_tmp()
            work = fs.join(fs.root, f".tmp.{_host()}.{os.getpid()}.{uuid.uuid4().hex[:12]}")
        else:
            work = fs.join(fs.root, name)
        try:
            fs.makedirs(work)
            payload, checksum, size = self._write_payload(obj, fmt, work)
            written = time.time()
            manifest: dict[str, Any] = {
                "version": 1, "step": step, "seq": seq, "format": fmt, "payload": payload,
                "checksum": checksum, "bytes": size, "time": written,
            }
            if self.attempt is not None:
                manifest["attempt"] = self.attempt
            manifest["seconds"] = time.perf_counter() - started
            with fs.open(fs.join(work, _MANIFEST), "wb") as f:
                f.write(json.dumps(manifest, indent=1).encode("utf-8"))
                fs.sync(f)
            final = fs.join(fs.root, name)
            if fs.atomic_rename:
                fs.sync_dir(work)
                fs.rename(work, final)
                fs.sync_dir(fs.root)
            work = final
            self._check_fence()      # declared dead while writing: what it wrote must not stay
        except BaseException as exc:
            fs.rmtree(work)
            if isinstance(exc, OSError):
                raise StoreError(f"cannot write checkpoint under {self.root}: {exc}") from exc
            raise
        seconds = time.perf_counter() - started
        removed = self._retain()
        return CheckpointInfo(path=fs.url(final), step=step, checksum=checksum, bytes=size, seconds=seconds,
                              format=fmt, time=written, removed=tuple(removed))

    def list(self) -> list[CheckpointInfo]:
        """Checkpoints with a readable manifest (not yet verified), oldest first, newest last."""
        return [self._info(name, m) for name, m in self._scan()[0]]

    def latest(self) -> tuple[CheckpointInfo, Any] | None:
        """The newest checkpoint that verifies, loaded; None if there is none. Fills `self.corrupt`."""
        entries, bad = self._scan()
        self.corrupt = list(bad)
        dead = _read_fence(self._fs)
        for name, manifest in reversed(entries):
            if _late(manifest, dead):
                continue   # written by an attempt after it was declared dead: never restored
            info = self._info(name, manifest)
            try:
                return info, self._load(name, manifest)
            except CheckpointCorruptError as exc:
                self.corrupt.append((info.path, exc.reason))
                self._known_corrupt.add(name)
        return None

    def load(self, info: CheckpointInfo) -> Any:
        """Verify and load one checkpoint listed by this manager; raises CheckpointCorruptError."""
        name = info.path.rstrip("/").rsplit("/", 1)[-1]
        manifest = self._read_manifest(name)
        if manifest is None:
            raise CheckpointCorruptError(info.path, "manifest missing or unreadable")
        return self._load(name, manifest)

    # -------------------------------------------------------------------------- writing
    def _check_fence(self) -> None:
        if self.attempt is None:
            return
        dead = _read_fence(self._fs)
        if dead and self.attempt <= max(dead):
            raise StaleAttemptError(self.root, self.attempt)

    def _write_payload(self, obj: Any, fmt: str, work: str) -> tuple[str, str, int]:
        fs = self._fs
        if fmt == _DIR_FORMAT:
            if not _is_directory(obj):
                raise TrialError(f"checkpoint: {obj!r} is not an existing directory")
            checksum, size = self._copy_dir(os.fspath(obj), fs.join(work, "payload"))
            return "payload", checksum, size
        serializer = self._serializer(fmt, self.root)
        payload = "payload" + _suffix(serializer)
        with fs.open(fs.join(work, payload), "wb") as f:
            writer = _HashingWriter(f)
            try:
                serializer.dump(obj, writer)  # type: ignore[arg-type]
            except (TypeError, ValueError, AttributeError, pickle.PicklingError, RecursionError) as exc:
                raise TrialError(
                    f"checkpoint: cannot save a {type(obj).__name__} with the {fmt!r} serializer: {exc}"
                ) from exc
            fs.sync(f)
        return payload, writer.checksum, writer.bytes

    def _copy_dir(self, src: str, dst: str) -> tuple[str, int]:
        fs, digest, total = self._fs, hashlib.sha256(), 0
        fs.makedirs(dst)
        for dirpath, dirs, _files in os.walk(src):
            dirs.sort()
            rel_dir = os.path.relpath(dirpath, src)
            out_dir = dst if rel_dir == "." else fs.join(dst, *rel_dir.split(os.sep))
            fs.makedirs(out_dir)
        for rel in _Local(src).walk_files(src):
            size = 0
            with open(os.path.join(src, *rel.split("/")), "rb") as fin, \
                    fs.open(fs.join(dst, *rel.split("/")), "wb") as fout:
                chunk_hash = hashlib.sha256()
                while chunk := fin.read(_CHUNK):
                    chunk_hash.update(chunk)
                    fout.write(chunk)
                    size += len(chunk)
                fs.sync(fout)
            digest.update(f"{rel}\0{size}\0{chunk_hash.hexdigest()}\n".encode())
            total += size
        return "sha256:" + digest.hexdigest(), total

    def _retain(self) -> builtins.list[str]:   # `list` here is the method of that name
        """Delete all but the newest `keep` valid checkpoints; their paths (as `CheckpointInfo.path`)."""
        entries, _bad = self._scan()
        valid = [name for name, _ in entries if name not in self._known_corrupt]
        kept = set(valid[-self.keep:])
        removed = []
        for name, _ in entries:
            if name not in kept:
                path = self._fs.join(self._fs.root, name)
                self._fs.rmtree(path)
                self._known_corrupt.discard(name)
                removed.append(self._fs.url(path))
        return removed

    def _clean_stale_tmp(self) -> None:
        """Remove temp dirs of dead writers on this host (and very old ones from any host)."""
        fs = self._fs
        for name in fs.names(fs.root):
            if not name.startswith(".tmp."):
                continue
            host, _, rest = name[len(".tmp."):].partition(".")
            pid = rest.partition(".")[0]
            path = fs.join(fs.root, name)
            try:
                stale = (host == _host() and pid.isdigit() and not _pid_alive(int(pid))) or (
                    time.time() - fs.mtime(path) > _STALE_TMP_SECONDS
                )
            except OSError:
                continue
            if stale:
                fs.rmtree(path)

    # -------------------------------------------------------------------------- reading
    def _scan(self) -> tuple[_Entries, _Bad]:
        """(name, manifest) of checkpoints in write order, and (path, reason) of unreadable manifests."""
        entries: _Entries = []
        bad: _Bad = []
        for name in self._fs.names(self._fs.root):
            if not _NAME_RE.match(name):
                continue
            try:
                manifest = self._read_manifest(name, strict=True)
            except ValueError as exc:
                bad.append((self._fs.url(self._fs.join(self._fs.root, name)), str(exc)))
                continue
            if manifest is not None:  # no manifest: not a checkpoint (yet)
                entries.append((name, manifest))
        entries.sort(key=lambda e: (int(e[1].get("seq", 0)), float(e[1].get("time", 0.0))))
        return entries, bad

    def _read_manifest(self, name: str, *, strict: bool = False) -> dict[str, Any] | None:
        path = self._fs.join(self._fs.root, name, _MANIFEST)
        try:
            raw = self._fs.read_bytes(path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        try:
            manifest = json.loads(raw.decode("utf-8"))
            if not isinstance(manifest, dict) or not {"format", "checksum", "bytes"} <= set(manifest):
                raise ValueError("fields missing")
        except ValueError as exc:
            if strict:
                raise ValueError(f"manifest unreadable: {exc}") from None
            return None
        return manifest

    def _info(self, name: str, m: dict[str, Any]) -> CheckpointInfo:
        return CheckpointInfo(
            path=self._fs.url(self._fs.join(self._fs.root, name)), step=m.get("step"),
            checksum=str(m["checksum"]), bytes=int(m["bytes"]), seconds=float(m.get("seconds", 0.0)),
            format=str(m["format"]), time=float(m.get("time", 0.0)),
        )

    def _load(self, name: str, manifest: dict[str, Any]) -> Any:
        fs = self._fs
        where = fs.url(fs.join(fs.root, name))
        fmt = str(manifest["format"])
        payload = fs.join(fs.root, name, str(manifest.get("payload", "payload")))
        if fmt == _DIR_FORMAT:
            self._verify_dir(where, payload, manifest)
            return fs.url(payload)
        serializer = self._serializer(fmt, where)
        if isinstance(fs, _Local):
            self._verify_stream(where, payload, manifest)
            try:
                with fs.open(payload, "rb") as f:
                    return serializer.load(f)
            except FileNotFoundError:
                raise CheckpointCorruptError(where, "payload missing") from None
            except SweeplabError:
                raise
            except Exception as exc:  # verified bytes that do not load: report, fall back to older
                raise CheckpointCorruptError(where, f"cannot load: {type(exc).__name__}: {exc}") from exc
        try:
            data = fs.read_bytes(payload)
        except FileNotFoundError:
            raise CheckpointCorruptError(where, "payload missing") from None
        _check(where, manifest, len(data), "sha256:" + hashlib.sha256(data).hexdigest())
        try:
            return serializer.load(io.BytesIO(data))
        except SweeplabError:
            raise
        except Exception as exc:
            raise CheckpointCorruptError(where, f"cannot load: {type(exc).__name__}: {exc}") from exc

    def _verify_stream(self, where: str, payload: str, manifest: dict[str, Any]) -> None:
        digest, size = hashlib.sha256(), 0
        try:
            with self._fs.open(payload, "rb") as f:
                while chunk := f.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
        except FileNotFoundError:
            raise CheckpointCorruptError(where, "payload missing") from None
        _check(where, manifest, size, "sha256:" + digest.hexdigest())

    def _verify_dir(self, where: str, payload: str, manifest: dict[str, Any]) -> None:
        fs = self._fs
        if not fs.isdir(payload):
            raise CheckpointCorruptError(where, "payload directory missing")
        digest, total = hashlib.sha256(), 0
        for rel in fs.walk_files(payload):
            file_hash, size = hashlib.sha256(), 0
            with fs.open(fs.join(payload, *rel.split("/")), "rb") as f:
                while chunk := f.read(_CHUNK):
                    file_hash.update(chunk)
                    size += len(chunk)
            digest.update(f"{rel}\0{size}\0{file_hash.hexdigest()}\n".encode())
            total += size
        _check(where, manifest, total, "sha256:" + digest.hexdigest())

    # -------------------------------------------------------------------------- helpers
    @staticmethod
    def _serializer(fmt: str, where: str) -> Serializer:
        try:
            return SERIALIZERS[fmt]
        except KeyError:
            raise ConfigError(f"checkpoint format {fmt!r} has no registered serializer", file=where,
                              expected=" | ".join(sorted(SERIALIZERS)),
                              hint="call register_serializer() before loading") from None

    @staticmethod
    def _name(step: int | None, seq: int, taken: set[str]) -> str:
        base = f"step-{step:010d}" if step is not None else f"seq-{seq:010d}"
        return base if base not in taken else f"{base}-{seq}"


def _late(manifest: dict[str, Any], dead: dict[int, float]) -> bool:
    """Whether a checkpoint was written by its attempt after that attempt was declared dead."""
    attempt = manifest.get("attempt")
    if not dead or not isinstance(attempt, int):
        return False
    declared = min((t for a, t in dead.items() if a >= attempt), default=None)
    return declared is not None and float(manifest.get("time", 0.0)) > declared


def _check(where: str, manifest: dict[str, Any], size: int, checksum: str) -> None:
    expected = int(manifest["bytes"])
    if size < expected:
        raise CheckpointCorruptError(where, f"truncated: {size} of {expected} bytes")
    if size != expected:
        raise CheckpointCorruptError(where, f"size mismatch: {size} bytes, manifest says {expected}")
    if checksum != manifest["checksum"]:
        raise CheckpointCorruptError(where, f"checksum mismatch: {checksum[:19]}... != "
                                            f"{str(manifest['checksum'])[:19]}...")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -------------------------------------------------------------------------------------------------- policy
_STEPS_RE = re.compile(r"^\s*(\d+)\s*steps?\s*$")


def young_daly_interval(cost: float, mtbf: float) -> float:
    """Young's optimal compute time between checkpoints, sqrt(2 x cost x MTBF) (Daly's first order).

    `cost`: seconds one checkpoint takes; `mtbf`: mean time between failures in seconds.
    """
    if not (math.isfinite(cost) and cost >= 0):
        raise ValueError(f"checkpoint cost must be a finite number >= 0, got {cost!r}")
    if not (math.isfinite(mtbf) and mtbf > 0):
        raise ValueError(f"MTBF must be a finite number > 0, got {mtbf!r}")
    return math.sqrt(2.0 * cost * mtbf)


def _parse_every(every: Any) -> tuple[str, float | int | None]:
    key, expected = "trial.checkpoint_every", "an integer of steps, seconds as a float, '5m', 'auto' or null"
    if every is None:
        return "always", None
    if isinstance(every, bool):
        raise ConfigError("invalid checkpoint frequency", key=key, value=every, expected=expected)
    if isinstance(every, int):
        if every < 1:
            raise ConfigError("invalid checkpoint frequency", key=key, value=every, expected="steps >= 1")
        return "steps", every
    if isinstance(every, float):
        if not (math.isfinite(every) and every >= 0):
            raise ConfigError("invalid checkpoint frequency", key=key, value=every, expected="seconds >= 0")
        return "seconds", every
    if isinstance(every, str):
        text = every.strip().lower()
        if text == _AUTO:
            return "auto", None
        if m := _STEPS_RE.match(text):
            return _parse_every(int(m.group(1)))
        return "seconds", parse_duration(every, key=key, error=ConfigError)   # the spec's one grammar
    raise ConfigError("invalid checkpoint frequency", key=key, value=every, expected=expected)


class CheckpointPolicy:
    """How often run.checkpoint really writes. every: int (steps), float (seconds), "auto", or None (always).

    Strings are accepted too: "100 steps", "30s", "5m", "1h". With "auto" the interval (seconds of work
    between checkpoints) is Young/Daly's sqrt(2 x cost x MTBF), where cost is the measured write time
    (`record`) and `mtbf` the observed mean time between failures (1 hour until one is known), clamped to
    [min_interval, max_interval]. A process that has already run longer than that MTBF without failing
    uses its own uptime instead (evidence that failures are rarer). The first call is always due.
    """

    DEFAULT_MTBF = 3600.0

    def __init__(
        self,
        every: float | str | None,
        *,
        clock: Clock | None = None,
        mtbf: float | None = None,
        min_interval: float = 10.0,
        max_interval: float = 3600.0,
    ) -> None:
        self.mode, self.every = _parse_every(every)
        if not (0 <= min_interval <= max_interval):
            raise ConfigError("checkpoint interval bounds must satisfy 0 <= min <= max",
                              value=(min_interval, max_interval))
        self.clock = clock if clock is not None else RealClock()
        self.mtbf = mtbf
        self.min_interval, self.max_interval = float(min_interval), float(max_interval)
        self.cost: float | None = None  # smoothed seconds per write
        self._last_step: int | None = None
        self._last_time: float | None = None
        self._calls = 0
        self._started = self.clock.monotonic()
        self._last_call = 0

    @property
    def mtbf(self) -> float | None:
        return self._mtbf

    @mtbf.setter
    def mtbf(self, value: float | None) -> None:
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ConfigError("MTBF must be a number of seconds > 0", key="mtbf", value=value)
        self._mtbf = None if value is None else float(value)

    def due(self, step: int | None) -> bool:
        """Whether this `run.checkpoint` call should write (cheap; call it once per checkpoint call)."""
        self._calls += 1
        if self.mode == "always" or self._last_time is None:
            return True
        if self.mode == "steps":
            if step is None or self._last_step is None:
                return self._calls - self._last_call >= int(self.every or 1)
            return step - self._last_step >= int(self.every or 1) or step < self._last_step
        return self.clock.monotonic() - self._last_time >= float(self.interval() or 0.0)

    def record(self, step: int | None, seconds: float) -> None:
        """After a real write: remember where and when, and how long it took (the cost for "auto")."""
        self._last_step = step
        self._last_time = self.clock.monotonic()
        self._last_call = self._calls
        seconds = max(float(seconds), 0.0)
        self.cost = seconds if self.cost is None else 0.7 * self.cost + 0.3 * seconds

    def interval(self) -> float | int | None:
        """Steps (int) or seconds (float) between writes; None when every call writes."""
        if self.mode == "auto":
            uptime = self.clock.monotonic() - self._started
            mtbf = max(self.mtbf or self.DEFAULT_MTBF, uptime)
            ideal = young_daly_interval(self.cost or 0.0, mtbf)
            return min(max(ideal, self.min_interval), self.max_interval)
        return self.every
