"""Time to target: wall time and compute until a trial first reaches a target value, sweeplab vs its peers.

    python benchmarks/time_to_target.py                       # quick check: 2 seeds, small caps
    python benchmarks/time_to_target.py --seeds 5 --full      # the figures in docs/benchmarks.md
    python benchmarks/time_to_target.py --tasks xgb --tools sweeplab optuna
    python benchmarks/time_to_target.py --calibrate           # value quantiles of random configs
    python benchmarks/time_to_target.py --warm-start 5        # A/B: workers forked warm vs started cold

Two tasks, the training functions of the examples unchanged:
  * xgb:    examples/xgboost_diabetes (validation MSE, minimize; the example's 5-parameter space)
  * digits: examples/torch_digits with `epochs: 9` (validation loss after the last epoch, minimize;
            the example's 4-parameter space)
and five tools, each with 2 trials at a time on the same machine:
  * sweeplab:          `sweeplab.api.run_sweep` on the example's sweep.yaml (tpe; on digits + ASHA 1/3/9
                       epochs, eta 3, and the example's monitors), `metric.target` ends the sweep; in a
                       fresh process, as `sweeplab sweep` runs; its workers are forked from a fork server
                       that imported the libraries the example's train.py imports (`trial.preload` set to what
                       sweeplab reads from that file, as a sweep of the example gets: the function here is
                       this file's recording wrapper), started first thing as `sweeplab sweep` starts it
                       (cli/_early.py); the fork server's CPU is added to sweeplab's compute;
  * sweeplab, cold:    the same with `trial.preload: false`: each worker process imports the libraries inside
                       its first trial (sweeplab before the fork server), for the A/B in the same run; its
                       workers are started first thing, as `sweeplab sweep` starts them;
  * optuna n_jobs=2:   TPESampler + SuccessiveHalvingPruner, `study.optimize(n_jobs=2)`, in-memory storage,
                       in a fresh process, as a user's script runs;
  * optuna 2 procs:    the same sampler and pruner in 2 processes sharing a JournalStorage (file backend);
  * ray tune:          OptunaSearch (TPE) + ASHAScheduler on a local `ray.init(num_cpus=2)`, 1 CPU per trial,
                       actors reused between trials.
Pruning is configured as in sweeplab's spec: on digits the peers prune with the same rungs (min 1 epoch,
eta 3: Optuna's SuccessiveHalvingPruner(min_resource=1, reduction_factor=3), Ray's ASHAScheduler(grace 1,
reduction 3, max_t 9)); on xgb nobody prunes and the peers report only the final value (Optuna NopPruner,
Ray without a scheduler). Every tool stops creating trials once a trial reaches the target.

What is measured, the same way for every tool: the objective is wrapped so that each trial appends
`time.time()` and its thread's CPU time to a JSON-lines file when it starts, at every reported step and
when it completes (as its tool counts it: not pruned). Wall to target is from the moment the tool is
started (the spawn of its process or processes, or `Tuner.fit`; `ray.init` is not counted) to
the end of the first completed trial whose value is at or below the target. Compute to target is the CPU
seconds the trials spent in the objective until then (running trials counted up to that moment). A run
that does not reach the target within its caps counts with its whole wall time and compute (shown `>`),
and the medians say `not reached` when half the runs did not reach it. Ratios are the peer's median over
sweeplab's (> 1: sweeplab is ahead). Also from the same records, per tool: when its first trial started, and
how long a slot (a process and thread running trials: a worker, one of Optuna's threads or processes, a Ray
actor) stayed idle between the end of one trial and the start of its next (median over the trials before
the target) -- the per-trial overhead of the tool between trials, start-up excluded.
Every process of every tool runs with bytecode caches (as after a normal install and a first run: sweeplab's
modules, this file and the examples are compiled into their `__pycache__` before the first timed run);
--no-bytecode leaves them as they are, which with PYTHONDONTWRITEBYTECODE set (like the project's development
machine) and an editable install means compiling sweeplab from source in every process: ~0.1 s more before
sweeplab's first trial, a cost the peers, installed with their bytecode, do not pay.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
WORKERS = 2
LOG_ENV = "SWEEPLAB_TTT_LOG"


# ----------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class Param:
    """One searched parameter, written once and translated for each tool."""

    name: str                       # dotted for nested config keys (model.hidden)
    kind: str                       # int | float | log | choice
    low: float = 0.0
    high: float = 0.0
    choices: tuple[Any, ...] = ()

    def wandb(self) -> dict[str, Any]:
        if self.kind == "choice":
            return {"values": list(self.choices)}
        dist = {"int": "int_uniform", "float": "uniform", "log": "log_uniform_values"}[self.kind]
        return {"distribution": dist, "min": self.low, "max": self.high}

    def optuna(self, trial: Any) -> Any:
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high))
        return trial.suggest_float(self.name, self.low, self.high, log=self.kind == "log")

    def tune(self) -> Any:
        from ray import tune

        if self.kind == "choice":
            return tune.choice(list(self.choices))
        if self.kind == "int":
            return tune.randint(int(self.low), int(self.high) + 1)     # upper bound exclusive
        return tune.loguniform(self.low, self.high) if self.kind == "log" else tune.uniform(self.low, self.high)

    def random(self, rng: random.Random) -> Any:
        if self.kind == "choice":
            return rng.choice(self.choices)
        if self.kind == "int":
            return rng.randint(int(self.low), int(self.high))
        if self.kind == "log":
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)


@dataclass(frozen=True)
class Task:
    name: str
    example: str                    # directory under examples/
    metric: str
    params: tuple[Param, ...]
    target: float                   # chosen from a calibration run (--calibrate), see TARGETS below
    overrides: dict[str, Any] = field(default_factory=dict)   # on the example's config.yaml
    final_step: Callable[[dict[str, Any]], int] = lambda c: 0  # the step a complete trial logs last
    asha: dict[str, Any] | None = None                          # sweeplab's early_terminate, if any
    peer_min_resource: int = 1                                 # the peers' pruner, where `asha` is set
    peer_reduction: int = 3

    @property
    def dir(self) -> Path:
        return EXAMPLES / self.example


# Targets, chosen so that every tool reaches them within its caps in most seeds, but not by luck in the first
# few random trials. xgb: 3320 is reached by Optuna's TPE in 20-50 sequential trials (the best of 40 random
# configurations, `--calibrate 40`, is 3408). digits: 0.15 is about the best 5% of random configurations
# (best of 40: 0.132).
TASKS = {
    "xgb": Task(
        name="xgb", example="xgboost_diabetes", metric="val_mse", target=3320.0,
        params=(Param("max_depth", "int", 2, 8), Param("learning_rate", "log", 0.01, 0.3),
                Param("n_estimators", "int", 50, 300), Param("reg_lambda", "log", 0.01, 10.0),
                Param("subsample", "float", 0.5, 1.0)),
        final_step=lambda c: int(c["n_estimators"]) - 1,          # xgboost callbacks count rounds from 0
    ),
    "digits": Task(
        name="digits", example="torch_digits", metric="val_loss", target=0.15,
        params=(Param("lr", "log", 1e-4, 10.0), Param("momentum", "choice", choices=(0.0, 0.9)),
                Param("batch_size", "choice", choices=(32, 64, 128)),
                Param("model.hidden", "choice", choices=(32, 64, 128))),
        overrides={"epochs": 9},
        final_step=lambda c: int(c["epochs"]),                    # step = epochs trained
        asha={"type": "asha", "min_iter": 1, "max_iter": 9, "eta": 3},
        peer_min_resource=1, peer_reduction=3,
    ),
}


def load_example(task: Task) -> ModuleType:
    """The example's train.py as a module (loaded once per process)."""
    key = f"_ttt_{task.name}_train"
    module = sys.modules.get(key)
    if module is None:
        # Published only once its body has run: Optuna's n_jobs threads call this at once, and a second
        # thread used to get a half-loaded module (its trial failed). Two threads may both run the body
        # (cheap: the examples import their libraries inside train); a lock would not pickle into Ray
        # Tune's trainable.
        spec = importlib.util.spec_from_file_location(key, task.dir / "train.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module = sys.modules.setdefault(key, module)
    return module


def base_config(task: Task) -> dict[str, Any]:
    import yaml

    config = yaml.safe_load((task.dir / "config.yaml").read_text())
    config.update(task.overrides)
    return config


def full_config(task: Task, params: dict[str, Any]) -> dict[str, Any]:
    config = json.loads(json.dumps(base_config(task)))
    for key, value in params.items():
        node = config
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return config


class _Config(SimpleNamespace):
    """What the examples' train functions read for the peers: attributes and `.get`, as sweeplab's Config."""

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


def namespace(value: Any) -> Any:
    if isinstance(value, dict):
        return _Config(**{k: namespace(v) for k, v in value.items()})
    return value


# ----------------------------------------------------------------------------- recording
class Recorder:
    """Appends one JSON line per event of one trial (O_APPEND: lines from many processes do not mix)."""

    def __init__(self, path: str, final_step: int, slot: str | None = None) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.trial = uuid.uuid4().hex[:12]
        self.final_step = final_step
        self.last: float | None = None
        # where it ran: the process and thread (a worker, one of Optuna's threads), or what the caller names
        self.write("start", slot=slot or f"{os.getpid()}/{threading.get_native_id()}")

    def write(self, event: str, **data: Any) -> None:
        line = json.dumps({"trial": self.trial, "event": event, "t": time.time(), "cpu": time.thread_time(),
                           **data})
        os.write(self.fd, (line + "\n").encode())

    def step(self, step: int | None, value: Any) -> None:
        try:
            self.last = float(value)
        except (TypeError, ValueError):
            self.last = None
        self.write("step", step=step, value=self.last)

    def done(self, value: Any) -> None:
        v = float(value) if value is not None else float("nan")
        self.write("done", value=v if math.isfinite(v) else None)

    def close(self) -> None:
        self.write("end")
        os.close(self.fd)


class PeerRun:
    """The part of sweeplab's `run` object the examples use, for the peers' trials."""

    def __init__(self, rec: Recorder, metric: str, seed: int, report: Callable[[dict[str, Any], int], None],
                 prune: Callable[[], bool]) -> None:
        self.rec, self.metric, self.seed, self.smoke = rec, metric, seed, False
        self._report, self._prune, self.pruned = report, prune, False

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self.rec.step(step, metrics.get(self.metric))
        self._report(metrics, int(step or 0))

    @property
    def should_stop(self) -> bool:
        self.pruned = self.pruned or self._prune()
        return self.pruned

    def track(self, iterable: Iterable[Any]) -> Iterable[Any]:
        return iterable

    def restore(self) -> None:
        return None

    def checkpoint(self, obj: Any, step: int | None = None, **kw: Any) -> bool:
        return False


class ProbeRun:
    """sweeplab's real `run`, with every `log` also recorded."""

    def __init__(self, run: Any, rec: Recorder, metric: str) -> None:
        self._run, self._rec, self._metric = run, rec, metric

    def log(self, metrics: dict[str, Any], step: int | None = None, **kw: Any) -> None:
        self._rec.step(step, metrics.get(self._metric))
        self._run.log(metrics, step=step, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)


def _sweeplab_trial(task: Task, config: Any, run: Any) -> Any:
    rec = Recorder(os.environ[LOG_ENV], task.final_step(config.to_dict()))
    try:
        out = load_example(task).train(config, ProbeRun(run, rec, task.metric))
        if not run.should_stop:             # pruned or stopped trials are not complete in sweeplab
            rec.done(out[task.metric])
        return out
    finally:
        rec.close()


def sweeplab_xgb(config: Any, run: Any) -> Any:
    """The sweeplab trial function for the xgb task (the example's `train`, recorded)."""
    return _sweeplab_trial(TASKS["xgb"], config, run)


def sweeplab_digits(config: Any, run: Any) -> Any:
    """The sweeplab trial function for the digits task (the example's `train`, recorded)."""
    return _sweeplab_trial(TASKS["digits"], config, run)


# ----------------------------------------------------------------------------- tools
@dataclass(frozen=True)
class Caps:
    trials: int
    seconds: float


METHOD_ENV = "TTT_SWEEPLAB_METHOD"   # --method, handed to the sweeplab arm's process


def run_sweeplab(task: Task, seed: int, caps: Caps, log: str, *, cold: bool = False) -> None:
    # First, as `sweeplab sweep` does from its arguments and the spec's `function:` line before it imports the
    # rest of the command line and reads the spec (cli/_early.py): start the fork server that imports what the
    # example's train.py imports, or, cold, the first workers (one fewer than the cores; the other once the
    # imports are done). The sweep's backend takes them over.
    os.environ[LOG_ENV] = log   # in the workers' environment, which a started worker or server must match
    from sweeplab.backends import local
    from sweeplab.backends.preload import trial_imports

    preload = list(trial_imports(f"{task.dir / 'train.py'}:train", [str(task.dir)]))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    first = min(WORKERS, max(1, cores - 1))
    if cold:
        local.prestart(first)
    else:
        local.prestart_fork_server(preload)
    import yaml

    from sweeplab.api import run_sweep

    if cold and WORKERS > first:
        local.prestart(WORKERS - first)

    spec = yaml.safe_load((task.dir / "sweep.yaml").read_text())
    spec.update(function=f"{Path(__file__).resolve()}:sweeplab_{task.name}", config=str(task.dir / "config.yaml"),
                seed=seed, workers=WORKERS, budget={"trials": caps.trials, "time": f"{int(caps.seconds)}s"},
                parameters={p.name: p.wandb() for p in task.params})
    spec["metric"] = {**spec["metric"], "target": task.target}
    if os.environ.get(METHOD_ENV):
        spec["method"] = os.environ[METHOD_ENV]
    if task.asha is not None:
        spec["early_terminate"] = task.asha
    # what the workers import before their first trial (once, in the fork server): what sweeplab reads from
    # the example's own train.py, as a user's sweep of it gets (the function here is this file's wrapper)
    spec["trial"] = {**(spec.get("trial") or {}), "preload": preload}
    if cold:   # the A/B's other arm, as before the fork server: each worker imports inside its first trial
        spec["trial"]["preload"] = False
    name = f"ttt-{task.name}-{seed}"
    with tempfile.TemporaryDirectory() as store:
        run_sweep(spec, store=store, name=name, overrides=[f"{k}={v}" for k, v in task.overrides.items()])
        _record_fork_server(store, name, log)


def _record_fork_server(store: str, name: str, log: str) -> None:
    """The fork server's CPU (its Python, sweeplab's worker modules and the libraries it imported for all
    workers) is compute the objective's clock does not see: it goes into the log as one more record, spent at
    the start, which `analyse` adds to the CPU to target."""
    from sweeplab.store import Store
    from sweeplab.store.queries import events

    st = Store.open(store, readonly=True)
    for e in events(st, name):
        data = e.get("data") or {}
        if e["kind"] == "workers" and data.get("forked") and data.get("preload_cpu"):
            with open(log, "a") as f:
                f.write(json.dumps({"trial": "fork-server", "event": "overhead", "t": e["time"],
                                    "cpu": float(data["preload_cpu"])}) + "\n")


def driver_cost_run(task_name: str, trials: str, out: str) -> None:
    """One sweeplab sweep of `trials` trials of the task (no target, the example's spec), in this process: the
    driver's CPU between its 12th trial and its last (steady state: past start-up and TPE's random trials),
    written as JSON to `out` with the trial and point counts of that stretch."""
    import sqlite3

    import yaml

    from sweeplab.api import run_sweep

    task, n = TASKS[task_name], int(trials)
    spec = yaml.safe_load((task.dir / "sweep.yaml").read_text())
    spec.update(function=f"{Path(__file__).resolve()}:sweeplab_{task.name}", config=str(task.dir / "config.yaml"),
                seed=0, workers=WORKERS, budget={"trials": n}, parameters={p.name: p.wandb() for p in task.params})
    if os.environ.get(METHOD_ENV):
        spec["method"] = os.environ[METHOD_ENV]
    if task.asha is not None:
        spec["early_terminate"] = task.asha
    marks: list[tuple[int, float, float]] = []   # (trials created, process CPU, driver thread CPU)

    def progress(p: Any) -> None:
        marks.append((p.created, time.process_time(), time.thread_time()))

    with tempfile.TemporaryDirectory() as store:
        run_sweep(spec, store=store, name="cost", on_progress=progress,
                  overrides=[f"{k}={v}" for k, v in task.overrides.items()])
        marks.append((n, time.process_time(), time.thread_time()))
        db = sqlite3.connect(Path(store) / "store.db")
        first = next(m for m in marks if m[0] >= 12)
        points = db.execute("SELECT count(*) FROM metrics m JOIN trials t ON t.id = m.trial_id WHERE t.number >= ?",
                            (first[0],)).fetchone()[0]
        db.close()
    Path(out).write_text(json.dumps({"trials": n - first[0], "points": points, "cpu": marks[-1][1] - first[1],
                                     "main": marks[-1][2] - first[2]}))


def driver_cost(tasks: list[str], rounds: int, trials: int, against: str | None) -> None:
    """The driver's CPU per trial and per logged point, and a slot's idle time between trials, for this tree
    and (interleaved, same rounds) the sweeplab of `against`/src: steady state of `trials`-trial sweeps."""
    trees = {"this": str(HERE.parent / "src")}
    if against:
        trees["against"] = str(Path(against).resolve() / "src")
    print(f"driver cost: sweeplab's example sweeps of {trials} trials, {WORKERS} workers; driver CPU from its 12th "
          f"trial to its end; {rounds} rounds, trees interleaved")
    for name in tasks:
        rows: dict[str, list[tuple[float, float, float, float]]] = {t: [] for t in trees}
        for _ in range(rounds):
            for tree, src in trees.items():
                with tempfile.TemporaryDirectory() as d:
                    log, out = str(Path(d) / "events.jsonl"), str(Path(d) / "cost.json")
                    Path(log).touch()
                    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""),
                           LOG_ENV: log}
                    subprocess.run([sys.executable, __file__, "--_driver-cost", name, str(trials), out], check=True,
                                   env=env)
                    got = json.loads(Path(out).read_text())
                    events = [json.loads(x) for x in Path(log).read_text().splitlines() if x.strip()]
                    gaps = slot_idle(events, math.inf)
                    rows[tree].append((got["cpu"] / got["trials"], got["main"] / got["trials"],
                                       got["cpu"] / max(got["points"], 1), statistics.median(gaps)))
        for tree, vals in rows.items():
            med = [statistics.median(v[i] for v in vals) for i in range(4)]
            label = "this tree" if tree == "this" else f"{against}"
            print(f"  {name} {label:28} driver CPU {med[0] * 1e3:6.2f} ms/trial (its main thread {med[1] * 1e3:5.2f}), "
                  f"{med[2] * 1e6:5.1f} us/point; slot idle {med[3] * 1e3:5.1f} ms/trial")
        if against:
            a, b = rows["this"], rows["against"]
            cpu = statistics.median(v[0] for v in a) / statistics.median(v[0] for v in b)
            idle = statistics.median(v[3] for v in a) / statistics.median(v[3] for v in b)
            print(f"  {name} this / against: driver CPU per trial {cpu:.2f}x, slot idle {idle:.2f}x")


