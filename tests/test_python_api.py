"""The notebook-friendly Python API: `sl.sweep` (blocking and background handles), `sl.load`, the handle's
reads (best, pareto, trials(), metrics(), status()), and how trial functions reach worker processes
(by name, or by value for notebook cells, closures and lambdas)."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import pytest

import sweeplab as sl
from sweeplab.notebook import Progress, target_of

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRIALS = FIXTURES / "trials.py"


def _spec(**extra):
    return {"method": "grid", "metric": {"name": "loss", "goal": "minimize"},
            "parameters": {"x": {"values": [1.0, 2.0]}, "steps": {"values": [2, 4]}}, **extra}


@pytest.fixture
def trials_module(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    import trials

    return trials


def test_sweep_blocking_with_a_function_object_and_the_handle_reads(tmp_path, trials_module):
    sweep = sl.sweep(_spec(), fn=trials_module.quick, store=tmp_path / "st", workers=2, name="api")
    assert sweep.done and sweep.outcome.exit_code == 0
    assert sweep.best["value"] == pytest.approx(0.25) and sweep.best["params"]["steps"] == 4
    assert sweep.pareto == [sweep.best]                           # one objective: the best trial
    frame = sweep.trials()
    assert list(frame.index) == [0, 1, 2, 3]
    assert set(frame["state"]) == {"completed"} and (frame["attempts"] == 1).all()
    assert {"params.x", "params.steps", "value", "duration", "metrics.loss"} <= set(frame.columns)
    assert (frame["duration"] >= 0).all()
    curves = sweep.metrics()
    assert len(curves[(curves.trial == 0) & (curves.key == "loss")]) == frame.loc[0, "params.steps"]
    status = sweep.status()
    assert status["state"] == "finished" and status["counts"] == {"completed": 4} and status["trials"] == 4
    loaded = sl.load("api", store=tmp_path / "st")               # the same sweep, from the store
    assert loaded.best == sweep.best and loaded.done and loaded.wait() is None
    assert loaded.trials().equals(frame)


def test_sweep_in_the_background_can_be_waited_for_and_stopped(tmp_path, trials_module):
    import signal

    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    sweep = sl.sweep({"method": "random", "metric": {"name": "loss", "goal": "minimize"},
                      "parameters": {"seconds": {"value": 60}}, "budget": {"trials": 4}},
                     fn=trials_module.sleeper, store=tmp_path / "st", workers=2, background=True)
    deadline = time.monotonic() + 60
    while sweep.status()["counts"].get("running", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sweep.done and sweep.wait(timeout=0.01) is None
    outcome = sweep.stop()
    assert outcome is not None and outcome.state.value == "stopped" and sweep.done
    assert set(sweep.status()["counts"]) <= {"interrupted", "completed"}     # resumable, as after Ctrl-C
    # the backend's start-up hold of SIGINT/SIGTERM was left as the process's handlers for good
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == handlers


def test_bad_input_raises_before_anything_is_written(tmp_path, trials_module):
    with pytest.raises(sl.SpecError, match="method: unknown method"):
        sl.sweep({"method": "gird", "parameters": {}}, fn=trials_module.quick, store=tmp_path / "st")
    with pytest.raises(sl.UserError, match="unknown backend"):
        sl.sweep(_spec(), fn=trials_module.quick, store=tmp_path / "st", backend="lcoal")
    offset = 1.0   # a closure, shipped by value: its pickle was written into the store before the checks
    def closure(config, run):
        return {"loss": config["x"] + offset}
    with pytest.raises(sl.UserError, match="CPUs but this machine has"):
        sl.sweep(_spec(), fn=closure, store=tmp_path / "st", workers=1000)
    with pytest.raises(sl.SpecError, match="early_terminate.eta"):
        sl.sweep({**_spec(), "early_terminate": {"type": "asha", "eta": 1}}, fn=closure, store=tmp_path / "st")
    async def coroutine(config, run):
        return {"loss": config["x"]}

    def generator(config, run):
        yield {"loss": config["x"]}

    # every trial failed ("metric 'loss' was never reported"): the worker got a coroutine or a generator back
    with pytest.raises(sl.UserError, match="'.*coroutine' is an async def.*define it with def"):
        sl.sweep(_spec(), fn=coroutine, store=tmp_path / "st")
    with pytest.raises(sl.UserError, match="'.*generator' is a generator function.*return the final metrics"):
        sl.sweep(_spec(), fn=generator, store=tmp_path / "st")
    for trials in (0, 2.5):   # 0 created a sweep that ran nothing; budget.trials: 0 is a SpecError
        with pytest.raises(sl.UserError, match=rf"trials: {trials!r} is not a positive integer"):
            sl.sweep(_spec(), fn=closure, store=tmp_path / "st", trials=trials)
    for workers in (0, 1.5, "2", True):   # 0 ran on the spec's count; 1.5 and "2" were bare TypeErrors
        with pytest.raises(sl.UserError, match=rf"workers: {workers!r} is not a positive integer"):
            sl.sweep(_spec(), fn=closure, store=tmp_path / "st", workers=workers)
        with pytest.raises(sl.UserError, match=rf"workers: {workers!r} is not a positive integer"):
            sl.run_sweep({**_spec(), "function": "trials:quick"}, store=tmp_path / "st", workers=workers)
    assert not (tmp_path / "st").exists()
    sl.sweep(_spec(), fn=trials_module.quick, store=tmp_path / "st", workers=1, trials=1)
    with pytest.raises(sl.UserError, match="no sweep named 'nope'"):
        sl.load("nope", store=tmp_path / "st")


def test_a_function_workers_cannot_import_by_name_is_shipped_by_value(tmp_path, monkeypatch):
    """A notebook cell's function (in a kernel's __main__, no __file__), a closure and a lambda run in real
    worker processes: written by value into the store's functions/ directory and loaded from there."""
    notebook = types.ModuleType("__main__")          # a kernel's __main__: no __file__
    monkeypatch.setitem(sys.modules, "__main__", notebook)
    exec("import math\n"
         "def train(config, run):\n"
         "    run.log({'loss': math.fabs(config['x'] - 1.5)}, step=0)\n"
         "    return {'loss': math.fabs(config['x'] - 1.5)}\n", notebook.__dict__)
    with pytest.raises(sl.UserError, match=r"'train' is defined in a notebook.*trials\.py.*from trials import train"):
        target_of(notebook.train)                                  # by name: impossible, as before
    sweep = sl.sweep(_spec(), fn=notebook.train, store=tmp_path / "st", workers=2, name="cell")
    assert sweep.outcome.exit_code == 0 and sweep.status()["counts"] == {"completed": 4}
    assert sweep.best["value"] == pytest.approx(0.5)
    shipped = list((tmp_path / "st" / "functions").glob("*.pkl"))
    assert len(shipped) == 1

    offset = 2.0                                                   # a closure over a local
    def nested(config, run):
        return {"loss": config["x"] + offset}
    assert sl.sweep(_spec(), fn=nested, store=tmp_path / "st", workers=1).best["value"] == pytest.approx(3.0)
    assert sl.sweep(_spec(), fn=lambda config: {"loss": -config["x"]}, store=tmp_path / "st",
                    workers=1).best["value"] == pytest.approx(-2.0)


