"""A sweep on a real `ray start --head` cluster (loopback, token authentication on, as recent Ray does):
`resume` goes back to the cluster the sweep ran on and says so, `--backend local` overrides it, and a
client without the cluster's token gets one clear error at once (not 20 s of `InvalidAuthToken` warnings
ending in "start one with `ray start --head`").

Everything runs through the real `sweeplab` command in subprocesses. The cluster has its own temporary
directory, HOME (so no ~/.ray/auth_token of the machine is read or written) and free ports; teardown
kills every process of its session.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

TRIALS = Path(__file__).resolve().parents[1] / "fixtures" / "trials.py"

pytestmark = [pytest.mark.ray, pytest.mark.slow]


#: the ports a `ray start --head` of these tests is given besides its GCS port
HEAD_PORT_OPTIONS = ("--dashboard-port", "--ray-client-server-port", "--dashboard-agent-listen-port",
                     "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port")


def _free_ports(n: int) -> list[int]:
    """`n` distinct free ports, bound all at once: asked one at a time, the OS may hand out the same port
    twice, and `ray start` then refuses two components on one port."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _session_pids(sid: int) -> list[int]:
    """Every live process of session `sid` (the `ray start` process and all it spawned)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


@dataclass
class Head:
    address: str
    token: str
    home: Path
    proc: subprocess.Popen

    def env(self, store: Path, **auth: str) -> dict[str, str]:
        """The environment of a sweeplab command: this cluster's HOME, `auth` as the RAY_AUTH_* variables."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
        env.update(HOME=str(self.home), SWEEPLAB_STORE=str(store), COLUMNS="200", **auth)
        return env

    def with_token(self, store: Path) -> dict[str, str]:
        return self.env(store, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token)


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    ray = pytest.importorskip("ray")
    try:
        from ray._raylet import AuthenticationTokenLoader  # noqa: F401
        auth = True
    except ImportError:
        auth = False
    if not auth:
        pytest.skip(f"Ray {ray.__version__} has no token authentication")
    tmp = Path(tempfile.mkdtemp(prefix="slray-"))   # short: Ray's socket paths live under it
    home = tmp / "home"
    home.mkdir()
    token = secrets.token_hex(32)
    port, *others = _free_ports(1 + len(HEAD_PORT_OPTIONS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(HOME=str(home), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    ports = {opt: str(p) for opt, p in zip(HEAD_PORT_OPTIONS, others)}
    cmd = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--port", str(port), "--temp-dir", str(tmp / "t"), "--num-cpus", "2", "--include-dashboard", "false",
           "--object-store-memory", str(100 * 1024 * 1024), "--disable-usage-stats",
           *[x for kv in ports.items() for x in kv]]
    log = tmp / "ray-start.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"`ray start --head` did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.2)
        yield Head(address=f"127.0.0.1:{port}", token=token, home=home, proc=proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)   # `ray start --block` stops the processes it started
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        for pid in _session_pids(proc.pid):   # and whatever is left of them
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def _sweeplab(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _status(name: str, env: dict[str, str], cwd: Path) -> dict:
    cp = _sweeplab(["status", name, "--json"], env, cwd)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def _spec(tmp_path: Path, trials: int, seconds: float) -> Path:
    f = tmp_path / "s.yaml"
    f.write_text(f"function: {TRIALS}:sleeper\nmethod: random\nseed: 1\nmetric: {{name: loss, goal: minimize}}\n"
                 f"parameters:\n  x: {{min: 0.0, max: 1.0}}\n  seconds: {{value: {seconds}}}\n"
                 f"budget: {{trials: {trials}}}\n")
    return f


def _completed(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
            return int(c.execute("SELECT count(*) FROM trials WHERE state='completed'").fetchone()[0])
    except sqlite3.Error:
        return 0


def _signal_after_the_first_trial(head: Head, tmp_path: Path, env: dict, spec: Path, name: str,
                                  sig: int) -> tuple[int, str]:
    """`sweeplab sweep SPEC --name NAME` on the cluster, one worker, sent `sig` once a trial completed: its exit
    code and stderr."""
    store = Path(env["SWEEPLAB_STORE"])
    proc = subprocess.Popen([sys.executable, "-m", "sweeplab", "sweep", str(spec), "--name", name, "--backend",
                             "ray", "--address", head.address, "--workers", "1", "-q"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while _completed(store / "store.db") < 1:
            assert proc.poll() is None, f"the sweep ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "no trial completed on the Ray cluster in time"
            time.sleep(0.1)
        proc.send_signal(sig)
        _, errs = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, errs


def test_resume_goes_back_to_the_ray_cluster_it_ran_on_and_local_overrides(head: Head, tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = head.with_token(store)
    spec = _spec(tmp_path, trials=3, seconds=1.0)
    code, errs = _signal_after_the_first_trial(head, tmp_path, env, spec, "onray", signal.SIGINT)
    assert code == 130, errs
    first = _status("onray", env, tmp_path)["sweep"]
    assert first["state"] == "stopped" and first["counts"]["completed"] < 3

    # (a) no --backend: back on the cluster, and it says so
    cp = _sweeplab(["resume", "onray"], env, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"resuming onray on ray at {head.address}, where it last ran" in cp.stdout
    assert "sweep onray on ray: " in cp.stdout and "slot(s)" in cp.stdout   # the Ray backend ran it
    assert (first.get("backend"), first.get("address")) == ("ray", head.address)   # recorded by the first run
    after = _status("onray", env, tmp_path)
    assert after["sweep"]["state"] == "finished" and after["sweep"]["counts"]["completed"] == 3
    assert (after["sweep"]["backend"], after["sweep"]["address"]) == ("ray", head.address)

    # (b) --backend local overrides where it ran, and is recorded as where it ran last
    cp = _sweeplab(["resume", "onray", "--trials", "+1", "--backend", "local", "-w", "1"], env, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"resuming onray on the local backend (as asked; it last ran on ray at {head.address})" in cp.stdout
    assert "sweep onray on local:" in cp.stdout
    last = _status("onray", env, tmp_path)["sweep"]
    assert last["counts"]["completed"] == 4 and (last["backend"], last["address"]) == ("local", None)


def test_sigterm_to_a_cli_driver_on_a_cluster_stops_the_sweep_and_resume_keeps_what_completed(
        head: Head, tmp_path: Path) -> None:
    """As on the local backend: SIGTERM to `sweeplab sweep --address` mid-sweep exits 0 with the sweep
    `stopped` (not failed), the running trial `preempted`; the resume runs only what was not completed."""
    store = tmp_path / "store"
    env = head.with_token(store)
    spec = _spec(tmp_path, trials=2, seconds=1.5)
    code, errs = _signal_after_the_first_trial(head, tmp_path, env, spec, "term", signal.SIGTERM)
    assert code == 0, errs
    st = _status("term", env, tmp_path)
    assert st["sweep"]["state"] == "stopped", st["sweep"]
    states = [t["state"] for t in st["trials"]]
    assert states.count("completed") == 1 and set(states) <= {"completed", "preempted", "queued"}, states
    cp = _sweeplab(["resume", "term"], env, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    after = _status("term", env, tmp_path)
    assert after["sweep"]["state"] == "finished" and after["sweep"]["counts"]["completed"] == 2
    assert len(after["trials"]) == 2   # the completed one was not run again


@pytest.mark.parametrize("auth, expect", [
    ({}, "the Ray cluster requires token authentication and this process sent no token"),
    ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64},
     "the Ray cluster rejected this process's authentication token (from RAY_AUTH_TOKEN)"),
    ({"RAY_AUTH_MODE": "token"}, "RAY_AUTH_MODE=token but no Ray authentication token was found"),
], ids=["no-token", "wrong-token", "token-mode-without-token"])
def test_connecting_without_the_cluster_s_token_fails_at_once_naming_cause_and_fix(
        head: Head, tmp_path: Path, auth: dict[str, str], expect: str) -> None:
    store = tmp_path / "store"
    spec = _spec(tmp_path, trials=1, seconds=0.1)
    cp = _sweeplab(["sweep", str(spec), "--name", "noauth", "--backend", "ray", "--address", head.address, "-q"],
                   head.env(store, **auth), tmp_path, timeout=120)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    err = cp.stderr
    assert f"--address {head.address}: {expect}" in err
    assert "RAY_AUTH_MODE=token" in err and "RAY_AUTH_TOKEN" in err and "ray get-auth-token" in err
    assert "ray start --head" not in err and "InvalidAuthToken" not in err   # no wrong advice, no warning spam
    # at once: these errors come only from the check before ray.init (which alone retries for ~20 s, logging
    # InvalidAuthToken); no wall-clock bound (a loaded run's CLI took seconds to import Ray)
    if (store / "store.db").exists():   # nothing was created
        with contextlib.closing(sqlite3.connect(store / "store.db")) as c:
            assert c.execute("SELECT count(*) FROM sweeps").fetchone()[0] == 0


def test_a_driver_killed_with_9_leaves_no_trial_process_on_the_cluster_and_resume_finishes(
        head: Head, tmp_path: Path) -> None:
    """kill -9 of the driver of a sweep on a cluster: Ray ends the job's actors, and with them every process
    of the running command trial (its program ignores SIGTERM, its child has a session of its own); a resume
    then runs the trial again to its end."""
    import psutil

    program = Path(__file__).resolve().parents[1] / "faults" / "tree_program.py"
    pids = tmp_path / "pids"
    pids.mkdir()
    spec = tmp_path / "s.yaml"
    spec.write_text(f"command: [{sys.executable!r}, {str(program)!r}, '${{args}}']\nmethod: grid\n"
                    f"metric: {{name: loss, goal: minimize}}\nparameters:\n  pids: {{value: {str(pids)!r}}}\n"
                    "  ignore_term: {value: 1}\n  setsid_child: {value: 1}\n  steps: {value: 12}\n"
                    "budget: {trials: 1}\ntrial: {grace: 1s}\n")
    store = tmp_path / "store"
    env = head.with_token(store)
    proc = subprocess.Popen([sys.executable, "-m", "sweeplab", "sweep", str(spec), "--name", "killed", "--backend",
                             "ray", "--address", head.address, "--workers", "1", "-q"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        files = [pids / f"0-1-{who}.pid" for who in ("program", "child")]
        deadline = time.monotonic() + 120
        while not all(f.exists() for f in files):
            assert proc.poll() is None, f"the sweep ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the trial did not start on the cluster"
            time.sleep(0.1)
        tree = [int(f.read_text()) for f in files]
        proc.kill()
        proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 60   # Ray notices the job's end, then kills its actors
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree if alive(p)], "the trial's processes outlived their driver's job"
    cp = _sweeplab(["resume", "killed"], env, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert _status("killed", env, tmp_path)["sweep"]["counts"]["completed"] == 1


_MAIN_SCRIPT = """
import os
import sweeplab

LIMIT = 10.0   # read by the trial: a module global of the script


def train(config, run):
    return {"loss": config["x"] / LIMIT}


if __name__ == "__main__":
    s = sweeplab.sweep({"method": "grid", "metric": {"name": "loss", "goal": "minimize"},
                        "parameters": {"x": {"values": [1.0, 2.0]}}}, fn=train, store=os.environ["SL_STORE"],
                       backend="ray", address=os.environ["SL_ADDR"], workers=1, name=os.environ["SL_NAME"])
    print("RESULT", s.status()["state"], s.best["value"])
"""


@pytest.mark.parametrize("argv", [[], ["--lr", "0.1"]], ids=["by-path", "by-value"])
def test_a_function_of_the_user_s_main_script_runs_on_the_cluster(head: Head, tmp_path: Path, argv) -> None:
    """`sweeplab.sweep(fn=train)` from `python train.py` on Ray: the function of `__main__` is imported by the
    script's path in the actors' workers (by value, cloudpickle, when the script got arguments)."""
    script = tmp_path / "train.py"
    script.write_text(_MAIN_SCRIPT)
    env = head.with_token(tmp_path / "store")
    env.update(SL_STORE=str(tmp_path / "store"), SL_ADDR=head.address, SL_NAME="main")
    cp = subprocess.run([sys.executable, str(script), *argv], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=240)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "RESULT finished 0.1" in cp.stdout, cp.stdout + cp.stderr


def test_a_local_ray_that_cannot_start_is_one_error_line_exit_1_and_the_sweep_stays_resumable(tmp_path: Path) -> None:
    """Ray's own start-up failures (a bare `Exception` for "the current node timed out during startup" on a
    loaded machine, `TimeoutError`, an `OSError` of its temp directory...) were a full traceback from `sweep`
    and `resume`. Provoked here deterministically with RAY_TMPDIR naming a file: one line naming Ray's error
    and what to try, exit 1, nothing stored lost."""
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_TMPDIR"))}
    env.update(SWEEPLAB_STORE=str(tmp_path / "store"), COLUMNS="200")
    spec = _spec(tmp_path, trials=2, seconds=0.0)
    cp = _sweeplab(["sweep", str(spec), "--name", "s", "--backend", "local", "--workers", "1", "-q"], env, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    (tmp_path / "notadir").write_text("")
    bad = {**env, "RAY_TMPDIR": str(tmp_path / "notadir")}
    for args in (["resume", "s", "--backend", "ray", "--trials", "4", "-q"],
                 ["sweep", str(spec), "--name", "t", "--backend", "ray", "-q"]):
        cp = _sweeplab(args, bad, tmp_path)
        err = cp.stderr.strip()
        assert cp.returncode == 1, cp.stdout + cp.stderr
        assert "Traceback" not in cp.stdout + cp.stderr and "╭" not in cp.stdout + cp.stderr, cp.stderr
        line = [x for x in err.splitlines() if x.startswith("error:")]
        assert len(line) == 1 and line[0] == err.splitlines()[-1], err
        assert "cannot start a local Ray instance: NotADirectoryError" in line[0], err
        assert f"{tmp_path / 'notadir'}/ray is a writable directory" in line[0] and "--address" in line[0], err
    assert _status("s", env, tmp_path)["sweep"]["counts"]["completed"] == 2
    cp = _sweeplab(["resume", "s", "--backend", "local", "--trials", "4", "-q"], env, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert _status("s", env, tmp_path)["sweep"]["counts"]["completed"] == 4
