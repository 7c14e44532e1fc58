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

import json
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
    every round trained so far (`booster.best_iteration` is the last one). `early_stopping(rounds)` is a
    LightGBM `early_stopping` whose state the checkpoints keep, so a resumed attempt goes on counting.

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
        self._stoppers: list[_ResumableEarlyStopping] = []
        self._carried: list[Any] | None = None   # the resumed checkpoint's early-stopping states

    def early_stopping(self, stopping_rounds: int, **options: Any) -> Any:
        """LightGBM's `early_stopping(stopping_rounds, **options)` that goes on counting across a resume: its
        best round and scores are saved in this callback's checkpoints, and on the model `resume_model()`
        returned it starts from them instead of afresh. Pass it in `callbacks` beside this callback, in place
        of `lgb.early_stopping(...)` / `early_stopping_round=` (`lgb.train`, or a scikit-learn estimator's
        `fit`), so that a preempted trial stops at the round, and keeps the best round, of an uninterrupted
        one. LightGBM's own keeps that state in the callback only: a resumed attempt took its first new round
        as the best and counted the patience from there."""
        stopper = _ResumableEarlyStopping(self, stopping_rounds, **options)
        self._stoppers.append(stopper)
        return stopper

    def _load(self, data: bytes) -> tuple[Any, int]:
        text = data.decode()
        self._carried = _state_in(text)
        booster = lgb.Booster(model_str=text)
        return booster, booster.current_iteration()

    # ------------------------------------------------------------------ the hook
    def __call__(self, env: Any) -> None:
        step = int(env.iteration)
        self._report(_results(env.evaluation_result_list or ()), step)
        stopped = None
        try:   # `early_stopping` sees the round before the checkpoint, which then holds its state
            for stopper in self._stoppers:
                stopper(env)
        except lgb.callback.EarlyStopException as exc:
            stopped = exc   # raised once the checkpoint is saved
        if self.checkpoint and isinstance(env.model, lgb.Booster) and self.run.checkpoint_due(step):
            text = env.model.model_to_string()
            if self._stoppers:
                text = _with_state(text, [s.state(env) if s.enabled else None for s in self._stoppers])
            self.run.checkpoint(text.encode(), step=step, force=True)
        if stopped is not None:
            raise stopped
        if self.run.should_stop:
            # `lgb.train` and `lgb.cv` end at this exception and keep the rounds up to `best_iteration`
            raise lgb.callback.EarlyStopException(step, list(env.evaluation_result_list or ()))


class _ResumableEarlyStopping(lgb.callback._EarlyStoppingCallback):  # type: ignore[misc,name-defined]
    """LightGBM's early stopping, which takes its state over from the checkpoint the resumed model came from.
    Run by the `SweeplabCallback` that made it, before that one checkpoints the round; LightGBM's own call of
    the same round then does nothing."""

    def __init__(self, owner: SweeplabCallback, stopping_rounds: int, **options: Any) -> None:
        super().__init__(stopping_rounds, **options)
        self._owner = owner
        self._seen: int | None = None   # the last round seen

    def __call__(self, env: Any) -> None:
        if env.iteration == self._seen:
            return
        self._seen = env.iteration
        super().__call__(env)

    def _init(self, env: Any) -> None:
        """LightGBM's set-up at the first round, then the resumed state, if it is this model's and its
        evaluation results are the same ones."""
        super()._init(env)
        states, results = self._owner._carried or [], list(env.evaluation_result_list or ())
        at = self._owner._stoppers.index(self)   # the owner's n-th early stopping takes the n-th state
        state = states[at] if at < len(states) and isinstance(states[at], dict) else None
        if (not self.enabled or state is None or not isinstance(env.model, lgb.Booster)
                or state.get("next") != env.begin_iteration or state.get("names") != _names(results)):
            return
        kind = type(results[0])   # lightgbm.EvalResult, a tuple before LightGBM 4.7
        self.best_score = [float(v) for v in state["best_score"]]
        self.best_iter = [int(v) for v in state["best_iter"]]
        self.best_score_list = [[tuple(r) if kind is tuple else kind(*r) for r in entry]
                                for entry in state["best_results"]]

    def state(self, env: Any) -> dict[str, Any]:
        """What a resumed attempt goes on from, after round `env.iteration` (which this has seen)."""
        return {"next": int(env.iteration) + 1, "names": _names(env.evaluation_result_list or ()),
                "best_score": list(self.best_score), "best_iter": list(self.best_iter),
                "best_results": [[list(r) for r in entry] for entry in self.best_score_list]}


def _names(results: Sequence[Sequence[Any]]) -> list[list[str]]:
    return [[str(r[0]), str(r[1])] for r in results]


_KEY = "sweeplab_early_stopping="   # a line of the booster text's header, which LightGBM passes over


def _with_state(text: str, states: list[Any]) -> str:
    """The booster text with `states` as a header line: the checkpoint stays a model LightGBM loads."""
    line = json.dumps(states, separators=(",", ":")).replace("=", "\\u003d")   # one `=` in a header line
    head, sep, rest = text.partition("\n")
    return f"{head}{sep}{_KEY}{line}\n{rest}"


def _state_in(text: str) -> list[Any] | None:
    """The states `_with_state` put in a booster text, or None (a checkpoint of the booster's text alone)."""
    header = text.split("\nTree=", 1)[0]
    at = header.find("\n" + _KEY)
    if at < 0:
        return None
    try:
        state = json.loads(header[at + 1 + len(_KEY):].split("\n", 1)[0])
    except ValueError:
        return None
    return state if isinstance(state, list) else None


def _results(results: Sequence[Sequence[Any]]) -> dict[str, float]:
    """The round's values: {"<data>-<metric>": value}; `lgb.cv`'s entries carry the folds' std as a fifth."""
    out: dict[str, Any] = {}
    for entry in results:
        data, name, value = entry[0], entry[1], entry[2]
        out[f"{data}-{name}"] = value
        if len(entry) > 4:
            out[f"{data}-{name}-stdv"] = entry[4]
    return scalars(out)
