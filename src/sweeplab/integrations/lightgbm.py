"""LightGBM: a training callback for `lgb.train`, `lgb.cv` and the scikit-learn estimators (`LGBMRegressor`,
`LGBMClassifier`, `LGBMRanker`) that reports each boosting round's evaluation through the trial's Run,
checkpoints the booster through `run.checkpoint`, and ends training once the trial should stop (what Optuna's
`LightGBMPruningCallback` and Ray Tune's `TuneReportCheckpointCallback` do for their trials).

    from sweeplab.integrations.lightgbm import SweeplabCallback

    def train(config, run):
        callback = SweeplabCallback(run)
        booster = lgb.train(params, dtrain, valid_sets=[dval], valid_names=["val"], callbacks=[callback],
                            num_boost_round=config.rounds - callback.rounds_done,   # 0 on a first attempt
                            init_model=callback.resume_model())                     # None on a first attempt
        return callback.metrics          # e.g. {"val-l2": ...}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sweeplab._imports import optional_import
from sweeplab.integrations import BoosterCallback, scalars
from sweeplab.run import Run

__all__ = ["SweeplabCallback"]

lgb = optional_import("lightgbm", "lightgbm", "the LightGBM callback")


class SweeplabCallback(BoosterCallback):
    """Connects LightGBM's training loop to a trial's `Run`.

    After each boosting round it logs the round's evaluation results as `"<data>-<metric>"` (`"val-l2"` for
    `valid_sets=[dval], valid_names=["val"]`; `"valid_0-l2"` when the sets are not named, and from a
    scikit-learn estimator's `eval_set`; from `lgb.cv`, `"valid-l2"` and `"valid-l2-stdv"`, the mean and
    standard deviation over the folds), the names Ray Tune's callback uses, at `step` = the round (0-based,
    counting the rounds of the model it resumed from, so a resumed attempt goes on at the next round rather
    than at 0). When `trial.checkpoint_every` says a checkpoint is due it saves the booster
    (`model_to_string()`); once `run.should_stop` is true (pruned at a rung, a monitor rule, SIGTERM,
    `sweeplab stop`) it saves a last checkpoint and ends training as LightGBM's `early_stopping` does, keeping
    every round trained so far (`booster.best_iteration` is the last one).

    run         the trial's Run
    metrics     names to report (default: every evaluation result of the round)
    checkpoint  False: never checkpoint (and `resume_model()` returns None)
    """

    before_iteration = False

    def __init__(self, run: Run, *, metrics: Sequence[str] | None = None, checkpoint: bool = True) -> None:
        super().__init__(run, metrics=metrics, checkpoint=checkpoint)
        # LightGBM runs callbacks in the order of this attribute: after `log_evaluation` (10) and
        # `record_evaluation` (20), before `early_stopping` (30), so the round early stopping ends on is still
        # reported. An instance attribute: `lgb.train` gives one the instance lacks its place in the list
        self.order = 25

    def _load(self, data: bytes) -> tuple[Any, int]:
        booster = lgb.Booster(model_str=data.decode())
        return booster, booster.current_iteration()

    # ------------------------------------------------------------------ the hook
    def __call__(self, env: Any) -> None:
        step = int(env.iteration)
        self._report(_results(env.evaluation_result_list or ()), step)
        if self.checkpoint and isinstance(env.model, lgb.Booster) and self.run.checkpoint_due(step):
            self.run.checkpoint(env.model.model_to_string().encode(), step=step, force=True)
        if self.run.should_stop:
            # `lgb.train` and `lgb.cv` end at this exception and keep the rounds up to `best_iteration`
            raise lgb.callback.EarlyStopException(step, list(env.evaluation_result_list or ()))


def _results(results: Sequence[Sequence[Any]]) -> dict[str, float]:
    """The round's values: {"<data>-<metric>": value}; `lgb.cv`'s entries carry the folds' std as a fifth."""
    out: dict[str, Any] = {}
    for entry in results:
        data, name, value = entry[0], entry[1], entry[2]
        out[f"{data}-{name}"] = value
        if len(entry) > 4:
            out[f"{data}-{name}-stdv"] = entry[4]
    return scalars(out)
