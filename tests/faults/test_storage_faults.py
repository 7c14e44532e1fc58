"""Storage faults: an unwritable store, a full disk, a locked database.

Expected every time: a one-line error naming the store path, a non-zero exit, no half-written rows, and
every result written before the fault still there (and still readable).

The suite runs as root in CI, where permission bits do not stop writes; the faults used here are ones root
cannot write through: a path under a regular file, a read-only bind mount, a small tmpfs, RLIMIT_FSIZE.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAULTY = Path(__file__).resolve().parents[1] / "fixtures" / "faulty.py"

pytestmark = pytest.mark.slow

SMALL = "  x: {min: -1.0, max: 1.0}\n  steps: {value: 20}\n  delay: {value: 0.0}"
# holds a write lock on the database named by argv[1] until its stdin closes
LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""
# on the driver's PYTHONPATH: its writes wait 2 s for a lock (the store's busy timeout, 10 s) before they fail
SHORT_BUSY_TIMEOUT = """
import sweeplab.store.sqlite

sweeplab.store.sqlite.BUSY_TIMEOUT_S = 2.0
"""
BIG = "  x: {min: -1.0, max: 1.0}\n  steps: {value: 3000}\n  delay: {value: 0.0}"


def _sweep(chaos, name: str, params: str, trials: int = 4) -> Path:
    body = chaos.faulty_spec("stepper", method="random", params=params,
                             extra=f"budget: {{trials: {trials}}}\ntrial: {{checkpoint_every: 500}}")
    return chaos.spec(name, body)


def _first_sweep(chaos) -> dict:
    """A finished sweep whose rows must survive whatever comes next."""
    chaos("sweep", str(_sweep(chaos, "first", SMALL)), "--name", "first", "-w", "2", "-q", check=True)
    dump = chaos.dump_sweep("first")
    assert len(dump["trials"]) == 4 and len(dump["metrics"]) == 4 * 20
    return dump


def _assert_clear_error(cp, path: Path) -> None:
    text = cp.stdout + cp.stderr
    assert cp.returncode == 1, f"exit {cp.returncode}\n{text}"
    assert "error:" in cp.stderr and str(path) in " ".join(cp.stderr.split()), cp.stderr
    assert "Traceback" not in text


def _assert_consistent(chaos, sweep: str) -> None:
    """No half-written trial: attempt counts match attempt rows; completed means a value and a
    completed attempt."""
    for t in chaos.trials(sweep):
        attempts = chaos.attempts(t["id"])
        assert t["attempts"] == len(attempts), (t["number"], t["attempts"], len(attempts))
        if t["state"] == "completed":
            assert t["value"] is not None and attempts[-1]["state"] == "completed"


def _quiesce(db: Path) -> None:
    """Leave the store as the last sweeplab process leaves it: WAL checkpointed, -wal and -shm removed."""
    conn = sqlite3.connect(db)
    conn.execute("SELECT count(*) FROM sweeps").fetchone()
    conn.close()
    assert not Path(f"{db}-shm").exists() and not Path(f"{db}-wal").exists()


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


# ------------------------------------------------------------------------------------------ unwritable
def test_store_path_under_a_regular_file_fails_clearly_and_creates_nothing(chaos):
    blocker = chaos.tmp / "not-a-dir"
    blocker.write_text("a file where the store directory should be")
    store = blocker / "store"
    cp = chaos("sweep", str(_sweep(chaos, "s", SMALL)), "--store", str(store), "-q")
    _assert_clear_error(cp, store)
    assert "not writable" in cp.stderr
    assert blocker.read_text().startswith("a file") and not chaos.stray_workers()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_store_directory_without_write_permission_fails_clearly(chaos):
    first = _first_sweep(chaos)
    chaos.store.chmod(0o500)
    try:
        cp = chaos("sweep", str(_sweep(chaos, "s", SMALL)), "--name", "second", "-q")
    finally:
        chaos.store.chmod(0o700)
    _assert_clear_error(cp, chaos.store)
    assert chaos.dump_sweep("first") == first and chaos.integrity() == "ok"


def test_read_only_store_refuses_new_sweeps_and_keeps_old_results_readable(chaos, read_only):
    first = _first_sweep(chaos)
    _quiesce(chaos.db_path)
    read_only(chaos.store)
    cp = chaos("sweep", str(_sweep(chaos, "s", SMALL)), "--name", "second", "-q")
    _assert_clear_error(cp, chaos.store)
    assert "Read-only" in cp.stderr or "not writable" in cp.stderr
    assert chaos.dump_sweep("first") == first and chaos.integrity() == "ok"
    status = chaos("status", "first", "--json")          # results are still readable where they are
    assert status.returncode == 0, status.stderr
    sweeps = json.loads(chaos("status", "--json", check=True).stdout)["sweeps"]
    assert [s["name"] for s in sweeps] == ["first"]


# ------------------------------------------------------------------------------------------ disk full
@pytest.fixture
def small_disk(chaos, tmpfs):
    """A 2 MB tmpfs holding the store."""
    disk = tmpfs(chaos.tmp / "disk", "2m")
    chaos.store = disk / "store"
    return disk


def _file_size_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails with EFBIG instead
    return apply


@pytest.mark.parametrize("how", ["tmpfs", "rlimit"])
def test_disk_full_fails_clearly_keeps_earlier_results_and_resume_recovers(chaos, request, how):
    disk = request.getfixturevalue("small_disk") if how == "tmpfs" else None
    first = _first_sweep(chaos)
    spec = _sweep(chaos, "second", BIG, trials=6)
    args = [sys.executable, "-m", "sweeplab", "sweep", str(spec), "--name", "second", "-w", "2", "-q"]
    limit = None if disk else _file_size_limit(1_000_000)
    cp = subprocess.run(args, cwd=chaos.tmp, env=chaos.env(), capture_output=True, text=True, timeout=120,
                        preexec_fn=limit, check=False)
    _assert_clear_error(cp, chaos.store)
    if disk:
        assert "full" in cp.stderr, cp.stderr
    assert not chaos.stray_workers()

    assert chaos.integrity() == "ok"
    assert chaos.dump_sweep("first") == first              # what was written before is intact
    _assert_consistent(chaos, "second")
    done = {t["number"]: (t["ended"], t["value"]) for t in chaos.trials("second")
            if t["state"] == "completed"}

    if disk:                                              # room again: the sweep continues where it was
        assert _mount("-o", "remount,size=64m", str(disk))
    if not chaos.trials("second"):
        return                                            # it failed before the sweep was recorded
    chaos("resume", "second", "-q", check=True)
    trials = chaos.trials("second")
    assert len(trials) == 6 and all(t["state"] == "completed" for t in trials)
    for number, kept in done.items():
        assert (trials[number]["ended"], trials[number]["value"]) == kept
    assert chaos.dump_sweep("first") == first


def _fill(disk: Path) -> None:
    """Take every free byte of `disk`."""
    with open(disk / "filler", "wb") as f:
        with pytest.raises(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()


@pytest.mark.parametrize("command", ["sweep", "resume", "resume-without-lock"])
def test_a_disk_already_full_fails_clearly_before_the_sweep_starts(chaos, small_disk, command):
    """A sweep started on a full disk crashed with an `OSError: [Errno 28]` traceback from writing its pid
    into its new lock file (`<store>/locks/<sweep>.lock`); it is one error line naming the store (and saying the
    disk may be full: opening the store said only "disk I/O error"), exit 1, the store intact and still read by
    `status`, and the command works once there is room."""
    first = _first_sweep(chaos)
    if command != "sweep":
        chaos("sweep", str(_sweep(chaos, "second", SMALL)), "--name", "second", "-q", "--trials", "1", check=True)
        if command == "resume-without-lock":   # a sweep interrupted before its lock file was made
            for lock in (chaos.store / "locks").iterdir():
                lock.unlink()
        args = ["resume", "second", "--trials", "4", "-q"]
    else:
        args = ["sweep", str(_sweep(chaos, "second", SMALL)), "--name", "second", "-q"]
    _fill(small_disk)
    cp = chaos(*args)
    _assert_clear_error(cp, chaos.store)
    assert "No space left on device" in cp.stderr or "disk full" in cp.stderr, cp.stderr
    assert not chaos.stray_workers()
    status = chaos("status", "--json")                    # the store is still read, the disk full or not
    assert status.returncode == 0, status.stderr
    assert [s["name"] for s in json.loads(status.stdout)["sweeps"]] == ["first", "second"][:1 + (command != "sweep")]
    (small_disk / "filler").unlink()                      # room again
    assert chaos.integrity() == "ok" and chaos.dump_sweep("first") == first
    chaos(*args, check=True)
    assert [t["state"] for t in chaos.trials("second")] == ["completed"] * 4
    assert chaos.dump_sweep("first") == first


# ------------------------------------------------------------------------------------------ a trial's disk full
@pytest.fixture
def trial_disk(chaos, tmpfs):
    """A 1 MB tmpfs for the trials' checkpoints (`checkpoint_dir:`), the store staying where it has room."""
    return tmpfs(chaos.tmp / "trial-disk", "1m")


