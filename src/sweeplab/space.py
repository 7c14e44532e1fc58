"""The search space: the W&B sweep `parameters` grammar as typed, frozen distributions.

`parse_parameters` turns the `parameters` block of a sweep spec into a `SearchSpace` of flat, dotted
parameter names (`optimizer.lr`), inferring distributions the way W&B does:

    value                     -> constant
    values                    -> categorical
    values + probabilities    -> categorical_w_probabilities
    min/max, both int         -> int_uniform
    min/max, otherwise        -> uniform
    mu/sigma                  -> normal          (W&B asks for `distribution`; we infer it)
    a/b                       -> beta            (idem)

Every distribution maps the unit interval onto its values (`from_unit`, an inverse CDF), which is how
random sampling, Sobol points and Optuna fall-backs share one code path. Values are plain Python types.
`log_uniform`, `q_log_uniform` and `inv_log_uniform` take natural-log exponents as min/max (as W&B does);
their `_values` twins take the values themselves.
"""

from __future__ import annotations

import difflib
import itertools
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar

from sweeplab.errors import SpecError

if TYPE_CHECKING:
    from typing import Protocol

    class UnitSource(Protocol):
        """What sampling needs of a generator: `random.Random` and `numpy.random.Generator` both fit."""

        def random(self) -> float: ...

__all__ = [
    "KINDS",
    "Beta",
    "Categorical",
    "CategoricalWithProbabilities",
    "Constant",
    "Distribution",
    "IntUniform",
    "InvLogUniform",
    "InvLogUniformValues",
    "LogNormal",
    "LogUniform",
    "LogUniformBase",
    "LogUniformValues",
    "Normal",
    "QBeta",
    "QLogNormal",
    "QLogUniform",
    "QLogUniformValues",
    "QNormal",
    "QUniform",
    "SearchSpace",
    "Uniform",
    "parse_parameters",
    "quantize",
    "unflatten",
]

_EPS = 1e-12  # unit coordinates are clipped to [EPS, 1 - EPS] for unbounded distributions


# --------------------------------------------------------------------------------------------------
# helpers


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_integral(x: Any) -> bool:
    return (isinstance(x, int) and not isinstance(x, bool)) or (isinstance(x, float) and x.is_integer())


