"""A synthetic store (a plausible sweep with curves, retries, prunes, rule firings) for demos, tests and
the dashboard benchmark. Written through the ordinary `Store` writer API in one transaction.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

from sweeplab.store.sqlite import Store

__all__ = ["make_synthetic_store"]

_OPTIMIZERS = ("adam", "sgd", "adamw")


def _state_for(rng: random.Random, i: int, trials: int, running: int) -> str:
    if i >= trials - running:
        return "running"
    r = rng.random()
    if r < 0.62:
        return "completed"
    if r < 0.82:
        return "pruned"
    if r < 0.88:
        return "stopped_by_rule"
    if r < 0.94:
        return "failed"
    if r < 0.97:
        return "preempted"
    return "stopped"


def make_synthetic_store(root: str | Path, *, sweep: str = "demo", trials: int = 200,
                         points: int = 20_000, keys: tuple[str, ...] = ("loss", "val_loss", "lr_now"),
                         running: int = 2, seed: int = 0, with_logs: bool = True) -> Path:
    """Create (or add to) the store at `root` with one sweep of `trials` trials and ~`points` metric points.

    The objective is `val_loss` (minimize) and depends mostly on `lr` (log scale) and `hidden`, a little on
    `dropout`, not at all on `optimizer`: parameter importance has a known answer. Returns the root.
    """
    root = Path(root)
    rng = random.Random(seed)
    t0 = time.time() - trials * 30.0 - 60.0  # trials started 30 s apart, the last ones just now
    store = Store.open(root)
    # Pruned / stopped / failed trials log a fraction of the steps: about 73% of the full count overall.
    per_trial = max(1, math.ceil(points / max(1, trials) / max(1, len(keys)) / 0.73))
    try:
        with store.transaction():
            sid = store.create_sweep(
                name=sweep, method="tpe", metric="val_loss", goal="minimize",
                spec={"method": "tpe", "metric": {"name": "val_loss", "goal": "minimize"},
                      "budget": {"trials": trials + 50, "time": "2h"},
                      "parameters": {"lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1},
                                     "hidden": {"values": [32, 64, 128, 256]},
                                     "dropout": {"min": 0.0, "max": 0.5},
                                     "optimizer": {"values": list(_OPTIMIZERS)}}},
                spec_path="sweep.yaml", seed=seed,
            )
            metric_rows: list[tuple[int, str, float | None, float]] = []
            for i in range(trials):
                lr = 10 ** rng.uniform(-4, -1)
                hidden = rng.choice((32, 64, 128, 256))
                dropout = rng.uniform(0.0, 0.5)
                opt = rng.choice(_OPTIMIZERS)
                params = {"lr": lr, "hidden": hidden, "dropout": dropout, "optimizer": opt}
                config = {"lr": lr, "model": {"hidden": hidden, "dropout": dropout}, "optimizer": opt,
                          "epochs": per_trial}
                state = _state_for(rng, i, trials, running)
                floor = 0.05 + 0.4 * (math.log10(lr) + 2.5) ** 2 + 0.15 * (256 / hidden) ** 0.5 \
                    + 0.1 * dropout + rng.gauss(0, 0.01)
                n_steps = per_trial
                if state in ("pruned", "stopped_by_rule", "preempted", "stopped", "running"):
                    n_steps = max(1, per_trial // rng.choice((2, 3, 4)))
                elif state == "failed":
                    n_steps = max(1, per_trial // 5)
                start = t0 + i * 30.0
                tid = store.add_trial(sid, i, params, config, seed=i)
                attempts = 2 if state == "failed" or rng.random() < 0.05 else 1
                log_rel = f"logs/{sweep}/trial-{i}-attempt-{attempts}.log"
                for a in range(1, attempts + 1):
                    store.add_attempt(tid, a, started=start + (a - 1) * 5, host="localhost", pid=1000 + i,
                                      log_path=log_rel.replace(f"attempt-{attempts}", f"attempt-{a}"),
                                      slot={"cpus": [i % 2]})
                    if a < attempts:
                        store.update_attempt(tid, a, state="failed", ended=start + a * 5, exit_code=-9,
                                             signal=9, reason="worker killed (SIGKILL)")
                        store.add_event(sid, "retry", f"trial {i} attempt {a} died (SIGKILL); retrying",
                                        trial_id=tid, attempt=a, data={"signal": 9}, at=start + a * 5)
                loss = 2.0
                for step in range(n_steps):
                    frac = (step + 1) / per_trial
                    loss = floor + (2.0 - floor) * math.exp(-4 * frac) + rng.gauss(0, 0.005)
                    vals = {"loss": loss * 0.9, "val_loss": loss, "lr_now": lr * (1 - 0.5 * frac)}
                    t = start + step
                    for k in keys:
                        v = vals.get(k, rng.random())
                        if state == "stopped_by_rule" and step == n_steps - 1 and k == "val_loss":
                            v = float("nan")
                        metric_rows.append((step, k, v, t))
                    if len(metric_rows) >= 50_000:
                        store.add_metrics(tid, attempts, metric_rows)
                        metric_rows = []
                store.add_metrics(tid, attempts, metric_rows)
                metric_rows = []
                end = None if state == "running" else start + n_steps + 1
                reason = {
                    "pruned": f"ASHA: rung {max(1, n_steps)}: val_loss {loss:.4f} not in top 1/3",
                    "stopped_by_rule": f"nan: val_loss is NaN at step {n_steps - 1}",
                    "failed": "RuntimeError: CUDA error: out of memory (retries exhausted)",
                    "preempted": "SIGTERM received (node preempted); will resume from checkpoint",
                    "stopped": "budget: time limit 2h reached",
                }.get(state)
                value = loss if state == "completed" else None
                store.update_trial(
                    tid, state=state, value=value, attempts=attempts, started=start, ended=end,
                    created=start - 1, reason=reason, last_step=n_steps - 1,
                    metrics={"val_loss": loss, "loss": loss * 0.9} if state != "failed" else None,
                    profile={"steps": n_steps, "step_time_mean": 0.12, "data_wait_fraction": 0.18,
                             "samples_per_second": 5300.0, "peak_rss_mb": 412.0},
                )
                store.update_attempt(tid, attempts, state=state if state != "preempted" else "preempted",
                                     ended=end, reason=reason,
                                     exit_code=None if state == "running" else (1 if state == "failed" else 0))
                kind = {"pruned": "pruned", "stopped_by_rule": "rule", "preempted": "preempted"}.get(state)
                store.add_event(sid, "trial_started", f"trial {i} started", trial_id=tid, attempt=1, at=start)
                if kind:
                    store.add_event(sid, kind, reason or "", trial_id=tid, attempt=attempts,
                                    data={"step": n_steps - 1}, at=(end or start) - 0.5)
                if end is not None:
                    store.add_event(sid, "trial_ended", f"trial {i} {state}", trial_id=tid,
                                    attempt=attempts, at=end)
                if step_ckpt := (n_steps // 2):
                    store.add_checkpoint(tid, attempts, step=step_ckpt,
                                         path=f"checkpoints/{sweep}/{i}/step-{step_ckpt}.ckpt",
                                         checksum="sha256:0", nbytes=2048, seconds=0.01,
                                         at=start + step_ckpt)
                store.add_system_samples(tid, attempts, [
                    {"time": start + k, "cpu": 80.0 + k, "rss": 4e8 + k * 1e6} for k in range(3)
                ])
                if with_logs and i < 500:
                    lines = [f"[trial {i}] epoch {s} val_loss={floor + 1 / (s + 1):.4f}" for s in range(n_steps)]
                    for a in range(1, attempts + 1):
                        path = root / log_rel.replace(f"attempt-{attempts}", f"attempt-{a}")
                        path.parent.mkdir(parents=True, exist_ok=True)
                        last = reason if a == attempts else "Killed (SIGKILL)"
                        path.write_text("\n".join(lines + [last] if last else lines) + "\n")
            store.update_sweep(sid, spend={"trials": trials, "seconds": trials * 30.0, "cpu_seconds": 0.0,
                                           "gpu_seconds": 0.0})
    finally:
        store.close()
    return root