def test_what_cannot_be_shipped_is_refused_with_the_fix_and_foreign_pickles_are_not_loaded(tmp_path):
    import pickle
    import threading

    from sweeplab.backends.targets import load_target

    lock = threading.Lock()
    def holds_a_lock(config, run):
        with lock:
            return {"loss": 0.0}
    with pytest.raises(sl.UserError, match=r"cannot be sent to worker processes.*from trials import holds_a_lock"):
        sl.sweep(_spec(), fn=holds_a_lock, store=tmp_path / "st")
    assert not (tmp_path / "st").exists()                          # nothing written for bad input
    foreign = tmp_path / "functions" / "evil.pkl"                  # a pickle sweeplab did not write
    foreign.parent.mkdir()
    foreign.write_bytes(pickle.dumps(print))
    with pytest.raises(ValueError, match="not a function sweeplab shipped by value"):
        load_target(f"{foreign}:print")


def test_a_script_or_a_module_off_the_working_directory_is_named_by_its_file(trials_module):
    assert target_of(trials_module.quick) == f"{TRIALS}:quick"
    assert target_of("pkg.mod:train") == "pkg.mod:train"
    assert target_of(sl.run_sweep) == "sweeplab.api:run_sweep"       # a package module: by name


def test_progress_renders_one_updating_line_in_a_notebook(monkeypatch):
    shown = []

    class Handle:
        def update(self, data, raw):
            shown.append(("update", data["text/plain"]))

    def display(data, raw, display_id):
        shown.append(("display", data["text/plain"]))
        return Handle()

    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: types.SimpleNamespace(kernel=object())
    ipython.display = types.ModuleType("IPython.display")
    ipython.display.display = display
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", ipython.display)
    from sweeplab.driver import Progress as P

    progress = Progress(every=0.0)
    assert progress.enabled
    for done in (0, 2):
        progress.update(P(sweep="s", counts={"completed": done, "running": 2}, running=2, created=done + 2,
                          budget_trials=4, best_value=0.5 if done else None, best_trial=1 if done else None,
                          best_params=None, elapsed=65.0, eta=None))
    assert shown == [("display", "s: 0/4 done (2 running) | 1m05s"),
                     ("update", "s: 2/4 done (2 running) | best 0.5 (trial 1) | 1m05s")]


