"""How a command ends, in real processes: its exit code and what it says on stderr, for the endings that no
other module drives (docs/debugging.md#how-a-sweep-or-a-run-ends-exit-codes holds the whole table):

- a closed terminal (SIGHUP to the driver) stops the sweep as Ctrl-C does and exits 129;
- a reader gone from stdout (`| head -1`) ends a command with exit 1, silently, as click and rich do;
- a stderr that cannot be written (closed, full) never changes the exit code: the message is lost, not the code;
- a stdout that cannot be written (a full disk, /dev/full) or closed (`>&-`) is one error line, exit 1;
- how a trial ends (`sys.exit(n)`, its own KeyboardInterrupt, a command's exit code) -> the run's exit code;
- a `--smoke` check stopped by a signal has no verdict: 128 + the signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sweeplab.api

SRC = str(Path(sweeplab.api.__file__).resolve().parents[1])

TRIALS = """\
import os, time

def ok(config, run):
    return {"loss": float(config.get("x", 1))}

def exits(config, run):
    import sys
    code = config.get("code")
    sys.exit() if code == "none" else sys.exit(code)

def interrupts(config, run):
    raise KeyboardInterrupt

def silent(config, run):   # reports nothing: smoke mode's step limit never stops it
    open(os.environ["READY"], "w").close()
    for _ in range(600):
        if run.should_stop:
            return {"loss": 1.0}
        time.sleep(0.05)
    return {"loss": 1.0}

def waits(config, run):
    open(os.environ["READY"], "w").close()
    for step in range(600):
        run.log({"loss": 1.0}, step=step)
        if run.should_stop:
            return {"loss": 1.0}
        time.sleep(0.05)
    return {"loss": 1.0}
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    env["SWEEPLAB_STORE"] = str(tmp_path / "store")
    env["READY"] = str(tmp_path / "ready")
    return {**env, **extra}


def _spec(tmp_path: Path, function: str, values: str = "[1, 2]") -> str:
    (tmp_path / "tr.py").write_text(TRIALS)
    (tmp_path / f"{function}.yaml").write_text(f"function: tr.py:{function}\nmethod: grid\n"
                                               f"metric: {{name: loss, goal: minimize}}\n"
                                               f"parameters: {{x: {{values: {values}}}}}\n")
    return f"{function}.yaml"


def _sweeplab(tmp_path: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=tmp_path, env=_env(tmp_path),
                          timeout=120, **kw)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one finished sweep `ok` (two completed trials), which the tests only read."""
    tmp_path = tmp_path_factory.mktemp("store")
    cp = _sweeplab(tmp_path, "sweep", _spec(tmp_path, "ok"), "--name", "ok", "-q", capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    return tmp_path


def _sweep_state(tmp_path: Path, name: str) -> dict:
    cp = _sweeplab(tmp_path, "status", name, "--json", capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


MAIN_SCRIPT = """\
import sweeplab as sl
from tr import waits
if __name__ == "__main__":
    sl.main(waits)
