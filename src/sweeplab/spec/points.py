"""`points_to_evaluate`: configurations the sweep runs first, before its searcher suggests any (Ray Tune's and
Syne Tune's `points_to_evaluate`, Optuna's `enqueue_trial`): the defaults a user already trusts, a published
setting, last week's best.

Each point maps parameter names (dotted, `model.hidden`, or nested, `model: {hidden: 64}`) to values inside
the parameter's distribution. A parameter a point leaves out takes the base config's value at the same key
(`complete_point`, called by the driver once the config is read), so `- {}` is "the base config as it is".
The driver creates the points as the sweep's first trials, queued, and replays them to the searcher as a resume
replays trials created before it: model-based searchers treat them as running trials, then learn their results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sweeplab.errors import SpecError
from sweeplab.space import Constant, SearchSpace
from sweeplab.space.continuous import _Continuous, _Quantized
from sweeplab.space.discrete import Categorical, IntUniform
from sweeplab.space.values import quantize

__all__ = ["complete_point", "complete_points", "parse_points"]

_KEY = "points_to_evaluate"


def parse_points(raw: Any, space: SearchSpace, method: str, trials: int | None, *,
                 file: str | None) -> tuple[dict[str, Any], ...]:
    """The spec's points as flat dicts of the parameters they give (checked against `space`)."""
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        raise SpecError("must be a list of mappings", file=file, key=_KEY, value=raw,
                        expected="a list like [{lr: 0.001, batch_size: 64}, {}]")
    if method == "grid" and raw:
        raise SpecError("grid tries every combination already", file=file, key=_KEY,
                        hint="use method random, sobol, tpe, gp or bayes, or drop points_to_evaluate")
    if trials is not None and len(raw) > trials:
        raise SpecError(f"{len(raw)} points but budget.trials is {trials}", file=file, key=_KEY,
                        expected=f"at most {trials} points, or a larger budget.trials")
    return tuple(_point(item, space, f"{_KEY}[{i}]", file) for i, item in enumerate(raw))


def _point(raw: Any, space: SearchSpace, key: str, file: str | None) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SpecError("a point must be a mapping of parameter names to values", file=file, key=key, value=raw,
                        expected="a mapping like {lr: 0.001, model.hidden: 64}")
    out: dict[str, Any] = {}
    _flatten(raw, "", space, key, file, out)
    for name, value in out.items():
        dist = space.params[name]
        if isinstance(dist, Constant):
            continue
        if not dist.contains(value):
            raise SpecError("outside the parameter's distribution", file=file, key=f"{key}.{name}", value=value,
                            expected=_describe(dist))
        out[name] = _as_drawn(dist, value)
    return out


def _flatten(raw: Mapping[Any, Any], prefix: str, space: SearchSpace, key: str, file: str | None,
             out: dict[str, Any]) -> None:
    for k, v in raw.items():
        name = f"{prefix}{k}"
        if not isinstance(k, str):
            raise SpecError("a parameter name must be a string", file=file, key=f"{key}.{name}", value=k)
        if name in space.params:
            out[name] = v
        elif isinstance(v, Mapping) and any(p.startswith(f"{name}.") for p in space.params):
            _flatten(v, f"{name}.", space, key, file, out)
        else:
            known = ", ".join(space.params) or "none"
            raise SpecError("not a parameter of the sweep", file=file, key=f"{key}.{name}", value=v,
                            expected=f"one of: {known}")


def complete_points(spec: Any, base: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every point of `spec` completed from `base`, the base config as the trials get it (config < profile <
    overrides)."""
    file = str(spec.source) if spec.source else None
    return [complete_point(p, spec.space, base, i, file=file) for i, p in enumerate(spec.points)]


def complete_point(point: Mapping[str, Any], space: SearchSpace, base: Mapping[str, Any], index: int, *,
                   file: str | None) -> dict[str, Any]:
    """Every active parameter of `space` for `point`, in the space's order: the point's value, else a
    constant's, else the base config's value at the parameter's key. An error names what is missing."""
    key = f"{_KEY}[{index}]"
    out: dict[str, Any] = {}
    for name, dist in space.params.items():
        if not space.is_active(name, out):
            if name in point:
                raise SpecError("given for a parameter its conditions leave out", file=file, key=f"{key}.{name}",
                                value=point[name], expected=_condition(space, name))
            continue
        if isinstance(dist, Constant):
            out[name] = dist.value
        elif name in point:
            out[name] = point[name]
        else:
            found, value = _lookup(base, name)
            if not found:
                raise SpecError("no value for this parameter: the point leaves it out and the base config has no "
                                f"key {name}", file=file, key=f"{key}.{name}",
                                expected=f"a value in {_describe(dist)}")
            if not dist.contains(value):
                raise SpecError(f"the base config's {name} is outside the parameter's distribution", file=file,
                                key=f"{key}.{name}", value=value, expected=f"a value in {_describe(dist)}, given "
                                "in the point")
            out[name] = _as_drawn(dist, value)
    return out


def _lookup(config: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """The value at dotted `name` in a nested config (a flat key holding the dots wins, as W&B writes them)."""
    if name in config:
        return True, config[name]
    head, dot, rest = name.partition(".")
    if dot and isinstance(config.get(head), Mapping):
        return _lookup(config[head], rest)
    return False, None


def _as_drawn(dist: Any, value: Any) -> Any:
    """The value as the searcher would have drawn it: `lr: 1` for a uniform parameter is 1.0, `n: 2.0` for
    an int_uniform one 2, `0.5` for q 0.25 the multiple of q quantize() gives, a categorical's own value."""
    import copy

    if isinstance(dist, Categorical):
        index = dist.index_of(value)
        return copy.deepcopy(dist.values[index]) if index is not None else value
    if isinstance(dist, IntUniform):
        return int(value)
    if isinstance(dist, _Quantized):
        return quantize(value, dist.q)
    if isinstance(dist, _Continuous):
        return float(value)
    return value


def _describe(dist: Any) -> str:
    return str(dist.describe())


def _condition(space: SearchSpace, name: str) -> str:
    cond = space.conditions.get(name)
    return f"no value: the parameter exists only {cond.describe()}" if cond is not None else "no value"
