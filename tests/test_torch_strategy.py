"""sweeplab.torch: one training code path for CPU, one GPU and DDP (CPU-only tests, real processes)."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import textwrap
from collections import namedtuple
from pathlib import Path

import pytest

import sweeplab
from sweeplab.errors import ConfigError, UserError

try:
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset
except ImportError:  # a minimal install: only the "missing extra" test runs
    torch = None  # type: ignore[assignment]

needs_torch = pytest.mark.skipif(torch is None, reason="the [torch] extra is not installed")

SRC = str(Path(sweeplab.__file__).resolve().parents[1])
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


@pytest.fixture
def single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)


# -- the extra ----------------------------------------------------------------------------------------

BLOCK_TORCH = textwrap.dedent("""
    import sys
    class BlockTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, BlockTorch())
    from sweeplab.errors import MissingExtraError
    try:
        import sweeplab.torch
    except MissingExtraError as exc:
        print("MissingExtraError:", exc)
    else:
        print("imported")
""")


def test_importing_sweeplab_torch_without_torch_raises_missing_extra_naming_the_extra() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH], env=_env(), capture_output=True, text=True, timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("MissingExtraError:"), proc.stdout + proc.stderr
    assert "pip install 'sweeplab[torch]'" in proc.stdout


def test_importing_sweeplab_does_not_import_torch() -> None:
    code = "import sys, sweeplab; print('torch' in sys.modules, 'sweeplab.torch' in sys.modules)"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.stdout.split() == ["False", "False"], proc.stderr


# -- environment ------------------------------------------------------------------------------------

@needs_torch
def test_strategy_without_launcher_variables_is_one_cpu_process(single_process: None) -> None:
    from sweeplab.torch import strategy

    s = strategy()
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert (s.device.type, s.rank, s.local_rank, s.world_size) == (expected, 0, 0, 1)
    assert s.is_main and not s.is_distributed
    assert s.all_reduce_mean(2.5) == 2.5
    s.barrier()
    s.cleanup()


BAD_ENVS = [
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, "RANK"),
    ({"WORLD_SIZE": "2", "RANK": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "x", "MASTER_PORT": "1"}, "RANK"),
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_PORT": "29500"}, "MASTER_ADDR"),
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "70000"},
     "MASTER_PORT"),
]


@needs_torch
@pytest.mark.parametrize(("env", "key"), BAD_ENVS,
                         ids=["ws-not-int", "ws-zero", "no-rank", "rank-too-big", "no-addr", "bad-port"])
def test_bad_launcher_environment_is_a_config_error_naming_the_variable(
    single_process: None, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], key: str
) -> None:
    from sweeplab.torch import strategy

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        strategy()
    assert info.value.key == key
    assert not torch.distributed.is_initialized()


@needs_torch
@pytest.mark.parametrize("backend", ["mpi", "nccl"])
def test_unknown_or_impossible_backend_is_a_config_error(single_process: None, backend: str) -> None:
    from sweeplab.torch import strategy

    if backend == "nccl" and torch.cuda.is_available():
        pytest.skip("NCCL is possible on this machine")
    with pytest.raises(ConfigError) as info:
        strategy(backend=backend)
    assert info.value.key == "backend"


# -- one process ------------------------------------------------------------------------------------

def _regression_data(n: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g)
    y = torch.tanh(x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])) + 0.01 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def _train(amp: bool, epochs: int = 6) -> tuple[list[float], torch.dtype]:
    from sweeplab.torch import strategy

    torch.manual_seed(0)
    s = strategy(amp=amp)
    model, optimizer = s.setup(
        nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1)), None
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    loader = s.loader(_regression_data(), batch_size=16, seed=3)
    losses, dtype = [], torch.float32
    for _ in range(epochs):
        total = 0.0
        for batch in loader:
            x, y = s.to_device(batch)
            with s.autocast():
                out = model(x)
                dtype = out.dtype
                loss = nn.functional.mse_loss(out.float(), y)
            s.backward(loss)
            assert math.isfinite(s.grad_norm())
            s.step(optimizer)
            total += loss.item()
        losses.append(s.all_reduce_mean(total / len(loader)))
    return losses, dtype


@needs_torch
@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp-bf16"])
def test_single_process_strategy_trains_a_tiny_model(single_process: None, amp: bool) -> None:
    losses, dtype = _train(amp)
    assert losses[-1] < 0.5 * losses[0], losses
    assert dtype == (torch.bfloat16 if amp else torch.float32)


@needs_torch
def test_grad_norm_equals_the_hand_computed_norm(single_process: None) -> None:
    from sweeplab.torch import strategy

    s = strategy()
    model, _ = s.setup(nn.Linear(3, 2))
    x = torch.tensor([[1.0, 2.0, 2.0]])
    s.backward(model(s.to_device(x)).sum())
    # d(sum(Wx + b))/dW[i, j] = x[j] for both rows, d/db[i] = 1: |g|^2 = 2 * |x|^2 + 2 = 2 * 9 + 2
    assert s.grad_norm() == pytest.approx(math.sqrt(20.0), rel=1e-6)
    assert s.grad_norm(model) == pytest.approx(math.sqrt(20.0), rel=1e-6)


@needs_torch
def test_grad_norm_after_step_is_a_user_error_not_a_silent_zero(single_process: None) -> None:
    from sweeplab.torch import Strategy

    s = Strategy()
    model, optimizer = s.setup(nn.Linear(3, 1), None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    s.backward(model(torch.ones(1, 3)).sum())
    s.step(optimizer)
    with pytest.raises(UserError, match="before strategy.step"):
        s.grad_norm()


@needs_torch
def test_step_with_max_norm_clips_the_update(single_process: None) -> None:
    from sweeplab.torch import Strategy

    s = Strategy()
    layer = nn.Linear(3, 1, bias=False)
    model, optimizer = s.setup(layer, torch.optim.SGD(layer.parameters(), lr=1.0))
    before = layer.weight.detach().clone()
    s.backward(model(torch.tensor([[30.0, 40.0, 0.0]])).sum())  # gradient norm 50
    assert s.grad_norm() == pytest.approx(50.0)
    s.step(optimizer, max_norm=2.0)
    assert torch.linalg.vector_norm(layer.weight.detach() - before).item() == pytest.approx(2.0, rel=1e-5)
    assert layer.weight.grad is None  # zero_grad(set_to_none=True)


Pair = namedtuple("Pair", "x y")


@needs_torch
def test_to_device_moves_nested_tensors_and_keeps_the_structure(single_process: None) -> None:
    from sweeplab.torch import Strategy

    s = Strategy("cpu")
    batch = {"a": (torch.ones(2), [torch.zeros(1), "label"]), "b": Pair(torch.ones(1), 3)}
    moved = s.to_device(batch)
    assert isinstance(moved["b"], Pair) and moved["b"].y == 3
    assert isinstance(moved["a"], tuple) and isinstance(moved["a"][1], list)
    assert moved["a"][1][1] == "label"
    assert all(t.device == s.device for t in (moved["a"][0], moved["a"][1][0], moved["b"].x))


@needs_torch
def test_state_dict_is_unwrapped_and_a_cpu_copy(single_process: None) -> None:
    from sweeplab.torch import Strategy

    s = Strategy()
    inner = nn.Linear(2, 2)
    wrapped = nn.DataParallel(inner)  # no GPU: a plain wrapper around `inner`
    state = s.state_dict(wrapped)
    assert set(state) == {"weight", "bias"}
    assert s.unwrap(wrapped) is inner
    with torch.no_grad():
        inner.weight.add_(1.0)
    assert not torch.equal(state["weight"], inner.weight)  # a copy, not a view of live parameters
    s.load_state_dict(wrapped, state)
    assert torch.equal(state["weight"], inner.weight)


# -- the loader -------------------------------------------------------------------------------------

def _batches(loader: object) -> list[list[int]]:
    return [b[0].tolist() for b in loader]  # type: ignore[attr-defined]


@needs_torch
def test_ranks_split_each_global_batch_of_the_one_process_order() -> None:
    from sweeplab.torch import Strategy

    data = TensorDataset(torch.arange(24))
    one = _batches(Strategy().loader(data, batch_size=6, seed=5))
    ranks = [_batches(Strategy(rank=r, world_size=2).loader(data, batch_size=6, seed=5)) for r in (0, 1)]
    assert len(one) == len(ranks[0]) == len(ranks[1]) == 4
    for k, batch in enumerate(one):
        assert len(ranks[0][k]) == len(ranks[1][k]) == 3  # batch_size is the global batch
        assert sorted(ranks[0][k] + ranks[1][k]) == sorted(batch)
    assert sorted(i for batch in one for i in batch) == list(range(24))


@needs_torch
def test_loader_reshuffles_each_pass_and_epoch_sets_the_next_pass() -> None:
    from sweeplab.torch import Strategy

    s = Strategy()
    loader = s.loader(TensorDataset(torch.arange(32)), batch_size=8, seed=0)
    first, second = _batches(loader), _batches(loader)
    assert first != second
    s.epoch(0)
    assert _batches(loader) == first
    s.epoch(1)
    assert _batches(loader) == second
    unshuffled = _batches(s.loader(TensorDataset(torch.arange(8)), batch_size=4, shuffle=False))
    assert unshuffled == [[0, 1, 2, 3], [4, 5, 6, 7]]


@needs_torch
def test_a_loader_built_after_epoch_starts_at_that_epoch() -> None:
    # a loader built inside the epoch loop (after strategy.epoch(e)) reshuffled as epoch 0 every epoch
    from sweeplab.torch import Strategy

    data = TensorDataset(torch.arange(32))
    reference = Strategy().loader(data, batch_size=8, seed=0)
    orders = [_batches(reference) for _ in range(3)]
    s = Strategy()
    seen = []
    for epoch in range(3):
        s.epoch(epoch)
        seen.append(_batches(s.loader(data, batch_size=8, seed=0)))
    assert seen == orders


@needs_torch
@pytest.mark.parametrize(("kwargs", "key"), [
    ({"batch_size": 5}, "batch_size"),
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": 4, "sampler": [0, 1]}, "sampler"),
], ids=["not-divisible", "zero", "own-sampler"])
def test_loader_rejects_what_it_cannot_honour(kwargs: dict[str, object], key: str) -> None:
    from sweeplab.torch import Strategy

    data = TensorDataset(torch.arange(8))
    with pytest.raises(ConfigError) as info:
        Strategy(world_size=2, rank=0).loader(data, **kwargs)  # type: ignore[arg-type]
    assert info.value.key == key


# -- DDP: two real processes on CPU (gloo) ----------------------------------------------------------

WORKER = textwrap.dedent("""
    import json, os, sys
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import TensorDataset
    import sweeplab.torch

    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(rank)  # ranks start different: DDP must broadcast rank 0's parameters
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4, generator=g)
    y = torch.tanh(x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])) + 0.01 * torch.randn(64, 1, generator=g)

    strategy = sweeplab.torch.strategy()
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    model, optimizer = strategy.setup(model, optimizer)
    loader = strategy.loader(TensorDataset(x, y), batch_size=16, seed=7)
    losses, norms = [], []
    for epoch in range(3):
        total = 0.0
        for batch in loader:
            xb, yb = strategy.to_device(batch)
            with strategy.autocast():
                loss = nn.functional.mse_loss(model(xb), yb)
            strategy.backward(loss)
            norms.append(strategy.grad_norm())
            strategy.step(optimizer)
            total += loss.item()
        losses.append(strategy.all_reduce_mean(total / len(loader)))
    # gradient accumulation, 2 micro-batches a step: the first's backward skips DDP's all-reduce
    unsynced = []
    for i, batch in enumerate(strategy.loader(TensorDataset(x, y), batch_size=8, seed=11)):
        xb, yb = strategy.to_device(batch)
        accumulating = i % 2 == 0
        with strategy.no_sync(enabled=accumulating):
            strategy.backward(nn.functional.mse_loss(model(xb), yb) / 2)
        if accumulating:   # this rank's own gradients, not averaged with the other rank's
            unsynced.append(strategy.grad_norm())
        else:
            strategy.step(optimizer)
    state = strategy.state_dict(model)
    out = {
        "rank": strategy.rank, "world_size": strategy.world_size, "is_main": strategy.is_main,
        "wrapper": type(model).__name__, "losses": losses, "norms": norms, "unsynced": unsynced,
        "mean_rank": strategy.all_reduce_mean(float(strategy.rank)),
        # only rank 1 is asked to stop; every rank must agree to stop at the same step
        "agreed_stop": strategy.should_stop(type("R", (), {"should_stop": strategy.rank == 1})()),
        "keys": sorted(state), "params": {k: v.flatten().tolist() for k, v in state.items()},
    }
    strategy.barrier()
    strategy.cleanup()
    strategy.cleanup()
    out["group_after_cleanup"] = dist.is_initialized()
    with open(os.path.join(sys.argv[1], f"rank{strategy.rank}-of-{strategy.world_size}.json"), "w") as f:
        json.dump(out, f)
    # End as sweeplab's workers end (sweeplab/_exit.py), without the interpreter's teardown: there the DDP
    # model still holds the gloo process group, and torch's C++ threads, destroyed during finalization, now
    # and then abort the process ("terminate called without an active exception", exit -6) after every
    # result above was written (seen once in a full run under load).
    sys.stdout.flush()
    os._exit(0)
