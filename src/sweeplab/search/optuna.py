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

import contextlib
import copy
import hashlib
import json
import math
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sweeplab._imports import optional_import
from sweeplab._process import Shared
from sweeplab.errors import SpecError
from sweeplab.search.base import Searcher, check_options
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

__all__ = ["IMPUTE", "GPSearcher", "NSGA2Searcher", "OptunaSearcher", "TPESearcher", "design_params", "encode_space"]

IMPUTE = ("worst", "best", "latest", "none")
_IMPUTED_ATTR = "sweeplab_imputed"   # user attr on an Optuna trial whose value was imputed
_WITHDRAWN_ATTR = "sweeplab_withdrawn"   # user attr on an asked trial taken back (`withdraw`)


@dataclass(frozen=True)
class _Axis:
    """One parameter as Optuna sees it: a distribution plus value <-> internal maps."""

    distribution: Any
    decode: Callable[[Any], Any]
    encode: Callable[[Any], Any]


#: integer axes with more values than this are searched as floats rounded to an integer: Optuna's GP lists every
#: value of an integer axis on each ask (numpy.arange over the range: 0..1e10 raised a 74 GiB MemoryError)
MAX_INT_CHOICES = 2**20


def _int_axis(lo: int, hi: int, log: bool, decode: Callable[[int], Any], encode: Callable[[Any], int]) -> _Axis:
    """Integers lo..hi (Optuna's IntDistribution), or past MAX_INT_CHOICES values a float range rounded to one."""
    from optuna.distributions import FloatDistribution, IntDistribution

    def clamped(v: Any) -> int:   # a q_uniform grid point off the multiples of q (min 1, q 2: 1) -> the nearest
        return min(max(encode(v), lo), hi)

    if hi - lo < MAX_INT_CHOICES:
        return _Axis(IntDistribution(lo, hi, log=log), lambda k: decode(int(k)), clamped)

    def nearest(x: Any) -> Any:
        return decode(min(max(round(float(x)), lo), hi))

    return _Axis(FloatDistribution(float(lo), float(hi), log=log), nearest, lambda v: float(clamped(v)))


def _reached(lo: float, hi: float) -> tuple[int, int]:
    """The k that round(x) takes with some probability for x uniform in [lo, hi]: round(lo) and round(hi), except
    an end on a tie rounded away from the range (round(0.5) is 0: only x == 0.5 exactly gives it)."""
    first, last = round(lo), round(hi)
    return first + (lo - first == 0.5), last - (last - hi == 0.5)


