"""A model searcher built when it is first needed: its startup trials are drawn without it.

TPE's and the GP's first `n_startup_trials` suggestions do not depend on the history: they are the points of a
scrambled Sobol design (trial k < n_startup_trials is asked with fewer finished), or for TPE in some spaces
random draws from the prior. Building the model searcher to make them meant importing, in
the driver and before a sweep's first trial, Optuna and numpy (~0.1 s of CPU: about half of a TPE sweep's time
from launch to its first trial) and for the GP torch too (1.1 s). `Deferred` asks them from a plain-Python
stand-in: the very points the model's `_StartupDesign` would ask (`DesignPoints`: search/_sobol.py's design,
torch's `SobolEngine` to the bit, mapped as the GP and TPE map it; this imports Optuna, not torch), or for TPE
where the design does not apply (`optuna.startup_design`: unequal `probabilities`, a conditional space)
`RandomSearcher` (one uniform number per parameter through its inverse CDF: the prior, `probabilities`
honoured, no Optuna imported). Trial k is
a function of (seed, k), so a resumed sweep asks what the uninterrupted one asked.

The model searcher is built in the background once trials run (`warm_up`, which `Prefetching` calls) and
handed every trial so far, as `replay` does after a restart (asked ones running, finished ones with their
outcome), at the first ask past the startup. Which asks come from the stand-in depends on the count of trials
before them only, never on when the model was built, so suggestions do not depend on timing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeplab.search.base import Searcher, SequentialSearcher, resolve_seed
from sweeplab.search.random import RandomSearcher
from sweeplab.space import SearchSpace
from sweeplab.types import Goal, TrialSnapshot, TrialState

__all__ = ["Deferred", "DesignPoints"]


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, default=repr)


class DesignPoints(SequentialSearcher):
    """Point k of the GP's startup design (`_sobol.Sobol` over the searchable axes, seeded by the sweep's seed),
    mapped to parameters as the GP's `_StartupDesign` maps it: the trials it would have asked, exactly. Needs
    Optuna's distributions (~0.1 s to import), not torch."""

    method = "design"

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None = None, **options: Any) -> None:
        from sweeplab.search._sobol import Sobol
        from sweeplab.search.optuna import encode_space

        super().__init__(space, goal, seed, **options)
        self._design = Sobol(space.dimension, self.seed)
        self._axes = encode_space(space)

    def point(self, k: int) -> dict[str, Any]:
        from sweeplab.search.optuna import design_params

        return design_params(self.space, self._axes, self._design.point(k))


@dataclass
class _Known:
    """A trial the searcher knows before its model exists: asked here (running until told), or told only."""

    params: dict[str, Any]
    outcome: dict[str, Any] | None = None   # the `tell` arguments once it finished
    history: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)


