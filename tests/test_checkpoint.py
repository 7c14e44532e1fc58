"""CheckpointManager (atomic saves, checksums, retention, fsspec) and CheckpointPolicy (checkpoint_every)."""

from __future__ import annotations

import json
import math
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sweeplab
from sweeplab._clock import FakeClock
from sweeplab.checkpoint import (
    SERIALIZERS,
    CheckpointCorruptError,
    CheckpointManager,
    CheckpointPolicy,
    fence,
    young_daly_interval,
)
from sweeplab.checkpoint._common import _FENCE
from sweeplab.errors import ConfigError, StoreError, TrialError

SRC = str(Path(sweeplab.__file__).resolve().parents[1])


def _payload(info_path: str) -> Path:
    (payload,) = [p for p in Path(info_path).iterdir() if p.name.startswith("payload")]
    return payload


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


# ------------------------------------------------------------------------------------------- serializers
ROUND_TRIPS = [
    ("bytes", b"\x00\x01binary\xff" * 100),
    ("bytes", bytearray(b"mutable")),
    ("json", {"epoch": 3, "lr": 0.01, "history": [1.5, None, True], "name": "x"}),
    ("pickle", {"tuple": (1, 2), 3: {4, 5}, "arr": np.arange(4)}),
    ("numpy", {"w": np.random.default_rng(0).normal(size=(4, 3)), "step": np.array(7)}),
]


@pytest.mark.parametrize(("fmt", "obj"), ROUND_TRIPS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(ROUND_TRIPS)])
def test_each_serializer_round_trips(tmp_path, fmt, obj):
    mgr = CheckpointManager(str(tmp_path), serializer=fmt)
    info = mgr.save(obj, step=1)
    assert info.format == fmt
    loaded_info, loaded = mgr.latest()
    assert loaded_info == mgr.list()[-1]
    assert _equal(obj, loaded)
    manifest = json.loads((Path(info.path) / "manifest.json").read_text())
    assert manifest["checksum"] == info.checksum
    assert manifest["bytes"] == info.bytes == _payload(info.path).stat().st_size
    assert manifest["format"] == fmt and manifest["step"] == 1


AUTO_CASES = [
    (b"raw", "bytes"),
    ({"epoch": 1, "weights": [0.5, 0.25]}, "json"),
    ({"w": np.ones(3), "b": np.zeros(2)}, "numpy"),
    ((1, 2, 3), "pickle"),  # JSON would turn the tuple into a list
    ({1: "int key"}, "pickle"),
    ({"w": np.ones(3), "epoch": 4}, "pickle"),
]


@pytest.mark.parametrize(("obj", "fmt"), AUTO_CASES, ids=[c[1] + str(i) for i, c in enumerate(AUTO_CASES)])
def test_auto_picks_a_format_that_round_trips_exactly(tmp_path, obj, fmt):
    mgr = CheckpointManager(str(tmp_path))
    assert mgr.save(obj).format == fmt
    assert _equal(obj, mgr.latest()[1])


