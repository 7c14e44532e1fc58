import wandb
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.metrics import mean_absolute_error, mean_squared_error
from sklearn.model_selection import train_test_split

X, y = load_diabetes(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=123)


def train_model():
    wandb.init()
    model = Ridge(alpha=wandb.config.alpha, fit_intercept=wandb.config.fit_intercept)
    model.fit(X_train, y_train)
    y_preds = model.predict(X_test)
    wandb.log({"mae": mean_absolute_error(y_test, y_preds), "mse": mean_squared_error(y_test, y_preds)})


sweep_configs = {
    "method": "bayes",
    "metric": {"name": "mse", "goal": "minimize"},
    "parameters": {"alpha": {"distribution": "uniform", "min": 0, "max": 0.1},
                   "fit_intercept": {"values": [True, False]}},
}
sweep_id = wandb.sweep(sweep_configs, project="traditional_ml_sweeps_example")
wandb.agent(sweep_id=sweep_id, function=train_model)
