"""A model searcher built when it is first needed: its random startup trials are drawn without it.

TPE's first `n_startup_trials` suggestions are independent draws from the prior whatever the history (Optuna's
TPE draws at random until that many trials have finished, and trial k < n_startup_trials is asked with fewer
finished). Building the model searcher to make them meant importing Optuna and numpy in the driver before a
sweep's first trial: ~0.1 s of CPU on the path of every TPE sweep, about half of the time from launch to its
first trial. `Deferred` draws them as `RandomSearcher` does (one uniform number per parameter through its
inverse CDF: the prior, honouring `probabilities` too; trial k from (seed, k), so a resumed sweep draws what the
uninterrupted one drew) and builds the model searcher in the background once trials run (`warm_up`, which
`Prefetching` calls), and hands it every trial so far, as `replay` does after a restart (asked ones running,
finished ones with their outcome), when the first ask past the startup comes. Which asks are random depends
on how many trials came before only, never on when the model was built, so suggestions do not depend on
timing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeplab.search.base import Searcher
from sweeplab.search.random import RandomSearcher
from sweeplab.space import SearchSpace
from sweeplab.types import Goal, TrialSnapshot, TrialState

__all__ = ["Deferred"]


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, default=repr)


@dataclass
class _Known:
    """A trial the searcher knows before its model exists: asked here (running until told), or told only."""

    params: dict[str, Any]
    outcome: dict[str, Any] | None = None   # the `tell` arguments once it finished
    history: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)


class Deferred(Searcher):
    """Random startup asks without the model; the model searcher (`build()`) from then on.

    `build` must give a searcher whose `replay` takes the trials so far (an OptunaSearcher); `startup` is how
    many of the first asks may be random (its `n_startup_trials`). The options were checked by the caller.
    """

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None, *, method: str, startup: int,
                 build: Callable[[int], Searcher], **options: Any) -> None:
        self.method = method   # type: ignore[misc]  # the searcher it stands for (a ClassVar elsewhere)
        self.space, self.goal, self.options = space, Goal(goal), dict(options)
        self._random = RandomSearcher(space, goal, seed)
        self.seed = self._random.seed
        self.notes: list[str] = []   # the factories' (the model searcher itself adds none)
        self._startup = startup
        self._build = build                    # seed -> the model searcher
        self._inner: Searcher | None = None    # the model searcher, once the startup is over
        self._spare: Searcher | None = None    # ... built ahead by `warm_up`, not handed any trial yet
        self._known: list[_Known] = []         # in the order the model would have numbered them
        self._lock = threading.Lock()          # `warm_up` builds in another thread

    # ------------------------------------------------------------------ the model, once built
    @property
    def built(self) -> bool:
        return self._inner is not None

    def _model(self) -> Searcher:
        """The model searcher, holding every trial so far: built (or taken from `warm_up`) and handed them now
        if it was not (caller holds `_lock`)."""
        if self._inner is None:
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
        """Build the model searcher now, for the first ask past the startup (its imports outside the lock:
        asks and tells go on meanwhile)."""
        with self._lock:
            inner = self._inner or self._spare
        if inner is None:
            inner = self._build(self.seed)
            with self._lock:
                if self._inner is None and self._spare is None:
                    self._spare = inner
        inner.warm_up()

    # ------------------------------------------------------------------ the searcher interface
    def ask(self) -> dict[str, Any] | None:
        with self._lock:
            if self._inner is None and len(self._known) < self._startup:
                params = self._random.point(len(self._known))
                self._known.append(_Known(params))
                return dict(params)
            return self._model().ask()

    def tell(self, number: int, params: Mapping[str, Any], state: TrialState, value: Any,
             intermediate: Mapping[int, float] | None = None, constraints: Sequence[float] | None = None) -> None:
        with self._lock:
            if self._inner is not None:
                self._inner.tell(number, params, state, value, intermediate, constraints=constraints)
                return
            if not state.is_terminal:
                return
            key = _key(params)
            known = next((k for k in self._known if k.outcome is None and _key(k.params) == key), None)
            if known is None:   # not asked here (an enqueued trial): history, as the model files it
                known = _Known(dict(params))
                self._known.append(known)
            known.outcome = {"state": state, "value": value, "constraints": constraints}
            metric = self.options.get("metric") or "value"
            known.history = {metric: tuple(sorted((int(s), float(v)) for s, v in (intermediate or {}).items()))}

    def withdraw(self, params: Mapping[str, Any]) -> bool:
        with self._lock:
            if self._inner is not None:
                return self._inner.withdraw(params)
            if self._known and self._known[-1].outcome is None and _key(self._known[-1].params) == _key(params):
                self._known.pop()   # the next ask draws the same point again, as the model would
                return True
            return False

    def replay(self, history: Sequence[TrialSnapshot]) -> None:
        with self._lock:
            if self._inner is not None:   # `_model` replays it from scratch (a replay resets a study)
                self._spare, self._inner = self._inner, None
            self._known = []
            for snap in sorted(history, key=lambda s: s.number):
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
        on, random startup included (for tests and inspection)."""
        with self._lock:
            return self._model()

    @property
    def study(self) -> Any:
        """The model searcher's study (see `model`)."""
        model: Any = self.model
        return model.study
