"""Clocks: the driver and the pure decision logic take time from a Clock so tests can fake it."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "RealClock"]


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...


class RealClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to.

    It keeps the time elapsed since `start` on its own: added to an epoch near 1.7e9, a float moves in steps
    of ~2.4e-7 s, and many small advances would be lost."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._start = start
        self._elapsed = 0.0

    def time(self) -> float:
        return self._start + self._elapsed

    def monotonic(self) -> float:
        return self._elapsed

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._elapsed += seconds