def optuna_objective(task: Task, log: str, target: float) -> Callable[[Any], float]:
    import optuna

    def objective(trial: Any) -> float:
        params = {p.name: p.optuna(trial) for p in task.params}
        config = full_config(task, params)
        rec = Recorder(log, task.final_step(config))
        prunes = task.asha is not None      # as sweeplab: pruning only where its spec has early_terminate
        run = PeerRun(rec, task.metric, seed=trial.number,
                      report=(lambda m, step: trial.report(float(m[task.metric]), step)) if prunes else _ignore,
                      prune=trial.should_prune if prunes else (lambda: False))
        try:
            out = load_example(task).train(namespace(config), run)
            if run.pruned:
                raise optuna.TrialPruned()
            value = float(out[task.metric])
            rec.done(value)
            return value
        finally:
            rec.close()

    return objective


def _ignore(metrics: dict[str, Any], step: int) -> None:
    return None


def optuna_stop_at(target: float, cap: int) -> Callable[[Any, Any], None]:
    from optuna.trial import TrialState

    def callback(study: Any, trial: Any) -> None:
        done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
        if any(t.value is not None and t.value <= target for t in done) or len(study.trials) >= cap:
            study.stop()

    return callback


def optuna_study(task: Task, seed: int, storage: Any = None, name: str | None = None) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        direction="minimize", storage=storage, study_name=name, load_if_exists=True,
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.NopPruner() if task.asha is None else
        optuna.pruners.SuccessiveHalvingPruner(min_resource=task.peer_min_resource,
                                               reduction_factor=task.peer_reduction))


