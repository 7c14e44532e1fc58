"""Searchers: what to try next. `make_searcher(method, space, goal, seed)` builds one.

    grid    every combination, W&B order          random  independent draws (W&B)
    sobol   scrambled Sobol points                tpe     Optuna TPE (constant liar, multivariate)
    gp      Optuna GP (needs torch)               bayes   GP as W&B's bayes, TPE past 300 trials or
                                                          when torch is missing
    nsga2   Optuna NSGA-II (several objectives)
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
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
    "DEFINE_BY_RUN",
    "METHODS",
    "MODEL_BASED",
    "SEARCHERS",
    "GridSearcher",
    "Prefetching",
    "RandomSearcher",
    "Searcher",
    "SobolSearcher",
    "make_searcher",
]



def _tpe(space: SearchSpace, goal: Goal, seed: int | None, **options: Any) -> Searcher:
    """TPE, whose startup asks need no Optuna: it is imported once trials run (search/deferred.py). The
    startup is the GP's space-filling design where that applies (`startup_design`), else random draws."""
    from sweeplab.search.deferred import Deferred, DesignPoints
    from sweeplab.search.optuna import TPESearcher, startup_design

    TPESearcher.check(options)
    return Deferred(space, goal, seed, method=TPESearcher.method, startup=options.get("n_startup_trials", 10),
                    build=lambda s: TPESearcher(space, goal, s, **options),
                    first=DesignPoints if startup_design(space, options, method="tpe") else RandomSearcher, **options)


def _gp(space: SearchSpace, goal: Goal, seed: int | None, *, handoff: int | None = None, **options: Any) -> Searcher:
    """The GP, whose startup design asks need no torch nor Optuna: they are imported once trials run
    (search/deferred.py); built at once where the stand-in does not apply (a conditional space, several
    objectives, more axes than the design has)."""
    from sweeplab.search.deferred import Deferred, DesignPoints
    from sweeplab.search.optuna import GPSearcher, startup_design

    GPSearcher.check(options)
    if not startup_design(space, options):
        return GPSearcher(space, goal, seed, handoff=handoff, **options)
    return Deferred(space, goal, seed, method=GPSearcher.method, startup=options.get("n_startup_trials", 10),
                    build=lambda s: GPSearcher(space, goal, s, handoff=handoff, **options), first=DesignPoints,
                    **options)


def _optuna_objective(space: SearchSpace, goal: Goal, seed: int | None, **options: Any) -> Searcher:
    """A define-by-run Optuna objective's study (`sweeplab sweep --optuna`, `sl.optimize`)."""
    from sweeplab.search.optuna_objective import ObjectiveSearcher

    return ObjectiveSearcher(space, goal, seed, **options)


def _nsga2(space: SearchSpace, goal: Goal, seed: int | None, **options: Any) -> Searcher:
    from sweeplab.search.optuna import NSGA2Searcher

    return NSGA2Searcher(space, goal, seed, **options)


#: what `bayes` uses for several objectives, and its options: the searcher that reached the best hypervolume
#: on benchmarks/multiobjective.py (docs/benchmarks.md, "Several objectives"): TPE with independent
#: (univariate) densities matched Optuna's best on both problems (0.998x on ZDT1, 1.004x on digits);
#: multivariate TPE 0.980x and 1.009x, NSGA-II 0.88x and 0.95x
MULTI_OBJECTIVE_BAYES = "tpe"
MULTI_OBJECTIVE_BAYES_OPTIONS: dict[str, Any] = {"multivariate": False}


def _bayes(space: SearchSpace, goal: Goal, seed: int | None, **options: Any) -> Searcher:
    """W&B's bayes: the GP for its first BAYES_GP_TRIALS trials, then TPE; TPE alone (with a note saying
    so) when torch is not installed. With several objectives, MULTI_OBJECTIVE_BAYES (with a note saying so)."""
    from sweeplab.search.optuna import BAYES_GP_TRIALS, TPESearcher

    if len(options.get("goals") or ()) > 1 and MULTI_OBJECTIVE_BAYES != "gp":
        chosen = {**MULTI_OBJECTIVE_BAYES_OPTIONS,
                  **{k: v for k, v in options.items() if k != "deterministic_objective"}}
        inner = SEARCHERS[MULTI_OBJECTIVE_BAYES](space, goal, seed, **chosen)
        inner.notes.append(f"bayes: {MULTI_OBJECTIVE_BAYES} (independent TPE) searches several objectives "
                           "(best hypervolume on benchmarks/multiobjective.py)")
        return inner

    try:
        return _gp(space, goal, seed, handoff=BAYES_GP_TRIALS, **options)
    except MissingExtraError as exc:
        if exc.module != "torch":
            raise
        tpe_options = {k: v for k, v in options.items() if k != "deterministic_objective"}
        inner = TPESearcher(space, goal, seed, **tpe_options)
        inner.notes.append(
            "bayes: torch is not installed, so TPE stands in for the GP; "
            "pip install 'sweeplab[bayes]' for GP-based bayes"
        )
        return inner


#: THE search registry: `method` name -> factory(space, goal, seed, **options). The spec's `method` is
#: validated against it and `make_searcher` builds from it; a new searcher is one entry here (and one in
#: MODEL_BASED if it learns from results). Optuna is imported only when a model-based method is built.
SEARCHERS: dict[str, Callable[..., Searcher]] = {
    "grid": GridSearcher,
    "random": RandomSearcher,
    "sobol": SobolSearcher,
    "bayes": _bayes,
    "tpe": _tpe,
    "gp": _gp,
    "optuna": _optuna_objective,
    "nsga2": _nsga2,
}
#: methods that model past results: they need a metric, and are wrapped in Prefetching
MODEL_BASED: tuple[str, ...] = ("bayes", "tpe", "gp", "nsga2")
METHODS: tuple[str, ...] = tuple(SEARCHERS)
#: methods whose parameters are chosen by the trial while it runs (an Optuna objective): no declared space
DEFINE_BY_RUN: tuple[str, ...] = ("optuna",)
#: the trial function of such a sweep (`sweeplab.optimize`, `sweeplab sweep objective.py:fn`), which calls the
#: objective with an Optuna trial; a spec file cannot name these methods
OBJECTIVE_TRIAL = "sweeplab.optuna_compat._trial:objective_trial"


def make_searcher(
    method: str, space: SearchSpace, goal: Goal, seed: int | None, *, prefetch: bool = True, **options: Any
) -> Searcher:
    """The searcher for `method`; model-based ones are wrapped in Prefetching unless `prefetch=False`.

    `options` are method specific (`metric` for all; `n_startup_trials`, `multivariate` for tpe;
    `n_startup_trials`, `deterministic_objective` for gp/bayes). Unknown ones raise SpecError.
    """
    factory = SEARCHERS.get(method) if isinstance(method, str) else None
    if factory is None:
        close = difflib.get_close_matches(str(method), list(SEARCHERS), n=1)
        raise SpecError("unknown search method", key="method", value=method, expected=" | ".join(SEARCHERS),
                        hint=f"did you mean {close[0]!r}?" if close else None)
    searcher = factory(space, goal, seed, **options)
    return Prefetching(searcher) if prefetch and method in MODEL_BASED else searcher
