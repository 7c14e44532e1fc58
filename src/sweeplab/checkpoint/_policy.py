"""`CheckpointPolicy`: how often `run.checkpoint` really writes (steps, seconds, always, or Young/Daly "auto")."""

from __future__ import annotations

import math
import re
from typing import Any

from sweeplab._clock import Clock, RealClock
from sweeplab._values import parse_duration
from sweeplab.checkpoint._common import _AUTO
from sweeplab.errors import ConfigError

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
