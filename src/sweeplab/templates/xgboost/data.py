"""The data pipeline: XGBoost DMatrix objects over scikit-learn's bundled diabetes data (regression).

The diabetes data ships with scikit-learn, so the template runs without a download. For your own data,
read it from `data_dir` (a profile value: `data` locally, shared storage on a cluster) in `datasets()`.
"""

from __future__ import annotations

import xgboost as xgb


def datasets(data_dir: str, *, seed: int = 0, threads: int = 1) -> tuple[xgb.DMatrix, xgb.DMatrix]:
    """Training and validation DMatrix (75/25). `data_dir` is unused by the bundled data."""
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split

    features, target = load_diabetes(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(features, target, test_size=0.25, random_state=seed)
    return (xgb.DMatrix(x_train, label=y_train, nthread=threads),
            xgb.DMatrix(x_val, label=y_val, nthread=threads))
