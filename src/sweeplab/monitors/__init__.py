"""Training-health monitors: rules over a trial's metric history that stop (or flag) a sick trial.

Spec form (`monitors:` in a sweep spec), a bare name or a one-key mapping name -> options:

    monitors: [nan, {plateau: {metric: val_loss, patience: 5}}, {exploding: {metric: grad_norm, factor: 10}}]

Python form, the same objects: `from sweeplab.monitors import nan, plateau; monitors=[nan(), plateau("val_loss")]`.

Rules (every one accepts `action: stop | warn`, default stop):
    nan          a NaN/inf value in the sweep's metrics or a loss-like one, in `metrics: [...]`, or `all`
    diverging    `metric` worse than `factor` x its best so far and than its first value, from step `min_steps`
    plateau      `metric` did not improve by more than `min_delta` for `patience` reports
    exploding    gradient norm `metric` above `threshold`, or above `factor` x its running median (NaN/inf:
                 skipped, a step mixed precision skips)
    vanishing    gradient norm `metric` below `threshold` for `patience` reports in a row
    overfitting  the gap between `val` and `train` (worse side: val) grew for `patience` reports in a row
                 while `val` reached no new best
    stalled      no progress for `after` (e.g. 10m, 30s, or seconds): no report of a watched metric (as nan's
                 default, or `metrics`) at a new step or with a new value; judged as reports arrive (`heard`)
    custom       custom(fn): fn(trial, points) -> Verdict | bool | str | None (True or a str: fire)

A monitor is pure logic, one instance per sweep with per-trial state that is a deterministic function of the
calls (the driver rebuilds it after a restart by replaying the stored points). A `stop` monitor fires at most
once per trial (the driver then stops it: STOPPED_BY_RULE); a `warn` monitor (Decision.WARN, an event) fires
again only after its condition cleared, so a long plateau gives one warning, not one per report.

One concern a file: `_base.py` (`Monitor`), `_value_rules.py` (nan, diverging, plateau, exploding, vanishing),
`_trial_rules.py` (overfitting, stalled, custom), `_parsing.py` (the spec's `monitors:`), `_constructors.py`
(the Python form), `_util.py` (shared helpers).
"""

from __future__ import annotations

from sweeplab.monitors._base import ACTIONS as ACTIONS
from sweeplab.monitors._base import CustomFn as CustomFn
from sweeplab.monitors._base import Monitor
from sweeplab.monitors._constructors import custom, diverging, exploding, nan, overfitting, plateau, stalled, vanishing
from sweeplab.monitors._parsing import parse_monitors
from sweeplab.monitors._trial_rules import CustomMonitor as CustomMonitor
from sweeplab.monitors._trial_rules import OverfittingMonitor as OverfittingMonitor
from sweeplab.monitors._trial_rules import StalledMonitor as StalledMonitor
from sweeplab.monitors._util import parse_duration
from sweeplab.monitors._value_rules import DivergingMonitor as DivergingMonitor
from sweeplab.monitors._value_rules import ExplodingMonitor as ExplodingMonitor
from sweeplab.monitors._value_rules import NanMonitor as NanMonitor
from sweeplab.monitors._value_rules import PlateauMonitor as PlateauMonitor
from sweeplab.monitors._value_rules import VanishingMonitor as VanishingMonitor

__all__ = [
    "Monitor",
    "custom",
    "diverging",
    "exploding",
    "nan",
    "overfitting",
    "parse_duration",
    "parse_monitors",
    "plateau",
    "stalled",
    "vanishing",
]