def run_optuna_threads(task: Task, seed: int, caps: Caps, log: str) -> None:
    study = optuna_study(task, seed)
    study.optimize(optuna_objective(task, log, task.target), n_trials=caps.trials, timeout=caps.seconds,
                   n_jobs=WORKERS, callbacks=[optuna_stop_at(task.target, caps.trials)], catch=(Exception,))


def journal(path: str) -> Any:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(path))


def run_optuna_procs(task: Task, seed: int, caps: Caps, log: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "journal.log")
        optuna_study(task, seed, journal(path), "ttt")       # created once, before the workers load it
        procs = [subprocess.Popen([sys.executable, __file__, "--_optuna-worker", task.name, str(seed + 1000 * i),
                                   str(caps.trials), str(caps.seconds), path, log]) for i in range(WORKERS)]
        for p in procs:
            p.wait()


def optuna_worker(task_name: str, seed: str, trials: str, seconds: str, path: str, log: str) -> None:
    """One of the journal-storage processes (sampler seeds differ per process, as they must)."""
    from optuna.study import MaxTrialsCallback

    task = TASKS[task_name]
    study = optuna_study(task, int(seed), journal(path), "ttt")
    study.optimize(optuna_objective(task, log, task.target), timeout=float(seconds), catch=(Exception,),
                   callbacks=[MaxTrialsCallback(int(trials), states=None), optuna_stop_at(task.target, int(trials))])