def test_auto_saves_torch_modules_and_optimizers_as_state_dicts(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    mgr = CheckpointManager(str(tmp_path))
    info = mgr.save({"model": torch.nn.DataParallel(model), "optimizer": opt, "epoch": 2}, step=2)
    assert info.format == "torch" and _payload(info.path).name == "payload.pt"
    _, state = mgr.latest()
    assert set(state["model"]) == {"weight", "bias"}  # the wrapper's "module." prefix is gone
    assert torch.equal(state["model"]["weight"], model.weight.detach())
    assert state["optimizer"]["param_groups"][0]["lr"] == 0.1 and state["epoch"] == 2
    fresh = torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    fresh.load_state_dict(state["optimizer"])


def test_torch_tensors_round_trip(tmp_path):
    torch = pytest.importorskip("torch")
    mgr = CheckpointManager(str(tmp_path), serializer="torch")
    mgr.save({"t": torch.arange(6.0).reshape(2, 3)}, step=0)
    assert torch.equal(mgr.latest()[1]["t"], torch.arange(6.0).reshape(2, 3))


def test_unserializable_object_is_a_trial_error_and_leaves_nothing_behind(tmp_path):
    mgr = CheckpointManager(str(tmp_path), serializer="json")
    mgr.save({"ok": 1}, step=1)
    with pytest.raises(TrialError, match="cannot save a set with the 'json' serializer"):
        mgr.save({1, 2}, step=2)
    with pytest.raises(TrialError, match="pickle"):
        CheckpointManager(str(tmp_path), serializer="pickle").save(lambda: 0, step=3)
    assert [i.step for i in mgr.list()] == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-0000000001"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"keep": 0}, "keep_checkpoints"), ({"serializer": "yaml"}, "unknown checkpoint serializer")],
    ids=["keep-0", "unknown-serializer"],
)
def test_bad_manager_arguments_are_config_errors(tmp_path, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        CheckpointManager(str(tmp_path), **kwargs)


# ------------------------------------------------------------------------------------ atomicity, checksums
CHILD = textwrap.dedent(
    """
    import sys, time
    from sweeplab.checkpoint import CheckpointManager, register_serializer

    class SlowBig:
        name, suffix = "slow-big", ".bin"
        def dump(self, obj, f):
            chunk = b"\\xab" * (1 << 20)
            for i in range(4096):            # 4 GB: it is killed long before the end
                f.write(chunk)
                if i == 16:
                    print("writing", flush=True)
                    time.sleep(60)
        def load(self, f):
            return f.read()

    register_serializer(SlowBig())
    root = sys.argv[1]
    CheckpointManager(root, serializer="json").save({"epoch": 1}, step=1)
    CheckpointManager(root, serializer="slow-big").save(b"", step=2)
    """
)


def test_sigkill_during_a_big_write_leaves_the_previous_checkpoint_valid(tmp_path):
    root = tmp_path / "ckpt"
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(root)], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"writing"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    leftovers = [p for p in root.iterdir() if p.name.startswith(".tmp.")]
    assert len(leftovers) == 1 and sum(f.stat().st_size for f in leftovers[0].rglob("*")) >= 16 << 20

    mgr = CheckpointManager(str(root))
    info, state = mgr.latest()
    assert (info.step, state) == (1, {"epoch": 1}) and mgr.corrupt == []
    assert [i.step for i in mgr.list()] == [1]
    mgr.save({"epoch": 2}, step=2)  # the dead writer's temp dir is cleaned up by the next save
    assert sorted(p.name for p in root.iterdir()) == ["step-0000000001", "step-0000000002"]


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [(_truncate, "truncated"), (_flip, "checksum mismatch"), (lambda p: p.unlink(), "payload missing")],
    ids=["truncated", "bit-flip", "missing"],
)
@pytest.mark.parametrize("fmt", ["json", "numpy", "pickle"])
def test_damaged_latest_checkpoint_is_skipped_and_reported(tmp_path, damage, reason, fmt):
    mgr = CheckpointManager(str(tmp_path), keep=3, serializer=fmt)
    state = {"a": np.arange(100)} if fmt != "json" else {"a": list(range(100))}
    mgr.save(state, step=1)
    bad = mgr.save({**state, "b": state["a"]} if fmt != "numpy" else {"b": np.ones(100)}, step=2)
    damage(_payload(bad.path))

    info, loaded = mgr.latest()
    assert info.step == 1 and _equal(loaded, state)
    assert len(mgr.corrupt) == 1 and mgr.corrupt[0][0] == bad.path and reason in mgr.corrupt[0][1]
    with pytest.raises(CheckpointCorruptError, match=reason):
        mgr.load(bad)


def test_a_bad_pickle_is_never_unpickled(tmp_path):
    marker = tmp_path / "planted"

    class Planted:
        def __reduce__(self):
            return (pathlib.Path.touch, (pathlib.Path(marker),))

    mgr = CheckpointManager(str(tmp_path / "ck"), serializer="pickle")
    mgr.save({"safe": 1}, step=1)
    info = mgr.save({"safe": 2}, step=2)
    evil = pickle.dumps(Planted())
    _payload(info.path).write_bytes(evil)
    manifest_path = Path(info.path) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["bytes"] = len(evil)  # sizes agree; only the checksum can tell
    manifest_path.write_text(json.dumps(manifest))

    assert mgr.latest()[1] == {"safe": 1}
    assert "checksum mismatch" in mgr.corrupt[0][1]
    assert not marker.exists()


def test_unreadable_manifest_is_reported_and_skipped(tmp_path):
    mgr = CheckpointManager(str(tmp_path), serializer="json")
    mgr.save([1], step=1)
    bad = mgr.save([2], step=2)
    (Path(bad.path) / "manifest.json").write_text("{not json")
    assert [i.step for i in mgr.list()] == [1]
    assert mgr.latest()[1] == [1]
    assert mgr.corrupt[0][0] == bad.path and "manifest unreadable" in mgr.corrupt[0][1]