def _axis(dist: Distribution) -> _Axis:
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    if isinstance(dist, Categorical):  # indices: any JSON value works, and True != 1
        values = dist.values
        weights = getattr(dist, "probabilities", None)   # a value of probability 0 is never drawn, nor modelled
        choices = tuple(i for i in range(len(values)) if weights is None or weights[i] > 0)
        return _Axis(CategoricalDistribution(choices), lambda i: values[i], dist.index_of)
    if isinstance(dist, IntUniform):
        return _int_axis(dist.min, dist.max, False, int, int)
    if isinstance(dist, (QUniform, QLogUniform, QLogUniformValues)):
        q = dist.q
        lo, hi = _reached(*(b / q for b in dist.bounds()))
        log = not isinstance(dist, QUniform)
        if lo < hi and (lo >= 1 or not log):  # the multiples of q the W&B rounding can produce
            return _int_axis(lo, hi, log, lambda k: quantize(k * q, q), lambda v: round(v / q))
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
        self.check(options)
        self._optuna = _silence_optuna()
        self._axes = encode_space(space)
        self._distributions = {name: axis.distribution for name, axis in self._axes.items()}
        self._new_study()

    @classmethod
    def check(cls, options: Mapping[str, Any]) -> None:
        """Refuse what building this searcher with `options` would refuse (SpecError; MissingExtraError without
        Optuna), without importing Optuna."""
        import importlib.util

        check_options(cls.method, options, cls.accepted_options)
        impute = options.get("impute")
        if impute is not None and impute not in IMPUTE:
            raise SpecError("unknown impute", key="metric.impute", value=impute, expected=" | ".join(IMPUTE))
        if importlib.util.find_spec("optuna") is None:
            _silence_optuna()   # raises the missing extra's error

    def make_sampler(self, seed: int | None = None) -> Any:
        """A new sampler seeded `seed` (default: the searcher's seed)."""
        raise NotImplementedError

    @property
    def study(self) -> Any:
        """The in-memory Optuna study (for inspection and tests)."""
        return self._study

    @property
    def goals(self) -> tuple[Goal, ...]:
        """Every objective's goal: the `goals` option with several objectives, else (goal,)."""
        return tuple(Goal(g) for g in self.options.get("goals") or (self.goal,))

    @property
    def multi_objective(self) -> bool:
        return len(self.goals) > 1

    def _new_study(self) -> None:
        directions = ["minimize" if g is Goal.MINIMIZE else "maximize" for g in self.goals]
        self._study = self._optuna.create_study(sampler=self.make_sampler(), directions=directions)
        self._pending: dict[str, list[Any]] = {}  # params key -> asked (or replayed running) trials
        self._withdrawn = 0   # asked suggestions taken back (`withdraw`): failed trials that hold no number
        self._told: set[int] = set()
        self._worst: float | None = None   # among completed trials (what `impute` draws on)
        self._best: float | None = None
        self._deferred: list[tuple[Any, dict[int, float], str]] = []  # failed, waiting for a value to impute

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
        # the driver's number for the new trial: the study's trials but the withdrawn ones
        number = len(self._study.get_trials(deepcopy=False)) - self._withdrawn
        if not _reseed(self._study.sampler, self.seed, number):
            self._study.sampler = self.make_sampler(_ask_seed(self.seed, number, "sampler"))
        sampler = self._study.sampler
        design = getattr(sampler, "_independent_sampler", None) or getattr(sampler, "_random_sampler", None)
        if isinstance(design, _StartupDesign):   # trial `number`'s point of the design, as resumed sweeps ask too
            design.index = number
        if self.space.conditional:
            trial = self._study.ask()
            params = self._ask_tree(trial)
            self._pending.setdefault(_key(params), []).append(trial)
            return params
        trial = self._study.ask(self._distributions)
        params = self._decode(trial.params)
        self._pending.setdefault(_key(params), []).append(trial)
        return params

    def withdraw(self, params: Mapping[str, Any]) -> bool:
        """Take back the latest suggestion: its trial ends FAIL (which neither sampler models) and no longer
        counts for numbering, so the next ask draws with the seed the withdrawn one used."""
        trials = self._study.get_trials(deepcopy=False)
        waiting = self._pending.get(_key(params))
        if not waiting or not trials or waiting[-1].number != trials[-1].number:
            return False
        trial = waiting.pop()
        trial.set_user_attr(_WITHDRAWN_ATTR, True)
        self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
        self._withdrawn += 1
        return True

    def tell(
        self,
        number: int,
        params: Mapping[str, Any],
        state: TrialState,
        value: Any,
        intermediate: Mapping[int, float] | None = None,
        constraints: Sequence[float] | None = None,
    ) -> None:
        if number in self._told or not state.is_terminal:
            return
        self._told.add(number)
        waiting = self._pending.get(_key(params))
        if not waiting:  # not asked from this study (e.g. an enqueued trial): record it as history
            self._add(params, state, value, intermediate, constraints)
            return
        trial = waiting.pop(0)
        if self.multi_objective:
            self._tell_several(trial, state, value, constraints)
            return
        ostate, ovalue, steps = self._outcome(state, value, intermediate)
        TS = self._optuna.trial.TrialState
        how = self._impute_how(state) if ostate is TS.FAIL else None
        if ostate is TS.COMPLETE or how is not None:
            # Optuna's samplers read them from the trial. Only completed trials (imputed ones too) carry them, as
            # `replay` gives them: a pruned trial with them was infeasible to TPE live but not after a resume
            self._set_constraints(trial, constraints if constraints is not None else self._unreported())
        if ostate is not TS.COMPLETE:   # no sampler reads a completed trial's curve (hundreds of steps, ~5 us each)
            for step, v in steps.items():
                trial.report(v, step)
        if how is not None:
            self._tell_imputed(trial, steps, how)
            return
        self._study.tell(trial, ovalue if ostate is TS.COMPLETE else None, state=ostate)
        if ostate is TS.COMPLETE:
            self._note(ovalue)

    # ------------------------------------------------------------------ several objectives
    def _values(self, state: TrialState, value: Any) -> tuple[Any, list[float] | None]:
        """Optuna's state and values for a terminal trial of a multi-objective sweep: COMPLETE with every
        objective finite, PRUNED for an early-stopped trial (a multi-objective study has no intermediate
        values), FAIL otherwise."""
        TS = self._optuna.trial.TrialState
        if state is TrialState.COMPLETED and isinstance(value, (list, tuple)) and len(value) == len(self.goals) \
                and all(_finite(v) for v in value):
            return TS.COMPLETE, [float(v) for v in value]
        if state in (TrialState.PRUNED, TrialState.STOPPED_BY_RULE, TrialState.STOPPED):
            return TS.PRUNED, None
        return TS.FAIL, None

    def _tell_several(self, trial: Any, state: TrialState, value: Any, constraints: Sequence[float] | None) -> None:
        ostate, values = self._values(state, value)
        if ostate is self._optuna.trial.TrialState.COMPLETE:
            for i, c in enumerate(constraints or ()):
                trial.set_constraint(str(i), float(c))
        self._study.tell(trial, values, state=ostate)

    # ------------------------------------------------------------------ imputation (metric.impute)
    def _unreported(self) -> tuple[float, ...]:
        """The constraint values of an imputed trial the driver has none for (it failed before reporting a
        constrained metric): each broken by 1.0, as the driver rates a trial missing the metric (and as a
        resume rebuilds it). Every completed trial must hold them: Optuna's GP refuses a study whose
        completed trials hold different numbers of constraint values."""
        return (1.0,) * int(self.options.get("constraints") or 0)

    @staticmethod
    def _set_constraints(trial: Any, constraints: Iterable[float]) -> None:
        for i, c in enumerate(constraints):
            trial.set_constraint(str(i), float(c))

    def _impute_how(self, state: TrialState) -> str | None:
        """How a trial that ended without a usable value is imputed (None: the model ignores it).

        With `metric.impute` set: a failed trial, one completed without a finite value, or one a monitor
        stopped before any finite report. Without it, only the last kind, as `worst`: a monitor's stop
        (NaN, divergence, exploding gradients) is a verdict on the configuration, and a model that ignored
        it would keep proposing the region that diverges. `impute: none` turns that off too. Pruned trials
        and crashes without `impute` are not imputed.
        """
        how = self.options.get("impute")
        if how == "none":
            return None
        if how is not None:
            return how if state in (TrialState.FAILED, TrialState.COMPLETED, TrialState.STOPPED_BY_RULE) else None
        return "worst" if state is TrialState.STOPPED_BY_RULE else None

    def _imputed(self, steps: Mapping[int, float], how: str) -> float | None:
        """worst/best: of the trials completed so far; latest: the trial's last report (else worst).
        None while no trial has completed."""
        if how == "latest" and steps:
            return steps[max(steps)]
        return self._best if how == "best" else self._worst

    def _tell_imputed(self, trial: Any, steps: dict[int, float], how: str) -> None:
        value = self._imputed(steps, how)
        if value is None:   # nothing completed yet: it stays running (a constant liar's pending trial)
            self._deferred.append((trial, steps, how))
            return
        trial.set_user_attr(_IMPUTED_ATTR, how)
        self._study.tell(trial, value)

    def _note(self, value: float | None) -> None:
        """A completed trial's value: update worst/best, and tell failed trials that waited for one."""
        if value is None:
            return
        better = self.goal.better
        self._best = value if self._best is None or better(value, self._best) else self._best
        self._worst = value if self._worst is None or better(self._worst, value) else self._worst
        deferred, self._deferred = self._deferred, []
        for trial, steps, how in deferred:
            self._tell_imputed(trial, steps, how)

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

    def _fits(self, params: Mapping[str, Any]) -> bool:
        """Whether the study can hold a trial with `params`: in the space, and no value its axes leave out (a
        value of probability 0, which a grid tries)."""
        from optuna.distributions import CategoricalDistribution

        return self.space.contains(params) and all(
            axis.encode(params[name]) in axis.distribution.choices for name, axis in self._axes.items()
            if name in params and isinstance(axis.distribution, CategoricalDistribution))

    def _add(self, params: Mapping[str, Any], state: TrialState, value: Any,
             intermediate: Mapping[int, float] | None, constraints: Sequence[float] | None = None) -> None:
        if not self._fits(params):
            return  # from another search space (a forked sweep): nothing Optuna could use
        create = self._optuna.trial.create_trial
        TS = self._optuna.trial.TrialState
        named = {str(i): float(c) for i, c in enumerate(constraints or ())} or None
        if state.is_terminal and self._generational:   # asked (so filed under a generation), then told
            trial = self._add_running(params, {})
            if self.multi_objective:
                self._tell_several(trial, state, value, constraints)
                return
            ostate, ovalue, _ = self._outcome(state, value, intermediate)
            for key, c in (named or {}).items():
                trial.set_constraint(key, c)
            self._study.tell(trial, ovalue if ostate is TS.COMPLETE else None, state=ostate)
            return
        if state.is_terminal and self.multi_objective:
            ostate, values = self._values(state, value)
            self._study.add_trial(create(state=ostate, values=values, params=self._encode(params),
                                         distributions=self._active_distributions(params),
                                         constraints=named if ostate is TS.COMPLETE else None))
            return
        if state.is_terminal:
            ostate, ovalue, steps = self._outcome(state, value, intermediate)
            attrs: dict[str, Any] = {}
            how = self._impute_how(state) if ostate is TS.FAIL else None
            if how is not None:
                imputed = self._imputed(steps, how)
                named = named or {str(i): c for i, c in enumerate(self._unreported())} or None
                if imputed is None:   # imputed once a trial completes
                    waiting = self._add_running(params, steps)
                    self._set_constraints(waiting, (named or {}).values())
                    self._deferred.append((waiting, steps, how))
                    return
                ostate, ovalue, attrs = TS.COMPLETE, imputed, {_IMPUTED_ATTR: how}
            frozen = create(state=ostate, value=ovalue, params=self._encode(params),
                            distributions=self._active_distributions(params), intermediate_values=steps,
                            user_attrs=attrs, constraints=named if ostate is TS.COMPLETE else None)
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
        self._note_generation()
        added = self._study.get_trials(deepcopy=False)[-1]
        return self._optuna.trial.Trial(self._study, added._trial_id)

    @property
    def _generational(self) -> bool:
        return hasattr(self._study.sampler, "get_trial_generation")

    def _note_generation(self) -> None:
        """A genetic sampler (NSGA-II) files each trial under a generation when it is asked; a trial added
        by `replay` was never asked here, so without this every replayed trial would be outside all
        generations and the resumed search would start again from a random first generation. Replay adds
        such a trial running, files it by Optuna's rule (`get_trial_generation`, as if the trials before it
        had completed when it was asked: exact for a sequential sweep), then tells it."""
        generation = getattr(self._study.sampler, "get_trial_generation", None)
        if generation is not None:
            generation(self._study, self._study.get_trials(deepcopy=False)[-1])

    def replay(self, history: Sequence[TrialSnapshot]) -> None:
        """A fresh study holding every trial of `history`: terminal ones told, the others running."""
        self._new_study()
        # in number order, as a sequential sweep told them: a failed trial is imputed from the trials completed
        # before it (`_add`), as `tell` imputed it live; imputing from the whole history told the rebuilt study
        # other values than the live one had, so TPE asked other trials after a resume
        ordered = sorted(history, key=lambda s: s.number)
        for snap in ordered:
            if snap.state.is_terminal:
                self._told.add(snap.number)
            value = snap.values if self.multi_objective else snap.value
            self._add(snap.params, snap.state, value, self._intermediate(snap), snap.constraints)

    def _intermediate(self, snap: TrialSnapshot) -> dict[int, float]:
        """The objective's history: the series named by the `metric` option, else the only series."""
        metric = self.options.get("metric")
        if metric is None and len(snap.history) == 1:
            metric = next(iter(snap.history))
        return {int(step): v for step, v in snap.series(metric)} if metric else {}


