"""StepTracker (data wait vs compute), SystemSampler (real processes) and bottleneck hints."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from sweeplab._clock import FakeClock
from sweeplab.profiling import (
    StepTracker,
    SystemSampler,
    batch_size_of,
    bottleneck_hint,
    merge_summaries,
    profile_summary,
)


def _fake_loop(tracker: StepTracker, clock: FakeClock, waits, computes, batch=None):
    def loader():
        for w in waits:
            clock.advance(w)
            yield batch if batch is not None else np.zeros((8, 3))

    for _, c in zip(tracker.track(loader()), computes):
        clock.advance(c)


# --------------------------------------------------------------------------------------------- tracker
def test_fake_clock_split_is_exact():
    clock = FakeClock()
    tracker = StepTracker(clock=clock)
    _fake_loop(tracker, clock, [0.03] * 20, [0.01] * 20)
    s = tracker.summary()
    assert s["steps"] == 20 and s["samples"] == 160
    assert s["data_wait_fraction"] == pytest.approx(0.75)
    assert s["samples_per_s"] == pytest.approx(8 / 0.04)
    assert s["step_p50"] == pytest.approx(0.04) and s["step_p95"] == pytest.approx(0.04)
    assert s["data_wait_p50"] == pytest.approx(0.03) and s["compute_p50"] == pytest.approx(0.01)
    assert s["wall"] == pytest.approx(0.8)


def test_sleeping_loader_and_body_give_the_true_data_wait_fraction():
    waits: list[float] = []   # what each sleep really took: a loaded machine oversleeps (0.88 against 2/3 once)
    work: list[float] = []

    def timed_sleep(seconds: float, into: list[float]) -> None:
        t0 = time.monotonic()
        time.sleep(seconds)
        into.append(time.monotonic() - t0)

    def loader():
        for i in range(12):
            timed_sleep(0.02, waits)
            yield [i, i]

    tracker = StepTracker()
    for _ in tracker.track(loader()):
        timed_sleep(0.01, work)
    s = tracker.summary()
    assert s["steps"] == 12 and s["samples"] == 24
    true = sum(waits[1:]) / (sum(waits[1:]) + sum(work[1:]))   # the first step is the warm-up, reported apart
    assert s["data_wait_fraction"] == pytest.approx(true, abs=0.1)


def test_first_step_is_a_warm_up_reported_as_startup():
    clock = FakeClock()
    tracker = StepTracker(clock=clock)
    _fake_loop(tracker, clock, [5.0] + [0.01] * 9, [0.04] * 10)
    s = tracker.summary()
    assert s["steps"] == 10 and s["startup"] == pytest.approx(5.0)
    assert s["data_wait_fraction"] == pytest.approx(0.2)  # the slow start is not a per-step wait
    assert s["wall"] == pytest.approx(5.0 + 0.09 + 0.4)
    assert "slow start" in bottleneck_hint(s)


def test_percentiles_cover_a_bounded_recent_window():
    clock = FakeClock()
    tracker = StepTracker(clock=clock)
    n_old, n_new = 3000, StepTracker.WINDOW
    _fake_loop(tracker, clock, [0.0] * (n_old + n_new + 1), [1.0] * (n_old + 1) + [2.0] * n_new)
    s = tracker.summary()
    assert s["steps"] == n_old + n_new + 1
    assert s["step_p50"] == 2.0 and s["compute_p95"] == 2.0  # the old steps fell out of the window
    assert s["compute_s"] == pytest.approx(n_old * 1.0 + n_new * 2.0)  # totals are over every step


BATCHES = [
    ([1, 2, 3, 4, 5], 5),
    ((np.zeros((16, 3)), np.zeros(16)), 16),
    ([np.zeros((4, 28, 28)), np.zeros(4)], 4),
    ({"input_ids": np.zeros((6, 128)), "label": np.zeros(6)}, 6),
    ({"text": ["a", "b", "c"]}, 3),
    (np.zeros((7, 2)), 7),
    (np.float32(1.0), 1),
    (object(), None),
]


@pytest.mark.parametrize(("batch", "size"), BATCHES, ids=[str(i) for i in range(len(BATCHES))])
def test_batch_size_detection(batch, size):
    assert batch_size_of(batch) == size


def test_batch_size_of_torch_batches():
    torch = pytest.importorskip("torch")
    assert batch_size_of((torch.zeros(32, 3, 8, 8), torch.zeros(32, dtype=torch.long))) == 32
    assert batch_size_of({"x": torch.zeros(5, 2)}) == 5


def test_explicit_batch_size_overrides_detection_and_unknown_sizes_give_no_rate():
    clock = FakeClock()
    tracker = StepTracker(clock=clock)
    _fake_loop(tracker, clock, [0.01] * 5, [0.01] * 5, batch=object())
    assert tracker.summary()["samples"] is None and tracker.summary()["samples_per_s"] is None
    tracker = StepTracker(clock=clock)
    for _ in tracker.track([object()] * 5, batch_size=64):
        clock.advance(0.5)
    assert tracker.summary()["samples"] == 320 and tracker.summary()["samples_per_s"] == pytest.approx(128)


def test_max_steps_stops_each_loop_early_without_pulling_more_items():
    pulled = []

    def endless():
        for i in itertools.count():
            pulled.append(i)
            yield [i]

    tracker = StepTracker(max_steps=3)
    assert [b for b in tracker.track(endless())] == [[0], [1], [2]]
    assert pulled == [0, 1, 2]
    assert list(tracker.track(range(10, 20))) == [10, 11, 12]  # per loop, e.g. per epoch in smoke mode
    assert tracker.summary()["steps"] == 6


def test_a_loop_left_with_break_still_counts_its_last_step():
    clock = FakeClock()
    tracker = StepTracker(clock=clock)
    for i in tracker.track(range(100)):
        clock.advance(1.0)
        if i == 4:
            break
    s = tracker.summary()
    assert s["steps"] == 5 and s["compute_s"] == pytest.approx(4.0)


def test_empty_tracker_summary():
    s = StepTracker().summary()
    assert s["steps"] == 0 and s["data_wait_fraction"] is None and s["step_p50"] is None
    assert bottleneck_hint(s) == ""


def test_merged_summaries_match_one_tracker_for_counts_rates_and_fractions():
    clock = FakeClock()
    one, parts = StepTracker(clock=clock), [StepTracker(clock=clock) for _ in range(3)]
    loops = [([0.02, 0.05, 0.01, 0.04], [0.01, 0.02, 0.03, 0.01]),
             ([0.1] * 6, [0.01] * 6),
             ([0.001] * 3, [0.2, 0.3, 0.1])]
    for part, (waits, computes) in zip(parts, loops):
        _fake_loop(part, clock, waits, computes)
        _fake_loop(one, clock, waits, computes)  # one tracker reused across the three loops
    merged, single = merge_summaries([p.summary() for p in parts]), one.summary()
    for key in ("steps", "samples", "wall", "startup", "data_wait_fraction", "samples_per_s", "steps_per_s"):
        assert merged[key] == pytest.approx(single[key]), key
    assert merged["step_p50"] is not None and merged["step_p95"] >= merged["step_p50"]
    assert merge_summaries([])["steps"] == 0


def test_bad_arguments():
    with pytest.raises(ValueError):
        StepTracker(max_steps=0)
    with pytest.raises(ValueError):
        StepTracker().track([], batch_size=-1)


# --------------------------------------------------------------------------------------------- sampler
BUSY = (
    "import time\n"
    "ballast = b'x' * 100_000_000\n"
    "print('ready', flush=True)\n"
    "end = time.time() + 30\n"
    "while time.time() < end:\n"
    "    pass\n"
)


@pytest.fixture
def busy_child():
    proc = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_sampler_records_a_busy_subprocess_cpu_and_rss(busy_child):
    batches: list[list[dict]] = []
    tree_batches: list[list[dict]] = []
    child = SystemSampler(batches.append, interval=0.1, pid=busy_child.pid, flush_every=3)
    tree = SystemSampler(tree_batches.append, interval=0.1)  # this process and its children
    with child, tree:   # until both have 3 samples (a sleep of 1.2 s gave a starved sampler thread fewer)
        deadline = time.monotonic() + 60
        while min(child.peak()["system_samples"], tree.peak()["system_samples"]) < 3:
            assert time.monotonic() < deadline, (child.peak(), tree.peak())
            time.sleep(0.05)
    peak = child.peak()
    assert peak["system_samples"] >= 3
    assert peak["rss_peak"] >= 100_000_000
    assert peak["cpu_peak"] > 5.0 and peak["cpu_mean"] > 0.0
    assert peak["gpu_util_mean"] is None or peak["gpu_util_mean"] >= 0.0
    samples = [s for b in batches for s in b]
    assert len(samples) == peak["system_samples"] and all(len(b) <= 3 for b in batches[:-1])
    assert {"time", "cpu", "rss", "procs"} <= set(samples[0])
    assert [s["time"] for s in samples] == sorted(s["time"] for s in samples)

    tree_samples = [s for b in tree_batches for s in b]
    assert max(s["procs"] for s in tree_samples) >= 2  # the busy child is counted in our tree
    assert tree.peak()["rss_peak"] > 100_000_000


def test_sampler_stops_by_itself_when_the_process_is_gone_and_keeps_sink_errors():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)

    def failing_sink(batch):
        raise RuntimeError("sink down")

    sampler = SystemSampler(failing_sink, interval=0.05, pid=proc.pid, flush_every=1)
    sampler.start()
    deadline = time.monotonic() + 60   # one sample of the live process (a starved thread may take a while)
    while sampler.peak()["system_samples"] < 1:
        assert time.monotonic() < deadline, "no sample"
        time.sleep(0.02)
    assert proc.stdin is not None
    proc.stdin.close()   # the process ends
    proc.wait(timeout=60)
    time.sleep(0.3)
    sampler.stop()
    assert isinstance(sampler.error, RuntimeError)
    assert sampler.peak()["system_samples"] >= 1


SPAWNER = (
    "import resource, subprocess, sys, time\n"
    "burn = 'import time\\nwhile time.process_time() < 0.15: pass'\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "for _ in range(4):\n"
    "    subprocess.run([sys.executable, '-c', burn], check=True)\n"
    "kids = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(kids.ru_utime + kids.ru_stime, flush=True)\n"
    "sys.stdin.readline()\n"
)


def test_sampler_counts_the_cpu_of_short_lived_children():
    """Children born and gone between two scans of the process tree (DataLoader workers of an epoch, the
    programs a command trial runs one after another) still count: their CPU time reaches the parent."""
    proc = subprocess.Popen([sys.executable, "-c", SPAWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        batches: list[list[dict]] = []
        with SystemSampler(batches.append, interval=0.1, pid=proc.pid) as sampler:
            began = time.time()   # just after the baseline: its first sample's CPU % is over the time since
            proc.stdin.write("go\n")
            proc.stdin.flush()
            truth = float(proc.stdout.readline())
            # two samples after every child was reaped (a sleep of 0.4 s left a starved sampler thread none),
            # and the program ends
            seen = sampler.peak()["system_samples"]
            deadline = time.monotonic() + 60
            while sampler.peak()["system_samples"] < seen + 2:
                assert time.monotonic() < deadline, sampler.peak()
                time.sleep(0.05)
            proc.stdin.write("end\n")
            proc.stdin.flush()
            proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    samples = [s for b in batches for s in b]
    times = [s["time"] for s in samples]
    measured = sum(s["cpu"] / 100 * (t1 - t0) for s, t0, t1 in zip(samples[1:], times, times[1:]))
    measured += samples[0]["cpu"] / 100 * (times[0] - began)   # the first sample's time since the start
    assert 0.7 * truth <= measured <= 1.3 * truth + 0.05, (measured, truth, [s["cpu"] for s in samples])


# ----------------------------------------------------------------------------------------------- hints
BASE = {"steps": 100, "wall": 100.0, "startup": 0.5}
HINTS = [
    ({**BASE, "data_wait_fraction": 0.64},
     "input-bound: 64% of each step waits for data; raise DataLoader num_workers or prefetch"),
    ({**BASE, "data_wait_fraction": 0.64, "cpu_mean": 195.0, "ncpu": 2}, "the CPUs are saturated"),
    ({**BASE, "data_wait_fraction": 0.03}, "compute-bound: 97% of each step is spent in the loop body"),
    ({**BASE, "data_wait_fraction": 0.03, "gpu_util_mean": 96.0}, "the GPU is busy 96%"),
    ({**BASE, "data_wait_fraction": 0.05, "gpu_util_mean": 22.0}, "GPU underused: the GPU is busy 22%"),
    ({**BASE, "data_wait_fraction": 0.05, "rss_peak": 15e9, "mem_total": 16e9}, "memory-bound: peak memory"),
    ({**BASE, "data_wait_fraction": 0.05, "startup": 40.0}, "slow start: 40.0 s (40% of the tracked time)"),
    ({**BASE, "data_wait_fraction": 0.18}, ""),
    ({**BASE, "steps": 2, "data_wait_fraction": 0.9}, ""),
]


@pytest.mark.parametrize(("summary", "text"), HINTS, ids=[
    "input", "input-cpu-saturated", "compute", "compute-gpu", "gpu-underused", "memory", "slow-start",
    "balanced", "too-few-steps"])
def test_bottleneck_hints(summary, text):
    hint = bottleneck_hint(summary)
    assert (text in hint) if text else hint == ""


def test_profile_summary_merges_step_and_system_figures_with_a_hint():
    clock = FakeClock()
    tracker = StepTracker(clock=clock)
    _fake_loop(tracker, clock, [0.064] * 10, [0.036] * 10)
    system = {"system_samples": 3, "rss_peak": 1e9, "cpu_mean": 90.0, "gpu_util_mean": None, "mem_total": 8e9}
    merged = profile_summary(tracker.summary(), system)
    assert merged["rss_peak"] == 1e9 and merged["steps"] == 10 and merged["samples"] == 80
    assert merged["hint"].startswith("input-bound: 64% of each step waits for data")


def test_cli_profile_says_why_a_trial_has_no_profile(tmp_path):
    """`sweeplab profile` of a trial without a profile told the user to add `run.track` even to a trial that
    uses it and is still running (its profile is stored when an attempt ends) or that failed before its loop.
    It now names the trial's state; a trial with a profile prints its table, exit 0."""

    from sweeplab.store import Store

    st = Store.open(tmp_path / "store")
    with st.transaction():
        sid = st.create_sweep(name="p", method="grid", metric="loss", goal="minimize", spec={}, spec_path=None,
                              seed=0)
        for n, (state, prof) in enumerate([("running", None), ("failed", None),
                                           ("completed", {"steps": 7, "steps_per_s": 3.5})]):
            tid = st.add_trial(sid, n, {"x": n}, None, seed=n)
            st.update_trial(tid, state=state, **({"profile": prof} if prof else {}))
    st.close()

    def profile(ref: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sweeplab", "profile", ref, *extra, "--store",
                               str(tmp_path / "store")],
                              capture_output=True, text=True, timeout=60)

    running, failed, done = profile("p/0"), profile("p/1"), profile("p/2")
    assert running.returncode == 1 and "p/0 is running" in running.stdout and "when" in running.stdout
    assert "run.track" not in running.stdout
    assert failed.returncode == 1 and "p/1 (failed)" in failed.stdout and "run.track" in failed.stdout
    assert done.returncode == 0 and "steps" in done.stdout and "7" in done.stdout
    # --json prints null for a trial without a profile and exits 1 as the table does (as `best --json` with
    # no best); it exited 0, so a script could not tell "no profile" from a profile without reading it
    missing = profile("p/1", "--json")
    assert missing.returncode == 1 and missing.stdout.strip() == "null", (missing.returncode, missing.stdout)
    found = profile("p/2", "--json")
    assert found.returncode == 0 and json.loads(found.stdout)["steps"] == 7


