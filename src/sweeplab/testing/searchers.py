"""The searcher contract: every search method passes the same suite.

Use it from a test module by subclassing (pytest collects the `Test*` subclass):

    from sweeplab.testing.searchers import SearcherContract

    class TestEverySearcher(SearcherContract):
        pass

Override `make` to test a wrapper, or the `method` fixture to restrict the methods.
`ConditionalSearcherContract` runs the same suite over a conditional space (`when` and `condition`,
nested three deep): every suggestion holds exactly the active parameters.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest

from sweeplab.search import DEFINE_BY_RUN, METHODS, make_searcher
from sweeplab.search.base import Searcher
from sweeplab.space import SearchSpace, parse_parameters
from sweeplab.types import Goal, TrialSnapshot, TrialState

__all__ = [
    "CONDITIONAL_GRID_SIZE",
    "CONDITIONAL_PARAMETERS",
    "CONTRACT_PARAMETERS",
    "ConditionalSearcherContract",
    "SearcherContract",
    "conditional_objective",
    "objective",
]

# discrete enough for grid (3 * 4 * 3 * 2 = 72 combinations), varied enough for the others
CONTRACT_PARAMETERS: dict[str, Any] = {
    "depth": {"min": 1, "max": 3},
    "dropout": {"distribution": "q_uniform", "min": 0.0, "max": 0.3, "q": 0.1},
    "optimizer": {
        "parameters": {
            "name": {"values": ["adam", {"kind": "sgd", "nesterov": True}, None]},
            "momentum": {"values": [0.0, 0.9]},
        }
    },
    "epochs": {"value": 2},
}

# a conditional space, finite for grid: optimizer (adam: 5 beta1 | sgd: 3 momentum x 2 nesterov x 2 decay |
# rmsprop: 2 decay) = 19, times depth 3, times model (mlp: 1 layer | 2 layers x 2 widths; tree: 2) = 5
CONDITIONAL_PARAMETERS: dict[str, Any] = {
    "depth": {"min": 1, "max": 3},
    "optimizer": {
        "values": ["adam", "sgd", "rmsprop"],
        "when": {
            "sgd": {"momentum": {"values": [0.0, 0.5, 0.9]}, "nesterov": {"values": [True, False]}},
            "adam": {"beta1": {"distribution": "q_uniform", "min": 0.75, "max": 1.0, "q": 0.05}},
        },
    },
    "decay": {"values": [0.0, 0.1], "condition": {"param": "optimizer", "in": ["sgd", "rmsprop"]}},
    "model": {
        "parameters": {
            "family": {
                "values": ["mlp", "tree"],
                "when": {
                    "mlp": {"layers": {"values": [1, 2], "when": {2: {"width2": {"values": [8, 16]}}}}},
                    "tree": {"leaves": {"values": [{"min": 2}, None]}},
                },
            },
        }
    },
}
CONDITIONAL_GRID_SIZE = 19 * 3 * 5

HAS_TORCH = importlib.util.find_spec("torch") is not None


def objective(params: dict[str, Any]) -> float:
    """A deterministic objective over CONTRACT_PARAMETERS (lower is better)."""
    name = params["optimizer.name"]
    bonus = 0.0 if name == "adam" else 0.5 if name is None else 0.25
    return (params["depth"] - 2) ** 2 + abs(params["dropout"] - 0.2) + bonus + params["optimizer.momentum"]


def conditional_objective(params: dict[str, Any]) -> float:
    """A deterministic objective over CONDITIONAL_PARAMETERS; raises KeyError if an active one is missing."""
    opt = params["optimizer"]
    loss = (params["depth"] - 2) ** 2
    if opt == "sgd":
        loss += abs(params["momentum"] - 0.9) + (0.1 if params["nesterov"] else 0.0) + params["decay"]
    elif opt == "adam":
        loss += abs(params["beta1"] - 0.9) + 0.2
    else:
        loss += 0.5 + params["decay"]
    if params["model.family"] == "mlp":
        loss += 0.3 if params["model.layers"] == 1 else abs(params["model.width2"] - 16) / 16
    else:
        loss += 0.4 if params["model.leaves"] is None else 0.1
    return loss


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return isinstance(value, list) and all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or type(value) in (bool, int, float, str)


class SearcherContract:
    """Behaviour every searcher shows, whatever its method."""

    steps = 12
    parameters: dict[str, Any] = CONTRACT_PARAMETERS

    def objective(self, params: dict[str, Any]) -> float:
        return objective(params)

    @pytest.fixture(params=[m for m in METHODS if m not in DEFINE_BY_RUN])   # those: tests/optuna
    def method(self, request: pytest.FixtureRequest) -> str:
        if request.param in ("gp", "bayes") and not HAS_TORCH:
            pytest.skip("torch is not installed")
        return str(request.param)

    @pytest.fixture
    def space(self) -> SearchSpace:
        return parse_parameters(self.parameters)

    def make(self, method: str, space: SearchSpace, seed: int | None = 0, **options: Any) -> Searcher:
        return make_searcher(method, space, Goal.MINIMIZE, seed, **options)

    def run(self, searcher: Searcher, steps: int, start: int = 0) -> list[dict[str, Any]]:
        """Sequential ask/tell with `objective`; returns the suggestions."""
        seen = []
        for number in range(start, start + steps):
            params = searcher.ask()
            if params is None:
                break
            seen.append(params)
            searcher.tell(number, params, TrialState.COMPLETED, self.objective(params))
        return seen

    def test_every_suggestion_is_in_the_space_and_plain(self, method: str, space: SearchSpace) -> None:
        searcher = self.make(method, space)
        try:
            suggestions = self.run(searcher, self.steps)
        finally:
            searcher.close()
        assert len(suggestions) == self.steps
        for params in suggestions:
            assert list(params) == list(space.prune(params))   # space order; no inactive parameter
            assert space.contains(params), params
            assert _plain(list(params.values())), params

    def test_same_seed_gives_the_same_sequence(self, method: str, space: SearchSpace) -> None:
        runs = []
        for _ in range(2):
            searcher = self.make(method, space, seed=7)
            try:
                runs.append(self.run(searcher, self.steps))
            finally:
                searcher.close()
        assert runs[0] == runs[1]

    def test_different_seeds_give_different_sequences(self, method: str, space: SearchSpace) -> None:
        if method == "grid":
            pytest.skip("grid order does not depend on the seed")
        runs = []
        for seed in (1, 2):
            searcher = self.make(method, space, seed=seed)
            try:
                runs.append(self.run(searcher, self.steps))
            finally:
                searcher.close()
        assert runs[0] != runs[1]

    def test_replay_then_ask_continues_the_sweep(self, method: str, space: SearchSpace) -> None:
        whole = self.make(method, space, seed=3)
        resumed = self.make(method, space, seed=3)
        try:
            full = self.run(whole, 8)
            k = 5
            history = [
                TrialSnapshot(number=i, params=p, state=TrialState.COMPLETED, value=self.objective(p))
                for i, p in enumerate(full[:k])
            ]
            resumed.replay(history)
            rest = self.run(resumed, 8 - k, start=k)
        finally:
            whole.close()
            resumed.close()
        assert all(space.contains(p) for p in rest)
        # exactly the uninterrupted sequence (same seed, same history): a rebuilt searcher whose random
        # generators start over would re-propose the sweep's first trials instead
        assert rest == full[k:]

    @pytest.mark.parametrize(
        ("state", "value", "intermediate"),
        [
            (TrialState.FAILED, None, None),
            (TrialState.COMPLETED, None, None),
            (TrialState.COMPLETED, math.nan, None),
            (TrialState.COMPLETED, math.inf, None),
            (TrialState.PRUNED, None, {0: 3.0, 1: 2.5}),
            (TrialState.STOPPED_BY_RULE, None, {0: math.nan}),
            (TrialState.STOPPED, None, {}),
        ],
        ids=["failed", "no-value", "nan", "inf", "pruned", "stopped-by-rule-nan", "stopped"],
    )
    def test_tell_accepts_every_terminal_outcome(
        self, method: str, space: SearchSpace, state: TrialState, value: float | None,
        intermediate: dict[int, float] | None,
    ) -> None:
        searcher = self.make(method, space)
        try:
            params = searcher.ask()
            assert params is not None
            searcher.tell(0, params, state, value, intermediate)
            searcher.tell(0, params, state, value, intermediate)  # a repeated tell is harmless
            assert space.contains(searcher.ask() or {})
        finally:
            searcher.close()

    def test_tell_of_a_trial_it_did_not_suggest_is_accepted(self, method: str, space: SearchSpace) -> None:
        searcher = self.make(method, space)
        try:
            outsider = next(space.grid())
            searcher.tell(41, outsider, TrialState.COMPLETED, 1.0)
            searcher.tell(42, {"foreign": 1}, TrialState.COMPLETED, 1.0)
            assert space.contains(searcher.ask() or {})
        finally:
            searcher.close()

    def test_suggestions_do_not_share_mutable_values_with_the_space(
        self, method: str, space: SearchSpace
    ) -> None:
        searcher = self.make(method, space)
        try:
            for number in range(self.steps):
                params = searcher.ask()
                assert params is not None
                for value in params.values():
                    if isinstance(value, dict):
                        value["nesterov"] = "mutated"
                searcher.tell(number, params, TrialState.FAILED, None)
            assert space == parse_parameters(self.parameters)
        finally:
            searcher.close()


class ConditionalSearcherContract(SearcherContract):
    """The same contract over CONDITIONAL_PARAMETERS: suggestions hold exactly the active parameters."""

    parameters = CONDITIONAL_PARAMETERS

    def objective(self, params: dict[str, Any]) -> float:
        return conditional_objective(params)