""")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@needs_torch
@pytest.mark.slow
def test_two_process_ddp_on_cpu_matches_the_one_process_run(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = str(_free_port())
    envs = [_env()] + [
        _env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        for r in (0, 1)
    ]
    procs = [
        subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for env in envs
    ]
    try:
        outputs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err

    def load(name: str) -> dict:
        return json.loads((tmp_path / name).read_text())

    one, r0, r1 = load("rank0-of-1.json"), load("rank0-of-2.json"), load("rank1-of-2.json")
    assert (one["wrapper"], r0["wrapper"], r1["wrapper"]) == (
        "Sequential", "DistributedDataParallel", "DistributedDataParallel")
    assert (r0["is_main"], r1["is_main"], r0["world_size"]) == (True, False, 2)
    assert r0["keys"] == one["keys"] and not any(k.startswith("module.") for k in r0["keys"])
    assert r0["mean_rank"] == r1["mean_rank"] == 0.5
    assert r0["agreed_stop"] is True and r1["agreed_stop"] is True and one["agreed_stop"] is False
    assert not r0["group_after_cleanup"] and not r1["group_after_cleanup"]
    # 2 ranks x 8 samples with averaged gradients == 1 rank x 16 samples: the same run
    assert one["losses"][-1] < one["losses"][0]
    assert r0["losses"] == r1["losses"]
    assert r0["losses"] == pytest.approx(one["losses"], rel=1e-4)
    assert r0["norms"] == pytest.approx(one["norms"], rel=1e-4)
    assert r0["norms"] == pytest.approx(r1["norms"], rel=1e-6)
    # accumulating micro-batches under strategy.no_sync: each rank keeps its own gradients until the step's
    # last backward (they differ), and the accumulated update is still the one-process one (params below)
    assert len(r0["unsynced"]) == len(one["unsynced"]) == 4
    assert all(abs(a - b) > 1e-6 for a, b in zip(r0["unsynced"], r1["unsynced"]))
    for key, values in one["params"].items():
        assert r0["params"][key] == pytest.approx(values, abs=1e-5), key
        assert r1["params"][key] == pytest.approx(r0["params"][key], abs=1e-7), key


# -- DDP trials through sweeplab's local backend: what each rank is given -----------------------------

def ddp_rank_facts(config, run):
    """A DDP trial that records, on each rank, what the backend gave it, then meets the other rank in gloo."""
    import errno

    import sweeplab.torch as slt

    port = int(os.environ["MASTER_PORT"])
    probe = socket.socket()   # a process that asks for this port by number while rank 0 is still starting
    try:
        probe.bind(("127.0.0.1", port))
        port_taken_by_others = True
    except OSError as exc:
        port_taken_by_others = exc.errno != errno.EADDRINUSE
    finally:
        probe.close()
    strategy = slt.strategy()
    strategy.setup(nn.Linear(2, 1))   # DDP: broadcasts rank 0's parameters (a collective)
    mean_rank = strategy.all_reduce_mean(float(strategy.rank))
    strategy.cleanup()
    facts = {
        "torch_threads": torch.get_num_threads(), "mean_rank": mean_rank,
        "port_taken_by_others": port_taken_by_others,
        **{v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
    }
    Path(config["out"], f"rank{strategy.rank}.json").write_text(json.dumps(facts))
    return {"mean_rank": mean_rank}


@pytest.fixture(scope="module")
def ddp_trial_facts(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """One 2-rank DDP trial in a slot of 2 CPUs (OMP/MKL/OpenBLAS threads: 2); each rank's facts."""
    from sweeplab.backends.events import EventKind
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.testing.backends import collect, make_task

    tmp = tmp_path_factory.mktemp("ddp-facts")
    threads = {v: "2" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    with pytest.MonkeyPatch.context() as mp:   # what the worker of a 2-CPU slot is given
        for name, value in threads.items():
            mp.setenv(name, value)
        backend = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]), hide_gpus=True)
        backend.start()
    try:
        backend.submit(make_task(tmp, 1, f"{Path(__file__).resolve()}:ddp_rank_facts",
                                 config={"out": str(tmp)}, world_size=2))
        end = collect(backend, [1], timeout=180)[1][-1]
    finally:
        backend.shutdown(grace=0.0)
    assert end.kind is EventKind.FINISHED, end.data
    assert end.data["metrics"] == {"mean_rank": 0.5}
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in (0, 1)]


