"""The searcher seam: ask for parameters, tell outcomes, replay history after a restart.

A searcher decides *what* to try next. It does no I/O: the driver asks, runs the trial elsewhere,
and tells the outcome once the trial reaches a terminal state. After a driver restart the searcher is
rebuilt with `replay(history)` and continues as if it had lived on.
"""

from __future__ import annotations

import contextlib
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from sweeplab.errors import SpecError
from sweeplab.space import SearchSpace
from sweeplab.types import Goal, TrialSnapshot, TrialState

__all__ = ["Searcher", "SequentialSearcher", "check_options", "resolve_seed"]


def resolve_seed(seed: int | None) -> int:
    """A concrete seed: `seed` itself, or a fresh random one (kept in `searcher.seed`)."""
    if seed is None:   # what secrets.randbits does (os.urandom), without importing hmac and OpenSSL for it
        return random.SystemRandom().getrandbits(63)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SpecError("seed must be a non-negative integer", key="seed", value=seed)
    return seed


def check_options(method: str, options: Mapping[str, Any], accepted: Mapping[str, type]) -> None:
    """Reject options a searcher does not know (no silently dropped arguments)."""
    for key, value in options.items():
        if key not in accepted:
            known = ", ".join(sorted(accepted)) or "none"
            raise SpecError(f"unknown option for {method} search", key=key, value=value,
                            expected=f"one of: {known}")
        kind = accepted[key]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            raise SpecError(f"option {key!r} has the wrong type", key=key, value=value,
                            expected=kind.__name__)


class Searcher(ABC):
    """Suggests flat parameter dicts over a SearchSpace; learns from terminal trials."""

    method: ClassVar[str] = ""
    # `metric`: the sweep metric's name, so replay can read intermediate values from snapshots;
    # `impute`: the spec's metric.impute, what model-based searchers assume for failed trials (others ignore it)
    # `goals`: every objective's goal when the sweep has several (the first is `goal`); `constraints`: how
    # many constraint violations `tell` passes. Searchers that do not learn ignore both.
    accepted_options: ClassVar[Mapping[str, type]] = {"metric": str, "impute": str, "goals": tuple,
                                                      "constraints": int}

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None = None, **options: Any) -> None:
        check_options(self.method, options, self.accepted_options)
        self.space = space
        self.goal = Goal(goal)
        self.seed = resolve_seed(seed)
        self.options = dict(options)
        self.notes: list[str] = []

    @abstractmethod
    def ask(self) -> dict[str, Any] | None:
        """The next parameters (flat dotted names), or None when the space is exhausted."""

    def tell(
        self,
        number: int,
        params: Mapping[str, Any],
        state: TrialState,
        value: float | Sequence[float | None] | None,
        intermediate: Mapping[int, float] | None = None,
        constraints: Sequence[float] | None = None,
    ) -> None:
        """Learn the outcome of trial `number`. Called once, when it reaches a terminal state.

        With several objectives `value` is a completed trial's tuple of objective values; `constraints`
        (only passed in sweeps with constraints) are its violations, <= 0 where a constraint is kept."""

    @abstractmethod
    def replay(self, history: Sequence[TrialSnapshot]) -> None:
        """Rebuild from every trial the sweep created so far, in number order (reset semantics).

        Afterwards `ask` continues as the uninterrupted searcher would with this history (trial k depends
        on the seed, k and the history, not on how often the process restarted); it never starts over.
        Unfinished trials in `history` are requeued by the driver with their parameters: not asked again.
        """

    def bind(self, *, root: str, sweep: str) -> None:
        """Where the sweep lives (store root, sweep name), for a searcher that keeps its own state there
        (the Optuna objective study); called by the driver once after construction, before `replay`."""

    def withdraw(self, params: Mapping[str, Any]) -> bool:
        """Forget the latest suggestion `params` (asked, never run); False when this searcher cannot.

        A withdrawn suggestion must leave no trace: the next `ask` is what it would have been had the
        withdrawn one never been asked (same trial number, same seed), so a resume still reproduces it.
        """
        return False

    def warm_up(self) -> None:
        """Pay one-off costs of later asks now (imports, first-call setup) without changing what any ask
        returns. `Prefetching` calls it in the background once workers are fed. A no-op by default."""

    @contextlib.contextmanager
    def deferring(self) -> Iterator[None]:
        """Start no background work (a suggestion computed ahead) inside the block: the driver hands trials
        out in it. A no-op for searchers without background work."""
        yield

    @property
    def exhausted(self) -> bool:
        return False

    def close(self) -> None:
        """Release background resources (a no-op for plain searchers)."""


class SequentialSearcher(Searcher):
    """A searcher whose k-th suggestion depends only on (seed, k): replay is a change of position."""

    def __init__(self, space: SearchSpace, goal: Goal, seed: int | None = None, **options: Any) -> None:
        super().__init__(space, goal, seed, **options)
        self.position = 0

    @abstractmethod
    def point(self, k: int) -> dict[str, Any] | None:
        """The k-th suggestion (0-based), or None past the end."""

    def ask(self) -> dict[str, Any] | None:
        params = self.point(self.position)
        if params is not None:
            self.position += 1
        return params

    def replay(self, history: Sequence[TrialSnapshot]) -> None:
        self.position = len(history)
