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


def test_a_huge_captured_object_is_skipped_and_named_not_written(tmp_path):
    """A capture is bounded (MAX_CAPTURE_BYTES): a huge batch is not pickled into the store (nor into the
    failing worker's memory), its name and size are in the manifest, and the small objects are kept."""
    np = pytest.importorskip("numpy")
    from sweeplab.capture import MAX_CAPTURE_BYTES

    huge = np.empty(MAX_CAPTURE_BYTES // 8 + 1)            # not touched: its pages are never written
    path = save_captures({"batch": {"x": huge, "index": 7}, "step": 3}, str(tmp_path))
    assert load_captures(path) == {"step": 3}
    manifest = capture_manifest(path)
    assert "batch" in manifest["skipped"] and "too large" in manifest["skipped"]["batch"]
    assert (tmp_path / path).stat().st_size < 1000


def test_a_small_view_of_a_big_tensor_is_captured_alone_not_its_whole_storage(tmp_path):
    """`run.capture("batch", data[i:i + 8])` on a dataset held in one tensor: pickling a view writes its whole
    storage (the dataset); the capture keeps the 8 rows only."""
    torch = pytest.importorskip("torch")
    data = torch.arange(400_000, dtype=torch.float32).reshape(100_000, 4)
    path = save_captures({"batch": (data[16:24], torch.tensor(5))}, str(tmp_path))
    x, i = load_captures(path)["batch"]
    assert torch.equal(x, data[16:24]) and int(i) == 5
    assert (tmp_path / path).stat().st_size < 20_000        # the storage is 1.6 MB
