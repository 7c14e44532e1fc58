"""Smoke checks that run in the driver's process before any trial: the target imports, and every
combination of categorical choices the spec can produce fits the typed config. And what a smoke run
measured, for `sweeplab sweep SPEC --dry-run`'s cost estimate.

Timing: a smoke trial runs cold (its worker imports the training code and builds its data first) and
stops after a couple of reports, each over a few batches. So its wall time is split into a fixed
start-up (paid once per worker in a real sweep: later trials reuse the warm process) and a time per
reported step, scaled from the batches it ran to the batches a full step has (`run.track` records a
loop's full length when smoke mode cuts it short). The measurement is written next to the spec
(`.sweeplab-smoke.json` in the spec's directory), so the dry-run finds it whatever store the smoke used.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["SMOKE_RECORD", "check_config_combinations", "estimate_lines", "expected_steps", "load_smoke_timing",
           "record_smoke_timing", "smoke_timing"]

SMOKE_RECORD = ".sweeplab-smoke.json"   # next to the spec: {spec file name: timing}


def check_config_combinations(spec: Any, resolve: Callable[[dict[str, Any]], dict[str, Any]],
                              python_path: Sequence[str], target: str) -> tuple[list[str], list[str]]:
    """Returns (problems, notes). `resolve(params)` gives the merged config for flat params."""
    from sweeplab.backends.targets import load_target
    from sweeplab.config import coerce, typed_schema_of
    from sweeplab.errors import ConfigError

    problems: list[str] = []
    notes: list[str] = []
    try:
        fn = load_target(target, list(python_path))
    except Exception as exc:
        return [f"cannot import {target}: {type(exc).__name__}: {exc}"], notes
    schema = typed_schema_of(fn)
    choices: dict[str, list[Any]] = {}
    fixed: dict[str, Any] = {}
    rng = __import__("numpy").random.default_rng(0)
    for name, dist in spec.space.params.items():
        values = dist.grid_values() if dist.kind in ("categorical", "categorical_w_probabilities",
                                                     "constant") else None
        if values is not None:
            choices[name] = list(values)
        else:
            fixed[name] = dist.sample(rng)
    if not choices:
        notes.append("no categorical parameters: one sampled configuration was type-checked")
    count = math.prod(len(v) for v in choices.values())
    if count > 512:   # counted, not listed: six axes of 100 values are a trillion tuples
        notes.append(f"{count} categorical combinations; checked the first 512")
    combos = itertools.islice(itertools.product(*choices.values()), 512)
    for combo in combos:
        params = dict(fixed)
        params.update(dict(zip(choices, combo)))
        params = {n: params[n] for n in spec.space.prune(params)}   # a conditional space: the active ones
        try:
            coerce(resolve(params), schema)
        except ConfigError as exc:
            where = ", ".join(f"{k}={v!r}" for k, v in zip(choices, combo))
            problems.append(f"config does not fit {getattr(schema, '__name__', 'the config')}"
                            + (f" for {where}" if where else "") + f": {exc}")
            if len(problems) >= 5:
                break
    if schema is None:
        notes.append(f"{Path(target.split(':')[0]).name}: the function declares no typed config "
                     "(annotate its first parameter with a dataclass or pydantic model to check keys)")
    return problems, notes


# ------------------------------------------------------------------------------------------ cost estimate
def smoke_timing(store: Any, sweep_name: str, *, process_started: float | None = None) -> dict[str, Any] | None:
    """What the smoke sweep `sweep_name` measured (medians over its completed trials), or None when no smoke
    trial completed:

    - `fixed_s`: a worker's cold start (imports, data) before its first trial's loop: once per worker;
    - `trial_s`: a trial's own start-up in a warm worker (its loop's first step: model and booster setup);
    - `per_step_s`: one reported step (a boosting round, an epoch scaled to all its batches);
    - `overhead_s`: the command's own start-up and shutdown around the trials (`process_started`: when the
      command's process started, for its import time).
    """
    sweep = store.sweep_row(sweep_name)
    if sweep is None:
        return None
    rows = store.completed_attempts(sweep["id"])
    parts: list[tuple[float, float, float]] = []
    for r in rows:
        reports = store.report_times(r["id"])
        if reports:
            split = _split(r["ended"] - r["started"], r["started"], [float(t) for _, t in reports],
                           _loads(r["profile"]))
            if split is not None:
                parts.append(split)
    if not parts:
        return None
    span = store.attempt_span(sweep["id"])
    overhead = (span[0] - sweep["created"]) + max(0.0, (sweep["ended"] or span[1]) - span[1])
    if process_started is not None:
        overhead += max(0.0, sweep["created"] - process_started)
    return {"fixed_s": _median([p[0] for p in parts]), "trial_s": _median([p[1] for p in parts]),
            "per_step_s": _median([p[2] for p in parts]), "overhead_s": max(0.0, overhead),
            "trials": len(parts), "sweep": sweep_name, "store": str(Path(store.root).resolve()),
            "spec_path": sweep["spec_path"], "time": time.time()}


def _split(duration: float, started: float, report_times: list[float],
           profile: dict[str, Any] | None) -> tuple[float, float, float] | None:
    """(worker cold start, trial start-up, seconds per reported step) of one smoke attempt."""
    reports = len(report_times)
    steps = int(profile.get("steps") or 0) if profile else 0
    if profile and steps:
        # run.track timed the loop: its first step (per loop) is the warm-up, the others the steady state
        measured = int(profile.get("measured_steps") or 0)
        tracked = float(profile.get("wall") or 0.0)
        steady = float(profile.get("compute_s") or 0.0) + float(profile.get("data_wait_s") or 0.0)
        if measured <= 0 or measured > steps:
            measured, steady = steps, tracked
        warm, warm_n = max(0.0, tracked - steady), steps - measured if measured < steps else 0
        step = steady / measured
        cold = max(0.0, duration - tracked)
        if steps <= reports:   # a report per tracked step (boosting rounds): the warm-up is once a trial
            return cold, warm, step * steps / reports
        # several tracked steps per report (the batches of an epoch), cut short by smoke mode: scale to the
        # loop's full length, and count its warm-up once per report
        planned = float(profile.get("planned_steps") or steps)
        return cold, 0.0, (max(planned - warm_n, measured) * step + warm) / reports
    if reports >= 2:  # no tracked loop: the spacing of the reports
        step = (report_times[-1] - report_times[0]) / (reports - 1)
        return max(0.0, report_times[0] - started - step), 0.0, step
    return None


def _loads(text: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _median(values: list[float]) -> float:
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def record_smoke_timing(spec_path: str | Path, timing: dict[str, Any]) -> Path | None:
    """Write `timing` into `.sweeplab-smoke.json` next to the spec (atomically); None if it cannot."""
    spec = Path(spec_path)
    record = spec.parent / SMOKE_RECORD
    try:
        data = json.loads(record.read_text()) if record.exists() else {}
        if not isinstance(data, dict):
            data = {}
        data[spec.name] = timing
        tmp = record.with_name(f"{record.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        tmp.replace(record)
    except (OSError, ValueError):
        return None
    return record


def load_smoke_timing(spec_path: str | Path, store: Any | None) -> dict[str, Any] | None:
    """The newest smoke measurement of this spec: from `.sweeplab-smoke.json` next to it, or from a smoke
    sweep of the same spec file in `store` (when given)."""
    spec = Path(spec_path).resolve()
    found: list[dict[str, Any]] = []
    try:
        data = json.loads((spec.parent / SMOKE_RECORD).read_text())
        if isinstance(data, dict) and isinstance(data.get(spec.name), dict):
            found.append(data[spec.name])
    except (OSError, ValueError):
        pass
    if store is not None:
        for r in store.smoke_sweeps(str(spec)):
            timing = smoke_timing(store, r["name"])
            if timing is not None:
                row = store.sweep_row(r["name"])
                timing["time"] = float(row["updated"] or 0.0)
                found.append(timing)
                break
    usable = [t for t in found if isinstance(t.get("per_step_s"), (int, float))]
    return max(usable, key=lambda t: float(t.get("time") or 0.0)) if usable else None


def expected_steps(early_terminate: dict[str, Any] | None, trials: int = 0) -> tuple[float, float, str] | None:
    """(expected steps per trial, steps without early stopping, how) for the spec's early stopping over
    `trials` trials, or None when the spec says nothing about a trial's length (no `max_iter`).

    ASHA: of the n trials that reach a rung, the m-th to arrive continues when it is in the top
    max(1, floor(m/eta)) of the m values recorded there, which for values in random order happens with
    probability max(1, floor(m/eta))/m; so about n/eta continue, a few more when n is small.
    Hyperband's brackets and the median rule are counted at full length.
    """
    et = early_terminate or {}
    if not et.get("max_iter"):
        return None
    full = float(et["max_iter"])
    if et.get("type") != "asha":
        return full, full, "no pruning assumed"
    eta = float(et.get("eta", 3))
    rung = float(et.get("min_iter", 1))
    rungs: list[float] = []
    while math.ceil(rung - 1e-9) < full:
        rungs.append(float(math.ceil(rung - 1e-9)))
        rung *= eta
    n = float(trials) if trials > 0 else 0.0
    total, prev, share = 0.0, 0.0, 1.0   # share: fraction of the trials still running
    for r in [*rungs, full]:
        total += share * (r - prev)
        prev = r
        arrivals = round(share * n)
        if arrivals > 0:
            share *= sum(max(1, math.floor(m / eta + 1e-9)) / m for m in range(1, arrivals + 1)) / arrivals
        else:
            share /= eta
    return total, full, f"ASHA keeping ~1/{eta:g} at rungs {', '.join(f'{r:g}' for r in rungs)}"


def estimate_lines(spec: Any, timing: dict[str, Any], workers: int) -> list[str]:
    """The dry-run's cost lines from a smoke measurement: wall = the command's overhead + one worker cold
    start + trials x (trial start-up + steps x time per step) / workers."""
    fixed, per_step = float(timing["fixed_s"]), float(timing["per_step_s"])
    trial_s, overhead = float(timing.get("trial_s") or 0.0), float(timing.get("overhead_s") or 0.0)
    head = (f"{per_step:.3g}s per step, {trial_s:.3g}s start-up per trial, {fixed:.3g}s per worker, "
            f"measured by {timing.get('trials', '?')} smoke trial(s) (store {timing.get('store', '?')})")
    trials = spec.budget.trials or spec.space.grid_size() or 0
    steps = expected_steps(dict(spec.early_terminate) if spec.early_terminate else None, trials)
    if steps is None:
        return [head, "give early_terminate.max_iter to estimate whole trials"]
    expected, full, how = steps
    res = spec.resources
    n = max(1, min(workers, trials or 1))

    def wall(steps_per_trial: float) -> float:
        return overhead + fixed + trials * (trial_s + steps_per_trial * per_step) / n

    busy = trials * (trial_s + expected * per_step) + n * fixed
    lines = [head,
             f"~{trials} trials x {expected:.3g} steps ({how}) / {n} workers = {_dur(wall(expected))} wall; "
             f"{busy * float(res.cpus) / 3600:.3g} CPU-hours, {busy * float(res.gpus) / 3600:.3g} GPU-hours"]
    if full > expected:
        lines.append(f"at most {_dur(wall(full))} wall if nothing is stopped early")
    return lines


def _dur(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