@needs_torch
@pytest.mark.slow
def test_each_rank_of_a_ddp_trial_uses_its_share_of_the_slot_threads(ddp_trial_facts: list[dict]) -> None:
    # torch built with MKL sizes its pool from MKL_NUM_THREADS: halving only OMP_NUM_THREADS left each rank
    # with the whole slot's threads (2 ranks x 2 threads on 2 CPUs)
    for facts in ddp_trial_facts:
        assert (facts["OMP_NUM_THREADS"], facts["MKL_NUM_THREADS"], facts["OPENBLAS_NUM_THREADS"]) == ("1",) * 3
        assert facts["torch_threads"] == 1


@needs_torch
@pytest.mark.slow
def test_master_port_is_held_for_the_trial_until_rank_zero_listens(ddp_trial_facts: list[dict]) -> None:
    # between picking MASTER_PORT and rank 0's TCPStore binding it (seconds: torch imports first), another
    # trial on this machine asking for a free port could be given the same one; the port stays reserved
    assert not ddp_trial_facts[0]["port_taken_by_others"]
    assert ddp_trial_facts[0]["mean_rank"] == ddp_trial_facts[1]["mean_rank"] == 0.5


def ddp_ranks_leave_at_different_steps(config, run):
    """DDP code that checks `run.should_stop` without agreeing on it: the stop reaches the ranks at different
    moments, so a rank goes into one more collective after another has left (gloo then raises "Connection
    closed by peer" on it). Here rank 1 always does: it leaves only by that error (whichever rank the stop
    reaches first; rank 1 leaving on a stop seen first made both leave at the same step, under load)."""
    import time

    import sweeplab.torch as slt

    strategy = slt.strategy()
    step = 0
    while True:
        value = strategy.all_reduce_mean(float(step))
        run.log({"step": value}, step=step)
        if run.should_stop and strategy.rank == 0:
            break
        step += 1
        time.sleep(0.02)
    strategy.cleanup()
    return {"steps": float(step)}