def run_ray_tune(task: Task, seed: int, caps: Caps, log: str) -> None:
    import optuna
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    max_t = int(task.overrides.get("epochs", 0)) or max(int(p.high) for p in task.params if p.name == "n_estimators")

    def trainable(params: dict[str, Any], log: str = log) -> None:
        config = full_config(task, params)
        rec = Recorder(log, task.final_step(config), slot=str(os.getpid()))   # an actor runs each trial in a new thread
        final = task.final_step(config)

        def report(metrics: dict[str, Any], step: int) -> None:
            value = float(metrics[task.metric])
            if step >= final:
                rec.done(value)     # a trial that reports its last step is complete for Ray Tune
            elif task.asha is None:
                return              # no scheduler: report the final value only, as a user would
            tune.report({task.metric: value if math.isfinite(value) else 1e18, "final": int(step >= final)})

        run = PeerRun(rec, task.metric, seed=hash(tuple(sorted(map(str, params.items())))) % 2**31,
                      report=report, prune=lambda: False)
        try:
            load_example(task).train(namespace(config), run)
        finally:
            rec.close()

    class Reached(tune.Stopper):
        def __init__(self) -> None:
            self.reached = False

        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            if result.get("final") and result.get(task.metric, math.inf) <= task.target:
                self.reached = True
            return False

        def stop_all(self) -> bool:
            return self.reached

    with tempfile.TemporaryDirectory() as d:
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),
            param_space={p.name: p.tune() for p in task.params},
            tune_config=tune.TuneConfig(
                metric=task.metric, mode="min", num_samples=caps.trials, max_concurrent_trials=WORKERS,
                time_budget_s=caps.seconds, reuse_actors=True,
                search_alg=OptunaSearch(sampler=optuna.samplers.TPESampler(seed=seed)),
                scheduler=None if task.asha is None else ASHAScheduler(time_attr="training_iteration", max_t=max_t,
                                        grace_period=task.peer_min_resource, reduction_factor=task.peer_reduction)),
            run_config=tune.RunConfig(storage_path=d, name="ttt", verbose=0, stop=Reached()),
        )
        tuner.fit()


