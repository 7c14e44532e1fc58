"""Workers forked from a fork server that imported the trial's libraries once (backends/forkserver.py).

The backend contract runs with forked workers too (tests/backends/test_local_backend.py); these are the
fork server's own promises, on real processes: which libraries it imports, that a worker has them before its
first trial and is the backend's to signal, that each worker's numpy draws its own numbers, that a fork
server that dies or started a thread costs no trial, and that nothing outlives a driver killed with -9.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from sweeplab.backends.events import EventKind
from sweeplab.backends.forkserver import ForkedProcess
from sweeplab.backends.local import LocalBackend, plan_slots
from sweeplab.backends.preload import trial_imports
from sweeplab.testing.backends import collect, make_task

pytestmark = pytest.mark.slow

PROBE = '''
import gc, os, sys, time

def probe(config, run):
    """What this worker had loaded before the trial, and a draw of numpy's global generator if it has one."""
    np = sys.modules.get("numpy")
    run.log({"had": int(config["module"] in sys.modules), "pid": os.getpid(), "ppid": os.getppid(),
             "draw": float(np.random.random()) if np is not None else -1.0, "frozen": gc.get_freeze_count()})
    time.sleep(config.get("sleep", 0))
    return {"done": 1}
'''


def _project(tmp: Path, **files: str) -> Path:
    for name, text in files.items():
        p = tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return tmp


def _metrics(events) -> dict:
    return {p[1]: p[2] for e in events if e.kind is EventKind.METRICS for p in e.data["points"]}


def _gone(pids, timeout: float = 60.0) -> list[int]:
    """The pids still alive (not zombies) after waiting up to `timeout` for them to end."""
    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if running(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _stop(pid: int) -> None:
    """SIGSTOP, and wait until the process is stopped (the signal takes effect when it is next scheduled)."""
    os.kill(pid, signal.SIGSTOP)
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        time.sleep(0.01)


def _forking_backend(tmp_path: Path) -> tuple[LocalBackend, str]:
    """A started backend of 2 slots whose workers are forked from a server that imported colorsys (a module
    that starts no thread and costs nothing), and the probe trial's function."""
    proj = _project(tmp_path, **{"probe.py": PROBE})
    b = LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[]), preload=("colorsys",))
    b.start()
    return b, f"{proj / 'probe.py'}:probe"


# ---------------------------------------------------------------------------------------- trial_imports
def test_trial_imports_reads_the_installed_libraries_the_trials_code_imports_without_running_it(tmp_path):
    proj = _project(tmp_path, **{
        "train.py": """
            import json, os                       # the standard library: left out
            import yaml                           # installed, at the top
            from typing import TYPE_CHECKING
            from helpers import lr                # the user's own module: read in turn
            from . import sibling                 # relative: the user's own
            import sweeplab                       # already in every worker
            if TYPE_CHECKING:
                import typer                      # for the type checker only
            raise SystemExit("never run")

            def train(config, run):
                import psutil                     # installed, inside the function
                import not_installed_anywhere     # missing: the trial's own import reports it
        """,
        "helpers.py": """
            def lr():
                from rich.console import Console  # installed, in a module train.py imports
        """,
    })
    assert set(trial_imports("train.py:train", [str(proj)])) == {"yaml", "psutil", "rich.console"}
    # a module target, found on the import path; a command or a function shipped by value has none
    assert set(trial_imports("helpers:lr", [str(proj)])) == {"rich.console"}
    assert trial_imports(None) == () and trial_imports("functions/abc.pkl:fn") == ()


# ---------------------------------------------------------------------------------------- the workers
def test_workers_are_forked_from_the_server_with_the_libraries_loaded_and_their_own_random_draws(tmp_path):
    proj = _project(tmp_path, **{"probe.py": PROBE})
    b = LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[]), preload=("numpy", "colorsys"))
    b.start()
    try:
        fn = f"{proj / 'probe.py'}:probe"
        b.submit(make_task(tmp_path, 1, fn, config={"module": "colorsys", "sleep": 0.5}))
        b.submit(make_task(tmp_path, 2, fn, config={"module": "colorsys", "sleep": 0.5}))
        server = b._server
        assert server is not None and server.status == "ready"
        assert all(isinstance(w.proc, ForkedProcess) for w in b._workers.values())
        ev = collect(b, [1, 2])
        m1, m2 = _metrics(ev[1]), _metrics(ev[2])
        assert m1["had"] == m2["had"] == 1                      # imported by the server, before the trial
        assert m1["ppid"] == m2["ppid"] == server.proc.pid      # forked by it ...
        assert {os.getpgid(int(m["pid"])) for m in (m1, m2)} == {int(m1["pid"]), int(m2["pid"])}  # ... own groups
        assert m1["draw"] != m2["draw"]                         # numpy reseeded in each worker, as a fresh one
        # what the server imported is out of the workers' garbage collections (they never walk it nor copy its
        # pages): numpy's tens of thousands of objects
        assert m1["frozen"] == m2["frozen"] > 10_000, (m1, m2)
        assert [e.kind for e in ev[1] + ev[2]].count(EventKind.NOTE) == 1
        note = next(e.data for e in ev[1] + ev[2] if e.kind is EventKind.NOTE)
        assert note["forked"] is True and note["preload"] == ["numpy", "colorsys"] and note["preload_cpu"] > 0
        workers = [int(m1["pid"]), int(m2["pid"])]
    finally:
        b.shutdown(grace=0.0)
    assert _gone([*workers, server.proc.pid]) == []


def test_a_cold_worker_imports_the_libraries_before_its_first_trial_too(tmp_path):
    """One slot (no fork server): the trial's seed then seeds torch/numpy however the trial imports them."""
    proj = _project(tmp_path, **{"probe.py": PROBE})
    fn = f"{proj / 'probe.py'}:probe"
    for preload, had in ((("colorsys",), 1), ((), 0)):
        b = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]), preload=preload)
        b.start()
        try:
            assert b._server is None
            b.submit(make_task(tmp_path, 1, fn, config={"module": "colorsys"}))
            assert _metrics(collect(b, [1])[1])["had"] == had
        finally:
            b.shutdown(grace=0.0)


def test_a_fork_server_killed_mid_trial_fails_its_workers_trials_and_the_next_trial_starts_cold(tmp_path):
    b, fn = _forking_backend(tmp_path)
    try:
        for i in (1, 2):
            b.submit(make_task(tmp_path, i, fn, config={"module": "colorsys", "sleep": 60}))
        server = b._server
        assert server is not None
        seen: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:   # both trials running
            for ev in b.poll(0.1):
                if ev.kind is EventKind.METRICS:
                    seen[ev.trial] = int(_metrics([ev])["pid"])
        os.kill(server.proc.pid, signal.SIGKILL)
        ended = collect(b, [1, 2], timeout=60)
        for i in (1, 2):
            last = ended[i][-1]
            assert last.kind is EventKind.FAILED and last.data["signal"] == signal.SIGKILL, last
        assert _gone(list(seen.values())) == []                 # no orphaned worker
        b.submit(make_task(tmp_path, 3, fn, config={"module": "colorsys"}))
        ev3 = collect(b, [3])[3]
        assert ev3[-1].kind is EventKind.FINISHED and _metrics(ev3)["had"] == 1   # a cold worker, preloaded
        assert not any(isinstance(w.proc, ForkedProcess) for w in b._workers.values())
    finally:
        b.shutdown(grace=0.0)


def test_a_library_that_starts_a_thread_at_import_is_not_forked_from(tmp_path):
    """Forking a process with another thread can leave a lock held in the child: the workers start cold,
    and the sweep's events say why."""
    proj = _project(tmp_path, **{
        "probe.py": PROBE,
        "threadlib.py": """
            import threading, time
            threading.Thread(target=time.sleep, args=(120,), daemon=True).start()
        """,
    })
    b = LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[]), preload=("threadlib",),
                     env={"PYTHONPATH": os.pathsep.join([str(proj), os.environ.get("PYTHONPATH", "")])})
    b.start()
    try:
        b.submit(make_task(tmp_path, 1, f"{proj / 'probe.py'}:probe", config={"module": "threadlib"}))
        ev = collect(b, [1])[1]
        assert ev[-1].kind is EventKind.FINISHED and _metrics(ev)["had"] == 1
        note = next(e.data for e in ev if e.kind is EventKind.NOTE)
        assert note["forked"] is False and "threads" in note["message"], note
        assert not any(isinstance(w.proc, ForkedProcess) for w in b._workers.values())
    finally:
        b.shutdown(grace=0.0)


# ---------------------------------------------------------------------------------------- a real sweep
SPEC = """
name: forked
function: train.py:train
method: random
seed: 0
workers: 2
metric: {name: loss, goal: minimize}
budget: {trials: 4}
parameters:
  x: {min: 0.0, max: 1.0}
"""
TRAIN = """
import time

def train(config, run):
    import yaml                       # an installed library, imported inside the function
    time.sleep(float(config.get("sleep", 0)))
    run.log({"loss": config["x"] ** 2})
"""


def test_a_sweep_forks_its_workers_and_says_so_in_its_events(tmp_path):
    proj = _project(tmp_path, **{"spec.yaml": SPEC, "train.py": TRAIN})
    done = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "spec.yaml", "--store", "st", "-q"],
                          cwd=proj, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    from sweeplab.store import Store
    from sweeplab.store.queries import events, sweep_summary

    st = Store.open(proj / "st", readonly=True)
    notes = [e for e in events(st, "forked") if e["kind"] == "workers"]
    summary = sweep_summary(st, "forked")
    assert len(notes) == 1 and "forked from one process that imported yaml" in notes[0]["message"], notes
    assert summary["sweep"]["counts"]["completed"] == 4, summary


def test_nothing_outlives_a_driver_killed_with_sigkill(tmp_path):
    proj = _project(tmp_path, **{"spec.yaml": SPEC, "train.py": TRAIN})
    driver = subprocess.Popen([sys.executable, "-m", "sweeplab", "sweep", "spec.yaml", "--store", "st", "-q",
                               "sleep=60"], cwd=proj, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        tree: list[psutil.Process] = []
        while time.monotonic() < deadline:   # the fork server and both workers up, trials running
            tree = psutil.Process(driver.pid).children(recursive=True)
            workers = [p for p in tree if p.ppid() != driver.pid]
            if len(workers) >= 2:
                break
            time.sleep(0.2)
        assert len(workers) >= 2, [(p.pid, p.cmdline()) for p in tree]
        driver.kill()
        driver.wait(timeout=60)
        assert _gone([p.pid for p in tree]) == []
    finally:
        if driver.poll() is None:
            driver.kill()


DRAWS = """
def train(config, run):
    import numpy as np                 # imported inside the function: the fork server imported it before
    run.log({"draw": float(np.random.random())})
    raise RuntimeError("fails after its draw")
"""


def test_repro_draws_what_the_forked_trial_drew_from_its_seed(tmp_path):
    """The workers imported numpy before the trial, so the trial's seed seeded it; repro imports it before
    seeding too, and replays the same draw."""
    proj = _project(tmp_path, **{"spec.yaml": SPEC.replace("trials: 4", "trials: 2") + "trial: {retries: 0}\n",
                                 "train.py": DRAWS})
    done = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "spec.yaml", "--store", "st", "-q"],
                          cwd=proj, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 or "failed" in done.stdout, done.stderr
    from sweeplab.store import Store

    st = Store.open(proj / "st", readonly=True)
    rows = st.conn.execute("SELECT t.number, m.value FROM metrics m JOIN trials t ON t.id = m.trial_id "
                         "WHERE m.key = 'draw' ORDER BY t.number").fetchall()
    assert len(rows) == 2 and rows[0][1] != rows[1][1], rows
    for number, drawn in rows:
        rp = subprocess.run([sys.executable, "-m", "sweeplab", "repro", f"forked/{number}", "--store", "st"],
                            cwd=proj, capture_output=True, text=True, timeout=120)
        assert f"draw = {drawn:.6g}" in rp.stdout, (drawn, rp.stdout, rp.stderr)


def test_trial_imports_leaves_out_what_only_the_scripts_main_or_an_unused_function_imports(tmp_path):
    proj = _project(tmp_path, **{"train.py": """
        import yaml

        def build():
            import psutil                          # used by train, through a helper
            return Model()

        class Model:
            def fit(self):
                import rich                        # a method of a class train uses

        def tune_with_other_tools():
            import optuna                          # nothing train uses imports it

        def train(config, run):
            return build()

        if __name__ == "__main__":
            import typer                           # the script's own command line
    """})
    assert set(trial_imports("train.py:train", [str(proj)])) == {"yaml", "psutil", "rich"}


@pytest.mark.parametrize("sets", ['os.environ["KERAS_BACKEND"] = "torch"', 'os.environ.setdefault("X", "1")',
                                  'os.environ.update(X="1")', 'os.putenv("X", "1")'])
@pytest.mark.parametrize("where", ["top", "train"])
def test_a_trial_that_sets_environment_variables_gets_no_preload(tmp_path, sets, where):
    """Libraries read their variables when imported (KERAS_BACKEND, HF_HOME, OMP_NUM_THREADS): importing them
    before the trial's code set them would ignore the setting."""
    top, inside = (sets, "pass") if where == "top" else ("", sets)
    proj = _project(tmp_path, **{"train.py": f"import os\n{top}\n\ndef train(config, run):\n    {inside}\n"
                                             "    import yaml\n"})
    assert trial_imports("train.py:train", [str(proj)]) == ()
    (proj / "train.py").write_text("import os\nprint(os.environ.get('X'))\n\ndef train(config, run):\n"
                                   "    import yaml\n")   # reading is fine
    assert trial_imports("train.py:train", [str(proj)]) == ("yaml",)


def test_a_stopped_fork_server_loses_no_worker_death_and_blocks_no_new_trial(tmp_path, monkeypatch):
    """SIGSTOP to the fork server: it can neither reap nor fork. A worker killed meanwhile still ends its
    trial as failed, a new trial starts in a cold worker, and the running one finishes."""
    import sweeplab.backends.forkserver as fs

    monkeypatch.setattr(fs, "FORK_TIMEOUT", 1.0)
    monkeypatch.setattr(fs, "UNREPORTED_AFTER", 0.5)
    proj = _project(tmp_path, **{"probe.py": PROBE})
    fn = f"{proj / 'probe.py'}:probe"
    b = LocalBackend(plan_slots(3, cpus=0, gpus=0, gpu_ids=[]), preload=("colorsys",))
    b.start()
    server = None
    try:
        b.submit(make_task(tmp_path, 1, fn, config={"module": "colorsys", "sleep": 60}))
        b.submit(make_task(tmp_path, 2, fn, config={"module": "colorsys", "sleep": 3}))
        server = b._server
        assert server is not None
        pids: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline:
            for ev in b.poll(0.1):
                if ev.kind is EventKind.METRICS:
                    pids[ev.trial] = int(_metrics([ev])["pid"])
        os.kill(server.proc.pid, signal.SIGSTOP)
        os.kill(pids[1], signal.SIGKILL)
        b.submit(make_task(tmp_path, 3, fn, config={"module": "colorsys"}))   # waits FORK_TIMEOUT, then cold
        ended = collect(b, [1, 2, 3], timeout=60)
        assert ended[1][-1].kind is EventKind.FAILED and ended[1][-1].data["signal"] == signal.SIGKILL
        assert ended[2][-1].kind is EventKind.FINISHED       # forked, ran to its end
        assert ended[3][-1].kind is EventKind.FINISHED and _metrics(ended[3])["had"] == 1   # cold, preloaded
    finally:
        if server is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(server.proc.pid, signal.SIGCONT)
        b.shutdown(grace=0.0)
    assert _gone([*pids.values(), server.proc.pid]) == []


@pytest.mark.parametrize("imports_for, timeout, expect", [(2.0, 60.0, "forked"), (2.0, 0.5, "cold")])
def test_slots_wait_for_the_fork_servers_imports_without_blocking_the_driver(tmp_path, monkeypatch, imports_for,
                                                                             timeout, expect):
    """While the fork server imports, no slot is free and `poll` returns (the driver goes on handling signals,
    stops and budgets); then the slots free up forked, or, past PRELOAD_TIMEOUT, cold."""
    import sweeplab.backends.local as local

    monkeypatch.setattr(local, "PRELOAD_TIMEOUT", timeout)
    proj = _project(tmp_path, **{"probe.py": PROBE, "slowlib.py": f"import time\ntime.sleep({imports_for})\n"})
    b = LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[]), preload=("slowlib",),
                     env={"PYTHONPATH": os.pathsep.join([str(proj), os.environ.get("PYTHONPATH", "")])})
    b.start()
    try:
        assert b.free_slots() == 0
        assert b.poll(0.2) == [] and b._server is not None and b._server.status == "starting"   # not waited for
        deadline = time.monotonic() + 60
        while b.free_slots() < 2 and time.monotonic() < deadline:
            b.poll(0.2)
        assert b.free_slots() == 2
        b.submit(make_task(tmp_path, 1, f"{proj / 'probe.py'}:probe", config={"module": "slowlib"}))
        ev = collect(b, [1], timeout=120)[1]
        assert ev[-1].kind is EventKind.FINISHED
        forked = all(isinstance(w.proc, ForkedProcess) for w in b._workers.values())
        assert forked is (expect == "forked")
        note = next(e.data for e in ev if e.kind is EventKind.NOTE)
        assert note["forked"] is (expect == "forked"), note
    finally:
        b.shutdown(grace=0.0)


SEEDED = """
def train(config, run):
    import numpy as np                 # inside the function: seeded only if the worker imported it before
    run.log({"draw": float(np.random.random())})
    return {"loss": 0.0}
"""


def test_cold_workers_with_the_fork_server_off_still_import_the_libraries_so_the_seed_seeds_them(tmp_path):
    """SWEEPLAB_FORK_SERVER=0 turns forking off, not the imports (`trial.preload: false` does): a trial that
    imports numpy inside `train` draws from its seed in a cold worker as in a forked one (and as repro does)."""
    proj = _project(tmp_path, **{"spec.yaml": SPEC.replace("trials: 4", "trials: 1").replace("workers: 2",
                                                                                             "workers: 1"),
                                 "train.py": SEEDED})
    done = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "spec.yaml", "--store", "st", "-q"],
                          cwd=proj, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SWEEPLAB_FORK_SERVER": "0"})
    assert done.returncode == 0, done.stderr
    from sweeplab.store import Store

    st = Store.open(proj / "st", readonly=True)
    seed, drawn = st.conn.execute("SELECT t.seed, m.value FROM metrics m JOIN trials t ON t.id = m.trial_id "
                                  "WHERE m.key = 'draw'").fetchone()
    import numpy as np

    assert drawn == np.random.RandomState(seed % 2**32).random_sample(), (seed, drawn)


def test_trial_imports_reads_only_regular_source_files_of_a_sane_size(tmp_path):
    """The scan runs in `sweeplab sweep` before the spec is checked (cli/_early.py): a `function:` naming a
    device or a pipe must not block it or fill memory (/dev/zero), and a huge generated module (data written
    as Python) is not parsed (parsing 30 MB takes minutes and gigabytes): its imports are left to the trial."""
    os.mkfifo(tmp_path / "pipe.py")
    big = "import yaml\n\ndef train(config, run):\n    pass\n\n" + "DATA = [\n" + "    [1, 2, 3],\n" * 300_000 + "]\n"
    (tmp_path / "big.py").write_text(big)
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from sweeplab.backends.preload import trial_imports
        for target in ("/dev/zero:train", "pipe.py:train", "big.py:train"):
            print(target, trial_imports(target, [{str(tmp_path)!r}]), flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.stdout.splitlines() == ["/dev/zero:train ()", "pipe.py:train ()", "big.py:train ()"], done


def test_a_fork_server_whose_driver_dies_while_it_imports_ends_at_once_and_quietly(tmp_path):
    """Killed with -9 during the imports, the driver leaves a fork server that must not import on (for as long
    as torch takes, or a hung import) and then print a traceback on the user's terminal: it ends at once, as
    cold workers do when their stdin closes."""
    proj = _project(tmp_path, **{"slowlib.py": "import time\ntime.sleep(60)\n"})
    driver = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, sys, time
        from sweeplab.backends.forkserver import ForkServer
        server = ForkServer(dict(os.environ), ["slowlib"])
        print(server.proc.pid, flush=True)
        time.sleep(60)
    """)], env={**os.environ, "PYTHONPATH": os.pathsep.join([str(proj), os.environ.get("PYTHONPATH", "")])},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None and driver.stderr is not None
        server = int(driver.stdout.readline())
        time.sleep(0.5)                    # importing slowlib
        driver.kill()
        driver.wait()
        assert _gone([server], timeout=60) == []
        assert "Traceback" not in driver.stderr.read()
    finally:
        if driver.poll() is None:
            driver.kill()


def test_a_forked_worker_gets_a_large_environment_and_what_the_imports_set_in_it_as_a_cold_one(tmp_path,
                                                                                               monkeypatch):
    """A cold worker gets any environment exec takes (a 100 KB variable: a certificate, a JSON config) and
    keeps what a library's import set in it (the worker imported it before the trial): so does a forked one,
    without waiting for a fork answer that never comes, and the sweep's note says how it really started."""
    import sweeplab.backends.forkserver as fs

    monkeypatch.setattr(fs, "FORK_TIMEOUT", 2.0)
    monkeypatch.setenv("BIG", "x" * 100_000)
    proj = _project(tmp_path, **{
        "envlib.py": "import os\nos.environ['ENVLIB'] = 'set at import'\n",
        "probe.py": """
            import os

            def probe(config, run):
                run.log({"big": len(os.environ.get("BIG", "")), "envlib": int("ENVLIB" in os.environ)})
        """})
    b = LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[]), preload=("envlib",),
                     env={"PYTHONPATH": os.pathsep.join([str(proj), os.environ.get("PYTHONPATH", "")])})
    b.start()
    try:
        b.submit(make_task(tmp_path, 1, f"{proj / 'probe.py'}:probe"))
        ev = collect(b, [1])[1]
        assert ev[-1].kind is EventKind.FINISHED, ev[-1]
        assert _metrics(ev) == {"big": 100_000, "envlib": 1}
        assert isinstance(b._workers[0].proc, ForkedProcess)
        note = next(e.data for e in ev if e.kind is EventKind.NOTE)
        assert note["forked"] is True, note
    finally:
        b.shutdown(grace=0.0)


def test_a_fork_server_stopped_while_it_imports_costs_no_wait_for_its_imports(tmp_path):
    """SIGSTOP during the imports: the slots do not wait PRELOAD_TIMEOUT (2 minutes) for a server that cannot
    go on; the workers start cold, and the note says why."""
    proj = _project(tmp_path, **{"probe.py": PROBE, "slowlib.py": "import time\ntime.sleep(1)\n"})
    b = LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[]), preload=("slowlib",),
                     env={"PYTHONPATH": os.pathsep.join([str(proj), os.environ.get("PYTHONPATH", "")])})
    b.start()
    server = b._server
    assert server is not None
    try:
        os.kill(server.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 60
        while b.free_slots() < 2 and time.monotonic() < deadline:
            b.poll(0.1)
        assert b.free_slots() == 2, server.status
        b.submit(make_task(tmp_path, 1, f"{proj / 'probe.py'}:probe", config={"module": "slowlib"}))
        ev = collect(b, [1], timeout=60)[1]
        assert ev[-1].kind is EventKind.FINISHED and _metrics(ev)["had"] == 1
        note = next(e.data for e in ev if e.kind is EventKind.NOTE)
        assert note["forked"] is False and "stopped" in note["message"], note
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server.proc.pid, signal.SIGCONT)
        b.shutdown(grace=0.0)
    assert _gone([server.proc.pid]) == []


def test_trial_imports_follows_relative_imports_inside_the_users_package(tmp_path):
    """`from .model import Net` inside `train` (a package laid out as most projects are): the libraries of the
    module it names are imported before the trial too, so the trial's seed seeds them (torch's weights)."""
    proj = _project(tmp_path, **{
        "pkg/__init__.py": "",
        "pkg/train.py": """
            def train(config, run):
                from .model import make           # a sibling module, inside the function
                from . import data                # a sibling named by `from . import`
                from .sub.deep import f           # a module of a subpackage
        """,
        "pkg/model.py": "import yaml\n",
        "pkg/data.py": "import psutil\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/deep.py": "from ..model import make\nimport rich\n",
    })
    assert set(trial_imports("pkg.train:train", [str(proj)])) == {"yaml", "psutil", "rich"}
    assert set(trial_imports("pkg/train.py:train", [str(proj)])) == {"yaml", "psutil", "rich"}


def test_forked_workers_have_what_torch_imports_at_its_first_optimizer(tmp_path):
    """torch builds its first optimizer through torch._dynamo (~800 modules, ~1 CPU-s, imported then): the fork
    server imports it with torch, so no forked worker's first trial pays it (examples/torch_digits: a first
    trial of 1.4 CPU-s against 0.2 for the next), also when torch comes through another library (Lightning,
    Transformers: here a module of the user's that imports it)."""
    pytest.importorskip("torch")
    proj = _project(tmp_path, **{"probe.py": PROBE, "mylib.py": "import torch\n"})
    ev, note = _probe_once(tmp_path, proj, "mylib", "torch._dynamo")
    assert ev[-1].kind is EventKind.FINISHED and _metrics(ev)["had"] == 1
    assert note["forked"] is True, note


def _probe_once(tmp_path, proj, preload: str, module: str):
    """One probe trial on 2 slots whose workers preload `preload` (a module of `proj`): its events (whether
    `module` was loaded before it) and the backend's note on how the workers started."""
    b = LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[]), preload=(preload,),
                     env={"PYTHONPATH": os.pathsep.join([str(proj), os.environ.get("PYTHONPATH", "")])})
    b.start()
    try:
        deadline = time.monotonic() + 60
        while b.free_slots() < 2 and time.monotonic() < deadline:
            b.poll(0.1)
        b.submit(make_task(tmp_path, 1, f"{proj / 'probe.py'}:probe", config={"module": module}))
        ev = collect(b, [1])[1]
        return ev, next(e.data for e in ev if e.kind is EventKind.NOTE)
    finally:
        b.shutdown(grace=0.0)


def test_a_fork_server_that_crashes_while_importing_says_how_in_the_sweeps_note(tmp_path):
    """A library that crashes the interpreter when the fork server imports it: the workers start cold (the
    trial runs) and the note says how the server ended, not only that it is gone."""
    proj = _project(tmp_path, **{"probe.py": PROBE, "crashlib.py": """
        import os, signal, sys
        if sys.argv[0].endswith("forkserver.py"):   # only in the fork server: cold workers import it fine
            os.kill(os.getpid(), signal.SIGSEGV)
    """})
    ev, note = _probe_once(tmp_path, proj, "crashlib", "crashlib")
    assert ev[-1].kind is EventKind.FINISHED and _metrics(ev)["had"] == 1
    assert note["forked"] is False and "SIGSEGV" in note["message"], note


def test_a_sweep_that_ends_while_its_fork_server_imports_ends_it_without_waiting_for_the_imports(tmp_path):
    """Ctrl-C, `sweeplab stop` or budget.time during the imports: the backend's shutdown ends the server
    then and there (it has no worker to wait for), instead of waiting for imports no trial will use."""
    proj = _project(tmp_path, **{"slowlib.py": f"""
        import time
        time.sleep(3)
        open({str(tmp_path / 'imported')!r}, "w").close()
    """})
    b = LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[]), preload=("slowlib",),
                     env={"PYTHONPATH": os.pathsep.join([str(proj), os.environ.get("PYTHONPATH", "")])})
    b.start()
    server = b._server
    assert server is not None and b.free_slots() == 0
    b.shutdown(grace=0.0)
    assert server.proc.returncode == -signal.SIGKILL and not (tmp_path / "imported").exists()


def test_sigterm_to_the_fork_server_preempts_its_workers_trials_instead_of_failing_them(tmp_path):
    """`kill PID` of the fork server (or a memory daemon's SIGTERM to the largest process): its workers get
    the SIGTERM (checkpoint, PREEMPTED: requeued, no retry spent), as they would if each were sent it; the
    server forks no more and ends after them, and the next trial starts cold."""
    b, fn = _forking_backend(tmp_path)
    try:
        for i in (1, 2):
            b.submit(make_task(tmp_path, i, fn, config={"module": "colorsys", "sleep": 60}, grace=0.2))
        server = b._server
        assert server is not None
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:   # both trials running
            seen.update(ev.trial for ev in b.poll(0.1) if ev.kind is EventKind.METRICS)
        os.kill(server.proc.pid, signal.SIGTERM)
        ended = collect(b, [1, 2], timeout=60)
        assert [ended[i][-1].kind for i in (1, 2)] == [EventKind.PREEMPTED] * 2, ended
        assert _gone([server.proc.pid]) == []
        b.submit(make_task(tmp_path, 3, fn, config={"module": "colorsys"}))
        ev3 = collect(b, [3])[3]
        assert ev3[-1].kind is EventKind.FINISHED and _metrics(ev3)["had"] == 1
        assert not any(isinstance(w.proc, ForkedProcess) for w in b._workers.values())
    finally:
        b.shutdown(grace=0.0)


def test_a_stopped_fork_server_costs_a_sweeps_end_no_wait(tmp_path, monkeypatch):
    """The server stopped (SIGSTOP) cannot report its workers' exits: at the sweep's end the workers, told to
    exit, are seen dead without waiting for a report that cannot come, and the server is ended."""
    import sweeplab.backends.forkserver as fs

    monkeypatch.setattr(fs, "UNREPORTED_AFTER", 600.0)   # what a stopped server does not need
    b, fn = _forking_backend(tmp_path)
    server = b._server
    assert server is not None
    try:
        b.submit(make_task(tmp_path, 1, fn, config={"module": "colorsys"}))
        b.submit(make_task(tmp_path, 2, fn, config={"module": "colorsys"}))
        ended = collect(b, [1, 2])
        assert [ended[i][-1].kind for i in (1, 2)] == [EventKind.FINISHED] * 2
        workers = [w.proc for w in b._workers.values()]
        _stop(server.proc.pid)
        b.shutdown(grace=0.0)
        assert [w.returncode for w in workers] == [-signal.SIGKILL] * 2   # the real status is unknowable
        assert server.proc.returncode == -signal.SIGKILL
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server.proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("target", ["x" * 5000 + ".py:train", "m" * 300 + ".sub:train", "pkg/" + "d" * 300 + "/t.py:f"])
def test_trial_imports_of_a_name_the_os_refuses_is_none_not_a_crash(tmp_path, target):
    """`sweeplab sweep` reads the trial's imports before anything else (cli/_early.py): a `function:` the OS
    cannot even look up (a name too long) must leave the error to the spec's check, not crash the CLI."""
    assert trial_imports(target, [str(tmp_path)]) == ()


def test_a_fork_asked_of_a_stopped_server_starts_the_worker_cold_without_waiting_for_its_answer(tmp_path,
                                                                                                 monkeypatch):
    """The driver's loop waits for a fork's answer: from a stopped server none comes, so it is not asked (no
    FORK_TIMEOUT of a blocked driver: signals, stops and budgets wait on it)."""
    import sweeplab.backends.forkserver as fs

    monkeypatch.setattr(fs, "FORK_TIMEOUT", 30.0)
    b, fn = _forking_backend(tmp_path)
    server = b._server
    assert server is not None
    try:
        b.submit(make_task(tmp_path, 1, fn, config={"module": "colorsys", "sleep": 60}))   # forked, running
        assert isinstance(b._workers[0].proc, ForkedProcess)
        _stop(server.proc.pid)
        b.submit(make_task(tmp_path, 2, fn, config={"module": "colorsys"}))   # the second slot: cold
        assert "stopped" in server.status, server.status
        ev = collect(b, [2])[2]
        assert ev[-1].kind is EventKind.FINISHED and _metrics(ev)["had"] == 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server.proc.pid, signal.SIGCONT)
        b.shutdown(grace=0.0)


def test_a_forked_worker_has_its_own_process_group_when_the_backend_learns_its_pid(tmp_path):
    """The backend kills a worker by its process group (the trial's children with it), from the moment it
    knows its pid: a kill right after the start (trial.timeout, budget.time) must not find no group (ESRCH)."""
    from sweeplab.backends.forkserver import ForkServer
    from sweeplab.backends.local import _worker_env

    env = _worker_env(plan_slots(1, cpus=0, gpus=0, gpu_ids=[])[0], {}, hide_gpus=False)
    server = ForkServer(env, ["colorsys"])
    ends: list[int] = []
    try:
        assert server.ready(60)
        leaders = []
        for _ in range(20):
            cmd_r, cmd_w = os.pipe()
            ev_r, ev_w = os.pipe()
            proc = server.fork(env, (cmd_r, ev_w))
            os.close(cmd_r)
            os.close(ev_w)
            ends += [cmd_w, ev_r]
            assert proc is not None
            leaders.append(os.getpgid(proc.pid) == proc.pid)
        assert all(leaders), leaders
    finally:
        for fd in ends:   # the workers see their stdin close and end
            os.close(fd)
        server.close()


@pytest.mark.parametrize("in_flight", [False, True], ids=["", "a-gp-suggestion-in-flight"])
def test_slots_of_two_cpus_fork_numpy_trials_with_the_blas_threads_of_a_cold_worker(tmp_path, monkeypatch,
                                                                                      in_flight):
    """With 2+ CPUs a slot, OPENBLAS_NUM_THREADS > 1 made numpy's OpenBLAS start its threads at import, and
    the fork server refused to fork: the server imports with one, and each forked worker gets the slot's
    number, as a cold worker has from the start. Workers get the environment the backend was made in: a value
    another thread sets for a moment after that (Optuna's GP, while it suggests) is not theirs."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    proj = _project(tmp_path, **{"probe.py": """
        def probe(config, run):
            import threadpoolctl
            info = threadpoolctl.threadpool_info()
            run.log({"blas": sum(i["num_threads"] for i in info if i["internal_api"] == "openblas")})
    """})
    b = LocalBackend(plan_slots(2, cpus=2, gpus=0, gpu_ids=[], cpu_count=4), preload=("numpy",))
    if in_flight:   # what Optuna's GP sets in os.environ while it suggests, in the driver's prefetch thread
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    b.start()
    try:
        b.submit(make_task(tmp_path, 1, f"{proj / 'probe.py'}:probe"))
        ev = collect(b, [1])[1]
        assert ev[-1].kind is EventKind.FINISHED, ev[-1]
        note = next(e.data for e in ev if e.kind is EventKind.NOTE)
        assert note["forked"] is True, note
        assert _metrics(ev)["blas"] == 2
    finally:
        b.shutdown(grace=0.0)


def test_a_forked_worker_started_again_by_its_trial_says_why_it_cannot_run(tmp_path):
    """Lightning's strategy="ddp" with devices=2 in a one-process trial runs the trial's main program again for
    the second rank. In a forked worker that program is the fork server's module, and the copy ended with
    "KeyError: 'SWEEPLAB_FORK_SOCKET'"; it says what happened and what to do, as a cold worker's copy does."""
    proj = _project(tmp_path, **{"rerun.py": """
        def reruns_main(config, run):
            import __main__, os, subprocess, sys
            spec = __main__.__spec__   # Lightning's _basic_subprocess_cmd
            cmd = [sys.executable, os.path.abspath(sys.argv[0])] if spec is None else [sys.executable, "-m", spec.name]
            child = subprocess.run(cmd + sys.argv[1:], env={**os.environ, "LOCAL_RANK": "1"}, capture_output=True,
                                   text=True, timeout=30)
            run.log({"code": child.returncode, "explained": float("resources: {workers: N}" in child.stderr),
                     "keyerror": float("KeyError" in child.stderr)})
    """})
    b = LocalBackend(plan_slots(2, cpus=0, gpus=0, gpu_ids=[]), preload=("colorsys",))
    b.start()
    try:
        b.submit(make_task(tmp_path, 1, f"{proj / 'rerun.py'}:reruns_main"))
        ev = collect(b, [1], timeout=60)[1]
        assert ev[-1].kind is EventKind.FINISHED, ev[-1]
        assert next(e.data for e in ev if e.kind is EventKind.NOTE)["forked"] is True
        got = _metrics(ev)
        assert got["code"] != 0 and got["explained"] == 1.0 and got["keyerror"] == 0.0, got
    finally:
        b.shutdown(grace=0.0)
