"""Interrupt a real `sweeplab sweep` three times (Ctrl-C, kill -9, Ctrl-C) at seeded random moments and
resume it each time: no method may propose a configuration it already tried.

Model-based searchers used to be rebuilt with their random generators back at the start, so a resumed
TPE or GP sweep re-proposed the sweep's first configurations. What must hold after the rounds: every
trial completed once, no continuous value drawn twice, and grid / Sobol / random trial k is exactly the
k-th point of the method's sequence (no repeat, no gap).
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from sweeplab.search import GridSearcher, RandomSearcher, SobolSearcher
from sweeplab.space import parse_parameters
from sweeplab.testing.searchers import HAS_TORCH
from sweeplab.types import Goal

pytestmark = pytest.mark.slow

BUDGET = 14
SEED = 11
CONTINUOUS = {"x": {"min": 0.0, "max": 1.0},
              "lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1.0},
              "act": {"values": ["relu", "tanh"]}}
BOUNDS = {"x": (0.0, 1.0), "lr": (1e-4, 1.0)}
GRID = {"a": {"values": [1, 2, 3]}, "b": {"values": ["u", "v"]}, "c": {"values": [0.1, 0.2, 0.3]}}  # 18 points
TRIAL = '''
import time


def trial(config, run):
    time.sleep(0.25)
    x = float(config.get("x", config.get("c", 0.0)))
    lr = float(config.get("lr", 0.01))
    return {"loss": (x - 0.3) ** 2 + abs(lr - 0.01)}
'''


def _spec(tmp: Path, method: str) -> Path:
    (tmp / "resume_trial.py").write_text(TRIAL)
    params = GRID if method == "grid" else CONTINUOUS
    lines = [f"function: {tmp / 'resume_trial.py'}:trial", f"method: {method}", f"seed: {SEED}",
             "metric: {name: loss, goal: minimize}", "trial: {grace: 2, retries: 0}",
             f"budget: {{trials: {BUDGET}}}", "parameters:"]
    lines += [f"  {name}: {json.dumps(dist)}" for name, dist in params.items()]
    path = tmp / f"{method}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _trials(db: Path) -> list[sqlite3.Row]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute("SELECT number, state, params FROM trials ORDER BY number").fetchall()
    except sqlite3.OperationalError:   # not created yet, or busy: ask again
        return []
    finally:
        conn.close()


def _driving(db: Path, pid: int) -> bool:
    """Whether the process `pid` has recorded itself as the sweep's driver (it runs the sweep by now)."""
    if not db.exists():
        return False
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT driver FROM sweeps").fetchall()
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()
    return any(r[0] and json.loads(r[0]).get("pid") == pid for r in rows)


def _interrupt(cli: Any, proc: Any, db: Path, at: int, delay: float, sig: int) -> None:
    """Once `at` trials exist (plus `delay` s) and `proc` drives the sweep (a resume's first trials may all
    exist already: a SIGINT then reached it while it imported, before any handler), send `sig` to the
    driver; it must end as that signal says."""
    deadline = time.monotonic() + 120
    while len(_trials(db)) < at or not _driving(db, proc.pid):
        assert proc.poll() is None, f"the driver ended before trial {at}:\n{proc.communicate()}"
        assert time.monotonic() < deadline, f"trial {at} was never created"
        time.sleep(0.02)
    time.sleep(delay)
    assert proc.poll() is None, "the sweep ended before the interruption; lengthen its trials"
    os.kill(proc.pid, sig)
    out, err = proc.communicate(timeout=120)
    expected = 130 if sig == signal.SIGINT else -signal.SIGKILL
    assert proc.returncode == expected, (proc.returncode, out, err)


def _sequence(method: str) -> list[dict[str, Any]]:
    """What an uninterrupted grid / random / Sobol sweep with this seed tries, in order."""
    space = parse_parameters(GRID if method == "grid" else CONTINUOUS)
    cls = {"grid": GridSearcher, "random": RandomSearcher, "sobol": SobolSearcher}[method]
    searcher = cls(space, Goal.MINIMIZE, SEED)
    return [searcher.point(k) for k in range(BUDGET)]


@pytest.mark.parametrize("method", ["random", "grid", "sobol", "tpe",
                                    pytest.param("bayes", marks=pytest.mark.skipif(not HAS_TORCH,
                                                                                    reason="torch is not installed"))])
