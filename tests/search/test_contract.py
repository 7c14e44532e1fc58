"""Every search method, plain and with prefetching, passes the searcher contract."""

from __future__ import annotations

from typing import Any

from sweeplab.search import Prefetching, Searcher, make_searcher
from sweeplab.space import SearchSpace
from sweeplab.testing.searchers import ConditionalSearcherContract, SearcherContract
from sweeplab.types import Goal


class TestEverySearcher(SearcherContract):
    def make(self, method: str, space: SearchSpace, seed: int | None = 0, **options: Any) -> Searcher:
        return make_searcher(method, space, Goal.MINIMIZE, seed, prefetch=False, **options)


class TestEverySearcherPrefetching(SearcherContract):
    def make(self, method: str, space: SearchSpace, seed: int | None = 0, **options: Any) -> Searcher:
        return Prefetching(make_searcher(method, space, Goal.MINIMIZE, seed, prefetch=False, **options))


class TestEverySearcherConditional(ConditionalSearcherContract):
    def make(self, method: str, space: SearchSpace, seed: int | None = 0, **options: Any) -> Searcher:
        return make_searcher(method, space, Goal.MINIMIZE, seed, prefetch=False, **options)
