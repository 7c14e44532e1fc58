"""Bayesian searchers: Optuna's TPE and GP samplers through ask-and-tell on an in-memory study.

Each W&B distribution maps to the Optuna distribution with exactly its support when one exists
(uniform -> float, log-uniform -> float(log=True), int_uniform -> int, q_uniform -> int over the
multiples of q, categorical -> categorical over value indices). The others (normal, beta, ...) let Optuna
search the unit interval, mapped through the distribution's inverse CDF, so their prior is respected.
"""

from __future__ import annotations

import copy
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sweeplab._imports import optional_import
from sweeplab.search.base import Searcher
from sweeplab.space import (
    Categorical,
    Constant,
    Distribution,
    IntUniform,
    LogUniformBase,
    QLogUniform,
    QLogUniformValues,
    QUniform,
    SearchSpace,
    Uniform,
    quantize,
)
from sweeplab.types import Goal, TrialSnapshot, TrialState

__all__ = ["GPSearcher", "OptunaSearcher", "TPESearcher", "encode_space"]


@dataclass(frozen=True)
class _Axis:
    """One parameter as Optuna sees it: a distribution plus value <-> internal maps."""

    distribution: Any
    decode: Callable[[Any], Any]
    encode: Callable[[Any], Any]


def _axis(dist: Distribution) -> _Axis:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(dist, Categorical):  # indices: any JSON value works, and True != 1
        values = dist.values
        return _Axis(CategoricalDistribution(tuple(range(len(values)))), lambda i: values[i], dist.index_of)
    if isinstance(dist, IntUniform):
        return _Axis(IntDistribution(dist.min, dist.max), int, int)
    if isinstance(dist, (QUniform, QLogUniform, QLogUniformValues)):
        q = dist.q
        lo, hi = (round(b / q) for b in dist.bounds())
        log = not isinstance(dist, QUniform)
        if lo < hi and (lo >= 1 or not log):  # the multiples of q the W&B rounding can produce
            return _Axis(IntDistribution(lo, hi, log=log), lambda k: quantize(k * q, q), lambda v: round(v / q))
    elif isinstance(dist, Uniform):
        return _Axis(FloatDistribution(float(dist.min), float(dist.max)), float, float)
    elif isinstance(dist, LogUniformBase):
        a, b = dist.value_bounds()
        return _Axis(FloatDistribution(a, b, log=True), lambda x: min(max(float(x), a), b), float)
    # normal, log_normal, beta and their quantised kinds: search the unit interval
    return _Axis(FloatDistribution(0.0, 1.0), dist.from_unit, dist.to_unit)


def encode_space(space: SearchSpace) -> dict[str, _Axis]:
    """Searchable parameter name -> its Optuna axis (constants are added back on decode)."""
    return {name: _axis(space.params[name]) for name in space.searchable}


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, default=repr)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _silence_optuna() -> Any:
    optuna = optional_import("optuna", "bayes", "TPE/GP search")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


