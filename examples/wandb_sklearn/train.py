"""A W&B program: parameters from wandb.config, metrics through wandb.log. Nothing sweeplab-specific."""

import warnings

import wandb
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

defaults = {"learning_rate": 0.01, "epochs": 12, "model": {"hidden": 32, "alpha": 0.0001}}
run = wandb.init(config=defaults)
config = wandb.config
run.define_metric("val_accuracy", summary="max")

X, y = load_digits(return_X_y=True)
X_train, X_val, y_train, y_val = train_test_split(X / 16.0, y, test_size=0.25, random_state=0)
model = MLPClassifier(hidden_layer_sizes=(config.model["hidden"],), alpha=config.model["alpha"],
                      learning_rate_init=config.learning_rate, max_iter=1, warm_start=True, random_state=0)
warnings.filterwarnings("ignore", category=ConvergenceWarning)
for epoch in range(config.epochs):
    model.fit(X_train, y_train)
    wandb.log({"train_loss": model.loss_, "val_accuracy": model.score(X_val, y_val)}, step=epoch)
wandb.finish()