class Deferred(Searcher):
    """The startup asks from `first` (a SequentialSearcher class: `RandomSearcher`, `DesignPoints`), without the
    model; the model searcher (`build(seed)`) from then on.

    `build` must give a searcher whose `replay` takes the trials so far (an OptunaSearcher); `startup` is how
    many of the first asks are the stand-in's (its `n_startup_trials`). The options were checked by the caller.
    """

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None, *, method: str, startup: int,
                 build: Callable[[int], Searcher], first: type[SequentialSearcher] = RandomSearcher,
                 **options: Any) -> None:
        self.method = method   # type: ignore[misc]  # the searcher it stands for (a ClassVar elsewhere)
        self.space, self.goal, self.options = space, Goal(goal), dict(options)
        self.seed = resolve_seed(seed)
        self.notes: list[str] = []   # the factories' (the model searcher itself adds none)
        self._first = first(space, goal, self.seed)
        self._startup = startup
        self._build = build                    # seed -> the model searcher
        self._inner: Searcher | None = None    # the model searcher, once the startup is over
        self._spare: Searcher | None = None    # ... built ahead by `warm_up`, not handed any trial yet
        self._building = False                 # `warm_up` is building it
        self._known: list[_Known] = []         # in the order the model would have numbered them
        self._cond = threading.Condition()     # `warm_up` builds in another thread

    # ------------------------------------------------------------------ the model, once built
    def _model(self) -> Searcher:
        """The model searcher, holding every trial so far: built (or taken from `warm_up`, waiting for one that
        is building it) and handed them now if it was not (caller holds `_cond`)."""
        if self._inner is None:
            while self._building:
                self._cond.wait()
            inner, self._spare = self._spare or self._build(self.seed), None
            inner.replay([self._snapshot(i, k) for i, k in enumerate(self._known)])
            self._inner, self._known = inner, []
        return self._inner

    def _snapshot(self, number: int, known: _Known) -> TrialSnapshot:
        out = known.outcome
        if out is None:
            return TrialSnapshot(number=number, params=known.params, state=TrialState.RUNNING)
        value = out["value"]
        several = isinstance(value, (list, tuple))
        return TrialSnapshot(
            number=number, params=known.params, state=out["state"], history=known.history,
            value=None if several else value, values=tuple(value) if several else None,
            constraints=tuple(out["constraints"]) if out["constraints"] is not None else None)

    def warm_up(self) -> None:
        """Build the model searcher now, for the first ask past the startup, and warm it up (outside the lock:
        asks and tells go on meanwhile)."""
        with self._cond:
            inner = self._inner or self._spare
            build = inner is None and not self._building
            self._building = self._building or build
        if build:
            try:
                inner = self._build(self.seed)
            finally:   # a failure is raised again by the ask that needs the model
                with self._cond:
                    self._building = False
                    if inner is not None and self._inner is None and self._spare is None:
                        self._spare = inner
                    self._cond.notify_all()
        if inner is not None:
            inner.warm_up()

    # ------------------------------------------------------------------ the searcher interface
    def ask(self) -> dict[str, Any] | None:
        with self._cond:
            if self._inner is None and len(self._known) < self._startup:
                params = self._first.point(len(self._known))
                if params is None:
                    return None
                self._known.append(_Known(params))
                return dict(params)
            return self._model().ask()

    def tell(self, number: int, params: Mapping[str, Any], state: TrialState, value: Any,
             intermediate: Mapping[int, float] | None = None, constraints: Sequence[float] | None = None) -> None:
        with self._cond:
            if self._inner is not None:
                self._inner.tell(number, params, state, value, intermediate, constraints=constraints)
                return
            if not state.is_terminal:
                return
            key = _key(params)
            known = next((k for k in self._known if k.outcome is None and _key(k.params) == key), None)
            if known is None:   # not asked here (an enqueued trial): history, as the model files it
                if not self.space.contains(params):
                    return   # from another search space: the model would not keep it either
                known = _Known(dict(params))
                self._known.append(known)
            known.outcome = {"state": state, "value": value, "constraints": constraints}
            metric = self.options.get("metric") or "value"
            known.history = {metric: tuple(sorted((int(s), float(v)) for s, v in (intermediate or {}).items()))}

    def withdraw(self, params: Mapping[str, Any]) -> bool:
        with self._cond:
            if self._inner is not None:
                return self._inner.withdraw(params)
            if self._known and self._known[-1].outcome is None and _key(self._known[-1].params) == _key(params):
                self._known.pop()   # the next ask draws the same point again, as the model would
                return True
            return False

    def replay(self, history: Sequence[TrialSnapshot]) -> None:
        with self._cond:
            if self._inner is not None:   # `_model` replays it from scratch (a replay resets a study)
                self._spare, self._inner = self._inner, None
            self._known = []
            for snap in sorted(history, key=lambda s: s.number):
                if not self.space.contains(snap.params):
                    continue   # a forked sweep's trials of another space: the model does not count them
                known = _Known(dict(snap.params), history=dict(snap.history))
                if snap.state.is_terminal:
                    value = snap.values if snap.values is not None else snap.value
                    known.outcome = {"state": snap.state, "value": value, "constraints": snap.constraints}
                self._known.append(known)
            if len(self._known) >= self._startup:
                self._model()

    @property
    def exhausted(self) -> bool:
        return self._inner.exhausted if self._inner is not None else False

    def close(self) -> None:
        for inner in (self._inner, self._spare):
            if inner is not None:
                inner.close()

    @property
    def model(self) -> Searcher:
        """The model searcher, built and handed the trials so far now if need be; every ask goes to it from then
        on, the startup's included (for tests and inspection)."""
        with self._cond:
            return self._model()

    @property
    def study(self) -> Any:
        """The model searcher's study (see `model`)."""
        model: Any = self.model
        return model.study
