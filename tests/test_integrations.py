"""The pieces under the framework callbacks, without a framework: `scalars` (what a metric dict reports),
`Run.checkpoint_due` (skip building a checkpoint the policy would drop), and the missing-extra errors."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from sweeplab.errors import MissingExtraError
from sweeplab.integrations import scalars
from sweeplab.run import Run


def test_scalars_keeps_single_numbers_only():
    torch = pytest.importorskip("torch")
    values = {"loss": torch.tensor(0.5), "acc": np.float32(0.25), "n": 3, "lr": 1e-3, "nan": float("nan"),
              "vec": torch.tensor([1.0, 2.0]), "one": torch.tensor([7.0]), "name": "adam", "flag": True,
              "arr": np.array([1, 2]), "none": None}
    got = scalars(values)
    assert set(got) == {"loss", "acc", "n", "lr", "nan", "one"}
    assert got["loss"] == 0.5 and got["acc"] == 0.25 and got["n"] == 3.0 and got["one"] == 7.0
    assert got["nan"] != got["nan"]   # NaN is reported as it is: the `nan` monitor must see it
    assert all(type(v) is float for v in got.values())
    assert scalars(values, keys=["loss", "name", "missing"]) == {"loss": 0.5}


def _run(tmp_path, every, events):
    return Run(config={}, sink=lambda kind, data: events.append((kind, data)), checkpoint_dir=str(tmp_path),
               checkpoint_every=every)


def test_checkpoint_due_follows_the_policy_and_a_stop_request(tmp_path):
    events: list = []
    run = _run(tmp_path, 3, events)
    due = []
    for step in range(7):
        if run.checkpoint_due(step):
            due.append(step)
            assert run.checkpoint({"step": step}, step=step, force=True)
    assert due == [0, 3, 6]   # every 3 steps, the first call always
    assert [d["step"] for k, d in events if k == "checkpoint"] == [0, 3, 6]
    run.request_stop("preempted (SIGTERM)")
    assert run.checkpoint_due(7)   # a stop request lets the next checkpoint through


def test_checkpoint_due_is_false_on_other_ranks(tmp_path):
    run = Run(config={}, sink=lambda kind, data: None, checkpoint_dir=str(tmp_path), rank=1)
    assert not run.checkpoint_due(0)


@pytest.mark.parametrize(("module", "framework", "extra"), [
    ("sweeplab.integrations.keras", "keras", "keras"),
    ("sweeplab.integrations.transformers", "transformers", "transformers"),
    ("sweeplab.integrations.lightning", "lightning", "lightning"),
    ("sweeplab.integrations.xgboost", "xgboost", "xgboost"),
    ("sweeplab.integrations.lightgbm", "lightgbm", "lightgbm"),
])
def test_a_missing_framework_names_its_extra(monkeypatch, module, framework, extra):
    monkeypatch.setitem(sys.modules, framework, None)   # `import framework` raises ImportError
    monkeypatch.setitem(sys.modules, "pytorch_lightning", None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(MissingExtraError, match=rf"sweeplab\[{extra}\]"):
        importlib.import_module(module)


def test_import_sweeplab_imports_no_framework():
    import subprocess

    code = ("import sys, sweeplab, sweeplab.integrations, sweeplab.export; "
            "print([m for m in ('lightning', 'transformers', 'keras', 'xgboost', 'lightgbm', 'tensorboard', "
            "'pyarrow') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _points(events: list) -> list[tuple[int, str]]:
    return [(p[0], p[1]) for kind, data in events if kind == "metrics" for p in data["points"]]


def _tiny_lightning_module(L, torch):
    """A one-layer LightningModule (its loss: the output squared) that the Lightning tests extend."""
    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def loss(self, batch):
            return self.layer(batch[0]).pow(2).mean()

        def training_step(self, batch, batch_idx):
            return self.loss(batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Tiny


def test_lightning_without_a_validation_loop_reports_each_training_epoch_and_not_validate(tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    from sweeplab.integrations.lightning import SweeplabCallback

    class Module(_tiny_lightning_module(L, torch)):
        def training_step(self, batch, batch_idx):
            loss = self.loss(batch)
            self.log("train_loss", loss, on_step=False, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self.loss(batch))

    events: list = []
    run = _run(tmp_path, None, events)
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = L.Trainer(max_epochs=3, callbacks=[SweeplabCallback(run)], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Module(), data)          # no val_dataloaders: reported after each training epoch
    trainer.validate(trainer.lightning_module, data, verbose=False)   # outside fit: not reported
    run.flush()
    assert _points(events) == [(0, "train_loss"), (1, "train_loss"), (2, "train_loss")]
    assert [d["step"] for k, d in events if k == "checkpoint"] == [0, 1, 2]


@pytest.mark.parametrize("declared_input", [True, False], ids=["keras.Input", "built-by-fit"])
def test_keras_restore_loads_weights_and_optimizer_state_and_the_epoch(tmp_path, monkeypatch, declared_input):
    """Also for a model that has no weights before `fit` builds it (a `Sequential` without `keras.Input`, as
    many Keras scripts write it): Keras refused the weights at `restore` ("has not yet been built"), so the
    next attempt of a preempted trial failed; they are loaded once `fit` has built the model."""
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    from sweeplab.integrations.keras import SweeplabCallback

    def model():
        layers = [keras.layers.Dense(3), keras.layers.Dense(1)]
        m = keras.Sequential([keras.Input((4,)), *layers] if declared_input else layers)
        m.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        return m

    x, y = np.random.default_rng(0).normal(size=(32, 4)), np.zeros((32, 1))
    events: list = []
    first = model()
    first.fit(x, y, epochs=2, verbose=0, callbacks=[SweeplabCallback(_run(tmp_path, None, events))])
    assert sorted({step for step, _ in _points(events)}) == [0, 1]
    second = model()
    callback = SweeplabCallback(_run(tmp_path, None, []))
    start = callback.restore(second)
    assert start == 2   # the next epoch to train
    second.fit(x, y, epochs=2, initial_epoch=start, verbose=0, callbacks=[callback])   # nothing left to train
    for a, b in zip(first.get_weights(), second.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    saved = [np.asarray(v) for v in first.optimizer.variables]
    loaded = [np.asarray(v) for v in second.optimizer.variables]
    assert len(saved) == len(loaded) and all(np.array_equal(a, b) for a, b in zip(saved, loaded))
    assert SweeplabCallback(_run(tmp_path / "empty", None, [])).restore(model()) == 0


def test_lightning_trainer_options_follow_the_launch_environment(monkeypatch):
    """{} in one process; DDP over the ranks of a multi-process trial; a clear error for an uneven layout."""
    pytest.importorskip("lightning.pytorch")
    from sweeplab.integrations.lightning import trainer_options

    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert trainer_options() == {}
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert trainer_options() == {"strategy": "ddp", "devices": 2, "num_nodes": 2}
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.raises(ValueError, match="WORLD_SIZE=4 is not a multiple of LOCAL_WORLD_SIZE=3"):
        trainer_options()


def test_lightning_reports_a_training_epoch_metric_at_its_own_epoch(tmp_path):
    """`self.log("train_loss", ..., on_epoch=True)` in `training_step` with a validation loop: Lightning reduces
    the epoch's value after the epoch's validation run, so a report at validation end carried the previous
    epoch's value (none at epoch 0, the last epoch's lost). Each epoch's value is reported once, at its step,
    with the validation metrics of that epoch."""
    L = pytest.importorskip("lightning.pytorch")
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    from sweeplab.integrations.lightning import SweeplabCallback

    losses: dict[int, list[float]] = {}

    class Module(_tiny_lightning_module(L, torch)):
        def training_step(self, batch, batch_idx):
            loss = self.loss(batch)
            losses.setdefault(self.current_epoch, []).append(float(loss))
            self.log("train_loss", loss, on_step=False, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self.loss(batch), on_step=True, on_epoch=True)

    events: list = []
    run = _run(tmp_path, None, events)
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    callback = SweeplabCallback(run)
    trainer = L.Trainer(max_epochs=3, callbacks=[callback], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(Module(), data, data)
    run.flush()
    points = [p for kind, d in events if kind == "metrics" for p in d["points"]]
    train = [(p[0], p[2]) for p in points if p[1] == "train_loss"]
    assert [s for s, _ in train] == [0, 1, 2]
    assert [v for _, v in train] == pytest.approx([sum(v) / len(v) for _, v in sorted(losses.items())])
    assert [p[0] for p in points if p[1] == "val_loss"] == [0, 1, 2]     # the epoch value under its own name
    assert callback.metrics["train_loss"] == pytest.approx(train[-1][1])


def test_lightning_ddp_spawn_in_a_one_process_trial_says_to_let_sweeplab_start_the_ranks(tmp_path):
    """`strategy="ddp_spawn"` pickles the Trainer, the callback's Run with it, for processes Lightning starts
    itself: the trial failed with "Can't pickle local object 'fd_writer.<locals>.write'". It fails with the fix."""
    pytest.importorskip("lightning.pytorch")
    import pickle

    from sweeplab.integrations.lightning import SweeplabCallback

    with pytest.raises(TypeError, match=r"ddp_spawn.*resources: \{workers: N\}.*trainer_options"):
        pickle.dumps(SweeplabCallback(_run(tmp_path, None, [])))


def test_lightning_ckpt_path_last_never_resumes_a_trial_from_another_trials_checkpoint(tmp_path):
    """`ModelCheckpoint(save_last=True)` + `fit(ckpt_path="last")`, Lightning's own resume: its files go under
    the working directory, which every trial of a sweep shares, so trial 1 restored trial 0's `last.ckpt` (its
    weights, optimizer and epoch: here it trained nothing and reported nothing). That is refused with the fix;
    a retried attempt of the same trial resumes from its own."""
    L = pytest.importorskip("lightning.pytorch")
    torch = pytest.importorskip("torch")
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    from sweeplab.integrations.lightning import SweeplabCallback

    Module = _tiny_lightning_module(L, torch)

    def fit(trial: int, attempt: int, epochs: int, sweep: str = "s"):
        run = Run(config={}, sink=lambda kind, data: None, checkpoint_dir=str(tmp_path / f"run{trial}"),
                  sweep=sweep, trial=trial, attempt=attempt)
        trainer = L.Trainer(max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                            callbacks=[SweeplabCallback(run, checkpoint=False),
                                       ModelCheckpoint(dirpath=tmp_path / "checkpoints", save_last=True)])
        trainer.fit(Module(), DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4), ckpt_path="last")
        return trainer

    fit(0, 1, 1)
    assert fit(0, 2, 2).global_step == 4   # the same trial's next attempt: from its epoch 1 on
    with pytest.raises(RuntimeError, match=r"written by trial 0 of sweep 's'.*not by this trial \(1 of .s.\)"):
        fit(1, 1, 2)
    with pytest.raises(RuntimeError, match="written by trial 0 of sweep 's'"):   # a later sweep's trial 1
        fit(1, 1, 3, sweep="s-2")
    # a local run (`sweeplab run`, `python train.py`: a sweep of one trial) going on from the previous one's
    with pytest.warns(UserWarning, match="checkpoint of sweep 's'"):
        assert fit(0, 1, 3, sweep="run-2").global_step == 6


def test_lightning_resumes_a_module_that_saved_the_trials_config_as_hyperparameters(tmp_path):
    """`MyModule(config)` with `self.save_hyperparameters()`, the common Lightning form: every checkpoint holds
    the trial's `Config`, and `torch.load(weights_only=True)` (Lightning's resume, torch >= 2.6) refused it,
    so every attempt after a preemption failed with "Weights only load failed"."""
    L = pytest.importorskip("lightning.pytorch")
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    from sweeplab.config import Config
    from sweeplab.integrations.lightning import SweeplabCallback

    class Module(_tiny_lightning_module(L, torch)):
        def __init__(self, config) -> None:
            super().__init__()
            self.save_hyperparameters()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.config.lr)

    config = Config({"lr": 0.1, "model": {"hidden": 4}})
    for attempt, epochs in ((1, 1), (2, 2)):
        run = Run(config=config, sink=lambda kind, data: None, checkpoint_dir=str(tmp_path), sweep="s", trial=0,
                  attempt=attempt)
        callback = SweeplabCallback(run)
        trainer = L.Trainer(max_epochs=epochs, callbacks=[callback], logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)
        resume = callback.resume_path()
        assert (resume is None) == (attempt == 1)
        trainer.fit(Module(config), DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4), ckpt_path=resume)
        assert trainer.global_step == 2 * epochs


def test_a_framework_output_directory_is_held_by_one_running_trial_at_a_time(tmp_path):
    """The Transformers callback holds the Trainer's `output_dir` while it trains: with a fixed one
    (`output_dir="out"`, the same directory for every trial of a sweep) two parallel trials overwrote and
    deleted each other's `checkpoint-N` (one failed with "No such file or directory: 'out/checkpoint-4'").
    The second now fails at once, naming the first and the fix; the next trial of a process, or any once the
    holder has ended, takes the directory."""
    import subprocess

    from sweeplab.integrations import claim_directory, release_directory

    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from sweeplab.integrations import "
                               f"claim_directory as c; c({str(out)!r}, 's', 0); print('held', flush=True); "
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RuntimeError, match=r"being written by trial 0 of sweep 's'.*trial-\{run.trial\}"):
            claim_directory(out, "s", 1)
    finally:
        holder.kill()
        holder.wait()
    claim_directory(out, "s", 1)   # its holder has ended
    claim_directory(out, "s", 2)   # this process's next trial
    release_directory(out)


def _xgb_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 4))
    y = x[:, 0] * 2 + rng.normal(scale=0.1, size=80)
    return x[:60], y[:60], x[60:], y[60:]


def test_xgboost_reports_each_round_checkpoints_and_a_resumed_attempt_goes_on_at_the_next_round(tmp_path):
    """Attempt 1 is stopped after round 2 (a SIGTERM's stop request): the callback checkpoints the booster
    and ends training. Attempt 2 resumes from it: `rounds_done` 3, reports from step 3 (not 0 again: XGBoost
    numbers a continued model's rounds from 0), and ends with the model an uninterrupted run trains."""
    xgb = pytest.importorskip("xgboost")
    from sweeplab.integrations.xgboost import SweeplabCallback

    xt, yt, xv, yv = _xgb_data()
    params = {"objective": "reg:squarederror", "eta": 0.3, "max_depth": 2, "nthread": 1, "seed": 0}
    dtrain, dval = xgb.DMatrix(xt, label=yt), xgb.DMatrix(xv, label=yv)

    class StopAt(xgb.callback.TrainingCallback):
        def __init__(self, run, at):
            super().__init__()
            self.run, self.at = run, at

        def after_iteration(self, model, epoch, evals_log):
            if epoch == self.at:
                self.run.request_stop("preempted (SIGTERM)")
            return False

    def attempt(n, stop_at=None):
        events: list = []
        run = Run(config={}, sink=lambda kind, data: events.append((kind, data)), checkpoint_dir=str(tmp_path),
                  checkpoint_every=1000, attempt=n)   # no checkpoint but the first one and the stop's
        callback = SweeplabCallback(run)
        resumed = callback.resume_model()
        booster = xgb.train(params, dtrain, num_boost_round=6 - callback.rounds_done, evals=[(dval, "val")],
                            xgb_model=resumed, verbose_eval=False,
                            callbacks=[StopAt(run, stop_at), callback] if stop_at is not None else [callback])
        run.flush()   # what the worker does at the end of a trial
        return callback, booster, events

    callback, booster, events = attempt(1, stop_at=2)
    assert _points(events) == [(0, "val-rmse"), (1, "val-rmse"), (2, "val-rmse")]
    assert [d["step"] for k, d in events if k == "checkpoint"] == [0, 2]
    assert booster.num_boosted_rounds() == 3 and set(callback.metrics) == {"val-rmse"}

    callback, booster, events = attempt(2)
    assert callback.rounds_done == 3
    assert _points(events) == [(3, "val-rmse"), (4, "val-rmse"), (5, "val-rmse")]
    assert booster.num_boosted_rounds() == 6
    whole = xgb.train(params, dtrain, num_boost_round=6)
    np.testing.assert_allclose(booster.predict(dval), whole.predict(dval), rtol=1e-6)


def test_xgboost_early_stopping_goes_on_counting_across_a_resume_and_ends_as_an_uninterrupted_run(tmp_path):
    """A trial stopped (preempted) two rounds after its best round, then resumed. XGBoost's own EarlyStopping
    (`early_stopping_rounds=5`) starts counting afresh on a continued model: the resumed attempt trained past
    the round an uninterrupted run stops at, and took its first new round as the best. `callback.early_stopping`
    goes on from the resumed booster's best round and score (which XGBoost keeps in the model)."""
    xgb = pytest.importorskip("xgboost")
    from sweeplab.integrations.xgboost import SweeplabCallback

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5))
    y = (x[:, 0] + 0.5 * rng.normal(size=400) > 0).astype(int)
    params = {"objective": "binary:logistic", "eta": 0.3, "max_depth": 2, "nthread": 1, "seed": 0}
    dtrain, dval = xgb.DMatrix(x[:300], label=y[:300]), xgb.DMatrix(x[300:], label=y[300:])

    def attempt(n, stop_at=None):
        run = Run(config={}, sink=lambda kind, data: None, checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=1000,
                  attempt=n)
        callback = SweeplabCallback(run)
        resumed = callback.resume_model()

        class StopAt(xgb.callback.TrainingCallback):
            def after_iteration(self, model, epoch, evals_log):
                if model.num_boosted_rounds() - 1 == stop_at:
                    run.request_stop("preempted (SIGTERM)")
                return False

        booster = xgb.train(params, dtrain, num_boost_round=60 - callback.rounds_done, evals=[(dval, "val")],
                            xgb_model=resumed, verbose_eval=False,
                            callbacks=[StopAt(), callback, callback.early_stopping(5)])
        run.flush()
        return booster

    whole = attempt(1)
    (tmp_path / "ck").rename(tmp_path / "whole")
    stop_at = whole.best_iteration + 2
    assert stop_at < whole.num_boosted_rounds() - 1   # the data make the case: stopped after the best round
    assert attempt(1, stop_at=stop_at).num_boosted_rounds() == stop_at + 1
    resumed = attempt(2)
    assert (resumed.best_iteration, resumed.num_boosted_rounds()) == (whole.best_iteration, whole.num_boosted_rounds())
    assert resumed.best_score == whole.best_score
    np.testing.assert_allclose(resumed.predict(dval), whole.predict(dval), rtol=1e-6)


