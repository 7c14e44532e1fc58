"""What a worker forked from the fork server costs in memory and in garbage collection, against workers that
import the libraries themselves (the floor every process-per-worker tool pays, `trial.preload: false`).

    python benchmarks/fork_memory.py                  # 3 interleaved rounds
    python benchmarks/fork_memory.py --against DIR    # also DIR/src's sweeplab (another checkout), interleaved

Each round runs, in turn, one `sweeplab sweep` per configuration (a fresh process each): 4 trials on 2 workers
of a function whose module imports torch and scikit-learn's model selection (numpy and scipy without torch),
as the examples' training code does. Each trial runs three full garbage collections (`gc.collect()`, which
PyTorch Lightning, Transformers and many training loops call between phases; Python runs one by itself once
enough objects have survived), and reports their CPU time and then its process's unique memory (USS: pages
no other process shares). Reported: medians over every trial of every round, and ratios against the cold
workers. Linux only (USS from /proc via psutil).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIBS = ["torch", "sklearn.model_selection"] if importlib.util.find_spec("torch") else ["numpy", "scipy.linalg"]

TRIAL = '''
import gc, time
{imports}

def trial(config, run):
    t = time.thread_time()
    for _ in range(3):
        gc.collect()
    cpu = time.thread_time() - t
    import psutil
    return {{"loss": config["x"], "uss_mb": psutil.Process().memory_full_info().uss / 1e6,
             "gc_ms": cpu / 3 * 1e3}}
'''


def run(src: str, project: Path, preload: bool) -> list[dict[str, float]]:
    spec = {"function": "trial_fn.py:trial", "method": "grid", "metric": {"name": "loss", "goal": "minimize"},
            "workers": 2, "parameters": {"x": {"values": [1, 2, 3, 4]}}}
    if not preload:
        spec["trial"] = {"preload": False}
    env = dict(os.environ, PYTHONPATH=src)
    with tempfile.TemporaryDirectory() as store:
        (project / "spec.json").write_text(json.dumps(spec))
        subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "spec.json", "--store", store, "--name", "m",
                        "-q"], cwd=project, env=env, check=True, capture_output=True)
        out = subprocess.run([sys.executable, "-m", "sweeplab", "status", "m", "--store", store, "--json"],
                             cwd=project, env=env, check=True, capture_output=True, text=True).stdout
    return [t["metrics"] for t in json.loads(out)["trials"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--against", type=Path, help="another checkout (its src/ is measured too)")
    args = ap.parse_args()
    trees = {"this": str(HERE.parent / "src")}
    if args.against is not None:
        trees["against"] = str(args.against.resolve() / "src")
    configs = [(f"{name}, forked", src, True) for name, src in trees.items()] + [("cold workers", trees["this"], False)]
    rows: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in configs}
    with tempfile.TemporaryDirectory() as d:
        project = Path(d)
        (project / "trial_fn.py").write_text(TRIAL.format(imports="\n".join(f"import {m}" for m in LIBS)))
        for _ in range(args.rounds):
            for label, src, preload in configs:
                rows[label].extend(run(src, project, preload))
    print(f"workers importing {', '.join(LIBS)}; 4 trials on 2 workers x {args.rounds} rounds; medians per trial")
    cold = rows["cold workers"]
    cold_uss, cold_gc = statistics.median(r["uss_mb"] for r in cold), statistics.median(r["gc_ms"] for r in cold)
    for label, rs in rows.items():
        uss, gc_ms = statistics.median(r["uss_mb"] for r in rs), statistics.median(r["gc_ms"] for r in rs)
        print(f"  {label:16} unique memory {uss:7.1f} MB ({uss / cold_uss:.2f}x cold)   "
              f"a full collection {gc_ms:7.1f} ms CPU ({gc_ms / cold_gc:.2f}x cold)")


if __name__ == "__main__":
    main()