SHORT_PROGRAM = (
    "import sys, time\n"
    "buf = bytearray(64_000_000)\n"            # resident: bytearray zero-fills it
    "t = time.process_time()\n"
    "while time.process_time() - t < 0.1:\n"
    "    pass\n"
    "print('@sweeplab {\"loss\": 0.5}', flush=True)\n"
)


def short_trial(config, run):
    """A function trial far shorter than the sampler's first look (1 s after the start)."""
    t = time.process_time()
    while time.process_time() - t < 0.1:
        pass
    for step in run.track(range(3)):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
    return {"loss": 0.1}


def test_trials_shorter_than_a_second_get_cpu_and_memory_figures(tmp_path):
    """A trial that ended before the sampler's first sample got no CPU or memory figure at all (a command
    trial not even a profile): a user with fast trials saw nothing. Such a trial now gets one sample taken at
    its end: CPU % over its whole run (the program's, once reaped, included), the process's memory and a
    command program's peak (from wait4)."""
    import sweeplab as sl
    from sweeplab.store import Store, queries

    program = tmp_path / "short.py"
    program.write_text(SHORT_PROGRAM)
    base = {"method": "grid", "metric": {"name": "loss", "goal": "minimize"}, "parameters": {"x": {"value": 1}}}
    store = tmp_path / "store"
    fn = sl.run_sweep({**base, "function": f"{__file__}:short_trial"}, store=store, name="fn", workers=2)
    cmd = sl.run_sweep({**base, "program": str(program)}, store=store, name="cmd", workers=2)
    assert fn.exit_code == 0 and cmd.exit_code == 0
    st = Store.open(store, readonly=True)
    try:
        profiles = {name: queries.trial_detail(st, name, 0)["profile"] for name in ("fn", "cmd")}
    finally:
        st.close()
    for name, profile in profiles.items():
        assert profile is not None, name
        assert profile["system_samples"] >= 1 and profile["cpu_mean"] > 0 and profile["rss_peak"] > 0, profile
    assert profiles["fn"]["steps"] == 3
    assert profiles["cmd"]["rss_peak"] >= 64_000_000   # the program's own peak, though it had ended


