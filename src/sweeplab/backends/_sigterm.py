"""SIGTERM held from a backend's start until its driver runs (main thread, where SIGTERM has no handler).

`sweeplab sweep`, `sweeplab resume` and `sl.sweep` start the backend's workers first, so they boot while the
driver is built and creates (or resumes) the sweep; the driver's SIGTERM handler comes with `Driver.run`. A
SIGTERM in between (a spot reclaim, `kill PID`) got the default action: the process ended (exit 143) and the
sweep it had just created or resumed was left `running` with its driver gone. `SigtermHold.install` puts a
holding handler there instead; the driver's own call to `backend.start()` (its handler is then in place)
calls `release`, which hands a held signal to it: the sweep stops as on any SIGTERM to its driver (stopped,
resumable, exit 0). A hold that no driver released (the command ended before it ran) is released at the
backend's shutdown, and the process ends by the signal then, as it would have.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

__all__ = ["SigtermHold"]


class SigtermHold:
    """The SIGTERM handler between a backend's start and its driver's run (see the module's docstring)."""

    def __init__(self) -> None:
        self.holding = True
        self.got: int | None = None

    @classmethod
    def install(cls) -> SigtermHold | None:
        """A hold in place of SIGTERM's default action (or of a former sweep's hold, left in place by its
        driver); None where SIGTERM has a handler of its own or this is not the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return None
        current = signal.getsignal(signal.SIGTERM)
        if current not in (signal.SIG_DFL, None) and not isinstance(current, SigtermHold):
            return None
        hold = cls()
        signal.signal(signal.SIGTERM, hold)
        return hold

    def __call__(self, signum: int, frame: Any) -> None:
        if self.holding:
            self.got = signum
        else:   # released and still the handler (a driver put it back): the default action
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def release(self) -> None:
        """Stop holding; a signal held so far goes to whatever handles SIGTERM now (the driver's)."""
        self.holding = False
        got, self.got = self.got, None
        if got is not None:
            signal.raise_signal(got)
