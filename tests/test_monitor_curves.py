"""Monitors on realistic training curves: a tiny torch MLP trained on sklearn's digits (deterministic, CPU,
no downloads) at healthy and diverging learning rates, plus synthetic edge cases. A healthy trial must never
be stopped (a false stop); a sick one must be stopped within a few reports (a miss otherwise)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache

import pytest

from sweeplab import monitors as sm
from sweeplab.monitors import Monitor, parse_monitors
from sweeplab.types import Decision, MetricPoint

Rows = list[tuple[int, str, float]]


@cache
def train(lr: float, *, relu: bool = False, momentum: float = 0.0, schedule: str | None = None,
          clip: float | None = None, every: int = 1, epochs: int = 10) -> tuple[tuple[int, str, float], ...]:
    """Per step: loss (one mini-batch) and grad_norm; every `every` epochs: val_loss, val_acc, train_loss."""
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("sklearn.datasets")
    torch.set_num_threads(1)
    x, y = datasets.load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    xtr, ytr, xva, yva = x[:1400], y[:1400], x[1400:], y[1400:]
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU() if relu else torch.nn.Tanh(),
                                torch.nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    total = epochs * math.ceil(len(xtr) / 64)
    warm = total // 10
    sched = None
    if schedule == "cosine":   # linear warmup, then cosine decay
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: (t + 1) / warm if t < warm else
                                                  0.5 * (1 + math.cos(math.pi * (t - warm) / (total - warm))))
    rows: Rows = []
    step = 0
    loss_fn = torch.nn.functional.cross_entropy
    for epoch in range(epochs):
        perm = torch.randperm(len(xtr), generator=gen)
        for i in range(0, len(xtr), 64):
            idx = perm[i:i + 64]
            loss = loss_fn(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip or math.inf)
            opt.step()
            if sched is not None:
                sched.step()
            rows += [(step, "loss", float(loss.detach())), (step, "grad_norm", float(norm))]
            step += 1
        if epoch % every == 0:
            with torch.no_grad():
                out = model(xva)
                rows += [(step, "val_loss", float(loss_fn(out, yva))),
                         (step, "val_acc", float((out.argmax(1) == yva).float().mean())),
                         (step, "train_loss", float(loss_fn(model(xtr), ytr)))]
    return tuple(rows)


@cache
def train_mixed_precision(steps: int = 40) -> tuple[tuple[int, str, float], ...]:
    """Mixed precision as on a GPU: float16 autocast with a GradScaler (here on CPU, init scale 2**26).
    The scaler skips the steps whose gradients overflow (7 of the first 10), halving its scale; the
    gradient norm logged there is NaN or inf, the loss stays finite and falls. A healthy run."""
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("sklearn.datasets")
    torch.set_num_threads(1)
    x, y = datasets.load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(), torch.nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**26)
    loss_fn = torch.nn.functional.cross_entropy
    rows: Rows = []
    for step in range(steps):
        idx = torch.randint(0, 1400, (64,), generator=gen)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = loss_fn(model(x[idx]), y[idx])
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        rows += [(step, "loss", float(loss.detach())), (step, "grad_norm", float(norm)),
                 (step, "loss_scale", float(scaler.get_scale()))]
        if step % 10 == 9:
            with torch.no_grad():
                out = model(x[1400:])
                rows += [(step, "val_loss", float(loss_fn(out, y[1400:]))),
                         (step, "val_acc", float((out.argmax(1) == y[1400:]).float().mean())),
                         (step, "train_loss", float(loss_fn(model(x[:1400]), y[:1400])))]
    return tuple(rows)


def test_the_mixed_precision_run_skips_steps_and_still_learns() -> None:
    rows = train_mixed_precision()
    norms = [v for _, k, v in rows if k == "grad_norm"]
    val = [v for _, k, v in rows if k == "val_loss"]
    assert sum(not math.isfinite(v) for v in norms) >= 5 and val[-1] < val[0] < 2.3


HEALTHY: dict[str, Callable[[], Sequence[tuple[int, str, float]]]] = {
    "sgd-lr0.1": lambda: train(0.1),
    "sgd-lr1-noisy-steps": lambda: train(1.0),
    "momentum-lr0.5": lambda: train(0.5, momentum=0.9),
    "warmup-cosine": lambda: train(1.0, schedule="cosine"),
    "grad-clipping": lambda: train(1.0, clip=0.5),
    "val-every-3-epochs": lambda: train(0.3, every=3),
    "slow-lr0.01": lambda: train(0.01),
    "mixed-precision-skipped-steps": train_mixed_precision,
}
SICK: dict[str, Callable[[], Sequence[tuple[int, str, float]]]] = {
    "tanh-lr30-diverges": lambda: train(30.0),
    "relu-lr30-diverges": lambda: train(30.0, relu=True),
    "relu-lr3-momentum-diverges": lambda: train(3.0, relu=True, momentum=0.9),
}


def first_stop(monitor: Monitor, rows: Sequence[tuple[int, str, float]]) -> tuple[int, str] | None:
    """(step, reason) of the first firing when the rows arrive one report at a time, else None."""
    for step, key, value in rows:
        v = monitor.observe(0, [MetricPoint(step, key, value, 0.0)])
        if v.decision is not Decision.CONTINUE:
            return step, v.reason
    return None


# each monitor with its defaults and with the settings the docs show
DOCS_MONITORS: dict[str, Callable[[], Monitor]] = {
    "nan": sm.nan,
    "diverging-loss": lambda: sm.diverging("loss"),
    "diverging-val_loss": lambda: sm.diverging("val_loss"),
    "diverging-val_acc-max": lambda: sm.diverging("val_acc", goal="maximize"),
    "plateau-val_loss": lambda: sm.plateau("val_loss"),
    "plateau-val_loss-docs": lambda: parse_monitors([{"plateau": {"metric": "val_loss", "patience": 5}}])[0],
    "exploding": sm.exploding,
    "exploding-docs": lambda: parse_monitors([{"exploding": {"metric": "grad_norm", "factor": 10}}])[0],
    "vanishing": sm.vanishing,
    "overfitting": lambda: sm.overfitting("train_loss", "val_loss"),
}


@pytest.mark.parametrize("curve", sorted(HEALTHY))
@pytest.mark.parametrize("monitor", sorted(DOCS_MONITORS))
def test_no_monitor_stops_a_healthy_training_run(curve: str, monitor: str) -> None:
    assert first_stop(DOCS_MONITORS[monitor](), HEALTHY[curve]()) is None


@pytest.mark.parametrize("curve", sorted(SICK))
def test_a_diverging_run_is_stopped_within_a_few_steps(curve: str) -> None:
    hit = first_stop(sm.diverging("loss"), SICK[curve]())
    assert hit is not None and hit[0] <= 10, hit


def test_exploding_gradients_are_stopped_at_once() -> None:
    hit = first_stop(sm.exploding(), train(30.0, relu=True))
    assert hit is not None and hit[0] <= 2, hit


@cache
def overfit() -> tuple[tuple[int, str, float], ...]:
    """30 training images, a wide net, momentum: val_loss bottoms at epoch 3 and then climbs for good."""
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("sklearn.datasets")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = datasets.load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    xtr, ytr, xva, yva = x[:30], y[:30], x[1400:], y[1400:]
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=2.0, momentum=0.9)
    loss_fn = torch.nn.functional.cross_entropy
    rows: Rows = []
    for epoch in range(30):
        loss = loss_fn(model(xtr), ytr)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            rows += [(epoch, "train_loss", float(loss_fn(model(xtr), ytr))),
                     (epoch, "val_loss", float(loss_fn(model(xva), yva)))]
    return tuple(rows)


def test_a_run_that_overfits_is_stopped_soon_after_val_turns() -> None:
    rows = overfit()
    val = [v for _, k, v in rows if k == "val_loss"]
    turn = val.index(min(val))
    hit = first_stop(sm.overfitting("train_loss", "val_loss"), rows)
    assert hit is not None and turn < hit[0] <= turn + 12, (turn, hit)