def _plain(x: Any) -> Any:
    """numpy scalars -> Python scalars; containers converted recursively."""
    if type(x).__module__ == "numpy":   # a numpy scalar (without importing numpy to ask)
        return x.item()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _same(a: Any, b: Any) -> bool:
    """Equality that tells bools from numbers (True != 1), recursively."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:
        return False


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def quantize(x: float, q: float) -> int | float:
    """round(x / q) * q, as an int when q is an int (as W&B does), else a float without 0.1+0.2 noise."""
    k = round(x / q)
    if isinstance(q, int):
        return int(k * q)
    return float(Decimal(k) * Decimal(repr(float(q))))


def _on_grid(v: float, q: float) -> int | None:
    """The k with v == k * q (up to float noise), or None."""
    k = v / q
    r = round(k)
    return r if abs(k - r) <= 1e-9 * max(1.0, abs(k)) else None


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


# --------------------------------------------------------------------------------------------------
# distributions


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
        for i, c in enumerate(self._cumulative()):
            if u < c:
                return self.values[i]
        return self.values[-1]

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
    probabilities: tuple[float, ...]
    kind: ClassVar[str] = "categorical_w_probabilities"

    def _cumulative(self) -> list[float]:
        return [float(c) for c in itertools.accumulate(self.probabilities)]


@dataclass(frozen=True)
class IntUniform(Distribution):
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
        return list(range(self.min, self.max + 1))


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
    min: float
    max: float
    kind: ClassVar[str] = "uniform"

    def _ppf(self, u: float) -> float:
        return self.min + u * (self.max - self.min)

    def _cdf(self, x: float) -> float:
        return (x - self.min) / (self.max - self.min)


@dataclass(frozen=True)
class QUniform(_Quantized, Uniform):
    q: int | float
    kind: ClassVar[str] = "q_uniform"

    def grid_values(self) -> list[Any]:
        """W&B's grid points: `numpy.arange(min, max, q)`, so `max` itself is left out (0..10 by 2 gives
        0, 2, 4, 6, 8). Source: wandb/sweeps, grid_search.py (grid_search_next_runs)."""
        import numpy as np

        return [_plain(v) for v in np.arange(self.min, self.max, self.q).tolist()]


@dataclass(frozen=True)
class LogUniformBase(_Continuous):
    """Log-uniform between exp(log_bounds()[0]) and exp(log_bounds()[1])."""

    min: float
    max: float

    def log_bounds(self) -> tuple[float, float]:
        raise NotImplementedError

    def value_bounds(self) -> tuple[float, float]:
        lo, hi = self.log_bounds()
        return math.exp(lo), math.exp(hi)

    def bounds(self) -> tuple[float, float]:
        return self.value_bounds()

    def _ppf(self, u: float) -> float:
        lo, hi = self.log_bounds()
        a, b = self.value_bounds()
        return min(max(math.exp(lo + u * (hi - lo)), a), b)  # no 9.999999e-06 for min: 1e-05

    def _cdf(self, x: float) -> float:
        lo, hi = self.log_bounds()
        return (math.log(x) - lo) / (hi - lo) if x > 0 else 0.0


@dataclass(frozen=True)
class LogUniform(LogUniformBase):
    kind: ClassVar[str] = "log_uniform"  # min/max are natural-log exponents

    def log_bounds(self) -> tuple[float, float]:
        return self.min, self.max


@dataclass(frozen=True)
class LogUniformValues(LogUniformBase):
    kind: ClassVar[str] = "log_uniform_values"

    def log_bounds(self) -> tuple[float, float]:
        return math.log(self.min), math.log(self.max)

    def value_bounds(self) -> tuple[float, float]:
        return float(self.min), float(self.max)


@dataclass(frozen=True)
class InvLogUniform(LogUniformBase):
    kind: ClassVar[str] = "inv_log_uniform"  # 1/x is log-uniform with exponents min..max

    def log_bounds(self) -> tuple[float, float]:
        return -self.max, -self.min


@dataclass(frozen=True)
class InvLogUniformValues(LogUniformBase):
    kind: ClassVar[str] = "inv_log_uniform_values"  # the same law as log_uniform_values

    def log_bounds(self) -> tuple[float, float]:
        return math.log(self.min), math.log(self.max)

    def value_bounds(self) -> tuple[float, float]:
        return float(self.min), float(self.max)


@dataclass(frozen=True)
class QLogUniform(_Quantized, LogUniform):
    q: int | float
    kind: ClassVar[str] = "q_log_uniform"


@dataclass(frozen=True)
class QLogUniformValues(_Quantized, LogUniformValues):
    q: int | float
    kind: ClassVar[str] = "q_log_uniform_values"


@dataclass(frozen=True)
class Normal(_Continuous):
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
    q: int | float
    kind: ClassVar[str] = "q_normal"


@dataclass(frozen=True)
class LogNormal(Normal):
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
    q: int | float
    kind: ClassVar[str] = "q_log_normal"


@dataclass(frozen=True)
class Beta(_Continuous):
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
    q: int | float
    kind: ClassVar[str] = "q_beta"


KINDS: dict[str, type[Distribution]] = {
    cls.kind: cls
    for cls in (
        Constant, Categorical, CategoricalWithProbabilities, IntUniform, Uniform, QUniform,
        LogUniform, LogUniformValues, QLogUniform, QLogUniformValues, InvLogUniform,
        InvLogUniformValues, Normal, QNormal, LogNormal, QLogNormal, Beta, QBeta,
    )
}


# --------------------------------------------------------------------------------------------------
# the space


@dataclass(frozen=True)
class SearchSpace:
    """Flat, dotted parameter names -> distributions, in spec order (constants included)."""

    params: Mapping[str, Distribution]

    @property
    def searchable(self) -> list[str]:
        """Names of the non-constant parameters: one unit coordinate each."""
        return [n for n, d in self.params.items() if not isinstance(d, Constant)]

    @property
    def dimension(self) -> int:
        return len(self.searchable)

    def sample(self, rng: UnitSource) -> dict[str, Any]:
        return {n: _plain(d.sample(rng)) for n, d in self.params.items()}

    def from_unit(self, u: Sequence[float]) -> dict[str, Any]:
        names = self.searchable
        if len(u) != len(names):
            raise ValueError(f"expected {len(names)} unit coordinates, got {len(u)}")
        coords = dict(zip(names, u))
        return {
            n: _plain(d.value if isinstance(d, Constant) else d.from_unit(float(coords[n])))
            for n, d in self.params.items()
        }

    def to_unit(self, params: Mapping[str, Any]) -> list[float]:
        return [self.params[n].to_unit(params[n]) for n in self.searchable]

    def grid_axes(self) -> list[tuple[str, list[Any]]]:
        """(name, values) per parameter in W&B's grid order: sorted by name, the last varies fastest."""
        axes = []
        for name, dist in self.params.items():
            values = dist.grid_values()
            if values is None:
                raise SpecError(
                    f"grid search needs finite values, but {name!r} is {dist.kind}",
                    key=f"parameters.{name}",
                    expected="constant, categorical, int_uniform or q_uniform",
                    hint="use values: [...] or method: random",
                )
            axes.append((name, values))
        # W&B enumerates parameters sorted by name at every nesting level; the last varies fastest
        axes.sort(key=lambda axis: axis[0].split("."))
        return axes

    def grid(self) -> Iterator[dict[str, Any]]:
        """Every combination, in W&B's order; raises SpecError if a parameter is continuous."""
        axes = self.grid_axes()
        names = [a[0] for a in axes]
        for combo in itertools.product(*(a[1] for a in axes)):
            chosen = dict(zip(names, combo))
            yield {n: _plain(chosen[n]) for n in self.params}

    def grid_size(self) -> int | None:
        size = 1
        for dist in self.params.values():
            values = dist.grid_values()
            if values is None:
                return None
            size *= len(values)
        return size

    def contains(self, params: Mapping[str, Any]) -> bool:
        """True when `params` has exactly this space's names and every value is in its support."""
        return set(params) == set(self.params) and all(
            d.contains(params[n]) for n, d in self.params.items()
        )

    def describe(self) -> list[str]:
        return [d.describe() for d in self.params.values()]


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{"a.b": 1, "c": 2} -> {"a": {"b": 1}, "c": 2}."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise SpecError(
                    f"{'.'.join(parts[: i + 1])!r} is both a value and a group", key=key, value=value
                )
            node = child
        if isinstance(node.get(parts[-1]), dict) and not isinstance(value, dict):
            raise SpecError(f"{key!r} is both a value and a group", key=key, value=value)
        node[parts[-1]] = value
    return out


