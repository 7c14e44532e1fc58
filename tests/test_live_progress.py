"""The live progress panel (issue 18): its cost follows the screen's refresh rate, not the trial rate."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

import sweeplab.cli.progress as progress
from sweeplab.driver.records import Progress


def _progress(done: int) -> Progress:
    return Progress(sweep="s", counts={"completed": done}, running=2, created=done + 2, budget_trials=5000,
                    best_value=0.5, best_trial=1, best_params={"x": 1}, elapsed=1.0, eta=2.0)


def test_the_panel_is_built_when_the_screen_refreshes_not_per_update(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(progress, "console", Console(file=screen, force_terminal=True, width=100))
    built: list[int] = []
    render = progress._LiveProgress.render

    def counting(self: Any, p: Any) -> Any:
        built.append(p.counts["completed"])
        return render(self, p)

    monkeypatch.setattr(progress._LiveProgress, "render", counting)
    with progress._LiveProgress(quiet=False) as live:
        assert live.live is not None   # a terminal: the rich panel
        for done in range(2000):     # the driver sends an update per turn: far more than 4 a second
            live.update(_progress(done))
    assert len(built) < 100
    assert built[-1] == 1999          # the final screen shows the last state
    assert "1999/5000 trials" in screen.getvalue()
