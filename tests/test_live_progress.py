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


@pytest.mark.parametrize("stream", ["stdout", "stderr-too"])
def test_a_sweep_whose_output_reader_went_away_still_finishes(tmp_path, stream: str) -> None:
    """`sweeplab sweep spec.yaml | head -1` (or a `tee` that was killed): the progress written to a pipe
    nobody reads raised BrokenPipe inside the driver's loop, which ended with exit 1 and left the sweep
    `running (driver gone)`. Output is cosmetic: the sweep runs to its end and exits with its own code."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    trials = Path(__file__).resolve().parent / "fixtures" / "trials.py"
    (tmp_path / "s.yaml").write_text(f"function: {trials}:quick\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
                                     "parameters: {x: {values: [1, 2, 3]}}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["SWEEPLAB_STORE"] = str(tmp_path / "store")
    read, write = os.pipe()
    os.close(read)   # the reader is gone before the first line
    try:
        cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "s.yaml", "--name", "s", "--workers", "1"],
                            cwd=tmp_path, env=env, stdout=write,
                            stderr=write if stream == "stderr-too" else subprocess.PIPE, timeout=300)
    finally:
        os.close(write)
    assert cp.returncode == 0, cp.stderr
    status = subprocess.run([sys.executable, "-m", "sweeplab", "status", "s", "--json"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    sweep = json.loads(status.stdout)["sweep"]
    assert sweep["state"] == "finished" and sweep["counts"]["completed"] == 3, sweep
