"""Training: `train(config, run)` is what the sweep calls for every trial.

Boosting rounds are the training loop: one `booster.update` per round, through `run.track` (which
profiles each round and, in smoke mode, stops after a few). The validation RMSE is logged every round
at step = rounds trained (the fidelity ASHA judges); the booster is checkpointed every round (the
sweep's `trial.checkpoint_every` decides how often one is really written) and resumed after a retry
or preemption; the loop ends early when the scheduler or a monitor asks.

    sweeplab run train.py:train learning_rate=0.05 --config configs/base.yaml --profile local
    python train.py learning_rate=0.05        # the same, from the `sl.main` call at the end
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sweeplab import Run

from data import datasets
from model import booster_params, build_booster


@dataclass(frozen=True)
class TrainConfig:
    """configs/base.yaml (hyperparameters) merged with a profile (environment facts)."""

    rounds: int
    learning_rate: float
    max_depth: int
    min_child_weight: float
    subsample: float
    colsample_bytree: float
    reg_lambda: float
    data_dir: str
    output_dir: str
    num_workers: int


def train(config: TrainConfig, run: Run) -> dict[str, float]:
    dtrain, dval = datasets(config.data_dir, seed=0, threads=config.num_workers)  # a fixed split
    params = booster_params(config, seed=run.seed or 0, threads=config.num_workers)
    state = run.restore()                     # this trial's latest checkpoint (after a retry), or None
    booster = build_booster(params, dtrain, dval, saved=state["booster"] if state else None)
    start = state["round"] if state else 0

    labels = dval.get_label()
    rounds = min(config.rounds, 5) if run.smoke else config.rounds   # smoke: tiny, just prove it runs
    metrics: dict[str, float] = {}
    for i in run.track(range(start, rounds), batch_size=dtrain.num_row()):
        booster.update(dtrain, i)
        metrics = {"val_rmse": rmse(booster, dval, labels)}
        run.log(metrics, step=i + 1)          # step = rounds trained: what ASHA compares
        # the booster itself: serialized only when a checkpoint is really written (every
        # trial.checkpoint_every rounds), not every round (a growing model: that would be quadratic)
        run.checkpoint({"booster": booster, "round": i + 1}, step=i + 1)
        if run.should_stop:                   # pruned by ASHA, stopped by a monitor, or preempted
            break

    if not metrics:                           # resumed after the last round: measure, do not retrain
        metrics = {"val_rmse": rmse(booster, dval, labels)}
    if not run.smoke:                         # the final model, where this machine keeps outputs
        out = Path(config.output_dir) / run.sweep / str(run.trial)
        out.mkdir(parents=True, exist_ok=True)
        booster.save_model(out / "model.ubj")
    return {**metrics, "rounds": float(booster.num_boosted_rounds())}


def rmse(booster, dval, labels: np.ndarray) -> float:
    """Root mean squared error of the booster's current predictions on the validation set."""
    return float(np.sqrt(np.mean((booster.predict(dval) - labels) ** 2)))


if __name__ == "__main__":   # a plain `python train.py key=value ...`: one trial, recorded as `sweeplab run` does
    import sweeplab as sl

    sl.main(train, config="configs/base.yaml", profile="local")
