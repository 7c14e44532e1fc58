"""The model factory: a booster's parameters from the config, and the booster itself."""

from __future__ import annotations

from typing import Any

import xgboost as xgb


def booster_params(config: Any, *, seed: int, threads: int) -> dict[str, Any]:
    """XGBoost parameters for a regression on squared error; extend with the knobs you sweep."""
    return {
        "objective": "reg:squarederror",
        "eval_metric": "rmse",
        "tree_method": "hist",
        "eta": config.learning_rate,
        "max_depth": config.max_depth,
        "min_child_weight": config.min_child_weight,
        "subsample": config.subsample,
        "colsample_bytree": config.colsample_bytree,
        "lambda": config.reg_lambda,
        "nthread": threads,
        "seed": seed,
    }


def build_booster(params: dict[str, Any], train: xgb.DMatrix, val: xgb.DMatrix,
                  saved: xgb.Booster | bytes | None = None) -> xgb.Booster:
    """A new booster, or a copy of a checkpoint's (`saved`: a Booster, or `booster.save_raw()`) to continue."""
    model_file = saved if isinstance(saved, xgb.Booster) else bytearray(saved) if saved is not None else None
    return xgb.Booster(params, [train, val], model_file=model_file)