#: `bayes` runs the GP for this many trials, then TPE on the same study: past a few hundred trials a GP
#: suggestion costs seconds (its fit is cubic in the history) and would idle workers of short trials
BAYES_GP_TRIALS = 300
#: TPE models at most this many finished trials besides the best ones (see `_windowed_tpe`)
TPE_WINDOW = 1000
_TPE_KEEP_BEST = 100   # always modelled: TPE's "good" group is at most the best 25 (default gamma)
_WINDOWED: dict[int, type] = {}


class _WindowView:
    """A study as a windowed TPE sees it: the best finished trials, the latest `window` others, and every
    running one; everything else is the study's own."""

    def __init__(self, study: Any, window: int, cache: _BestCache) -> None:
        self._study, self._window, self._cache = study, window, cache

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Any = None, use_cache: bool = False) -> list[Any]:
        trials = self._study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        if len(trials) <= self._window + _TPE_KEEP_BEST:
            return trials
        return self._cache.view(self._study, trials, self._window)


class _BestCache:
    """The best completed trials of a study's finished prefix, kept across asks so that a windowed view
    costs O(window), not O(history): trials only go from running to finished, and new ones are appended.

    With constraints, TPE's good group is the best *feasible* trials (then, when too few, the least
    infeasible ones): the feasible trials are ranked by value and the infeasible ones by how far they break
    the constraints (Optuna's score), and the best of each are kept."""

    def __init__(self) -> None:
        self._study_key: Any = None
        self._upto = 0            # every trial numbered below this is finished and folded into `_best`
        # max-heaps of the best feasible and the least infeasible trials: (-rank, -number, trial)
        self._best: list[tuple[float, int, Any]] = []
        self._infeasible: list[tuple[float, int, Any]] = []

    @staticmethod
    def _entry(trial: Any, sign: float) -> tuple[bool, tuple[float, int, Any]]:
        broken = sum(v for v in trial.constraints.values() if v > 0)   # Optuna's infeasibility score
        return broken > 0, (-broken if broken > 0 else -sign * trial.value, -trial.number, trial)

    def _fold(self, trial: Any, sign: float) -> None:
        import heapq

        infeasible, entry = self._entry(trial, sign)
        heap = self._infeasible if infeasible else self._best
        if len(heap) < _TPE_KEEP_BEST:
            heapq.heappush(heap, entry)
        elif entry[:2] > heap[0][:2]:
            heapq.heapreplace(heap, entry)

    def view(self, study: Any, trials: list[Any], window: int) -> list[Any]:
        """`trials` (in number order) reduced to the best ones, the latest `window` finished ones, and
        every running one, in number order."""
        import bisect

        from optuna.trial import TrialState as TS

        key = (id(study._storage), study._study_id)
        if key != self._study_key:
            self.__init__()  # type: ignore[misc]
            self._study_key = key
        sign = 1.0 if study.direction.name == "MINIMIZE" else -1.0
        running, complete = TS.RUNNING, TS.COMPLETE
        n = len(trials)
        i = bisect.bisect_left(trials, self._upto, key=lambda t: t.number)
        while i < n and trials[i].state is not running:   # fold the newly finished prefix
            if trials[i].state is complete:
                self._fold(trials[i], sign)
            self._upto = trials[i].number + 1
            i += 1
        start, count = n, 0
        while start > 0 and count < window:   # the latest `window` finished trials start here
            start -= 1
            count += trials[start].state is not running
        later = [self._entry(t, sign) for t in trials[i:] if t.state is complete]   # finished after a running one
        kept: list[Any] = []
        for infeasible, heap in ((False, self._best), (True, self._infeasible)):
            best = sorted([*heap, *(e for bad, e in later if bad is infeasible)], reverse=True)
            kept.extend(t for *_, t in best[:_TPE_KEEP_BEST])
        first = trials[start].number
        before = {t.number: t for t in kept if t.number < first}
        before.update((t.number, t) for t in trials[i:start] if t.state is running)
        return [before[k] for k in sorted(before)] + trials[start:]


