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
    checkpoint and ends training before the next round. Checkpoints are written once every callback has
    seen the round (an `EarlyStopping` has then recorded it in the booster); `early_stopping(rounds)` is an
    `EarlyStopping` that goes on from a resumed booster's best round.

    run         the trial's Run
    metrics     names to report (default: every evaluation result of the round)
    checkpoint  False: never checkpoint (and `resume_model()` returns None)
    """

    _done: int | None = None   # the last round reported and not yet settled (`_settle`)

    def _load(self, data: bytes) -> tuple[Any, int]:
        booster = xgb.Booster()
        booster.load_model(bytearray(data))
        return booster, booster.num_boosted_rounds()

    def early_stopping(self, rounds: int, **options: Any) -> Any:
        """XGBoost's `EarlyStopping(rounds, **options)` that goes on counting across a resume: on a model
        `resume_model()` returned, it starts from that model's best round and score (which XGBoost keeps in
        the booster) instead of afresh. Pass it in `callbacks` in place of `early_stopping_rounds=rounds`
        (`xgb.train`, or a scikit-learn estimator's constructor), so that a preempted trial stops at the round,
        and keeps the best round, of an uninterrupted one. XGBoost's own started again at the resumed model:
        its first new round became the best, and the patience counted from there."""
        return _ResumableEarlyStopping(rounds=rounds, **options)

    # ------------------------------------------------------------------ hooks
    def after_iteration(self, model: Any, epoch: int, evals_log: Mapping[str, Mapping[str, Any]]) -> bool:
        rounds = _rounds(model)
        step = rounds - 1 if rounds is not None else int(epoch)
        self._report(_results(evals_log), step)
        self._done = step   # checkpointed before the next round: every callback has seen this one by then
        return False        # never ends training here: a callback after this one would miss the round

    def before_iteration(self, model: Any, epoch: int, evals_log: Mapping[str, Mapping[str, Any]]) -> bool:
        self._settle(model)
        return bool(self.run.should_stop)   # ends training before the next round, as a True here does

    def after_training(self, model: Any) -> Any:
        self._settle(model)
        return model

    def _settle(self, model: Any) -> None:
        """Checkpoint the last round trained when the policy (or a stop request) says so. Done after every
        callback's `after_iteration` of that round: an `EarlyStopping` beside this one has then recorded it in
        the booster (`best_score`, `best_iteration`), which a resumed attempt goes on from."""
        step, self._done = self._done, None
        if step is not None and self.checkpoint and isinstance(model, xgb.Booster) and self.run.checkpoint_due(step):
            self.run.checkpoint(bytes(model.save_raw("ubj")), step=step, force=True)


class _ResumableEarlyStopping(xgb.callback.EarlyStopping):  # type: ignore[misc,name-defined]
    """`EarlyStopping` that takes its state over from a continued model's `best_score` / `best_iteration`."""

    def before_training(self, model: Any) -> Any:
        model = super().before_training(model)
        self._carried: tuple[float, int, int] | None = None
        if isinstance(model, xgb.Booster) and model.num_boosted_rounds() > 0:
            score, best = model.attr("best_score"), model.attr("best_iteration")
            if score is not None and best is not None:
                self._carried = (float(score), int(best), model.num_boosted_rounds())
        return model

    def _update_rounds(self, *, score: Any, name: str, metric: str, model: Any, epoch: int) -> bool:
        if self._carried is not None and not self.stopping_history:  # type: ignore[has-type]
            best_score, best, rounds = self._carried   # as if this callback had seen the earlier rounds
            self.stopping_history = {name: {metric: [best_score]}}
            self.best_scores = {name: {metric: [best_score]}}
            self.current_rounds = rounds - 1 - best
        return bool(super()._update_rounds(score=score, name=name, metric=metric, model=model, epoch=epoch))


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
