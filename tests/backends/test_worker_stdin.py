"""A function trial runs in the worker process, whose stdin carries the driver's commands: the trial must
neither see them nor wait on them. A trial that reads stdin gets EOF (as a command trial does, and as under
W&B's agent), and a process it forks can close its stdin (multiprocessing's children do, torch DataLoader
workers among them) without waiting forever for the lock of the worker's command reader."""

from __future__ import annotations

import pytest

from sweeplab.backends.events import EventKind
from sweeplab.backends.local import LocalBackend, plan_slots
from sweeplab.testing.backends import collect, make_task

pytestmark = pytest.mark.slow

TRIALS = '''
import multiprocessing
import sys


def _square(x, queue):
    queue.put(x * x)


def forks(config, run):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_square, args=(config["x"], queue))
    child.start()
    value = queue.get(timeout=60)
    child.join(60)
    return {"loss": value, "exitcode": child.exitcode}


def reads_stdin(config, run):
    return {"loss": len(sys.stdin.readline())}


def reruns_main(config, run):
    # what Lightning's strategy="ddp" does for each further device: its main program again, as a child
    import __main__
    import os
    import subprocess

    spec = __main__.__spec__
    cmd = [sys.executable, os.path.abspath(sys.argv[0])] if spec is None else [sys.executable, "-m", spec.name]
    child = subprocess.run(cmd + sys.argv[1:], env={**os.environ, "LOCAL_RANK": "1"}, capture_output=True,
                           text=True, timeout=30)
    print(child.stderr, file=sys.stderr)
    return {"loss": float(child.returncode), "explained": float("resources: {workers: N}" in child.stderr)}
'''


@pytest.fixture
def backend():
    b = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]))
    b.start()
    yield b
    b.shutdown(grace=0.0)


def test_a_function_trial_can_fork_a_multiprocessing_child(backend, tmp_path):
    module = tmp_path / "forking.py"
    module.write_text(TRIALS)
    for trial in (1, 2):   # the same worker, twice: its command reader is blocked on stdin both times
        backend.submit(make_task(tmp_path, trial, f"{module}:forks", config={"x": 3.0}))
        end = collect(backend, [trial], timeout=60)[trial][-1]
        assert end.kind is EventKind.FINISHED, end.data
        assert end.data["metrics"] == {"loss": 9.0, "exitcode": 0.0}


def test_a_function_trial_reading_stdin_gets_eof_not_the_drivers_commands(backend, tmp_path):
    module = tmp_path / "reading.py"
    module.write_text(TRIALS)
    backend.submit(make_task(tmp_path, 1, f"{module}:reads_stdin"))
    end = collect(backend, [1], timeout=60)[1][-1]
    assert end.kind is EventKind.FINISHED and end.data["metrics"] == {"loss": 0.0}
    backend.submit(make_task(tmp_path, 2, f"{module}:reads_stdin"))   # the worker still gets its commands
    assert collect(backend, [2], timeout=60)[2][-1].kind is EventKind.FINISHED


def test_a_worker_started_again_by_its_trial_says_why_it_cannot_run(backend, tmp_path):
    """Lightning's strategy="ddp" with devices=2 in a one-process trial runs the trial's main program again,
    which is the worker: that copy has no event pipe and ended at once without a word (exit 1; Lightning then
    kills the trial). It says what happened and what to do instead."""
    module = tmp_path / "rerun.py"
    module.write_text(TRIALS)
    backend.submit(make_task(tmp_path, 1, f"{module}:reruns_main"))
    end = collect(backend, [1], timeout=60)[1][-1]
    assert end.kind is EventKind.FINISHED, end.data
    assert end.data["metrics"]["loss"] != 0 and end.data["metrics"]["explained"] == 1.0, end.data