def _two_saved(tmp_path: Path, local: bool) -> tuple[str, CheckpointManager, Any]:
    """A manager keeping 2 on a local disk or fsspec's memory, with steps 1 and 2 saved: (root, it, step 2)."""
    if not local:
        pytest.importorskip("fsspec")
    root = str(tmp_path) if local else f"memory://sweeplab-test-{uuid.uuid4().hex}/ckpt"
    mgr = CheckpointManager(root, keep=2, serializer="json")
    mgr.save([1], step=1)
    return root, mgr, mgr.save([2], step=2)


@pytest.mark.parametrize("local", [True, False], ids=["local", "memory"])
def test_a_checkpoint_with_an_unreadable_manifest_is_deleted_with_the_old_ones(tmp_path, local):
    """As a checkpoint whose payload fails its checksum: once latest() has found it corrupt, the next save's
    retention deletes it. It used to stay for ever (a payload of any size), and every later restore reported
    it again as a `checkpoint_corrupt` event."""
    root, mgr, bad = _two_saved(tmp_path, local)
    manifest = f"{bad.path}/manifest.json"
    if local:
        Path(manifest).write_text("{not json")
    else:
        import fsspec

        fsspec.filesystem("memory").pipe(manifest, b"{not json")
    assert mgr.latest()[1] == [1] and [c[0] for c in mgr.corrupt] == [bad.path]
    info = mgr.save([3], step=3)
    assert bad.path in info.removed
    assert [i.step for i in mgr.list()] == [1, 3]
    again = CheckpointManager(root, keep=2, serializer="json")   # a later attempt: nothing to report
    assert again.latest()[1] == [3] and again.corrupt == []
    if local:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["step-0000000001", "step-0000000003"]


@pytest.mark.parametrize("local", [True, False], ids=["local", "memory"])
@pytest.mark.parametrize("left", ["payload", "nothing", "a-file"])
def test_a_checkpoint_directory_without_a_manifest_is_skipped_reported_and_deleted(tmp_path, local, left):
    """A crash between the payload and the manifest (on an object store, where there is no atomic rename), or
    files of the user's under a checkpoint's name: restore skips it and says so, as for an unreadable manifest
    (it used to skip it silently: no checkpoint_corrupt event). On a local disk the next save's retention deletes
    it (no save is ever in progress under its final name there); on an object store it stays (a live writer's
    payload comes before its manifest) and is reported at each restore."""
    root, mgr, bad = _two_saved(tmp_path, local)
    if local:
        import shutil

        os.remove(Path(bad.path) / "manifest.json")
        if left == "nothing":
            shutil.rmtree(bad.path)
            os.mkdir(bad.path)
        elif left == "a-file":
            shutil.rmtree(bad.path)
            Path(bad.path).write_text("my own notes")
    else:
        import fsspec

        fs = fsspec.filesystem("memory")
        fs.rm(f"{bad.path}/manifest.json")
        if left != "payload":
            fs.rm(bad.path, recursive=True)
            fs.pipe(bad.path if left == "a-file" else f"{bad.path}/other/x", b"mine")
    assert [i.step for i in mgr.list()] == [1]
    assert mgr.latest()[1] == [1]
    assert [c[0] for c in mgr.corrupt] == [bad.path] and "no manifest" in mgr.corrupt[0][1]
    info = mgr.save([3], step=3)
    assert (bad.path in info.removed) is local
    again = CheckpointManager(root, keep=2, serializer="json")
    assert again.latest()[1] == [3] and [c[0] for c in again.corrupt] == ([] if local else [bad.path])


def test_run_restore_reports_a_checkpoint_without_a_manifest(tmp_path):
    from sweeplab.run import Run

    events: list[tuple[str, dict]] = []
    mgr = CheckpointManager(str(tmp_path), serializer="json")
    mgr.save({"epoch": 1}, step=1)
    bad = mgr.save({"epoch": 2}, step=2)
    os.remove(Path(bad.path) / "manifest.json")
    run = Run(config={}, checkpoint_dir=str(tmp_path), sink=lambda kind, data: events.append((kind, data)))
    assert run.restore() == {"epoch": 1}
    kinds = [d.get("kind") for k, d in events if k == "note"]
    assert kinds == ["checkpoint_corrupt", "restored"], events