TOOLS: dict[str, Callable[[Task, int, Caps, str], None]] = {
    "sweeplab": run_sweeplab,
    "sweeplab-cold": functools.partial(run_sweeplab, cold=True),
    "optuna": run_optuna_threads,
    "optuna-journal": run_optuna_procs,
    "ray-tune": run_ray_tune,
}
#: run in a process of their own (optuna-journal spawns its own 2 processes; Ray Tune's trials run in Ray workers)
FRESH = ("sweeplab", "sweeplab-cold", "optuna")
LABELS = {"sweeplab": "sweeplab", "sweeplab-cold": "sweeplab, workers cold", "optuna": "optuna n_jobs=2",
          "optuna-journal": "optuna 2 procs (journal)", "ray-tune": "ray tune (optuna+asha)"}


# ----------------------------------------------------------------------------- analysis
@dataclass
class Outcome:
    reached: bool
    wall: float          # to the target, or the whole run when not reached
    cpu: float           # objective CPU seconds up to then
    trials: int          # trials started up to then
    best: float          # the best completed value of the whole run
    first: float = math.nan   # from the tool's start to the start of its first trial (s)
    idle: float = math.nan    # median time a slot stayed idle between the end of a trial and its next (s)


def slot_idle(events: list[dict[str, Any]], until: float) -> list[float]:
    """Each gap between the end of a trial and the start of the next one in the same slot (process and
    thread: a sweeplab worker, one of Optuna's threads or processes, a Ray actor), up to `until`."""
    slot = {e["trial"]: e["slot"] for e in events if e["event"] == "start" and "slot" in e}
    spans: dict[str, list[tuple[float, float]]] = {}
    starts = {e["trial"]: e["t"] for e in events if e["event"] == "start"}
    for e in events:
        if e["event"] == "end" and e["trial"] in slot and e["t"] <= until:
            spans.setdefault(slot[e["trial"]], []).append((starts[e["trial"]], e["t"]))
    gaps = []
    for rows in spans.values():
        rows.sort()
        gaps += [s1 - e0 for (_, e0), (s1, _) in itertools.pairwise(rows) if s1 <= until]
    return gaps


