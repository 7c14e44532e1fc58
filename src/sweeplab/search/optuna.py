"""Bayesian searchers: Optuna's TPE and GP samplers through ask-and-tell on an in-memory study.

Each W&B distribution maps to the Optuna distribution with exactly its support when one exists
(uniform -> float, log-uniform -> float(log=True), int_uniform -> int, q_uniform -> int over the
multiples of q, categorical -> categorical over value indices). The others (normal, beta, ...) let Optuna
search the unit interval, mapped through the distribution's inverse CDF, so their prior is respected.

Trial k is asked with the sampler's random generators seeded from (seed, k), so a study rebuilt by
`replay` after a restart draws trial k as the uninterrupted one would, given the same history (TPE exactly;
GP up to the warm start of its kernel fit, which a restart loses). Without that, a rebuilt sampler would
restart its random startup phase and propose the sweep's first configurations again.

Failed trials are invisible to the model unless the `impute` option (the spec's `metric.impute`) is set:
then they are told as completed with an imputed value (see `OptunaSearcher.tell`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sweeplab._imports import optional_import
from sweeplab.errors import SpecError
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

__all__ = ["IMPUTE", "GPSearcher", "OptunaSearcher", "TPESearcher", "encode_space"]

IMPUTE = ("worst", "best", "latest")
_IMPUTED_ATTR = "sweeplab_imputed"   # user attr on an Optuna trial whose value was imputed


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


def _suggest(trial: Any, name: str, dist: Any) -> Any:
    """`trial.suggest_*` for one of the Optuna distributions `_axis` builds (define-by-run asking)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, default=repr)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _ask_seed(seed: int, number: int, stream: str) -> int:
    """A 32-bit seed for one generator (`stream`) when asking trial `number` of a searcher seeded `seed`."""
    digest = hashlib.blake2b(f"{seed}:{number}:{stream}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def _generator(owner: Any) -> Any:
    """The numpy RandomState behind `owner._rng` (a LazyRandomState in recent Optuna), or None."""
    import numpy as np

    rng = getattr(owner, "_rng", None)
    rng = getattr(rng, "rng", rng)
    return rng if isinstance(rng, np.random.RandomState) else None


def _reseed(sampler: Any, seed: int, number: int) -> bool:
    """Seed every random generator of a TPE/GP sampler from (seed, number); False if one is out of reach.

    The generators are the sampler's own (model phase) and its random sampler's (startup phase), private
    attributes of Optuna's samplers; when they are not where this expects (another Optuna version) the
    caller builds a fresh sampler instead, which gives the same guarantee at the cost of any warm start.
    """
    owners = [("model", sampler)]
    startup = getattr(sampler, "_random_sampler", None) or getattr(sampler, "_independent_sampler", None)
    if startup is not None:
        owners.append(("startup", startup))
    generators = [(stream, _generator(owner)) for stream, owner in owners]
    if any(g is None for _, g in generators):
        return False
    for stream, g in generators:
        g.seed(_ask_seed(seed, number, stream))
    return True


def _silence_optuna() -> Any:
    optuna = optional_import("optuna", "bayes", "TPE/GP search")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


class OptunaSearcher(Searcher):
    """Ask-and-tell over an in-memory Optuna study; subclasses choose the sampler."""

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None = None, **options: Any) -> None:
        super().__init__(space, goal, seed, **options)
        impute = self.options.get("impute")
        if impute is not None and impute not in IMPUTE:
            raise SpecError("unknown impute", key="metric.impute", value=impute, expected=" | ".join(IMPUTE))
        self._optuna = _silence_optuna()
        self._axes = encode_space(space)
        self._distributions = {name: axis.distribution for name, axis in self._axes.items()}
        self._new_study()

    def make_sampler(self, seed: int | None = None) -> Any:
        """A new sampler seeded `seed` (default: the searcher's seed)."""
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
        self._worst: float | None = None   # among completed trials (what `impute` draws on)
        self._best: float | None = None
        self._deferred: list[tuple[Any, dict[int, float]]] = []  # failed, waiting for a value to impute

    def _decode(self, internal: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for name, dist in self.space.params.items():
            out[name] = dist.value if isinstance(dist, Constant) else self._axes[name].decode(internal[name])
        return copy.deepcopy(out)  # never hand out the space's own (mutable) values

    def _encode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        if self.space.conditional:   # only the active parameters (`_add` gives Optuna their distributions)
            return {name: axis.encode(params[name]) for name, axis in self._axes.items() if name in params}
        return {name: axis.encode(params[name]) for name, axis in self._axes.items()}

    def _active_distributions(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The Optuna distributions of the parameters a trial with `params` has."""
        if not self.space.conditional:
            return self._distributions
        return {name: d for name, d in self._distributions.items() if name in params}

    def _ask_tree(self, trial: Any) -> dict[str, Any]:
        """Define-by-run: suggest the parameters of a conditional space one by one, parents first, each
        only when its condition holds, so the sampler sees which ones a trial has (TPE with group=True
        models each such group of parameters jointly)."""
        out: dict[str, Any] = {}
        for name, dist in self.space.params.items():
            if not self.space.is_active(name, out):
                continue
            if isinstance(dist, Constant):
                out[name] = dist.value
                continue
            axis = self._axes[name]
            out[name] = axis.decode(_suggest(trial, name, axis.distribution))
        return copy.deepcopy(out)

    def ask(self) -> dict[str, Any]:
        number = len(self._study.get_trials(deepcopy=False))   # the number Optuna gives the new trial
        if not _reseed(self._study.sampler, self.seed, number):
            self._study.sampler = self.make_sampler(_ask_seed(self.seed, number, "sampler"))
        if self.space.conditional:
            trial = self._study.ask()
            params = self._ask_tree(trial)
            self._pending.setdefault(_key(params), []).append(trial)
            return params
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
        if ostate is TS.FAIL and self._imputes(state):
            self._tell_imputed(trial, steps)
            return
        self._study.tell(trial, ovalue if ostate is TS.COMPLETE else None, state=ostate)
        if ostate is TS.COMPLETE:
            self._note(ovalue)

    # ------------------------------------------------------------------ imputation (metric.impute)
    def _imputes(self, state: TrialState) -> bool:
        """Whether a trial that ended without a usable value is imputed: it failed, completed without a
        finite value, or a monitor stopped it before any finite report (pruned/stopped ones are not)."""
        return self.options.get("impute") is not None and state in (
            TrialState.FAILED, TrialState.COMPLETED, TrialState.STOPPED_BY_RULE)

    def _imputed(self, steps: Mapping[int, float]) -> float | None:
        """worst/best: of the trials completed so far; latest: the trial's last report (else worst).
        None while no trial has completed."""
        how = self.options.get("impute")
        if how == "latest" and steps:
            return steps[max(steps)]
        return self._best if how == "best" else self._worst

    def _tell_imputed(self, trial: Any, steps: dict[int, float]) -> None:
        value = self._imputed(steps)
        if value is None:   # nothing completed yet: it stays running (a constant liar's pending trial)
            self._deferred.append((trial, steps))
            return
        trial.set_user_attr(_IMPUTED_ATTR, self.options["impute"])
        self._study.tell(trial, value)

    def _note(self, value: float | None) -> None:
        """A completed trial's value: update worst/best, and tell failed trials that waited for one."""
        if value is None:
            return
        better = self.goal.better
        self._best = value if self._best is None or better(value, self._best) else self._best
        self._worst = value if self._worst is None or better(self._worst, value) else self._worst
        deferred, self._deferred = self._deferred, []
        for trial, steps in deferred:
            self._tell_imputed(trial, steps)

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
        TS = self._optuna.trial.TrialState
        if state.is_terminal:
            ostate, ovalue, steps = self._outcome(state, value, intermediate)
            attrs: dict[str, Any] = {}
            if ostate is TS.FAIL and self._imputes(state):
                imputed = self._imputed(steps)
                if imputed is None:   # imputed once a trial completes
                    self._deferred.append((self._add_running(params, steps), steps))
                    return
                ostate, ovalue, attrs = TS.COMPLETE, imputed, {_IMPUTED_ATTR: self.options["impute"]}
            frozen = create(state=ostate, value=ovalue, params=self._encode(params),
                            distributions=self._active_distributions(params), intermediate_values=steps,
                            user_attrs=attrs)
            self._study.add_trial(frozen)
            if ostate is TS.COMPLETE and not attrs:
                self._note(ovalue)
            return
        self._pending.setdefault(_key(params), []).append(self._add_running(params, {}))

    def _add_running(self, params: Mapping[str, Any], steps: dict[int, float]) -> Any:
        """Add a running trial to the study; returns a handle to tell it later."""
        frozen = self._optuna.trial.create_trial(state=self._optuna.trial.TrialState.RUNNING,
                                                 params=self._encode(params),
                                                 distributions=self._active_distributions(params),
                                                 intermediate_values=steps)
        self._study.add_trial(frozen)
        added = self._study.get_trials(deepcopy=False)[-1]
        return self._optuna.trial.Trial(self._study, added._trial_id)

    def replay(self, history: Sequence[TrialSnapshot]) -> None:
        """A fresh study holding every trial of `history`: terminal ones told, the others running."""
        self._new_study()
        ordered = sorted(history, key=lambda s: s.number)
        if self.options.get("impute") is not None:   # failed trials are imputed from the whole history
            for snap in ordered:
                if snap.state is TrialState.COMPLETED and _finite(snap.value) and self.space.contains(snap.params):
                    self._note(float(snap.value))  # type: ignore[arg-type]
        for snap in ordered:
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

    def make_sampler(self, seed: int | None = None) -> Any:
        return self._optuna.samplers.TPESampler(
            seed=self.seed if seed is None else seed,
            constant_liar=True,
            multivariate=self.options.get("multivariate", self.space.dimension >= 2),
            # a conditional space: model each set of parameters that occur together (define-by-run asks)
            group=self.space.conditional and self.options.get("multivariate", self.space.dimension >= 2),
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

    def make_sampler(self, seed: int | None = None) -> Any:
        return self._optuna.samplers.GPSampler(
            seed=self.seed if seed is None else seed,
            n_startup_trials=self.options.get("n_startup_trials", 10),
            deterministic_objective=self.options.get("deterministic_objective", False),
            warn_independent_sampling=False,
        )