# ------------------------------------------------------------------------------------- retention, layout
@pytest.mark.parametrize("keep", [1, 2, 4])
def test_retention_keeps_the_last_k(tmp_path, keep):
    mgr = CheckpointManager(str(tmp_path), keep=keep)
    for step in range(6):
        mgr.save({"step": step}, step=step)
    assert [i.step for i in mgr.list()] == list(range(6))[-keep:]
    assert len(list(tmp_path.iterdir())) == keep
    assert mgr.latest()[1] == {"step": 5}


def test_saving_the_same_step_again_keeps_both_and_the_newer_wins(tmp_path):
    mgr = CheckpointManager(str(tmp_path), keep=2)
    first = mgr.save({"v": "old"}, step=3)
    second = mgr.save({"v": "new"}, step=3)
    assert first.path != second.path
    assert mgr.latest() == (mgr.list()[-1], {"v": "new"})


def test_step_order_follows_writes_not_step_numbers(tmp_path):
    """A retried attempt that restored step 1 and writes step 2 again must not be shadowed by older steps."""
    mgr = CheckpointManager(str(tmp_path), keep=3)
    mgr.save({"attempt": 1}, step=5)
    mgr.save({"attempt": 2}, step=2)
    assert mgr.latest()[1] == {"attempt": 2}


def test_no_checkpoint_yet(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "missing"))
    assert mgr.latest() is None and mgr.list() == []


def test_corrupt_checkpoints_do_not_count_towards_retention(tmp_path):
    mgr = CheckpointManager(str(tmp_path), keep=2, serializer="json")
    mgr.save([1], step=1)
    mgr.save([2], step=2)
    _flip(_payload(mgr.save([3], step=3).path))
    assert mgr.latest()[1] == [2]
    mgr.save([4], step=4)
    assert [i.step for i in mgr.list()] == [2, 4]


# ---------------------------------------------------------------------------------------------- fsspec
def test_memory_url_round_trip_retention_and_corruption():
    fsspec = pytest.importorskip("fsspec")
    root = f"memory://sweeplab-test-{uuid.uuid4().hex}/ckpt"
    mgr = CheckpointManager(root, keep=2)
    for step in range(4):
        info = mgr.save({"step": step, "blob": b"x" * step}, step=step)
    assert info.path.startswith("memory://")
    assert [i.step for i in mgr.list()] == [2, 3]
    assert mgr.latest()[1] == {"step": 3, "blob": b"xxx"}

    fs = fsspec.filesystem("memory")
    (payload,) = [p for p in fs.ls(info.path, detail=False) if "payload" in p]
    fs.pipe(payload, b"garbage")
    assert mgr.latest()[1] == {"step": 2, "blob": b"xx"}
    assert mgr.corrupt[0][0] == info.path and "truncated" in mgr.corrupt[0][1]


def test_file_url_is_a_local_path(tmp_path):
    mgr = CheckpointManager(f"file://{tmp_path}")
    info = mgr.save(b"abc", step=1)
    assert Path(info.path).parent == tmp_path and mgr.latest()[1] == b"abc"


# ----------------------------------------------------------------------------------------- directories
def _make_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "weights.bin").write_bytes(os.urandom(4096))
    (root / "sub" / "config.json").write_text('{"a": 1}')
    (root / "sub" / "deeper" / "empty.txt").write_text("")


@pytest.mark.parametrize("local", [True, False], ids=["local", "memory"])
def test_directory_checkpoint_is_a_verified_copy(tmp_path, local):
    src = tmp_path / "model_dir"
    _make_tree(src)
    original = {p.relative_to(src): p.read_bytes() for p in src.rglob("*") if p.is_file()}
    root = str(tmp_path / "ck") if local else f"memory://sweeplab-test-{uuid.uuid4().hex}"
    mgr = CheckpointManager(root)
    info = mgr.save(src, step=1)
    assert info.format == "dir" and info.bytes == sum(len(v) for v in original.values())
    (src / "weights.bin").write_bytes(b"changed after the checkpoint")

    _, restored = mgr.latest()
    if local:
        got = {p.relative_to(restored): p.read_bytes() for p in Path(restored).rglob("*") if p.is_file()}
        assert got == original
        Path(restored, "sub", "config.json").write_text('{"a": 2}')
        assert mgr.latest() is None and "checksum mismatch" in mgr.corrupt[0][1]
    else:
        import fsspec

        fs = fsspec.filesystem("memory")
        assert fs.cat_file(restored + "/sub/config.json") == b'{"a": 1}'


