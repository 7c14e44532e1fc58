"""A 2-process DDP trial (gloo, CPU) through the local backend reproduces the 1-process run.

`train` is the same code for both: `sweeplab.torch.strategy()` picks DDP from the torchrun environment the
backend sets. Global batches hold the same samples on 1 or 2 processes and DDP averages gradients, so the
final loss matches up to floating-point reduction order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeplab.backends.events import Event, EventKind
from sweeplab.backends.local import LocalBackend, plan_slots
from sweeplab.testing.backends import collect, make_task

pytest.importorskip("torch")

HERE = str(Path(__file__).resolve())

pytestmark = pytest.mark.slow


def train(config, run):
    import torch

    import sweeplab.torch

    strategy = sweeplab.torch.strategy()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(256, 1, generator=g)
    dataset = torch.utils.data.TensorDataset(x, y)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=float(config["lr"]))
    model, optimizer = strategy.setup(model, optimizer)
    with strategy:
        for epoch in range(int(config["epochs"])):
            total, count = 0.0, 0
            for xb, yb in strategy.loader(dataset, batch_size=64, seed=3):
                xb, yb = strategy.to_device((xb, yb))
                loss = torch.nn.functional.mse_loss(model(xb), yb)
                strategy.backward(loss)
                strategy.step(optimizer)
                total, count = total + float(loss) * len(xb), count + len(xb)
            train_loss = strategy.all_reduce_mean(total / count)
            run.log({"train_loss": train_loss, "world": float(strategy.world_size)}, step=epoch)
        with torch.no_grad():
            final = float(torch.nn.functional.mse_loss(strategy.unwrap(model)(x), y))
    return {"loss": final, "world": float(strategy.world_size)}


def _run(tmp_path: Path, trial: int, world_size: int) -> dict[str, float]:
    b = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]), hide_gpus=True)
    b.start()
    try:
        b.submit(make_task(tmp_path, trial, f"{HERE}:train", config={"lr": 0.05, "epochs": 4},
                           world_size=world_size, env={"OMP_NUM_THREADS": "1"}))
        ev = collect(b, [trial], timeout=180)[trial]
    finally:
        b.shutdown(grace=0.0)
    assert ev[-1].kind is EventKind.FINISHED, ev[-1].data
    logged = [p for e in ev if e.kind is EventKind.METRICS for p in e.data["points"]]
    assert [p[0] for p in logged if p[1] == "train_loss"] == [0, 1, 2, 3]   # rank 0 only, once per epoch
    return ev[-1].data["metrics"]


def test_two_process_ddp_trial_matches_one_process(tmp_path):
    one = _run(tmp_path, 1, 1)
    two = _run(tmp_path, 2, 2)
    assert one["world"] == 1.0 and two["world"] == 2.0
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-4, abs=1e-6)
    # and training did something: the tolerance above is not met by chance
    assert one["loss"] < 0.5 * _initial_loss()


def _initial_loss() -> float:
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(256, 1, generator=g)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(x), y))


# A DDP program of the user's own (a command trial), launching its second rank itself as Lightning's `strategy="ddp"`
# and torchrun do: rank 1 breaks, and rank 0, in the gradients' all-reduce, fails in consequence.
_SELF_LAUNCHED = '''
import os, subprocess, sys
import torch
import torch.distributed as dist
rank = int(os.environ.get("RANK", "0"))
if rank == 0:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], WORLD_SIZE="2")
    peer = subprocess.Popen([sys.executable, *sys.argv], env=dict(os.environ, RANK="1"))
dist.init_process_group("gloo", rank=rank, world_size=2)
if rank == 1:
    raise ValueError("rank 1 broke on purpose")
dist.all_reduce(torch.ones(4))
'''


def test_a_command_trial_whose_rank_1_breaks_fails_with_rank_1s_error_not_rank_0s_symptom(cli):
    """torch prefixes every rank's traceback with `[rankN]: `. The reason was the last line of stderr, rank 0's
    "RuntimeError: ... Connection closed by peer ... typically caused by a remote worker crashing", and the
    traceback kept the last 20 lines of it: the cause, rank 1's error, was only in the log."""
    import socket
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (cli.tmp / "prog.py").write_text(_SELF_LAUNCHED)
    spec = cli.spec("s", f"command: [{sys.executable}, prog.py, '{port}']\nmethod: grid\n"
                         "metric: {name: loss}\ntrial: {retries: 0}\n")
    cp = cli("sweep", str(spec), "--name", "d", "--workers", "1", "-q", timeout=90)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    (trial,) = cli.status("d")["trials"]
    assert trial["state"] == "failed"
    assert trial["reason"] == "command exited with code 1: rank 1: ValueError: rank 1 broke on purpose", trial