def test_xgboost_cv_reports_the_folds_mean_and_std_and_a_stop_ends_it(tmp_path):
    xgb = pytest.importorskip("xgboost")
    from sweeplab.integrations.xgboost import SweeplabCallback

    events: list = []
    run = Run(config={}, sink=lambda kind, data: events.append((kind, data)), checkpoint_dir=str(tmp_path))
    xt, yt, _, _ = _xgb_data()
    seen: list = []

    class Prune(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            seen.append(epoch)
            if epoch == 1:
                run.request_stop("pruned at rung 1")
            return False

    history = xgb.cv({"objective": "reg:squarederror", "nthread": 1, "eval_metric": "rmse"},
                     xgb.DMatrix(xt, label=yt), num_boost_round=10, nfold=3, callbacks=[Prune(), SweeplabCallback(run)])
    run.flush()
    points = _points(events)
    assert {key for _, key in points} == {"train-rmse", "train-rmse-std", "test-rmse", "test-rmse-std"}
    assert sorted({step for step, _ in points}) == [0, 1] and len(history) == 2 and seen == [0, 1]
    last = {p[1]: p[2] for kind, data in events if kind == "metrics" for p in data["points"] if p[0] == 1}
    assert last["test-rmse"] == pytest.approx(history["test-rmse-mean"].iloc[-1])
    assert not [k for k, _ in events if k == "checkpoint"]   # the folds' boosters are not one model to resume


def test_xgboost_scikit_learn_estimator_reports_its_eval_set_and_resumes(tmp_path):
    xgb = pytest.importorskip("xgboost")
    from sweeplab.integrations.xgboost import SweeplabCallback

    xt, yt, xv, yv = _xgb_data()
    events: list = []
    run = Run(config={}, sink=lambda kind, data: events.append((kind, data)), checkpoint_dir=str(tmp_path))
    callback = SweeplabCallback(run, metrics=["validation_0-rmse"])
    xgb.XGBRegressor(n_estimators=3, n_jobs=1, callbacks=[callback]).fit(xt, yt, eval_set=[(xv, yv)], verbose=False)
    run.flush()
    assert _points(events) == [(0, "validation_0-rmse"), (1, "validation_0-rmse"), (2, "validation_0-rmse")]

    run2 = Run(config={}, sink=lambda kind, data: events.append((kind, data)), checkpoint_dir=str(tmp_path), attempt=2)
    callback = SweeplabCallback(run2)
    resumed = callback.resume_model()
    assert callback.rounds_done == 3
    model = xgb.XGBRegressor(n_estimators=5 - callback.rounds_done, n_jobs=1, callbacks=[callback])
    model.fit(xt, yt, eval_set=[(xv, yv)], verbose=False, xgb_model=resumed)
    assert model.get_booster().num_boosted_rounds() == 5 and callback.metrics.keys() == {"validation_0-rmse"}


def test_lightgbm_reports_each_round_checkpoints_and_a_resumed_attempt_goes_on_at_the_next_round(tmp_path):
    """Attempt 1 is stopped after round 2 (a SIGTERM's stop request): the callback checkpoints the booster
    and ends training, keeping the 3 rounds. Attempt 2 resumes from it: `rounds_done` 3, reports from step 3,
    and ends with the model an uninterrupted run trains."""
    lgb = pytest.importorskip("lightgbm")
    from sweeplab.integrations.lightgbm import SweeplabCallback

    xt, yt, xv, yv = _xgb_data()
    params = {"objective": "regression", "learning_rate": 0.3, "num_leaves": 4, "min_data_in_leaf": 5,
              "num_threads": 1, "seed": 0, "verbosity": -1, "deterministic": True}

    def stop_at(run, at):
        def callback(env):
            if env.iteration == at:
                run.request_stop("preempted (SIGTERM)")
        callback.order = 5   # before sweeplab's, as the SIGTERM handler runs between two rounds
        return callback

    def attempt(n, at=None):
        events: list = []
        run = Run(config={}, sink=lambda kind, data: events.append((kind, data)), checkpoint_dir=str(tmp_path),
                  checkpoint_every=1000, attempt=n)   # no checkpoint but the first one and the stop's
        callback = SweeplabCallback(run)
        resumed = callback.resume_model()
        dtrain = lgb.Dataset(xt, label=yt, free_raw_data=False)
        booster = lgb.train(params, dtrain, num_boost_round=6 - callback.rounds_done, init_model=resumed,
                            valid_sets=[lgb.Dataset(xv, label=yv, reference=dtrain)], valid_names=["val"],
                            callbacks=[stop_at(run, at), callback] if at is not None else [callback])
        run.flush()   # what the worker does at the end of a trial
        return callback, booster, events

    callback, booster, events = attempt(1, at=2)
    assert _points(events) == [(0, "val-l2"), (1, "val-l2"), (2, "val-l2")]
    assert [d["step"] for k, d in events if k == "checkpoint"] == [0, 2]
    assert booster.current_iteration() == 3 and booster.best_iteration == 3 and set(callback.metrics) == {"val-l2"}

    callback, booster, events = attempt(2)
    assert callback.rounds_done == 3
    assert _points(events) == [(3, "val-l2"), (4, "val-l2"), (5, "val-l2")]
    assert booster.current_iteration() == 6
    whole = lgb.train(params, lgb.Dataset(xt, label=yt), num_boost_round=6)
    np.testing.assert_allclose(booster.predict(xv), whole.predict(xv), rtol=1e-6)


def test_lightgbm_cv_reports_the_folds_mean_and_stdv_and_a_stop_ends_it(tmp_path):
    lgb = pytest.importorskip("lightgbm")
    from sweeplab.integrations.lightgbm import SweeplabCallback

    events: list = []
    run = Run(config={}, sink=lambda kind, data: events.append((kind, data)), checkpoint_dir=str(tmp_path))
    xt, yt, _, _ = _xgb_data()
    seen: list = []

    def prune(env):
        seen.append(env.iteration)
        if env.iteration == 1:
            run.request_stop("pruned at rung 1")
    prune.order = 5

    history = lgb.cv({"objective": "regression", "num_threads": 1, "verbosity": -1, "min_data_in_leaf": 5},
                     lgb.Dataset(xt, label=yt), num_boost_round=10, nfold=3, stratified=False,
                     callbacks=[prune, SweeplabCallback(run)])
    run.flush()
    points = _points(events)
    assert {key for _, key in points} == {"valid-l2", "valid-l2-stdv"}
    assert sorted({step for step, _ in points}) == [0, 1] and len(history["valid l2-mean"]) == 2 and seen == [0, 1]
    last = {p[1]: p[2] for kind, data in events if kind == "metrics" for p in data["points"] if p[0] == 1}
    assert last["valid-l2"] == pytest.approx(history["valid l2-mean"][-1])
    assert not [k for k, _ in events if k == "checkpoint"]   # the folds' boosters are not one model to resume


def test_lightgbm_scikit_learn_estimator_reports_its_eval_set_and_resumes(tmp_path):
    lgb = pytest.importorskip("lightgbm")
    pytest.importorskip("sklearn")
    from sweeplab.integrations.lightgbm import SweeplabCallback

    xt, yt, xv, yv = _xgb_data()
    events: list = []
    run = Run(config={}, sink=lambda kind, data: events.append((kind, data)), checkpoint_dir=str(tmp_path))
    callback = SweeplabCallback(run, metrics=["valid_0-l2"])
    options = {"n_jobs": 1, "verbosity": -1, "min_child_samples": 5}
    lgb.LGBMRegressor(n_estimators=3, **options).fit(xt, yt, eval_set=[(xv, yv)], callbacks=[callback])
    run.flush()
    assert _points(events) == [(0, "valid_0-l2"), (1, "valid_0-l2"), (2, "valid_0-l2")]

    run2 = Run(config={}, sink=lambda kind, data: events.append((kind, data)), checkpoint_dir=str(tmp_path), attempt=2)
    callback = SweeplabCallback(run2)
    resumed = callback.resume_model()
    assert callback.rounds_done == 3
    model = lgb.LGBMRegressor(n_estimators=5 - callback.rounds_done, **options)
    model.fit(xt, yt, eval_set=[(xv, yv)], init_model=resumed, callbacks=[callback])
    assert model.booster_.current_iteration() == 5 and callback.metrics.keys() == {"valid_0-l2"}


def _lgb_early_stopping_attempt(lgb, path, n, *, sklearn=False, stop_at=None, patience=5):
    """One attempt of a LightGBM trial with `callback.early_stopping(patience)`, stopped (a SIGTERM's stop
    request) after round `stop_at`: the booster and the rounds it reported."""
    from sweeplab.integrations.lightgbm import SweeplabCallback

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5))
    y = (x[:, 0] + 0.5 * rng.normal(size=400) > 0).astype(int)
    events: list = []
    run = Run(config={}, sink=lambda kind, data: events.append((kind, data)), checkpoint_dir=str(path),
              checkpoint_every=1000, attempt=n)   # no checkpoint but the first one and the stop's

    def preempt(env):
        if env.iteration == stop_at:
            run.request_stop("preempted (SIGTERM)")
    preempt.order = 5   # type: ignore[attr-defined]

    callback = SweeplabCallback(run)
    callbacks = [preempt, callback, callback.early_stopping(patience, verbose=False)]   # before resume_model()
    options = {"learning_rate": 0.3, "num_leaves": 4, "min_data_in_leaf": 5, "seed": 0, "deterministic": True}
    if sklearn:
        model = lgb.LGBMClassifier(n_estimators=60 - callback.rounds_done, n_jobs=1, verbosity=-1, **options)
        model.fit(x[:300], y[:300], eval_set=[(x[300:], y[300:])], callbacks=callbacks,
                  init_model=callback.resume_model())
        booster = model.booster_
    else:
        dtrain = lgb.Dataset(x[:300], label=y[:300], free_raw_data=False)
        booster = lgb.train({"objective": "binary", "num_threads": 1, "verbosity": -1, **options}, dtrain,
                            num_boost_round=60 - callback.rounds_done, init_model=callback.resume_model(),
                            valid_sets=[lgb.Dataset(x[300:], label=y[300:], reference=dtrain)],
                            valid_names=["val"], callbacks=callbacks)
    run.flush()
    return booster, [step for step, _ in _points(events)], x[300:]


