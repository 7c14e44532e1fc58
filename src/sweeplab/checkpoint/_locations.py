"""Where checkpoints live: a local directory (temp dir + fsync + rename) or any fsspec URL (`_Remote`)."""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any

from sweeplab._imports import optional_import


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
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:   # a file (or link) under a checkpoint's name; or nothing, under a file (a failed save's temp dir)
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                os.remove(path)

    def in_the_way(self) -> str | None:
        """Why the root cannot be a directory: it, or the nearest of its parents that exists, is a file (the
        directory was replaced by one, say); None if it can."""
        path = self.root
        while True:
            if os.path.lexists(path):
                if os.path.isdir(path):
                    return None
                where = "" if path == self.root else f" cannot be made: {path}"
                return f"checkpoint directory {self.root}{where} is a file, not a directory"
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent

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


def entries(root: str) -> list[str]:
    """The names in the directory `root` (a local path or an fsspec URL); [] when it does not exist."""
    root = root.removeprefix("file://")
    fs: _Local | _Remote = _Remote(root) if _is_url(root) else _Local(root)
    return sorted(fs.names(fs.root))


def discard(root: str) -> None:
    """Delete the directory `root` (a local path or an fsspec URL) with everything in it, if it exists."""
    root = root.removeprefix("file://")
    fs: _Local | _Remote = _Remote(root) if _is_url(root) else _Local(root)
    fs.rmtree(fs.root)
