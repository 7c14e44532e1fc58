"""The Ray backend on a real local Ray cluster (this machine only): the backend contract, bad input before any
trial, and the loss of a worker node mid-trial (PREEMPTED, then resumed from its checkpoint elsewhere).

One cluster serves the whole module (starting Ray costs seconds); the node-loss test adds its own
worker nodes and runs last. The nodes use the machine's own address: Ray maps a 127.0.0.1 bootstrap
address to the node address when connecting, so a loopback-only head cannot be joined.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import time
from pathlib import Path

import pytest

from sweeplab.backends.events import EventKind
from sweeplab.backends.ray import RayBackend, trial_demand
from sweeplab.backends.ray._plan import capacity, check_checkpoint_root, check_fits, workdir_warning
from sweeplab.errors import UserError
from sweeplab.testing.backends import BackendContract, collect, make_task

TRIALS = str(Path(__file__).resolve().parents[1] / "fixtures" / "trials.py")

# fast node-death detection, so that a lost node is noticed in about a second
# a removed node's death noticed in a few seconds; not in one (300 ms x 3 with a 300 ms timeout): a loaded
# machine's starved raylet missed that many checks and was declared dead with every actor on it
_SYSTEM = {"health_check_period_ms": 500, "health_check_failure_threshold": 5,
           "health_check_initial_delay_ms": 0, "health_check_timeout_ms": 1000}


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": False, "_system_config": _SYSTEM,
    })
    ray.init(address=c.address, log_to_driver=False, configure_logging=False)
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.mark.ray
class TestRayBackendContract(BackendContract):
    @pytest.fixture
    def make_backend(self, cluster):
        return lambda n: RayBackend(workers=n, resources={"cpus": 1})

    @pytest.fixture
    def trials_file(self):
        return TRIALS


# ------------------------------------------------------------------------------------ without a cluster
def test_importing_the_backend_does_not_import_ray():
    import subprocess
    import sys

    code = "import sys, sweeplab.backends.ray; sys.exit('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60, check=False).returncode == 0


def test_missing_ray_is_an_error_naming_the_extra(monkeypatch):
    import sys

    from sweeplab.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, "ray", None)   # as if ray were not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'sweeplab\[ray\]'"):
        RayBackend().start()


@pytest.mark.parametrize("res, smoke, expect", [
    ({"cpus": 2, "gpus": 0.5}, False, (2.0, 0.5, 1)),
    ({"cpus": 4, "gpus": 1}, True, (4.0, 0.0, 1)),
    ({"workers": 2, "cpus_per_worker": 1, "gpus_per_worker": 0.25}, False, (2.0, 0.5, 2)),
    (None, False, (1.0, 0.0, 1)),
], ids=["fractional-gpu", "smoke-hides-gpus", "ddp-per-worker", "defaults"])
def test_trial_demand_from_resources(res, smoke, expect):
    d = trial_demand(res, smoke=smoke)
    assert (d.cpus, d.gpus, d.world_size) == expect


def test_resources_no_node_can_hold_are_refused_with_what_nodes_have():
    nodes = [{"CPU": 8.0, "GPU": 1.0, "memory": 1e9}, {"CPU": 2.0, "spot": 1.0}]
    with pytest.raises(UserError, match=r"needs 4 CPU, 1 GPU, 1 spot.*8 CPU, 1 GPU"):
        check_fits(trial_demand({"cpus": 4, "gpus": 1, "custom": {"spot": 1}}), nodes)
    check_fits(trial_demand({"cpus": 2, "custom": {"spot": 1}}), nodes)   # fits the second node
    assert capacity(trial_demand({"cpus": 2, "gpus": 0.5}), nodes) == 2   # GPU-bound: 1 GPU / 0.5


@pytest.mark.parametrize("placement, holds", [("PACK", 2), ("STRICT_SPREAD", 1), ("STRICT_PACK", 1)])
def test_ranks_spread_over_nodes_count_every_node_s_room(placement, holds):
    two_ranks = trial_demand({"workers": 2, "cpus_per_worker": 1})
    nodes = [{"CPU": 1.0}, {"CPU": 3.0}]
    assert two_ranks.bundles() == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert capacity(two_ranks, nodes, placement=placement) == holds
    assert capacity(two_ranks, nodes) == 1                  # all ranks in one actor: only on the 3-CPU node
    check_fits(two_ranks, [{"CPU": 1.0}, {"CPU": 1.0}], placement="PACK")   # one rank per node is fine
    with pytest.raises(UserError, match=r"workers 3: .* room for only 2 process\(es\) of 1 CPU on distinct"):
        check_fits(trial_demand({"workers": 3, "cpus_per_worker": 1}), [{"CPU": 1.0}, {"CPU": 4.0}],
                   placement="STRICT_SPREAD")


def test_rank_tasks_give_each_rank_its_node_local_environment(tmp_path):
    from sweeplab.backends.ray._gang import rank_tasks

    tasks = rank_tasks(make_task(tmp_path, 1, "x:y", world_size=3), ["a", "b", "a"], "10.0.0.5", 29400)
    env = [(t.env["RANK"], t.env["LOCAL_RANK"], t.env["LOCAL_WORLD_SIZE"], t.env["NODE_RANK"]) for t in tasks]
    assert env == [("0", "0", "2", "0"), ("1", "0", "1", "1"), ("2", "1", "2", "0")]
    assert {(t.env["MASTER_ADDR"], t.env["MASTER_PORT"], t.env["WORLD_SIZE"], t.world_size) for t in tasks} == {
        ("10.0.0.5", "29400", "3", 1)}
    assert "SWEEPLAB_GPUS_PER_RANK" not in tasks[0].env      # no GPUs: nothing to share
    shared = rank_tasks(make_task(tmp_path, 1, "x:y", world_size=2), ["a", "a"], "10.0.0.5", 29400, gpus_per_rank=0.5)
    assert {t.env["SWEEPLAB_GPUS_PER_RANK"] for t in shared} == {"0.5"}   # sweeplab.torch: gloo, not NCCL
    same = rank_tasks(make_task(tmp_path, 1, "x:y", world_size=2), ["a", "a"], "10.0.0.5", 29400,
                      gpus=[["0"], ["0"]], gpus_per_rank=0.5)
    assert {t.env["SWEEPLAB_GPUS_PER_RANK"] for t in same} == {"0.5"}     # Ray put both on GPU 0
    apart = rank_tasks(make_task(tmp_path, 1, "x:y", world_size=2), ["a", "a"], "10.0.0.5", 29400,
                       gpus=[["0"], ["1"]], gpus_per_rank=0.5)
    assert {t.env["SWEEPLAB_GPUS_PER_RANK"] for t in apart} == {"1"}      # a GPU each: NCCL works
    assert len({t.log_path for t in tasks}) == 3            # ranks do not write over rank 0's log
    assert len({t.report_path for t in tasks}) == 3         # nor command ranks report through rank 0's file


def test_rank_tasks_show_each_node_s_ranks_their_gpus_in_local_rank_order(tmp_path):
    from sweeplab.backends.ray._gang import rank_tasks

    task = make_task(tmp_path, 1, "x:y")
    tasks = rank_tasks(task, ["a", "b", "a"], "10.0.0.1", 29500, gpus=[["3"], ["0"], ["1"]])
    assert [t.env["CUDA_VISIBLE_DEVICES"] for t in tasks] == ["3,1", "0", "3,1"]
    assert [t.env["LOCAL_RANK"] for t in tasks] == ["0", "0", "1"]
    shared = rank_tasks(task, ["a", "a"], "10.0.0.1", 29500, gpus=[["0"], ["0"]])   # gpus_per_worker: 0.5
    assert all("CUDA_VISIBLE_DEVICES" not in t.env for t in shared)


def test_gang_fails_with_the_first_failing_rank_and_kills_the_others(tmp_path):
    from sweeplab.backends.events import Event
    from sweeplab.backends.ray._gang import Gang, Op

    g = Gang(make_task(tmp_path, 7, "x:y", world_size=3), 3)

    def ev(kind, **data):
        return Event(kind, 7, 1, time.time(), data)

    assert g.accept(1, ev(EventKind.METRICS, points=[]))[0] == []           # only rank 0's events pass
    assert len(g.accept(0, ev(EventKind.METRICS, points=[]))[0]) == 1
    out, ops = g.accept(2, ev(EventKind.FAILED, reason="ValueError: boom", traceback="tb"))
    assert out == [] and sorted(ops) == [(Op.KILL, 0), (Op.KILL, 1)]
    assert g.accept(0, ev(EventKind.FAILED, reason="killed"))[0] == []
    (end,), _ = g.accept(1, ev(EventKind.FAILED, reason="killed"))
    assert end.kind is EventKind.FAILED and end.data["reason"] == "rank 2: ValueError: boom"
    assert end.data["rank"] == 2 and end.data["traceback"] == "tb"


def test_gang_after_a_stop_keeps_rank_zero_s_result_when_a_rank_fails_in_the_collective_it_left(tmp_path):
    # the stop reaches the ranks at different steps: rank 0 returns, rank 1 breaks in a collective it left
    from sweeplab.backends.events import Event
    from sweeplab.backends.ray._gang import STOP_SETTLE, Gang, Op

    def ev(kind, **data):
        return Event(kind, 7, 1, time.time(), data)

    g = Gang(make_task(tmp_path, 7, "x:y", world_size=2), 2)
    g.stop_requested()
    out, ops = g.accept(1, ev(EventKind.FAILED, reason="RuntimeError: Connection closed by peer"))
    assert out == [] and ops == []             # rank 0 gets its chance to return (a kill would lose its result)
    (note, end), _ = g.accept(0, ev(EventKind.FINISHED, metrics={"loss": 0.5}, stopped=True))
    assert end.kind is EventKind.FINISHED and end.data["metrics"] == {"loss": 0.5}
    assert note.kind is EventKind.NOTE and note.data["kind"] == "ranks_left_unevenly"

    g = Gang(make_task(tmp_path, 7, "x:y", world_size=2), 2)
    g.stop_requested()
    g.accept(1, ev(EventKind.FAILED, reason="RuntimeError: boom"))
    assert g.tick(time.monotonic() + STOP_SETTLE + 1) == [(Op.KILL, 0)]   # rank 0 stuck: killed after a while
    (end,), _ = g.accept(0, ev(EventKind.FAILED, reason="killed"))
    assert end.kind is EventKind.FAILED and end.data["reason"] == "rank 1: RuntimeError: boom"


def test_gang_sends_one_profile_merged_from_every_rank_before_the_end(tmp_path):
    from sweeplab.backends.events import Event
    from sweeplab.backends.ray._gang import Gang

    def ev(kind, **data):
        return Event(kind, 7, 1, time.time(), data)

    g = Gang(make_task(tmp_path, 7, "x:y", world_size=2), 2)
    prof = {"steps": 4, "samples": 32, "samples_per_s": 10.0, "data_wait_fraction": 0.1, "rss_peak": 100}
    assert g.accept(0, ev(EventKind.PROFILE, summary=prof))[0] == []      # held until every rank has ended
    assert g.accept(1, ev(EventKind.PROFILE, summary={**prof, "data_wait_fraction": 0.7}))[0] == []
    g.accept(1, ev(EventKind.FINISHED, metrics={}))
    (profile, end), _ = g.accept(0, ev(EventKind.FINISHED, metrics={"loss": 1.0}))
    assert profile.kind is EventKind.PROFILE and end.kind is EventKind.FINISHED
    merged = profile.data["summary"]
    assert (merged["world_size"], merged["samples"], merged["data_wait_fraction"]) == (2, 64, 0.7)
    assert merged["rss_peak"] == 200 and [r["rank"] for r in merged["ranks"]] == [0, 1]


def test_gang_sums_every_rank_s_system_samples_counting_a_node_s_gpus_once(tmp_path):
    """The local backend's samples cover every rank's process; Ray's were rank 0's alone."""
    from sweeplab.backends.events import Event
    from sweeplab.backends.ray._gang import Gang

    def system(t, cpu, rss, util):
        return Event(EventKind.SYSTEM, 7, 1, t, {"samples": [
            {"time": t, "cpu": cpu, "rss": rss, "procs": 1, "gpu_util": util, "gpu_mem": 10.0, "gpu_mem_total": 80.0}]})

    g = Gang(make_task(tmp_path, 7, "x:y", world_size=3), 3)
    g.placed(["a", "a", "b"])   # ranks 0 and 1 share node a (and its GPUs)
    t, out = 1000.0, []
    for k in range(2):
        out += g.accept(0, system(t + k, 100.0, 100, 50.0))[0]
        out += g.accept(1, system(t + k + 0.3, 40.0, 300, 50.0))[0]
        out += g.accept(2, system(t + k + 0.6, 60.0, 500, 90.0))[0]
    for r in (1, 2, 0):
        out += g.accept(r, Event(EventKind.FINISHED, 7, 1, t + 3, {"metrics": {}}))[0]
    samples = [s for e in out if e.kind is EventKind.SYSTEM for s in e.data["samples"]]
    assert [(s["cpu"], s["rss"], s["procs"]) for s in samples] == [(200.0, 900, 3)] * 2
    assert [(s["gpu_util"], s["gpu_mem"], s["gpu_mem_total"]) for s in samples] == [(70.0, 20.0, 160.0)] * 2
    profile = next(e.data["summary"] for e in out if e.kind is EventKind.PROFILE)
    assert (profile["system_samples"], profile["rss_peak"], profile["cpu_peak"]) == (2, 900, 200.0)
    assert out[-1].kind is EventKind.FINISHED


def test_gang_links_every_rank_s_capture_to_the_kept_one_as_the_local_supervisor_does(tmp_path):
    """A NaN trial keeps rank 0's capture; on the local backend its manifest names every rank's (`ranks`), so
    `sweeplab repro` gives each replayed rank its own batch. On Ray rank 1's capture was not named: its replay
    had no batch (the NaN came from rank 1's share)."""
    from sweeplab.backends.events import Event
    from sweeplab.backends.ray._gang import Gang
    from sweeplab.capture import save_captures

    captures = tmp_path / "captures"
    paths = [save_captures({"batch": {"rank": r}}, str(captures), nonfinite={"step": 1, "metric": "loss",
                                                                             "value": float("nan")})
             for r in (0, 1)]
    g = Gang(make_task(tmp_path, 7, "x:y", world_size=2), 2)
    g.accept(1, Event(EventKind.FINISHED, 7, 1, time.time(), {"metrics": {}, "capture": paths[1]}))
    (end,), _ = g.accept(0, Event(EventKind.FINISHED, 7, 1, time.time(), {"metrics": {}, "capture": paths[0]}))
    assert end.data["capture"] == paths[0]
    manifest = json.loads(Path(paths[0]).with_suffix(".json").read_text())
    assert manifest["ranks"] == {"0": Path(paths[0]).name, "1": Path(paths[1]).name}, manifest


def test_gang_passes_on_the_heartbeats_of_ranks_still_running_after_rank_0_returned(tmp_path):
    """On the local backend the trial's supervisor beats while any rank runs; on Ray only rank 0's heartbeats
    reached the driver, so ranks finishing their last step after rank 0 returned (the 10 s they are given)
    were a silent trial, killed as hung with a short `trial.heartbeat_timeout`."""
    from sweeplab.backends.events import Event
    from sweeplab.backends.ray._gang import Gang

    g = Gang(make_task(tmp_path, 7, "x:y", world_size=2), 2)
    g.accept(0, Event(EventKind.FINISHED, 7, 1, time.time(), {"metrics": {"loss": 1.0}}))
    out, _ = g.accept(1, Event(EventKind.HEARTBEAT, 7, 1, time.time(), {}))
    assert [e.kind for e in out] == [EventKind.HEARTBEAT]
    out, _ = g.accept(1, Event(EventKind.METRICS, 7, 1, time.time(), {"points": [[0, "loss", 2.0, 0.0]]}))
    assert out == []   # only rank 0's metrics count


@pytest.mark.parametrize("root, multi, unseen, match", [
    ("memory://ckpt", False, None, "memory"),
    ("/data/ckpt", True, ["10.0.0.7"], "10.0.0.7 of the Ray cluster cannot see it"),
    ("file:///data/ckpt", True, ["10.0.0.7"], "local to this machine"),
], ids=["memory-url", "node-local-path", "file-url"])
def test_checkpoint_location_every_node_cannot_reach_is_refused(root, multi, unseen, match):
    with pytest.raises(UserError, match=match):
        check_checkpoint_root(root, multi_host=multi, unseen=unseen)


@pytest.mark.parametrize("root, multi, unseen", [
    ("s3://bucket/sweeps", True, None), ("/shared/efs", True, []), ("/home/me/ckpt", False, None),
], ids=["s3", "shared-path-seen-by-all", "single-machine"])
def test_checkpoint_location_reachable_by_all_is_accepted(root, multi, unseen):
    check_checkpoint_root(root, multi_host=multi, unseen=unseen)


# trial.workdir: trial on a multi-host cluster whose nodes do not share the store: a warning at start. The
# loopback cluster of these tests is one host, so the decision is tested here and the wiring below.
@pytest.mark.parametrize("root, multi, unseen, warned", [
    ("/home/me/.sweeplab/workdirs", True, ["10.0.0.7", "10.0.0.3"], True),
    ("/mnt/efs/store/workdirs", True, [], False),
    ("/home/me/.sweeplab/workdirs", False, None, False),
    (None, True, ["10.0.0.7"], False),
], ids=["node-cannot-see-store", "shared-store", "single-machine", "workdir-sweep"])
def test_trial_workdirs_on_a_store_some_nodes_cannot_see_are_warned_about(root, multi, unseen, warned):
    message = workdir_warning(root, multi_host=multi, unseen=unseen)
    assert (message is not None) is warned
    if warned:
        assert "10.0.0.3, 10.0.0.7" in message and root in message and "shared filesystem" in message


def test_ray_backend_probes_the_store_workdirs_only_when_trials_run_in_their_own(tmp_path):
    from sweeplab.spec import parse_spec

    def backend(workdir):
        spec = parse_spec({"name": "w", "method": "grid", "function": "m:f", "metric": {"name": "loss"},
                               "parameters": {"x": {"values": [1]}}, "trial": {"workdir": workdir}}, file="s.yaml")
        return RayBackend(spec, workdir_root=str(tmp_path / "workdirs"))

    assert backend("trial").workdir_root == str(tmp_path / "workdirs")
    assert backend("sweep").workdir_root is None


def test_start_warns_once_on_stderr_when_another_host_cannot_see_the_store_workdirs(monkeypatch, capsys):
    """The wiring of the check above on a (faked) two-host cluster: the probe asked about the store's
    workdirs/, its answer turned into one warning; a one-host cluster is not probed."""
    from sweeplab.backends.ray import _core

    core = _core.RayCore.__new__(_core.RayCore)
    core.workdir_root = "/home/me/.sweeplab/workdirs"
    probed = []
    monkeypatch.setattr(_core.ray.util, "get_node_ip_address", lambda: "10.0.0.1")
    monkeypatch.setattr(core, "_probe_shared", lambda root, nodes, here, what: probed.append(root) or ["10.0.0.2"])
    core._check_workdirs([{"NodeManagerAddress": "10.0.0.1"}, {"NodeManagerAddress": "10.0.0.2"}])
    err = capsys.readouterr().err
    assert probed == ["/home/me/.sweeplab/workdirs"] and err.count("warning: trial.workdir: trial") == 1, err
    assert "10.0.0.2" in err, err
    core._check_workdirs([{"NodeManagerAddress": "10.0.0.1"}])
    assert probed == ["/home/me/.sweeplab/workdirs"] and capsys.readouterr().err == ""


# ------------------------------------------------------------------------------------ bad input (cluster)
@pytest.mark.ray
def test_unreachable_address_is_a_user_error_before_anything_runs():
    import socket

    import ray

    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    b = RayBackend(address=f"127.0.0.1:{port}")
    if ray.is_initialized():   # the module cluster is connected: probe the address check directly
        from sweeplab.backends.ray._core import _probe_address

        with pytest.raises(UserError, match="nothing answers there"):
            _probe_address(b.address)
    else:
        with pytest.raises(UserError, match="nothing answers there"):
            b.start()


def test_an_idle_trial_host_sleeps_until_its_worker_writes_and_still_passes_events_on(tmp_path):
    """The actor's pump thread blocks on the worker's pipe. It used to poll its local backend in a loop
    (every 20 ms when idle): 64 idle slots took 0.8 of this machine's 2 cores and slowed every trial's
    round trip. Runs the actor class in this process (no cluster): it is plain Python under ray.remote."""
    pytest.importorskip("ray")
    from sweeplab.backends.events import Event
    from sweeplab.backends.ray._host import TrialHost

    host = TrialHost(1.0, True)
    calls = 0
    real_poll = host._local.poll

    def counting_poll(timeout: float) -> list:
        nonlocal calls
        calls += 1
        return real_poll(timeout)

    host._local.poll = counting_poll
    try:
        time.sleep(1.5)   # idle (its worker booting, then waiting for a task)
        assert calls <= 10, f"an idle actor polled its worker {calls} times in 1.5 s"
        host.submit(make_task(tmp_path, 1, f"{TRIALS}:quick").to_dict())
        kinds: list[EventKind] = []
        deadline = time.monotonic() + 60
        while EventKind.FINISHED not in kinds and time.monotonic() < deadline:
            kinds += [Event.from_dict(d).kind for d in host.drain(1.0)]
        assert kinds[0] is EventKind.STARTED and kinds[-1] is EventKind.FINISHED, kinds
    finally:
        host.shutdown()


def test_a_trial_goes_to_a_started_actor_never_to_one_still_booting(tmp_path):
    """A slot whose actor has not started is not free: a trial sent there waited for its boot (tens of
    seconds for 64 actors on this machine) while started actors idled. Actor handles are stood in for."""
    pytest.importorskip("ray")
    from types import SimpleNamespace

    from sweeplab.backends.ray._core import RayCore, _Slot

    def host() -> SimpleNamespace:
        sent: list = []
        return SimpleNamespace(sent=sent, submit=SimpleNamespace(remote=sent.append))

    core = RayCore(trial_demand(None), workers=2, address=None, checkpoint_root=None)
    booting, started = _Slot(0, actor=host()), _Slot(1, actor=host())
    started.ready = True
    core.slots = [booting, started]
    assert core.free_slots() == 1
    core.submit(make_task(tmp_path, 1, f"{TRIALS}:quick"))
    assert [t["trial_id"] for t in started.actor.sent] == [1] and booting.actor.sent == []
    assert core.free_slots() == 0


@pytest.mark.ray
def test_start_refuses_resources_and_worker_counts_the_cluster_cannot_hold(cluster):
    with pytest.raises(UserError, match="no node of the Ray cluster can run a trial that needs 64 CPU"):
        RayBackend(resources={"cpus": 64}).start()
    with pytest.raises(UserError, match="1 tpu"):
        RayBackend(resources={"cpus": 1, "custom": {"tpu": 1}}).start()
    with pytest.raises(UserError, match="--workers 5: the Ray cluster holds only 2 trial"):
        RayBackend(workers=5, resources={"cpus": 1}).start()


# ------------------------------------------------------------------------------------ multi-process trials
_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


def _raylet_pid() -> int | None:
    """The Ray node (raylet process) this process descends from: one per node, on any machine."""
    pid = os.getpid()
    for _ in range(12):
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
        if pid <= 1:
            return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"raylet" in f.read().split(b"\0")[0]:
                return pid
    return None


def two_steps(config, run):
    """Reports at steps 1 and 2 (step 1 a decision step for rank 0, which waits there for the verdict); step 2
    carries `went`, the verdict step rank 0 had received when its wait at step 1 ended (-1: it waited out
    Run's fallback, no `go` reached it)."""
    run.log({"loss": 1.0}, step=1)
    run.log({"loss": 0.5, "went": float(run._go_step)}, step=2)
    return {"loss": 0.5}


def rank1_lingers(config, run):
    """Rank 0 returns at once (writing when); rank 1 goes on for 2 s without a report, its last step."""
    if run.rank == 0:
        Path(config["out"], "returned0").write_text(repr(time.time()))
        return {"loss": 1.0}
    time.sleep(2.0)
    return {"loss": 2.0}


def holds_memory(config, run):
    """Rank 1 holds `mb` MB for 2.5 s; rank 0 holds nothing (the samples of the trial must count rank 1's)."""
    held = bytearray(int(config["mb"]) * 2**20 if run.rank == 1 else 0)
    held[::4096] = b"x" * len(held[::4096])   # touched: resident, not just reserved
    time.sleep(2.5)
    return {"held": float(len(held))}


def nan_on_every_rank(config, run):
    """Every rank logs a NaN loss at step 1 holding its own batch (the NaN was rank 1's share)."""
    for step in range(2):
        run.capture("batch", {"rank": run.rank, "step": step})
        run.log({"loss": math.nan if step == 1 else 1.0}, step=step)
    return {"loss": 1.0}


def where_am_i(config, run):
    """A rank reports its environment, its node and (config ddp) a gloo all-reduce over the ranks."""
    seen = {n: os.environ.get(n) for n in _ENV}
    seen.update(raylet=_raylet_pid(), host=socket.gethostname(), run_rank=run.rank)
    if config.get("ddp"):
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method="env://")
        try:
            t = torch.tensor([float(run.rank + 1)])
            dist.all_reduce(t)
            seen["sum"] = float(t.item())
        finally:
            dist.destroy_process_group()
    if run.rank == int(config.get("bad", -1)):
        peer = Path(config["out"], "rank0.json")   # break once rank 0 runs: it must be killed, not spared
        deadline = time.monotonic() + 60
        while run.rank != 0 and not peer.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        raise ValueError(f"rank {run.rank} broke on purpose")
    Path(config["out"], f"rank{run.rank}.json").write_text(json.dumps(seen))
    while config.get("bad") is not None and not run.should_stop:   # a healthy peer would block
        time.sleep(0.02)
    run.log({"who": float(run.rank)}, step=0)
    return {"who": float(run.rank)}


