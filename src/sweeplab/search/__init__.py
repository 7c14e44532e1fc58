"""Searchers: what to try next. `make_searcher(method, space, goal, seed)` builds one.

    grid    every combination, W&B order          random  independent draws (W&B)
    sobol   scrambled Sobol points                tpe     Optuna TPE (constant liar, multivariate)
    gp      Optuna GP (needs torch)               bayes   GP as W&B's bayes; TPE when torch is missing
"""

from __future__ import annotations

import difflib
from typing import Any

from sweeplab.errors import MissingExtraError, SpecError
from sweeplab.search.base import Searcher
from sweeplab.search.grid import GridSearcher
from sweeplab.search.prefetch import Prefetching
from sweeplab.search.random import RandomSearcher
from sweeplab.search.sobol import SobolSearcher
from sweeplab.space import SearchSpace
from sweeplab.types import Goal

__all__ = [
    "METHODS",
    "GridSearcher",
    "Prefetching",
    "RandomSearcher",
    "Searcher",
    "SobolSearcher",
    "make_searcher",
]

METHODS = ("grid", "random", "sobol", "bayes", "tpe", "gp")


def make_searcher(
    method: str, space: SearchSpace, goal: Goal, seed: int | None, *, prefetch: bool = True, **options: Any
) -> Searcher:
    """The searcher for `method`; bayes/tpe/gp are wrapped in Prefetching unless `prefetch=False`.

    `options` are method specific (`metric` for all; `n_startup_trials`, `multivariate` for tpe;
    `n_startup_trials`, `deterministic_objective` for gp/bayes). Unknown ones raise SpecError.
    """
    if method == "grid":
        return GridSearcher(space, goal, seed, **options)
    if method == "random":
        return RandomSearcher(space, goal, seed, **options)
    if method == "sobol":
        return SobolSearcher(space, goal, seed, **options)
    if method not in METHODS:
        close = difflib.get_close_matches(str(method), METHODS, n=1)
        raise SpecError("unknown search method", key="method", value=method, expected=" | ".join(METHODS),
                        hint=f"did you mean {close[0]!r}?" if close else None)
    from sweeplab.search.optuna import GPSearcher, TPESearcher

    inner: Searcher
    if method == "tpe":
        inner = TPESearcher(space, goal, seed, **options)
    elif method == "gp":
        inner = GPSearcher(space, goal, seed, **options)
    else:
        try:
            inner = GPSearcher(space, goal, seed, **options)
        except MissingExtraError as exc:
            if exc.module != "torch":
                raise
            tpe_options = {k: v for k, v in options.items() if k != "deterministic_objective"}
            inner = TPESearcher(space, goal, seed, **tpe_options)
            inner.notes.append(
                "bayes: torch is not installed, so TPE stands in for the GP; "
                "pip install 'sweeplab[bayes]' for GP-based bayes"
            )
    return Prefetching(inner) if prefetch else inner
