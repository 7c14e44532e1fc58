"""Parameter importance with Optuna's fANOVA evaluator, over an in-memory study of ended trials.

Two bases: the completed trials' final values ("final"), or every ended trial's value at one common step
("rung"), which is what an ASHA/hyperband sweep has most of. Small samples get a bootstrap spread so a bar
from a handful of trials never looks confident.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["param_importance"]

# fANOVA fits a random forest: its cost grows fast with depth and trial count. These bounds keep one
# computation around a second on a small machine while ranking parameters the same way in practice.
MAX_TRIALS = 500
N_TREES = 16
MAX_DEPTH = 6
BOOTSTRAP_MAX_TRIALS = 150   # below this many trials, resample to show how uncertain each bar is
BOOTSTRAP_ROUNDS = 12
FEW_TRIALS = 20              # fewer than this: say plainly that the ranking is a guess


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _basis_rows(columns: Mapping[str, Any], basis: str,
                rung: Mapping[str, Any] | None) -> tuple[str, list[int], list[float], dict[str, int]]:
    """(basis used, row indexes into `columns`, their values, count by state) for the requested basis."""
    final = [i for i, (state, value) in enumerate(zip(columns["state"], columns["value"]))
             if state == "completed" and _is_number(value)]
    rung_rows: list[int] = []
    rung_vals: list[float] = []
    if rung and rung.get("step") is not None:
        where = {n: i for i, n in enumerate(columns["number"])}
        for n, v in zip(rung["number"], rung["value"]):
            if n in where and _is_number(v):
                rung_rows.append(where[n])
                rung_vals.append(float(v))
    if basis == "auto":
        basis = "rung" if len(rung_rows) > len(final) else "final"
    if basis == "rung":
        rows, vals = rung_rows, rung_vals
    else:
        rows, vals = final, [float(columns["value"][i]) for i in final]
    by_state: dict[str, int] = {}
    for i in rows:
        by_state[columns["state"][i]] = by_state.get(columns["state"][i], 0) + 1
    return basis, rows, vals, by_state


def _encode(columns: Mapping[str, Any], idx: Sequence[int],
            skipped: list[dict[str, str]]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Optuna distributions and encoded values of the parameters that vary over the rows `idx`."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    dists: dict[str, Any] = {}
    encoded: dict[str, list[Any]] = {}
    for name, col in columns["params"].items():
        vals = [col[i] for i in idx]
        if any(v is None for v in vals):
            skipped.append({"param": name, "why": "missing in some trials (conditional)"})
            continue
        if all(_is_number(v) for v in vals):
            lo, hi = float(min(vals)), float(max(vals))
            if lo == hi:
                skipped.append({"param": name, "why": "constant"})
                continue
            dists[name] = FloatDistribution(lo, hi)
            encoded[name] = [float(v) for v in vals]
        else:
            texts = [str(v) for v in vals]
            choices = sorted(set(texts))
            if len(choices) < 2:
                skipped.append({"param": name, "why": "constant"})
                continue
            dists[name] = CategoricalDistribution(choices)
            encoded[name] = texts
    return dists, encoded


def _fanova(dists: Mapping[str, Any], encoded: Mapping[str, list[Any]], values: Sequence[float],
            rows: Sequence[int], seed: int) -> dict[str, float]:
    """fANOVA importances over the rows `rows` (positions in `values`/`encoded`, repeats allowed)."""
    import optuna  # a core dependency, imported lazily: it is slow to import
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    quiet = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line per bootstrap round
    try:
        study = optuna.create_study(direction="minimize")  # importance does not depend on the direction
    finally:
        optuna.logging.set_verbosity(quiet)
    study.add_trials([
        optuna.trial.create_trial(params={n: encoded[n][j] for n in dists}, distributions=dict(dists),
                                  value=values[j])
        for j in rows
    ])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        imp = get_param_importances(
            study, evaluator=FanovaImportanceEvaluator(n_trees=N_TREES, max_depth=MAX_DEPTH, seed=seed),
        )
    if not all(math.isfinite(v) for v in imp.values()):   # the values' variance overflowed (1e160 and up)
        raise ArithmeticError("non-finite importances")
    return {k: float(v) for k, v in imp.items()}


def param_importance(columns: Mapping[str, Any], *, rung: Mapping[str, Any] | None = None,
                     basis: str = "auto", max_trials: int = MAX_TRIALS, seed: int = 0) -> dict[str, Any]:
    """fANOVA importance of each parameter for the objective, from `queries.trial_columns` output.

    `basis`: "final" (completed trials' final values), "rung" (every ended trial's value at the common step
    in `rung`, from `queries.rung_values`) or "auto" (whichever uses more trials). A seeded random subset
    of `max_trials` is used when there are more. Parameters that are constant, or missing in some trials,
    are listed in `skipped`. With few trials each importance carries a bootstrap 10-90 % range ("lo",
    "hi") and `confidence` is "low". Returns {"method", "basis", "rung_step", "importances": [{"param",
    "importance", "lo", "hi"}] (descending, summing to 1), "trials_used", "trials_total", "by_state",
    "bases": {"final": n, "rung": n}, "confidence", "skipped", "message"}.
    """
    used, idx, values, by_state = _basis_rows(columns, basis, rung)
    n_final = sum(1 for s, v in zip(columns["state"], columns["value"]) if s == "completed" and _is_number(v))
    n_rung = len(rung["number"]) if rung and rung.get("step") is not None else 0
    total = len(idx)
    if len(idx) > max_trials:
        keep = sorted(random.Random(seed).sample(range(len(idx)), max_trials))
        idx, values = [idx[k] for k in keep], [values[k] for k in keep]
    result: dict[str, Any] = {
        "method": "fanova", "basis": used, "rung_step": rung.get("step") if rung else None,
        "importances": [], "trials_used": len(idx), "trials_total": total, "by_state": by_state,
        "bases": {"final": n_final, "rung": n_rung}, "confidence": None, "skipped": [], "message": None,
        "n_trials": len(columns["state"]),
    }
    if len(idx) < 2:
        result["message"] = "needs at least 2 trials with a finite value"
        return result
    dists, encoded = _encode(columns, idx, result["skipped"])
    if not dists:
        result["message"] = "no parameter varies across these trials"
        return result
    if min(values) == max(values):
        result["message"] = (f"every trial has the same value ({values[0]:g}): "
                             "there is nothing for a parameter to explain")
        return result
    try:
        point = _fanova(dists, encoded, values, range(len(idx)), seed)
    except (ArithmeticError, AssertionError):   # fANOVA's forest on values whose spread overflows a float
        result["message"] = ("fANOVA failed: the values are too far apart to fit "
                             f"({min(values):g} to {max(values):g}); a diverged trial's value is the likely cause")
        return result
    except (RuntimeError, ValueError) as exc:
        result["message"] = f"fANOVA failed: {exc}"
        return result
    spread: dict[str, tuple[float, float]] = {}
    if len(idx) <= BOOTSTRAP_MAX_TRIALS:
        rng = random.Random(seed + 1)
        samples: dict[str, list[float]] = {k: [] for k in dists}
        for r in range(BOOTSTRAP_ROUNDS):
            rows = [rng.randrange(len(idx)) for _ in idx]
            try:
                got = _fanova(dists, encoded, values, rows, seed + r)
            except (RuntimeError, ValueError, ArithmeticError, AssertionError):
                continue  # a resample where nothing varies
            for k in dists:
                samples[k].append(got.get(k, 0.0))
        for k, xs in samples.items():
            if xs:
                xs.sort()
                spread[k] = (xs[int(0.1 * (len(xs) - 1))], xs[math.ceil(0.9 * (len(xs) - 1))])
    result["confidence"] = "low" if len(idx) < FEW_TRIALS else "ok"
    if len(idx) < FEW_TRIALS:
        result["message"] = (f"only {len(idx)} trials: too few to rank parameters reliably; "
                             "the bars show the bootstrap 10-90 % range")
    result["importances"] = [
        {"param": k, "importance": v, "lo": spread.get(k, (None, None))[0], "hi": spread.get(k, (None, None))[1]}
        for k, v in sorted(point.items(), key=lambda kv: -kv[1])
    ]
    return result
