"""The spec's `monitors:` list: option schema per rule, validation with key paths, `parse_monitors`."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sweeplab import _values
from sweeplab.errors import SpecError
from sweeplab.monitors._base import ACTIONS, Monitor
from sweeplab.monitors._trial_rules import OverfittingMonitor, StalledMonitor
from sweeplab.monitors._util import _goal_text, parse_duration
from sweeplab.monitors._value_rules import (
    ALL,
    DivergingMonitor,
    ExplodingMonitor,
    NanMonitor,
    PlateauMonitor,
    VanishingMonitor,
)
from sweeplab.types import Goal

_REQUIRED = object()

# name -> option -> (kind, default). Kinds: see _coerce.
_SCHEMA: dict[str, dict[str, tuple[str, Any]]] = {
    "nan": {"metrics": ("names", None)},
    "diverging": {"metric": ("name", _REQUIRED), "factor": ("factor", 10.0), "goal": ("goal", "minimize"),
                  "min_steps": ("count0", 0)},
    "plateau": {"metric": ("name", _REQUIRED), "patience": ("count1", 5), "min_delta": ("number0", 0.0),
                "goal": ("goal", "minimize")},
    "exploding": {"metric": ("name", "grad_norm"), "threshold": ("positive", None),
                  "factor": ("factor", None)},
    "vanishing": {"metric": ("name", "grad_norm"), "threshold": ("positive", 1e-7),
                  "patience": ("count1", 3)},
    "overfitting": {"train": ("name", _REQUIRED), "val": ("name", _REQUIRED), "patience": ("count1", 5),
                    "min_delta": ("number0", 0.0), "goal": ("goal", "minimize")},
    "stalled": {"after": ("duration", _REQUIRED), "metrics": ("names", None)},
    "custom": {},
}
_BUILD: dict[str, Callable[..., Monitor]] = {
    "nan": NanMonitor, "diverging": DivergingMonitor, "plateau": PlateauMonitor,
    "exploding": ExplodingMonitor, "vanishing": VanishingMonitor, "overfitting": OverfittingMonitor,
    "stalled": StalledMonitor,
}
_EXPECTED = {
    "name": "a metric name", "names": "a list of metric names, or all", "factor": "a number > 1",
    "goal": "minimize or maximize", "count0": "an integer >= 0", "count1": "an integer >= 1",
    "number0": "a number >= 0", "positive": "a number > 0", "duration": "a duration such as 30s, 10m, 1h",
    "action": "stop or warn",
}


def parse_monitors(
    raw: Sequence[Any] | None,
    *,
    file: str | None = None,
    key: str = "monitors",
    metric: str | None = None,
    goal: Goal | str | None = None,
    watch: Sequence[str] = (),
    goals: Mapping[str, Goal | str] | None = None,
) -> list[Monitor]:
    """Build the monitors of a spec's `monitors:` list. Monitor instances pass through unchanged.

    `metric`/`goal` are the sweep's: `diverging` and `plateau` watch that metric when they name none.
    `goals`: the goal of each of the sweep's objectives (with several); `metric`/`goal` count as one. A rule
    that watches an objective (`diverging`/`plateau`'s `metric`, `overfitting`'s `val`) without a `goal` of its
    own judges it by that objective's goal: an accuracy the sweep maximizes is not judged as a loss.
    `watch` names the sweep's other judged metrics (objectives, the scheduler's, the constraints'): with
    `metric`, they are what `nan` watches besides the loss-like metrics when it names none.
    Bad input raises SpecError naming the key path (`monitors[1].plateau.patience`), the value and the fix.
    """
    if raw is None:
        return []
    if isinstance(raw, (str, Mapping)) or not isinstance(raw, Sequence):
        raise SpecError("monitors must be a list", file=file, key=key, value=raw,
                        expected="a list of names or one-key mappings",
                        hint="e.g. monitors: [nan, {plateau: {metric: val_loss, patience: 5}}]")
    out: list[Monitor] = []
    known: dict[str, Goal | str] = dict(goals or {})
    if metric is not None and goal is not None:
        known.setdefault(metric, goal)
    sweep_metrics = tuple(dict.fromkeys([*([metric] if metric else []), *watch]))
    for i, item in enumerate(raw):
        where = f"{key}[{i}]"
        if isinstance(item, Monitor):
            if isinstance(item, (NanMonitor, StalledMonitor)):
                item.bind(sweep_metrics)
            watched = getattr(item, "val", None) if isinstance(item, OverfittingMonitor) \
                else getattr(item, "metric", None)
            if getattr(item, "goal_from_sweep", False):   # built without a goal: this sweep's, else minimize
                mine = known.get(watched) if isinstance(watched, str) else None
                item.goal = Goal(_goal_text(mine)) if mine is not None else Goal.MINIMIZE  # type: ignore[attr-defined]
            out.append(item)
            continue
        opts: Any = {}
        if isinstance(item, str):
            name = item
        elif isinstance(item, Mapping) and len(item) == 1:
            name, opts = next(iter(item.items()))
            opts = {} if opts is None else opts
            if not isinstance(opts, Mapping):
                raise SpecError("monitor options must be a mapping", file=file, key=f"{where}.{name}",
                                value=opts, expected="option: value pairs",
                                hint=f"e.g. {{{name}: {{action: warn}}}}")
        else:
            raise SpecError("a monitor is a name or a one-key mapping", file=file, key=where, value=item,
                            expected="nan, or {plateau: {metric: val_loss}}")
        if name == "custom" and isinstance(opts, Mapping):   # how a sweep stores a rule of your own
            raise SpecError("a rule of your own is a Python function, which a sweep cannot store", file=file,
                            key=where, value=f"custom {opts.get('name', '?')!r}",
                            expected="a built-in monitor (a rule made in Python is kept as its options)",
                            hint="`sweeplab resume` cannot run it; start a new sweep from Python with the rule")
        if not isinstance(name, str) or name not in _BUILD:
            close = difflib.get_close_matches(str(name), list(_BUILD), n=1)
            raise SpecError("unknown monitor", file=file, key=where, value=name,
                            expected="one of " + ", ".join(sorted(_BUILD)),
                            hint=f"did you mean '{close[0]}'?" if close else
                            "a rule of your own is custom(fn) in Python")
        opts = dict(opts)
        if name in ("diverging", "plateau") and opts.get("metric") is None and metric is not None:
            opts["metric"] = metric          # default to the sweep's metric
        watched = opts.get("val") if name == "overfitting" else opts.get("metric")
        if name in ("diverging", "plateau", "overfitting") and opts.get("goal") is None \
                and isinstance(watched, str) and watched in known:
            opts["goal"] = _goal_text(known[watched])   # ... and the goal of the objective it watches
        built = _BUILD[name](**_read(name, opts, key=f"{where}.{name}", file=file))
        if isinstance(built, (NanMonitor, StalledMonitor)):
            built.bind(sweep_metrics)
        out.append(built)
    return out


def _read(name: str, raw: Mapping[str, Any], *, key: str | None = None, file: str | None = None
          ) -> dict[str, Any]:
    """Validate one monitor's options (spec or Python kwargs) into constructor keyword arguments."""
    key = key or name
    schema = {**_SCHEMA[name], "action": ("action", "stop")}
    _values.check_keys(raw, sorted(schema), key=key, file=file, what=f"option for monitor {name}:")
    out: dict[str, Any] = {}
    for option, (kind, default) in schema.items():
        value = raw.get(option)
        if value is None:
            if default is _REQUIRED:
                raise SpecError(f"monitor {name} needs {option}", file=file, key=f"{key}.{option}",
                                expected=_EXPECTED[kind], hint=f"add {option}: ...")
            out[option] = default
            continue
        out[option] = _coerce(kind, value, key=f"{key}.{option}", file=file)
    return out


