"""The hot path of short trials (issue 18 item 5): what the driver does between a trial's end and its
slot's next trial."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sweeplab.testing.fake import Script

QUICK = Script().reports("loss", [0.9, 0.5], every=0.1).finish()


class _Deferring:
    """Wraps the driver's searcher: records whether each ask, tell and dispatch happened inside `deferring`."""

    def __init__(self, inner: Any, seen: list[tuple[str, int]]) -> None:
        self._inner, self._seen, self.depth = inner, seen, 0

    @contextlib.contextmanager
    def deferring(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def ask(self) -> Any:
        self._seen.append(("ask", self.depth))
        return self._inner.ask()

    def tell(self, *args: Any, **kwargs: Any) -> None:
        self._seen.append(("tell", self.depth))
        self._inner.tell(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_trials_are_handed_out_before_the_searcher_may_work_in_the_background(sim: Any) -> None:
    """A suggestion computed in a background thread (Prefetching) holds the GIL for up to 5 ms each time
    the driver's thread releases it for a store or pipe write: the driver asks, tells and dispatches inside
    the searcher's `deferring()` block, so that work starts once the turn's trials are sent."""
    driver, backend = sim.make(QUICK, slots=2, budget={"trials": 6})
    driver.create(spec_path=None)
    seen: list[tuple[str, int]] = []
    driver.searcher = _Deferring(driver.searcher, seen)
    submit = backend.submit
    backend.submit = lambda task: (seen.append(("submit", driver.searcher.depth)), submit(task))[1]
    driver.run()
    assert [op for op, _ in seen].count("submit") == 6 and [op for op, _ in seen].count("tell") == 6
    assert all(depth == 1 for _, depth in seen), seen