"""
SWEEP_SCRIPT = """\
import sweeplab as sl
sl.sweep({"method": "grid", "parameters": {"x": {"values": [1]}}}, fn="tr.py:waits", name="hup", progress=False)
print("the script went on")
"""
# how a script is started, and how it ends after SIGHUP: the CLI and `sl.main` exit 129; `sl.sweep` lets the
# hang-up end the script as it would have without sweeplab (the sweep stopped and recorded first)
HANGUPS = [
    ("sweeplab sweep", None, 129),
    ("sl.main script", MAIN_SCRIPT, 129),
    ("sl.sweep script", SWEEP_SCRIPT, -signal.SIGHUP),
]


@pytest.mark.parametrize(("how", "script", "code"), HANGUPS, ids=[h[0] for h in HANGUPS])
def test_a_closed_terminal_stops_the_sweep_as_ctrl_c_does(tmp_path: Path, how: str, script: str | None,
                                                           code: int) -> None:
    """SIGHUP (the terminal closed, an ssh connection dropped) got its default action: the driver died at
    once, and the sweep was left `running (driver gone)` with its trials `running` until a resume fenced them.
    It stops the sweep as Ctrl-C does: the running trial is asked to stop, recorded `interrupted`, the sweep
    `stopped` (resumable), and the command exits 128 + SIGHUP, as the shell reports a process a hang-up
    ended."""
    spec = _spec(tmp_path, "waits", values="[1]")
    if script is None:
        cmd = ["-m", "sweeplab", "sweep", spec, "--name", "hup", "-q"]
    else:
        (tmp_path / "script.py").write_text(script)
        cmd = ["script.py", "--name", "hup", "-q"] if "sl.main" in script else ["script.py"]
    proc = subprocess.Popen([sys.executable, *cmd], cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "ready").exists(), proc.communicate(timeout=60)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert "SIGHUP: stopping 1 running trial(s); `sweeplab resume hup` continues" in err
    assert "the script went on" not in out
    data = _sweep_state(tmp_path, "hup")
    assert data["sweep"]["state"] == "stopped" and not data["sweep"].get("driver_gone"), data["sweep"]
    assert [t["state"] for t in data["trials"]] == ["interrupted"], data["trials"]


def test_a_sweep_started_under_nohup_ignores_the_hang_up(tmp_path: Path) -> None:
    """`nohup sweeplab sweep ...`: SIGHUP ignored before the command starts stays ignored."""
    spec = _spec(tmp_path, "waits", values="[1]")
    cmd = [sys.executable, "-c", "import signal, sys, runpy; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
           "sys.argv = ['sweeplab', *sys.argv[1:]]; runpy.run_module('sweeplab', run_name='__main__')",
           "sweep", spec, "--name", "nohup", "-q"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "ready").exists(), proc.communicate(timeout=60)
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert proc.poll() is None   # still running: the hang-up was ignored
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "SIGHUP" not in err and "SIGTERM" in err, err   # stopped by the SIGTERM alone, however late it came
    assert _sweep_state(tmp_path, "nohup")["sweep"]["state"] == "stopped"


PROGRAM = "import sys\nprint('giving up', file=sys.stderr)\nsys.exit(int(sys.argv[1].split('=')[1]))\n"
# how a one-trial sweep's trial ends -> the command's exit code and what its stderr says
TRIAL_ENDINGS = [
    ("sys.exit(3)", ["tr.py:exits", "code=3"], 1, "trial 0: SystemExit: 3"),
    ("sys.exit('why')", ["tr.py:exits", "code=why"], 1, "trial 0: SystemExit: why"),
    ("sys.exit(0)", ["tr.py:exits", "code=0"], 0, ""),        # ends the function as a return would
    ("sys.exit()", ["tr.py:exits", "code=none"], 0, ""),
    ("KeyboardInterrupt", ["tr.py:interrupts"], 1, "trial 0: KeyboardInterrupt"),   # the function's own
    ("command exits 3", ["prog.py", "3"], 1, "trial 0: command exited with code 3: giving up"),
    ("command exits 0", ["prog.py", "0"], 0, ""),
]


@pytest.mark.parametrize(("args", "code", "says"), [t[1:] for t in TRIAL_ENDINGS], ids=[t[0] for t in TRIAL_ENDINGS])
def test_how_a_trial_ends_is_the_exit_code_of_its_run(tmp_path: Path, args: list[str], code: int, says: str) -> None:
    """`sys.exit(n)` in a function trial and a command trial's exit code: n != 0 fails the trial (exit 1,
    the reason on stderr, never the worker's own exit code passed through), 0 completes it."""
    (tmp_path / "tr.py").write_text(TRIALS)
    if args[0] == "prog.py":
        (tmp_path / "prog.py").write_text(PROGRAM)
        (tmp_path / "cmd.yaml").write_text(f"program: prog.py\nmethod: grid\nparameters: {{code: {{values: "
                                           f"[{args[1]}]}}}}\ntrial: {{retries: 0}}\n")
        cmd = ["sweep", "cmd.yaml", "--name", "t", "-q"]
    else:
        cmd = ["run", *args, "--name", "t", "-q"]
    cp = _sweeplab(tmp_path, *cmd, capture_output=True, text=True)
    assert cp.returncode == code, cp.stderr
    if says:
        assert cp.stderr.startswith(f"error: sweep t failed: no trial completed (1 failed): {says}"), cp.stderr
    else:
        assert "error" not in cp.stderr, cp.stderr


# (command, exit code with every stream working): the commands a script pipes or redirects
READERS = [
    (("status",), 0),
    (("status", "ok"), 0),
    (("status", "--json"), 0),
    (("best", "ok", "--json"), 0),
    (("best", "ok"), 0),
    (("--version",), 0),
    (("--help",), 0),
    (("sweep", "ok.yaml", "--dry-run"), 0),
    (("status", "nosuch"), 2),
    (("frobnicate",), 2),
    (("sweep", "nope.yaml"), 2),
]


