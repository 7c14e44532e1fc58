"""Reading user values: the one duration grammar and the one option validator.

Every place that reads a duration (`budget.time`, `trial.timeout`, `trial.checkpoint_every`, a monitor's
`after`, `CheckpointPolicy("5m")`) calls `parse_duration`; every place that reads typed options (the spec's
numbers, `early_terminate.*`, a monitor's options) uses the checks here. A mistake raises SpecError naming the
file, the key path, the bad value and what was expected:

    sweep.yaml: monitors[0].stalled.after: unknown duration unit 'parsecs'; got '10 parsecs'; expected ...

Durations: a number is seconds (`90`, `2.5`, also as text: `"90"`); text is one or more number-unit parts,
`"45s"`, `"30m"`, `"2h"`, `"1d"`, `"500ms"`, `"1.5h"`, `"1h30m"`, `"1h 30m 10s"`. Units (case-insensitive):
ms; s, sec, secs, second, seconds; m, min, mins, minute, minutes; h, hr, hrs, hour, hours; d, day, days.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sweeplab.errors import SpecError

__all__ = [
    "DURATION_EXPECTED",
    "DURATION_UNITS",
    "Options",
    "boolean",
    "check_keys",
    "decimal",
    "did_you_mean",
    "integer",
    "is_int",
    "is_number",
    "name",
    "number",
    "objective_of",
    "parse_duration",
    "shown_digits",
]

DURATION_UNITS: Mapping[str, float] = {
    "ms": 0.001, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}
DURATION_EXPECTED = "a duration like 45s, 30m, 2h, 1h30m, 1d, or a number of seconds"
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*")


def is_int(x: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    """A finite int or float that is not a bool (an int beyond a float's range, 10**400, is not one)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def decimal(text: str) -> int | None:
    """The integer `text` writes (`int(text)`: ValueError for what is no integer), or None for one of more
    digits than Python reads (`sys.get_int_max_str_digits()`, 4,300): a number beyond any trial, attempt or
    size, which `int()` refused with a ValueError ("Exceeds the limit"), as if it were no number."""
    try:
        return int(text)
    except ValueError:
        digits = text.strip().replace("_", "")
        digits = digits[1:] if digits[:1] in "+-" else digits
        if digits.isascii() and digits.isdigit():
            return None
        raise


def shown_digits(text: str) -> str:
    """A long number as an error names it: its first 20 digits and how many there are."""
    text = text.strip()
    return text if len(text) <= 40 else f"{text[:20]}...({len(text):,} digits)"


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """'did you mean 'x'?' for the closest of `choices`, or None."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


def parse_duration(
    value: Any,
    *,
    file: str | None = None,
    key: str = "duration",
    positive: bool = False,
    error: type[SpecError] = SpecError,
) -> float:
    """Seconds in `value`: "45s", "30m", "2h", "1h30m", "1.5h", "1d", "500ms", "90"; a number is seconds.

    `positive` refuses 0 (a monitor's `after`); `error` is the exception raised (ConfigError for the
    runtime's `CheckpointPolicy`).
    """
    expected = DURATION_EXPECTED if not positive else DURATION_EXPECTED + ", above 0"

    def bad(message: str, hint: str | None = None) -> SpecError:
        return error(message, file=file, key=key, value=_shown(value), expected=expected, hint=hint)

    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise bad("a duration must be a string or a number")
    if isinstance(value, (int, float)):
        seconds = float(value) if is_number(value) else math.inf   # 10**400 seconds: refused below
    else:
        s = value.strip().lower()
        if not s:
            raise bad("empty duration")
        if s.startswith("-"):
            raise bad("a duration cannot be negative")
        clock = re.fullmatch(r"(\d+):(\d\d)(?::(\d\d))?", s)
        if clock:   # SLURM's 01:30:00; 1:30 is 1 h 30 min there, and 1 min 30 s elsewhere
            # as text, not int(): 5,000 digits of hours made int() raise (a traceback)
            h, m, sec = (shown_digits(g.lstrip("0") or "0") if g else g for g in clock.groups())
            raise bad("a clock time is not a duration here",
                      f"write {h}h{m}m{sec}s" if sec is not None else f"write {h}h{m}m or {h}m{m}s")
        pos, seconds, parts = 0, 0.0, 0
        for match in _DURATION_PART.finditer(s):
            if match.start() != pos:
                break
            amount, unit = match.groups()
            if not unit:
                if match.end() != len(s) or parts:
                    raise bad("missing duration unit")
                unit = "s"
            if unit not in DURATION_UNITS:
                raise bad(f"unknown duration unit {_shown(unit)!r}",
                          did_you_mean(unit, DURATION_UNITS) or "units: ms, s, m, h, d")
            seconds += float(amount) * DURATION_UNITS[unit]
            pos, parts = match.end(), parts + 1
        if pos != len(s) or parts == 0:
            raise bad("not a duration")
    if not math.isfinite(seconds) or seconds < 0:
        raise bad("a duration must be finite and >= 0")
    if positive and seconds == 0:
        raise bad("a duration must be above 0")
    return seconds


class _Abbreviated(str):
    """A value's text cut short for an error message; shown as is (not quoted again)."""

    def __repr__(self) -> str:
        return str(self)


def _shown(value: Any) -> Any:
    """`value`, or its first 77 characters of repr when longer than 80: one line of an error, not 5 KB."""
    text = repr(value)
    return value if len(text) <= 80 else _Abbreviated(f"{text[:77]}...({len(text):,} characters)")


# ------------------------------------------------------------------------------------- typed values

def _error(message: str, *, file: str | None, key: str, value: Any, expected: str, hint: str | None = None
           ) -> SpecError:
    return SpecError(message, file=file, key=key, value=value, expected=expected, hint=hint)


def integer(
    value: Any, *, key: str, file: str | None = None, minimum: int | None = None, hint: str | None = None
) -> int:
    """`value` as an int >= `minimum`. A float with an integral value (YAML `3.0`) is not an int."""
    expected = "an integer" if minimum is None else f"an integer >= {minimum}"
    if not is_int(value):
        raise _error("not an integer", file=file, key=key, value=value, expected=expected)
    if minimum is not None and value < minimum:
        raise _error(f"must be at least {minimum}", file=file, key=key, value=value, expected=expected, hint=hint)
    return int(value)


def number(
    value: Any,
    *,
    key: str,
    file: str | None = None,
    minimum: float | None = None,
    above: float | None = None,
    hint: str | None = None,
) -> float:
    """`value` as a finite float, >= `minimum` and > `above` when given."""
    if above is not None:
        expected = f"a number > {above:g}"
    elif minimum is not None:
        expected = f"a number >= {minimum:g}"
    else:
        expected = "a finite number"
    if not is_number(value):
        raise _error("not a number", file=file, key=key, value=value, expected=expected)
    if minimum is not None and value < minimum:
        raise _error(f"must be at least {minimum:g}", file=file, key=key, value=value, expected=expected, hint=hint)
    if above is not None and value <= above:
        raise _error(f"must exceed {above:g}", file=file, key=key, value=value, expected=expected, hint=hint)
    return float(value)


def boolean(value: Any, *, key: str, file: str | None = None) -> bool:
    """`value` as a bool (YAML true/false; no 0/1 or 'yes')."""
    if not isinstance(value, bool):
        raise _error("not true or false", file=file, key=key, value=value, expected="true or false")
    return value


def name(value: Any, *, key: str, file: str | None = None, what: str = "a name") -> str:
    """`value` as a non-empty string (a metric name, a scheduler's metric)."""
    if not isinstance(value, str) or not value.strip():
        raise _error(f"not {what}", file=file, key=key, value=value, expected=f"{what} (a non-empty string)")
    return value


def check_keys(raw: Mapping[str, Any], allowed: Sequence[str], *, key: str, file: str | None = None,
               what: str = "option") -> None:
    """Every key of `raw` is one of `allowed`, else an 'unknown option' error with a did-you-mean hint."""
    for k in raw:
        if k not in allowed:
            where = f"{key}.{k}" if key else str(k)
            raise SpecError(f"unknown {what} {k!r}", file=file, key=where,
                            expected="one of " + ", ".join(allowed),
                            hint=did_you_mean(str(k), allowed) or f"remove '{k}'")


class Options:
    """Reads one option mapping (`early_terminate`, a monitor's options) with the checks above.

    `o.integer("min_iter", 1, minimum=1)` is the option's value, or the default when it is absent or null;
    every error names `key.option`.
    """

    def __init__(self, raw: Mapping[str, Any], *, key: str, file: str | None, allowed: Iterable[str]) -> None:
        self.raw, self.key, self.file = raw, key, file
        check_keys(raw, sorted(allowed), key=key, file=file)

    def _key(self, option: str) -> str:
        return f"{self.key}.{option}"

    def has(self, option: str) -> bool:
        return self.raw.get(option) is not None

    def error(self, option: str, message: str, *, expected: str, hint: str | None = None) -> SpecError:
        return SpecError(message, file=self.file, key=self._key(option), value=self.raw.get(option),
                         expected=expected, hint=hint)

    def integer(self, option: str, default: int | None, *, minimum: int | None = None, hint: str | None = None
                ) -> int | None:
        v = self.raw.get(option)
        if v is None:
            return default
        if isinstance(v, float) and v.is_integer():   # YAML 3.0 for a count
            v = int(v)
        return integer(v, key=self._key(option), file=self.file, minimum=minimum, hint=hint)

    def number(self, option: str, default: float, *, above: float | None = None, minimum: float | None = None,
               hint: str | None = None) -> float:
        v = self.raw.get(option)
        if v is None:
            return default
        return number(v, key=self._key(option), file=self.file, above=above, minimum=minimum, hint=hint)

    def boolean(self, option: str, default: bool) -> bool:
        v = self.raw.get(option)
        return default if v is None else boolean(v, key=self._key(option), file=self.file)

    def string(self, option: str, default: str | None) -> str | None:
        v = self.raw.get(option)
        return default if v is None else name(v, key=self._key(option), file=self.file)


# ------------------------------------------------------------------------------------------ report lines
_NONFINITE = frozenset({"nan", "inf", "infinity"})   # as text (sweeplab.report writes str(float("nan")))


def report_values(obj: dict[str, Any]) -> tuple[int | None, dict[str, float]]:
    """(step, metrics) of one metrics report line's object (`sweeplab.report`, an `@sweeplab` line, the W&B
    hook's file), which loses its step: "@step" (the W&B hook's: then "step" is a metric like any other, as a
    W&B program may log one) or "step". A NaN or infinite value comes as JSON's NaN / Infinity or as the text
    `sweeplab.report` writes for it ("nan", "inf", "-inf": strict JSON has no such number); other values
    that are not numbers are left out."""
    step = obj.pop("@step") if "@step" in obj else obj.pop("step", None)
    out: dict[str, float] = {}
    for k, v in obj.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[str(k)] = float(v)
        elif isinstance(v, str) and v.strip().lower().lstrip("+-") in _NONFINITE:
            out[str(k)] = float(v.strip().lower())
    return _report_step(step), out


def _report_step(step: Any) -> int | None:
    """A report's step as an int the store can hold (a 64-bit integer), else None: the report then counts as
    the next step. NaN, infinity, 1e30 or 2**70 as a step used to reach the driver, which failed storing it
    (a NaN or infinite one crashed the worker reading the line)."""
    if not isinstance(step, (int, float)) or isinstance(step, bool):
        return None
    if isinstance(step, float) and not math.isfinite(step):
        return None
    value = int(step)
    return value if -(2**63) <= value < 2**63 - 1 else None


def objective_of(metric: str, final: Mapping[str, Any], logged: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """A finished trial's value of `metric`, from what it returned (`final`), else its last logged value, or
    why it has none: (None, reason). The driver judges a trial's end by it, and `sweeplab repro` its replay."""
    if metric in final:
        value = final[metric]
    elif metric in logged:
        value = logged[metric]
    else:
        seen = sorted(set(final) | set(logged))
        return None, f"metric {metric!r} was never reported (reported: {', '.join(seen) if seen else 'nothing'})"
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None, f"metric {metric!r} is not a number: {value!r}"
    if not math.isfinite(value):
        return None, f"objective {metric} is {value}"
    return value, None
