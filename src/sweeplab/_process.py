"""Process-wide settings that several threads of one process change for a while: a prefetching searcher's
GP suggestion beside another's (torch's and OpenBLAS's threads), two sweeps of one notebook (Optuna's log
level and warnings filters). Each saving what it saw and putting it back on its way out leaves the others'
change for good when they overlap (A saves, B saves A's change, A restores, B restores A's change). Here
the first user in saves (and changes) them and the last one out puts them back."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Shared", "os_text"]

T = TypeVar("T")


class Shared(Generic[T]):
    """`with shared.held():` around each use. `enter()` runs when no use is in progress and returns what
    `leave` needs to put the settings back; `leave(saved)` runs when the last use in progress ends."""

    def __init__(self, enter: Callable[[], T], leave: Callable[[T], None]) -> None:
        self._enter = enter
        self._leave = leave
        self._lock = threading.Lock()
        self._users = 0
        self._saved: Any = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                self._saved = self._enter()
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    saved, self._saved = self._saved, None
                    self._leave(saved)


def os_text(text: str) -> str:
    """`text` as this process can pass it to the OS (an argument or an environment value of a program it
    starts): itself when the file system encoding holds it, else its UTF-8 bytes as that encoding's surrogate
    escapes. In the C locale without UTF-8 mode a sweep named `café` or a value `naïve` raised
    UnicodeEncodeError as the program started; the program now gets the UTF-8 they are, whatever the locale."""
    import os

    try:
        os.fsencode(text)
    except UnicodeError:
        return os.fsdecode(text.encode("utf-8", "surrogatepass"))
    return text
