"""Parameter importance with Optuna's fANOVA evaluator, over an in-memory study of completed trials."""

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


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def param_importance(columns: Mapping[str, Any], *, max_trials: int = MAX_TRIALS,
                     seed: int = 0) -> dict[str, Any]:
    """fANOVA importance of each parameter for the objective, from `queries.trial_columns` output.

    Uses the COMPLETED trials with a finite value (a seeded random subset of `max_trials` when there are
    more). Parameters that are constant, or missing in some of those trials, are listed in `skipped`.
    Returns {"method", "importances": [{"param", "importance"}] (descending, summing to 1),
    "trials_used", "trials_total", "skipped", "message"}.
    """
    idx = [i for i, (state, value) in enumerate(zip(columns["state"], columns["value"]))
           if state == "completed" and value is not None]
    total = len(idx)
    if len(idx) > max_trials:
        idx = sorted(random.Random(seed).sample(idx, max_trials))
    result: dict[str, Any] = {"method": "fanova", "importances": [], "trials_used": len(idx),
                              "trials_total": total, "skipped": [], "message": None}
    if len(idx) < 2:
        result["message"] = "needs at least 2 completed trials with a finite value"
        return result

    import optuna  # a core dependency, imported lazily: it is slow to import
    from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    dists: dict[str, BaseDistribution] = {}
    encoded: dict[str, list[Any]] = {}
    for name, col in columns["params"].items():
        vals = [col[i] for i in idx]
        if any(v is None for v in vals):
            result["skipped"].append({"param": name, "why": "missing in some trials"})
            continue
        if all(_is_number(v) for v in vals):
            lo, hi = float(min(vals)), float(max(vals))
            if lo == hi:
                result["skipped"].append({"param": name, "why": "constant"})
                continue
            dists[name] = FloatDistribution(lo, hi)
            encoded[name] = [float(v) for v in vals]
        else:
            texts = [str(v) for v in vals]
            choices = sorted(set(texts))
            if len(choices) < 2:
                result["skipped"].append({"param": name, "why": "constant"})
                continue
            dists[name] = CategoricalDistribution(choices)
            encoded[name] = texts
    if not dists:
        result["message"] = "no parameter varies across the completed trials"
        return result

    values: Sequence[float] = [columns["value"][i] for i in idx]
    study = optuna.create_study(direction="minimize")  # importance does not depend on the direction
    study.add_trials([
        optuna.trial.create_trial(params={n: encoded[n][j] for n in dists}, distributions=dists, value=v)
        for j, v in enumerate(values)
    ])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            imp = get_param_importances(
                study, evaluator=FanovaImportanceEvaluator(n_trees=N_TREES, max_depth=MAX_DEPTH, seed=seed),
            )
        except (RuntimeError, ValueError) as exc:
            result["message"] = f"fANOVA failed: {exc}"
            return result
    result["importances"] = [{"param": k, "importance": float(v) if math.isfinite(v) else None}
                             for k, v in sorted(imp.items(), key=lambda kv: -kv[1])]
    return result