# --------------------------------------------------------------------------------------------------
# parsing

# kind -> (required keys, optional keys with W&B's defaults)
_KEYS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "constant": (("value",), {}),
    "categorical": (("values",), {}),
    "categorical_w_probabilities": (("values", "probabilities"), {}),
    "int_uniform": (("min", "max"), {}),
    "uniform": (("min", "max"), {}),
    "q_uniform": (("min", "max"), {"q": 1.0}),
    "log_uniform": (("min", "max"), {}),
    "log_uniform_values": (("min", "max"), {}),
    "q_log_uniform": (("min", "max"), {"q": 1.0}),
    "q_log_uniform_values": (("min", "max"), {"q": 1.0}),
    "inv_log_uniform": (("min", "max"), {}),
    "inv_log_uniform_values": (("min", "max"), {}),
    "normal": ((), {"mu": 0.0, "sigma": 1.0}),
    "q_normal": ((), {"mu": 0.0, "sigma": 1.0, "q": 1.0}),
    "log_normal": ((), {"mu": 0.0, "sigma": 1.0}),
    "q_log_normal": ((), {"mu": 0.0, "sigma": 1.0, "q": 1.0}),
    "beta": ((), {"a": 1.0, "b": 1.0}),
    "q_beta": ((), {"a": 1.0, "b": 1.0, "q": 1.0}),
}
_ALL_KEYS = sorted({"distribution", "parameters"} | {k for r, o in _KEYS.values() for k in (*r, *o)})
_POSITIVE_VALUES = {"log_uniform_values", "q_log_uniform_values", "inv_log_uniform_values"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


class _Parser:
    def __init__(self, file: str | None) -> None:
        self.file = file
        self.params: dict[str, Distribution] = {}

    def error(self, message: str, key: str, **kw: Any) -> SpecError:
        return SpecError(message, file=self.file, key=key, **kw)

    def block(self, raw: Any, key: str, prefix: str) -> None:
        if not isinstance(raw, Mapping):
            raise self.error("parameters must be a mapping of names to parameters", key, value=raw,
                             expected="a mapping like {lr: {min: 0.001, max: 0.1}}")
        if not raw and prefix:
            raise self.error("a nested parameters block is empty", key, expected="at least one parameter")
        for name, spec in raw.items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise self.error("invalid parameter name", f"{key}.{name}", value=name,
                                 expected="letters, digits, '_', '-' or '.', not starting with a digit")
            self.parameter(f"{prefix}{name}", spec, f"{key}.{name}")

    def parameter(self, name: str, raw: Any, key: str) -> None:
        if not isinstance(raw, Mapping):
            raise self.error("a parameter must be a mapping", key, value=raw,
                             expected="a mapping", hint=f"write {{value: {raw!r}}} for a constant")
        for k in raw:
            if k not in _ALL_KEYS:
                close = difflib.get_close_matches(str(k), _ALL_KEYS, n=1)
                raise self.error(f"unknown key {k!r}", f"{key}.{k}", expected=f"one of {', '.join(_ALL_KEYS)}",
                                 hint=f"did you mean {close[0]!r}?" if close else None)
        if "parameters" in raw:
            extra = sorted(set(raw) - {"parameters"})
            if extra:
                raise self.error(f"a nested parameter takes only 'parameters', not {extra[0]!r}",
                                 f"{key}.{extra[0]}")
            self.block(raw["parameters"], f"{key}.parameters", f"{name}.")
            return
        kind = self.kind(raw, key)
        required, optional = _KEYS[kind]
        for k in raw:
            if k != "distribution" and k not in required and k not in optional:
                raise self.error(f"key {k!r} does not apply to distribution {kind}", f"{key}.{k}",
                                 expected=f"keys {', '.join((*required, *optional)) or '(none)'}")
        for k in required:
            if k not in raw:
                raise self.error(f"distribution {kind} needs {k!r}", f"{key}.{k}",
                                 expected=f"keys {', '.join(required)}")
        conf = {**optional, **{k: v for k, v in raw.items() if k != "distribution"}}
        if name in self.params:
            raise self.error(f"parameter {name!r} is defined twice (nesting and a dotted name?)", key)
        self.params[name] = self.build(name, kind, conf, key)

    def kind(self, raw: Mapping[str, Any], key: str) -> str:
        if "distribution" in raw:
            kind = raw["distribution"]
            if kind not in _KEYS:
                close = difflib.get_close_matches(str(kind), list(_KEYS), n=1)
                raise self.error("unknown distribution", f"{key}.distribution", value=kind,
                                 expected=f"one of {', '.join(_KEYS)}",
                                 hint=f"did you mean {close[0]!r}?" if close else None)
            return str(kind)
        present = set(raw)
        groups = [g for g in (("value",), ("values", "probabilities"), ("min", "max"), ("mu", "sigma"), ("a", "b"))
                  if present & set(g)]
        if len(groups) > 1:
            a, b = min(present & set(groups[0])), min(present & set(groups[1]))
            raise self.error(f"cannot combine {a!r} with {b!r} without a distribution", f"{key}.{b}",
                             hint="add distribution: <name>")
        if "q" in present:
            raise self.error("'q' needs an explicit quantised distribution", f"{key}.q",
                             hint="add distribution: q_uniform (or q_log_uniform_values, q_normal, ...)")
        if not groups:
            raise self.error("cannot tell the distribution", key, value=dict(raw),
                             expected="value, values, min/max, mu/sigma or a distribution")
        group = groups[0]
        if group == ("value",):
            return "constant"
        if group == ("values", "probabilities"):
            return "categorical_w_probabilities" if "probabilities" in present else "categorical"
        if group == ("min", "max"):
            lo, hi = raw.get("min"), raw.get("max")
            ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi))
            return "int_uniform" if ints else "uniform"
        return "normal" if group == ("mu", "sigma") else "beta"

    def number(self, conf: Mapping[str, Any], k: str, key: str, *, integer: bool = False) -> Any:
        v = conf[k]
        if integer and not (isinstance(v, int) and not isinstance(v, bool)):
            raise self.error(f"{k} must be an integer", f"{key}.{k}", value=v, expected="an integer")
        if not _is_number(v) or not math.isfinite(v):
            hint = None
            if isinstance(v, str) and re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", v.strip()):
                hint = "YAML reads 1e-5 as a string; write 1.0e-5"
            raise self.error(f"{k} must be a finite number", f"{key}.{k}", value=v, expected="a number",
                             hint=hint)
        return v

    def positive(self, conf: Mapping[str, Any], k: str, key: str) -> Any:
        v = self.number(conf, k, key)
        if v <= 0:
            raise self.error(f"{k} must be positive", f"{key}.{k}", value=v, expected="a number > 0")
        return v

    def build(self, name: str, kind: str, conf: dict[str, Any], key: str) -> Distribution:
        cls = KINDS[kind]
        if kind == "constant":
            return Constant(name, _plain(conf["value"]))
        if kind.startswith("categorical"):
            values = conf["values"]
            if not isinstance(values, (list, tuple)):
                raise self.error("values must be a list", f"{key}.values", value=values, expected="a list")
            if not values:
                raise self.error("values is empty", f"{key}.values", value=values, expected="at least one value")
            values = tuple(_plain(list(values)))
            if kind == "categorical":
                return Categorical(name, values)
            probs = conf["probabilities"]
            if not isinstance(probs, (list, tuple)) or not all(_is_number(p) and p >= 0 for p in probs):
                raise self.error("probabilities must be a list of numbers >= 0", f"{key}.probabilities",
                                 value=probs, expected="a list of numbers >= 0")
            if len(probs) != len(values):
                raise self.error("probabilities and values differ in length", f"{key}.probabilities",
                                 value=probs, expected=f"{len(values)} probabilities")
            if abs(sum(probs) - 1.0) > 1e-6:
                raise self.error("probabilities do not sum to 1", f"{key}.probabilities", value=probs,
                                 expected="a sum of 1")
            return CategoricalWithProbabilities(name, values, tuple(float(p) for p in probs))
        args: dict[str, Any] = {}
        if "min" in conf:
            integer = kind == "int_uniform"
            lo = self.number(conf, "min", key, integer=integer)
            hi = self.number(conf, "max", key, integer=integer)
            if kind in _POSITIVE_VALUES and lo <= 0:
                raise self.error(f"{kind} needs min > 0 (min and max are values)", f"{key}.min", value=lo,
                                 expected="a number > 0",
                                 hint="use log_uniform for exponents" if "inv" not in kind else None)
            if lo >= hi:
                raise self.error("min must be less than max", f"{key}.min", value=lo, expected=f"< max ({hi})")
            args.update(min=lo, max=hi)
        if "mu" in conf:
            args.update(mu=self.number(conf, "mu", key), sigma=self.positive(conf, "sigma", key))
        if "a" in conf:
            args.update(a=self.positive(conf, "a", key), b=self.positive(conf, "b", key))
        if "q" in conf:
            args["q"] = self.positive(conf, "q", key)
        return cls(name, **args)


def parse_parameters(raw: Any, *, file: str | None = None, key: str = "parameters") -> SearchSpace:
    """Parse the `parameters` block of a sweep spec (W&B grammar) into a SearchSpace.

    Raises SpecError naming `file` and the key path (e.g. `parameters.lr.min`) of the first problem.
    """
    parser = _Parser(file)
    if raw is not None:
        parser.block(raw, key, "")
    return SearchSpace(dict(parser.params))
