"""XGBoost: a training callback for `xgb.train`, `xgb.cv` and the scikit-learn estimators (`XGBRegressor`,
`XGBClassifier`, ...) that reports each boosting round's evaluation through the trial's Run, checkpoints the
booster through `run.checkpoint`, and ends training once the trial should stop (what Optuna's
`XGBoostPruningCallback` and Ray Tune's `TuneReportCheckpointCallback` do for their trials).

    from sweeplab.integrations.xgboost import SweeplabCallback

    def train(config, run):
        callback = SweeplabCallback(run)
        booster = xgb.train(params, dtrain, evals=[(dval, "val")], callbacks=[callback],
                            num_boost_round=config.rounds - callback.rounds_done,   # 0 on a first attempt
                            xgb_model=callback.resume_model())                      # None on a first attempt
        return callback.metrics          # e.g. {"val-rmse": ...}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sweeplab._imports import optional_import
from sweeplab.integrations import BoosterCallback, scalars

__all__ = ["SweeplabCallback"]

xgb = optional_import("xgboost", "xgboost", "the XGBoost callback")


class SweeplabCallback(BoosterCallback, xgb.callback.TrainingCallback):  # type: ignore[misc,name-defined]
    """Connects XGBoost's training loop to a trial's `Run`.

    After each boosting round it logs the round's evaluation results as `"<data>-<metric>"` (`"val-rmse"` for
    `evals=[(dval, "val")]` with `eval_metric="rmse"`; `"validation_0-rmse"` from a scikit-learn estimator's
    `eval_set`; `"test-rmse"` and `"test-rmse-std"`, the mean and standard deviation over the folds, from
    `xgb.cv`), the names Optuna's and Ray Tune's callbacks use, at `step` = the round (0-based, counting the
    rounds of the model it resumed from, so a resumed attempt goes on at the next round rather than at 0).
    When `trial.checkpoint_every` says a checkpoint is due it saves the booster (`save_raw("ubj")`); once
    `run.should_stop` is true (pruned at a rung, a monitor rule, SIGTERM, `sweeplab stop`) it saves a last
    checkpoint and ends training, as an early-stopping callback does.

    run         the trial's Run
    metrics     names to report (default: every evaluation result of the round)
    checkpoint  False: never checkpoint (and `resume_model()` returns None)
    """

    def _load(self, data: bytes) -> tuple[Any, int]:
        booster = xgb.Booster()
        booster.load_model(bytearray(data))
        return booster, booster.num_boosted_rounds()

    # ------------------------------------------------------------------ hooks
    def after_iteration(self, model: Any, epoch: int, evals_log: Mapping[str, Mapping[str, Any]]) -> bool:
        rounds = _rounds(model)
        step = rounds - 1 if rounds is not None else int(epoch)
        self._report(_results(evals_log), step)
        if self.checkpoint and isinstance(model, xgb.Booster) and self.run.checkpoint_due(step):
            self.run.checkpoint(bytes(model.save_raw("ubj")), step=step, force=True)
        if not self.run.should_stop:
            return False
        if not isinstance(model, xgb.Booster) and model.attr("best_iteration") is None:
            # `xgb.cv` keeps its results up to the best iteration after a callback ends it, which only its
            # `EarlyStopping` sets: without one it failed with "int() argument must be ... not 'NoneType'"
            model.set_attr(best_iteration=str(rounds - 1 if rounds is not None else epoch))
        return True                          # ends training


def _rounds(model: Any) -> int | None:
    try:   # a Booster, or xgb.cv's pack of the folds' boosters
        return int(model.num_boosted_rounds())
    except Exception:
        return None


def _results(evals_log: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """The round's values: {"<data>-<metric>": the last value}; `xgb.cv` logs (mean, std) pairs."""
    out: dict[str, Any] = {}
    for data, by_metric in evals_log.items():
        for name, history in by_metric.items():
            if not len(history):
                continue
            last = history[-1]
            if isinstance(last, tuple):
                out[f"{data}-{name}"], out[f"{data}-{name}-std"] = last[0], last[1]
            else:
                out[f"{data}-{name}"] = last
    return scalars(out)
