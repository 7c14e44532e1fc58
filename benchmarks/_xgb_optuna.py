"""The XGBoost demo (examples/xgboost_diabetes) written as a plain Optuna objective, for optuna_path.py.

Same data split, search space and per-round validation MSE as the sweeplab demo; the MSE is reported every
round and Optuna's pruner is consulted, as an Optuna user would write it.
"""

from __future__ import annotations

import optuna

_DATA = None


def _data():
    global _DATA
    if _DATA is None:
        from sklearn.datasets import load_diabetes
        from sklearn.model_selection import train_test_split

        X, y = load_diabetes(return_X_y=True)
        _DATA = train_test_split(X, y, test_size=0.25, random_state=0)
    return _DATA


def objective(trial: optuna.Trial) -> float:
    import xgboost as xgb

    X_train, X_val, y_train, y_val = _data()
    params = {
        "objective": "reg:squarederror",
        "eval_metric": "rmse",
        "max_depth": trial.suggest_int("max_depth", 2, 8),
        "eta": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
        "lambda": trial.suggest_float("reg_lambda", 0.01, 10.0, log=True),
        "subsample": trial.suggest_float("subsample", 0.5, 1.0),
        "nthread": 1,
        "seed": 0,
    }
    rounds = trial.suggest_int("n_estimators", 50, 300)

    class Report(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            mse = evals_log["val"]["rmse"][-1] ** 2
            if epoch % 10 == 9:
                trial.report(mse, epoch)
                if trial.should_prune():
                    raise optuna.TrialPruned()
            return False

    history: dict = {}
    xgb.train(params, xgb.DMatrix(X_train, label=y_train), num_boost_round=rounds,
              evals=[(xgb.DMatrix(X_val, label=y_val), "val")], evals_result=history, callbacks=[Report()],
              verbose_eval=False)
    return history["val"]["rmse"][-1] ** 2
