"""SIGTERM, Ctrl-C and SIGHUP held from a backend's start until its driver runs (main thread, default handlers only).

`sweeplab sweep`, `sweeplab resume` and `sl.sweep` start the backend's workers first, so they boot while the
driver is built and creates (or resumes) the sweep; the driver's handlers come with `Driver.run`. A SIGTERM in
between (a spot reclaim, `kill PID`) got the default action: the process ended (exit 143) and the sweep it had
just created or resumed was left `running` with its driver gone; a Ctrl-C left it so too (exit 130).
`SignalHold.install` puts a holding handler there instead; the driver's own call to `backend.start()` (its
handlers are then in place) calls `release`, which hands a held signal to them: the sweep stops as on any
SIGTERM or Ctrl-C to its driver (stopped, resumable). A second Ctrl-C while held interrupts at once. A hold
that no driver released (the command ended before it ran) is released at the backend's shutdown, and the
process ends by the signal then, as it would have. The driver puts the original handlers back when it ends.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

__all__ = ["SignalHold"]


class SignalHold:
    """The SIGTERM and SIGINT handler between a backend's start and its driver's run (see the module)."""

    def __init__(self) -> None:
        self.holding = True
        self.got: list[int] = []
        self.original: dict[int, Any] = {}   # what each signal had before (a former sweep's hold: its original)

    @classmethod
    def install(cls) -> SignalHold | None:
        """A hold in place of SIGTERM's default action and Python's default Ctrl-C (or of a former sweep's hold);
        None where both have handlers of their own or this is not the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return None
        hold = cls()
        defaults = {signal.SIGTERM: (signal.SIG_DFL, None), signal.SIGINT: (signal.default_int_handler,),
                    signal.SIGHUP: (signal.SIG_DFL, None)}   # a closed terminal (ignored under nohup: left so)
        for sig, plain in defaults.items():
            current = signal.getsignal(sig)
            if isinstance(current, SignalHold):
                current = current.original.get(sig, plain[0])
            elif current not in plain:
                continue
            hold.original[sig] = current if current is not None else signal.SIG_DFL
            signal.signal(sig, hold)
        return hold if hold.original else None

    def __call__(self, signum: int, frame: Any) -> None:
        if self.holding:
            if signum == signal.SIGINT and signum in self.got:
                raise KeyboardInterrupt   # a second Ctrl-C: at once
            if signum not in self.got:
                self.got.append(signum)
        elif signum == signal.SIGINT:   # released and still the handler: the default actions
            raise KeyboardInterrupt
        else:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def release(self, *, restore: bool = False) -> None:
        """Stop holding; the first signal held so far goes to whatever handles it now (the driver's: one stop is
        all it takes, and a second one there would be a second Ctrl-C). `restore` (the backend's shutdown, no
        driver having taken over): the original handlers first, where this hold still is the handler, so a held
        signal gets its default action and the process keeps no trace of the hold."""
        self.holding = False
        if restore and threading.current_thread() is threading.main_thread():
            for sig, original in self.original.items():
                if signal.getsignal(sig) is self:
                    signal.signal(sig, original)
        got, self.got = self.got, []
        if got:
            signal.raise_signal(got[0])