def analyse(log: str, t0: float, t_end: float, target: float) -> Outcome:
    events = [json.loads(line) for line in Path(log).read_text().splitlines() if line.strip()]
    hits = [e["t"] for e in events if e["event"] == "done" and e["value"] is not None and e["value"] <= target]
    reached = bool(hits)
    t_stop = min(hits) if hits else t_end
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    overhead = sum(e["cpu"] for e in events if e["event"] == "overhead")   # sweeplab's fork server
    events = [e for e in events if e["event"] != "overhead"]
    for e in sorted(events, key=lambda e: e["t"]):
        if e["t"] > t_stop:
            continue
        first.setdefault(e["trial"], e["cpu"])
        last[e["trial"]] = e["cpu"]
    cpu = overhead + sum(last[k] - first[k] for k in first)
    values = [e["value"] for e in events if e["event"] == "done" and e["value"] is not None]
    gaps = slot_idle(events, t_stop)
    starts = [e["t"] for e in events if e["event"] == "start"]
    return Outcome(reached, t_stop - t0, cpu, len(first), min(values, default=math.inf),
                   first=min(starts, default=math.inf) - t0, idle=statistics.median(gaps) if gaps else math.nan)


def measure(tool: str, task: Task, seed: int, caps: Caps) -> Outcome:
    with tempfile.TemporaryDirectory() as d:
        log = str(Path(d) / "events.jsonl")
        Path(log).touch()
        t0 = time.time()
        if tool in FRESH:           # in a fresh process, as a user's script or `sweeplab sweep` starts
            subprocess.run([sys.executable, __file__, "--_run", tool, task.name, str(seed), str(caps.trials),
                            str(caps.seconds), log], check=True)
        else:
            TOOLS[tool](task, seed, caps, log)
        return analyse(log, t0, time.time(), task.target)


def calibrate(task: Task, n: int) -> None:
    """Values of `n` random configurations, run in this process: pick a target from their quantiles."""
    rng = random.Random(0)
    values = []
    for i in range(n):
        config = full_config(task, {p.name: p.random(rng) for p in task.params})
        rec = Recorder(os.devnull, 0)
        run = PeerRun(rec, task.metric, seed=i, report=lambda m, s: None, prune=lambda: False)
        out = load_example(task).train(namespace(config), run)
        v = float(out[task.metric])
        values.append(v if math.isfinite(v) else math.inf)
    values.sort()
    qs = {q: values[min(len(values) - 1, int(q * len(values)))] for q in (0.0, 0.05, 0.125, 0.25, 0.5)}
    print(f"{task.name}: {n} random configs; quantiles " + ", ".join(f"{q:.3g}: {v:.4g}" for q, v in qs.items())
          + f"; target in use {task.target}")


def median(outs: list[Outcome], attr: str) -> float:
    return statistics.median(getattr(o, attr) if o.reached else math.inf for o in outs)


def report(results: dict[tuple[str, str], list[Outcome]], tasks: list[str], tools: list[str]) -> None:
    print(f"\n{'task':7} {'tool':26} {'wall to target':>14} {'CPU to target':>14} {'trials':>6} {'reached':>8} "
          f"{'wall vs sweeplab':>16} {'CPU vs sweeplab':>15}")
    for task in tasks:
        ours = results.get((task, "sweeplab"))
        for tool in tools:
            outs = results[(task, tool)]
            wall, cpu = median(outs, "wall"), median(outs, "cpu")
            trials = statistics.median(o.trials for o in outs)
            ratio_w = ratio_c = ""
            if ours is not None and tool != "sweeplab":
                ratio_w = _ratio(wall, median(ours, "wall"))
                ratio_c = _ratio(cpu, median(ours, "cpu"))
            k = sum(o.reached for o in outs)
            print(f"{task:7} {LABELS[tool]:26} {_secs(wall):>14} {_secs(cpu):>14} {trials:6.0f} {k:>4}/{len(outs):<3} "
                  f"{ratio_w:>16} {ratio_c:>15}")
        for tool in tools:
            runs = " ".join(f"{'' if o.reached else '>'}{o.wall:.1f}/{o.cpu:.1f}" for o in results[(task, tool)])
            print(f"        {LABELS[tool]:26} per seed wall/CPU s: {runs}")
        for tool in tools:
            outs = results[(task, tool)]
            idle = [o.idle for o in outs if not math.isnan(o.idle)]
            print(f"        {LABELS[tool]:26} first trial started at {statistics.median(o.first for o in outs):.2f} s; "
                  f"a slot idle between trials {statistics.median(idle) * 1e3 if idle else math.nan:.0f} ms "
                  "(medians)")


