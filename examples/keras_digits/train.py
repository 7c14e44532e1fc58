"""Keras 3 `model.fit` on scikit-learn's bundled digits (8x8 images, 10 classes; no download), connected to the
sweep by `sweeplab.integrations.keras.SweeplabCallback`: it logs each epoch's `loss` / `val_loss` /
`val_accuracy`, checkpoints the weights and optimizer state through the trial's Run, resumes a preempted trial
at the right epoch, and sets `model.stop_training` when the trial is pruned, stopped by a rule or preempted.

Keras runs on the backend you have: the KERAS_BACKEND environment variable chooses it (jax, tensorflow, torch);
when it is not set, this example sets torch, which sweeplab's `torch` extra installs.

    sweeplab sweep examples/keras_digits/sweep.yaml
    sweeplab run examples/keras_digits/train.py:train lr=0.003 --config examples/keras_digits/config.yaml
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "torch")   # before keras is imported; the user's choice wins


def load_data(split_seed: int = 0):
    """Digits as float arrays scaled to [0, 1]: 1437 training and 360 validation images."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    return train_test_split((X / 16.0).astype("float32"), y, test_size=0.2, random_state=split_seed, stratify=y)


def train(config, run):
    import keras

    from sweeplab.integrations.keras import SweeplabCallback

    keras.utils.set_random_seed(run.seed or 0)
    X_train, X_val, y_train, y_val = load_data()
    if run.smoke:
        X_train, y_train = X_train[:96], y_train[:96]
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(int(config.hidden), activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(float(config.lr)), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callback = SweeplabCallback(run)
    start = callback.restore(model)     # 0, or the epoch a preempted attempt reached (weights + optimizer loaded)
    model.fit(X_train, y_train, validation_data=(X_val, y_val), batch_size=int(config.batch_size),
              epochs=2 if run.smoke else int(config.epochs), initial_epoch=start, callbacks=[callback], verbose=0)
    return callback.metrics
