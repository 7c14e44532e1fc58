"""Small sweeps feel instant (issue 18, item 4): a whole `sweeplab sweep` process against its floor.

    python benchmarks/startup.py                 # 5 interleaved rounds, 200 trials for the per-trial figure
    python benchmarks/startup.py --full          # the figures in docs/benchmarks.md: 15 rounds, 500 trials

Measured, each round in turn (interleaved, so machine load hits every configuration alike):
  * `sweeplab sweep` of 2 no-op trials on 2 workers, `-q`, whole process (fresh store each time);
  * the floor: `python -c "import sweeplab"` followed by two worker-module starts in parallel
    (`python -c "import sweeplab.backends.worker"`), what any sweep must pay at least;
  * `sweeplab sweep` of 2 and of --trials no-op trials with -q, with the default output to a terminal
    (a pseudo-terminal: the live panel) and to a pipe (a line every 5 s); per-trial cost is the difference
    between the two sizes divided by the extra trials, so fixed costs (the final summary) cancel out.
--instructions also counts, with valgrind (load-independent), the instructions of the floor's processes and of a
2-trial -q sweep's (driver and workers); --rounds 0 with it skips the timed rounds.
Every process runs with bytecode caches (as after a normal install) in a temporary PYTHONPYCACHEPREFIX, warmed
by an untimed first round; --no-bytecode compiles every module from source on each start instead (what a
machine with PYTHONDONTWRITEBYTECODE set, like the project's development machine, pays).
Reported: medians of wall time and of CPU time (user+sys of the process and its children, which is what
a shared machine distorts least), and the ratios: the 2-trial sweep over the floor (with -q, and with the
default output on a terminal, as a user at a shell sees it), and the per-trial cost of the default output on
a terminal (and in a pipe) over -q.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOOP = f"{HERE / '_noop.py'}:noop"
EXE = str(Path(sys.executable).with_name("sweeplab"))
ENV = dict(os.environ)


def _timed(fn) -> tuple[float, float]:   # type: ignore[no-untyped-def]
    """(wall, CPU of the children that ended meanwhile) of fn()."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def sweep(tmp: Path, trials: int, mode: str, tag: str) -> tuple[float, float]:
    """mode: quiet (-q), pipe (default output, stdout a pipe) or tty (default output on a pseudo-terminal)."""
    spec = tmp / f"{tag}.yaml"
    spec.write_text(f"function: {NOOP}\nmethod: random\nseed: 0\nmetric: {{name: loss, goal: minimize}}\n"
                    f"budget: {{trials: {trials}}}\nparameters:\n  x: {{min: 0.0, max: 1.0}}\n")
    args = [EXE, "sweep", str(spec), "--store", str(tmp / tag), "--workers", "2", *(["-q"] if mode == "quiet" else [])]
    if mode != "tty":
        return _timed(lambda: subprocess.run(args, check=True, capture_output=True, env=ENV))   # ENV: the caches
    import pty
    import threading

    main_fd, sub_fd = pty.openpty()

    def drain() -> None:
        try:
            while os.read(main_fd, 65536):
                pass
        except OSError:
            pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    env = {**ENV, "COLUMNS": "100", "LINES": "30", "TERM": "xterm-256color"}
    try:
        return _timed(lambda: subprocess.run(args, check=True, stdout=sub_fd, stderr=sub_fd, env=env))
    finally:
        os.close(sub_fd)
        reader.join(timeout=5)
        os.close(main_fd)


def floor() -> tuple[float, float]:
    def run() -> None:
        subprocess.run([sys.executable, "-c", "import sweeplab"], check=True, env=ENV)
        workers = [subprocess.Popen([sys.executable, "-c", "import sweeplab.backends.worker"], env=ENV)
                   for _ in range(2)]
        for w in workers:
            w.wait()
    return _timed(run)


def _callgrind(tmp: Path, tag: str, args: list[str]) -> dict[str, int]:
    """Instructions each process of `args` executed (valgrind's callgrind, every child traced): a count
    that does not depend on the machine's load. Keys: the command line of each process."""
    out = tmp / f"cg-{tag}"
    out.mkdir()
    subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out}/%p",
                    *args], check=True, capture_output=True, env=ENV)
    counts: dict[str, int] = {}
    for f in sorted(out.iterdir()):
        text = f.read_text(errors="replace")
        cmd = next((x[5:].strip() for x in text.splitlines() if x.startswith("cmd:")), f.name)
        total = next(int(x.split()[1]) for x in text.splitlines() if x.startswith("summary:"))
        counts[f"{cmd} [{f.name}]"] = total
    return counts


