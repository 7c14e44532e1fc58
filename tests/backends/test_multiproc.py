"""Multi-process trials through the local backend: real rank processes, torchrun environment, one outcome.

The trial functions below are module-level so that the rank processes can import this file as a target.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from sweeplab.backends.events import EventKind
from sweeplab.backends.local import LocalBackend, plan_slots
from sweeplab.backends.multiproc import free_port, rank_env
from sweeplab.testing.backends import collect, make_task

HERE = str(Path(__file__).resolve())


# ------------------------------------------------------------------------------------ trial functions
def report_env(config, run):
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    seen = {n: os.environ.get(n) for n in names}
    seen["run_rank"] = run.rank
    Path(config["out"], f"rank{run.rank}.json").write_text(json.dumps(seen))
    for step in range(3):
        run.log({"who": float(run.rank)}, step=step)
    return {"who": float(run.rank)}


def one_rank_fails(config, run):
    if run.rank == int(config["bad"]):
        if config.get("how") == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        raise ValueError(f"rank {run.rank} broke on purpose")
    while not run.should_stop:   # the healthy rank would wait forever for its peer
        time.sleep(0.05)
    return {"done": 1.0}


def until_stopped(config, run):
    step = 0
    while not run.should_stop:
        run.log({"step": float(step)}, step=step)
        step += 1
        time.sleep(0.02)
    Path(config["out"], f"stopped{run.rank}").write_text(str(step))
    return {"steps": float(step)}


# ------------------------------------------------------------------------------------ tests
@pytest.fixture
def backend():
    b = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]))
    b.start()
    yield b
    b.shutdown(grace=0.0)


def test_rank_env_is_the_torchrun_set():
    env = rank_env(1, 4, 29500, threads=2)
    assert env["RANK"] == env["LOCAL_RANK"] == "1"
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"]) == \
        ("4", "4", "127.0.0.1", "29500")
    assert env["OMP_NUM_THREADS"] == "2"
    assert 0 < free_port() < 65536


@pytest.mark.slow
def test_each_rank_gets_its_environment_and_only_rank_zero_reports(backend, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    backend.submit(make_task(tmp_path, 1, f"{HERE}:report_env", config={"out": str(out)}, world_size=3))
    ev = collect(backend, [1])[1]
    assert ev[-1].kind is EventKind.FINISHED, ev[-1].data
    assert ev[-1].data["metrics"] == {"who": 0.0}
    seen = [json.loads((out / f"rank{r}.json").read_text()) for r in range(3)]
    assert [s["RANK"] for s in seen] == ["0", "1", "2"] == [s["LOCAL_RANK"] for s in seen]
    assert [s["run_rank"] for s in seen] == [0, 1, 2]
    assert {s["WORLD_SIZE"] for s in seen} == {"3"} and {s["MASTER_ADDR"] for s in seen} == {"127.0.0.1"}
    assert len({s["MASTER_PORT"] for s in seen}) == 1
    points = [p for e in ev if e.kind is EventKind.METRICS for p in e.data["points"]]
    assert [(p[0], p[2]) for p in points] == [(0, 0.0), (1, 0.0), (2, 0.0)]
    assert sum(e.kind is EventKind.STARTED for e in ev) == 1


@pytest.mark.slow
@pytest.mark.parametrize("how, expect", [("raise", "ValueError: rank 1 broke on purpose"),
                                         ("segfault", "SIGSEGV")], ids=["raises", "segfault"])
def test_a_failing_rank_fails_the_trial_with_its_own_error(backend, tmp_path, how, expect):
    backend.submit(make_task(tmp_path, 1, f"{HERE}:one_rank_fails", config={"bad": 1, "how": how},
                             world_size=2))
    end = collect(backend, [1], timeout=60)[1][-1]
    assert end.kind is EventKind.FAILED
    assert end.data["reason"].startswith("rank 1: ") and expect in end.data["reason"]
    assert end.data["rank"] == 1
    if how == "raise":
        assert "one_rank_fails" in end.data["traceback"]
    # the worker survives for the next trial
    backend.submit(make_task(tmp_path, 2, f"{HERE}:until_stopped", config={"out": str(tmp_path)}, world_size=2))
    backend.stop(2)
    assert collect(backend, [2])[2][-1].kind is EventKind.FINISHED


@pytest.mark.slow
def test_stop_reaches_every_rank(backend, tmp_path):
    backend.submit(make_task(tmp_path, 1, f"{HERE}:until_stopped", config={"out": str(tmp_path)}, world_size=2))

    def on_event(ev):
        if ev.kind is EventKind.METRICS:
            backend.stop(1)

    end = collect(backend, [1], on_event=on_event)[1][-1]
    assert end.kind is EventKind.FINISHED and end.data["stopped"] is True
    assert (tmp_path / "stopped0").exists() and (tmp_path / "stopped1").exists()


def fast_curve(config, run):
    """Nine reports as fast as they can go: only a trial that waits for the verdict at its rung stops there."""
    for step in range(1, 10):
        run.log({"loss": config["x"] * (10 - step)}, step=step)
        if run.should_stop:
            break
    return {"loss": config["x"]}


@pytest.mark.slow
def test_a_multi_process_trial_waits_for_the_verdict_at_its_rung(tmp_path):
    """ASHA (eta 2, rungs 1, 2, 4, 8) with 2-rank trials in turn: trial 1 is worse than trial 0 at rung 1, and
    rank 0 waits there for the verdict (relayed by its supervisor), so it is pruned at step 1 instead of
    racing through its nine reports before the stop arrives (it completed, before)."""
    from sweeplab import run_sweep
    from sweeplab.store import Store, queries

    spec = {"function": f"{HERE}:fast_curve", "method": "grid", "metric": {"name": "loss", "goal": "minimize"},
            "resources": {"workers": 2, "cpus": 1}, "budget": {"trials": 2},
            "early_terminate": {"type": "asha", "min_iter": 1, "max_iter": 9, "eta": 2},
            "parameters": {"x": {"values": [0.1, 0.9]}}}
    run_sweep(spec, store=tmp_path / "st", workers=1, name="ddp")
    st = Store.open(tmp_path / "st", readonly=True)
    try:
        trials = queries.sweep_status(st, "ddp")["trials"]
        pruned = queries.trial_detail(st, "ddp", 1)
    finally:
        st.close()
    assert [t["state"] for t in trials] == ["completed", "pruned"], trials
    assert pruned["last_step"] == 1, pruned


def busy_ranks(config, run):
    """Each rank writes its pid and then computes without ever looking at run.should_stop."""
    Path(config["out"], f"pid{run.rank}").write_text(str(os.getpid()))
    while True:
        sum(range(10_000))


@pytest.mark.slow
def test_ranks_die_with_their_worker_even_when_it_is_killed_alone(backend, tmp_path):
    import psutil

    backend.submit(make_task(tmp_path, 1, f"{HERE}:busy_ranks", config={"out": str(tmp_path)}, world_size=2))
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"pid{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.05)
    ranks = [int((tmp_path / f"pid{r}").read_text()) for r in (0, 1)]
    worker = {psutil.Process(p).ppid() for p in ranks}   # the ranks' supervisor: the trial's worker
    assert len(worker) == 1
    os.kill(worker.pop(), signal.SIGKILL)    # the worker alone (an OOM kill), not its process group

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 10.0    # without polling the backend: the kernel ends them
    while time.monotonic() < deadline and any(alive(p) for p in ranks):
        time.sleep(0.05)
    left = [p for p in ranks if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, "ranks outlived their killed worker"
    assert collect(backend, [1])[1][-1].kind is EventKind.FAILED


RANK_COMMAND = """
import json, os, sys
import sweeplab
rank = os.environ.get("RANK")
seen = {name: os.environ.get(name) for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
with open(os.path.join(sys.argv[1], f"cmd-rank{rank}.json"), "w") as f:
    json.dump(seen, f)
for step in range(3):
    sweeplab.report({"who": float(rank or -1)}, step=step)
"""


@pytest.mark.slow
def test_a_command_trial_with_several_workers_runs_one_command_per_rank(backend, tmp_path):
    # resources.workers: 2 on a command trial ran the command once, without the torchrun environment,
    # so `torchrun`-style programs trained alone; and the ranks must not share one report file
    script = tmp_path / "rank_command.py"
    script.write_text(RANK_COMMAND)
    out = tmp_path / "out"
    out.mkdir()
    backend.submit(make_task(tmp_path, 1, command=[sys.executable, str(script), str(out)], world_size=2))
    ev = collect(backend, [1], timeout=120)[1]
    assert ev[-1].kind is EventKind.FINISHED, ev[-1].data
    seen = [json.loads((out / f"cmd-rank{r}.json").read_text()) for r in (0, 1)]
    assert [s["RANK"] for s in seen] == ["0", "1"] and {s["WORLD_SIZE"] for s in seen} == {"2"}
    assert len({s["MASTER_PORT"] for s in seen}) == 1
    points = sorted((p[0], p[2]) for e in ev if e.kind is EventKind.METRICS for p in e.data["points"]
                    if p[1] == "who")
    assert points == [(0, 0.0), (1, 0.0), (2, 0.0)]   # rank 0's reports only, once each


def pid_until_stopped(config, run):
    """Each rank writes its pid, then logs until asked to stop, checkpointing on rank 0 on the way out."""
    Path(config["out"], f"pid{run.rank}").write_text(str(os.getpid()))
    step = 0
    while not run.should_stop:
        run.log({"step": float(step)}, step=step)
        step += 1
        time.sleep(0.02)
    run.checkpoint({"next": step}, step=step)
    Path(config["out"], f"stopped{run.rank}").write_text(str(step))
    return {"steps": float(step)}


@pytest.mark.slow
def test_sigterm_to_one_rank_preempts_every_rank_of_the_trial(backend, tmp_path):
    """A spot reclaim or an eviction may reach one rank first: that rank stops (run.should_stop), and so must
    its peers, which would otherwise wait for it forever (in a collective, or here for ever); the attempt is
    PREEMPTED, with rank 0's checkpoint written on the way out. Rank 0 used to run on with nobody to stop it."""
    backend.submit(make_task(tmp_path, 1, f"{HERE}:pid_until_stopped", config={"out": str(tmp_path)},
                             world_size=2, grace=30.0))
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"pid{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.05)
    os.kill(int((tmp_path / "pid1").read_text()), signal.SIGTERM)
    end = collect(backend, [1], timeout=60)[1]
    assert end and end[-1].kind is EventKind.PREEMPTED, [e.kind for e in end]
    assert (tmp_path / "stopped0").exists() and (tmp_path / "stopped1").exists()
    assert any(e.kind is EventKind.CHECKPOINT for e in end)


def rank1_dies_of_sigterm(config, run):
    """Rank 1 dies of SIGTERM's default action, as a rank does when SIGTERM reaches it while it starts (before
    its handler is installed); rank 0 trains until it is stopped."""
    if run.rank == 1:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    return pid_until_stopped(config, run)


@pytest.mark.slow
def test_a_rank_killed_by_sigterm_preempts_the_trial_instead_of_failing_it(backend, tmp_path):
    """SIGTERM to one rank preempts the trial (resumed from its checkpoint, no retry spent), also when the rank
    dies of it: it arrived while the rank was starting, before its handler. That was a failure
    (`rank 1: process killed by signal SIGTERM`), retried from scratch or failing the trial."""
    backend.submit(make_task(tmp_path, 1, f"{HERE}:rank1_dies_of_sigterm", config={"out": str(tmp_path)},
                             world_size=2, grace=30.0))
    end = collect(backend, [1], timeout=60)[1]
    assert end and end[-1].kind is EventKind.PREEMPTED, [(e.kind, e.data.get("reason")) for e in end]
    assert (tmp_path / "stopped0").exists()          # rank 0 was stopped, and checkpointed on the way out
    assert any(e.kind is EventKind.CHECKPOINT for e in end)


def segfaults_on_rank1(config, run):
    if run.rank == 1 or run.rank == int(config.get("also", 1)):
        import ctypes

        ctypes.string_at(0)   # SIGSEGV: no Python exception, no traceback
    while not run.should_stop:
        time.sleep(0.05)
    return {"done": 1.0}


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 1], ids=["rank", "worker"])
def test_a_segfault_leaves_the_python_stack_where_it_died(backend, tmp_path, world_size):
    """A trial that kills its process raises nothing to capture; faulthandler (enabled in workers and ranks)
    writes the Python stack of the crash into the trial's log, and the failure's traceback is that stack:
    where the trial died, not only `process killed by signal SIGSEGV`."""
    backend.submit(make_task(tmp_path, 1, f"{HERE}:segfaults_on_rank1", config={"also": 0 if world_size == 1 else 1},
                             world_size=world_size))
    end = collect(backend, [1], timeout=60)[1]
    assert end and end[-1].kind is EventKind.FAILED, [e.kind for e in end]
    data = end[-1].data
    assert data["signal"] == signal.SIGSEGV, data
    assert "Fatal Python error: Segmentation fault" in (data.get("traceback") or ""), data
    assert "in segfaults_on_rank1" in data["traceback"], data["traceback"]