def _filler_spec(chaos, kind: str, disk: Path) -> Path:
    """4 trials, each checkpointing 400 KB a step (the newest 2 kept) into `disk`: a third checkpoint never fits."""
    params = chaos.params(x="{min: -1.0, max: 1.0}", steps=6, kb=400)
    if kind == "function":
        target = f"function: {FAULTY}:filler\n"
    else:
        target = f"command: [{sys.executable!r}, {str(FAULTY)!r}, '${{args}}']\n"
    return chaos.spec("filler", f"{target}method: random\nseed: 1\nmetric: {{name: loss, goal: minimize}}\n"
                                f"parameters:\n{params}\ncheckpoint_dir: {str(disk)!r}\n"
                                "budget: {trials: 4}\ntrial: {retries: 2}\n")


@pytest.mark.parametrize("kind", ["function", "command"])
def test_a_trial_finding_the_disk_full_stops_the_sweep_and_is_not_failed(chaos, trial_disk, kind):
    """A trial whose checkpoint finds no room did nothing wrong: failing it (and retrying it, and every trial
    after it, the same way) would burn the sweep. The sweep stops with one error line naming the full place,
    the trial is left as an interrupted one, and `resume` runs it again once there is room."""
    first = _first_sweep(chaos)
    cp = chaos("sweep", str(_filler_spec(chaos, kind, trial_disk)), "--name", "second", "-w", "2", "-q")
    _assert_clear_error(cp, trial_disk)
    assert "No space left on device" in cp.stderr, cp.stderr
    assert not chaos.stray_workers()

    trials = _assert_interrupted_not_failed(chaos, "second")
    for t in trials:                                       # no retry burned on it
        attempts = chaos.attempts(t["id"])
        assert [a["state"] for a in attempts if a["state"] == "failed"] == [], [dict(a) for a in attempts]
        assert t["attempts"] == len(attempts) <= 1
    assert not chaos.events("retry") and not chaos.events("failure")
    assert chaos.integrity() == "ok" and chaos.dump_sweep("first") == first
    _assert_consistent(chaos, "second")

    assert _mount("-o", "remount,size=64m", str(trial_disk))   # room again: resume runs it again
    chaos("resume", "second", "-q", check=True)
    trials = chaos.trials("second")
    assert len(trials) == 4 and all(t["state"] == "completed" for t in trials), [dict(t) for t in trials]
    assert chaos.dump_sweep("first") == first


