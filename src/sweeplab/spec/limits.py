"""Validation of `budget`, `resources` and `trial`: what a sweep may spend and how each trial runs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeplab._values import is_int as _is_int
from sweeplab._values import parse_duration
from sweeplab.spec.model import WORKDIRS, Budget, Resources, TrialPolicy
from sweeplab.spec.reader import _did_you_mean, _Reader, yaml_bool_hint
from sweeplab.types import PLACEMENTS

_SIZE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(b|[kmgt]i?b?)?")   # "100MB", "64 KiB", "1.5g"
_SIZE_UNITS = ("b", "k", "m", "g", "t")
_LOG_MIN = 1 << 20   # trial.log_max: the end a log keeps must hold what a command's pipes had in flight (LogCap)
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")   # "4", "1.5", ".5": a number of hours given as text


class _Limits(_Reader):
    """The sections that bound a sweep and its trials: budget, resources, trial policy."""

    def budget(self, raw: Any, run_cap: Any) -> Budget:
        if isinstance(run_cap, float) and run_cap.is_integer():   # `run_cap: 10.0`: an integer to W&B's schema
            run_cap = int(run_cap)
        cap = self.integer(run_cap, "run_cap", minimum=1)
        if raw is None:
            return Budget(trials=cap)
        raw = self.mapping(raw, "budget", "{trials: 60, time: 30m, gpu_hours: 4}")
        self.keys(raw, ("trials", "time", "gpu_hours", "cpu_hours", "cost", "prices"), "budget")
        trials = self.integer(raw.get("trials"), "budget.trials", minimum=1)
        if cap is not None and trials is not None and cap != trials:
            raise self.error("run_cap and budget.trials disagree (run_cap is an alias of budget.trials)",
                             "run_cap", value=cap, expected=f"{trials} (budget.trials) or only one of them")
        cost = raw.get("cost")
        if cost is not None:
            cost = self.mapping(cost, "budget.cost", "{usd: 20}")
            cost = {str(k): self.spendable(self.number(v, f"budget.cost.{k}"), v, f"budget.cost.{k}",
                                           "a number > 0") for k, v in cost.items()}
        time = raw.get("time")
        return Budget(
            trials=trials if trials is not None else cap,
            time=self.spendable(self.duration(time, "budget.time"), time, "budget.time",
                                "a duration like 30s, 30m, 2h (leave it out for no limit)"),
            gpu_hours=self.spendable(self.hours(raw.get("gpu_hours"), "budget.gpu_hours"), raw.get("gpu_hours"),
                                     "budget.gpu_hours", "a number of hours > 0 or a duration like 90m"),
            cpu_hours=self.spendable(self.hours(raw.get("cpu_hours"), "budget.cpu_hours"), raw.get("cpu_hours"),
                                     "budget.cpu_hours", "a number of hours > 0 or a duration like 90m"),
            cost=cost,
            prices=self.prices(raw.get("prices"), cost),
        )

    def spendable(self, value: float | None, raw: Any, key: str, expected: str) -> float | None:
        """A budget limit above 0: a limit of 0 is spent before the first trial (as `trials: 0` would be)."""
        if value is not None and value <= 0:
            raise self.error("must be above 0: the sweep would end before its first trial", key, value=raw,
                             expected=expected)
        return value

    def prices(self, raw: Any, cost: Mapping[str, float] | None) -> dict[str, float] | None:
        """Prices per resource-hour, e.g. {cpu_hour: 0.04, gpu_hour: 2.5}: added to every budget.cost."""
        if raw is None:
            return None
        raw = self.mapping(raw, "budget.prices", "{cpu_hour: 0.04, gpu_hour: 2.5}")
        self.keys(raw, ("cpu_hour", "gpu_hour"), "budget.prices")
        if not cost:
            raise self.error("budget.prices needs a budget.cost limit to spend against", "budget.prices",
                             expected="budget.cost: {usd: 20} beside it")
        out = {}
        for k, v in raw.items():
            price = self.number(v, f"budget.prices.{k}")
            if price is None or price < 0:
                raise self.error("a price cannot be negative", f"budget.prices.{k}", value=v,
                                 expected="a number >= 0 (currency per resource-hour)")
            out[str(k)] = float(price)
        return out

    def hours(self, raw: Any, key: str) -> float | None:
        """A number of hours, or a duration string ("90m"). A number written as text ("4") is hours too, as the
        number is: the duration grammar would read it as seconds, a budget 3,600 times smaller."""
        if raw is None:
            return None
        if isinstance(raw, str):
            if _NUMBER.fullmatch(raw.strip()):
                return self.number(float(raw), key)
            return parse_duration(raw, file=self.file, key=key) / 3600.0
        return self.number(raw, key)

    def resources(self, raw: Any) -> Resources:
        if raw is None:
            return Resources()
        raw = self.mapping(raw, "resources", "{cpus: 1, gpus: 0}")
        allowed = ("cpus", "gpus", "workers", "cpus_per_worker", "gpus_per_worker", "custom", "placement")
        self.keys(raw, allowed, "resources")
        custom = raw.get("custom") or {}
        custom = self.mapping(custom, "resources.custom", "{tpu: 1}")
        placement = raw.get("placement", "pack")
        if placement is not None and str(placement).lower() != "none":
            placement = str(placement).upper()
            if placement not in PLACEMENTS:
                raise self.error("unknown placement strategy", "resources.placement", value=raw.get("placement"),
                                 expected=f"one of {', '.join(p.lower() for p in PLACEMENTS)} or none")
        else:
            placement = None
        return Resources(
            placement=placement,
            cpus=self.number(raw.get("cpus", 1.0), "resources.cpus"),  # type: ignore[arg-type]
            gpus=self.gpus(raw.get("gpus", 0.0), "resources.gpus"),  # type: ignore[arg-type]
            workers=self.integer(raw.get("workers", 1), "resources.workers", minimum=1),  # type: ignore[arg-type]
            cpus_per_worker=self.number(raw.get("cpus_per_worker"), "resources.cpus_per_worker"),
            gpus_per_worker=self.gpus(raw.get("gpus_per_worker"), "resources.gpus_per_worker"),
            custom={str(k): self.number(v, f"resources.custom.{k}") for k, v in custom.items()},  # type: ignore[misc]
        )

    def trial(self, raw: Any) -> TrialPolicy:
        if raw is None:
            return TrialPolicy()
        raw = self.mapping(raw, "trial", "{timeout: 10m, retries: 2, checkpoint_every: 5m}")
        allowed = ("timeout", "retries", "checkpoint_every", "keep_checkpoints", "grace",
                   "heartbeat_timeout", "torch_profiler", "preload", "workdir", "log_max")
        self.keys(raw, allowed, "trial")
        profiler = raw.get("torch_profiler")
        if profiler is True:
            profiler = {}
        elif profiler is False:
            profiler = None
        elif profiler is not None:
            profiler = dict(self.mapping(profiler, "trial.torch_profiler", "{wait: 1, warmup: 1, active: 3}"))
        defaults = TrialPolicy()
        return TrialPolicy(
            timeout=self.positive_duration(raw.get("timeout"), "trial.timeout", "leave it out for no limit"),
            retries=self.integer(raw.get("retries", defaults.retries), "trial.retries", minimum=0),  # type: ignore[arg-type]
            checkpoint_every=self.checkpoint_every(raw.get("checkpoint_every")),
            keep_checkpoints=self.integer(  # type: ignore[arg-type]
                raw.get("keep_checkpoints", defaults.keep_checkpoints), "trial.keep_checkpoints", minimum=1),
            grace=self.duration(raw.get("grace", defaults.grace), "trial.grace"),  # type: ignore[arg-type]
            heartbeat_timeout=self.positive_duration(raw.get("heartbeat_timeout", defaults.heartbeat_timeout),
                                                     "trial.heartbeat_timeout", "null turns the check off"),
            torch_profiler=profiler,
            preload=self.preload(raw.get("preload")),
            workdir=self.workdir(raw.get("workdir", defaults.workdir)),
            log_max=self.log_max(raw.get("log_max", defaults.log_max)),
        )

    def log_max(self, raw: Any) -> int:
        """`trial.log_max`: bytes a trial's log keeps, a number or a size like 100MB (KB, MB, GB: powers of
        1024; KiB, MiB, GiB too); 0 or null: no cap."""
        expected = "a size like 100MB, 10MB or 2GB (0 or null: no cap)"
        if raw is None:
            return 0
        size: float | None = None
        if _is_int(raw) or (isinstance(raw, float) and raw == raw):
            size = float(min(raw, 1 << 61))   # 10**400 bytes: refused below, not an OverflowError
        elif isinstance(raw, str):
            m = _SIZE.fullmatch(raw.strip().lower())
            if m:
                size = float(m.group(1)) * 1024 ** _SIZE_UNITS.index((m.group(2) or "b")[0])
        if size is None or size < 0 or size > 1 << 60:
            raise self.error("is not a size", "trial.log_max", value=raw, expected=expected)
        if 0 < size < _LOG_MIN:
            raise self.error("is too small to keep a log's beginning and end", "trial.log_max", value=raw,
                             expected="at least 1MB, or 0 for no cap")
        return int(size)

    def workdir(self, raw: Any) -> str:
        return workdir_choice(raw, file=self.file)

    def preload(self, raw: Any) -> tuple[str, ...] | None:
        """`trial.preload`: module names (a list, or one name), false for none, true or left out to read them
        from the trial's code."""
        if raw is None or raw is True:
            return None
        if raw is False:
            return ()
        names = [raw] if isinstance(raw, str) else raw
        expected = "a list of module names like [torch, sklearn.datasets], or false"
        if not isinstance(names, list) or not all(
                isinstance(n, str) and n and all(part.isidentifier() for part in n.split(".")) for n in names):
            raise self.error("is not a list of module names", "trial.preload", value=raw, expected=expected)
        for name in dict.fromkeys(n.split(".")[0] for n in names):
            if not _findable(name, self.base_dir):
                self.warnings.append(str(self.error(
                    f"no module named {name!r} is installed here (the workers skip it)", "trial.preload",
                    value=name, expected="a module the trial imports", hint=_did_you_mean_module(name))))
        return tuple(dict.fromkeys(names))

    def positive_duration(self, raw: Any, key: str, off: str) -> float | None:
        """A duration above 0: a trial timeout or heartbeat timeout of 0 would fail every trial at once."""
        value = self.duration(raw, key)
        if value is not None and value <= 0:
            raise self.error("must be above 0: every trial would be stopped at once", key, value=raw,
                             expected=f"a duration like 30s, 5m, 2h ({off})")
        return value

    def checkpoint_every(self, raw: Any) -> float | str | None:
        key = "trial.checkpoint_every"
        expected = "a step count (100), a duration ('5m') or 'auto'"
        if raw is None:
            return None
        if _is_int(raw):
            if raw < 1:
                raise self.error("checkpoint_every must be at least 1 step", key, value=raw, expected=expected)
            return int(raw)
        if isinstance(raw, str):
            text = raw.strip().lower()
            if text == "auto":
                return "auto"
            steps = re.fullmatch(r"(\d+)\s*steps?", text)
            if steps:
                return self.checkpoint_every(int(steps.group(1)))
            return parse_duration(raw, file=self.file, key=key)
        raise self.error("checkpoint_every must be steps, a duration or 'auto'", key, value=raw,
                         expected=expected, hint="a bare number is a step count; write '30s' for time")