@needs_torch
@pytest.mark.slow
def test_a_stopped_ddp_trial_whose_ranks_leave_at_different_steps_is_not_failed(tmp_path: Path) -> None:
    from sweeplab.backends.events import EventKind
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.testing.backends import collect, make_task

    backend = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]), hide_gpus=True)
    backend.start()
    try:
        backend.submit(make_task(tmp_path, 1, f"{Path(__file__).resolve()}:ddp_ranks_leave_at_different_steps",
                                 world_size=2, env={"OMP_NUM_THREADS": "1"}))

        def on_event(ev) -> None:
            if ev.kind is EventKind.METRICS:
                backend.stop(1)   # as ASHA pruning it, a monitor or `sweeplab stop`

        events = collect(backend, [1], timeout=180, on_event=on_event)[1]
    finally:
        backend.shutdown(grace=0.0)
    end = events[-1]
    # rank 0 returned its result after the stop; rank 1's broken collective is the stop's doing, not a failure
    assert end.kind is EventKind.FINISHED, end.data
    assert end.data["stopped"] is True and "steps" in end.data["metrics"]
    notes = [e.data for e in events if e.kind is EventKind.NOTE]
    assert any(n.get("kind") == "ranks_left_unevenly" and "rank 1" in n["message"] for n in notes), notes


