"""`sweeplab repro` of a multi-process trial (`resources.workers` > 1) replays it as it ran: its ranks, with
the torchrun environment, the failing rank in the foreground; through the real CLI and real processes.

The trials here read RANK and WORLD_SIZE themselves (no torch: each rank costs a sweeplab import only)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

RANKED = """\
import os, sys, time

def meet(rank, world, seed):   # a rendezvous, as init_process_group's: rank 1 waits for rank 0
    print(f"replica rank={rank} world={world} seed={seed}", flush=True)
    mark = f"rank0-{os.environ.get('MASTER_PORT')}"
    if rank == "0":
        open(mark, "w").close()
    for _ in range(400):
        if rank != "1" or os.path.exists(mark):
            break
        time.sleep(0.05)

def train(config, run):
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    meet(rank, world, run.seed)
    if rank == "1":
        raise ValueError(f"rank {rank} of {world} fails")
    return {"loss": 1.0}

if __name__ == "__main__":   # the same as a command trial
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    meet(rank, world, os.environ.get("SWEEPLAB_SEED"))
    if rank == "1":
        print(f"rank {rank} of {world} fails", file=sys.stderr)
        sys.exit(3)
"""

TWO_RANKS = "method: grid\nseed: 3\nresources: {cpus: 2, workers: 2}\nparameters:\n  a: {value: 1}\n"


@pytest.mark.parametrize("kind", ["function", "command"])
def test_repro_of_a_multi_process_trial_replays_its_failing_rank_among_its_peers(cli, kind):
    """Rank 1 of 2 failed: replayed as one process (RANK unset, world 1) it ran rank 0's path and did not
    fail; the replay starts both ranks with the torchrun variables, rank 1 in the foreground."""
    (cli.tmp / "ranked.py").write_text(RANKED)
    target = "function: ranked.py:train" if kind == "function" else "program: ranked.py\ncommand: " \
        "[\"${env}\", \"${interpreter}\", \"${program}\"]"
    f = cli.spec("rk", f"{target}\n{TWO_RANKS}")
    cli("sweep", str(f), "--name", "rk", "-q")
    (t,) = cli.status("rk")["trials"]
    assert t["state"] == "failed" and t["reason"].startswith("rank 1: "), t
    cp = cli("repro", "rk/0")
    out = cp.stdout + cp.stderr
    assert cp.returncode == (1 if kind == "function" else 3), out
    assert "2 processes" in out and "rank 1 in the foreground" in " ".join(out.split()), out
    assert "replica rank=1 world=2" in out and "replica rank=0 world=2" in out, out
    assert "the failure reproduced" in out and "rank 1 of 2 fails" in out, out


NAN_ON_EVERY_RANK = """\
import math, os

def train(config, run):
    rank = int(os.environ["RANK"])
    replay = run.captured("batch")
    if replay is not None:
        print(f"rank {rank} replays {replay}", flush=True)
    for step in range(3):
        batch = {"rank": rank, "step": step, "x": math.nan if (step == 1 and rank == 1) else 1.0}
        run.capture("batch", batch)
        # the loss every rank logs is reduced over the ranks (all_reduce_mean): rank 1's NaN is everyone's
        run.log({"loss": math.nan if step == 1 else 1.0}, step=step)
        if replay is not None:   # (no run.should_stop: without a collective, a rank could leave before step 1)
            break
    return {"loss": 1.0}
"""


def test_each_rank_of_a_nan_trial_keeps_and_replays_its_own_batch(cli):
    """The NaN came from rank 1's share of the batch; rank 0's batch was fine. Only rank 0's capture was
    kept, so the replay had no offending input: every rank's capture is kept, and each replayed rank gets
    its own."""
    (cli.tmp / "nan_ranks.py").write_text(NAN_ON_EVERY_RANK)
    f = cli.spec("nr", f"function: nan_ranks.py:train\nmonitors: [nan]\n{TWO_RANKS}")
    cli("sweep", str(f), "--name", "nr", "-q")
    (t,) = cli.status("nr")["trials"]
    assert t["state"] == "stopped_by_rule", t
    cp = cli("repro", "nr/0")
    out = cp.stdout + cp.stderr
    assert "rank 0 replays {'rank': 0, 'step': 1" in out, out
    assert "rank 1 replays {'rank': 1, 'step': 1, 'x': nan}" in out, out
