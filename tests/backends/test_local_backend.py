from __future__ import annotations

from pathlib import Path

import pytest

from sweeplab.backends.local import LocalBackend, plan_slots
from sweeplab.errors import UserError
from sweeplab.testing.backends import BackendContract

TRIALS = str(Path(__file__).resolve().parents[1] / "fixtures" / "trials.py")

pytestmark = pytest.mark.slow


class TestLocalBackendContract(BackendContract):
    @pytest.fixture
    def make_backend(self):
        return lambda n: LocalBackend(plan_slots(n, cpus=0, gpus=0, gpu_ids=[]))

    @pytest.fixture
    def trials_file(self):
        return TRIALS


@pytest.mark.parametrize(
    "workers, gpus, ids, expect",
    [
        (2, 1, [0, 1], [(0,), (1,)]),
        (4, 0.5, [0, 1], [(0,), (0,), (1,), (1,)]),
        (3, 0.25, [0, 1], [(0,), (0,), (0,)]),
        (1, 2, [0, 1, 2, 3], [(0, 1)]),
        (2, 0, [0], [(), ()]),
    ],
    ids=["one-each", "halves", "quarters", "two-per-trial", "cpu-only"],
)
def test_plan_slots_assigns_devices_without_splitting_a_trial(workers, gpus, ids, expect):
    slots = plan_slots(workers, cpus=0, gpus=gpus, gpu_ids=ids)
    assert [s.gpus for s in slots] == expect


@pytest.mark.parametrize(
    "workers, gpus, ids, cpus, match",
    [(3, 1, [0, 1], 0, "need 3 GPUs"), (5, 0.5, [0, 1], 0, "4 trials fit"), (1, 1.5, [0, 1], 0, "whole number"),
     (3, 0, [], 1, "this machine has")],
    ids=["too-few-gpus", "fractions-overflow", "fraction-above-one", "too-many-cpus"],
)
def test_plan_slots_refuses_what_cannot_fit(workers, gpus, ids, cpus, match):
    with pytest.raises(UserError, match=match):
        plan_slots(workers, cpus=cpus, gpus=gpus, gpu_ids=ids, cpu_count=2)


def test_gpu_slot_sets_cuda_visible_devices(tmp_path):
    from sweeplab.testing.backends import collect, make_task

    b = LocalBackend(plan_slots(2, cpus=0, gpus=0.5, gpu_ids=[3]))
    b.start()
    try:
        script = tmp_path / "p.py"
        script.write_text("import os, json\nprint('@sweeplab ' + json.dumps({'dev': "
                          "float(os.environ['CUDA_VISIBLE_DEVICES'])}))\n")
        b.submit(make_task(tmp_path, 1, command=["python3", str(script)]))
        ev = collect(b, [1])[1]
        points = [p for e in ev if e.kind.value == "metrics" for p in e.data["points"]]
        assert points[0][2] == 3.0
    finally:
        b.shutdown()


class TestForkedWorkersContract(BackendContract):
    """The same contract with every worker forked from a fork server (backends/forkserver.py)."""

    @pytest.fixture
    def make_backend(self):
        return lambda n: LocalBackend(plan_slots(n, cpus=0, gpus=0, gpu_ids=[]), preload=("decimal",),
                                      fork_server=True)

    @pytest.fixture
    def trials_file(self):
        return TRIALS


@pytest.mark.parametrize("kind", ["function", "command"])
def test_sigterm_to_a_worker_whose_trial_has_not_started_preempts_the_trial(tmp_path, kind):
    """A SIGTERM from outside (a spot agent, a memory daemon) reaching a worker after its trial was sent but
    before the attempt began (here: the worker still imports the trial's libraries) ended the worker with
    exit 0, and the trial FAILED ('worker process exited with code 0'). It is a preemption, as SIGTERM to a
    running trial is: the trial is requeued."""
    import os
    import signal
    import time

    from sweeplab.backends.events import EventKind
    from sweeplab.testing.backends import collect, make_task

    marker = tmp_path / "importing"
    (tmp_path / "slowlib.py").write_text(
        f"import pathlib, time\npathlib.Path({str(marker)!r}).write_text('1')\ntime.sleep(30)\n")
    (tmp_path / "fn.py").write_text("def f(config):\n    return {'loss': 1.0}\n")
    b = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]), env={"PYTHONPATH": str(tmp_path)},
                     preload=("slowlib",))
    b.start()
    try:
        task = (make_task(tmp_path, 1, command=["python3", "-c", "print(1)"]) if kind == "command"
                else make_task(tmp_path, 1, f"{tmp_path / 'fn.py'}:f"))
        b.submit(task)
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists()
        os.kill(b._workers[0].proc.pid, signal.SIGTERM)
        end = collect(b, [1])[1][-1]
        assert end.kind is EventKind.PREEMPTED, end.data
    finally:
        b.shutdown(grace=0.0)