# -- the GPU each rank picks (no GPU here: torch.cuda's answers are faked) -------------------------------

GPU_CASES = [
    # visible GPUs, LOCAL_RANK, LOCAL_WORLD_SIZE, the device index
    (1, 0, None, 0),       # one process, one GPU
    (4, 0, None, 0),       # one process sees 4: the first
    (1, 1, 2, 0),          # the launcher left each rank its own GPU (Ray, CUDA_VISIBLE_DEVICES per rank)
    (2, 1, 2, 1),          # torchrun / sweeplab's local ranks, 1 GPU each: cuda:LOCAL_RANK
    (4, 1, 2, 2),          # 2 ranks with 2 GPUs each (gpus_per_worker: 2): rank 1's first is cuda:2
    (4, 3, 4, 3),
    (8, 1, 2, 4),
    (2, 2, 4, 1),          # 4 ranks on 2 GPUs (gpus_per_worker: 0.5): two ranks to a device, in order
    (2, 1, 4, 0),
]


@needs_torch
@pytest.mark.parametrize(("count", "local_rank", "local_world", "index"), GPU_CASES,
                         ids=[f"{c}gpus-lr{lr}-of-{lw}" for c, lr, lw, _ in GPU_CASES])
def test_each_rank_takes_the_first_gpu_of_its_own_share_of_the_slot(
    monkeypatch: pytest.MonkeyPatch, count: int, local_rank: int, local_world: int | None, index: int
) -> None:
    """The local backend gives a W-rank trial's slot W x gpus_per_worker GPUs (CUDA_VISIBLE_DEVICES, seen by
    every rank): rank r holds GPUs [r*k, (r+1)*k). With k = 2, cuda:LOCAL_RANK put rank 1 on rank 0's second GPU."""
    from sweeplab._torch.env import read_env
    from sweeplab.torch import _pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    env = {"LOCAL_RANK": str(local_rank)}
    if local_world is not None:
        env.update(RANK=str(local_rank), WORLD_SIZE=str(local_world), LOCAL_WORLD_SIZE=str(local_world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    assert _pick_device(read_env(env)) == torch.device("cuda", index)


# -- the process-group backend: NCCL only when every rank has a GPU of its own ------------------------------

_DDP2 = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
         "MASTER_PORT": "29500"}
BACKEND_CASES = [
    # device, visible GPUs, SWEEPLAB_GPUS_PER_RANK, requested, chosen
    ("cpu", 0, None, None, "gloo"),
    ("cuda", 2, "1", None, "nccl"),        # a GPU per rank (sweeplab's local ranks)
    ("cuda", 1, "1", None, "nccl"),        # Ray: each rank's own GPU seen as cuda:0
    ("cuda", 1, "0.5", None, "gloo"),      # resources {gpus: 1, workers: 2}: both ranks on one device
    ("cuda", 1, "0.25", None, "gloo"),     # a fractional trial beside others on the device
    ("cuda", 1, None, None, "gloo"),       # torchrun with 2 ranks and one GPU: they share it
    ("cuda", 2, None, None, "nccl"),       # torchrun, a GPU per rank
    ("cuda", 1, "0.5", "gloo", "gloo"),
    ("cuda", 2, "1", "gloo", "gloo"),
]


@pytest.mark.parametrize(("device", "visible", "share", "requested", "chosen"), BACKEND_CASES,
                         ids=[f"{d}-{v}gpus-share{s}-ask{r}" for d, v, s, r, _ in BACKEND_CASES])
def test_ranks_sharing_a_gpu_get_gloo_not_nccl(device: str, visible: int, share: str | None,
                                              requested: str | None, chosen: str) -> None:
    from sweeplab._torch.env import GPUS_PER_RANK_VAR, gpus_per_rank, process_group_backend, read_env

    environ = dict(_DDP2, **({GPUS_PER_RANK_VAR: share} if share is not None else {}))
    assert process_group_backend(device, read_env(environ), visible, gpus_per_rank(environ), requested) == chosen


def test_asking_for_nccl_on_a_shared_gpu_is_a_config_error_naming_the_share() -> None:
    from sweeplab._torch.env import GPUS_PER_RANK_VAR, process_group_backend, read_env

    with pytest.raises(ConfigError, match="two ranks on one GPU") as info:
        process_group_backend("cuda", read_env(_DDP2), 1, 0.5, "nccl")
    assert GPUS_PER_RANK_VAR in str(info.value) and "gpus_per_worker" in str(info.value)


@needs_torch
@pytest.mark.parametrize(("share", "visible", "chosen"), [("0.5", 1, "gloo"), ("1", 2, "nccl")],
                         ids=["fractional", "whole"])
def test_strategy_creates_the_group_with_gloo_when_its_ranks_share_a_gpu(
    monkeypatch: pytest.MonkeyPatch, share: str, visible: int, chosen: str
) -> None:
    """No GPU here: torch.cuda's answers and init_process_group are faked; what strategy() asks for is checked."""
    import torch.distributed as dist

    import sweeplab.torch as slt

    for k in TORCHRUN_VARS:
        monkeypatch.delenv(k, raising=False)
    for k, v in {**_DDP2, "SWEEPLAB_GPUS_PER_RANK": share}.items():
        monkeypatch.setenv(k, v)
    asked: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: asked.append(backend))
    strategy = slt.strategy()
    assert asked == [chosen]
    assert strategy.device.type == "cuda" and strategy.device.index == (0 if visible == 1 else 1)
