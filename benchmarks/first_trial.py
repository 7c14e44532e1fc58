"""How soon a sweep's first trial starts, per search method, against random search and Optuna in the same run.

    python benchmarks/first_trial.py                 # 7 interleaved rounds
    python benchmarks/first_trial.py --rounds 15     # the figures in docs/benchmarks.md
    python benchmarks/first_trial.py --against DIR   # also DIR/src's sweeplab (another checkout), interleaved

Each round starts, in turn, one fresh process per configuration (interleaved, so machine load hits every
configuration alike) and measures from its spawn to the moment the first trial function starts (the function
appends `time.time()` to a file): `sweeplab sweep` of 2 trials on 2 workers, `-q`, for each method over a
6-parameter space (two floats, a log float, an int, a categorical, a normal), and Optuna's
`study.optimize(n_trials=2, n_jobs=2)` with `TPESampler` and `GPSampler` on the same parameters (the peer: a
script that imports Optuna and asks in its threads). The floor is `random`, which models nothing. Reported:
medians, and each over the floor and over the Optuna sampler of its kind. Bytecode caches are written for
sweeplab and this file first (as an installed package has them; Optuna's are in site-packages).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXE = str(Path(sys.executable).with_name("sweeplab"))
METHODS = ("random", "sobol", "tpe", "bayes")
SPACE = {"lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1.0}, "x": {"min": -1.0, "max": 1.0},
         "y": {"min": 0.0, "max": 5.0}, "n": {"distribution": "int_uniform", "min": 1, "max": 8},
         "act": {"values": ["relu", "tanh", "gelu"]}, "z": {"distribution": "normal", "mu": 0.0, "sigma": 1.0}}

TRIAL = '''
import os, time
def first(config, run):
    with open(os.environ["FIRST_TRIAL_LOG"], "a") as f:
        f.write(f"{time.time()}\\n")
    return {"loss": float(config["x"])}
'''

OPTUNA = '''
import os, sys, time
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
def objective(trial):
    with open(os.environ["FIRST_TRIAL_LOG"], "a") as f:
        f.write(f"{time.time()}\\n")
    trial.suggest_float("lr", 1e-4, 1.0, log=True)
    x = trial.suggest_float("x", -1.0, 1.0)
    trial.suggest_float("y", 0.0, 5.0)
    trial.suggest_int("n", 1, 8)
    trial.suggest_categorical("act", ["relu", "tanh", "gelu"])
    trial.suggest_float("z", 0.0, 1.0)
    return x
sampler = optuna.samplers.TPESampler(seed=0) if sys.argv[1] == "tpe" else optuna.samplers.GPSampler(seed=0)
optuna.create_study(sampler=sampler).optimize(objective, n_trials=2, n_jobs=2)
'''


def _first(args: list[str], env: dict[str, str], log: Path) -> float:
    """Seconds from spawning `args` to the start of its first trial."""
    log.write_text("")
    t0 = time.time()
    subprocess.run(args, check=True, capture_output=True, env={**env, "FIRST_TRIAL_LOG": str(log)})
    return min(float(x) for x in log.read_text().split()) - t0


def main() -> None:
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--against", metavar="DIR", help="also measure DIR/src's sweeplab, interleaved")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "first_trial_fn.py").write_text(TRIAL)
        (tmp / "optuna_first.py").write_text(OPTUNA)
        trees = {"sweeplab": str(Path(__file__).resolve().parents[1] / "src")}
        if args.against:
            trees["against"] = str(Path(args.against).resolve() / "src")
        for src in trees.values():
            subprocess.run([sys.executable, "-m", "compileall", "-q", src, str(tmp)], check=True,
                           stdout=subprocess.DEVNULL)
        configs: dict[str, tuple[list[str], dict[str, str]]] = {}
        for tree, src in trees.items():
            env = {**os.environ, "PYTHONPATH": src}
            for method in METHODS:
                spec = tmp / f"{method}.yaml"
                spec.write_text(yaml.safe_dump({
                    "function": f"{tmp / 'first_trial_fn.py'}:first", "method": method, "seed": 0,
                    "metric": {"name": "loss", "goal": "minimize"}, "budget": {"trials": 2}, "parameters": SPACE}))
                name = method if tree == "sweeplab" else f"{method} ({tree})"
                configs[name] = ([EXE, "sweep", str(spec), "--store", str(tmp / "store"), "--workers", "2", "-q"],
                                 env)
        for sampler in ("tpe", "gp"):
            configs[f"optuna {sampler}"] = ([sys.executable, str(tmp / "optuna_first.py"), sampler], dict(os.environ))
        for cmd, env in configs.values():   # untimed: writes the examples' and scripts' caches
            _first(cmd, env, tmp / "log")
        times: dict[str, list[float]] = {name: [] for name in configs}
        for r in range(args.rounds):
            for name, (cmd, env) in configs.items():
                if cmd[0] == EXE:
                    subprocess.run(["rm", "-rf", str(tmp / "store")], check=True)
                times[name].append(_first(cmd, env, tmp / "log"))
            print(f"round {r + 1}/{args.rounds}: " + "  ".join(f"{n} {t[-1]:.3f}" for n, t in times.items()),
                  flush=True)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"\nfirst trial started, seconds after spawn (median of {args.rounds} rounds):")
    peer = {"tpe": "optuna tpe", "bayes": "optuna gp"}
    for name, m in med.items():
        method = name.split()[0]
        ratio = f"  {m / med['random']:.2f}x random" if not name.startswith("optuna") else ""
        if method in peer and not name.startswith("optuna"):
            ratio += f"  {m / med[peer[method]]:.2f}x {peer[method]}"
        print(f"  {name:22} {m:6.3f} s{ratio}")


if __name__ == "__main__":
    main()