def _windowed_tpe(optuna: Any) -> type:
    """TPESampler whose model reads a bounded history (`_WindowView`), so a suggestion's cost stops growing
    with the sweep: Optuna's TPE walks every trial in Python on each ask (~10 ms per 1,000 trials here).

    TPE splits the finished trials into the best ones (at most 25 with its default gamma) and the others,
    whose weights already fade with age (from 1/n for the oldest to 1 for the latest 25): the view keeps
    the best 100 of the whole history, so the good group is exact, and the latest TPE_WINDOW of the others.
    Single-objective only; with several objectives TPE reads the whole history.
    """
    cls = _WINDOWED.get(id(optuna))
    if cls is None:
        base = optuna.samplers.TPESampler

        class WindowedTPESampler(base):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, window: int, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._sweeplab_window = window
                self._sweeplab_best = _BestCache()
                self._sweeplab_gamma = kwargs.get("gamma")

            def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
                if self._group:   # the groups from the trials alone, in number order (see `_fresh_groups`)
                    _fresh_groups(self)
                return super().infer_relative_search_space(study, trial)

            def _sample(self, study: Any, trial: Any, search_space: Any) -> Any:
                if len(study.directions) == 1:
                    study = _WindowView(study, self._sweeplab_window, self._sweeplab_best)
                elif self._sweeplab_gamma is None:   # several objectives, Optuna's default split
                    self._gamma = _valued_gamma(study, optuna)
                return super()._sample(study, trial, search_space)

        cls = _WINDOWED[id(optuna)] = WindowedTPESampler
    return cls