@pytest.fixture(scope="class")
def two_node_backend(cluster):
    """Two 1-CPU nodes (with `rank_slot`, so that only they take ranks) and a backend on them."""
    nodes = [cluster.add_node(num_cpus=1, resources={"rank_slot": 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    b = RayBackend(workers=1, resources={"workers": 2, "cpus_per_worker": 1, "custom": {"rank_slot": 1}})
    b.start()
    yield b
    b.shutdown()
    for node in nodes:
        if node in cluster.worker_nodes:
            cluster.remove_node(node)


@pytest.mark.ray
class TestRanksOnSeveralNodes:
    """A 2-rank trial over a placement group on two 1-CPU nodes: its ranks must land on both."""

    @pytest.fixture
    def backend(self, two_node_backend):
        return two_node_backend

    def _run(self, b, tmp_path, trial, **config):
        out = tmp_path / "out"
        out.mkdir(parents=True, exist_ok=True)
        me = f"{Path(__file__).resolve()}:where_am_i"
        b.submit(make_task(tmp_path, trial, me, config={"out": str(out), **config}))
        events = collect(b, [trial], timeout=60)[trial]
        ranks = {int(p.stem[4:]): json.loads(p.read_text()) for p in out.glob("rank*.json")}
        return events, ranks

    def test_ranks_run_on_two_nodes_with_the_torchrun_environment(self, backend, tmp_path):
        import ray

        events, ranks = self._run(backend, tmp_path, 1)
        end = events[-1]
        assert end.kind is EventKind.FINISHED, end.data
        assert end.data["metrics"] == {"who": 0.0}                     # rank 0's result
        points = [p for e in events if e.kind is EventKind.METRICS for p in e.data["points"]]
        assert points and all(p[1:3] == ["who", 0.0] for p in points)   # only rank 0's run.log
        assert sorted(ranks) == [0, 1]
        assert len({r["raylet"] for r in ranks.values()} - {None}) == 2, ranks   # two distinct nodes
        for r, seen in ranks.items():
            assert (seen["RANK"], seen["WORLD_SIZE"], seen["run_rank"]) == (str(r), "2", r)
            assert (seen["LOCAL_RANK"], seen["LOCAL_WORLD_SIZE"], seen["NODE_RANK"]) == ("0", "1", str(r))
        assert ranks[0]["MASTER_PORT"] == ranks[1]["MASTER_PORT"] and int(ranks[0]["MASTER_PORT"]) > 0
        assert ranks[0]["MASTER_ADDR"] == ranks[1]["MASTER_ADDR"] == ray.util.get_node_ip_address()

    def test_a_failing_rank_fails_the_trial_naming_it_and_the_others_are_killed(self, backend, tmp_path):
        events, ranks = self._run(backend, tmp_path, 2, bad=1)
        end = events[-1]
        assert end.kind is EventKind.FAILED, end.data
        assert end.data["reason"].startswith("rank 1: ") and end.data["rank"] == 1
        assert "broke on purpose" in end.data["traceback"] and "where_am_i" in end.data["traceback"]
        assert [e.kind for e in events if e.kind.ends_attempt] == [EventKind.FAILED]   # one end, not two
        assert sorted(ranks) == [0]                      # rank 0 ran, and was killed while it waited
        # the slot is whole again: the next trial runs on both nodes
        events, _ = self._run(backend, tmp_path / "again", 3)
        assert events[-1].kind is EventKind.FINISHED, events[-1].data

    def test_stop_reaches_every_rank(self, backend, tmp_path):
        out = tmp_path / "out"
        out.mkdir()
        me = f"{Path(__file__).resolve()}:where_am_i"
        backend.submit(make_task(tmp_path, 4, me, config={"out": str(out), "bad": 99}))
        deadline = time.monotonic() + 60
        while len(list(out.glob("rank*.json"))) < 2 and time.monotonic() < deadline:
            backend.poll(0.05)
        backend.stop(4, "enough")
        end = collect(backend, [4], timeout=60)[4][-1]
        assert end.kind is EventKind.FINISHED, end.data   # both ranks saw should_stop and returned

    def test_the_verdict_at_a_rung_reaches_rank_0_on_its_node(self, backend, tmp_path):
        """Rank 0 reports at decision step 1 and waits; `go` must reach its actor (not the slot's, which a
        multi-process trial does not have), so it goes on at once instead of after Run's 10 s fallback."""
        me = f"{Path(__file__).resolve()}:two_steps"
        backend.submit(make_task(tmp_path, 6, me, decision_steps=[1], decision_metric="loss"))
        went: list[float] = []

        def on_event(ev):
            if ev.kind is EventKind.METRICS and ev.data.get("decide") == 1 and not went:
                went.append(time.monotonic())
                backend.go(6, 1)

        events = collect(backend, [6], timeout=60, on_event=on_event)[6]
        assert events[-1].kind is EventKind.FINISHED, events[-1].data
        assert went, "rank 0 reported no decision step"
        points = [p for e in events if e.kind is EventKind.METRICS for p in e.data["points"]]
        assert sorted({p[0] for p in points}) == [1, 2], points
        # rank 0's own record, not a wall-clock gap (a loaded machine's actor took more than 5 s to report)
        assert [p[2] for p in points if p[1] == "went"] == [1.0], "rank 0 waited out its fallback"

    def test_ddp_all_reduce_over_gloo_across_the_two_nodes(self, backend, tmp_path):
        pytest.importorskip("torch")
        events, ranks = self._run(backend, tmp_path, 5, ddp=True)
        assert events[-1].kind is EventKind.FINISHED, events[-1].data
        assert [ranks[r]["sum"] for r in (0, 1)] == [3.0, 3.0]
        assert ranks[0]["raylet"] != ranks[1]["raylet"]


    def test_a_rank_that_dies_of_sigterm_preempts_the_trial_as_on_local(self, backend, tmp_path):
        """As on the local backend (backends/multiproc.py): a rank killed by SIGTERM (it came before the rank's
        handler) is a preemption of the whole trial, requeued with no retry spent, not a FAILED trial."""
        out = tmp_path / "out"
        out.mkdir()
        me = f"{Path(__file__).resolve().parent / 'test_multiproc.py'}:rank1_dies_of_sigterm"
        backend.submit(make_task(tmp_path, 7, me, config={"out": str(out)}, grace=30.0))
        events = collect(backend, [7], timeout=60)[7]
        ends = [(e.kind, e.data.get("reason")) for e in events if e.kind.ends_attempt]
        assert [k for k, _ in ends] == [EventKind.PREEMPTED], ends
        assert (out / "stopped0").exists()          # rank 0 was stopped, and checkpointed on the way out
        assert any(e.kind is EventKind.CHECKPOINT for e in events)

    def test_a_segfaulting_rank_fails_the_trial_naming_the_signal_and_where(self, backend, tmp_path):
        me = f"{Path(__file__).resolve().parent / 'test_multiproc.py'}:segfaults_on_rank1"
        backend.submit(make_task(tmp_path, 8, me))
        end = collect(backend, [8], timeout=60)[8][-1]
        assert end.kind is EventKind.FAILED, end.data
        assert end.data["rank"] == 1 and end.data["signal"] == 11, end.data
        assert "SIGSEGV" in end.data["reason"] and end.data["reason"].startswith("rank 1: "), end.data
        assert "in segfaults_on_rank1" in (end.data.get("traceback") or ""), end.data


    def test_system_samples_cover_every_rank_as_on_local(self, backend, tmp_path):
        """The local backend samples the trial's whole process tree (every rank); on Ray only rank 0's samples
        reached the store, so a rank's memory or CPU was missing from the trial's system figures."""
        me = f"{Path(__file__).resolve()}:holds_memory"
        backend.submit(make_task(tmp_path, 9, me, config={"mb": 160}))
        events = collect(backend, [9], timeout=60)[9]
        assert events[-1].kind is EventKind.FINISHED, events[-1].data
        samples = [s for e in events if e.kind is EventKind.SYSTEM for s in e.data["samples"]]
        assert samples and max(s["rss"] for s in samples) > 160 * 2**20, samples   # rank 1's memory counts
        profile = next(e.data["summary"] for e in events if e.kind is EventKind.PROFILE)
        assert profile["rss_peak"] > 160 * 2**20 and profile["system_samples"] >= 1, profile

    def test_ranks_running_after_rank_0_returned_still_beat_across_the_cluster(self, backend, tmp_path):
        """The gang's unit test, over real actors on two nodes: rank 1's heartbeats, sent by its actor on the
        other node while it finishes after rank 0 returned, reach the backend's caller (the driver judges a
        silent trial hung by them: only rank 0's reached it, so such a trial was killed under a short
        `trial.heartbeat_timeout`)."""
        out = tmp_path / "out"
        out.mkdir()
        me = f"{Path(__file__).resolve()}:rank1_lingers"
        backend.submit(make_task(tmp_path, 11, me, config={"out": str(out)}))
        events = collect(backend, [11], timeout=60)[11]
        assert events[-1].kind is EventKind.FINISHED and events[-1].data["metrics"] == {"loss": 1.0}, events[-1]
        returned = float((out / "returned0").read_text())
        late = [e.time for e in events if e.kind is EventKind.HEARTBEAT and e.time > returned + 0.5]
        assert len(late) >= 3, [(e.kind, e.time - returned) for e in events]   # beats at 0.2 s for ~1.5 s

    def test_the_kept_capture_of_a_nan_trial_names_every_rank_s_for_repro(self, backend, tmp_path):
        me = f"{Path(__file__).resolve()}:nan_on_every_rank"
        backend.submit(make_task(tmp_path, 10, me))
        end = collect(backend, [10], timeout=60)[10][-1]
        assert end.kind is EventKind.FINISHED and end.data.get("capture"), end.data
        manifest = json.loads(Path(end.data["capture"]).with_suffix(".json").read_text())
        assert sorted(manifest.get("ranks", {})) == ["0", "1"], manifest
        for name in manifest["ranks"].values():
            assert (Path(end.data["capture"]).parent / name).is_file()

    def test_a_lost_node_preempts_the_whole_trial(self, backend, cluster, tmp_path):
        """Runs last in the class: it takes one of the class's nodes away."""
        out = tmp_path / "out"
        out.mkdir()
        me = f"{Path(__file__).resolve()}:where_am_i"
        backend.submit(make_task(tmp_path, 6, me, config={"out": str(out), "bad": 99}))
        deadline = time.monotonic() + 60
        while len(list(out.glob("rank*.json"))) < 2 and time.monotonic() < deadline:
            backend.poll(0.05)
        rank1_node = backend._core.slots[0].members[1].node
        victim = next(n for n in cluster.worker_nodes if n.node_id == rank1_node)
        cluster.remove_node(victim, allow_graceful=False)
        events = collect(backend, [6], timeout=60)[6]
        assert [e.kind for e in events if e.kind.ends_attempt] == [EventKind.PREEMPTED], events[-1].data
        assert events[-1].data["rank"] == 1 and events[-1].data["reason"].startswith("rank 1: ")


@pytest.mark.ray
def test_placement_none_runs_a_multi_process_trial_inside_one_actor(cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    b = RayBackend(workers=1, resources={"workers": 2, "cpus_per_worker": 0.5}, placement=None)
    b.start()
    try:
        here = Path(__file__).resolve().parent / "test_multiproc.py"
        b.submit(make_task(tmp_path, 1, f"{here}:report_env", config={"out": str(out)}, world_size=2))
        end = collect(b, [1])[1][-1]
    finally:
        b.shutdown()
    assert end.kind is EventKind.FINISHED and end.data["metrics"] == {"who": 0.0}
    seen = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(s["RANK"], s["WORLD_SIZE"]) for s in seen] == [("0", "2"), ("1", "2")]


def gpu_env(config, run):
    names = ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK")
    Path(config["out"], f"rank{run.rank}.json").write_text(json.dumps({n: os.environ.get(n) for n in names}))
    return {"ok": 1.0}


@pytest.mark.ray
def test_ranks_sharing_a_node_see_its_gpus_in_local_rank_order_so_local_rank_points_at_their_own(
        cluster, tmp_path):
    """Ray narrows CUDA_VISIBLE_DEVICES to each actor's own GPUs, while LOCAL_RANK counts the ranks on the node:
    with 3 ranks of 2 GPUs on one node, rank 2 had LOCAL_RANK=2 and 2 visible GPUs (cuda:2 does not exist;
    sweeplab.torch refused it, frameworks crash). As on the local backend, every rank on a node sees the GPUs of
    the trial's ranks there, local rank j's own at [j*k, (j+1)*k). Logical GPUs of a simulated node: no CUDA."""
    node = cluster.add_node(num_cpus=3, num_gpus=6, resources={"gpu_box": 3})
    cluster.wait_for_nodes()
    out = tmp_path / "out"
    out.mkdir()
    b = RayBackend(workers=1, resources={"workers": 3, "cpus_per_worker": 1, "gpus_per_worker": 2,
                                         "custom": {"gpu_box": 1}})
    try:
        b.start()
        b.submit(make_task(tmp_path, 1, f"{Path(__file__).resolve()}:gpu_env", config={"out": str(out)}))
        end = collect(b, [1], timeout=90)[1][-1]
        own = [getattr(m, "gpus", None) for m in b._core.slots[0].members]   # what Ray gave each rank
    finally:
        b.shutdown()
        cluster.remove_node(node)
    assert end.kind is EventKind.FINISHED, end.data
    seen = [json.loads((out / f"rank{r}.json").read_text()) for r in range(3)]
    assert [(s["LOCAL_RANK"], s["LOCAL_WORLD_SIZE"]) for s in seen] == [("0", "3"), ("1", "3"), ("2", "3")]
    visible = {s["CUDA_VISIBLE_DEVICES"] for s in seen}
    assert len(visible) == 1, seen                        # one view of the node's GPUs for all its ranks
    ids = visible.pop().split(",")
    assert sorted(ids, key=int) == [str(i) for i in range(6)], ids
    for j in range(3):                                    # local rank j's own GPUs at [2j, 2j+2)
        assert sorted(ids[2 * j:2 * j + 2]) == sorted(str(g) for g in own[j]), (ids, own)


# ------------------------------------------------------------------------------------ node loss
def _wait_free(b: RayBackend) -> None:
    """Poll (as the driver does) until a slot takes a trial: a lost actor's replacement is placed."""
    deadline = time.monotonic() + 90
    while b.free_slots() == 0:
        assert time.monotonic() < deadline, "no slot became free"
        assert b.poll(0.2) == []


@pytest.mark.ray
def test_a_killed_actor_process_preempts_its_trial_naming_the_process_not_the_node(cluster, tmp_path):
    """kill -9 of a slot's actor: the trial ends PREEMPTED (requeued, resumes from its checkpoint), its worker
    process goes with the actor (no second copy still writing checkpoints), and the reason says what died
    (Ray's text mentions "node deaths" in its advice, which was recorded as "Ray node lost")."""
    import ray

    b = RayBackend(workers=1, resources={"cpus": 1})
    b.start()
    try:
        fn = f"{TRIALS}:checkpointing"
        b.submit(make_task(tmp_path, 1, fn, config={"steps": 10_000, "delay": 0.02}))
        worker: list[int] = []
        actor = ray.get(b._core.slots[0].where)["pid"]

        def on_event(ev):
            if ev.kind is EventKind.STARTED:
                worker.append(int(ev.data["pid"]))
            if ev.kind is EventKind.CHECKPOINT and worker and len(worker) == 1:
                worker.append(0)
                os.kill(actor, 9)

        ev = collect(b, [1], timeout=90, on_event=on_event)[1]
        assert len(worker) == 2, "the trial never checkpointed"
        assert ev[-1].kind is EventKind.PREEMPTED, ev[-1].data
        reason = ev[-1].data["reason"]
        assert "node" not in reason and "process died" in reason, reason
        deadline = time.monotonic() + 60
        while Path(f"/proc/{worker[0]}").exists() and "Z" not in Path(f"/proc/{worker[0]}/stat").read_text():
            assert time.monotonic() < deadline, "the trial's worker outlived its actor"
            time.sleep(0.1)
        _wait_free(b)   # the slot's new actor is placed
        b.submit(make_task(tmp_path, 1, fn, config={"steps": 3}, attempt=2))
        ev2 = collect(b, [1], timeout=90)[1]
        assert ev2[-1].kind is EventKind.FINISHED, ev2[-1].data
        assert [e for e in ev2 if e.kind is EventKind.NOTE and e.data.get("kind") == "restored"]
    finally:
        b.shutdown()


@pytest.mark.ray
def test_lost_node_preempts_the_trial_which_resumes_from_its_checkpoint_on_another_node(cluster, tmp_path):
    """The node is lost by its raylet's death (kill -9, as the OOM killer does), its machine living on: the
    trial is preempted and resumes on the other node, and the lost attempt's processes end with it. The
    actor's process and the trial's worker went on running there indefinitely (nothing of Ray's ended them)
    while the trial ran again elsewhere."""
    import ray

    nodes = {name: cluster.add_node(num_cpus=1, resources={"spot": 1, name: 1})
             for name in ("node_a", "node_b")}
    cluster.wait_for_nodes()
    b = RayBackend(workers=1, resources={"cpus": 1, "custom": {"spot": 1}})
    b.start()
    victim = None
    try:
        fn = f"{TRIALS}:checkpointing"
        b.submit(make_task(tmp_path, 1, fn, config={"steps": 10_000, "delay": 0.02}))
        steps: list[int] = []
        lost: list[int] = []   # the pids of the lost attempt: its actor's and its worker's

        def on_event(ev):
            nonlocal victim
            if ev.kind is EventKind.STARTED:
                lost.append(int(ev.data["pid"]))
            if ev.kind is EventKind.METRICS:
                steps.extend(p[0] for p in ev.data["points"])
                if len(steps) >= 5 and victim is None:
                    node_id = b.node_of(1)
                    victim = next(n for n in nodes.values() if n.node_id == node_id)
                    lost.append(ray.get(b._core.slots[0].where)["pid"])
                    os.kill(victim.all_processes["raylet"][0].process.pid, 9)

        ev = collect(b, [1], timeout=90, on_event=on_event)[1]
        assert victim is not None, "the trial never reported metrics"
        assert ev[-1].kind is EventKind.PREEMPTED, ev[-1].data
        assert _all_dead(lost, within=10.0) == [], "the lost attempt's actor or worker lives on"
        ckpts = [e.data["step"] for e in ev if e.kind is EventKind.CHECKPOINT]
        assert ckpts
        # the driver requeues it: attempt 2 lands on the surviving node (once the slot's new actor is there)
        _wait_free(b)
        b.submit(make_task(tmp_path, 1, fn, config={"steps": ckpts[-1] + 200}, attempt=2))
        ev2 = collect(b, [1], timeout=90)[1]
        assert ev2[-1].kind is EventKind.FINISHED, ev2[-1].data
        assert b.node_of(1) is None   # no longer running
        # events still in flight died with the node, so the newest checkpoint may be newer than the last
        # CHECKPOINT event seen: the new attempt starts right after whatever it restored
        restored = [e.data["step"] for e in ev2 if e.kind is EventKind.NOTE and e.data.get("kind") == "restored"]
        resumed = [p[0] for e in ev2 if e.kind is EventKind.METRICS for p in e.data["points"]]
        assert restored and restored[0] >= ckpts[-1]
        assert resumed[0] == restored[0] + 1
    finally:
        b.shutdown()
        if victim is not None:   # the rest of its processes
            with contextlib.suppress(Exception):
                cluster.remove_node(victim, allow_graceful=False)


@pytest.mark.ray
def test_after_the_only_node_that_fits_is_lost_the_slot_waits_for_a_node_instead_of_taking_a_trial(
        cluster, tmp_path):
    """The requeued trial is not sent to an actor that no live node can hold (it sat there without a
    heartbeat and was failed as hung 60 s later, spending a retry): the slot is free again once a node that
    fits joins (the autoscaler's replacement), and the trial resumes there."""
    lone = cluster.add_node(num_cpus=1, resources={"lone": 1})
    added = [lone]
    cluster.wait_for_nodes()
    b = RayBackend(workers=1, resources={"cpus": 1, "custom": {"lone": 1}})
    b.start()
    try:
        fn = f"{TRIALS}:checkpointing"
        b.submit(make_task(tmp_path, 1, fn, config={"steps": 10_000, "delay": 0.02}))
        lost: list[int] = []

        def on_event(ev):
            if ev.kind is EventKind.CHECKPOINT and not lost:
                lost.append(1)
                cluster.remove_node(lone, allow_graceful=False)
                added.remove(lone)

        ev = collect(b, [1], timeout=90, on_event=on_event)[1]
        assert ev[-1].kind is EventKind.PREEMPTED, ev[-1].data
        assert ev[-2].kind is EventKind.NOTE and ev[-2].data["kind"] == "waiting_for_node", ev[-2].data
        assert "1 lone" in ev[-2].data["message"], ev[-2].data   # what the trial needs, and the nodes have
        assert b.poll(0.5) == [] and b.free_slots() == 0   # no live node holds a trial: none is taken
        added.append(cluster.add_node(num_cpus=1, resources={"lone": 1}))   # the replacement
        _wait_free(b)
        b.submit(make_task(tmp_path, 1, fn, config={"steps": 3}, attempt=2))
        ev2 = collect(b, [1], timeout=90)[1]
        assert ev2[-1].kind is EventKind.FINISHED, ev2[-1].data
    finally:
        b.shutdown()
        for node in added:
            cluster.remove_node(node)


@pytest.mark.ray
def test_a_multi_process_trial_whose_only_node_is_lost_waits_queued_for_one_that_fits(cluster, tmp_path):
    """A 2-process trial (a placement group) whose only fitting node is lost: the driver was blocked in
    submit for 120 s on actors no node could hold, then preempted the trial again and again. Now the trial
    stays queued (no new attempt) with a warning naming what the nodes have, and resumes from its checkpoint
    once a node that fits joins, its retries unspent."""
    import sqlite3
    import threading

    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    node = cluster.add_node(num_cpus=2, resources={"pair": 2})
    added = [node]
    cluster.wait_for_nodes()
    spec = parse_spec({"function": f"{TRIALS}:checkpointing", "method": "grid",
                       "metric": {"name": "loss", "goal": "minimize"},
                       "parameters": {"steps": {"value": 60}, "delay": {"value": 0.05}},
                       "resources": {"workers": 2, "cpus_per_worker": 1, "custom": {"pair": 1}},
                       "trial": {"retries": 0}, "budget": {"time": "120s"}}, file="<test>")   # never hang
    store = Store.open(tmp_path / "store")
    backend = RayBackend(spec, workers=1)
    driver = Driver(spec, store, backend, sweep_name="gang-wait")
    driver.create(spec_path=None)
    outcome: list = []
    runner = threading.Thread(target=lambda: outcome.append(driver.run()), daemon=True)
    db = sqlite3.connect(tmp_path / "store" / "store.db")

    def rows(sql):
        return [tuple(r) for r in db.execute(sql).fetchall()]

    def wait_for(what, sql, within=60.0):
        deadline = time.monotonic() + within
        while not rows(sql):
            assert time.monotonic() < deadline, f"{what}: {rows('SELECT kind, message FROM events')}"
            time.sleep(0.05)

    try:
        runner.start()
        wait_for("a checkpoint", "SELECT 1 FROM checkpoints")
        cluster.remove_node(node, allow_graceful=False)   # Ray nodes are added and removed on the main thread
        added.remove(node)
        wait_for("the waiting note", "SELECT 1 FROM events WHERE kind = 'waiting_for_node'")
        time.sleep(1.0)   # the driver goes on polling meanwhile: no new attempt, no slot taken
        assert rows("SELECT number, state FROM attempts") == [(1, "preempted")]
        reason = rows("SELECT reason FROM trials")[0][0]
        assert reason.endswith("no live node can hold it: waiting for one"), reason   # in `sweeplab status`
        assert backend.free_slots() == 0
        note = rows("SELECT message FROM events WHERE kind = 'waiting_for_node'")[0][0]
        assert "1 pair" in note and "the nodes have" in note, note
        added.append(cluster.add_node(num_cpus=2, resources={"pair": 2}))   # the replacement
        runner.join(timeout=120)
        assert outcome and outcome[0].counts.get("completed") == 1, outcome
        assert rows("SELECT number, state FROM attempts ORDER BY number") == [(1, "preempted"), (2, "completed")]
        first = rows("SELECT MIN(step) FROM metrics WHERE attempt = 2")[0][0]
        assert first > 0, "the second attempt started over instead of resuming from its checkpoint"
    finally:
        driver.request_stop()   # a failed assertion leaves no sweep running
        runner.join(timeout=30)
        db.close()
        store.close()
        for n in added:
            cluster.remove_node(n)


@pytest.mark.ray
def test_sweep_survives_a_lost_node_with_every_trial_accounted_for(cluster, tmp_path):
    """The full driver: a node dies mid-sweep and every trial completes; the trial that was on the lost
    node is preempted once and resumes from its checkpoint on the spare node."""
    import threading

    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    def add(name):
        return cluster.add_node(num_cpus=1, resources={"sweeper": 1, name: 1})

    # Ray nodes start on the main thread only
    nodes = {"a": add("sweep_a"), "b": add("sweep_b"), "spare": add("sweep_c")}
    cluster.wait_for_nodes()
    spec = parse_spec({"function": f"{TRIALS}:checkpointing", "method": "grid",
                       "metric": {"name": "loss", "goal": "minimize"},
                       "parameters": {"steps": {"values": [40, 41, 42, 43]}, "delay": {"value": 0.05}},
                       "resources": {"cpus": 1, "custom": {"sweeper": 1}},
                       "budget": {"time": "90s"}}, file="<test>")   # never hang the suite
    store = Store.open(tmp_path / "store")
    backend = RayBackend(spec, workers=2)
    driver = Driver(spec, store, backend, sweep_name="lost-node")
    driver.create(spec_path=None)
    victim: dict[str, int] = {}

    def kill_a_node_once_a_trial_checkpointed():
        deadline = time.monotonic() + 60
        ckpt = tmp_path / "store" / "checkpoints" / "lost-node"
        while time.monotonic() < deadline and not victim:
            # both first trials have checkpointed (whichever node dies, its trial has something to resume)
            if sum(1 for d in ckpt.glob("*") if any(d.rglob("*"))) < 2:
                time.sleep(0.05)
                continue
            for tid in backend.running():
                if backend.node_of(tid) is not None:
                    node_id = backend.node_of(tid)
                    for _key, node in list(nodes.items()):
                        if node.node_id == node_id:
                            victim["trial"] = tid
                            cluster.remove_node(node, allow_graceful=False)
                            return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_a_node_once_a_trial_checkpointed, daemon=True)
    killer.start()
    outcome = driver.run()
    killer.join(timeout=5)
    assert victim, "no node was killed"
    assert outcome.counts.get("completed") == 4, outcome
    rows = store.conn.execute("SELECT number, state FROM attempts WHERE trial_id = ? ORDER BY number",
                              (victim["trial"],)).fetchall()
    assert [tuple(r) for r in rows][:2] == [(1, "preempted"), (2, "completed")]
    first_step = store.conn.execute("SELECT MIN(step) FROM metrics WHERE trial_id = ? AND attempt = 2",
                                    (victim["trial"],)).fetchone()[0]
    assert first_step > 0, "the second attempt started over instead of resuming from its checkpoint"
    store.close()


def _has_file(root: Path) -> bool:
    """Whether a file is under `root`, while a checkpoint is being written there: its temporary directory
    can vanish between being listed and being looked into (a FileNotFoundError failed the test's wait)."""
    for _, _, files in os.walk(root):   # os.walk skips what vanished
        if files:
            return True
    return False


@pytest.mark.ray
def test_a_slot_whose_actor_can_never_start_stops_the_sweep_naming_why_instead_of_requeuing_forever(
        cluster, tmp_path):
    """The trial's node is lost; the only other node that fits cannot import sweeplab (a node set up
    without it, or with a broken copy), so the slot's new actor fails in its constructor every time. Each
    failure preempted the trial and requeued it onto a new actor that failed the same way, about one a
    second without end (budget.time ended it here). Now the trial waits queued for a started actor; three
    failures in a row retire the slot, and with no slot left the sweep stops, resumable, with one error
    naming the cause and the node; no retry is spent."""
    import threading

    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    broken = tmp_path / "broken" / "sweeplab"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('sweeplab is broken on this node')\n")
    good = cluster.add_node(num_cpus=1, resources={"pinned": 1})
    cluster.wait_for_nodes()
    spec = parse_spec({"function": f"{TRIALS}:checkpointing", "method": "grid",
                       "metric": {"name": "loss", "goal": "minimize"},
                       "parameters": {"steps": {"value": 2000}, "delay": {"value": 0.02}},
                       "resources": {"cpus": 1, "custom": {"pinned": 1}},
                       "budget": {"trials": 1, "time": "40s"}}, file="<test>")   # never hang the suite
    store = Store.open(tmp_path / "store")
    driver = Driver(spec, store, RayBackend(spec, workers=1), sweep_name="unstartable")
    driver.create(spec_path=None)
    outcome: list = []
    run = threading.Thread(target=lambda: outcome.append(driver.run()), daemon=True)
    bad = None
    try:
        run.start()
        deadline = time.monotonic() + 60
        while not _has_file(tmp_path / "store" / "checkpoints"):
            assert time.monotonic() < deadline and run.is_alive(), outcome
            time.sleep(0.05)
        path = os.pathsep.join([str(broken.parent), os.environ.get("PYTHONPATH", "")])
        bad = cluster.add_node(num_cpus=1, resources={"pinned": 1}, env_vars={"PYTHONPATH": path})   # main thread
        cluster.remove_node(good, allow_graceful=False)
        good = None
        run.join(timeout=120)
        assert not run.is_alive()
    finally:
        for node in (good, bad):
            if node is not None:
                cluster.remove_node(node, allow_graceful=False)
    (end,) = outcome
    assert (end.state.value, end.exit_code) == ("stopped", 1), end
    assert "no Ray actor for trials can start" in end.reason, end.reason
    assert "ImportError: sweeplab is broken on this node (node " in end.reason, end.reason
    rows = [tuple(r) for r in store.conn.execute("SELECT state, reason FROM attempts ORDER BY number")]
    assert rows == [("preempted", "Ray node lost")], rows   # no attempt on an actor that never started
    assert [tuple(r) for r in store.conn.execute("SELECT state FROM trials")] == [("preempted",)]   # resumable
    store.close()


@pytest.mark.ray
def test_a_slot_whose_actor_start_hangs_is_warned_about_and_the_sweep_goes_on_without_it(
        cluster, tmp_path, monkeypatch):
    """Slot 1's only node hangs importing sweeplab (a site hook or a runtime_env that never returns), so its
    actor never answers. The slot silently took no trial: the sweep ran on one slot of two, with no word
    anywhere. Now a warning names the slot, in the event log and on the terminal (`on_note`), once; the
    other slot runs the sweep to its end."""
    from sweeplab.backends.ray import _core
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    # start() waits this long for the first actor, then for the rest: 2 s failed the suite once under load (the
    # good slot's actor, a cold Python process, was not up either: "no Ray actor ... started within 2s")
    monkeypatch.setattr(_core, "_START_TIMEOUT", 10.0)
    monkeypatch.setattr(_core, "_BOOT_WARN", 2.0, raising=False)
    stuck = tmp_path / "stuck" / "sweeplab"
    stuck.mkdir(parents=True)
    (stuck / "__init__.py").write_text("import time\ntime.sleep(3600)\n")
    path = os.pathsep.join([str(stuck.parent), os.environ.get("PYTHONPATH", "")])
    good = cluster.add_node(num_cpus=1, resources={"lane": 1})
    bad = cluster.add_node(num_cpus=1, resources={"lane": 1}, env_vars={"PYTHONPATH": path})
    cluster.wait_for_nodes()
    try:
        # the trials last until the warning came: a loaded machine ran all 4 before it (the test failed)
        warned_file = tmp_path / "warned"
        spec = parse_spec({"function": f"{TRIALS}:until_file", "method": "random", "seed": 0,
                           "metric": {"name": "loss", "goal": "minimize"},
                           "parameters": {"x": {"min": 0.0, "max": 1.0}, "file": {"value": str(warned_file)}},
                           "resources": {"cpus": 1, "custom": {"lane": 1}},
                           "budget": {"trials": 4, "time": "60s"}}, file="<test>")   # never hang the suite
        store = Store.open(tmp_path / "store")
        notes: list[str] = []

        def on_note(text: str) -> None:
            notes.append(text)
            if "has not started" in text:
                warned_file.write_text("1")

        driver = Driver(spec, store, RayBackend(spec, workers=2), sweep_name="stuck-slot", on_note=on_note)
        driver.create(spec_path=None)
        outcome = driver.run()
        assert outcome.counts.get("completed") == 4, outcome
        warned = [n for n in notes if "has not started" in n]
        assert len(warned) == 1 and warned[0].startswith("slot "), notes
        rows = [tuple(r) for r in store.conn.execute(
            "SELECT kind, trial_id FROM events WHERE kind = 'actor_not_started'")]
        assert rows == [("actor_not_started", None)], rows
        store.close()
    finally:
        cluster.remove_node(bad, allow_graceful=False)
        cluster.remove_node(good, allow_graceful=False)


@pytest.mark.ray
def test_asha_verdicts_reach_trials_waiting_at_their_rung_on_ray(cluster, tmp_path):
    """`go` travels driver -> actor -> worker like `stop`: a pruned trial trains nothing past its rung,
    a promoted one is not held up (it runs to the end)."""
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    curves = Path(__file__).resolve().parents[1] / "fixtures" / "curves.py"
    spec = parse_spec({"function": f"{curves}:curve", "method": "grid",
                       "metric": {"name": "val_loss", "goal": "minimize"},
                       "early_terminate": {"type": "asha", "min_iter": 1, "max_iter": 300, "eta": 3},
                       "parameters": {"kind": {"values": ["good-b", "good", "hopeless-a", "hopeless-b"]},
                                      "steps": {"value": 300}, "delay": {"value": 0.0}},
                       "budget": {"time": "90s"}}, file="<test>")
    store = Store.open(tmp_path / "store")
    driver = Driver(spec, store, RayBackend(spec, workers=1), sweep_name="ray-rungs")
    driver.create(spec_path=None)
    driver.run()
    rows = store.conn.execute(
        "SELECT t.state, MAX(m.step) FROM metrics m JOIN trials t ON t.id = m.trial_id WHERE m.key = 'val_loss' "
        "GROUP BY t.number ORDER BY t.number").fetchall()
    assert [tuple(r) for r in rows] == [("completed", 300), ("completed", 300), ("pruned", 1), ("pruned", 1)]


def ignores_stop(config, run):
    """Reports once, then never looks at run.should_stop: only the kill after trial.grace ends it. Its report
    spends the sweep's whole `budget.cost.spent`: the budget stops it once it has reported, however long Ray
    took to start it (a time budget of 8 s ran out before a loaded CI run's actor had started it)."""
    run.log({"loss": 0.25, "spent": 1.0}, step=0)
    while True:
        time.sleep(0.05)


@pytest.mark.ray
def test_a_trial_killed_after_its_grace_keeps_its_last_report_on_ray(cluster, tmp_path):
    """As on the local backend: stopped by the (hard) budget, killed after trial.grace, the trial is `stopped` with its
    last reported value (the Ray kill's end is not a failure of its own), and nothing of it runs on."""
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    spec = parse_spec({"function": f"{Path(__file__).resolve()}:ignores_stop", "method": "grid",
                       "metric": {"name": "loss", "goal": "minimize"}, "parameters": {"x": {"values": [1]}},
                       "budget": {"cost": {"spent": 1}, "time": "120s"}, "trial": {"grace": "1s"}}, file="<test>")
    store = Store.open(tmp_path / "store")
    driver = Driver(spec, store, RayBackend(spec, workers=1, resources={"cpus": 1}), sweep_name="ray-grace",
                    hard_budget=True)
    driver.create(spec_path=None)
    driver.run()
    rows = [tuple(r) for r in store.conn.execute("SELECT state, value FROM trials").fetchall()]
    assert rows == [("stopped", 0.25)], rows


@pytest.mark.ray
def test_a_multi_process_trial_killed_after_its_grace_keeps_its_last_report_on_ray(cluster, tmp_path):
    """The same for 2 ranks in a placement group: the ranks' kills end the trial as the stop standing."""
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    spec = parse_spec({"function": f"{Path(__file__).resolve()}:ignores_stop", "method": "grid",
                       "metric": {"name": "loss", "goal": "minimize"}, "parameters": {"x": {"values": [1]}},
                       "resources": {"workers": 2, "cpus_per_worker": 0.5},
                       "budget": {"cost": {"spent": 1}, "time": "120s"}, "trial": {"grace": "1s"}}, file="<test>")
    store = Store.open(tmp_path / "store")
    driver = Driver(spec, store, RayBackend(spec, workers=1), sweep_name="ray-grace-ranks", hard_budget=True)
    driver.create(spec_path=None)
    driver.run()
    rows = [tuple(r) for r in store.conn.execute("SELECT state, value FROM trials").fetchall()]
    assert rows == [("stopped", 0.25)], rows


@pytest.mark.ray
def test_a_retry_on_ray_skips_a_corrupt_newest_checkpoint_and_restores_the_one_before(cluster, tmp_path):
    b = RayBackend(workers=1, resources={"cpus": 1})
    b.start()
    try:
        first = make_task(tmp_path, 1, f"{TRIALS}:checkpointing", config={"steps": 3}, keep_checkpoints=3)
        b.submit(first)
        assert collect(b, [1])[1][-1].kind is EventKind.FINISHED
        newest = max(Path(first.checkpoint_dir).iterdir(), key=lambda p: p.stat().st_mtime_ns)
        manifest = json.loads((newest / "manifest.json").read_text())
        (newest / manifest["payload"]).write_bytes(b"garbage")   # the newest (step 2) is damaged
        b.submit(make_task(tmp_path, 1, f"{TRIALS}:checkpointing", config={"steps": 3}, keep_checkpoints=3,
                           attempt=2))
        events = collect(b, [1])[1]
    finally:
        b.shutdown()
    assert events[-1].kind is EventKind.FINISHED, events[-1].data
    steps = [p[0] for e in events if e.kind is EventKind.METRICS for p in e.data["points"]]
    assert steps == [2], steps   # restored step 1's checkpoint ({"step": 2}), not step 2's, and not from scratch


def test_the_spec_s_resources_placement_reaches_the_backend_unless_given():
    """Constructing the backend does not start Ray: this runs without a cluster."""
    from sweeplab.spec import parse_spec

    spec = parse_spec({"function": f"{TRIALS}:quick", "method": "random",
                       "parameters": {"x": {"values": [1]}},
                       "resources": {"workers": 2, "placement": "strict_spread"}}, file="<test>")
    assert RayBackend(spec).placement == "STRICT_SPREAD"
    assert RayBackend(spec, placement=None).placement is None
    assert RayBackend().placement == "PACK"


# ------------------------------------------------------------------------------------ command trials' process trees
def _tree_of(pids: Path, trial: int, timeout: float = 60.0) -> list[int]:
    files = [pids / f"{trial}-1-{who}.pid" for who in ("program", "child")]
    deadline = time.monotonic() + timeout
    while not all(f.exists() for f in files):
        assert time.monotonic() < deadline, f"trial {trial}'s program and child did not start"
        time.sleep(0.05)
    return [int(f.read_text()) for f in files]


def _all_dead(pids: list[int], within: float = 10.0) -> list[int]:
    """The pids still alive `within` seconds on (polled: returns as soon as all are gone). Not 3 s: on a
    loaded 2-core machine the reaper's look over /proc after the kill may take longer, and a slow reaper would be
    reported as a process left behind."""
    import psutil

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


@pytest.mark.ray
def test_kill_and_shutdown_take_down_a_command_trial_s_whole_tree_on_ray(cluster, tmp_path):
    """The program ignores SIGTERM and its child starts a session of its own: only the tree kill ends them."""
    import sys

    program = Path(__file__).resolve().parents[1] / "faults" / "tree_program.py"
    pids = tmp_path / "pids"
    pids.mkdir()
    argv = [sys.executable, str(program), f"--pids={pids}", "--ignore_term=1", "--setsid_child=1"]
    b = RayBackend(workers=1, resources={"cpus": 1})
    b.start()
    try:
        b.submit(make_task(tmp_path, 1, command=argv))
        tree = _tree_of(pids, 1)
        b.kill(1, "killed by the test")
        ev = collect(b, [1], timeout=60)[1]
        assert ev[-1].kind is EventKind.FAILED and "killed by the test" in ev[-1].data["reason"]
        assert not _all_dead(tree), "a killed command trial left processes behind"
        b.submit(make_task(tmp_path, 2, command=argv))
        tree = _tree_of(pids, 2)
    finally:
        b.shutdown()
    assert not _all_dead(tree), "a command trial outlived the backend's shutdown"


@pytest.mark.ray
def test_an_actors_worker_imports_the_trials_libraries_before_its_first_trial(cluster, tmp_path):
    """As a local worker does (backends/preload.py): the trial's seed then seeds the libraries however the
    trial imports them, on Ray as locally."""
    from sweeplab.spec import parse_spec

    (tmp_path / "probe.py").write_text(
        "import sys\n\ndef probe(config, run):\n    had = 'yaml' in sys.modules\n    import yaml\n"
        "    run.log({'had': int(had)})\n")
    spec = parse_spec({"function": f"{tmp_path / 'probe.py'}:probe", "method": "random",
                       "parameters": {"x": {"min": 0.0, "max": 1.0}}}, file="<test>")
    b = RayBackend(spec, workers=1, resources={"cpus": 1})
    assert b.preload == ("yaml",)
    b.start()
    try:
        b.submit(make_task(tmp_path, 1, f"{tmp_path / 'probe.py'}:probe"))
        ev = collect(b, [1])[1]
        points = [p for e in ev if e.kind.value == "metrics" for p in e.data["points"]]
        assert ev[-1].kind.value == "finished" and [p[2] for p in points if p[1] == "had"] == [1.0], ev
    finally:
        b.shutdown(grace=0.0)


@pytest.mark.ray
def test_trial_workdir_trial_runs_each_trial_in_its_own_directory_on_ray(cluster, tmp_path):
    """`trial.workdir: trial` on Ray: the actor's worker creates the trial's directory under the store (this
    loopback cluster's nodes see the store's path) and runs the function there; the sweep's directory is
    SWEEPLAB_ORIGINAL_CWD and run.original_cwd."""
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    records = Path(__file__).resolve().parents[1] / "integration" / "test_trial_workdir.py"
    (tmp_path / "data.txt").write_text("data")
    spec = parse_spec({"function": f"{records}:records", "method": "grid", "metric": {"name": "x"},
                       "parameters": {"x": {"values": [1, 2]}}, "trial": {"workdir": "trial", "retries": 0}},
                      file="<test>")
    store = Store.open(tmp_path / "store")
    driver = Driver(spec, store, RayBackend(spec, workers=1, resources={"cpus": 1}), sweep_name="ray-wd",
                    cwd=str(tmp_path))
    driver.create(spec_path=None)
    driver.run()
    rows = [tuple(r) for r in store.conn.execute("SELECT number, state FROM trials ORDER BY number").fetchall()]
    assert rows == [(0, "completed"), (1, "completed")], rows
    for number, x in ((0, 1), (1, 2)):
        facts = json.loads((tmp_path / f"facts-{x}.json").read_text())
        own = str((tmp_path / "store").resolve() / "workdirs" / "ray-wd" / str(number))
        assert (facts["cwd"], facts["env"], facts["api"], facts["read"]) == (own, str(tmp_path), str(tmp_path),
                                                                             str(x)), facts


# ------------------------------------------------------------------------------------ same promises as local
_PARITY = '''
import os, signal, sys, time
from pathlib import Path


def trial(config, run):
    kind = config["kind"]
    print("out-" + kind)
    print("err-" + kind, file=sys.stderr)
    Path(config["pids"], kind).write_text(str(os.getpid()))
    if kind == "fails":
        run.capture("input", {"row": 7})
        raise ValueError("bad row 7")
    if kind == "hangs":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(0.1)
    run.log({"loss": 1.0}, step=0)
    return {"loss": 1.0}
'''


@pytest.mark.ray
@pytest.mark.parametrize("backend", ["local", "ray"])
def test_points_logs_failure_captures_and_trial_timeout_are_the_same_on_ray_as_on_local(cluster, tmp_path, backend):
    """One sweep of three `points_to_evaluate`: a trial that returns, one that raises (its traceback, its
    stdout/stderr in its log, its capture for `sweeplab repro`), one that hangs ignoring SIGTERM (ended by
    `trial.timeout`, its process gone after the sweep)."""
    import psutil

    from sweeplab.api import build_backend
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    (tmp_path / "parity.py").write_text(_PARITY)
    pids = tmp_path / "pids"
    pids.mkdir()
    spec = parse_spec({"function": f"{tmp_path / 'parity.py'}:trial", "method": "random", "seed": 0,
                       "metric": {"name": "loss", "goal": "minimize"},
                       "parameters": {"kind": {"values": ["ok", "fails", "hangs"]}, "pids": {"value": str(pids)}},
                       "points_to_evaluate": [{"kind": "ok"}, {"kind": "fails"}, {"kind": "hangs"}],
                       "budget": {"trials": 3}, "trial": {"timeout": "6s", "retries": 0, "grace": 1}},
                      file="<test>")
    store = Store.open(tmp_path / "store")
    be = (RayBackend(spec, workers=1, resources={"cpus": 1}) if backend == "ray"
          else build_backend(spec, workers=1, backend="local", store_root=tmp_path / "store"))
    driver = Driver(spec, store, be, sweep_name="parity")
    driver.create(spec_path=None)
    driver.run()
    rows = {json.loads(r["config"])["kind"]: r for r in store.conn.execute(
        "SELECT t.id, t.number, t.state, t.config, a.error_type, a.traceback, a.reason, a.log_path "
        "FROM trials t JOIN attempts a ON a.trial_id = t.id ORDER BY t.number")}
    assert [(k, r["number"], r["state"]) for k, r in rows.items()] == [
        ("ok", 0, "completed"), ("fails", 1, "failed"), ("hangs", 2, "failed")]
    root = tmp_path / "store"
    for kind, r in rows.items():
        log = (root / r["log_path"]).read_text()
        assert f"out-{kind}" in log and f"err-{kind}" in log, (kind, log)
    failed = rows["fails"]
    assert failed["error_type"] == "ValueError" and "bad row 7" in failed["traceback"], dict(failed)
    (capture,) = store.conn.execute("SELECT path FROM artifacts WHERE trial_id=? AND name='capture'",
                                    (failed["id"],)).fetchall()
    assert (root / capture["path"]).exists()
    assert "timeout" in rows["hangs"]["reason"], dict(rows["hangs"])
    hung = int((pids / "hangs").read_text())
    assert not psutil.pid_exists(hung) or psutil.Process(hung).status() == psutil.STATUS_ZOMBIE
    store.close()


@pytest.mark.ray
def test_a_command_trial_with_trial_workdir_runs_in_its_own_directory_and_its_retry_finds_it_on_ray(
        cluster, tmp_path):
    """As on the local backend (tests/integration/test_trial_workdir.py): a W&B program runs in
    `<store>/workdirs/<sweep>/<trial>/`, and the retry of its failed attempt finds what that attempt wrote."""
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    program = Path(__file__).resolve().parents[1] / "integration" / "test_trial_workdir.py"
    import importlib.util

    mod_spec = importlib.util.spec_from_file_location("_wd_program", program)
    assert mod_spec is not None and mod_spec.loader is not None
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    (tmp_path / "prog.py").write_text(mod.PROGRAM)
    (tmp_path / "wrote-1").touch()   # the program waits for the local test's other trial (x=1): none here
    spec = parse_spec({"program": "prog.py", "command": ["${env}", "${interpreter}", "${program}", "${args}"],
                       "method": "grid", "metric": {"name": "x"}, "parameters": {"x": {"values": [2]}},
                       "trial": {"workdir": "trial", "retries": 1}}, file="<test>")
    store = Store.open(tmp_path / "store")
    driver = Driver(spec, store, RayBackend(spec, workers=1, resources={"cpus": 1}), sweep_name="ray-cmd-wd",
                    cwd=str(tmp_path))
    driver.create(spec_path=None)
    driver.run()
    (row,) = store.conn.execute("SELECT state, attempts, metrics FROM trials").fetchall()
    assert (row["state"], row["attempts"]) == ("completed", 2), dict(row)
    assert json.loads(row["metrics"])["resumed"] == 1 and json.loads(row["metrics"])["read"] == 2, dict(row)
    own = (tmp_path / "store").resolve() / "workdirs" / "ray-cmd-wd" / "0"
    assert json.loads((tmp_path / "facts-2.json").read_text())["cwd"] == str(own)
    assert not (tmp_path / "out.txt").exists()
    store.close()


_RETRIED = '''
import os, signal, time


def trial(config, run):
    state = run.restore() or {"step": 0}
    restored = state["step"]
    for step in range(restored, 6):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
        run.checkpoint({"step": step + 1}, step=step)
        if step == 2 and run.attempt == 1:
            run.flush()
            time.sleep(0.3)   # the checkpoint's event reaches the driver
            os.kill(os.getpid(), signal.SIGKILL if config["kind"] == "killed" else signal.SIGSTOP)
        time.sleep(0.02)
    return {"loss": 1.0 / 6, "restored": float(restored)}
'''


@pytest.mark.ray
@pytest.mark.parametrize("backend", ["local", "ray"])
def test_a_worker_killed_or_frozen_mid_trial_is_retried_from_its_checkpoint_on_ray_as_on_local(
        cluster, tmp_path, backend):
    """The trial's worker process dies of SIGKILL, or stops (SIGSTOP: no heartbeat, ended by
    `trial.heartbeat_timeout`): the attempt fails naming why, and the retry resumes from the last checkpoint."""
    from sweeplab.api import build_backend
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    (tmp_path / "retried.py").write_text(_RETRIED)
    spec = parse_spec({"function": f"{tmp_path / 'retried.py'}:trial", "method": "random", "seed": 0,
                       "metric": {"name": "loss", "goal": "minimize"},
                       "parameters": {"kind": {"values": ["killed", "frozen"]}},
                       "points_to_evaluate": [{"kind": "killed"}, {"kind": "frozen"}],
                       "budget": {"trials": 2}, "trial": {"retries": 1, "heartbeat_timeout": 10}},
                       file="<test>")   # not 3 s: a loaded run's starved (not frozen) worker could be failed as hung
    store = Store.open(tmp_path / "store")
    be = (RayBackend(spec, workers=1, resources={"cpus": 1}) if backend == "ray"
          else build_backend(spec, workers=1, backend="local", store_root=tmp_path / "store"))
    driver = Driver(spec, store, be, sweep_name="retried")
    driver.create(spec_path=None)
    driver.run()
    trials = [dict(r) for r in store.conn.execute("SELECT id, state, attempts, metrics FROM trials ORDER BY number")]
    assert [(t["state"], t["attempts"]) for t in trials] == [("completed", 2)] * 2, trials
    assert all(json.loads(t["metrics"])["restored"] >= 1 for t in trials), trials   # not from scratch
    first = [store.conn.execute("SELECT state, reason, signal FROM attempts WHERE trial_id=? AND number=1",
                                (t["id"],)).fetchone() for t in trials]
    assert first[0]["state"] == "failed" and first[0]["signal"] == 9, dict(first[0])
    assert first[1]["state"] == "failed" and "heartbeat" in first[1]["reason"], dict(first[1])
    store.close()


_DEAF = '''
import time


def trial(config, run):
    """Never reads run.should_stop: only smoke mode's SmokeDone ends its loop early."""
    for step in range(1200):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
        time.sleep(0.05)
    return {"loss": 0.0}
'''


@pytest.mark.ray
@pytest.mark.parametrize("backend", ["local", "ray"])
def test_smoke_mode_cuts_a_loop_that_never_reads_should_stop_on_ray_as_on_local(cluster, tmp_path, backend):
    from sweeplab.api import build_backend
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    (tmp_path / "deaf.py").write_text(_DEAF)
    spec = parse_spec({"function": f"{tmp_path / 'deaf.py'}:trial", "method": "grid",
                       "metric": {"name": "loss", "goal": "minimize"}, "parameters": {"x": {"values": [1]}},
                       "resources": {"cpus": 1, "gpus": 1}}, file="<test>")
    store = Store.open(tmp_path / "store")
    be = (RayBackend(spec, workers=1, smoke=True) if backend == "ray"
          else build_backend(spec, workers=1, backend="local", smoke=True, store_root=tmp_path / "store"))
    driver = Driver(spec, store, be, sweep_name="smoke", smoke=True)
    driver.create(spec_path=None)
    driver.run()
    (row,) = store.conn.execute("SELECT id, state, last_step FROM trials").fetchall()
    assert row["state"] == "completed" and row["last_step"] < 100, dict(row)
    store.close()


def test_gang_samples_go_out_during_the_trial_though_a_rank_sends_none():
    """A rank whose sampler sends nothing (psutil failing on its node) holds back the trial's samples 30 s at
    most, not until the trial ends (the dashboard's live system charts stayed empty)."""
    from sweeplab.backends.ray._samples import RankSamples

    rs = RankSamples(2)
    out = [s for k in range(40) for s in rs.add(0, [{"time": 100.0 + k, "cpu": 50.0, "rss": 1, "procs": 1}])]
    assert len(out) >= 5 and all(s["cpu"] == 50.0 for s in out)


def test_gang_samples_keep_a_rank_s_memory_when_its_final_sample_follows_its_last_closely():
    """A rank's final sample (taken once its function returned and let go of its memory) fell in the bucket of
    its last one and replaced it: the trial's samples lost the memory the rank held."""
    from sweeplab.backends.ray._samples import RankSamples

    rs = RankSamples(2)
    out = rs.add(0, [{"time": 100.0, "cpu": 10.0, "rss": 50, "procs": 1}])
    out += rs.add(1, [{"time": 100.2, "cpu": 30.0, "rss": 900, "procs": 1},
                      {"time": 100.6, "cpu": 10.0, "rss": 40, "procs": 1}])
    out += rs.flush()
    assert [(s["cpu"], s["rss"], s["procs"]) for s in out] == [(30.0, 950, 2)]
