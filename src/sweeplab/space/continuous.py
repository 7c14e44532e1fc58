"""The continuous kinds: uniform, log-uniform (exponents and values), normal, log-normal, beta, and their
quantised twins."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar

from sweeplab.space.discrete import MAX_GRID_VALUES, Distribution, GridTooLarge
from sweeplab.space.values import _EPS, _is_number, _on_grid, quantize

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class _Continuous(Distribution):
    """A distribution given by a monotone map of the unit interval (`_ppf`) and its inverse (`_cdf`)."""

    bounded: ClassVar[bool] = True

    def _ppf(self, u: float) -> float:
        raise NotImplementedError

    def _cdf(self, x: float) -> float:
        raise NotImplementedError

    def bounds(self) -> tuple[float, float]:
        """The support of the unquantised values (may be infinite)."""
        return self._ppf(0.0), self._ppf(1.0)

    def _clip(self, u: float) -> float:
        lo = 0.0 if self.bounded else _EPS
        return min(max(float(u), lo), 1.0 - _EPS if not self.bounded else 1.0)

    def from_unit(self, u: float) -> Any:
        return float(self._ppf(self._clip(u)))

    def to_unit(self, value: Any) -> float:
        return min(max(float(self._cdf(float(value))), 0.0), 1.0)

    def contains(self, value: Any) -> bool:
        if not _is_number(value) or not math.isfinite(value):
            return False
        lo, hi = self.bounds()
        tol = 1e-12 * max(1.0, abs(lo) if math.isfinite(lo) else 0.0, abs(hi) if math.isfinite(hi) else 0.0)
        return lo - tol <= value <= hi + tol


class _Quantized:
    """Mixin: round the continuous value to a multiple of `q` (an int result when q is an int)."""

    q: int | float

    def from_unit(self, u: float) -> Any:
        return quantize(self._ppf(self._clip(u)), self.q)  # type: ignore[attr-defined]

    def contains(self, value: Any) -> bool:
        if not _is_number(value) or not math.isfinite(value):
            return False
        k = _on_grid(value, self.q)
        if k is None:
            return False
        lo, hi = self.bounds()  # type: ignore[attr-defined]
        if math.isfinite(lo) and k < round(lo / self.q):
            return False
        return not (math.isfinite(hi) and k > round(hi / self.q))

    def grid_values(self) -> list[Any] | None:
        return None


@dataclass(frozen=True)
class Uniform(_Continuous):
    """Uniform between min and max."""

    min: float
    max: float
    kind: ClassVar[str] = "uniform"

    def _ppf(self, u: float) -> float:
        return self.min + u * (self.max - self.min)

    def _cdf(self, x: float) -> float:
        return (x - self.min) / (self.max - self.min)


@dataclass(frozen=True)
class QUniform(_Quantized, Uniform):
    """Uniform between min and max, rounded to a multiple of q."""

    q: int | float
    kind: ClassVar[str] = "q_uniform"

    def _grid_count(self) -> int:
        """How many points W&B's grid has: len(numpy.arange(min, max, q))."""
        steps = (float(self.max) - float(self.min)) / self.q   # inf when the span overflows
        if steps > MAX_GRID_VALUES:
            count = f"{math.ceil(steps)} values" if math.isfinite(steps) else f"more than {MAX_GRID_VALUES:,} values"
            raise GridTooLarge(f"a grid over {self.kind} from {self.min} to {self.max} by {self.q} has {count}")
        return max(math.ceil(steps), 0)

    def _grid_point(self, k: int) -> int | float:
        """min + k * q: an int when min, max and q are (numpy.arange's dtype), else a float without the noise of
        float steps (0.3, where arange gives 0.30000000000000004)."""
        if all(isinstance(v, int) for v in (self.min, self.max, self.q)):
            return int(self.min + k * self.q)
        return float(Decimal(repr(float(self.min))) + k * Decimal(repr(float(self.q))))

    def grid_values(self) -> list[Any]:
        """W&B's grid points: `numpy.arange(min, max, q)`, so `max` itself is left out (0..10 by 2 gives
        0, 2, 4, 6, 8), and they start at min, a multiple of q or not (1..10 by 2 gives 1, 3, 5, 7, 9).
        Source: wandb/sweeps, grid_search.py (grid_search_next_runs)."""
        return [self._grid_point(k) for k in range(self._grid_count())]

    def contains(self, value: Any) -> bool:
        """A draw (a multiple of q, from min and max rounded) or a grid point (min + k * q, below max)."""
        if super().contains(value):
            return True
        if not _is_number(value) or not math.isfinite(value):
            return False
        k = _on_grid(value - self.min, self.q)
        try:
            return k is not None and 0 <= k < self._grid_count()
        except GridTooLarge:   # a grid nobody can run: its points are not asked for
            return False


_LOG_MIN, _LOG_MAX = math.log(sys.float_info.min), math.log(sys.float_info.max)


def _exp(x: float) -> float:
    """exp(x) held within the normal floats: exponents beyond about -708..709 (log_uniform with values written as
    its exponents, min: 0.0001, max: 1000, which the spec warns about) give the nearest float, not an
    OverflowError at the first trial (W&B draws inf there) nor a 0 that no log scale can hold."""
    return math.exp(min(max(x, _LOG_MIN), _LOG_MAX))