SEGFAULTING_PROGRAM = "import ctypes, os\ndef crash():\n    ctypes.string_at(0)\nif os.environ.get('RANK', '0') == " \
                      "os.environ.get('CRASH_RANK', '0'):\n    crash()\n"


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 1], ids=["ranks", "one-process"])
def test_a_segfaulting_command_trial_says_where_it_died(backend, tmp_path, world_size):
    """The same for a Python program: it runs with PYTHONFAULTHANDLER=1 (unless the environment says
    otherwise), so its stderr holds the stack, which is the failure's traceback; the reason names the fatal
    error, not faulthandler's last line (the list of extension modules)."""
    prog = tmp_path / "crash.py"
    prog.write_text(SEGFAULTING_PROGRAM)
    backend.submit(make_task(tmp_path, 1, command=[sys.executable, str(prog)], world_size=world_size,
                             env={"CRASH_RANK": str(world_size - 1)}))
    end = collect(backend, [1], timeout=60)[1]
    data = end[-1].data
    assert end[-1].kind is EventKind.FAILED and data["signal"] == signal.SIGSEGV, data
    assert "Fatal Python error: Segmentation fault" in data["reason"], data["reason"]
    assert "in crash" in data["traceback"] and "Fatal Python error" in data["traceback"], data["traceback"]