def _fresh_groups(sampler: Any) -> None:
    """Forget a grouped TPE's split of the space before it is computed again for an ask.

    Optuna keeps the split (`_GroupDecomposedSearchSpace`) across asks and folds every finished trial into it
    again at each one, so the order of its groups, in which TPE samples them from one generator, depended on
    when each trial had finished: a trial told late (a failure imputed once a trial completes, after a pruned
    one; a parallel trial) ordered them otherwise than a resume, which rebuilds the study at once and then
    asked other trials. Computed afresh, the split is a function of the trials in number order. Costs nothing:
    Optuna walks every finished trial on each ask either way."""
    space = getattr(sampler, "_group_decomposed_search_space", None)
    if space is not None:
        sampler._group_decomposed_search_space = type(space)(space._include_pruned)


def _valued_gamma(study: Any, optuna: Any) -> Any:
    """Multi-objective TPE's split with early stopping: the "good" group is the best tenth of the trials
    that have values (COMPLETE), not a tenth of all finished trials.

    Optuna counts pruned trials in the size of the good group (`ceil(0.1 * n)`) but can rank only completed
    ones with several objectives (a pruned trial has no values), so with ASHA pruning most trials the good
    group swallowed half the completed trials and TPE stopped telling good regions from mediocre ones.
    Pruned trials still count: they are in the other group, which marks their regions as bad."""
    complete = len(study._get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,), use_cache=True))
    return lambda n: math.ceil(0.1 * min(n, complete))


class TPESearcher(OptunaSearcher):
    """Tree-structured Parzen estimator; constant liar for parallel trials, multivariate for d >= 2;
    the model reads the best trials and the latest TPE_WINDOW others (flat cost in long sweeps)."""

    method = "tpe"
    accepted_options: ClassVar[Mapping[str, type]] = {
        **Searcher.accepted_options, "n_startup_trials": int, "multivariate": bool,
    }

    def make_sampler(self, seed: int | None = None) -> Any:
        sampler = _windowed_tpe(self._optuna)(
            window=TPE_WINDOW,
            seed=self.seed if seed is None else seed,
            constant_liar=True,
            multivariate=self.options.get("multivariate", self.space.dimension >= 2),
            # a conditional space: model each set of parameters that occur together (define-by-run asks)
            group=self.space.conditional and self.options.get("multivariate", self.space.dimension >= 2),
            n_startup_trials=self.options.get("n_startup_trials", 10),
        )
        if startup_design(self.space, self.options, method="tpe"):   # as the Deferred stand-in asked (DesignPoints)
            sampler._random_sampler = _StartupDesign(self._optuna, list(self._distributions), self.seed)
        return sampler


_LIAR_GP: dict[int, type] = {}


class _Believer:
    """The Kriging believer's model for one study state, built by `LiarGPSampler`: one kernel fit on the
    completed trials, reused while they do not change (each prefetched or batch suggestion between two
    results costs no fit), warm-started from the previous fit when they do."""

    def __init__(self) -> None:
        self.key: Any = None       # the completed trials (number, value) the kernel was fitted on
        self.gpr: Any = None       # that fit (its kernel hyperparameters)
        self.fits = 0              # kernel fits so far (for tests and benchmarks)

    def fit(self, sampler: Any, completed: list[Any], space: Any, y: Any) -> Any:
        """The kernel hyperparameters for `completed` (fitted once per distinct set of completed trials)."""
        from optuna._gp import gp

        key = (space.dim, tuple((t.number, t.value) for t in completed))
        if key != self.key:
            cache = self.gpr if self.gpr is not None and len(self.gpr.inverse_squared_lengthscales) == space.dim \
                else None
            self.gpr = gp.fit_kernel_params(
                X=space.get_normalized_params(completed), Y=y, is_categorical=space.is_categorical,
                log_prior=sampler._log_prior, minimum_noise=sampler._minimum_noise,
                deterministic_objective=sampler._deterministic, gpr_cache=cache)
            self.key = key
            self.fits += 1
        return self.gpr


