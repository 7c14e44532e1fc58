"""A base config given as a pipe (the shell's process substitution, `<(...)`, or any FIFO) is read once: the
command line checks it, the driver builds every trial's config from it, and the sweep records what it read, so
`sweeplab resume` finds it although the pipe is long gone. Each of them used to open the path again: the second
reader found the pipe empty (every trial failed: `steps` missing) or no file at all. Real shells, real pipes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TRIALS = Path(__file__).resolve().parent / "fixtures" / "trials.py"
SPEC = (f"function: {TRIALS}:quick\nmethod: random\nmetric: {{name: loss, goal: minimize}}\n"
        "budget: {trials: 2}\nparameters:\n  x: {min: 0.0, max: 1.0}\n")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="process substitution needs bash")


def _bash(tmp: Path, script: str) -> subprocess.CompletedProcess:
    """`script` run by bash in `tmp`, with `sweeplab` as a shell function running this interpreter's CLI."""
    env = {**os.environ, "SWEEPLAB_STORE": str(tmp / "store"), "COLUMNS": "200"}
    prelude = f'sweeplab() {{ "{sys.executable}" -m sweeplab "$@"; }}\n'
    return subprocess.run(["bash", "-c", prelude + script], cwd=tmp, env=env, capture_output=True, text=True,
                          timeout=120)


def _losses(tmp: Path, sweep: str) -> list[float]:
    cp = _bash(tmp, f"sweeplab status {sweep} --json")
    assert cp.returncode == 0, cp.stderr
    return [t["metrics"]["loss"] for t in json.loads(cp.stdout)["trials"]]


@pytest.fixture(scope="module")
def piped(tmp_path_factory) -> Path:
    """A finished sweep `p` whose base config came from a pipe (`steps: 4`: every trial's loss is 0.25)."""
    tmp = tmp_path_factory.mktemp("config-pipe")
    (tmp / "s.yaml").write_text(SPEC)
    cp = _bash(tmp, "sweeplab sweep s.yaml --config <(printf 'steps: 4\\n') --name p -q --workers 2")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return tmp


def test_a_sweep_whose_config_is_a_pipe_gives_every_trial_that_config(piped):
    """`sweeplab sweep s.yaml --config <(...)`: the command line's check read the pipe, and the driver found
    it empty (or no file at all) when it built the trials' configs."""
    assert _losses(piped, "p") == [0.25, 0.25]


def test_a_spec_whose_config_key_names_a_pipe(tmp_path):
    """The spec's own `config:` naming a pipe the command inherited (`3< <(...)`, /dev/fd/3)."""
    (tmp_path / "s.yaml").write_text(SPEC + "config: /dev/fd/3\n")
    cp = _bash(tmp_path, "sweeplab sweep s.yaml --name q -q --workers 1 3< <(printf 'steps: 5\\n')")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert _losses(tmp_path, "q") == [0.2, 0.2]


def test_resume_of_a_sweep_whose_config_was_a_pipe_uses_what_the_sweep_read(piped):
    """The pipe is gone (and /dev/fd/63 is nothing, or another file, in the resuming process)."""
    cp = _bash(piped, "sweeplab resume p --trials +1 -q")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert _losses(piped, "p") == [0.25, 0.25, 0.25]


def test_run_with_a_config_from_a_pipe(tmp_path):
    """`sweeplab run FILE:FN --config <(...)`: the path was resolved to /proc/PID/fd/pipe:[N], no file."""
    cp = _bash(tmp_path, f"sweeplab run {TRIALS}:quick --config <(printf 'steps: 5\\n') --name r -q")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert _losses(tmp_path, "r") == [0.2]


def test_sl_sweep_reads_a_named_fifo_config_once_per_sweep(tmp_path):
    """`sl.sweep` twice in one process, the spec's `config:` a named FIFO a writer fills anew for each: each
    sweep reads it once (a second read would wait for a writer that serves the next sweep) and gets its own
    text, not the text the process read before."""
    import threading

    import sweeplab as sl

    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    texts = ["steps: 4\n", "steps: 5\n"]
    next_sweep = threading.Event()

    def writer() -> None:
        for text in texts:
            with open(fifo, "w") as f:   # waits for the sweep's reader
                f.write(text)
            next_sweep.wait(60)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    spec = {"function": f"{TRIALS}:quick", "method": "random", "metric": {"name": "loss", "goal": "minimize"},
            "budget": {"trials": 1}, "config": str(fifo), "parameters": {"x": {"min": 0.0, "max": 1.0}}}
    losses = []
    for name in ("f1", "f2"):
        handle = sl.sweep(spec, store=tmp_path / "store", workers=1, name=name)
        assert handle is not None
        losses.append(_losses(tmp_path, name))
        next_sweep.set()
    thread.join(timeout=5)
    assert losses == [[0.25], [0.2]]
