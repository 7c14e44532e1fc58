"""XGBoost regression on scikit-learn's bundled diabetes data (no download).

Reports the validation MSE after every boosting round through `run.log`, so schedulers can stop
hopeless trials early, and stops cleanly when `run.should_stop` is set.
"""

from __future__ import annotations


def load_data(seed: int = 0):
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split

    X, y = load_diabetes(return_X_y=True)
    return train_test_split(X, y, test_size=0.25, random_state=seed)


def train(config, run):
    import xgboost as xgb

    X_train, X_val, y_train, y_val = load_data(config.data.split_seed)
    dtrain = xgb.DMatrix(X_train, label=y_train)
    dval = xgb.DMatrix(X_val, label=y_val)
    params = {
        "objective": "reg:squarederror",
        "eval_metric": "rmse",
        "max_depth": int(config.max_depth),
        "eta": float(config.learning_rate),
        "lambda": float(config.reg_lambda),
        "subsample": float(config.subsample),
        "nthread": int(config.nthread),
        "seed": run.seed or 0,
    }
    rounds = 5 if run.smoke else int(config.n_estimators)

    class Report(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            mse = evals_log["val"]["rmse"][-1] ** 2
            run.log({"val_mse": mse}, step=epoch)
            return run.should_stop          # True ends training (pruned, stopped, preempted)

    history: dict = {}
    booster = xgb.train(params, dtrain, num_boost_round=rounds, evals=[(dval, "val")],
                        evals_result=history, callbacks=[Report()], verbose_eval=False)
    val_mse = history["val"]["rmse"][-1] ** 2
    return {"val_mse": val_mse, "best_round": booster.num_boosted_rounds()}