def _believer_suggestion(sampler: Any, study: Any, completed: list[Any], running: list[Any],
                         search_space: Mapping[str, Any]) -> dict[str, Any]:
    """One suggestion with `running` trials in flight: each running trial is added to the GP fitted on the
    completed ones as an observation of its own posterior mean (a posterior update with the same kernel
    hyperparameters, no re-fit), then analytic log-EI is maximised on that model."""
    import numpy as np
    import torch
    from optuna._gp import acqf, gp
    from optuna._gp import search_space as gp_space
    from optuna.samplers._gp.sampler import _get_params, _standardize_values

    space = gp_space.SearchSpace(dict(search_space))
    sign = -1.0 if study.direction.name == "MINIMIZE" else 1.0
    y = _standardize_values(sign * np.array([[t.value] for t in completed]))[0][:, 0]
    fitted = sampler._sweeplab_believer.fit(sampler, completed, space, y)
    x = space.get_normalized_params(completed)
    x_running = torch.from_numpy(space.get_normalized_params(running, [_get_params(t) for t in running]))
    model = gp.GPRegressor(is_categorical=torch.from_numpy(space.is_categorical), X_train=torch.from_numpy(x),
                           y_train=torch.from_numpy(y), kernel_scale=fitted.kernel_scale, noise_var=fitted.noise_var,
                           inverse_squared_lengthscales=fitted.inverse_squared_lengthscales)
    model._cache_matrix()
    with torch.no_grad():
        believed, _ = model.posterior(x_running)
    model.append_running_data(x_running, believed)
    threshold = max(float(y.max()), float(believed.max()))   # the lies count as observations
    acquisition = acqf.LogEI(gpr=model, search_space=space, threshold=threshold)
    best = sampler._optimize_acqf(acquisition, x[np.argmax(y), np.newaxis])
    return space.get_unnormalized_param(best)


def _liar_gp(optuna: Any) -> type:
    """GPSampler that treats running trials as a Kriging believer (Ginsbourger et al. 2010): each is told to
    the model as if it had returned the GP's posterior mean there, so the acquisition (analytic log-EI) is
    low at and near it and parallel suggestions spread out.

    The kernel hyperparameters are fitted on the completed trials only, once per distinct set of them
    (`_Believer`); the running trials only update the posterior (as BoTorch's fantasy models do). So k free
    slots between two results cost one fit and k log-EI optimisations, and a suggestion prefetched while
    trials run costs no fit at all when no result came in since the last one.

    Optuna's own treatment, q-batch log-EI over the running trials (a Monte Carlo joint posterior), costs
    ~0.6 s of CPU per suggestion with 7 running trials, 86 % of it optimizing that acquisition, which idles
    workers of short trials. Measured (benchmarks/parallel_quality.py) against constant lies: the best value
    so far, the mean and the worst all did worse with 8 workers on Branin (median best 0.92-1.27 vs 0.40).
    Single objective and unconstrained only (else Optuna's q-batch acquisition).

    The random startup ends once `n_startup_trials` trials have been asked and half of them (at least 2)
    have completed, not when all have completed: with k workers, waiting for every startup trial to finish
    would make about n_startup_trials + k - 1 trials random (17 of a 40-trial budget with 8 workers).
    """
    cls = _LIAR_GP.get(id(optuna))
    if cls is None:
        base = optuna.samplers.GPSampler

        class LiarGPSampler(base):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._sweeplab_believer = _Believer()

            def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
                with _one_thread():
                    return self._sweeplab_sample(study, trial, search_space)

            def _sweeplab_sample(self, study: Any, trial: Any, search_space: Any) -> Any:
                if not search_space or len(study.directions) != 1:
                    return super().sample_relative(study, trial, search_space)
                import torch
                from optuna.samplers._gp.sampler import _get_params
                from optuna.trial import TrialState as TS

                trials = study._get_trials(deepcopy=False, states=(TS.COMPLETE, TS.RUNNING), use_cache=False)
                completed = [t for t in trials if t.state is TS.COMPLETE]
                running = [t for t in trials if t.state is TS.RUNNING and t.number != trial.number
                           and search_space.keys() <= _get_params(t).keys()]
                if not running or any(t.constraints for t in completed):
                    return super().sample_relative(study, trial, search_space)   # Optuna's own way
                if trial.number < self._n_startup_trials or len(completed) < _startup_done(self._n_startup_trials):
                    return {}
                with torch.device("cpu"):
                    return _believer_suggestion(self, study, completed, running, search_space)

        cls = _LIAR_GP[id(optuna)] = LiarGPSampler
    return cls


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """torch and the BLAS libraries on one thread for a whole GP suggestion. Optuna limits torch only inside
    the kernel fit and the gradient steps; the posterior evaluations around them (2,048 preliminary
    acquisition samples, the believed values) otherwise run on every core, and on a busy machine its OpenMP
    threads spin: a suggestion measured 4-5x the CPU time (0.21 s against 0.04 s, Hartmann6 with 7 running
    trials). Optuna limits OpenBLAS by setting OPENBLAS_NUM_THREADS, which only a library loaded after it
    reads: scipy's BLAS loaded before the first fit (by xgboost, scipy.linalg, scipy.stats.qmc, ...) kept
    every core's threads and made each suggestion 2-5x costlier (Branin, 8 workers: 3.0-5.8 s of CPU for a
    40-trial sweep against 1.2 s). threadpoolctl (the `bayes` extra) limits loaded libraries too.

    The limits are the process's, and suggestions of several threads (a prefetching searcher beside another,
    two sweeps in one notebook) overlap: each saving what it saw and putting it back left the others' 1 for
    good (Optuna's own OPENBLAS_NUM_THREADS too), and every worker started after had one OpenBLAS thread. So
    the first suggestion in saves the process's settings and the last one out puts them back."""
    with _ONE_THREAD.held():
        yield


