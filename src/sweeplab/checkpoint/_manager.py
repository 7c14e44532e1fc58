"""`CheckpointManager`: atomic save, retention of the newest K, verified restore of one trial's checkpoints."""

from __future__ import annotations

import builtins
import hashlib
import io
import json
import math
import operator
import os
import re
import socket
import time
import uuid
from typing import Any

from sweeplab.checkpoint._common import (
    _AUTO,
    _CHUNK,
    _DIR_FORMAT,
    _MANIFEST,
    _NAME_RE,
    _STALE_TMP_SECONDS,
    CheckpointCorruptError,
    CheckpointInfo,
    StaleAttemptError,
    _Bad,
    _Entries,
)
from sweeplab.checkpoint._fencing import _attempt_from_env, _given_dir, _keep_from_env, _late, _read_fence
from sweeplab.checkpoint._hashing import _HashingWriter
from sweeplab.checkpoint._locations import _is_url, _Local, _Remote
from sweeplab.checkpoint._serializers import SERIALIZERS, Serializer, _is_directory, _pick_format, _suffix
from sweeplab.errors import ConfigError, StoreError, SweeplabError, TrialError

#: why a directory (or file) under a checkpoint's name without a manifest is skipped: `save` writes the manifest
#: last (and locally renames the whole directory into place after it), so it is an interrupted save on an object
#: store, damage, or files that are not a checkpoint
_NO_MANIFEST = ("no manifest: a save interrupted before its manifest was written, or files that are not a "
                "checkpoint")


class CheckpointManager:
    """Save, list, verify and load the checkpoints of one trial under `root`.

    >>> mgr = CheckpointManager("ckpts", keep=2)
    >>> info = mgr.save({"epoch": 3, "weights": [0.1, 0.2]}, step=3)
    >>> info, state = mgr.latest()

    After `latest()`, `corrupt` lists the (path, reason) of newer checkpoints that failed verification.

    `keep`: how many of the newest checkpoints stay (default 2; a command program using SWEEPLAB_CHECKPOINT_DIR
    gets the spec's trial.keep_checkpoints from SWEEPLAB_KEEP_CHECKPOINTS).

    `attempt`: the trial attempt this manager writes for (`Run` passes it; a command program using
    SWEEPLAB_CHECKPOINT_DIR gets SWEEPLAB_ATTEMPT by default). Saves of an attempt declared dead with
    `fence` are refused, and late writes of dead attempts are never returned by `latest()`.
    """

    def __init__(self, root: str, *, keep: int | None = None, serializer: str = _AUTO,
                 attempt: int | None = None) -> None:
        root = os.fspath(root)
        if not root:
            raise ConfigError("the checkpoint directory is empty", key="checkpoint_dir", value=root)
        if keep is None:
            keep = _keep_from_env(root)
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
            if step < 0:
                raise ValueError(f"CheckpointManager.save: step {step} is negative (a checkpoint's step counts the "
                                 "steps done: 0 or more)")
        started = time.perf_counter()
        fmt = _pick_format(obj) if self.serializer == _AUTO else self.serializer
        fs = self._fs
        self._check_fence()
        entries, _bad = self._scan()
        seq = max((int(m.get("seq", 0)) for _, m in entries), default=0) + 1
        # every name in use, not only the valid checkpoints': a damaged one of this step (its manifest unreadable
        # or gone) holds its name until retention deletes it, and the rename onto it failed ("Directory not
        # empty"), failing the trial's every save of that step
        name = self._name(step, seq, set(fs.names(fs.root)))
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
                why = fs.in_the_way() if isinstance(fs, _Local) else None
                raise StoreError(why or f"cannot write checkpoint under {self.root}: {exc}") from exc
            raise
        seconds = time.perf_counter() - started
        removed = self._retain()
        return CheckpointInfo(path=fs.url(final), step=step, checksum=checksum, bytes=size, seconds=seconds,
                              format=fmt, time=written, removed=tuple(removed))

    def list(self) -> list[CheckpointInfo]:
        """Checkpoints with a readable manifest (not yet verified), oldest first, newest last."""
        return [self._info(name, m) for name, m in self._scan()[0]]

    def latest(self, *, before_attempt: int | None = None) -> tuple[CheckpointInfo, Any] | None:
        """The newest checkpoint that verifies, loaded; None if there is none. Fills `self.corrupt`.

        `before_attempt`: only checkpoints written by earlier attempts (what every rank of a multi-process
        trial restores: rank 0 may have saved in this attempt before another rank asks). In a command trial's
        program with several ranks (WORLD_SIZE > 1) using the directory sweeplab gave it, that is the default:
        this manager's attempt."""
        if before_attempt is None and self.attempt is not None and _given_dir(self.root) \
                and (os.environ.get("WORLD_SIZE") or "1").strip() not in ("", "0", "1"):
            before_attempt = self.attempt
        self._check_root()
        entries, bad = self._scan()
        self.corrupt = list(bad)
        # deleted by the next save's retention; but for a missing manifest on an object store, where a live writer's
        # payload comes before its manifest and nothing tells it from a dead writer's (it is still reported)
        self._known_corrupt.update(_name_of(path) for path, why in bad
                                   if self._fs.atomic_rename or why != _NO_MANIFEST)
        dead = _read_fence(self._fs)
        found: tuple[CheckpointInfo, Any] | None = None
        for name, manifest in reversed(entries):
            if _late(manifest, dead):
                continue   # written by an attempt after it was declared dead: never restored
            written_by = manifest.get("attempt")
            if before_attempt is not None and isinstance(written_by, int) and written_by >= before_attempt:
                continue   # this attempt's own: not what the other ranks restored
            info = self._info(name, manifest)
            try:
                found = info, self._load(name, manifest)
                break
            except CheckpointCorruptError as exc:
                self.corrupt.append((info.path, exc.reason))
                self._known_corrupt.add(name)
        self._tell_command_trial(found)
        return found

    def _tell_command_trial(self, found: tuple[CheckpointInfo, Any] | None) -> None:
        """In a command trial's program using the directory sweeplab gave it: what `latest()` skipped and what
        it restored, as the `checkpoint_corrupt` and `restored` events a function trial's `run.restore()`
        records (an `@note` line in the trial's report file, SWEEPLAB_REPORT_FILE)."""
        path = os.environ.get("SWEEPLAB_REPORT_FILE")
        if not path or not _given_dir(self.root):
            return
        notes: list[dict[str, Any]] = [
            {"level": "warning", "kind": "checkpoint_corrupt", "message": f"checkpoint {where} skipped: {why}",
             "path": where} for where, why in self.corrupt]
        if found is not None:
            notes.append({"level": "info", "kind": "restored", "step": found[0].step,
                          "message": f"restored checkpoint of step {found[0].step}"})
        if not notes:
            return
        data = "".join(json.dumps({"@note": n}, separators=(",", ":")) + "\n" for n in notes).encode()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError:
            pass   # the report file is gone (the attempt ended): nobody to tell

    def load(self, info: CheckpointInfo) -> Any:
        """Verify and load one checkpoint listed by this manager; raises CheckpointCorruptError."""
        name = _name_of(info.path)
        manifest = self._read_manifest(name)
        if manifest is None:
            raise CheckpointCorruptError(info.path, "manifest missing or unreadable")
        return self._load(name, manifest)

    # -------------------------------------------------------------------------- writing
    def _check_root(self) -> None:
        """A root that cannot be a directory (it or a parent is a file) fails as that, not as "no checkpoint":
        restoring nothing there would start the trial over and fail it at its first save."""
        why = self._fs.in_the_way() if isinstance(self._fs, _Local) else None
        if why:
            raise StoreError(why)

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
            except OSError:
                raise   # the disk, not the object: as it is
            except Exception as exc:   # TypeError, PicklingError, RecursionError, whatever a __reduce__ raises
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
        entries, bad = self._scan()
        valid = [name for name, _ in entries if name not in self._known_corrupt]
        kept = set(valid[-self.keep:])
        removed = []
        unreadable = [name for name in map(_name_of, (path for path, _ in bad)) if name in self._known_corrupt]
        for name in [n for n, _ in entries] + unreadable:
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
        """(name, manifest) of checkpoints in write order, and (path, reason) of unreadable or missing manifests
        (under a checkpoint's name: `step-...`, `seq-...`)."""
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
            if manifest is None:   # a checkpoint's name and no manifest: skipped, and said (as an unreadable one)
                bad.append((self._fs.url(self._fs.join(self._fs.root, name)), _NO_MANIFEST))
                continue
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
            _check_fields(manifest)
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
        except (IsADirectoryError, NotADirectoryError):   # something else in its place
            raise CheckpointCorruptError(where, "payload is not a file") from None
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


