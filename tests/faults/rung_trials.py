"""Trials for the scheduler-across-resume tests (test_resume_decisions.py): each logs `loss = x + 1/step` at steps
1, 2, ..., `steps`, checkpointing every step, so a lower `x` is a better trial at every rung.

`late` (a trial number): that trial waits, before its first report, until the file `<go>` exists; it writes
`<go>.waiting` first, so a test can signal the driver while the trial is between its start and its first rung.
`linger` seconds: how long a trial takes to end once asked to stop (a trial saving its state), the window in which
a test can kill the driver after a stop was decided but before the trial ended.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def train(config, run):
    state = run.restore() or {"step": 0}
    x, steps = float(config["x"]), int(config.get("steps", 4))
    go = config.get("go")
    if go and run.trial == config.get("late") and run.attempt == 1:
        Path(f"{go}.waiting").write_text(str(os.getpid()))
        while not Path(go).exists():
            time.sleep(0.01)
    loss = None
    for step in range(int(state["step"]) + 1, steps + 1):
        loss = x + 1.0 / step
        run.log({"loss": loss}, step=step)
        run.checkpoint({"step": step}, step=step)
        if run.should_stop:
            time.sleep(float(config.get("linger", 0.0)))
            break
        time.sleep(float(config.get("delay", 0.0)))
    return {"loss": loss}