def _secs(v: float) -> str:
    return "not reached" if math.isinf(v) else f"{v:.1f} s"


def _ratio(peer: float, ours: float) -> str:
    if math.isinf(ours):
        return "-" if math.isinf(peer) else "sweeplab n.r."
    if math.isinf(peer):
        return "peer n.r."
    return f"{peer / ours:.2f}x"


# ----------------------------------------------------------------------------- warm-start A/B
# What starting workers warm (forked from a process that imported once, as a fork server would) saves in
# compute, against today's start (each worker a fresh Python process): 2 workers run one trial each of the
# task's `train` with a fixed mid-range configuration, and the CPU of every process involved (the fork
# server's own imports included) is summed from the reaped children's rusage.
WARM_PARAMS = {
    "xgb": {"max_depth": 4, "learning_rate": 0.1, "n_estimators": 150, "reg_lambda": 1.0, "subsample": 0.8},
    "digits": {"lr": 0.1, "momentum": 0.9, "batch_size": 64, "model.hidden": 64},
}
WARM_MODES = ("cold", "warm: module", "warm: module + its imports")


def _warm_trial(task: Task) -> None:
    config = full_config(task, WARM_PARAMS[task.name])
    run = PeerRun(Recorder(os.devnull, 0), task.metric, seed=0, report=_ignore, prune=lambda: False)
    load_example(task).train(namespace(config), run)


def _warm_worker(task_name: str, learned: str) -> None:
    """A cold worker: what a worker imports, the trial's module, one trial; it writes the top-level modules
    the trial imported to `learned` (what a fork server could import for the next workers)."""
    import sweeplab.backends.worker  # noqa: F401  (what `python -m sweeplab.backends.worker` imports)

    task = TASKS[task_name]
    load_example(task)
    before = {m.partition(".")[0] for m in sys.modules}
    _warm_trial(task)
    after = {m.partition(".")[0] for m in sys.modules}
    Path(learned).write_text("\n".join(sorted(n for n in after - before if not n.startswith("_"))))


def _warm_zygote(task_name: str, learned: str) -> None:
    """A fork server: imports once (the worker machinery, the trial's module, and the modules in `learned`
    unless it is '-'), refuses to fork with threads running or CUDA initialised, forks 2 workers."""
    import threading

    import sweeplab.backends.worker  # noqa: F401

    task = TASKS[task_name]
    load_example(task)
    if learned != "-":
        for name in Path(learned).read_text().split():
            try:
                importlib.import_module(name)
            except Exception:
                pass
    torch = sys.modules.get("torch")
    cuda = bool(torch is not None and torch.cuda.is_initialized())
    if threading.active_count() > 1 or cuda:
        raise SystemExit(f"unsafe to fork: {threading.active_count()} Python threads, CUDA initialised {cuda}")
    native = sorted(Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in os.listdir("/proc/self/task"))
    if len(native) > 1:   # threads a C library started (threading.active_count() does not see them)
        print(f"    note: forking with {len(native)} OS threads: {', '.join(native)}", file=sys.stderr)
    pids = []
    for _ in range(WORKERS):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _warm_trial(task)
            except BaseException:
                code = 1
            os._exit(code)
        pids.append(pid)
    codes = [os.waitpid(p, 0)[1] for p in pids]
    if any(codes):
        raise SystemExit(f"a forked worker failed: {codes}")


