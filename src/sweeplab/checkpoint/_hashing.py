"""A write-only file object that checksums (sha256) and counts a payload in the one pass that writes it."""

from __future__ import annotations

import hashlib
import io
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

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
