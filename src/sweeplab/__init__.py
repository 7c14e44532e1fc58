"""sweeplab: run many ML experiments at once, from a laptop to a Ray cluster, without code changes.

    import sweeplab as sl

    def train(config, run: sl.Run) -> dict:
        for epoch in range(config.epochs):
            ...
            run.log({"val_loss": loss}, step=epoch)
        return {"val_loss": loss}

    outcome = sl.run_sweep("sweep.yaml", workers=4)   # what `sweeplab sweep sweep.yaml -w 4` does
    sweep = sl.sweep("sweep.yaml", fn=train, workers=4, background=True)   # a handle: .wait() .best .trials()
    sweep = sl.optimize(objective, n_trials=100, workers=4)                # an Optuna objective, unchanged
    sl.main(train)   # under `if __name__ == "__main__":` -> `python train.py lr=0.01` runs one recorded trial
"""

from __future__ import annotations

from sweeplab.api import Sweep, load, main, run_sweep, sweep
from sweeplab.errors import (
    BackendError,
    ConfigError,
    MissingExtraError,
    SpecError,
    StoreError,
    SweeplabError,
    UserError,
)
from sweeplab.optuna_compat import optimize
from sweeplab.reporting import report
from sweeplab.run import Run
from sweeplab.types import TrialState

__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("torch", "monitors"):
        import importlib

        return importlib.import_module(f"sweeplab.{name}")
    raise AttributeError(f"module 'sweeplab' has no attribute {name!r}")


__all__ = [
    "BackendError",
    "ConfigError",
    "MissingExtraError",
    "Run",
    "SpecError",
    "StoreError",
    "Sweep",
    "SweeplabError",
    "TrialState",
    "UserError",
    "__version__",
    "load",
    "main",
    "optimize",
    "report",
    "run_sweep",
    "sweep",
]