def warm_start_ab(tasks: list[str], reps: int) -> None:
    import resource

    def children_cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    me = [sys.executable, __file__]
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):   # as the local backend sets
        os.environ.setdefault(var, "1")                                           # them for 1-CPU slots
    print(f"warm-start A/B: {WORKERS} workers, one trial each, CPU of every process (fork server included); "
          f"{reps} rounds, modes interleaved")
    for name in tasks:
        rows: dict[str, list[tuple[float, float]]] = {m: [] for m in WARM_MODES}
        with tempfile.TemporaryDirectory() as d:
            learned = [str(Path(d) / f"learned{i}") for i in range(WORKERS)]
            for _ in range(reps):
                for mode in WARM_MODES:
                    c0, t0 = children_cpu(), time.perf_counter()
                    if mode == "cold":
                        procs = [subprocess.Popen(me + ["--_warm-worker", name, learned[i]]) for i in range(WORKERS)]
                        if any(p.wait() for p in procs):
                            raise SystemExit("a cold worker failed")
                    else:
                        arg = learned[0] if mode.endswith("imports") else "-"
                        subprocess.run(me + ["--_warm-zygote", name, arg], check=True)
                    rows[mode].append((time.perf_counter() - t0, children_cpu() - c0))
            imported = Path(learned[0]).read_text().split()
        print(f"{name}: the trial imports {len(imported)} top-level modules ({', '.join(imported[:8])}"
              f"{', ...' if len(imported) > 8 else ''})")
        cold_cpu = statistics.median(c for _, c in rows["cold"])
        for mode in WARM_MODES:
            wall = statistics.median(w for w, _ in rows[mode])
            cpu = statistics.median(c for _, c in rows[mode])
            print(f"  {mode:28} wall {wall:5.2f} s   CPU {cpu:5.2f} s   CPU vs cold {cpu / cold_cpu:.2f}x")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--_run":
        tool, task, seed, trials, seconds, log = sys.argv[2:8]
        TOOLS[tool](TASKS[task], int(seed), Caps(int(trials), float(seconds)), log)
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--_optuna-worker":
        optuna_worker(*sys.argv[2:8])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--_warm-worker":
        _warm_worker(sys.argv[2], sys.argv[3])
        os._exit(0)   # as a sweeplab worker and a forked one end: without the interpreter's teardown
    if len(sys.argv) > 1 and sys.argv[1] == "--_driver-cost":
        driver_cost_run(*sys.argv[2:5])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--_warm-zygote":
        _warm_zygote(sys.argv[2], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2, help="seeds per task and tool (the reported run: 5)")
    ap.add_argument("--first-seed", type=int, default=0, metavar="S", help="seeds S, S+1, ... (to re-run some)")
    ap.add_argument("--full", action="store_true", help="the reported caps (default: quick ones)")
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--tools", nargs="+", default=list(TOOLS), choices=list(TOOLS))
    ap.add_argument("--method", help="the sweeplab arm's search method (default: the example's spec, tpe)")
    ap.add_argument("--calibrate", type=int, nargs="?", const=64, default=0, metavar="N",
                    help="print value quantiles of N random configurations per task and exit")
    ap.add_argument("--warm-start", type=int, nargs="?", const=5, default=0, metavar="ROUNDS",
                    help="A/B of starting workers warm (forked after importing once) against cold, and exit")
    ap.add_argument("--driver-cost", type=int, nargs="?", const=3, default=0, metavar="ROUNDS",
                    help="sweeplab's driver CPU per trial and per point, and slot idle, in steady state, and exit")
    ap.add_argument("--cost-trials", type=int, default=60, help="trials per --driver-cost sweep")
    ap.add_argument("--against", metavar="DIR", help="with --driver-cost: also measure DIR/src's sweeplab")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="compile sweeplab, this file and the examples from source on every process start")
    args = ap.parse_args()
    if args.method:
        os.environ[METHOD_ENV] = args.method
    caches = not args.no_bytecode and bytecode_caches()
    if args.driver_cost:
        driver_cost(args.tasks, args.driver_cost, args.cost_trials, args.against)
        return 0
    if args.warm_start:
        warm_start_ab(args.tasks, args.warm_start)
        return 0
    if args.calibrate:
        for name in args.tasks:
            calibrate(TASKS[name], args.calibrate)
        return 0

    caps = {"xgb": Caps(100, 90.0), "digits": Caps(60, 120.0)} if args.full else \
        {"xgb": Caps(100, 60.0), "digits": Caps(40, 60.0)}
    ray_started = False
    if "ray-tune" in args.tools:
        import ray

        t = time.perf_counter()
        ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False, configure_logging=False)
        ray_started = True
        print(f"local Ray cluster started in {time.perf_counter() - t:.1f}s (not counted)")
    results: dict[tuple[str, str], list[Outcome]] = {}
    try:
        for name in args.tasks:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for tool in args.tools:             # interleaved: each seed runs every tool in turn
                    o = measure(tool, TASKS[name], seed, caps[name])
                    results.setdefault((name, tool), []).append(o)
                    print(f"{name} seed {seed} {LABELS[tool]:26} {'reached' if o.reached else 'NOT reached'} "
                          f"wall {o.wall:.1f}s CPU {o.cpu:.1f}s trials {o.trials} best {o.best:.4g} "
                          f"first trial at {o.first:.2f}s slot idle {o.idle * 1e3:.0f} ms/trial", flush=True)
    finally:
        if ray_started:
            import ray

            ray.shutdown()
    print(f"\n{WORKERS} trials at a time; targets: " + ", ".join(f"{n} {TASKS[n].metric} <= {TASKS[n].target}"
                                                               for n in args.tasks)
          + "; caps: " + ", ".join(f"{n} {caps[n].trials} trials / {caps[n].seconds:.0f}s" for n in args.tasks))
    report(results, args.tasks, args.tools)
    print("bytecode: " + ("cached, compiled before the first run" if caches else "as found (--no-bytecode)"))
    return 0


def bytecode_caches() -> bool:
    """Write the bytecode of sweeplab, this file and the examples beside them (`__pycache__`, as an installed
    package and a user's second run have it; the peers' packages have theirs from their install). True."""
    import sweeplab

    dirs = [str(Path(sweeplab.__file__).parent), str(Path(__file__).parent),
            *(str(task.dir) for task in TASKS.values())]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], check=True, stdout=subprocess.DEVNULL)
    return True


if __name__ == "__main__":
    sys.exit(main())
