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
    """A clock that moves only when told to."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._start = start

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now - self._start

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._now += seconds
