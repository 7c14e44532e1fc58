"""Failure reasons and capture manifests (capture.py), without processes; the real DataLoader worker case
is in tests/integration/test_debugging.py."""

from __future__ import annotations

import pytest

from sweeplab.capture import capture_manifest, failure_reason, load_captures, save_captures
from sweeplab.run import Run

TORCH_WORKER_MESSAGE = (
    "Caught OSError in DataLoader worker process 1.\nOriginal Traceback (most recent call last):\n"
    '  File "worker.py", line 1, in _worker_loop\n    data = fetcher.fetch(index)\n'
    + "  ...\n" * 200 + "OSError: [Errno 5] Input/output error: 'shard-3.tar'\n"
)


@pytest.mark.parametrize(("exc", "loading", "reason"), [
    (ValueError("bad value"), None, "ValueError: bad value"),
    (OSError(TORCH_WORKER_MESSAGE), None,
     "OSError: [Errno 5] Input/output error: 'shard-3.tar' (in DataLoader worker process 1)"),
    (ValueError("x"), {"loop": 2, "batch": 7}, "ValueError: x (while loading batch 7 of run.track loop 2)"),
], ids=["plain", "dataloader-worker", "loading"])
def test_failure_reason_is_the_error_line_and_where(exc, loading, reason):
    assert failure_reason(exc, loading) == reason


def failing_loader():
    yield {"i": 0}
    yield {"i": 1}
    raise OSError("record 2 unreadable")


def test_a_loader_failure_marks_the_batch_captured_in_the_step_before(tmp_path):
    run = Run(config={}, sink=lambda kind, data: None)
    run.capture("model_name", "mlp")                    # outside the loop: still what it was
    with pytest.raises(OSError) as info:
        for batch in run.track(failing_loader()):
            run.capture("batch", batch)
    loading = run.loading_failure(info.value)
    assert loading == {"loop": 1, "batch": 3, "stale": ["batch"]}
    path = save_captures(run.captures, str(tmp_path), stale=loading["stale"], loading=loading)
    assert load_captures(path) == {"model_name": "mlp", "batch": {"i": 1}}
    manifest = capture_manifest(path)
    assert manifest["stale"] == ["batch"] and manifest["failed_loading"] == {"loop": 1, "batch": 3}


def test_a_failure_in_the_loop_body_is_no_loading_failure():
    run = Run(config={}, sink=lambda kind, data: None)
    with pytest.raises(ZeroDivisionError) as info:
        for batch in run.track([1, 0]):
            run.capture("batch", batch)
            _ = 1 / batch
    assert run.loading_failure(info.value) is None
    assert run.loading_failure(RuntimeError("another error")) is None


def test_tensors_captured_on_a_gpu_load_on_a_cpu_only_machine(tmp_path, monkeypatch):
    """The usual repro: the trial failed on a GPU node, the replay runs on a laptop. A capture holding CUDA
    tensors must load there (onto the CPU) instead of failing in torch.load."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    import torch.serialization as ser

    with monkeypatch.context() as m:   # pickle the batch as a CUDA machine would: storages tagged cuda:0
        m.setattr(ser, "location_tag", lambda storage: "cuda:0")
        path = save_captures({"batch": (torch.ones(2, 3), torch.tensor([1, 2]))}, str(tmp_path))
    x, y = load_captures(path)["batch"]
    assert x.device.type == "cpu" and torch.equal(x, torch.ones(2, 3)) and y.tolist() == [1, 2]
