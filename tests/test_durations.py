"""One duration grammar everywhere: the spec's budget and trial keys, a monitor's `after`, CheckpointPolicy.

Before, each had its own parser: "5min" worked for `trial.timeout` but not for a monitor's `after`, and
"1h30m", "500ms" or "90" failed in `CheckpointPolicy`. Every site now reads `sweeplab._values.parse_duration`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sweeplab.checkpoint import CheckpointPolicy
from sweeplab.errors import SpecError
from sweeplab.monitors import parse_monitors
from sweeplab.spec import parse_duration, parse_spec

BASE: dict[str, Any] = {"function": "m:f", "method": "grid", "parameters": {"x": {"values": [1]}}}


def _timeout(text: str) -> float:
    return parse_spec({**BASE, "trial": {"timeout": text}}, file="sweep.yaml").trial.timeout  # type: ignore[return-value]


def _budget_time(text: str) -> float:
    return parse_spec({**BASE, "budget": {"time": text}}, file="sweep.yaml").budget.time  # type: ignore[return-value]


def _checkpoint_every(text: str) -> float:
    return parse_spec({**BASE, "trial": {"checkpoint_every": text}}, file="sweep.yaml").trial.checkpoint_every  # type: ignore[return-value]


def _monitor_after(text: str) -> float:
    (monitor,) = parse_monitors([{"stalled": {"after": text}}], file="sweep.yaml")
    return monitor.after  # type: ignore[attr-defined,no-any-return]


def _policy(text: str) -> float:
    policy = CheckpointPolicy(text)
    assert policy.mode == "seconds"
    return float(policy.interval() or 0.0)


SITES: dict[str, Callable[[str], float]] = {
    "trial.timeout": _timeout, "budget.time": _budget_time, "trial.checkpoint_every": _checkpoint_every,
    "monitor after": _monitor_after, "CheckpointPolicy": _policy,
}
GOOD = [("5min", 300.0), ("1h30m", 5400.0), ("500ms", 0.5), ("90", 90.0), ("1.5h", 5400.0),
        ("2 hours", 7200.0), ("1h 30m 10s", 5410.0), ("45s", 45.0), ("1d", 86400.0), (" 5M ", 300.0)]


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize(("text", "seconds"), GOOD, ids=[t for t, _ in GOOD])
def test_every_site_reads_the_same_grammar(site: str, text: str, seconds: float) -> None:
    assert SITES[site](text) == pytest.approx(seconds)


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("text", ["10 parsecs", "soon", "1h30", "-5m", "5m!"])
def test_every_site_refuses_the_same_mistakes_naming_the_key(site: str, text: str) -> None:
    with pytest.raises(SpecError) as info:
        SITES[site](text)
    assert info.value.key is not None
    assert repr(text) in str(info.value)
    assert "duration" in str(info.value)


@pytest.mark.parametrize(("text", "hint"), [("01:30:00", "write 1h30m0s"), ("1:30", "write 1h30m or 1m30s")])
def test_a_clock_time_is_refused_with_the_duration_to_write(text: str, hint: str) -> None:
    # SLURM users write --time=01:30:00; it was "missing duration unit"
    with pytest.raises(SpecError, match="a clock time is not a duration here") as info:
        parse_duration(text, key="budget.time")
    assert hint in str(info.value)