def test_pareto_is_the_stores_feasible_front_for_several_objectives(tmp_path):
    """`.pareto` is what `sweeplab best --json` prints: the feasible non-dominated trials (real sweep)."""
    from sweeplab.pareto import nondominated_ranks
    from sweeplab.store import Store, queries
    from sweeplab.types import Goal

    spec = {"function": f"{FIXTURES / 'multiobjective.py'}:trial", "method": "random", "seed": 1,
            "metric": [{"name": "acc", "goal": "maximize"}, {"name": "latency_ms", "goal": "minimize"}],
            "constraints": [{"metric": "memory_gb", "max": 16}], "budget": {"trials": 10},
            "parameters": {"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}}}
    sweep = sl.sweep(spec, store=tmp_path / "st", workers=2, name="mo")
    assert sweep.outcome.exit_code == 0
    st = Store.open(tmp_path / "st", readonly=True)
    try:
        expected = queries.pareto_front(st, "mo")
        rows = queries.sweep_status(st, "mo")["trials"]
    finally:
        st.close()
    done = [t for t in rows if t["state"] == "completed" and t["feasible"]]
    ranks = nondominated_ranks([(t["values"]["acc"], t["values"]["latency_ms"]) for t in done],
                               (Goal.MAXIMIZE, Goal.MINIMIZE))
    assert sorted(p["trial"] for p in sweep.pareto) == sorted(t["number"] for t, r in zip(done, ranks) if r == 1)
    assert sweep.pareto == expected and expected
    assert any(not t["feasible"] for t in rows if t["state"] == "completed")   # the fixture has infeasible ones
    assert not {p["trial"] for p in sweep.pareto} & {t["number"] for t in rows if not t["feasible"]}


@pytest.mark.parametrize("how", ["finished", "stopped"])
def test_a_sweep_that_ended_leaves_its_lock_for_a_resume_from_another_process(tmp_path, trials_module, how):
    """A notebook kernel outlives its sweeps: once `sl.sweep` returns (or `handle.stop()` has stopped it), the
    sweep's one-driver lock is released, so `sweeplab resume NAME` in a terminal is not told that the kernel
    is "already running" it. (flock is per open file: a second open in this process is refused while held.)"""
    import fcntl

    if how == "finished":
        sweep = sl.sweep(_spec(), fn=trials_module.quick, store=tmp_path / "st", workers=1, trials=1, name="s")
    else:
        sweep = sl.sweep({"method": "random", "parameters": {"seconds": {"value": 60}}, "budget": {"trials": 1}},
                         fn=trials_module.sleeper, store=tmp_path / "st", workers=1, background=True, name="s")
        while sweep.status()["counts"].get("running", 0) < 1:
            time.sleep(0.05)
        sweep.stop()
    with open(tmp_path / "st" / "locks" / "s.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)   # BlockingIOError while the kernel still holds it


def test_the_progress_line_ends_with_no_trial_running_after_a_stop(tmp_path, trials_module, capfd):
    """The live line is updated once more when a sweep is stopped (Ctrl-C, `handle.stop()`): it does not stay
    at "(2 running)" under the cell after the trials were stopped."""
    sweep = sl.sweep({"method": "random", "parameters": {"seconds": {"value": 60}}, "budget": {"trials": 2}},
                     fn=trials_module.sleeper, store=tmp_path / "st", workers=2, background=True, name="p",
                     progress=True)
    while sweep.status()["counts"].get("running", 0) < 2:
        time.sleep(0.05)
    sweep.stop()
    lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("p: ")]
    assert lines and lines[-1].startswith("p: 0/2 done (0 running)"), lines


def test_the_progress_line_outside_a_notebook_prints_only_changes(capsys):
    """`progress=True` in a script or terminal: a new line when the counts or the best change, not one per
    half second with only the clock moving (an hour's sweep printed 7200 lines)."""
    from sweeplab.driver import Progress as P

    progress = Progress(True, every=0.0)
    for done, elapsed in ((0, 1.0), (0, 2.0), (0, 3.0), (1, 4.0), (1, 5.0)):
        progress.update(P(sweep="s", counts={"completed": done, "running": 2}, running=2, created=done + 2,
                          budget_trials=4, best_value=0.5 if done else None, best_trial=1 if done else None,
                          best_params=None, elapsed=elapsed, eta=None))
    assert capsys.readouterr().err.splitlines() == ["s: 0/4 done (2 running) | 0m01s",
                                                    "s: 1/4 done (2 running) | best 0.5 (trial 1) | 0m04s"]


def test_a_sweep_polled_before_its_first_trial_reads_as_empty_tables_with_their_columns(tmp_path):
    """Right after `sl.sweep(..., background=True)` no trial exists yet: `trials()` and `metrics()` are empty
    frames with their usual columns, so `sweep.trials()[["state", "value"]]` in a polling loop works."""
    from sweeplab.store import Store

    st = Store.open(tmp_path / "st")
    try:
        st.create_sweep(name="new", method="random", metric="loss", goal="minimize", spec={}, spec_path=None,
                        seed=0)
    finally:
        st.close()
    sweep = sl.load("new", store=tmp_path / "st")
    frame = sweep.trials()
    assert frame.empty and frame.index.name == "number"
    assert {"state", "value", "attempts", "duration", "reason"} <= set(frame.columns)
    assert frame[["state", "value"]].empty
    assert list(sweep.metrics().columns) == ["trial", "key", "step", "value"]


GUARDED = '''import sweeplab as sl

if __name__ == "__main__":
    def train(config, run):
        return {"loss": config["x"] * 2}

    sweep = sl.sweep({"method": "grid", "metric": {"name": "loss", "goal": "minimize"},
                      "parameters": {"x": {"values": [1.0, 2.0]}}}, fn=train, store="st", workers=1)
    print(sweep.status()["counts"], sweep.best["value"])
'''


@pytest.mark.parametrize("how", ["script", "module"])
def test_a_scripts_function_defined_under_its_main_guard_is_shipped_by_value(tmp_path, how):
    """`def train` inside `if __name__ == "__main__":` with the sweep: workers import the script without
    running that block, so loading `train` by the script's path (or by name, `python -m`) failed every trial
    ("has no function 'train'"); it travels by value instead, as a notebook cell's function does."""
    import os
    import subprocess

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "tune.py").write_text(GUARDED)
    args = ["pkg/tune.py"] if how == "script" else ["-m", "pkg.tune"]
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip() == "{'completed': 2} 2.0", proc.stdout + proc.stderr


INTERRUPTED_WAIT = '''import os, signal, threading, time
import sweeplab as sl

def train(config, run):
    step = 0
    while not run.should_stop:   # runs until stopped: no trial ends before the Ctrl-C, however loaded
        time.sleep(0.05)
        run.log({"loss": config["x"]}, step=step)
        step += 1
    return {"loss": config["x"]}

if __name__ == "__main__":
    sweep = sl.sweep({"method": "grid", "metric": {"name": "loss", "goal": "minimize"},
                      "parameters": {"x": {"values": [1.0, 2.0, 3.0]}}}, fn=train, store="st", workers=1,
                     background=True)
    deadline = time.monotonic() + 60   # a trial runs: the sweep is past its start-up (under load, seconds)
    while not sweep.status()["counts"].get("running") and time.monotonic() < deadline:
        time.sleep(0.05)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        sweep.wait()
    except KeyboardInterrupt:
        print("interrupted", sweep.done, sweep.wait(timeout=0.1))
    outcome = sweep.stop()
    print("stopped", sweep.done, outcome.state.value, sweep.status()["counts"])
'''


def test_interrupting_wait_leaves_a_background_sweep_running_and_stoppable(tmp_path):
    """Ctrl-C (Jupyter's "interrupt kernel") while `wait()` blocks on a background sweep interrupts the wait;
    the handle still knows the sweep runs, so `stop()` stops it. `wait()` joined the sweep's thread, and an
    interrupted `Thread.join` marks a running thread ended (CPython's bpo-45274 handling): `done` turned True,
    `wait()` returned None at once and `stop()` did nothing while the sweep ran on."""
    import os
    import signal
    import subprocess

    (tmp_path / "bg.py").write_text(INTERRUPTED_WAIT)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "bg.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120,   # Ctrl-C as a terminal sends it: a pytest-xdist worker ignores SIGINT,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # which its child inherits
    lines = proc.stdout.splitlines()
    assert lines[0] == "interrupted False None", proc.stdout + proc.stderr
    assert lines[1].startswith("stopped True stopped {"), proc.stdout + proc.stderr
    assert "'completed': 3" not in lines[1]


def test_sweeps_started_at_once_in_threads_open_one_new_store(tmp_path):
    """Two `sl.sweep` calls started together in threads of a notebook, on a store not yet made: each writer
    checks the directory is writable with a probe file, and both used one name, so one removed the other's
    and its sweep was refused ("the store directory st is not writable: No such file or directory"). Then
    turning the new file to WAL mode answered "database is locked" at once (SQLite takes no busy wait for it)
    to all but one of them: `cannot open the store .../store.db: database is locked`."""
    import threading

    from sweeplab.store import Store

    errors: list[BaseException] = []
    for round_ in range(25):   # the race is narrow: a few rounds hit it on main
        gate = threading.Barrier(4)

        def open_it(root=tmp_path / f"st{round_}", gate=gate):
            gate.wait()
            try:
                Store.open(root).close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
