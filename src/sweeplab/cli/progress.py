"""Live progress of a running sweep: a rich panel on a terminal, a line every few seconds in a pipe."""

from __future__ import annotations

import time
from typing import Any

from sweeplab.cli.output import _Console, console


class _Panel:
    """What the live display shows: built from the latest progress only when rich refreshes the screen
    (4 times a second), not on each of the driver's progress updates (up to 10 a second)."""

    def __init__(self, owner: _LiveProgress) -> None:
        self.owner = owner

    def __rich__(self) -> Any:
        p = self.owner.last
        return self.owner.render(p) if p is not None else ""


class _LiveProgress:
    """Live progress with rich: trials done/running/failed, best so far, elapsed and ETA."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.live: Any = None
        self.last: Any = None

    def __enter__(self) -> _LiveProgress:
        _Console.keep_going_on_broken_pipe = True   # from here to the end, output is cosmetic: the sweep is not
        if not self.quiet and console.is_terminal:
            from rich.live import Live

            self.live = Live(_Panel(self), console=console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, p: Any) -> None:
        self.last = p   # the live display reads it when it refreshes
        if self.live is not None:
            return
        if not self.quiet and not console.is_terminal:
            now = time.monotonic()
            if now - getattr(self, "_printed", 0.0) > 5:
                self._printed = now
                console.print(self.line(p))

    @staticmethod
    def line(p: Any) -> str:
        c = p.counts
        done = sum(c.get(k, 0) for k in ("completed", "pruned", "stopped_by_rule", "stopped"))
        total = p.budget_trials if p.budget_trials is not None else "?"
        best = f"{p.best_value:.6g} (trial {p.best_trial})" if p.best_value is not None else "-"
        eta = f"{p.eta:.0f}s" if p.eta is not None else "-"
        return (f"{p.sweep}: {done}/{total} done, {p.running} running, {c.get('failed', 0)} failed, "
                f"{c.get('pruned', 0)} pruned | best {best} | elapsed {p.elapsed:.0f}s, ETA {eta}")

    def render(self, p: Any) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table as T

        c = p.counts
        done = sum(c.get(k, 0) for k in ("completed", "pruned", "stopped_by_rule", "stopped", "failed"))
        grid = T.grid(padding=(0, 2))
        total = p.budget_trials or max(done, 1)
        grid.add_row(ProgressBar(total=total, completed=done, width=30),
                     f"{done}/{p.budget_trials or '?'} trials")
        grid.add_row("running", str(p.running))
        grid.add_row("completed", str(c.get("completed", 0)))
        if c.get("pruned") or c.get("stopped_by_rule"):
            grid.add_row("pruned / stopped by rule", f"{c.get('pruned', 0)} / {c.get('stopped_by_rule', 0)}")
        grid.add_row("failed", str(c.get("failed", 0)))
        best = f"{p.best_value:.6g}  (trial {p.best_trial})" if p.best_value is not None else "-"
        grid.add_row("best so far", best)
        eta = f"{p.eta:.0f}s" if p.eta is not None else "-"
        grid.add_row("elapsed / ETA", f"{p.elapsed:.1f}s / {eta}")
        return grid
