"""Early stopping: compute and wall time to reach a target validation score, with and without ASHA.

    python benchmarks/early_stopping.py                       # synthetic curves + torch_digits, 5 seeds each
    python benchmarks/early_stopping.py --tasks synthetic --seeds 0 1 2 --synthetic-target 0.12
    python benchmarks/early_stopping.py --methods random tpe tpe+asha tpe+monitors

For each task, method and seed it runs one real sweep (worker processes, SQLite store in a temporary
directory) through sweeplab's Python API, with `metric.target` set: the sweep stops creating trials as
soon as a trial completes at or below the target. It measures

- trial-epochs: the epochs (steps of the sweep's metric) all trials of the sweep trained, pruned and
  stopped ones included, up to the end of the sweep: the compute spent to reach the target;
- wall time of the sweep, and whether the target was reached within the trial budget (a sweep that
  misses it is counted with everything it spent, and marked).

Methods: `random` and `tpe` run every trial to the end; `tpe+asha` adds the example's ASHA scheduler
(min_iter 1, eta 3, max_iter = epochs) and the nan / exploding monitors; `tpe+monitors` has the monitors
without ASHA (to separate the two effects). Tasks:

- `synthetic`: learning curves fixed by the parameters (lr, width, decay), slightly faster for larger
  learning rates (`--speedup`) and with a per-trial noise that fades over the epochs, so that early
  rankings are informative but imperfect, 27 epochs of 50 ms each;
  learning rates above 2 diverge to NaN at epoch 2;
- `digits`: examples/torch_digits (PyTorch MLP on scikit-learn's digits, 27 epochs; needs torch and
  scikit-learn).

Each task runs at two targets: an easy one that TPE alone reaches within its first (random) trials, and a
harder one that takes it tens of trials. ASHA's saving is per trial tried, so it grows with the number of
trials a target takes; both are printed so that this is visible. Prints one table per task and target
(median and mean over seeds) and the compute ratios against `tpe+asha`.
Writes nothing outside its temporary directory. One worker (trials run one after another) so that counts
do not depend on the machine's load; `--workers 2` runs two at once.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve()

EPOCHS = 27    # a full trial; ASHA's max_iter (rungs at 1, 3 and 9 epochs with eta 3)
MONITORS = ["nan", {"exploding": {"metric": "grad_norm", "threshold": 30}}]
METHODS = ("random", "tpe", "tpe+asha")


# ------------------------------------------------------------------------------------------ synthetic task
def synthetic_final(lr: float, width: int, decay: float) -> float:
    """The converged validation loss of a configuration (best 0.10 at lr 0.05, width 64, decay 0.1)."""
    return (0.10 + 0.12 * (math.log10(lr) - math.log10(0.05)) ** 2
            + 0.02 * (math.log2(width) - 6) ** 2 + 0.3 * (decay - 0.1) ** 2)


def synthetic_train(config: Any, run: Any) -> dict[str, float]:
    """A learning curve: 2.3 (chance) decaying towards `synthetic_final`, faster for larger learning rates
    (by `config.speedup`), plus a per-trial noise that fades with the epochs (early rankings are noisy);
    learning rates above 2 diverge (NaN from epoch 2). Each epoch costs `config.epoch_seconds`."""
    lr, width, decay = float(config.lr), int(config.width), float(config.decay)
    final = synthetic_final(lr, width, decay)
    rate = float(config.rate) + float(config.speedup) * min(lr, 1.0) ** 0.5
    wobble = 0.05 * ((run.trial * 7919) % 13 - 6) / 6          # fixed per trial, +-0.05 at epoch 1
    metrics: dict[str, float] = {}
    epochs = 2 if run.smoke else int(config.epochs)
    for epoch in range(1, epochs + 1):
        time.sleep(float(config.epoch_seconds))
        if lr > 2.0 and epoch >= 2:
            val, grad = math.nan, math.nan
        else:
            val = final + (2.3 - final) * math.exp(-rate * epoch) + wobble / epoch
            grad = 1.0 / epoch + lr
        metrics = {"val_loss": val, "train_loss": val * 0.9, "grad_norm": grad}
        run.log(metrics, step=epoch)
        if run.should_stop:
            break
    return metrics


# ------------------------------------------------------------------------------------------ tasks
@dataclass(frozen=True)
class Task:
    name: str
    raw: dict[str, Any]        # the sweep spec without method / early stopping
    base_dir: Path
    target: float
    trials: int
    epochs: int


def synthetic_task(target: float, trials: int, speedup: float, epochs: int, rate: float,
                   epoch_seconds: float) -> Task:
    raw = {
        "function": f"{HERE}:synthetic_train",
        "metric": {"name": "val_loss", "goal": "minimize"},
        "parameters": {
            "lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 10.0},
            "width": {"values": [16, 32, 64, 128, 256]},
            "decay": {"min": 0.0, "max": 0.5},
            "epochs": {"value": epochs},
            "epoch_seconds": {"value": epoch_seconds},
            "speedup": {"value": speedup},
            "rate": {"value": rate},
        },
    }
    return Task("synthetic", raw, HERE.parent, target, trials, epochs)


def digits_task(target: float, trials: int, epochs: int) -> Task | None:
    if not all(importlib.util.find_spec(m) for m in ("torch", "sklearn")):
        return None
    import yaml

    path = ROOT / "examples" / "torch_digits" / "sweep.yaml"
    raw = yaml.safe_load(path.read_text())
    for key in ("name", "method", "seed", "early_terminate", "monitors", "budget", "workers"):
        raw.pop(key, None)
    raw["function"] = str(path.parent / "train.py") + ":train"
    raw["config"] = str(path.parent / "config.yaml")
    raw["parameters"] = {**raw["parameters"], "epochs": {"value": epochs}}
    return Task("digits", raw, path.parent, target, trials, epochs)


def spec_for(task: Task, method: str, seed: int) -> Any:
    from sweeplab.spec import parse_spec

    raw = dict(task.raw)
    searcher, _, extras = method.partition("+")
    raw.update(method=searcher, seed=seed, budget={"trials": task.trials})
    raw["metric"] = {**raw["metric"], "target": task.target}
    if extras in ("asha", "monitors"):
        raw["monitors"] = MONITORS
    if extras == "asha":
        raw["early_terminate"] = {"type": "asha", "min_iter": 1, "max_iter": task.epochs, "eta": 3}
    return parse_spec(raw, file=f"<benchmark {task.name} {method}>", base_dir=task.base_dir)


# ------------------------------------------------------------------------------------------ running
@dataclass(frozen=True)
class Result:
    task: str
    method: str
    seed: int
    reached: bool
    trial_epochs: int
    overrun: int               # epochs trained after a stop decision (the stop's latency)
    trials: int
    seconds: float
    best: float | None


def run_sweep(task: Task, method: str, seed: int, workers: int) -> Result:
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.driver import Driver
    from sweeplab.store import Store

    spec = spec_for(task, method, seed)
    with tempfile.TemporaryDirectory(prefix="sweeplab-bench-") as tmp:
        store = Store.open(Path(tmp) / "store")
        backend = LocalBackend(plan_slots(workers, cpus=1, gpus=0, gpu_ids=[]), hide_gpus=True)
        name = f"{task.name}-{method}-{seed}"
        driver = Driver(spec, store, backend, sweep_name=name, cwd=str(ROOT))
        driver.create(spec_path=None)
        t0 = time.perf_counter()
        outcome = driver.run()
        seconds = time.perf_counter() - t0
        db = sqlite3.connect(Path(tmp) / "store" / "store.db")
        last = dict(db.execute(
            "SELECT t.id, MAX(m.step) FROM metrics m JOIN trials t ON t.id = m.trial_id JOIN sweeps w "
            "ON w.id = t.sweep_id WHERE w.name = ? AND m.key = ? GROUP BY t.id", (name, "val_loss")))
        decided = {tid: json.loads(data or "{}").get("step") for tid, data in db.execute(
            "SELECT trial_id, data FROM events WHERE kind IN ('pruned', 'rule') ORDER BY id DESC")}
        db.close()
        epochs = sum(last.values())
        overrun = sum(max(0, last[tid] - int(step)) for tid, step in decided.items()
                      if tid in last and isinstance(step, (int, float)))
        close = getattr(store, "close", None)
        if close is not None:
            close()
    return Result(task.name, method, seed, outcome.reason.startswith("metric.target"), int(epochs),
                  int(overrun), sum(outcome.counts.values()), seconds, outcome.best_value)


def summarize(task: str, results: list[Result], methods: list[str]) -> None:
    print(f"\n== {task}: trial-epochs and wall time to reach the target (per seed: median / mean) ==")
    header = f"{'method':<14} {'reached':>8} {'epochs med':>11} {'epochs mean':>12} {'trials mean':>12} " \
             f"{'seconds med':>12} {'seconds mean':>13} {'overrun mean':>13}"
    print(header)
    print("-" * len(header))
    means: dict[str, tuple[float, float, float]] = {}
    for m in methods:
        rs = [r for r in results if r.method == m]
        if not rs:
            continue
        ep = [r.trial_epochs for r in rs]
        sec = [r.seconds for r in rs]
        means[m] = (statistics.mean(ep), statistics.median(ep), statistics.mean(sec))
        print(f"{m:<14} {sum(r.reached for r in rs):>4}/{len(rs):<3} {statistics.median(ep):>11.0f} "
              f"{statistics.mean(ep):>12.1f} {statistics.mean(r.trials for r in rs):>12.1f} "
              f"{statistics.median(sec):>12.1f} {statistics.mean(sec):>13.1f} "
              f"{statistics.mean(r.overrun for r in rs):>13.1f}")
    print("overrun: epochs trials trained after the decision to stop them, before they saw run.should_stop "
          "(included in the epochs)")
    print("per seed (trial-epochs, * = target not reached):")
    for m in methods:
        cells = [f"{r.trial_epochs}{'' if r.reached else '*'}" for r in results if r.method == m]
        print(f"  {m:<14} {' '.join(cells)}")
    ref = means.get("tpe+asha")
    if ref:
        for m, (mean_ep, med_ep, mean_sec) in means.items():
            if m == "tpe+asha":
                continue
            print(f"compute ratio {m} / tpe+asha: {mean_ep / max(ref[0], 1e-9):.2f}x (mean epochs), "
                  f"{med_ep / max(ref[1], 1e-9):.2f}x (median epochs), {mean_sec / max(ref[2], 1e-9):.2f}x "
                  "(mean wall time)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["synthetic", "digits"], choices=["synthetic", "digits"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS),
                    choices=["random", "tpe", "tpe+asha", "tpe+monitors", "random+asha"])
    ap.add_argument("--seeds", nargs="+", type=int, default=None,
                    help="default: 0..4")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--synthetic-target", type=float, nargs="+", default=[0.13, 0.115],
                    help="one table per target (the best configuration converges to 0.10)")
    ap.add_argument("--digits-target", type=float, nargs="+", default=[0.13, 0.12])
    ap.add_argument("--speedup", type=float, default=0.03,
                    help="synthetic: how much faster large learning rates converge; 0.1 makes curves cross "
                         "often, so that early rungs prefer fast-but-worse trials (ASHA's failure mode)")
    ap.add_argument("--epochs", type=int, default=EPOCHS, help="epochs of a full trial (ASHA's max_iter)")
    ap.add_argument("--rate", type=float, default=0.3,
                    help="synthetic: how fast curves converge (0.3: within 1%% of their final value by "
                         "epoch ~15)")
    ap.add_argument("--epoch-seconds", type=float, default=0.05, help="synthetic: the cost of one epoch")
    ap.add_argument("--trials", type=int, default=150, help="trial budget of one sweep (synthetic)")
    ap.add_argument("--digits-trials", type=int, default=80)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))

    runs: list[tuple[str, float]] = [(n, t) for n in args.tasks
                                      for t in (args.synthetic_target if n == "synthetic" else args.digits_target)]
    for name, target in runs:
        if name == "synthetic":
            task: Task | None = synthetic_task(target, args.trials, args.speedup, args.epochs,
                                               args.rate, args.epoch_seconds)
            seeds = args.seeds if args.seeds is not None else [0, 1, 2, 3, 4]
        else:
            task = digits_task(target, args.digits_trials, args.epochs)
            seeds = args.seeds if args.seeds is not None else [0, 1, 2, 3, 4]
            if task is None:
                print("\n== digits: skipped (needs torch and scikit-learn) ==")
                continue
        results = []
        for seed in seeds:
            for method in args.methods:
                r = run_sweep(task, method, seed, args.workers)
                results.append(r)
                print(f"  {name:<9} {method:<13} seed {seed}: {'reached' if r.reached else 'missed '} "
                      f"target {task.target:g} with {r.trial_epochs} trial-epochs, {r.trials} trials, "
                      f"{r.seconds:.1f}s (best {r.best if r.best is None else round(r.best, 4)})", flush=True)
        summarize(f"{name} (target {target:g})", results, args.methods)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