def _one_thread_on() -> tuple[Any, Any, str | None, Any]:
    """torch and the loaded BLAS libraries on one thread; what `_one_thread_off` puts back."""
    import torch

    before, blas_env = torch.get_num_threads(), os.environ.get("OPENBLAS_NUM_THREADS")
    torch.set_num_threads(1)
    blas = _blas_one_thread()
    blas.__enter__()
    return torch, before, blas_env, blas


def _one_thread_off(saved: tuple[Any, Any, str | None, Any]) -> None:
    torch, threads, blas_env, blas = saved
    blas.__exit__(None, None, None)
    torch.set_num_threads(threads)
    if blas_env is None:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)
    else:
        os.environ["OPENBLAS_NUM_THREADS"] = blas_env


_ONE_THREAD = Shared(_one_thread_on, _one_thread_off)


_BLAS: list[Any] = [None, -1]   # threadpoolctl's view of the loaded libraries, and len(sys.modules) then


def _blas_one_thread() -> Any:
    """A context that holds every loaded BLAS library to one thread (threadpoolctl), else does nothing: the
    limit is an optimisation, a suggestion is the same without it. Finding the loaded libraries costs ~1 ms,
    so it is redone only when a module was imported since (a library is loaded by an import)."""
    import sys

    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return contextlib.nullcontext()
    if _BLAS[1] != len(sys.modules):
        _BLAS[:] = [ThreadpoolController(), len(sys.modules)]
    return _BLAS[0].limit(limits=1, user_api="blas")


def startup_design(space: SearchSpace, options: Mapping[str, Any], *, method: str = "gp") -> bool:
    """Whether `method`'s startup asks are the points of a space-filling design (`_StartupDesign`, asked before
    the model exists by deferred.DesignPoints): one objective, no conditional parameters and no more
    searchable axes than search/_sobol.py's design has; for TPE also no `probabilities` on a parameter's
    values (the design gives each value an equal share, and TPE's random startup is where they are honoured).
    Elsewhere TPE's startup is random, and the GP is built at once (its design then from torch's engine)."""
    from sweeplab.search._sobol import MAX_DIM

    if space.conditional or len(options.get("goals") or ()) > 1 or space.dimension > MAX_DIM:
        return False
    return method != "tpe" or not any(len(set(getattr(d, "probabilities", None) or ())) > 1
                                      for d in space.params.values())


class _StartupDesign:
    """The GP's startup sampler: trial k's parameters are point k of a scrambled Sobol sequence over the
    searchable axes, seeded by the searcher's seed, instead of independent uniform draws.

    The point depends on (seed, k) only, so a resumed sweep asks what the uninterrupted one would (k is the
    driver's trial number, set by `OptunaSearcher.ask`: a withdrawn suggestion is asked again with its point).
    With k workers the first k asks are one batch, and the sequence's first 2^m points put one point in each
    2^-m of every axis, so the GP's first model sees no clumps or gaps. Parameters outside the design (a
    conditional space's) are drawn at random, as Optuna's own startup does. Measured on
    benchmarks/parallel_quality.py: see docs/benchmarks.md (issue 18, "startup design").
    """

    def __init__(self, optuna: Any, names: Sequence[str], seed: int) -> None:
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._rng = self._random._rng      # `_reseed` seeds it per trial (the random fallback's draws)
        self._names = list(names)
        self._seed = seed
        self._points: Any = None
        self.index: int | None = None      # the trial being asked (set by `OptunaSearcher.ask`)

    def __getattr__(self, name: str) -> Any:   # the rest of BaseSampler's interface: the random sampler's
        return getattr(self._random, name)

    def _unit(self, k: int) -> Any:
        """Point k of the design in the unit cube (one coordinate per name): search/_sobol.py's, which the
        startup asks made before the GP existed used too (search/deferred.py); torch's engine past its axes."""
        from sweeplab.search._sobol import MAX_DIM, Sobol

        if len(self._names) <= MAX_DIM:
            if self._points is None:
                self._points = Sobol(len(self._names), self._seed)
            return self._points.point(k)
        import torch

        if self._points is None or len(self._points) <= k:
            # torch's engine, not scipy.stats.qmc: scipy's BLAS imported outside Optuna's thread limit made
            # every later GP fit and acquisition optimisation 2-5x costlier (see `_one_thread`)
            n = max(16, 1 << k.bit_length())   # a power of two beyond k (the same prefix for any n)
            engine = torch.quasirandom.SobolEngine(len(self._names), scramble=True, seed=self._seed)
            self._points = engine.draw(n, dtype=torch.float64).numpy()
        return self._points[k]

    def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
        if self.index is None or name not in self._names:
            return self._random.sample_independent(study, trial, name, distribution)
        return _design_value(float(self._unit(self.index)[self._names.index(name)]), distribution)


def _design_value(x: float, distribution: Any) -> Any:
    """Coordinate `x` in [0, 1) of a design point as a value of `distribution` (Optuna's external form)."""
    import numpy as np
    from optuna._transform import _SearchSpaceTransform
    from optuna.distributions import CategoricalDistribution

    if isinstance(distribution, CategoricalDistribution):
        return distribution.choices[min(int(x * len(distribution.choices)), len(distribution.choices) - 1)]
    # transform_0_1: ints (and stepped floats) get equal shares of [0, 1], logs are searched in log space
    return _SearchSpaceTransform({"x": distribution}, transform_0_1=True).untransform(np.array([x]))["x"]


