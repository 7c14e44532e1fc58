"""A small PyTorch MLP on scikit-learn's bundled digits (8x8 images, 10 classes; no download).

Epochs are the fidelity: each epoch is logged at `step` = epochs trained so far (1, 2, ...), so an
`early_terminate: {type: asha, min_iter: 1, max_iter: <epochs>}` judges trials after 1, 3, 9 ... epochs.
Every epoch logs train_loss, val_loss, val_acc, params (the model size) and grad_norm (the largest
gradient norm of the epoch, which the `exploding` monitor watches). A diverging trial is not special-cased
here: its NaN or exploding values are logged as they are and the sweep's monitors stop it.

    sweeplab sweep examples/torch_digits/sweep.yaml
    sweeplab sweep examples/torch_digits/sweep_conditional.yaml      # optimizer and model-family choices
    sweeplab run examples/torch_digits/train.py:train lr=0.05 --config examples/torch_digits/config.yaml
    sweeplab run examples/torch_digits/train.py:train lr=0.01 model.hidden=256 --profile local --smoke
    python examples/torch_digits/train.py lr=0.05                    # the same, from `sl.main` below
"""

from __future__ import annotations

import math


def load_data(split_seed: int = 0):
    """Digits as float tensors scaled to [0, 1]: 1437 training and 360 validation images."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from torch.utils.data import TensorDataset

    X, y = load_digits(return_X_y=True)
    X_train, X_val, y_train, y_val = train_test_split(X / 16.0, y, test_size=0.2, random_state=split_seed,
                                                      stratify=y)

    def tensors(a, b):
        return TensorDataset(torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.long))

    return tensors(X_train, y_train), tensors(X_val, y_val)


def build_model(hidden: int, layers: int, activation: str = "leaky_relu"):
    from torch import nn

    act = {"relu": nn.ReLU, "leaky_relu": nn.LeakyReLU, "tanh": nn.Tanh}[activation]
    blocks: list = []
    width = 64
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), act()]
        width = hidden
    return nn.Sequential(*blocks, nn.Linear(width, 10))


def build_cnn(channels: int, kernel: int):
    """A small CNN over the 8x8 images: conv, ReLU, 2x2 max-pool, linear."""
    from torch import nn

    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, channels, kernel, padding=kernel // 2),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(channels * 16, 10))


def model_from(config):
    """The model a config asks for. `model.family` (sweep_conditional.yaml) chooses mlp or cnn, each with
    its own parameters (only the chosen family's are in the config); without it, the MLP of config.yaml."""
    model = config.model
    if model.get("family", "mlp") == "cnn":
        return build_cnn(int(model.channels), int(model.kernel))
    return build_model(int(model.hidden), int(model.layers), str(model.get("activation", "leaky_relu")))


def optimizer_from(config, parameters):
    """`optimizer` (sweep_conditional.yaml) chooses sgd (momentum, nesterov) or adam (beta1, beta2); each
    one's parameters are in the config only when it is chosen. Without it, SGD as in config.yaml."""
    import torch

    lr, decay = float(config.lr), float(config.get("weight_decay", 0.0))
    if config.get("optimizer", "sgd") == "adam":
        return torch.optim.Adam(parameters, lr=lr, betas=(float(config.beta1), float(config.beta2)),
                                weight_decay=decay)
    momentum = float(config.momentum)
    return torch.optim.SGD(parameters, lr=lr, momentum=momentum, weight_decay=decay,
                           nesterov=bool(config.get("nesterov", False)) and momentum > 0)


def train(config, run):
    import torch
    from torch import nn

    import sweeplab.torch

    torch.set_num_threads(1)            # one trial = one CPU; parallelism comes from the sweep's workers
    seed = run.seed or 0
    torch.manual_seed(seed)
    strategy = sweeplab.torch.strategy()
    train_set, val_set = load_data(int(config.data.split_seed))
    model = model_from(config)
    optimizer = optimizer_from(config, model.parameters())
    model, optimizer = strategy.setup(model, optimizer)

    epochs = 2 if run.smoke else int(config.epochs)
    start = 0
    state = run.restore()                                   # this trial's latest checkpoint, or None
    if state is not None:
        strategy.load_state_dict(model, state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["epoch"])                         # epochs already trained

    workers = int(config.data.get("num_workers", 0))      # an environment fact: profiles/local.yaml, cluster.yaml
    train_loader = strategy.loader(train_set, batch_size=int(config.batch_size), seed=seed, num_workers=workers)
    val_loader = strategy.loader(val_set, batch_size=512, shuffle=False)
    metrics: dict[str, float] = {}
    for epoch in range(start, epochs):
        strategy.epoch(epoch)
        model.train()
        loss_sum, seen, grad_max = 0.0, 0, 0.0
        for x, y in run.track(train_loader):
            x, y = strategy.to_device((x, y))
            loss = nn.functional.cross_entropy(model(x), y)
            strategy.backward(loss)
            g = strategy.grad_norm()                        # before step(), which clears the gradients
            if math.isfinite(g):
                grad_max = max(grad_max, g)
            elif not math.isfinite(float(loss.item())):
                grad_max = g if grad_max == 0.0 else grad_max   # diverged from the start: log it as it is
            strategy.step(optimizer, max_norm=config.clip)
            loss_sum += float(loss.item()) * len(y)
            seen += len(y)

        model.eval()
        val_sum, correct, count = 0.0, 0, 0
        with torch.no_grad():
            for x, y in val_loader:
                x, y = strategy.to_device((x, y))
                out = model(x)
                val_sum += float(nn.functional.cross_entropy(out, y, reduction="sum").item())
                correct += int((out.argmax(dim=1) == y).sum().item())
                count += len(y)
        metrics = {
            "train_loss": strategy.all_reduce_mean(loss_sum / max(seen, 1)),
            "val_loss": strategy.all_reduce_mean(val_sum / max(count, 1)),
            "val_acc": strategy.all_reduce_mean(correct / max(count, 1)),
            "grad_norm": grad_max,
            "params": float(sum(p.numel() for p in model.parameters())),   # model size (sweep_multiobjective.yaml)
        }
        run.log(metrics, step=epoch + 1)                    # step = epochs trained: the fidelity
        stop = strategy.should_stop(run)  # pruned, stopped by a monitor, preempted: all DDP ranks agree
        run.checkpoint({"model": strategy.state_dict(model), "optimizer": optimizer.state_dict(),
                        "epoch": epoch + 1}, step=epoch + 1, force=stop)   # a stopping epoch's is always kept
        if stop:
            break

    strategy.cleanup()
    return metrics


if __name__ == "__main__":   # a plain `python train.py key=value ...`: one trial, recorded as `sweeplab run` does
    import sweeplab as sl

    sl.main(train, config="config.yaml")