def _check(where: str, manifest: dict[str, Any], size: int, checksum: str) -> None:
    expected = int(manifest["bytes"])
    if size < expected:
        raise CheckpointCorruptError(where, f"truncated: {size} of {expected} bytes")
    if size != expected:
        raise CheckpointCorruptError(where, f"size mismatch: {size} bytes, manifest says {expected}")
    if checksum != manifest["checksum"]:
        raise CheckpointCorruptError(where, f"checksum mismatch: {checksum[:19]}... != "
                                            f"{str(manifest['checksum'])[:19]}...")


def _name_of(path: str) -> str:
    """The checkpoint's name (`step-0000000010`) from its path or URL."""
    return path.rstrip("/").rsplit("/", 1)[-1]


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


def _number(value: Any, *, whole: bool = False) -> bool:
    """A finite number (a whole one with `whole`) within 64 bits: a number of hundreds of digits (garbage) is no
    float (`math.isfinite` raised OverflowError) nor a step or size the store can hold."""
    kinds = (int,) if whole else (int, float)
    if not isinstance(value, kinds) or isinstance(value, bool):
        return False
    return -(2 ** 63) <= value < 2 ** 63 if isinstance(value, int) else math.isfinite(value)


def _check_fields(m: dict[str, Any]) -> None:
    """A manifest's fields have the types `save` writes: one that parses but holds anything else (garbage in its
    place, a hand edit) is unreadable, skipped as corrupt, instead of failing `latest()` and every save after it
    (`int(None)` sorting by `seq`) or pointing the payload outside its checkpoint (`"payload": "."`)."""
    if not isinstance(m["format"], str) or not isinstance(m["checksum"], str):
        raise ValueError("format and checksum must be text")
    if not _number(m["bytes"], whole=True) or m["bytes"] < 0:
        raise ValueError(f"bytes {m['bytes']!r} is not a size")
    for key, whole in (("seq", True), ("time", False), ("seconds", False)):
        if key in m and not _number(m[key], whole=whole):
            raise ValueError(f"{key} {m[key]!r} is not a number")
    for key in ("step", "attempt"):
        if m.get(key) is not None and not _number(m[key], whole=True):
            raise ValueError(f"{key} {m[key]!r} is not a whole number")
    payload = m.get("payload", "payload")
    if not isinstance(payload, str) or payload in ("", ".", "..") or "/" in payload or "\\" in payload:
        raise ValueError(f"payload {payload!r} is not a file name in the checkpoint")
