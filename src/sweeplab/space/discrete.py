"""The distribution base class and the discrete kinds: constant, categorical (with probabilities), int_uniform."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from sweeplab.space.values import _canonical, _is_integral, _same, _short

if TYPE_CHECKING:
    from sweeplab.space.values import UnitSource


# --------------------------------------------------------------------------------------------------
# distributions


#: values one grid parameter may have: a grid lists them, so an int_uniform over 0..1e12 (or a q_uniform with
#: a tiny q) would exhaust memory before the first trial; real grids have a few dozen per parameter
MAX_GRID_VALUES = 1_000_000


class GridTooLarge(ValueError):
    """A parameter with more than MAX_GRID_VALUES grid values; the message says how many (the spec parsers
    turn it into a SpecError naming the parameter)."""


@dataclass(frozen=True)
class Distribution:
    """One parameter: a W&B distribution over plain Python values."""

    name: str
    kind: ClassVar[str] = ""

    def sample(self, rng: UnitSource) -> Any:
        return self.from_unit(float(rng.random()))

    def from_unit(self, u: float) -> Any:
        """Inverse CDF: maps u in [0, 1) onto the distribution's values."""
        raise NotImplementedError

    def to_unit(self, value: Any) -> float:
        """Approximate inverse of `from_unit` (the CDF, bin centres for discrete values)."""
        raise NotImplementedError

    def contains(self, value: Any) -> bool:
        raise NotImplementedError

    def grid_values(self) -> list[Any] | None:
        return None

    def describe(self) -> str:
        args = ", ".join(
            f"{f.name}={_short(getattr(self, f.name))}" for f in fields(self) if f.name != "name"
        )
        return f"{self.name}: {self.kind}({args})"


@dataclass(frozen=True)
class Constant(Distribution):
    """Always `value`."""

    value: Any
    kind: ClassVar[str] = "constant"

    def sample(self, rng: UnitSource) -> Any:
        return self.value

    def from_unit(self, u: float) -> Any:
        return self.value

    def to_unit(self, value: Any) -> float:
        return 0.5

    def contains(self, value: Any) -> bool:
        return _same(value, self.value)

    def grid_values(self) -> list[Any]:
        return [self.value]


@dataclass(frozen=True)
class Categorical(Distribution):
    """One of `values`, each as likely."""

    values: tuple[Any, ...]
    kind: ClassVar[str] = "categorical"

    def _cumulative(self) -> list[float]:
        n = len(self.values)
        return [(i + 1) / n for i in range(n)]

    def index_of(self, value: Any) -> int | None:
        for i, v in enumerate(self.values):
            if _same(v, value):
                return i
        return None

    def from_unit(self, u: float) -> Any:
        u = min(max(u, 0.0), 1.0)
        cumulative = self._cumulative()
        for i, c in enumerate(cumulative):
            if u < c:
                return self.values[i]
        return self.values[cumulative.index(cumulative[-1])]   # u == 1: the last value drawn with some probability

    def to_unit(self, value: Any) -> float:
        i = self.index_of(value)
        if i is None:
            raise ValueError(f"{value!r} is not a value of {self.name}")
        cum = [0.0, *self._cumulative()]
        return (cum[i] + cum[i + 1]) / 2

    def contains(self, value: Any) -> bool:
        return self.index_of(value) is not None

    def grid_values(self) -> list[Any]:
        seen: set[str] = set()
        out = []
        for v in self.values:  # W&B skips repeated values in a grid
            key = _canonical(v)
            if key not in seen:
                seen.add(key)
                out.append(v)
        return out


@dataclass(frozen=True)
class CategoricalWithProbabilities(Categorical):
    """One of `values`, drawn with `probabilities`."""

    probabilities: tuple[float, ...]
    kind: ClassVar[str] = "categorical_w_probabilities"

    def _cumulative(self) -> list[float]:
        """Scaled to end at 1 exactly: the probabilities sum to 1 only within 1e-6, and a draw past their sum
        would fall to the last value, whatever its probability (0 included)."""
        total = sum(self.probabilities)
        return [float(c) / total for c in itertools.accumulate(self.probabilities)]


@dataclass(frozen=True)
class IntUniform(Distribution):
    """An integer between min and max, both included."""

    min: int
    max: int
    kind: ClassVar[str] = "int_uniform"

    def from_unit(self, u: float) -> int:
        n = self.max - self.min + 1
        return self.min + min(max(int(u * n), 0), n - 1)

    def to_unit(self, value: Any) -> float:
        return (value - self.min + 0.5) / (self.max - self.min + 1)

    def contains(self, value: Any) -> bool:
        return _is_integral(value) and self.min <= value <= self.max

    def grid_values(self) -> list[int]:
        n = self.max - self.min + 1
        if n > MAX_GRID_VALUES:
            raise GridTooLarge(f"a grid over {self.kind} from {self.min} to {self.max} has {n} values")
        return list(range(self.min, self.max + 1))
