"""The Optuna path: an unchanged Optuna objective (the XGBoost demo) under sweeplab vs Optuna's own parallelism.

In one run, with the same objective, sampler (TPESampler(seed=0)) and pruner (MedianPruner), N trials on 2
processes or threads each, wall time and best value of:
  * sweeplab        `sl.optimize(objective, n_trials=N, workers=2)`: 2 worker processes, every trial recorded
                    in the SQLite store and the study's journal file (crash-safe, resumable, in the dashboard);
  * optuna n_jobs   `study.optimize(objective, n_trials=N, n_jobs=2)` on an in-memory study (2 threads);
  * optuna journal  2 processes running `study.optimize(objective, n_trials=N/2)` on one JournalStorage file
                    (Optuna's documented multi-process setup).
Each is a fresh Python process (interpreter start and imports included, as a user runs it). The three are
run in interleaved rounds (`--rounds`), and the ratio of sweeplab's wall time to each peer's is
given per round, so machine noise hits all alike. Then the crash test: each of sweeplab and Optuna's in-memory
study runs in a subprocess that is killed with SIGKILL after a few trials; what survives is counted, and
sweeplab's sweep is resumed to N trials.

    python benchmarks/optuna_path.py              # small: 20 trials, 1 round
    python benchmarks/optuna_path.py --full       # 100 trials, 3 rounds (the figures in docs/benchmarks.md)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))
OBJECTIVE = f"{HERE / '_xgb_optuna.py'}:objective"


def _optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _best(values: list[float]) -> float:
    return min(values) if values else float("nan")


_SWEEPLAB = """
import json, optuna, sweeplab as sl
optuna.logging.set_verbosity(optuna.logging.WARNING)
sweep = sl.optimize({objective!r}, n_trials={n}, workers=2, store={store!r}, seed=0, name="xgb", progress=False,
                    sampler=optuna.samplers.TPESampler(seed=0), pruner=optuna.pruners.MedianPruner())
print(json.dumps(sweep.best["value"]))
"""

_N_JOBS = """
import json, sys, optuna
sys.path.insert(0, {here!r})
from _xgb_optuna import objective
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0), pruner=optuna.pruners.MedianPruner())
study.optimize(objective, n_trials={n}, n_jobs=2)
print(json.dumps(study.best_value))
"""

_JOURNAL_WORKER = """
import sys, optuna
sys.path.insert(0, {here!r})
from optuna.storages.journal import JournalFileBackend
from _xgb_optuna import objective
optuna.logging.set_verbosity(optuna.logging.WARNING)
storage = optuna.storages.JournalStorage(JournalFileBackend({path!r}))
study = optuna.create_study(study_name="xgb", storage=storage, load_if_exists=True,
                            sampler=optuna.samplers.TPESampler(seed={seed}), pruner=optuna.pruners.MedianPruner())
study.optimize(objective, n_trials={n})
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}


def _timed(code: str) -> tuple[float, str]:
    """Wall time of a fresh `python -c code` (interpreter start and imports included, as a user runs it)."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def run_sweeplab(n: int, root: Path) -> tuple[float, float]:
    wall, out = _timed(_SWEEPLAB.format(objective=OBJECTIVE, n=n, store=str(root / "sweeplab")))
    return wall, float(json.loads(out))


def run_n_jobs(n: int) -> tuple[float, float]:
    wall, out = _timed(_N_JOBS.format(here=str(HERE), n=n))
    return wall, float(json.loads(out))


def run_journal(n: int, root: Path) -> tuple[float, float]:
    """Two processes on one journal file, started together; wall until both are done."""
    optuna = _optuna()
    from optuna.storages.journal import JournalFileBackend

    path = str(root / f"journal-{time.time_ns()}.log")
    t0 = time.perf_counter()
    # different seeds per process: with the same seed both would propose the same startup points
    procs = [subprocess.Popen([sys.executable, "-c", _JOURNAL_WORKER.format(
        here=str(HERE), path=path, seed=i, n=n // 2 + (i < n % 2))], env=_env()) for i in range(2)]
    for p in procs:
        p.wait()
    wall = time.perf_counter() - t0
    study = optuna.load_study(study_name="xgb", storage=optuna.storages.JournalStorage(JournalFileBackend(path)))
    return wall, study.best_value


_MEMORY_VICTIM = """
import sys, json, optuna
sys.path.insert(0, {here!r})
from _xgb_optuna import objective
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
def note(study, trial):
    print(trial.number, flush=True)