def design_params(space: SearchSpace, axes: Mapping[str, _Axis], unit: Sequence[float]) -> dict[str, Any]:
    """The parameters of the GP's startup design point `unit` (one coordinate per axis of `encode_space`), as
    `_StartupDesign` makes them for a trial asked from the study: search/deferred.py asks them before the GP
    exists."""
    internal = {name: _design_value(float(x), axis.distribution) for (name, axis), x in zip(axes.items(), unit,
                                                                                             strict=True)}
    out = {name: dist.value if isinstance(dist, Constant) else axes[name].decode(internal[name])
           for name, dist in space.params.items()}
    return copy.deepcopy(out)


def _startup_done(n_startup: int) -> int:
    """Completed trials the believer needs before it models (see `_liar_gp`)."""
    return min(n_startup, max(2, (n_startup + 1) // 2))


class GPSearcher(OptunaSearcher):
    """Gaussian-process Bayesian optimisation (Optuna's GPSampler; needs torch)."""

    method = "gp"
    accepted_options: ClassVar[Mapping[str, type]] = {
        **Searcher.accepted_options, "n_startup_trials": int, "deterministic_objective": bool,
    }

    @classmethod
    def check(cls, options: Mapping[str, Any]) -> None:
        import importlib.util

        super().check(options)
        if importlib.util.find_spec("torch") is None:
            optional_import("torch", "bayes", "GP search")   # raises the missing extra's error

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None = None, *,
                 handoff: int | None = None, **options: Any) -> None:
        optional_import("torch", "bayes", "GP search")
        self.handoff = handoff   # bayes: from this trial number on, TPE asks (see BAYES_GP_TRIALS)
        self._tpe_asks = False
        super().__init__(space, goal, seed, **options)

    def _new_study(self) -> None:
        self._tpe_asks = False
        super()._new_study()

    def ask(self) -> dict[str, Any]:
        if self.handoff is not None and not self._tpe_asks:
            if len(self._study.get_trials(deepcopy=False)) - self._withdrawn >= self.handoff:
                self._tpe_asks = True
                self._study.sampler = self.make_sampler()
        return super().ask()

    def warm_up(self) -> None:
        """One GP suggestion on a scratch study of this space (random values, one trial running): its first
        one costs ~0.6 s of CPU in imports (scipy.optimize, scipy.stats, ...) that would otherwise land on
        the first model-based ask, while workers wait. The sweep's study and generators are not touched."""
        import numpy as np

        if self._tpe_asks or self.multi_objective or self.space.conditional:
            return
        optuna = self._optuna
        sampler = _liar_gp(optuna)(seed=0, n_startup_trials=2, warn_independent_sampling=False)
        study = optuna.create_study(sampler=sampler)
        rng = np.random.default_rng(0)
        for _ in range(3):
            trial = study.ask(self._distributions)
            study.tell(trial, float(rng.normal()))
        study.ask(self._distributions)   # running while the next is asked: the believer's path
        study.ask(self._distributions)

    def make_sampler(self, seed: int | None = None) -> Any:
        if self._tpe_asks:   # the same study, so TPE reads every trial the GP saw
            return _windowed_tpe(self._optuna)(
                window=TPE_WINDOW, seed=self.seed if seed is None else seed, constant_liar=True,
                multivariate=self.space.dimension >= 2, n_startup_trials=self.options.get("n_startup_trials", 10),
                group=self.space.conditional and self.space.dimension >= 2)   # as `tpe` models a conditional space
        design = _StartupDesign(self._optuna, list(self._distributions), self.seed)   # seeded by the sweep, always
        return _liar_gp(self._optuna)(
            seed=self.seed if seed is None else seed,
            independent_sampler=design,
            n_startup_trials=self.options.get("n_startup_trials", 10),
            deterministic_objective=self.options.get("deterministic_objective", False),
            warn_independent_sampling=False,
        )


_NSGA2: dict[int, type] = {}


def _cached_parents_nsga2(optuna: Any) -> type:
    """NSGAIISampler whose every ask draws from a generation's cached parents.

    Optuna selects a generation's parents at its first ask and caches their ids in the study: that first ask
    draws its parents from the selection (in selection order), the later ones from the cache (in trial order),
    and which parent a random index picks depends on that order. A resume in the middle of a generation
    selects them again, so its next ask drew as a first ask would, and the resumed sweep asked another child
    than the uninterrupted one. Caching them before the ask makes every ask draw from the same order."""
    cls = _NSGA2.get(id(optuna))
    if cls is None:
        base = optuna.samplers.NSGAIISampler

        class CachedParentsNSGAIISampler(base):  # type: ignore[misc, valid-type]
            def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
                self.get_parent_population(study, self.get_trial_generation(study, trial))   # caches them
                return super().sample_relative(study, trial, search_space)

        cls = _NSGA2[id(optuna)] = CachedParentsNSGAIISampler
    return cls


class NSGA2Searcher(OptunaSearcher):
    """Optuna's NSGA-II: a genetic algorithm for several objectives (one works too); honours constraints."""

    method = "nsga2"
    accepted_options: ClassVar[Mapping[str, type]] = {**Searcher.accepted_options, "population_size": int}

    def make_sampler(self, seed: int | None = None) -> Any:
        return _cached_parents_nsga2(self._optuna)(
            seed=self.seed if seed is None else seed,
            population_size=self.options.get("population_size", 50),
        )