@pytest.mark.parametrize(("args", "code"), READERS, ids=[" ".join(a) for a, _ in READERS])
def test_a_stderr_nobody_reads_keeps_the_exit_code(store: Path, args: tuple[str, ...], code: int) -> None:
    """`sweeplab status nosuch 2>&1 | true`, `2>&-`: the error message cannot be written. It used to turn exit
    2 (bad input) into 1 (rich's broken-pipe exit, or the OSError of the write); the code is what a script
    reads, so it stays what the command meant."""
    read, write = os.pipe()
    os.close(read)
    try:
        cp = _sweeplab(store, *args, stdout=subprocess.DEVNULL, stderr=write)
    finally:
        os.close(write)
    assert cp.returncode == code
    closed = _sweeplab(store, *args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                       preexec_fn=lambda: os.close(2))
    assert closed.returncode == code


@pytest.mark.parametrize(("args", "code"), READERS, ids=[" ".join(a) for a, _ in READERS])
def test_a_full_stderr_keeps_the_exit_code(store: Path, args: tuple[str, ...], code: int) -> None:
    with open("/dev/full", "w") as full:
        cp = _sweeplab(store, *args, stdout=subprocess.DEVNULL, stderr=full)
    assert cp.returncode == code


@pytest.mark.parametrize(("args", "code"), READERS, ids=[" ".join(a) for a, _ in READERS])
def test_a_stdout_reader_gone_ends_with_exit_1_and_no_traceback(store: Path, args: tuple[str, ...],
                                                               code: int) -> None:
    """`sweeplab status | head -1`, `sweeplab best --json | true`: exit 1 and nothing on stderr, as click and
    rich end (Python's documented way; git and coreutils die of SIGPIPE, 141); bad input still exits 2."""
    read, write = os.pipe()
    os.close(read)
    try:
        cp = _sweeplab(store, *args, stdout=write, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write)
    assert cp.returncode == (code or 1), cp.stderr
    assert "Traceback" not in cp.stderr and "Exception ignored" not in cp.stderr
    if code == 0:
        assert cp.stderr == ""


@pytest.mark.parametrize(("args", "code"), READERS, ids=[" ".join(a) for a, _ in READERS])
def test_a_stdout_that_cannot_be_written_is_one_error_line(store: Path, args: tuple[str, ...], code: int) -> None:
    """`sweeplab status > out.txt` on a full disk (here /dev/full): a rich traceback of the OSError ended the
    command; now one line naming standard output and the error, exit 1 (bad input keeps its 2)."""
    with open("/dev/full", "w") as full:
        cp = _sweeplab(store, *args, stdout=full, stderr=subprocess.PIPE, text=True)
    assert cp.returncode == (code or 1), cp.stderr
    assert "Traceback" not in cp.stderr and "Exception ignored" not in cp.stderr, cp.stderr
    if code == 0:
        assert cp.stderr.strip() == "error: cannot write standard output: No space left on device", cp.stderr


SMOKE_STOPS = [("Ctrl-C", signal.SIGINT, 130), ("SIGHUP", signal.SIGHUP, 129), ("SIGTERM", signal.SIGTERM, 143)]


@pytest.mark.parametrize(("how", "sig", "code"), SMOKE_STOPS, ids=[s[0] for s in SMOKE_STOPS])
def test_a_smoke_check_stopped_by_a_signal_has_no_verdict(tmp_path: Path, how: str, sig: int, code: int) -> None:
    """Ctrl-C during `--smoke` printed `smoke check FAILED: 0 of 1 trial(s) failed, and none completed` and
    exited 1, as if the code were broken. A check that was stopped has no verdict: it says so and exits 128 +
    the signal, SIGTERM included (the driver's 0 for a preemption would read as "passed" here)."""
    spec = _spec(tmp_path, "silent", values="[1]")
    proc = subprocess.Popen([sys.executable, "-m", "sweeplab", "sweep", spec, "--smoke", "-q"], cwd=tmp_path,
                            env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "ready").exists(), proc.communicate(timeout=60)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert "FAILED" not in err and f"smoke check interrupted ({how}): no verdict" in err, err


@pytest.mark.parametrize(("args", "code"), READERS, ids=[" ".join(a) for a, _ in READERS])
def test_a_closed_stdout_is_one_error_line_whatever_the_output(store: Path, args: tuple[str, ...], code: int) -> None:
    """`sweeplab status >&-` (a cron line, a daemon with no stdout): `status --json` said `standard output is
    closed`, exit 1, while the table of `status` went nowhere and exited 0. Every command's output now says
    so (bad input keeps its 2)."""
    cp = _sweeplab(store, *args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                   preexec_fn=lambda: os.close(1))
    assert cp.returncode == (code or 1), cp.stderr
    if code == 0:
        assert cp.stderr.startswith("error: standard output is closed") and len(cp.stderr.splitlines()) == 1, \
            cp.stderr