def instructions(tmp: Path) -> None:
    """The floor's and a 2-trial -q sweep's instructions, and the part of the sweep's driver process."""
    import shutil

    if shutil.which("valgrind") is None:
        print("  --instructions: valgrind is not installed")
        return
    spec = tmp / "cg.yaml"
    spec.write_text(f"function: {NOOP}\nmethod: random\nseed: 0\nmetric: {{name: loss, goal: minimize}}\n"
                    "budget: {trials: 2}\nparameters:\n  x: {min: 0.0, max: 1.0}\n")
    package = sum(_callgrind(tmp, "package", [sys.executable, "-c", "import sweeplab"]).values())
    worker = sum(_callgrind(tmp, "worker", [sys.executable, "-c", "import sweeplab.backends.worker"]).values())
    floor_total = package + 2 * worker
    procs = _callgrind(tmp, "sweep", [EXE, "sweep", str(spec), "--store", str(tmp / "cg-store"), "--workers", "2",
                                      "-q"])
    workers = {k: v for k, v in procs.items() if "sweeplab.backends.worker" in k}
    driver = sum(procs.values()) - sum(workers.values())
    total = sum(procs.values())
    m = 1e6
    print("instructions (callgrind, millions):")
    print(f"  floor: import sweeplab {package / m:.0f} + 2 x worker start {worker / m:.0f} = {floor_total / m:.0f}")
    print(f"  2-trial sweep, -q: driver {driver / m:.0f} + workers "
          f"{' + '.join(f'{v / m:.0f}' for v in workers.values())} = {total / m:.0f}")
    print(f"  sweep / floor: {total / floor_total:.2f}x; the driver's process alone: {driver / floor_total:.2f}x")
    # on idle cores each side's wall time is its serial path: the floor's import, then the workers side by
    # side; the sweep's driver process, its workers booting on the other cores meanwhile (cli/_early.py)
    print(f"  serial paths (a wall-time estimate for idle cores): driver {driver / m:.0f} / (import sweeplab "
          f"+ one worker start) {(package + worker) / m:.0f} = {driver / (package + worker):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=200, help="trials for the default-output vs -q figure")
    parser.add_argument("--no-bytecode", action="store_true", help="compile from source on every start")
    parser.add_argument("--full", action="store_true", help="15 rounds and 500 trials (the documented figures)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions with valgrind (load-independent; ~1 min)")
    args = parser.parse_args()
    if args.full:
        args.rounds, args.trials = max(args.rounds, 15), max(args.trials, 500)
    modes = ("quiet", "tty", "pipe")
    rows: dict[str, list[tuple[float, float]]] = {"floor": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.instructions:
            ENV.pop("PYTHONDONTWRITEBYTECODE", None)
            ENV["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
            floor()   # the caches, as below
            sweep(tmp, 2, "quiet", "warm-instructions")
            instructions(tmp)
            if args.rounds == 0:
                return
        if args.no_bytecode:
            ENV["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            ENV.pop("PYTHONDONTWRITEBYTECODE", None)
            ENV["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
            floor()   # untimed: writes the caches
            for mode in modes:
                sweep(tmp, 2, mode, f"warm-{mode}")
        for i in range(args.rounds):
            rows["floor"].append(floor())
            for mode in modes:
                for n in (2, args.trials):
                    rows.setdefault(f"{mode}{n}", []).append(sweep(tmp, n, mode, f"{mode}{n}-{i}"))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in rows.items()}
    caches = "no bytecode caches" if args.no_bytecode else "bytecode caches"
    print(f"{args.rounds} interleaved rounds, {caches}, medians "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print(f"  {'':<52} {'wall s':>8} {'CPU s':>8}")
    print(f"  {'floor: import sweeplab + 2 worker starts':<52} {med['floor'][0]:>8.3f} {med['floor'][1]:>8.3f}")
    for mode in modes:
        for n in (2, args.trials):
            label = f"sweeplab sweep, {n} no-op trials, {mode}"
            print(f"  {label:<52} {med[f'{mode}{n}'][0]:>8.3f} {med[f'{mode}{n}'][1]:>8.3f}")
    for mode, label in (("quiet", "-q"), ("tty", "default output, terminal")):
        m2 = med[f"{mode}2"]
        print(f"  2-trial sweep ({label}) / floor: wall {m2[0] / med['floor'][0]:.2f}x, "
              f"CPU {m2[1] / med['floor'][1]:.2f}x (target <= 2x)")
    per = {m: [(med[f"{m}{args.trials}"][j] - med[f"{m}2"][j]) / (args.trials - 2) * 1000 for j in (0, 1)]
           for m in modes}
    for m in modes:
        print(f"  per extra trial, {m:<5}: {per[m][0]:.2f} ms wall, {per[m][1]:.2f} ms CPU"
              + ("" if m == "quiet" else f"; CPU vs -q {per[m][1] / per['quiet'][1]:.2f}x (target <= 1.10x)"))


if __name__ == "__main__":
    main()