def tracked_by_rank(config, run):
    """Rank r tracks 4 + 4r steps of 8 samples; rank 1 waits for its data, rank 0 computes."""
    def batches(n):
        for _ in range(n):
            if run.rank == 1:
                time.sleep(0.01)
            yield [0] * 8
    for _ in run.track(batches(4 + 4 * run.rank)):
        if run.rank == 0:
            time.sleep(0.01)
    return {"rank": float(run.rank)}


@pytest.mark.slow
def test_a_multi_process_trials_profile_covers_every_rank(backend, tmp_path):
    backend.submit(make_task(tmp_path, 1, f"{HERE}:tracked_by_rank", config={}, world_size=2))
    ev = collect(backend, [1])[1]
    assert ev[-1].kind is EventKind.FINISHED, ev[-1].data
    profiles = [e.data["summary"] for e in ev if e.kind is EventKind.PROFILE]
    assert len(profiles) == 1, profiles      # one profile for the trial, before its end
    p = profiles[0]
    assert p["world_size"] == 2
    assert [r["rank"] for r in p["ranks"]] == [0, 1]
    assert [r["steps"] for r in p["ranks"]] == [4, 8]
    assert p["samples"] == 8 * (4 + 8)       # every rank's samples: the trial's
    assert p["steps"] == 8                    # the ranks step together: the most any rank made
    # the worst rank's data wait (rank 1 waits for its data; rank 0 does not)
    waits = [r["data_wait_fraction"] for r in p["ranks"]]
    assert p["data_wait_fraction"] == waits[1] > waits[0]
    assert p["rss_peak"] >= sum(r["rss_peak"] for r in p["ranks"])   # both ranks' processes