class OptunaSearcher(Searcher):
    """Ask-and-tell over an in-memory Optuna study; subclasses choose the sampler."""

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None = None, **options: Any) -> None:
        super().__init__(space, goal, seed, **options)
        self._optuna = _silence_optuna()
        self._axes = encode_space(space)
        self._distributions = {name: axis.distribution for name, axis in self._axes.items()}
        self._new_study()

    def make_sampler(self) -> Any:
        raise NotImplementedError

    @property
    def study(self) -> Any:
        """The in-memory Optuna study (for inspection and tests)."""
        return self._study

    def _new_study(self) -> None:
        direction = "minimize" if self.goal is Goal.MINIMIZE else "maximize"
        self._study = self._optuna.create_study(sampler=self.make_sampler(), direction=direction)
        self._pending: dict[str, list[Any]] = {}  # params key -> asked (or replayed running) trials
        self._told: set[int] = set()

    def _decode(self, internal: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for name, dist in self.space.params.items():
            out[name] = dist.value if isinstance(dist, Constant) else self._axes[name].decode(internal[name])
        return copy.deepcopy(out)  # never hand out the space's own (mutable) values

    def _encode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {name: axis.encode(params[name]) for name, axis in self._axes.items()}

    def ask(self) -> dict[str, Any]:
        trial = self._study.ask(self._distributions)
        params = self._decode(trial.params)
        self._pending.setdefault(_key(params), []).append(trial)
        return params

    def tell(
        self,
        number: int,
        params: Mapping[str, Any],
        state: TrialState,
        value: float | None,
        intermediate: Mapping[int, float] | None = None,
    ) -> None:
        if number in self._told or not state.is_terminal:
            return
        self._told.add(number)
        waiting = self._pending.get(_key(params))
        if not waiting:  # not asked from this study (e.g. an enqueued trial): record it as history
            self._add(params, state, value, intermediate)
            return
        trial = waiting.pop(0)
        ostate, ovalue, steps = self._outcome(state, value, intermediate)
        for step, v in steps.items():
            trial.report(v, step)
        TS = self._optuna.trial.TrialState
        self._study.tell(trial, ovalue if ostate is TS.COMPLETE else None, state=ostate)

    def _outcome(
        self, state: TrialState, value: float | None, intermediate: Mapping[int, float] | None
    ) -> tuple[Any, float | None, dict[int, float]]:
        """Optuna's state, value and intermediate values for one of our terminal trials."""
        TS = self._optuna.trial.TrialState
        steps = {int(s): float(v) for s, v in (intermediate or {}).items() if _finite(v)}
        if state is TrialState.COMPLETED and _finite(value):
            return TS.COMPLETE, float(value), steps  # type: ignore[arg-type]
        if state in (TrialState.PRUNED, TrialState.STOPPED_BY_RULE, TrialState.STOPPED) and steps:
            return TS.PRUNED, steps[max(steps)], steps
        return TS.FAIL, None, steps

    def _add(self, params: Mapping[str, Any], state: TrialState, value: float | None,
             intermediate: Mapping[int, float] | None) -> None:
        if not self.space.contains(params):
            return  # from another search space (a forked sweep): nothing Optuna could use
        create = self._optuna.trial.create_trial
        if state.is_terminal:
            ostate, ovalue, steps = self._outcome(state, value, intermediate)
            frozen = create(state=ostate, value=ovalue, params=self._encode(params),
                            distributions=self._distributions, intermediate_values=steps)
            self._study.add_trial(frozen)
            return
        frozen = create(state=self._optuna.trial.TrialState.RUNNING, params=self._encode(params),
                        distributions=self._distributions)
        self._study.add_trial(frozen)
        added = self._study.get_trials(deepcopy=False)[-1]
        handle = self._optuna.trial.Trial(self._study, added._trial_id)
        self._pending.setdefault(_key(params), []).append(handle)

    def replay(self, history: Sequence[TrialSnapshot]) -> None:
        """A fresh study holding every trial of `history`: terminal ones told, the others running."""
        self._new_study()
        for snap in sorted(history, key=lambda s: s.number):
            if snap.state.is_terminal:
                self._told.add(snap.number)
            self._add(snap.params, snap.state, snap.value, self._intermediate(snap))

    def _intermediate(self, snap: TrialSnapshot) -> dict[int, float]:
        """The objective's history: the series named by the `metric` option, else the only series."""
        metric = self.options.get("metric")
        if metric is None and len(snap.history) == 1:
            metric = next(iter(snap.history))
        return {int(step): v for step, v in snap.series(metric)} if metric else {}


class TPESearcher(OptunaSearcher):
    """Tree-structured Parzen estimator; constant liar for parallel trials, multivariate for d >= 2."""

    method = "tpe"
    accepted_options: ClassVar[Mapping[str, type]] = {
        **Searcher.accepted_options, "n_startup_trials": int, "multivariate": bool,
    }

    def make_sampler(self) -> Any:
        return self._optuna.samplers.TPESampler(
            seed=self.seed,
            constant_liar=True,
            multivariate=self.options.get("multivariate", self.space.dimension >= 2),
            n_startup_trials=self.options.get("n_startup_trials", 10),
        )


class GPSearcher(OptunaSearcher):
    """Gaussian-process Bayesian optimisation (Optuna's GPSampler; needs torch)."""

    method = "gp"
    accepted_options: ClassVar[Mapping[str, type]] = {
        **Searcher.accepted_options, "n_startup_trials": int, "deterministic_objective": bool,
    }

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None = None, **options: Any) -> None:
        optional_import("torch", "bayes", "GP search")
        super().__init__(space, goal, seed, **options)

    def make_sampler(self) -> Any:
        return self._optuna.samplers.GPSampler(
            seed=self.seed,
            n_startup_trials=self.options.get("n_startup_trials", 10),
            deterministic_objective=self.options.get("deterministic_objective", False),
            warn_independent_sampling=False,
        )