# ----------------------------------------------------------------------------------------------- policy
def test_young_daly_formula():
    assert young_daly_interval(2.0, 3600.0) == pytest.approx(120.0)
    assert young_daly_interval(0.5, 100.0) == pytest.approx(10.0)
    assert young_daly_interval(8.0, 86400.0) == pytest.approx(math.sqrt(2 * 8 * 86400))
    assert young_daly_interval(0.0, 10.0) == 0.0
    for cost, mtbf in [(-1.0, 10.0), (1.0, 0.0), (float("nan"), 10.0)]:
        with pytest.raises(ValueError):
            young_daly_interval(cost, mtbf)


def _written_steps(policy: CheckpointPolicy, steps, clock: FakeClock | None = None, dt: float = 0.0):
    out = []
    for step in steps:
        if clock is not None:
            clock.advance(dt)
        if policy.due(step):
            policy.record(step, 0.1)
            out.append(step)
    return out


def test_policy_every_n_steps():
    assert _written_steps(CheckpointPolicy(5), range(13)) == [0, 5, 10]
    assert _written_steps(CheckpointPolicy("3 steps"), [None] * 7) == [None] * 3  # counts calls
    assert CheckpointPolicy(5).interval() == 5


def test_policy_every_n_seconds_uses_the_clock():
    clock = FakeClock()
    policy = CheckpointPolicy(30.0, clock=clock)
    assert _written_steps(policy, range(10), clock, dt=10.0) == [0, 3, 6, 9]
    assert CheckpointPolicy("5m").interval() == 300.0 and CheckpointPolicy("1h").interval() == 3600.0


def test_policy_none_always_writes():
    policy = CheckpointPolicy(None)
    assert _written_steps(policy, range(4)) == [0, 1, 2, 3] and policy.interval() is None


def test_auto_interval_follows_cost_and_mtbf_within_bounds():
    clock = FakeClock()
    policy = CheckpointPolicy("auto", clock=clock, mtbf=3600.0, min_interval=10.0, max_interval=600.0)
    assert policy.due(0)  # the first call is always due
    policy.record(0, 2.0)
    assert policy.interval() == pytest.approx(120.0)  # sqrt(2 * 2 * 3600)
    clock.advance(119.0)
    assert not policy.due(1)
    clock.advance(1.0)
    assert policy.due(2)
    policy.mtbf = 900.0
    assert policy.interval() == pytest.approx(60.0)
    policy.mtbf = 1e9
    assert policy.interval() == 600.0  # clamped to max
    cheap = CheckpointPolicy("auto", mtbf=3600.0)
    cheap.record(0, 0.001)
    assert cheap.interval() == 10.0  # clamped to min
    default = CheckpointPolicy("auto")
    default.record(0, 2.0)
    assert default.interval() == pytest.approx(120.0)  # MTBF defaults to one hour


def test_auto_uses_the_uptime_when_the_process_outlived_the_assumed_mtbf():
    clock = FakeClock()
    policy = CheckpointPolicy("auto", clock=clock, mtbf=3600.0)
    policy.due(0)
    policy.record(0, 2.0)
    clock.advance(4 * 3600.0)
    assert policy.interval() == pytest.approx(math.sqrt(2 * 2.0 * 4 * 3600.0))


def test_auto_cost_is_smoothed_over_writes():
    policy = CheckpointPolicy("auto", mtbf=3600.0, max_interval=1e9)
    for _ in range(30):
        policy.record(None, 8.0)
    assert policy.interval() == pytest.approx(240.0, rel=1e-3)


@pytest.mark.parametrize("every", [0, -3, True, "often", "5 parsecs", float("inf"), [5]])
def test_bad_checkpoint_every_is_a_config_error(every):
    with pytest.raises(ConfigError, match="trial.checkpoint_every"):
        CheckpointPolicy(every)


def test_registry_names():
    assert {"bytes", "json", "torch", "pickle", "numpy"} <= set(SERIALIZERS)


