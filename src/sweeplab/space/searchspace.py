"""The space: flat, dotted names -> distributions (sampling, grid enumeration, unit encoding), and `unflatten`."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweeplab.errors import SpecError
from sweeplab.space.discrete import Constant, Distribution
from sweeplab.space.values import _plain

if TYPE_CHECKING:
    from sweeplab.space.values import UnitSource


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