@dataclass(frozen=True)
class LogUniformBase(_Continuous):
    """Log-uniform between exp(log_bounds()[0]) and exp(log_bounds()[1])."""

    min: float
    max: float

    def log_bounds(self) -> tuple[float, float]:
        raise NotImplementedError

    def value_bounds(self) -> tuple[float, float]:
        lo, hi = self.log_bounds()
        return _exp(lo), _exp(hi)

    def bounds(self) -> tuple[float, float]:
        return self.value_bounds()

    def _ppf(self, u: float) -> float:
        lo, hi = self.log_bounds()
        a, b = self.value_bounds()
        return min(max(_exp(lo + u * (hi - lo)), a), b)  # no 9.999999e-06 for min: 1e-05

    def _cdf(self, x: float) -> float:
        lo, hi = self.log_bounds()
        return (math.log(x) - lo) / (hi - lo) if x > 0 else 0.0


@dataclass(frozen=True)
class LogUniform(LogUniformBase):
    """exp(x) for x uniform between min and max (W&B's `log_uniform`: the bounds are exponents)."""

    kind: ClassVar[str] = "log_uniform"  # min/max are natural-log exponents

    def log_bounds(self) -> tuple[float, float]:
        return self.min, self.max


@dataclass(frozen=True)
class LogUniformValues(LogUniformBase):
    """Log-uniform between the values min and max."""

    kind: ClassVar[str] = "log_uniform_values"

    def log_bounds(self) -> tuple[float, float]:
        return math.log(self.min), math.log(self.max)

    def value_bounds(self) -> tuple[float, float]:
        return float(self.min), float(self.max)


@dataclass(frozen=True)
class InvLogUniform(LogUniformBase):
    """1/x where x is log-uniform with exponents between min and max."""

    kind: ClassVar[str] = "inv_log_uniform"  # 1/x is log-uniform with exponents min..max

    def log_bounds(self) -> tuple[float, float]:
        return -self.max, -self.min


@dataclass(frozen=True)
class InvLogUniformValues(LogUniformBase):
    """Log-uniform between the values min and max (W&B's name for the same law)."""

    kind: ClassVar[str] = "inv_log_uniform_values"  # the same law as log_uniform_values

    def log_bounds(self) -> tuple[float, float]:
        return math.log(self.min), math.log(self.max)

    def value_bounds(self) -> tuple[float, float]:
        return float(self.min), float(self.max)


@dataclass(frozen=True)
class QLogUniform(_Quantized, LogUniform):
    """`log_uniform`, rounded to a multiple of q."""

    q: int | float
    kind: ClassVar[str] = "q_log_uniform"


@dataclass(frozen=True)
class QLogUniformValues(_Quantized, LogUniformValues):
    """`log_uniform_values`, rounded to a multiple of q."""

    q: int | float
    kind: ClassVar[str] = "q_log_uniform_values"


@dataclass(frozen=True)
class Normal(_Continuous):
    """Normal with mean mu and standard deviation sigma."""

    mu: float
    sigma: float
    kind: ClassVar[str] = "normal"
    bounded: ClassVar[bool] = False

    def bounds(self) -> tuple[float, float]:
        return -math.inf, math.inf

    def _ppf(self, u: float) -> float:
        from scipy.special import ndtri

        return self.mu + self.sigma * float(ndtri(u))

    def _cdf(self, x: float) -> float:
        from scipy.special import ndtr

        return float(ndtr((x - self.mu) / self.sigma))


@dataclass(frozen=True)
class QNormal(_Quantized, Normal):
    """Normal, rounded to a multiple of q."""

    q: int | float
    kind: ClassVar[str] = "q_normal"


@dataclass(frozen=True)
class LogNormal(Normal):
    """exp(x) for x normal with mean mu and standard deviation sigma."""

    kind: ClassVar[str] = "log_normal"  # exp(N(mu, sigma))

    def bounds(self) -> tuple[float, float]:
        return 0.0, math.inf

    def _ppf(self, u: float) -> float:
        return math.exp(min(super()._ppf(u), 700.0))

    def _cdf(self, x: float) -> float:
        return super()._cdf(math.log(x)) if x > 0 else 0.0

    def contains(self, value: Any) -> bool:
        return super().contains(value) and value > 0


@dataclass(frozen=True)
class QLogNormal(_Quantized, LogNormal):
    """Log-normal, rounded to a multiple of q."""

    q: int | float
    kind: ClassVar[str] = "q_log_normal"


@dataclass(frozen=True)
class Beta(_Continuous):
    """Beta with shape parameters a and b, on [0, 1]."""

    a: float
    b: float
    kind: ClassVar[str] = "beta"

    def bounds(self) -> tuple[float, float]:
        return 0.0, 1.0

    def _ppf(self, u: float) -> float:
        from scipy.special import betaincinv

        return float(betaincinv(self.a, self.b, u))

    def _cdf(self, x: float) -> float:
        from scipy.special import betainc

        return float(betainc(self.a, self.b, min(max(x, 0.0), 1.0)))


@dataclass(frozen=True)
class QBeta(_Quantized, Beta):
    """Beta, rounded to a multiple of q."""

    q: int | float
    kind: ClassVar[str] = "q_beta"