def test_latest_before_an_attempt_skips_that_attempts_own_checkpoints(tmp_path, monkeypatch):
    CheckpointManager(str(tmp_path), serializer="json", attempt=1).save([1], step=1)
    mgr = CheckpointManager(str(tmp_path), serializer="json", attempt=2)
    mgr.save([2], step=2)
    assert mgr.latest()[1] == [2]
    assert mgr.latest(before_attempt=2)[1] == [1]   # what every rank of attempt 2 restores
    # a command trial's ranks (WORLD_SIZE > 1) in the directory sweeplab gave them: the same by default
    monkeypatch.setenv("SWEEPLAB_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert CheckpointManager(str(tmp_path), serializer="json", attempt=2).latest()[1] == [1]
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert CheckpointManager(str(tmp_path), serializer="json", attempt=2).latest()[1] == [2]


@pytest.mark.parametrize("field", ["seq", "time", "seconds", "bytes", "step", "attempt"])
def test_a_manifest_holding_a_number_too_large_for_a_float_is_skipped_as_corrupt(tmp_path, field):
    """A manifest whose number has hundreds of digits (garbage, a hand edit) parses, and the check of its fields
    raised OverflowError ("int too large to convert to float"): `latest()` failed, so every attempt of the trial
    failed the same way (a resumed sweep's trial ended `failed`). It is skipped and reported as corrupt."""
    mgr = CheckpointManager(str(tmp_path), serializer="json")
    mgr.save([1], step=1)
    bad = mgr.save([2], step=2)
    path = Path(bad.path) / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest[field] = 10 ** 400
    path.write_text(json.dumps(manifest))
    assert mgr.latest()[1] == [1]
    assert mgr.corrupt[0][0] == bad.path and "manifest unreadable" in mgr.corrupt[0][1]
    assert mgr.save([3], step=3).step == 3


def test_a_fence_file_holding_a_number_too_large_for_a_float_is_read_as_no_fence(tmp_path):
    """The fence file (`fence`) with a time of hundreds of digits: reading it raised OverflowError, failing every
    save and restore of the trial; it is read as no fence, as any other unreadable fence file is, and rewritten."""
    mgr = CheckpointManager(str(tmp_path), serializer="json")
    mgr.save([1], step=1)
    (tmp_path / _FENCE).write_text(json.dumps({"dead": {"1": 10 ** 400}}))
    assert mgr.latest()[1] == [1]
    fence(str(tmp_path), 1)
    assert mgr.latest()[1] == [1]


@pytest.mark.parametrize("under", [False, True], ids=["root", "parent"])
def test_a_checkpoint_directory_that_is_a_file_is_named_as_such_by_save_and_latest(tmp_path, under):
    """It used to be a raw NotADirectoryError naming the save's temp dir (its cleanup raised over the
    StoreError), and `latest()` said "no checkpoint"."""
    (tmp_path / "ckpt").write_text("not a directory")
    root = tmp_path / "ckpt" / "trial" if under else tmp_path / "ckpt"
    mgr = CheckpointManager(str(root), attempt=1)
    for call in (lambda: mgr.save({"a": 1}, step=0), mgr.latest):
        with pytest.raises(StoreError) as got:
            call()
        assert str(got.value).endswith(f"{tmp_path / 'ckpt'} is a file, not a directory"), got.value
        assert str(got.value).startswith(f"checkpoint directory {root} ") and ".tmp." not in str(got.value)
    assert os.listdir(tmp_path) == ["ckpt"]


@pytest.mark.parametrize("rank", [0, 1], ids=["rank0", "other-rank"])
def test_a_negative_checkpoint_step_is_refused_naming_the_call(tmp_path, rank):
    """`run.checkpoint(obj, step=-1)` was written as `step--000000001` (and the checkpoint policy counted from
    it); a step is a count of steps done: one below 0 is the trial's mistake, refused as a bad type is."""
    from sweeplab.run import Run

    run = Run(config={}, checkpoint_dir=str(tmp_path / "r"), sink=lambda kind, data: None, rank=rank)
    with pytest.raises(ValueError, match=r"^run\.checkpoint: step -1 is negative"):
        run.checkpoint({"a": 1}, step=-1, force=True)
    mgr = CheckpointManager(str(tmp_path / "m"))
    with pytest.raises(ValueError, match=r"^CheckpointManager\.save: step -3 is negative"):
        mgr.save({"a": 1}, step=-3)
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())
    assert not (tmp_path / "m").exists() or not list((tmp_path / "m").iterdir())