def test_sampler_takes_a_final_sample_when_stopped_between_samples():
    """A trial ending between two samples lost its last moments (and one ending before the first sample, all
    of them): stop() now samples the time since the last sample."""
    batches: list[list[dict]] = []
    sampler = SystemSampler(batches.append, interval=60.0)
    sampler.start()
    t = time.process_time()
    while time.process_time() - t < 0.1:
        pass
    sampler.stop(reaped_rss=1_000_000)
    peak = sampler.peak()
    samples = [s for b in batches for s in b]
    assert peak["system_samples"] == len(samples) == 1
    assert peak["cpu_mean"] > 0 and peak["rss_peak"] == samples[0]["rss"] > 1_000_000


def test_merge_rank_profiles_sums_throughput_and_keeps_the_slowest_ranks_pace():
    from sweeplab.profiling import merge_rank_profiles

    rank0 = {"steps": 10, "samples": 80, "samples_per_s": 100.0, "steps_per_s": 12.5, "data_wait_fraction": 0.05,
             "step_p95": 0.09, "data_wait_s": 0.04, "compute_s": 0.76, "wall": 0.8, "rss_peak": 300,
             "cpu_mean": 90.0, "system_samples": 1}
    rank1 = {**rank0, "samples_per_s": 60.0, "steps_per_s": 7.5, "data_wait_fraction": 0.6, "step_p95": 0.2,
             "data_wait_s": 0.8, "compute_s": 0.53, "wall": 1.3, "rss_peak": 200, "cpu_mean": 50.0}
    alone = merge_rank_profiles([rank0, rank1])
    assert (alone["world_size"], alone["samples"], alone["samples_per_s"]) == (2, 160, 160.0)
    assert (alone["steps"], alone["steps_per_s"], alone["step_p95"], alone["wall"]) == (10, 7.5, 0.2, 1.3)
    assert alone["data_wait_fraction"] == 0.6 and alone["hint"].startswith("input-bound")
    assert (alone["rss_peak"], alone["cpu_mean"]) == (500, 140.0)   # no supervisor samples: the ranks' summed
    assert [r["rank"] for r in alone["ranks"]] == [0, 1]
    sampled = merge_rank_profiles([rank0, None], {"system_samples": 3, "rss_peak": 900, "cpu_mean": 180.0})
    assert (sampled["rss_peak"], sampled["cpu_mean"], sampled["samples"]) == (900, 180.0, 80)
    assert merge_rank_profiles([None, None])["ranks"] == []
    untracked = merge_rank_profiles([{"system_samples": 1, "rss_peak": 10, "cpu_mean": 5.0}] * 2)
    assert "steps" not in untracked and untracked["rss_peak"] == 20   # no run.track: CPU and memory only
