"""The space: flat, dotted names -> distributions (sampling, grid enumeration, unit encoding), and `unflatten`.

A space may be conditional: `conditions` maps a parameter to the `Condition` under which it exists (its
parent takes one of some values). An inactive parameter is absent from a suggestion, never None. Parents
come before their children in `params`, so one pass in order decides what is active.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sweeplab.errors import SpecError
from sweeplab.space.discrete import Constant, Distribution
from sweeplab.space.values import _canonical, _plain, _same

if TYPE_CHECKING:
    from sweeplab.space.values import UnitSource


# --------------------------------------------------------------------------------------------------
# the space


@dataclass(frozen=True)
class Condition:
    """A parameter exists only when `parent` exists and takes one of `values`."""

    parent: str
    values: tuple[Any, ...]

    def holds(self, params: Mapping[str, Any]) -> bool:
        return self.parent in params and any(_same(params[self.parent], v) for v in self.values)

    def describe(self) -> str:
        return f"if {self.parent} in {list(self.values)!r}"


@dataclass(frozen=True)
class SearchSpace:
    """Flat, dotted parameter names -> distributions, in spec order (constants included); parents before
    their children when `conditions` is not empty. `keys`: each name's spec key path (for messages)."""

    params: Mapping[str, Distribution]
    conditions: Mapping[str, Condition] = field(default_factory=dict)
    keys: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def conditional(self) -> bool:
        return bool(self.conditions)

    def is_active(self, name: str, params: Mapping[str, Any]) -> bool:
        """Whether `name` exists given the values chosen so far (its parent's value in `params`)."""
        cond = self.conditions.get(name)
        return cond is None or cond.holds(params)

    def prune(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """`params` without the parameters that are inactive (in space order; unknown names dropped)."""
        out: dict[str, Any] = {}
        for name in self.params:
            if name in params and self.is_active(name, out):
                out[name] = params[name]
        return out

    @property
    def searchable(self) -> list[str]:
        """Names of the non-constant parameters: one unit coordinate each."""
        return [n for n, d in self.params.items() if not isinstance(d, Constant)]

    @property
    def dimension(self) -> int:
        return len(self.searchable)

    def sample(self, rng: UnitSource) -> dict[str, Any]:
        """One draw per active parameter, in order (an inactive one draws nothing)."""
        if not self.conditions:
            return {n: _plain(d.sample(rng)) for n, d in self.params.items()}
        out: dict[str, Any] = {}
        for n, d in self.params.items():
            if self.is_active(n, out):
                out[n] = _plain(d.sample(rng))
        return out

    def from_unit(self, u: Sequence[float]) -> dict[str, Any]:
        names = self.searchable
        if len(u) != len(names):
            raise ValueError(f"expected {len(names)} unit coordinates, got {len(u)}")
        coords = dict(zip(names, u))
        out: dict[str, Any] = {}
        for n, d in self.params.items():   # a conditional space ignores the coordinates of inactive ones
            if self.is_active(n, out):
                out[n] = _plain(d.value if isinstance(d, Constant) else d.from_unit(float(coords[n])))
        return out

    def to_unit(self, params: Mapping[str, Any]) -> list[float]:
        """One coordinate per searchable parameter; 0.5 (the middle) for one absent from `params`."""
        return [self.params[n].to_unit(params[n]) if n in params else 0.5 for n in self.searchable]

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
        # W&B enumerates parameters sorted by the keys written at every nesting level; the last varies fastest
        axes.sort(key=lambda axis: self._wandb_path(axis[0]))
        return axes

    def _wandb_path(self, name: str) -> list[str]:
        """The keys W&B sorts `name` by, one per nesting level (wandb/sweeps params.py, HyperParameterSet.
        from_config sorts each `parameters` block's keys as strings): `opt.lr` nested is ["opt", "lr"], but
        `data.dir` written flat is the one key "data.dir" (after `data-size`: '-' sorts before '.'). Read from
        the name's spec key path; a space without it, or a conditional one (sweeplab's), sorts by the name's
        dotted parts."""
        key = self.keys.get(name)
        if key is None or self.conditions or not key.startswith("parameters."):
            return name.split(".")
        return key[len("parameters."):].split(".parameters.")

    def grid(self) -> Iterator[dict[str, Any]]:
        """Every combination, in W&B's order; raises SpecError if a parameter is continuous.

        A conditional space enumerates its tree: only valid combinations, each once."""
        axes = self.grid_axes()
        if self.conditions:
            yield from (self.grid_point(k) for k in range(self.grid_size() or 0))
            return
        names = [a[0] for a in axes]
        for combo in itertools.product(*(a[1] for a in axes)):
            chosen = dict(zip(names, combo))
            yield {n: _plain(chosen[n]) for n in self.params}

    def _tree_axes(self) -> list[tuple[str, list[Any]]]:
        """The grid axes reordered so that each parent comes before its children (else W&B's order)."""
        axes = self.grid_axes()
        by_name = dict(axes)
        out: list[tuple[str, list[Any]]] = []
        placed: set[str] = set()

        def place(name: str) -> None:
            if name in placed:
                return
            cond = self.conditions.get(name)
            if cond is not None:
                place(cond.parent)
            placed.add(name)
            out.append((name, by_name[name]))

        for name, _ in axes:
            place(name)
        return out

    def _count(self, axes: list[tuple[str, list[Any]]], i: int, chosen: dict[str, Any],
               memo: dict[Any, int]) -> int:
        """How many valid completions axes[i:] have given the values `chosen` so far."""
        if i == len(axes):
            return 1
        parents = {c.parent for c in self.conditions.values()}
        key = (i, tuple(_canonical(chosen[p]) if p in chosen else "-" for p in sorted(parents)))
        if key in memo:
            return memo[key]
        name, values = axes[i]
        if not self.is_active(name, chosen):
            total = self._count(axes, i + 1, chosen, memo)
        elif name not in parents:
            total = len(values) * self._count(axes, i + 1, chosen, memo)
        else:
            total = sum(self._count(axes, i + 1, {**chosen, name: v}, memo) for v in values)
        memo[key] = total
        return total

    def grid_point(self, k: int) -> dict[str, Any]:
        """The k-th valid combination of a (conditional) space: parents first, the last axis fastest."""
        axes = self._tree_axes()
        memo: dict[Any, int] = {}
        parents = {c.parent for c in self.conditions.values()}
        chosen: dict[str, Any] = {}
        for i, (name, values) in enumerate(axes):
            if not self.is_active(name, chosen):
                continue
            if name not in parents:
                sub = self._count(axes, i + 1, chosen, memo)
                j, k = divmod(k, sub)
                chosen[name] = values[j]
                continue
            for v in values:
                sub = self._count(axes, i + 1, {**chosen, name: v}, memo)
                if k < sub:
                    chosen[name] = v
                    break
                k -= sub
        return {n: _plain(chosen[n]) for n in self.params if n in chosen}

    def grid_size(self) -> int | None:
        if self.conditions:
            if any(d.grid_values() is None for d in self.params.values()):
                return None
            return self._count(self._tree_axes(), 0, {}, {})
        size = 1
        for dist in self.params.values():
            values = dist.grid_values()
            if values is None:
                return None
            size *= len(values)
        return size

    def contains(self, params: Mapping[str, Any]) -> bool:
        """True when `params` has exactly this space's active names and every value is in its support."""
        if self.conditions:
            active: dict[str, Any] = {}
            for name in self.params:
                if self.is_active(name, active):
                    if name not in params:
                        return False
                    active[name] = params[name]
            return set(active) == set(params) and all(self.params[n].contains(v) for n, v in params.items())
        return set(params) == set(self.params) and all(
            d.contains(params[n]) for n, d in self.params.items()
        )

    def describe(self) -> list[str]:
        return [d.describe() + (f" {self.conditions[n].describe()}" if n in self.conditions else "")
                for n, d in self.params.items()]


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{"a.b": 1, "c": 2} -> {"a": {"b": 1}, "c": 2}.

    A dotted name under another name of `flat` stays one key, as W&B keeps it: `{"model": "resnet50",
    "model.dropout": 0.3}` (Hydra overrides `model=resnet50 model.dropout=0.3`, which W&B sweeps run) is
    those two keys, not a value that is also a group."""
    out: dict[str, Any] = {}
    dotted = [k for k in flat if "." in k]
    under = {k for k in dotted if any(".".join(k.split(".")[:i]) in flat for i in range(1, k.count(".") + 1))}
    for key, value in flat.items():
        if key in under:
            out[key] = value
            continue
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
