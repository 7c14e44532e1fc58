"""Faults around the driver of a Ray sweep, with real processes and signals.

- The Ray cluster's head going away under a running sweep (a real `ray start --head` on loopback, a real
  `sweeplab sweep` driver): the sweep stops at once with one error naming the head, exit 1, the sweep
  `stopped` (not left `running`) and resumable, instead of taking its trials for preempted ones, requeuing
  them onto actors that can never start, and being ended by Ray a minute later with nothing recorded. The
  head is the test's own (it is killed), in its own session, temporary directory, HOME and ports.
- Ctrl-C or SIGTERM while `--backend ray` starts its local Ray instance: exit 130 / 143 with one line naming
  what was interrupted, no Ray process left behind, no sweep created.
- Ctrl-C or SIGTERM while `sweeplab resume` connects to a cluster whose head accepts connections but does not
  answer (ray.init blocks in C++ there, 30 s at a time): the same, at once, and the sweep untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.test_ray_resume import HEAD_PORT_OPTIONS, _free_ports, _session_pids

TRIALS = Path(__file__).resolve().parents[1] / "fixtures" / "trials.py"

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _kill_session(sid: int) -> None:
    for pid in _session_pids(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _left(sid: int) -> list[bytes]:
    """The command lines of what is still running in session `sid` (nothing may outlive its driver)."""
    left = []
    for pid in _session_pids(sid):
        with contextlib.suppress(OSError):
            left.append(Path(f"/proc/{pid}/cmdline").read_bytes()[:80])
    return left


@contextlib.contextmanager
def _ray_script(tmp_path: Path, script: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`script` run as `python -c script STORE TRIALS ARGS...` in a session of its own, with a Ray temporary
    directory of its own (short: Ray's socket paths live under it); whatever is left of the session is killed
    after."""
    tmp = Path(tempfile.mkdtemp(prefix="slint-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(RAY_TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "store"), str(TRIALS), *args], env=env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        yield proc
    finally:
        _end(proc, tmp)


def _end(proc: subprocess.Popen[str], tmp: Path) -> None:
    """Kill `proc` if it still runs, whatever is left of its session, and remove its Ray temporary directory."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate()
    _kill_session(proc.pid)
    shutil.rmtree(tmp, ignore_errors=True)


def _count(db: Path, state: str) -> int:
    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
            return int(c.execute("SELECT count(*) FROM trials WHERE state=?", (state,)).fetchone()[0])
    except sqlite3.Error:
        return 0


def test_the_head_going_away_stops_the_sweep_at_once_resumable_with_an_error_naming_it(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    tmp = Path(tempfile.mkdtemp(prefix="slhead-"))   # short: Ray's socket paths live under it
    home = tmp / "home"
    home.mkdir()
    port, *others = _free_ports(1 + len(HEAD_PORT_OPTIONS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(HOME=str(home), COLUMNS="200", SWEEPLAB_STORE=str(tmp_path / "store"))
    ports = [x for opt, p in zip(HEAD_PORT_OPTIONS, others) for x in (opt, str(p))]
    cmd = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--port", str(port), "--temp-dir", str(tmp / "t"), "--num-cpus", "2", "--include-dashboard", "false",
           "--object-store-memory", str(100 * 1024 * 1024), "--disable-usage-stats", *ports]
    log = tmp / "ray-start.log"
    with log.open("wb") as out:
        head = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    spec = tmp_path / "s.yaml"
    spec.write_text(f"function: {TRIALS}:checkpointing\nmethod: random\nseed: 1\n"
                    "metric: {name: loss, goal: minimize}\n"
                    "parameters:\n  x: {min: 0.0, max: 1.0}\n  steps: {value: 4}\n  delay: {value: 0.25}\n"
                    "budget: {trials: 4}\n")
    db = tmp_path / "store" / "store.db"
    driver = None
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log.read_text(errors="replace"):
            assert head.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.2)
        driver = subprocess.Popen(
            [sys.executable, "-m", "sweeplab", "sweep", str(spec), "--name", "h", "--backend", "ray",
             "--address", f"127.0.0.1:{port}", "--workers", "1", "-q"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        while not (_count(db, "completed") >= 1 and _count(db, "running") == 1):   # one done, the next one runs
            assert driver.poll() is None, driver.communicate()
            assert time.monotonic() < deadline, "no trial ran on the Ray cluster in time"
            time.sleep(0.1)
        _kill_session(head.pid)   # the head machine is gone: GCS, raylet, the actors on it
        head.wait()
        out, err = driver.communicate(timeout=120)
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.communicate()
        _kill_session(head.pid)
        if head.poll() is None:
            head.kill()
            head.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    text = out + err
    assert driver.returncode == 1, text
    assert "the Ray cluster's head is gone" in text and f"127.0.0.1:{port}" in text, text
    assert "sweeplab resume h" in text, text
    status = subprocess.run([sys.executable, "-m", "sweeplab", "status", "h", "--json"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    sweep = json.loads(status.stdout)["sweep"]
    assert sweep["state"] == "stopped" and sweep["counts"]["running"] == 0, sweep
    with contextlib.closing(sqlite3.connect(db)) as c:   # the lost trial was not counted as a preemption
        reasons = [r for (r,) in c.execute("SELECT reason FROM attempts WHERE state='preempted'")]
        assert reasons == [], reasons
        assert c.execute("SELECT count(*) FROM attempts WHERE ended IS NULL").fetchone()[0] == 0
    done = sweep["counts"]["completed"]

    # resumable: here on the local backend (the head is gone); what completed stays completed
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "resume", "h", "--backend", "local", "-w", "1", "-q"],
                        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    after = json.loads(subprocess.run([sys.executable, "-m", "sweeplab", "status", "h", "--json"], cwd=tmp_path,
                                      env=env, capture_output=True, text=True, timeout=120).stdout)["sweep"]
    assert after["state"] == "finished" and after["counts"]["completed"] == 4 >= done, after


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_ray_starts_its_local_instance_leaves_no_ray_process_behind(tmp_path: Path, sig) -> None:
    """SIGTERM went to ray.init's own handler (sys.exit(15): exit 15, no message) half-way through, which left
    the raylet's agents running."""
    pytest.importorskip("ray")
    tmp = Path(tempfile.mkdtemp(prefix="slint-"))   # short: Ray's socket paths live under it
    (tmp / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(HOME=str(tmp / "home"), RAY_TMPDIR=str(tmp), SWEEPLAB_STORE=str(tmp_path / "store"))
    spec = tmp_path / "s.yaml"
    spec.write_text(f"function: {TRIALS}:quick\nmethod: random\nseed: 1\nmetric: {{name: loss, goal: minimize}}\n"
                    "parameters:\n  x: {min: 0.0, max: 1.0}\nbudget: {trials: 1}\n")
    driver = subprocess.Popen([sys.executable, "-m", "sweeplab", "sweep", str(spec), "--backend", "ray", "-q"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True,   # Ctrl-C as a terminal sends it (not ignored)
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while True:   # the raylet is up: ray.init is half-way (its agents start next)
            cmds = []
            for pid in _session_pids(driver.pid):
                with contextlib.suppress(OSError):
                    cmds.append(Path(f"/proc/{pid}/cmdline").read_bytes())
            if any(b"raylet" in c for c in cmds):
                break
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.02)
        driver.send_signal(sig)
        out, err = driver.communicate(timeout=120)
        assert driver.returncode == 128 + sig, out + err
        assert f"error: {sig.name} while starting a local Ray instance: stopped before any trial ran" in err, err
        assert not (tmp_path / "store" / "store.db").exists()   # nothing created
        # the driver stops what it started before it exits (ray.init's agents lingered a minute)
        assert _left(driver.pid) == []
    finally:
        _end(driver, tmp)


def test_a_signal_while_connecting_to_a_cluster_that_does_not_answer_ends_at_once_the_sweep_untouched(
        tmp_path: Path) -> None:
    """`sweeplab resume` of a sweep onto a "head" (RAY_ADDRESS) that accepts connections and never answers:
    ray.init blocks in C++ for 30 s at a time, and the signal was handled only then (SIGTERM: exit 15 about
    40 s later, no message). Both signals end it at once with one line; the sweep is left as it was."""
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(SWEEPLAB_STORE=str(tmp_path / "store"), HOME=str(tmp_path))
    spec = tmp_path / "s.yaml"
    spec.write_text(f"function: {TRIALS}:quick\nmethod: random\nseed: 1\nmetric: {{name: loss, goal: minimize}}\n"
                    "parameters:\n  x: {min: 0.0, max: 1.0}\nbudget: {trials: 1}\n")
    made = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", str(spec), "--name", "sig", "-q", "-w", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    db = tmp_path / "store" / "store.db"

    def sweep_row() -> tuple:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
            return tuple(c.execute("SELECT state, end_reason, backend, driver FROM sweeps WHERE name='sig'").fetchone())

    before = sweep_row()
    mute = socket.socket()
    mute.bind(("0.0.0.0", 0))   # Ray connects to the node's address for 127.0.0.1
    mute.listen(16)
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: [accepted.append(mute.accept()[0]) for _ in range(16)], daemon=True).start()
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            seen = len(accepted)
            proc = subprocess.Popen([sys.executable, "-m", "sweeplab", "resume", "sig", "--trials", "+1",
                                     "--backend", "ray"], cwd=tmp_path,
                                    env={**env, "RAY_ADDRESS": f"127.0.0.1:{mute.getsockname()[1]}"},
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True,
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            try:
                deadline = time.monotonic() + 60
                while len(accepted) == seen:   # ray.init's connection: it waits inside ray.init
                    assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
                    time.sleep(0.02)
                time.sleep(0.3)
                proc.send_signal(sig)
                out, err = proc.communicate(timeout=20)   # it took ~40 s, the length of Ray's connection attempt
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
            assert proc.returncode == 128 + sig, out + err
            assert f"error: {sig.name} while connecting to the Ray cluster (RAY_ADDRESS=" in err, err
            assert sweep_row() == before
    finally:
        mute.close()
        for conn in accepted:
            conn.close()


_DRIVE = """
import os, signal, sys, threading, time
from pathlib import Path
from sweeplab.backends.ray import RayBackend
from sweeplab.driver import Driver
from sweeplab.spec import parse_spec
from sweeplab.store import Store

spec = parse_spec({"function": sys.argv[2] + ":checkpointing", "method": "grid",
                   "metric": {"name": "loss", "goal": "minimize"},
                   "parameters": {"steps": {"value": 2000}, "delay": {"value": 0.05}}}, file="<test>")
store = Store.open(sys.argv[1])
driver = Driver(spec, store, RayBackend(spec, workers=1), sweep_name="term")   # the driver starts Ray
driver.create(spec_path=None)

def term_once_checkpointed():
    while not any(files for _, _, files in os.walk(Path(sys.argv[1], "checkpoints"))):   # skips what vanishes
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=term_once_checkpointed, daemon=True).start()
outcome = driver.run()
print(outcome.state.value, outcome.exit_code)
"""


def test_sigterm_to_a_driver_that_started_ray_itself_stops_the_sweep_resumable(tmp_path: Path) -> None:
    """A `Driver` running a RayBackend it starts itself (a local Ray instance): ray.init replaced the driver's
    SIGTERM handler with Ray's own (sys.exit(15)), so SIGTERM mid-sweep raised SystemExit out of the loop and
    left the sweep and its trial `running`; it is the driver's stop (sweep `stopped`, trial `preempted`)."""
    pytest.importorskip("ray")
    tmp = Path(tempfile.mkdtemp(prefix="slint-"))   # short: Ray's socket paths live under it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(RAY_TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, "-c", _DRIVE, str(tmp_path / "store"), str(TRIALS)], env=env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=180)
        assert out.split() == ["stopped", "0"], out + err
        with contextlib.closing(sqlite3.connect(tmp_path / "store" / "store.db")) as db:
            assert db.execute("SELECT state FROM trials").fetchall() == [("preempted",)]
        assert _left(proc.pid) == []   # no actor, trial worker or Ray process outlives the stopped driver
    finally:
        _end(proc, tmp)


_BETWEEN = """
import os, signal, sys, time
from sweeplab.api import build_backend
from sweeplab.driver import Driver
from sweeplab.spec import parse_spec
from sweeplab.store import Store

spec = parse_spec({"function": sys.argv[2] + ":quick", "method": "random", "seed": 1, "backend": "ray",
                   "metric": {"name": "loss", "goal": "minimize"}, "parameters": {"x": {"min": 0.0, "max": 1.0}},
                   "budget": {"trials": 2}}, file="<test>")
store = Store.open(sys.argv[1])
sig = getattr(signal, sys.argv[3])
signal.signal(signal.SIGINT, signal.default_int_handler)   # as a terminal's Ctrl-C finds it
for name in ("between", "again"):   # a second sweep of the same process (a notebook's next cell) too
    be = build_backend(spec, workers=1, store_root=sys.argv[1])   # started here, as `sweeplab sweep` does
    driver = Driver(spec, store, be, sweep_name=name)
    driver.create(spec_path=None)
    os.kill(os.getpid(), sig)   # after the backend's start, before Driver.run
    time.sleep(0.5)
    outcome = driver.run()
    print(outcome.state.value, outcome.exit_code, sum(outcome.counts.values()))
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_sigterm_between_the_ray_backend_s_start_and_the_driver_s_run_stops_the_sweep_resumable(
        tmp_path: Path, sig: str) -> None:
    """`sweeplab sweep --backend ray` starts the backend (ray.init) before it creates the sweep and runs the
    driver; ray.init had left Ray's own SIGTERM handler (sys.exit(15)) in place meanwhile, so a SIGTERM there
    ended the process with exit 15 and the just-created sweep left `running`; a Ctrl-C there did the same with
    a KeyboardInterrupt. Held until the driver runs, either is the driver's stop: sweep `stopped` (resumable),
    no trial run, exit 0 (130 for Ctrl-C), no Ray process left."""
    pytest.importorskip("ray")
    with _ray_script(tmp_path, _BETWEEN, sig) as proc:
        out, err = proc.communicate(timeout=180)
        code = "0" if sig == "SIGTERM" else "130"
        assert (proc.returncode, out.split()) == (0, ["stopped", code, "0"] * 2), out + err
        with contextlib.closing(sqlite3.connect(tmp_path / "store" / "store.db")) as db:
            assert db.execute("SELECT state FROM sweeps").fetchall() == [("stopped",)] * 2
        assert _left(proc.pid) == []   # nothing of the local Ray instance outlives the driver


_PAUSED = """
import os, signal, sys, time
from sweeplab.backends.ray import RayBackend
from sweeplab.driver import Driver
from sweeplab.spec import parse_spec
from sweeplab.store import Store

spec = parse_spec({"function": sys.argv[2] + ":slow_square", "method": "grid",
                   "metric": {"name": "loss", "goal": "minimize"},
                   "parameters": {"x": {"values": [1, 2]}, "delay": {"value": 2.5}},   # quiet for 2.5 s at a time
                   "trial": {"heartbeat_timeout": 6}}, file="<test>")
store = Store.open(sys.argv[1])
running_since = []

def pause_once_both_run(progress):
    if progress.running == 2 and not running_since:
        running_since.append(time.monotonic())
    if len(running_since) == 1 and time.monotonic() - running_since[0] > 2:
        running_since.append(0.0)
        os.kill(os.getpid(), signal.SIGSTOP)   # the driver paused between two reads (Ctrl-Z, a debugger)

driver = Driver(spec, store, RayBackend(spec, workers=2), sweep_name="paused", on_progress=pause_once_both_run)
driver.create(spec_path=None)
outcome = driver.run()
print(outcome.state.value, outcome.exit_code)
for row in store.conn.execute("SELECT trial_id, number, state, reason FROM attempts ORDER BY trial_id, number"):
    print(tuple(row))
"""


def test_a_driver_paused_past_the_heartbeat_timeout_kills_none_of_its_ray_trials_for_it(tmp_path: Path) -> None:
    """docs/fault-tolerance.md: a driver paused (SIGSTOP) longer than trial.heartbeat_timeout reads the
    heartbeats its trials sent meanwhile before it judges them. On Ray they wait in the actors' buffers (each
    actor's one drain call returned early in the pause) and in replies not yet received, and the first read
    after the pause saw neither: every running trial was failed as hung, spending a retry."""
    pytest.importorskip("ray")
    with _ray_script(tmp_path, _PAUSED) as proc:
        deadline = time.monotonic() + 120
        while Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0] != "T":
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(8)   # past trial.heartbeat_timeout (6 s)
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=180)
        lines = out.splitlines()
        assert lines[0] == "finished 0", out + err
        assert lines[1:] == ["(1, 1, 'completed', None)", "(2, 1, 'completed', None)"], out


_RAYLET = """
import os, signal, sys, threading, time
from pathlib import Path
import psutil
from sweeplab.backends.ray import RayBackend
from sweeplab.driver import Driver
from sweeplab.spec import parse_spec
from sweeplab.store import Store

spec = parse_spec({"function": sys.argv[2] + ":checkpointing", "method": "grid",
                   "metric": {"name": "loss", "goal": "minimize"},
                   "parameters": {"steps": {"value": 2000}, "delay": {"value": 0.05}},
                   "budget": {"time": "60s"}}, file="<test>")   # never hang the suite
store = Store.open(sys.argv[1])
fast = {"health_check_period_ms": 500, "health_check_failure_threshold": 5, "health_check_initial_delay_ms": 0,
        "health_check_timeout_ms": 1000}   # the node's death noticed in seconds (1 s: a starved raylet failed it)
driver = Driver(spec, store, RayBackend(spec, workers=1, init={"_system_config": fast}), sweep_name="raylet")
driver.create(spec_path=None)

def kill_the_raylet_once_checkpointed():
    while not any(files for _, _, files in os.walk(Path(sys.argv[1], "checkpoints"))):   # skips what vanishes
        time.sleep(0.05)
    for p in psutil.Process().children(recursive=True):
        if "raylet" in " ".join(p.cmdline()[:1]):
            p.send_signal(signal.SIGKILL)

threading.Thread(target=kill_the_raylet_once_checkpointed, daemon=True).start()
outcome = driver.run()
print("=", outcome.state.value, outcome.exit_code)   # marked: Ray prints its raylet's death here too
print("=", outcome.reason.splitlines()[0])
print("=", [tuple(r) for r in store.conn.execute("SELECT state FROM attempts")])
"""


def test_the_sweep_s_own_local_ray_instance_losing_its_raylet_stops_the_sweep_resumable(tmp_path: Path) -> None:
    """`--backend ray` without an address runs a local Ray instance of the sweep's own; kill -9 of its raylet
    (or the OOM killer's) leaves it without a node, and none will ever join it. The trial was preempted and
    waited queued for a node "until one joins": forever without budget.time. Now the sweep stops at once,
    resumable, with one error naming the cause (as when a cluster's head is lost), nothing left running."""
    pytest.importorskip("ray")
    with _ray_script(tmp_path, _RAYLET) as proc:
        out, err = proc.communicate(timeout=180)
        lines = [line[2:] for line in out.splitlines() if line.startswith("= ")]
        assert lines[:2] == ["stopped 1", "Ray's local instance, started by this sweep, has no node left (its "
                             "raylet died: killed, OOM-killed or crashed); the sweep's trials cannot run; "
                             "`sweeplab resume raylet` continues"], out + err
        assert lines[2] == "[('interrupted',)]", out   # not taken for a preemption, requeued without end
        assert _left(proc.pid) == []