study.optimize(objective, n_trials={n}, n_jobs=2, callbacks=[note])
"""


def crash_test(n: int, root: Path, kill_after: int) -> dict[str, object]:
    """SIGKILL each path's driver after `kill_after` completed trials; count what survives; resume sweeplab."""
    env = _env()
    # Optuna, in-memory study: the trials live in the killed process
    victim = subprocess.Popen([sys.executable, "-c", _MEMORY_VICTIM.format(here=str(HERE), n=n)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    seen = 0
    assert victim.stdout is not None
    for _ in victim.stdout:
        seen += 1
        if seen >= kill_after:
            break
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    optuna_kept = 0   # nothing was stored: an in-memory study has no state outside its process

    store = root / "crash"
    cmd = [sys.executable, "-m", "sweeplab", "sweep", "--optuna", OBJECTIVE, "--trials", str(n), "--workers",
           "2", "--store", str(store), "--name", "xgb-crash", "--seed", "0", "-q"]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def completed() -> int:
        try:
            with sqlite3.connect(store / "store.db") as db:
                return int(db.execute("SELECT count(*) FROM trials WHERE state IN ('completed','pruned')")
                           .fetchone()[0])
        except sqlite3.Error:
            return 0

    while completed() < kill_after and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = completed()
    t0 = time.perf_counter()
    resumed = subprocess.run([sys.executable, "-m", "sweeplab", "resume", "xgb-crash", "--store", str(store),
                              "-q"], env=env, capture_output=True, text=True)
    after = completed()
    return {"optuna_in_memory_trials_after_kill": optuna_kept, "optuna_trials_done_before_kill": seen,
            "sweeplab_trials_kept_after_kill": kept, "sweeplab_resume_exit": resumed.returncode,
            "sweeplab_trials_after_resume": after, "resume_seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="100 trials, 3 rounds")
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--no-crash", action="store_true", help="skip the kill -9 test")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n = args.trials or (100 if args.full else 20)
    rounds = args.rounds or (3 if args.full else 1)
    results: dict[str, list[tuple[float, float]]] = {"sweeplab": [], "optuna n_jobs=2": [],
                                                      "optuna journal x2": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for r in range(rounds):
            order = [("sweeplab", lambda r=r: run_sweeplab(n, root / f"r{r}")),
                     ("optuna n_jobs=2", lambda: run_n_jobs(n)),
                     ("optuna journal x2", lambda: run_journal(n, root))]
            order = order[r % 3:] + order[:r % 3]   # rotate who goes first
            for name, fn in order:
                results[name].append(fn())
        crash = None if args.no_crash else crash_test(n, root, kill_after=max(3, n // 4))
    ratios = {peer: [s[0] / p[0] for s, p in zip(results["sweeplab"], results[peer])]
              for peer in ("optuna n_jobs=2", "optuna journal x2")}
    out = {"trials": n, "rounds": rounds,
           "wall_s": {k: [round(w, 2) for w, _ in v] for k, v in results.items()},
           "best_value": {k: [round(b, 1) for _, b in v] for k, v in results.items()},
           "sweeplab_over_peer_wall": {k: [round(x, 3) for x in v] for k, v in ratios.items()},
           "crash": crash}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{n} trials of the XGBoost objective on 2 processes/threads, {rounds} round(s)")
    print(f"{'path':<20}{'wall s (median)':>16}{'best val_mse (median)':>24}")
    for k, v in results.items():
        print(f"{k:<20}{statistics.median(w for w, _ in v):>16.2f}{statistics.median(b for _, b in v):>24.1f}")
    for k, v in ratios.items():
        rounds_text = ", ".join(f"{x:.3f}" for x in v)
        print(f"sweeplab / {k}: wall ratio median {statistics.median(v):.3f} (per round {rounds_text})")
    if crash:
        print("kill -9 of the driver after a few trials:")
        for k, v in crash.items():
            print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
