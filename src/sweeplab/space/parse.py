"""Parsing the W&B `parameters` grammar into a `SearchSpace`, inferring distributions as W&B does.

Two keys extend W&B's grammar with conditional parameters (docs/spec.md, "Conditional parameters"):

    optimizer:                                   # `when`: per value of a finite parameter, the
      values: [adam, sgd]                        # parameters that exist only when it takes that value
      when:                                      # (siblings of `optimizer`; nested to any depth)
        sgd: {momentum: {min: 0.0, max: 0.99}}
    nesterov:                                    # `condition`: the same by name (ConfigSpace's
      values: [true, false]                      # InCondition), e.g. for several parent values
      condition: {param: optimizer, in: [sgd]}
"""

from __future__ import annotations

import difflib
import json
import math
import re
import sys
from collections.abc import Mapping
from typing import Any

from sweeplab._values import is_number as _finite
from sweeplab.errors import SpecError
from sweeplab.space.discrete import (
    MAX_GRID_VALUES,
    Categorical,
    CategoricalWithProbabilities,
    Constant,
    Distribution,
    GridTooLarge,
)
from sweeplab.space.kinds import KINDS
from sweeplab.space.searchspace import Condition, SearchSpace
from sweeplab.space.values import _canonical, _is_number, _plain, _short

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
_ALL_KEYS = sorted({"distribution", "parameters", "when", "condition"}
                   | {k for r, o in _KEYS.values() for k in (*r, *o)})
_CONDITIONAL_KEYS = ("when", "condition")   # sweeplab's, not W&B's: conditional parameters
_POSITIVE_VALUES = {"log_uniform_values", "q_log_uniform_values", "inv_log_uniform_values"}


_MISSING: Any = object()


def _when_value(dist: Distribution, written: Any) -> Any:
    """The parent's value a `when` key stands for: the key itself, or (JSON keys being strings, as in a
    stored spec) the one non-string value whose JSON or str() form it is (`"2"` for 2, `"true"` for True)."""
    if dist.contains(written):
        return written
    if isinstance(written, str):
        matches = [v for v in dist.grid_values() or [] if not isinstance(v, str)
                   and written in (json.dumps(v), str(v))]
        if len(matches) == 1:
            return matches[0]
    return _MISSING