def workdir_choice(raw: Any, *, file: str | None = None, key: str = "trial.workdir") -> str:
    """`trial.workdir` (or the CLI's `--workdir`): `sweep` (every trial in the sweep's working directory) or
    `trial` (each in a directory of its own); anything else is a SpecError naming `key`, the value and both."""
    from sweeplab.errors import SpecError

    if isinstance(raw, str) and raw.strip().lower() in WORKDIRS:
        return raw.strip().lower()
    raise SpecError("unknown working directory choice", file=file, key=key, value=raw,
                    expected=f"one of {', '.join(WORKDIRS)} (sweep: the sweep's working directory, shared by "
                             "every trial; trial: a directory of its own per trial)",
                    hint=_did_you_mean(str(raw), WORKDIRS) if isinstance(raw, str) else yaml_bool_hint(raw))


def _findable(top: str, base_dir: Path | None) -> bool:
    """Whether the top-level module `top` can be found (not imported) where a worker looks: the interpreter's
    path, beside the spec and in the working directory (where the user's own modules are)."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    if top in sys.modules:
        return True
    own = [*([str(base_dir)] if base_dir is not None else []), os.getcwd()]
    try:   # the interpreter's finders (editable installs' included), then the user's own places
        return importlib.util.find_spec(top) is not None \
            or importlib.machinery.PathFinder.find_spec(top, own) is not None
    except (ImportError, ValueError, OSError):
        return False


def _did_you_mean_module(name: str) -> str | None:
    import difflib
    import pkgutil

    close = difflib.get_close_matches(name, [m.name for m in pkgutil.iter_modules()], n=1, cutoff=0.75)
    return f"did you mean {close[0]!r}?" if close else None