def _assert_interrupted_not_failed(chaos, name: str) -> list:
    """The sweep stopped on its storage: no trial failed, and the one that found it is left interrupted."""
    trials = chaos.trials(name)
    assert trials and not [t["number"] for t in trials if t["state"] == "failed"], [dict(t) for t in trials]
    assert any(t["state"] == "interrupted" for t in trials), [dict(t) for t in trials]
    return trials


@pytest.mark.parametrize("kind", ["function", "command"])
def test_a_trial_finding_its_storage_read_only_stops_the_sweep_and_is_not_failed(chaos, trial_disk, kind):
    """A checkpoint directory on a file system gone read-only (a disk error remounts ext4 `errors=remount-ro`,
    a read-only share) fails every trial the same way, as a full disk does: the sweep used to fail each trial
    after it ("[Errno 30] Read-only file system", retried, then "failed the same way twice") and burn its whole
    budget. It stops as on a full disk instead: one error line naming the place, exit 1, the trial interrupted,
    and `resume` runs it once the storage is writable."""
    assert _mount("-o", "remount,ro", str(trial_disk))
    cp = chaos("sweep", str(_filler_spec(chaos, kind, trial_disk)), "--name", "ro", "-w", "2", "-q")
    _assert_clear_error(cp, trial_disk)
    assert "Read-only file system" in cp.stderr, cp.stderr
    assert not chaos.stray_workers()
    _assert_interrupted_not_failed(chaos, "ro")
    assert not chaos.events("retry") and not chaos.events("failure")
    _assert_consistent(chaos, "ro")

    assert _mount("-o", "remount,rw,size=64m", str(trial_disk))   # writable, with room for the filler trials
    chaos("resume", "ro", "-q", check=True)
    trials = chaos.trials("ro")
    assert len(trials) == 4 and all(t["state"] == "completed" for t in trials), [dict(t) for t in trials]