def _coerce(kind: str, v: Any, *, key: str, file: str | None) -> Any:
    """One option value by its kind (see _EXPECTED), through the shared validators of `sweeplab._values`."""
    def bad(message: str) -> SpecError:
        return SpecError(message, file=file, key=key, value=v, expected=_EXPECTED[kind])

    if kind == "name":
        return _values.name(v, key=key, file=file, what="a metric name")
    if kind == "names":
        if v == ALL:
            return ALL     # every metric (nan)
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, Sequence) or not all(isinstance(x, str) and x for x in v):
            raise bad("must be a list of metric names")
        return list(v)
    if kind == "goal":
        if v not in ("minimize", "maximize"):
            raise bad("unknown goal")
        return Goal(v)
    if kind == "action":
        if v not in ACTIONS:
            raise bad("unknown action")
        return v
    if kind == "duration":
        return parse_duration(v, key=key, file=file)
    if kind in ("count0", "count1"):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        return _values.integer(v, key=key, file=file, minimum=1 if kind == "count1" else 0,
                               hint="patience counts reports: 1 fires on the first bad one")
    if kind == "factor":
        return _values.number(v, key=key, file=file, above=1.0, hint="factor: 10 means ten times its reference")
    if kind == "positive":
        return _values.number(v, key=key, file=file, above=0.0)
    return _values.number(v, key=key, file=file, minimum=0.0)

