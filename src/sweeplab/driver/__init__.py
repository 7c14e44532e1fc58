"""The driver: one event loop per sweep (loop.py) over small parts that each do one job.

    loop.py      Driver: fill slots, dispatch events, carry out orders; run / interrupt / finish
    state.py     what the driver knows about its sweep (rebuildable from the store)
    recovery.py  create / fork / resume: that state from nothing or from the store; searcher/scheduler replay
    events.py    backend events -> trial states, verdicts, searcher/scheduler feedback, store rows
    tasks.py     a trial -> the TrialTask a backend runs (config, paths, command, environment)
    watchdog.py  time -> orders: budget.time, trial.grace, trial.timeout, heartbeats, idle monitors
    budget.py    what the sweep spent (time, resource-hours, costs) and which budget that reaches
    retry.py     whether a failed attempt runs again; when failing trials are a crash loop
    records.py   the per-trial record, Progress, SweepOutcome, trial_seed
"""

from __future__ import annotations

from sweeplab.driver.loop import Driver
from sweeplab.driver.records import Progress, SweepOutcome, trial_seed

__all__ = ["Driver", "Progress", "SweepOutcome", "trial_seed"]