@pytest.mark.parametrize("sklearn", [False, True], ids=["lgb.train", "LGBMClassifier"])
def test_lightgbm_early_stopping_goes_on_counting_across_a_resume_and_ends_as_an_uninterrupted_run(tmp_path, sklearn):
    """A trial stopped (preempted) two rounds after its best round, then resumed. LightGBM's `early_stopping`
    keeps its best round, best score and patience in the callback only: the resumed attempt counted afresh,
    took its first new round as the best, and trained past the round an uninterrupted run stops at (best round
    29 at round 33, against 23). `callback.early_stopping` saves that state in the checkpoint and goes on
    from it."""
    lgb = pytest.importorskip("lightgbm")
    if sklearn:
        pytest.importorskip("sklearn")
    whole, whole_steps, xv = _lgb_early_stopping_attempt(lgb, tmp_path / "whole", 1, sklearn=sklearn)
    best = whole.best_iteration - 1   # 0-based
    assert whole_steps[-1] == best + 5 < 59   # the data make the case: early stopping ended it
    stopped, steps, _ = _lgb_early_stopping_attempt(lgb, tmp_path / "ck", 1, sklearn=sklearn, stop_at=best + 2)
    assert steps[-1] == best + 2 and stopped.current_iteration() == best + 3
    resumed, steps, _ = _lgb_early_stopping_attempt(lgb, tmp_path / "ck", 2, sklearn=sklearn)
    assert steps[0] == best + 3 and steps[-1] == whole_steps[-1]   # went on, and stopped where `whole` did
    assert resumed.best_iteration == whole.best_iteration and resumed.best_score == whole.best_score
    np.testing.assert_allclose(resumed.predict(xv), whole.predict(xv), rtol=1e-6)


def test_lightgbm_early_stopping_resumes_from_a_checkpoint_of_plain_booster_text(tmp_path):
    """A checkpoint written before `callback.early_stopping` saved its state (the booster's text alone) still
    resumes: early stopping then counts from the resumed model's rounds, as LightGBM's own does."""
    lgb = pytest.importorskip("lightgbm")
    whole, _, xv = _lgb_early_stopping_attempt(lgb, tmp_path / "whole", 1)
    plain = lgb.Booster(model_str=whole.model_to_string(num_iteration=whole.best_iteration - 2))
    run = Run(config={}, sink=lambda kind, data: None, checkpoint_dir=str(tmp_path / "ck"))
    assert run.checkpoint(plain.model_to_string().encode(), step=whole.best_iteration - 3, force=True)
    run.flush()
    resumed, steps, _ = _lgb_early_stopping_attempt(lgb, tmp_path / "ck", 2)
    assert steps[0] == whole.best_iteration - 2 and resumed.best_iteration >= whole.best_iteration - 1
    np.testing.assert_allclose(resumed.predict(xv, num_iteration=whole.best_iteration - 2),
                               plain.predict(xv), rtol=1e-6)