def report_gpu_env(config, run):
    keys = ("CUDA_VISIBLE_DEVICES", "SWEEPLAB_GPUS_PER_RANK", "LOCAL_WORLD_SIZE")
    Path(config["out"], f"rank{run.rank}.json").write_text(json.dumps({k: os.environ.get(k) for k in keys}))
    return {"ok": 1.0}


@pytest.mark.slow
def test_ranks_sharing_a_fractional_gpu_slot_are_told_their_share(tmp_path):
    """No GPU here: the slot names device 0 (as a fractional `resources.gpus` does) and the ranks' environment
    is checked; `_torch.env.process_group_backend` reads it (gloo, since NCCL refuses two ranks on one GPU)."""
    from sweeplab._torch.env import gpus_per_rank, process_group_backend, read_env

    b = LocalBackend(plan_slots(2, cpus=0, gpus=0.5, gpu_ids=[0]))
    b.start()
    try:
        out = tmp_path / "out"
        out.mkdir()
        b.submit(make_task(tmp_path, 1, f"{HERE}:report_gpu_env", config={"out": str(out)}, world_size=2))
        ev = collect(b, [1])[1]
    finally:
        b.shutdown(grace=0.0)
    assert ev[-1].kind is EventKind.FINISHED, ev[-1].data
    seen = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(s["CUDA_VISIBLE_DEVICES"], s["SWEEPLAB_GPUS_PER_RANK"]) for s in seen] == [("0", "0.5")] * 2
    environ = {**rank_env(1, 2, 29500), **{k: v for k, v in seen[1].items() if v is not None}}
    assert process_group_backend("cuda", read_env(environ), 1, gpus_per_rank(environ)) == "gloo"