# ------------------------------------------------------------------------------------------ locked database
def test_locked_database_mid_sweep_fails_clearly_and_resume_finishes(chaos, reap):
    first = _first_sweep(chaos)
    body = chaos.faulty_spec("stepper", method="random",
                             params=chaos.params(x="{min: -1.0, max: 1.0}", steps=60, delay=0.02),
                             extra="budget: {trials: 6}\ntrial: {checkpoint_every: 1000}")
    inject = chaos.tmp / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SHORT_BUSY_TIMEOUT)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(inject), os.environ.get("PYTHONPATH")) if p))
        proc = chaos.start("sweep", str(chaos.spec("second", body)), "--name", "second", "-w", "2", "-q")
    reap.append(proc.pid)
    chaos.wait_for(lambda: any(t["state"] == "completed" for t in chaos.trials("second")),
                   what="a completed trial", proc=proc)
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(chaos.db_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    reap.append(holder.pid)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = {t["number"]: (t["ended"], t["value"]) for t in chaos.trials("second")
                  if t["state"] == "completed"}
        out, err = proc.communicate(timeout=120)       # the driver waits busy_timeout, then gives up
    finally:
        holder.communicate("", timeout=30)              # release the lock
    cp = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    _assert_clear_error(cp, chaos.db_path)
    assert "locked" in err
    t0 = time.monotonic()
    while chaos.stray_workers() and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    assert not chaos.stray_workers()

    assert chaos.integrity() == "ok" and chaos.dump_sweep("first") == first
    _assert_consistent(chaos, "second")
    chaos("resume", "second", "-q", check=True)
    trials = chaos.trials("second")
    assert len(trials) == 6 and all(t["state"] == "completed" for t in trials)
    for number, kept in before.items():
        assert (trials[number]["ended"], trials[number]["value"]) == kept
    assert sqlite3.connect(f"file:{chaos.db_path}?mode=ro", uri=True).execute(
        "SELECT count(*) FROM sweeps").fetchone()[0] == 2


# ------------------------------------------------------------------------------------------ the sweep's lock file
@pytest.mark.parametrize("obstacle", ["lock-is-a-directory", "locks-is-a-file"])
def test_an_unusable_lock_path_fails_clearly_and_changes_nothing(chaos, obstacle):
    """`<store>/locks/<sweep>.lock` left as a directory (or `locks` as a file, by a cleanup script or a sync tool)
    made `sweeplab resume` (and a new sweep) crash with an IsADirectoryError traceback; it is one error line naming
    the path, exit 1, and the store is left as it was."""
    first = _first_sweep(chaos)
    locks = chaos.store / "locks"
    if obstacle == "lock-is-a-directory":
        (locks / "first.lock").unlink()
        (locks / "first.lock").mkdir()
        where = locks / "first.lock"
    else:
        for lock in locks.iterdir():
            lock.unlink()
        locks.rmdir()
        locks.write_text("not a directory\n")
        where = locks
    cp = chaos("resume", "first", "--trials", "+1", "-q")
    _assert_clear_error(cp, where)
    assert chaos.dump_sweep("first") == first and chaos.integrity() == "ok"
    assert not chaos.stray_workers()
    if obstacle == "locks-is-a-file":   # a new sweep cannot lock either, and is not created
        cp = chaos("sweep", str(_sweep(chaos, "second", SMALL)), "--name", "second", "-q")
        _assert_clear_error(cp, where)
        assert chaos.trials("second") == [] and not chaos.rows("SELECT 1 FROM sweeps WHERE name='second'")


def test_a_read_only_locks_directory_is_named_as_read_only_not_as_something_in_the_way(chaos, read_only):
    """`<store>/locks` on a read-only mount (the rest of the store writable): the error said "remove or move it
    (it holds no results)", advice for a file in the way; it says the directory must be writable."""
    first = _first_sweep(chaos)
    locks = chaos.store / "locks"
    read_only(locks)
    cp = chaos("resume", "first", "--trials", "+1", "-q")
    _assert_clear_error(cp, locks / "first.lock")
    assert "remove or move" not in cp.stderr and "writable" in cp.stderr, cp.stderr
    assert chaos.dump_sweep("first") == first and chaos.integrity() == "ok"
    assert not chaos.stray_workers()


@pytest.mark.parametrize("place", ["logs", "checkpoints"])
def test_a_file_in_the_place_of_a_sweep_directory_fails_clearly_and_burns_no_trial(chaos, place):
    """A file where the sweep keeps its logs or checkpoints (`<store>/logs/<sweep>`: a cleanup script, a sync tool)
    failed every trial the same way (`FileExistsError`, `NotADirectoryError`; "failed the same way twice") and
    burned the sweep's budget: `resume` is one error line naming it, exit 1, before any trial runs."""
    first = _first_sweep(chaos)
    where = chaos.store / place / "first"
    for path in sorted(where.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    where.rmdir()
    where.write_text("not a directory\n")
    cp = chaos("resume", "first", "--trials", "+2", "-q")
    _assert_clear_error(cp, where)
    assert chaos.dump_sweep("first") == first and chaos.integrity() == "ok"
    assert not chaos.stray_workers()
    where.unlink()   # the file gone, the sweep goes on
    chaos("resume", "first", "--trials", "+2", "-q", check=True)
    trials = chaos.trials("first")
    assert len(trials) == 6 and all(t["state"] == "completed" for t in trials), [dict(t) for t in trials]