def test_three_interruptions_and_resumes_never_repeat_a_configuration(cli, method):
    rng = random.Random(f"resume-{method}")
    db = cli.store / "store.db"
    spec = _spec(cli.tmp, method)
    proc = cli.start("sweep", str(spec), "--name", "r", "--workers", "2", "-q")
    try:
        for round_, sig in enumerate((signal.SIGINT, signal.SIGKILL, signal.SIGINT)):
            if round_:
                proc = cli.start("resume", "r", "-q")
            # round r interrupts once trial 3r+1..3r+3 exists: early, middle and late in the budget
            _interrupt(cli, proc, db, rng.randint(3 * round_ + 1, 3 * round_ + 3), rng.uniform(0.0, 0.25), sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    cp = cli("resume", "r", "-q", timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr

    trials = _trials(db)
    assert [t["number"] for t in trials] == list(range(BUDGET))
    assert all(t["state"] == "completed" for t in trials), [(t["number"], t["state"]) for t in trials]
    params = [json.loads(t["params"]) for t in trials]
    configs = [json.dumps(p, sort_keys=True) for p in params]
    assert len(set(configs)) == len(configs), configs
    if method in ("grid", "random", "sobol"):
        assert params == _sequence(method)               # exactly the sequence: no repeat, no gap
    if method == "grid":
        return
    for name, (lo, hi) in BOUNDS.items():
        values = [p[name] for p in params]
        if method == "bayes":   # a GP may put its acquisition optimum on a bound, uninterrupted too
            values = [v for v in values if not (math.isclose(v, lo) or math.isclose(v, hi))]
        assert len(set(values)) == len(values), (name, values)


FAILING = '''
def trial(config, run):
    x = float(config["x"])
    run.log({"loss": 10.0 + x}, step=0)
    if x > 0.5:
        raise RuntimeError("planted failure")
    return {"loss": x}
'''


def _impute_driver(tmp: Path, impute: str | None) -> Any:
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    (tmp / "failing.py").write_text(FAILING)
    metric: dict[str, Any] = {"name": "loss", "goal": "minimize"}
    if impute is not None:
        metric["impute"] = impute
    spec = parse_spec({"function": f"{tmp / 'failing.py'}:trial", "method": "tpe", "seed": 5, "metric": metric,
                       "budget": {"trials": 8}, "trial": {"retries": 0},
                       "parameters": {"x": {"min": 0.0, "max": 1.0}}}, file="<test>")
    store = Store.open(tmp / "store")
    return Driver(spec, store, LocalBackend(plan_slots(1, cpus=1, gpus=0, gpu_ids=[])), sweep_name="imp")


def _study_by_x(driver: Any) -> dict[float, Any]:
    study = driver.searcher.inner.study          # Prefetching -> TPESearcher -> Optuna study
    return {t.params["x"]: t for t in study.get_trials(deepcopy=False)}


@pytest.mark.parametrize(("impute", "expected"), [("worst", "max"), ("latest", "report"), (None, None)])
def test_metric_impute_reaches_the_searcher_live_and_after_resume(tmp_path, impute, expected):
    """The spec's metric.impute is what the driver's searcher tells Optuna for a failed trial: while the
    sweep runs, and in the study rebuilt by resume. Unset, a failed trial stays an Optuna failure."""
    driver = _impute_driver(tmp_path, impute)
    driver.create(spec_path=None)
    outcome = driver.run()
    driver.store.close()
    driver._lock_file.close()   # a driver holds its flock for its process's life; this test runs a second one
    assert outcome.counts["failed"] >= 1 and outcome.counts["completed"] >= 1, outcome
    resumed = _impute_driver(tmp_path, impute)
    resumed.resume()
    resumed.searcher.close()   # waits for the suggestion prefetched after the replay (a study trial in the making)
    try:
        for who in (driver, resumed):
            study = _study_by_x(who)
            done = {t.number: t for t in who.trials.values()}
            worst = max(t.value for t in done.values() if t.state.value == "completed")
            for t in done.values():
                if t.state.value != "failed":
                    assert study[t.params["x"]].value == t.value
                    continue
                got = study[t.params["x"]]
                if expected is None:
                    assert got.state.name == "FAIL" and got.value is None
                    continue
                assert got.state.name == "COMPLETE" and got.user_attrs["sweeplab_imputed"] == impute
                if expected == "report":
                    assert got.value == 10.0 + t.params["x"]
                elif who is resumed:              # replay: the worst of the whole history
                    assert got.value == worst
                else:                             # live: the worst completed when it failed
                    assert got.value <= worst
    finally:
        resumed.store.close()