def _wait_for(cond, limit=10.0):
    deadline = time.monotonic() + limit
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)


def checkpoints_then_rank1_fails(config, run):
    out, first = Path(config["out"]), run.attempt == 1
    if first and run.rank == 1:   # a rank that starts late: rank 0 has saved steps 0 and 1 already
        _wait_for((out / "wrote1").exists)
    state = run.restore()
    Path(out, f"restored{run.rank}-{run.attempt}").write_text(json.dumps(state))
    for step in range(state["step"] + 1 if state else 0, 3):
        run.checkpoint({"step": step}, step=step, force=True)   # rank 0 writes; other ranks' calls are dropped
        if first and step == 1:
            if run.rank == 0:
                (out / "wrote1").touch()
                _wait_for(lambda: run.should_stop)   # until rank 1's failure ends the attempt
                return {"done": 0.0}
            raise ValueError("rank 1 breaks after step 1")
    return {"done": 1.0}


@pytest.mark.slow
def test_every_rank_restores_the_checkpoint_of_the_earlier_attempts_not_one_rank_0_just_wrote(backend, tmp_path):
    """Rank 1 started late and restored after rank 0 had saved in this attempt: it resumed from rank 0's new
    checkpoint, at another step than rank 0 (which restored none), and skipped the steps it had to train."""
    out = tmp_path / "out"
    out.mkdir()
    config = {"out": str(out)}
    backend.submit(make_task(tmp_path, 1, f"{HERE}:checkpoints_then_rank1_fails", config=config, world_size=2))
    first = collect(backend, [1])[1]
    assert [json.loads((out / f"restored{r}-1").read_text()) for r in (0, 1)] == [None, None]
    assert first[-1].kind is EventKind.FAILED and first[-1].data["rank"] == 1, first[-1].data
    assert [e.data["step"] for e in first if e.kind is EventKind.CHECKPOINT] == [0, 1]   # rank 0's only
    backend.submit(make_task(tmp_path, 1, f"{HERE}:checkpoints_then_rank1_fails", config=config, world_size=2,
                             attempt=2))
    second = collect(backend, [1])[1]
    assert second[-1].kind is EventKind.FINISHED, second[-1].data
    assert [json.loads((out / f"restored{r}-2").read_text()) for r in (0, 1)] == [{"step": 1}, {"step": 1}]