class _Parser:
    def __init__(self, file: str | None) -> None:
        self.file = file
        self.params: dict[str, Distribution] = {}
        self.conditions: dict[str, Condition] = {}
        self.keys: dict[str, str] = {}                       # name -> its key path in the spec
        self.shared: dict[str, tuple[str, str]] = {}         # `when` child -> (parent, its definition)
        self.refs: list[tuple[list[str], Any, str]] = []     # (names, `condition` mapping, its key path)

    def error(self, message: str, key: str, **kw: Any) -> SpecError:
        return SpecError(message, file=self.file, key=key, **kw)

    def block(self, raw: Any, key: str, prefix: str, cond: Condition | None = None) -> None:
        if not isinstance(raw, Mapping):
            raise self.error("parameters must be a mapping of names to parameters", key, value=raw,
                             expected="a mapping like {lr: {min: 0.001, max: 0.1}}")
        if not raw and prefix:
            raise self.error("a nested parameters block is empty", key, expected="at least one parameter")
        for name, spec in raw.items():
            # any text: W&B's schema pattern (letters, digits, '_', '-', '.') is only a warning there, and Hydra
            # overrides use names such as +experiment or model/encoder (the spec parser warns about them)
            if not isinstance(name, str) or not name.strip():
                raise self.error("invalid parameter name", f"{key}.{name}", value=name,
                                 expected="a non-empty string such as lr or model.hidden")
            self.parameter(f"{prefix}{name}", spec, f"{key}.{name}", prefix, cond)

    def parameter(self, name: str, raw: Any, key: str, prefix: str = "", cond: Condition | None = None) -> None:
        if not isinstance(raw, Mapping):
            raise self.error("a parameter must be a mapping", key, value=raw,
                             expected="a mapping", hint=f"write {{value: {raw!r}}} for a constant")
        for k in raw:
            if k not in _ALL_KEYS:
                close = difflib.get_close_matches(str(k), _ALL_KEYS, n=1)
                raise self.error(f"unknown key {k!r}", f"{key}.{k}", expected=f"one of {', '.join(_ALL_KEYS)}",
                                 hint=f"did you mean {close[0]!r}?" if close else None)
        if "condition" in raw and cond is not None:
            raise self.error("a parameter under 'when' cannot also have a condition (it has its when)",
                             f"{key}.condition", hint="move it out of the when block, or drop the condition")
        if "parameters" in raw:
            extra = sorted(set(raw) - {"parameters", "condition"})
            if extra:
                raise self.error(f"a nested parameter takes only 'parameters' (and 'condition'), not {extra[0]!r}",
                                 f"{key}.{extra[0]}")
            before = set(self.params)
            self.block(raw["parameters"], f"{key}.parameters", f"{name}.", cond)
            if "condition" in raw:
                self.refs.append(([n for n in self.params if n not in before], raw["condition"], f"{key}.condition"))
            return
        kind = self.kind(raw, key)
        required, optional = _KEYS[kind]
        for k in raw:
            if k != "distribution" and k not in required and k not in optional and k not in _CONDITIONAL_KEYS:
                raise self.error(f"key {k!r} does not apply to distribution {kind}", f"{key}.{k}",
                                 expected=f"keys {', '.join((*required, *optional)) or '(none)'}")
        for k in required:
            if k not in raw:
                raise self.error(f"distribution {kind} needs {k!r}", f"{key}.{k}",
                                 expected=f"keys {', '.join(required)}")
        conf = {**optional, **{k: v for k, v in raw.items() if k != "distribution" and k not in _CONDITIONAL_KEYS}}
        if name in self.params:
            if self.share(name, raw, cond):
                return
            raise self.error(f"parameter {name!r} is defined twice (nesting and a dotted name, or two "
                             "different definitions under 'when')", key,
                             hint="a parameter shared by several when-values must be written the same in each")
        self.params[name] = self.build(name, kind, conf, key)
        self.keys[name] = key
        if cond is not None:
            self.conditions[name] = cond
            self.shared[name] = (cond.parent, _canonical(raw))
        if "condition" in raw:
            self.refs.append(([name], raw["condition"], f"{key}.condition"))
        if "when" in raw:
            self.when(name, raw["when"], f"{key}.when", prefix)

    # -- conditional parameters ------------------------------------------------------------------

    def share(self, name: str, raw: Mapping[str, Any], cond: Condition | None) -> bool:
        """A `when` child written identically under another value of the same parent: one parameter,
        active for both values. (Its own `when` children were added the first time.)"""
        if cond is None or self.shared.get(name) != (cond.parent, _canonical(raw)):
            return False
        old = self.conditions[name]
        self.conditions[name] = Condition(old.parent, (*old.values, *cond.values))
        return True

    def when(self, parent: str, raw: Any, key: str, prefix: str) -> None:
        dist = self.params[parent]
        try:
            values = dist.grid_values()
        except GridTooLarge as exc:
            raise self.error(f"'when' needs a parameter with a finite set of values: {exc}", key,
                             expected=f"at most {MAX_GRID_VALUES:,} values") from None
        if values is None:
            raise self.error(f"'when' needs a parameter with a finite set of values, but {parent!r} is {dist.kind}",
                             key, expected="values: [...], value, int_uniform or a quantised range")
        if not isinstance(raw, Mapping) or not raw:
            raise self.error("when must map values of the parameter to parameters", key, value=raw,
                             expected="a mapping like {sgd: {momentum: {min: 0.0, max: 0.99}}}")
        for written, block in raw.items():
            where = f"{key}.{written}"
            value = _when_value(dist, written)
            if value is _MISSING:
                raise self.error(f"{_short(written)} is not a value of {parent!r}", where, value=written,
                                 expected=f"one of {_short(list(dist.grid_values() or []), 200)}")
            if block is None or (isinstance(block, Mapping) and not block):
                continue   # a value with no parameters of its own, written for completeness
            self.block(block, where, prefix, Condition(parent, (_plain(value),)))

    def resolve(self) -> None:
        """Check every `condition: {param, in}`, then reject cycles (a parameter conditioned on itself,
        directly or through other parameters)."""
        for names, raw, key in self.refs:
            cond = self.reference(raw, key)
            for name in names:   # in a group: those under a `when` inside it keep that (narrower) condition
                self.conditions.setdefault(name, cond)
        referring = [n for names, _, _ in self.refs for n in names]   # name a `condition:` key if one is on it
        for name in dict.fromkeys([*referring, *self.conditions]):
            seen = [name]
            parent = self.conditions[name].parent
            while parent in self.conditions or parent == name:
                if parent in seen:
                    cycle = " -> ".join([*seen, parent])
                    raise self.error(f"conditions form a cycle: {cycle}", self.cond_key(name),
                                     expected="a tree: no parameter conditioned on itself, directly or not")
                seen.append(parent)
                parent = self.conditions[parent].parent

    def cond_key(self, name: str) -> str:
        for names, _, key in self.refs:
            if name in names:
                return key
        return self.keys.get(name, name)

    def reference(self, raw: Any, key: str) -> Condition:
        if not isinstance(raw, Mapping):
            raise self.error("a condition must be a mapping", key, value=raw,
                             expected="{param: optimizer, in: [sgd]}")
        for k in raw:
            if k not in ("param", "in"):
                raise self.error(f"unknown key {k!r}", f"{key}.{k}", expected="param and in")
        for k in ("param", "in"):
            if k not in raw:
                raise self.error(f"a condition needs {k!r}", f"{key}.{k}", expected="{param: optimizer, in: [sgd]}")
        parent = raw["param"]
        if not isinstance(parent, str) or parent not in self.params:
            close = difflib.get_close_matches(str(parent), list(self.params), n=1)
            raise self.error("condition on an unknown parameter", f"{key}.param", value=parent,
                             expected="the dotted name of a parameter of this spec",
                             hint=f"did you mean {close[0]!r}?" if close else None)
        dist = self.params[parent]
        try:
            finite = dist.grid_values()
        except GridTooLarge as exc:
            raise self.error(f"a condition needs a parameter with a finite set of values: {exc}", f"{key}.param",
                             value=parent, expected=f"at most {MAX_GRID_VALUES:,} values") from None
        if finite is None:
            raise self.error(f"a condition needs a parameter with a finite set of values, but {parent!r} is "
                             f"{dist.kind}", f"{key}.param", value=parent,
                             expected="a parameter with values: [...], value, int_uniform or a quantised range")
        values = raw["in"] if isinstance(raw["in"], (list, tuple)) else [raw["in"]]
        if not values:
            raise self.error("'in' is empty", f"{key}.in", value=raw["in"], expected="at least one value")
        for v in values:
            if not dist.contains(v):
                raise self.error(f"{_short(v)} is not a value of {parent!r}", f"{key}.in", value=v,
                                 expected=f"one of {_short(list(dist.grid_values() or []), 200)}")
        return Condition(parent, tuple(_plain(list(values))))

    def ordered(self) -> dict[str, Distribution]:
        """The parameters in spec order, each parent moved before its children."""
        out: dict[str, Distribution] = {}

        def place(name: str) -> None:
            if name in out:
                return
            if name in self.conditions:
                place(self.conditions[name].parent)
            out[name] = self.params[name]

        for name in self.params:
            place(name)
        return out

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
        if integer and isinstance(v, float) and v.is_integer():
            v = int(v)   # 1.0: W&B's schema takes it as an integer (jsonschema), and draws ints from it
        if integer and not (isinstance(v, int) and not isinstance(v, bool)):
            raise self.error(f"{k} must be an integer", f"{key}.{k}", value=v, expected="an integer")
        try:
            finite = _is_number(v) and math.isfinite(v)
        except OverflowError:   # an int beyond a float (max: 1e400 written as digits)
            raise self.error(f"{k} is too large", f"{key}.{k}", value=v,
                             expected=f"a number of magnitude below {sys.float_info.max:.4g}") from None
        if not finite:
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
            if not isinstance(probs, (list, tuple)) or not all(_finite(p) and p >= 0 for p in probs):
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
            if kind == "int_uniform" and lo == hi:   # W&B draws int(randint.ppf(x, lo, lo + 1)): always lo
                return Constant(name, lo)
            if lo >= hi:
                raise self.error("min must be less than max", f"{key}.min", value=lo, expected=f"< max ({hi})")
            try:
                span = float(hi) - float(lo)
            except OverflowError:   # an int beyond a float
                span = math.inf
            if not math.isfinite(span):   # a draw min + u * (max - min) would be inf or nan
                raise self.error("the range from min to max is wider than a float can hold", f"{key}.max",
                                 value=hi, expected=f"max - min below {sys.float_info.max:.4g}")
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
    if not parser.conditions and not parser.refs:
        return SearchSpace(dict(parser.params), keys=parser.keys)
    parser.resolve()
    return SearchSpace(parser.ordered(), dict(parser.conditions), keys=parser.keys)