def rank_1_breaks_in_the_all_reduce(config, run):
    """Both ranks in a loop of real all-reduces (gloo); at the 5th, rank 1 breaks as config["how"] says."""
    import os
    import signal

    import torch
    import torch.distributed as dist

    import sweeplab.torch

    with sweeplab.torch.strategy():
        for step in range(10_000):
            if run.rank == 1 and step == 5:
                if config["how"] == "exit":
                    os._exit(3)
                if config["how"] == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if config["how"] == "term":   # SIGTERM's default action (before a handler, or none)
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    os.kill(os.getpid(), signal.SIGTERM)
                raise ValueError("rank 1 broke on purpose")
            dist.all_reduce(torch.ones(4))
    return {"steps": 10_000.0}


@pytest.mark.parametrize("how, reason", [("raise", "rank 1: ValueError: rank 1 broke on purpose"),
                                         ("exit", "rank 1: process exited with code 3"),
                                         ("kill", "rank 1: process killed by signal SIGKILL")],
                         ids=["raises", "os._exit", "SIGKILL"])
def test_the_rank_that_broke_is_the_trials_failure_not_the_peer_that_lost_it(tmp_path, how, reason):
    """Rank 0, in the all-reduce, fails a moment after rank 1 with gloo's "Connection closed (reset) by peer ...
    typically caused by a remote worker crashing". The trial failed with that symptom of rank 0's in most runs:
    the supervisor took the failure it heard of first, and rank 0's error reached it before rank 1's (its own
    report, sent after the rank cleaned up, or its exit, seen at the next poll)."""
    b = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]), hide_gpus=True)
    b.start()
    try:
        b.submit(make_task(tmp_path, 1, f"{HERE}:rank_1_breaks_in_the_all_reduce", config={"how": how},
                           world_size=2, env={"OMP_NUM_THREADS": "1"}))
        end = collect(b, [1], timeout=120)[1][-1]
    finally:
        b.shutdown(grace=0.0)
    assert end.kind is EventKind.FAILED
    assert end.data["reason"].startswith(reason) and end.data["rank"] == 1, end.data["reason"]


def test_a_rank_killed_by_sigterm_in_the_all_reduce_preempts_the_trial_though_its_peer_fails(tmp_path):
    """SIGTERM to one rank only: it dies, rank 0 fails in the all-reduce with "Connection closed by peer"; that
    symptom must not make the preemption a failure, whichever of the two the supervisor hears of first."""
    b = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]), hide_gpus=True)
    b.start()
    try:
        b.submit(make_task(tmp_path, 1, f"{HERE}:rank_1_breaks_in_the_all_reduce", config={"how": "term"},
                           world_size=2, env={"OMP_NUM_THREADS": "1"}))
        end = collect(b, [1], timeout=120)[1][-1]
    finally:
        b.shutdown(grace=0.0)
    assert end.kind is EventKind.PREEMPTED, end.data


def test_on_ray_too_the_rank_that_broke_is_the_trials_failure_not_the_peer_that_lost_it(tmp_path):
    """The Ray backend's gang (no Ray needed): rank 0's "Connection closed by peer" arrives first; the others are
    not killed at once (rank 1 is still saying why it broke), and rank 1's own error is the trial's. Before,
    the first failure heard of was the trial's and the others were killed at once, losing rank 1's report."""
    import time

    from sweeplab.backends.ray._gang import STOP_SETTLE, Gang, Op

    def ev(kind, **data):
        return Event(kind, 7, 1, time.time(), data)

    symptom = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1929"
    g = Gang(make_task(tmp_path, 7, "x:y", world_size=3), 3)
    out, ops = g.accept(0, ev(EventKind.FAILED, reason=symptom))
    assert out == [] and ops == []
    out, ops = g.accept(1, ev(EventKind.FAILED, reason="ValueError: rank 1 broke on purpose", traceback="tb"))
    assert out == [] and ops == [(Op.KILL, 2)]
    (end,), _ = g.accept(2, ev(EventKind.FAILED, reason="killed"))
    assert end.kind is EventKind.FAILED and end.data["reason"] == "rank 1: ValueError: rank 1 broke on purpose"
    assert end.data["rank"] == 1 and end.data["traceback"] == "tb"

    # only symptoms: the others are killed after a while all the same, and the first symptom is the error
    g = Gang(make_task(tmp_path, 7, "x:y", world_size=2), 2)
    g.accept(0, ev(EventKind.FAILED, reason=symptom))
    assert g.tick(time.monotonic() + STOP_SETTLE + 1) == [(Op.KILL, 1)]
    (end,), _ = g.accept(1, ev(EventKind.FAILED, reason="killed"))
    assert end.data["reason"] == f"rank 0: {symptom}"
