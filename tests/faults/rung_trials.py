"""Trials for the scheduler-across-resume tests (test_resume_decisions.py): each logs `loss = x + 1/step` at steps
1, 2, ..., `steps`, checkpointing every step (unless `checkpoint: false`), so a lower `x` is a better trial at every
rung. With `usd`, it also logs `usd = step * usd`: what it cost so far.

`late` (a trial number): in its first attempt, that trial waits after its step `wait_at` (0: before its first
report) until the file `<go>` exists; it writes `<go>.waiting` first, so a test can signal the driver at that moment.
`linger` seconds: how long a trial takes to end once asked to stop (a trial saving its state), the window in which
a test can kill the driver after a stop was decided but before the trial ended.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def _wait(config, run, step: int) -> None:
    go = config.get("go")
    if go and run.trial == config.get("late") and run.attempt == 1 and step == int(config.get("wait_at", 0)):
        run.flush()
        Path(f"{go}.waiting").write_text(str(os.getpid()))
        while not Path(go).exists():
            time.sleep(0.01)


def train(config, run):
    state = run.restore() or {"step": 0}
    x, steps = float(config["x"]), int(config.get("steps", 4))
    _wait(config, run, int(state["step"]))
    loss = None
    for step in range(int(state["step"]) + 1, steps + 1):
        loss = x + 1.0 / step
        run.log({"loss": loss, **({"usd": step * config["usd"]} if "usd" in config else {})}, step=step)
        if config.get("checkpoint", True):
            run.checkpoint({"step": step}, step=step)
        if run.should_stop:
            time.sleep(float(config.get("linger", 0.0)))
            break
        _wait(config, run, step)
        time.sleep(float(config.get("delay", 0.0)))
    return None if loss is None else {"loss": loss}   # nothing left to run: its reports say it all
