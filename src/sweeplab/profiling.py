"""Profiling: where a training step's time goes, what the process uses, and a plain-words bottleneck hint.

`StepTracker.track(loader)` wraps the data iterable: per step it measures the time spent waiting for the
next batch (data wait) and the time in the loop body (compute), counts samples and keeps step-time
percentiles, for two `perf_counter` calls and three deque appends per step. `SystemSampler` is a background
thread sampling CPU %, RSS (process tree) and, through NVML when present, GPU utilisation and memory.
`profile_summary` merges both into the per-trial profile with a `bottleneck_hint`.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sweeplab._clock import Clock
from sweeplab._devices import visible_gpus

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "StepTracker",
    "SystemSampler",
    "UsageMark",
    "batch_size_of",
    "bottleneck_hint",
    "merge_rank_profiles",
    "merge_summaries",
    "profile_summary",
    "rss",
]

T = TypeVar("T")

#: a data-wait fraction at or above this is "input-bound"; at or below COMPUTE_BOUND, "compute-bound"
INPUT_BOUND = 0.25
COMPUTE_BOUND = 0.10
GPU_UNDERUSED = 50.0  # percent
MEMORY_TIGHT = 0.90  # peak RSS / machine memory
MIN_STEPS = 3


# ------------------------------------------------------------------------------------------ step tracker
def batch_size_of(batch: Any) -> int | None:
    """Number of samples in `batch`: its leading dimension or len(); for a tuple/list/dict whose first
    element is a tensor/array, that element's leading dimension. None when it cannot be told.

    A list of per-sample arrays is ambiguous (it reads as columns); pass `batch_size=` to `track` then.
    """
    shape = getattr(batch, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) else 1
        except TypeError:
            return None
    if isinstance(batch, (tuple, list)):
        if batch:
            first_shape = getattr(batch[0], "shape", None)
            if first_shape is not None and len(first_shape):
                return int(first_shape[0])
        return len(batch)
    if isinstance(batch, Mapping):
        for value in batch.values():
            return batch_size_of(value)
        return 0
    try:
        return len(batch)
    except TypeError:
        return None


def _percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile of already sorted values (numpy's default method)."""
    if not values:
        return None
    pos = (len(values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


class _Bucket:
    """Totals and a bounded window of recent per-step times."""

    __slots__ = ("compute", "computes", "samples", "steps", "totals", "unknown", "wait", "waits")

    def __init__(self, window: int) -> None:
        self.steps = self.samples = self.unknown = 0
        self.wait = self.compute = 0.0
        self.waits: deque[float] = deque(maxlen=window)
        self.computes: deque[float] = deque(maxlen=window)
        self.totals: deque[float] = deque(maxlen=window)

    def add(self, wait: float, compute: float, n: int | None) -> None:
        self.steps += 1
        self.wait += wait
        self.compute += compute
        if n is None:
            self.unknown += 1
        else:
            self.samples += n
        self.waits.append(wait)
        self.computes.append(compute)
        self.totals.append(wait + compute)


class StepTracker:
    """Wraps an iterable: `for batch in tracker.track(loader)` measures, per step, the time waiting for the
    next item (data wait) vs the time spent in the loop body (compute), the batch size, samples/s and
    step-time percentiles.

    The first step of each `track` call is a warm-up (worker start, first compilation): it counts in
    `steps`, `samples`, `wall` and `startup`, but not in the fractions, rates and percentiles, unless no
    other step was seen. Percentiles cover the last `WINDOW` steps, so memory stays bounded.
    `max_steps` (smoke mode) stops each `track` loop after that many steps.
    """

    WINDOW = 4096

    def __init__(self, *, clock: Clock | None = None, max_steps: int | None = None) -> None:
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)
                                      or max_steps < 1):
            raise ValueError(f"max_steps must be a positive integer or None, got {max_steps!r}")
        self._now: Callable[[], float] = clock.monotonic if clock is not None else time.perf_counter
        self.max_steps = max_steps
        self._steady = _Bucket(self.WINDOW)
        self._warm = _Bucket(256)
        self._planned = 0  # steps the loops would have run without `max_steps` (smoke cost estimates)
        self._in_step = 0  # loop bodies running now (nested loops share the tracker)
        #: (the exception, the 1-based number of the batch in its loop) when fetching a batch raised
        self.fetch_error: tuple[BaseException, int] | None = None

    @property
    def in_step(self) -> bool:
        """Whether a tracked loop's body is running (between handing out an item and asking for the next)."""
        return self._in_step > 0

    def track(self, iterable: Iterable[T], *, batch_size: int | None = None) -> Iterator[T]:
        """Yield the items of `iterable`, timing each step; `batch_size` overrides the detected size."""
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 0):
            raise ValueError(f"batch_size must be a non-negative integer or None, got {batch_size!r}")
        return self._track(iterable, batch_size)

    def _track(self, iterable: Iterable[T], batch_size: int | None) -> Iterator[T]:
        now, limit = self._now, self.max_steps
        bucket, count = self._warm, 0
        full: int | None = None  # the loop's length when `max_steps` cut it short (smoke mode)
        t0 = now()
        it = iter(iterable)  # a DataLoader starts its workers here: part of the first wait
        try:
            while limit is None or count < limit:
                try:
                    item = next(it)
                except StopIteration:
                    return
                except BaseException as exc:  # the input pipeline failed (a DataLoader worker raised)
                    self.fetch_error = (exc, count + 1)
                    raise
                t1 = now()
                n = batch_size if batch_size is not None else batch_size_of(item)
                self._in_step += 1
                try:
                    yield item
                finally:  # also when the loop breaks (generator closed) or raises into us
                    t0_next = now()
                    self._in_step -= 1
                    bucket.add(t1 - t0, t0_next - t1, n)
                t0 = t0_next
                bucket, count = self._steady, count + 1
            full = len(iterable) if hasattr(iterable, "__len__") else None  # type: ignore[arg-type]
        finally:
            self._planned += max(count, full or 0)

    def summary(self) -> dict[str, Any]:
        """Steps, samples, samples/s, data-wait fraction and percentiles (seconds). Cheap; thread-safe."""
        steady, warm = self._steady, self._warm
        use = steady if steady.steps else warm
        busy = use.wait + use.compute
        totals, waits, computes = sorted(use.totals), sorted(use.waits), sorted(use.computes)
        steps = steady.steps + warm.steps
        known = steps - steady.unknown - warm.unknown
        return {
            "steps": steps,
            "samples": steady.samples + warm.samples if known else None,
            "samples_per_s": use.samples / busy if busy > 0 and use.steps > use.unknown else None,
            "steps_per_s": use.steps / busy if busy > 0 else None,
            "data_wait_fraction": use.wait / busy if busy > 0 else None,
            "step_p50": _percentile(totals, 50),
            "step_p95": _percentile(totals, 95),
            "data_wait_p50": _percentile(waits, 50),
            "data_wait_p95": _percentile(waits, 95),
            "compute_p50": _percentile(computes, 50),
            "compute_p95": _percentile(computes, 95),
            "wall": steady.wait + steady.compute + warm.wait + warm.compute,
            "startup": warm.wait,
            "data_wait_s": use.wait,
            "compute_s": use.compute,
            "measured_steps": use.steps,
            "planned_steps": self._planned,
        }


def merge_summaries(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One summary from several trackers' summaries (e.g. one per epoch). Counts, totals, rates and the
    data-wait fraction are exact; percentiles are the step-weighted mean of each summary's percentiles
    (an approximation: reuse one StepTracker across loops for exact ones)."""
    parts = [s for s in summaries if s and s.get("steps")]
    if not parts:
        return StepTracker().summary()
    if len(parts) == 1:
        return dict(parts[0])

    def total(key: str) -> float:
        return sum(float(s.get(key) or 0.0) for s in parts)

    busy = total("data_wait_s") + total("compute_s")
    rated = [s for s in parts if s.get("samples_per_s") is not None]
    rated_busy = sum(float(s["data_wait_s"]) + float(s["compute_s"]) for s in rated)
    merged: dict[str, Any] = {
        "steps": int(total("steps")),
        "samples": int(total("samples")) if any(s.get("samples") is not None for s in parts) else None,
        "samples_per_s": (sum(float(s["samples_per_s"]) * (float(s["data_wait_s"]) + float(s["compute_s"]))
                              for s in rated) / rated_busy) if rated_busy > 0 else None,
        "steps_per_s": total("measured_steps") / busy if busy > 0 else None,
        "data_wait_fraction": total("data_wait_s") / busy if busy > 0 else None,
    }
    weights = [float(s.get("measured_steps") or 0) for s in parts]
    for key in ("step_p50", "step_p95", "data_wait_p50", "data_wait_p95", "compute_p50", "compute_p95"):
        pairs = [(w, float(s[key])) for w, s in zip(weights, parts) if s.get(key) is not None and w > 0]
        wsum = sum(w for w, _ in pairs)
        merged[key] = sum(w * v for w, v in pairs) / wsum if wsum else None
    merged.update({
        "wall": total("wall"), "startup": total("startup"), "data_wait_s": total("data_wait_s"),
        "compute_s": total("compute_s"), "measured_steps": int(total("measured_steps")),
        "planned_steps": int(sum(float(s.get("planned_steps", s.get("steps")) or 0) for s in parts)),
    })
    return merged


# ---------------------------------------------------------------------------------------- system sampler
class _Nvml:
    """GPU utilisation and memory of the visible devices through NVML (nvidia-ml-py); None if unavailable."""

    def __init__(self, visible: list[int | str] | None) -> None:
        import pynvml  # nvidia-ml-py, optional: the caller treats ImportError as "no GPU"

        self._nvml = pynvml
        pynvml.nvmlInit()
        try:
            if visible is None:
                visible = list(range(pynvml.nvmlDeviceGetCount()))
            self.handles = [
                pynvml.nvmlDeviceGetHandleByIndex(d) if isinstance(d, int)
                else pynvml.nvmlDeviceGetHandleByUUID(d)
                for d in visible
            ]
        except Exception:
            pynvml.nvmlShutdown()
            raise

    def sample(self) -> dict[str, float]:
        utils, used, total = [], 0.0, 0.0
        for h in self.handles:
            utils.append(float(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu))
            mem = self._nvml.nvmlDeviceGetMemoryInfo(h)
            used += float(mem.used)
            total += float(mem.total)
        return {"gpu_util": sum(utils) / len(utils), "gpu_mem": used, "gpu_mem_total": total}

    def close(self) -> None:
        with contextlib.suppress(Exception):  # shutting down a library that may already have failed
            self._nvml.nvmlShutdown()


def _descendants(pid: int) -> list[int] | None:
    """`pid` and its descendants from /proc/PID/task/TID/children (Linux >= 3.5 with CONFIG_PROC_CHILDREN),
    or None when `pid` is gone."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            if p == pid:
                return None
            continue
        out.append(p)
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children", "rb") as fh:
                    todo.extend(int(c) for c in fh.read().split())
            except (OSError, ValueError):
                continue
    return out


class SystemSampler:
    """Background thread sampling CPU % (percent of one core, summed over the process and its children),
    RSS (bytes, process tree), and GPU util/memory via NVML when nvidia-ml-py imports and a GPU is present
    (the devices in `gpus`, by default those of CUDA_VISIBLE_DEVICES). Calls `sink(samples)` with batches of
    `flush_every` samples from the sampling thread, and with the rest on `stop()`.

    Each sample: {"time", "cpu", "rss", "procs"} plus {"gpu_util", "gpu_mem", "gpu_mem_total"} with a GPU.
    CPU % comes from the tree's cumulative CPU times (children reaped by a process of the tree included), so
    short-lived children count. The tree is listed at each sample from /proc/PID/task/TID/children, or, on a
    kernel without that file, by psutil every TREE_REFRESH seconds (that listing reads all of /proc).
    """

    TREE_REFRESH = 5.0

    def __init__(
        self,
        sink: Callable[[list[dict[str, Any]]], None],
        *,
        interval: float = 1.0,
        pid: int | None = None,
        flush_every: int = 10,
        gpus: list[int | str] | None = None,
    ) -> None:
        if not (isinstance(interval, (int, float)) and interval > 0):
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.sink, self.interval = sink, float(interval)
        self.pid = os.getpid() if pid is None else pid
        self.flush_every = max(1, int(flush_every))
        self._gpus_arg = gpus
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._procs: dict[int, Any] = {}
        self._tree_cache: list[Any] | None = None
        self._tree_time = 0.0
        self._proc_children = False
        self._cpu_prev: dict[int, tuple[float, int]] = {}
        self._cpu_time = self._cpu_carry = 0.0
        self._gpu: _Nvml | None = None
        self.error: BaseException | None = None  # last exception raised by the sink
        self._n = 0
        self._cpu_sum = self._cpu_peak = 0.0
        self._rss_peak = 0
        self._gpu_n = 0
        self._gpu_util_sum = self._gpu_mem_peak = 0.0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start sampling (the first sample comes one interval later: CPU % needs a baseline)."""
        if self._thread is not None:
            return
        import psutil

        self._psutil = psutil
        self._root = psutil.Process(self.pid)
        self._ncpu, self._mem_total = _machine()
        gpus = self._gpus_arg if self._gpus_arg is not None else visible_gpus(
            os.environ.get("CUDA_VISIBLE_DEVICES"))
        if gpus is None or gpus:
            try:
                self._gpu = _Nvml(gpus)
                if not self._gpu.handles:
                    self._gpu.close()
                    self._gpu = None
            except Exception:
                self._gpu = None
        self._proc_children = os.path.exists(f"/proc/{self.pid}/task/{self.pid}/children")
        self._cpu_prev, _ = self._read()  # the baseline: CPU time before sampling is not the trial's
        self._cpu_time, self._cpu_carry = time.monotonic(), 0.0
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="sweeplab-system-sampler", daemon=True)
        self._thread.start()

    def stop(self, *, reaped_rss: int = 0) -> None:
        """Stop the thread, take a final sample (the time since the last sample: a trial that ends between
        two samples, or before the first, still gets its figures) and hand the remaining samples to the sink.
        `reaped_rss`: the peak RSS of a child reaped since the last sample (a command trial's program, from
        `wait4`), which no sample of the tree can see any more; it is added to the final sample's."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join(timeout=max(5.0, 2 * self.interval))
        # never beside a sample the thread is still taking; nor a few ms after one (a CPU % over so short a
        # time is noise) unless it brings a reaped child's memory
        if not thread.is_alive() and (reaped_rss or time.monotonic() - self._cpu_time >= 0.05):
            with contextlib.suppress(Exception):
                self.sample(extra_rss=reaped_rss)
        self._flush()
        if self._gpu is not None:
            self._gpu.close()
            self._gpu = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ sampling
    def _tree(self) -> list[Any]:
        """The process and its descendants. Listed at every sample from /proc/PID/task/TID/children (a few
        small reads); where the kernel has no such file, by psutil every TREE_REFRESH s (it reads all of
        /proc). A child missed between two listings still counts: its CPU time reaches its parent's
        children times once it is reaped (see `_cpu_total`)."""
        now = time.monotonic()
        if self._tree_cache is not None and not self._proc_children \
                and now - self._tree_time < self.TREE_REFRESH:
            return self._tree_cache
        self._tree_time = now
        psutil = self._psutil
        if self._proc_children:
            pids = _descendants(self.pid)
            if pids is None:
                return []
            procs = []
            for pid in pids:
                known = self._procs.get(pid)
                if known is None:
                    try:
                        known = psutil.Process(pid)
                    except psutil.Error:
                        continue
                procs.append(known)
        else:
            try:
                procs = [self._root, *self._root.children(recursive=True)]
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                return []
            except psutil.AccessDenied:
                procs = [self._root]
        cached = []
        for p in procs:
            cached.append(self._procs.setdefault(p.pid, p))
        alive = {p.pid for p in procs}
        for pid in [pid for pid in self._procs if pid not in alive]:
            del self._procs[pid]
        self._tree_cache = cached
        return cached

    def _read(self) -> tuple[dict[int, tuple[float, int]], int]:
        """({pid: (CPU seconds, parent pid)}, RSS bytes) of the tree now. CPU seconds are cumulative: a
        process's own time plus that of the children it has reaped, so a child that lived and ended between
        two samples is counted (in its parent) rather than lost."""
        psutil = self._psutil
        values: dict[int, tuple[float, int]] = {}
        rss = 0
        for p in self._tree():
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    ppid = p.ppid()
                    size = p.memory_info().rss
            except psutil.Error:
                continue
            values[p.pid] = (t.user + t.system + t.children_user + t.children_system, ppid)
            rss += size
        return values, rss

    def sample(self, *, extra_rss: int = 0) -> dict[str, Any] | None:
        """Take one sample now (None once the process is gone); `extra_rss` is added to the tree's RSS.

        CPU % is the CPU time the tree used since the last sample over the time between them: the growth of
        each process's cumulative time, the whole time of a process new to the tree, and, for a process gone
        since (reaped by its parent, whose children time now holds all of it), minus what was already
        counted of it. A process that left the tree otherwise (orphaned, adopted by init) simply stops
        counting. What one sample cannot show (a race with a reap; above all cores) is carried into the
        next one, at most one interval's worth."""
        values, rss = self._read()
        n = len(values)
        if n == 0:
            return None
        now = time.monotonic()
        dt = now - self._cpu_time
        prev = self._cpu_prev
        used = 0.0
        for pid, (v, _) in values.items():
            before = prev.get(pid)
            used += v - before[0] if before is not None else v
        for pid, (v, ppid) in prev.items():
            if pid not in values and ppid in values:
                used -= v
        cap = float(self._ncpu)
        avail = used + self._cpu_carry
        cpu = min(max(avail / dt, 0.0), cap) if dt > 0 else 0.0
        self._cpu_carry = max(-cap * dt, min(avail - cpu * dt, cap * dt))
        self._cpu_prev, self._cpu_time = values, now
        out: dict[str, Any] = {"time": time.time(), "cpu": round(100.0 * cpu, 1), "rss": rss + extra_rss,
                               "procs": n}
        if self._gpu is not None:
            try:
                out.update(self._gpu.sample())
            except Exception:
                self._gpu.close()
                self._gpu = None
        self._account(out)
        return out

    def _account(self, s: dict[str, Any]) -> None:
        with self._lock:
            self._n += 1
            self._cpu_sum += s["cpu"]
            self._cpu_peak = max(self._cpu_peak, s["cpu"])
            self._rss_peak = max(self._rss_peak, s["rss"])
            if "gpu_util" in s:
                self._gpu_n += 1
                self._gpu_util_sum += s["gpu_util"]
                self._gpu_mem_peak = max(self._gpu_mem_peak, s["gpu_mem"])
            self._pending.append(s)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if self.sample() is None:
                break
            if len(self._pending) >= self.flush_every:
                self._flush()

    def _flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            try:
                self.sink(batch)
            except Exception as exc:
                self.error = exc

    def peak(self) -> dict[str, Any]:
        """Aggregates so far: system_samples, rss_peak, cpu_mean, cpu_peak, gpu_util_mean, gpu_mem_peak,
        mem_total, ncpu."""
        with self._lock:
            n, g = self._n, self._gpu_n
            return {
                "system_samples": n,
                "rss_peak": self._rss_peak if n else None,
                "cpu_mean": self._cpu_sum / n if n else None,
                "cpu_peak": self._cpu_peak if n else None,
                "gpu_util_mean": self._gpu_util_sum / g if g else None,
                "gpu_mem_peak": self._gpu_mem_peak if g else None,
                "mem_total": getattr(self, "_mem_total", None),
                "ncpu": getattr(self, "_ncpu", None),
            }


#: seconds: a trial shorter than this gets no CPU or memory figures from `UsageMark` (they would measure the
#: worker's own per-trial work more than the trial, and the look would cost a no-op trial ~5 % of its overhead)
MIN_LOOK = 0.02


class UsageMark:
    """What a trial too short for `SystemSampler` used, from two cheap looks at this process (no psutil, no
    tree walk): one when the attempt starts (a clock and `time.process_time`), one (`final_sample`) when it
    ends, if it ran `MIN_LOOK` or more (one `getrusage` and a read of /proc/PID/statm).

    CPU % is the growth of this process's CPU time over the wall time between the two looks, plus the CPU of
    the program a command trial ran (`child_cpu`, from `wait4`; other children a function trial reaped are
    counted only by the sampler, from 1 s). RSS is this process's at the end, or its peak when that peak was
    reached during the trial (`ru_maxrss` grew), plus the peak of a command trial's program (`child_rss`,
    from `wait4`). One sample, so `cpu_mean` is exact and `rss_peak` is what the end (or the kernel's peak)
    shows, as a sampler's peaks are what its samples show.
    """

    _peak: int | None = None   # this process's ru_maxrss at its last look (None: look again at the next start)

    def __init__(self) -> None:
        self.time = time.monotonic()
        self.cpu = time.process_time()
        if UsageMark._peak is None:
            UsageMark._peak = _maxrss()
        self.maxrss = UsageMark._peak

    def final_sample(self, child_rss: int = 0, child_cpu: float = 0.0) -> dict[str, Any] | None:
        """The trial's one sample, or None when it ran under `MIN_LOOK`."""
        dt = time.monotonic() - self.time
        if dt < MIN_LOOK:
            UsageMark._peak = None   # not looked at: the next trial's start reads the peak again
            return None
        cpu_s = time.process_time() - self.cpu + child_cpu
        peak = UsageMark._peak = _maxrss()
        ncpu, _ = _machine()
        cpu = min(max(cpu_s / dt, 0.0), float(ncpu))
        # the process's peak reached during the trial is the trial's (and at least its memory now)
        mine = peak if peak > self.maxrss else (rss() or peak)
        return {"time": time.time(), "cpu": round(100.0 * cpu, 1), "rss": mine + child_rss,
                "procs": 2 if child_rss else 1}

    @staticmethod
    def summary(sample: Mapping[str, Any]) -> dict[str, Any]:
        """`SystemSampler.peak()`'s figures for this one sample."""
        ncpu, mem_total = _machine()
        return {"system_samples": 1, "rss_peak": sample["rss"], "cpu_mean": sample["cpu"],
                "cpu_peak": sample["cpu"], "gpu_util_mean": None, "gpu_mem_peak": None,
                "mem_total": mem_total, "ncpu": ncpu}


_MACHINE: tuple[int, int | None] | None = None


def _machine() -> tuple[int, int | None]:
    """(CPUs, memory bytes) of this machine, looked up once per process."""
    global _MACHINE
    if _MACHINE is None:
        try:
            mem: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (OSError, ValueError, AttributeError):
            mem = None
        _MACHINE = (os.cpu_count() or 1, mem)
    return _MACHINE


def _maxrss() -> int:
    """This process's peak RSS in bytes."""
    import resource

    unit = 1 if sys.platform == "darwin" else 1024   # ru_maxrss: bytes on macOS, kilobytes elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit


_STATM: tuple[int, int] | None = None   # (pid, fd) of this process's /proc/PID/statm, opened once


def rss() -> int | None:
    """This process's resident memory in bytes: /proc/PID/statm read again through one descriptor kept open
    (4 us; opening it each time cost 26 us, per trial), else psutil, else None."""
    global _STATM
    try:
        pid = os.getpid()
        if _STATM is None or _STATM[0] != pid:   # a forked child must not read its parent's
            _STATM = (pid, os.open(f"/proc/{pid}/statm", os.O_RDONLY | os.O_CLOEXEC))
        return int(os.pread(_STATM[1], 128, 0).split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:
        return None


# ------------------------------------------------------------------------------------------------- hints
def _pct(x: float) -> int:
    return round(100 * x)


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB"


def bottleneck_hint(summary: Mapping[str, Any]) -> str:
    """The most useful single observation about a profile summary, in plain words; "" when none stands out."""
    steps = summary.get("steps") or 0
    wait = summary.get("data_wait_fraction")
    if steps < MIN_STEPS or wait is None:
        return ""
    gpu = summary.get("gpu_util_mean")
    cpu, ncpu = summary.get("cpu_mean"), summary.get("ncpu")
    if wait >= INPUT_BOUND:
        hint = (f"input-bound: {_pct(wait)}% of each step waits for data; raise DataLoader num_workers "
                f"or prefetch_factor, or cache/preprocess the data")
        if cpu is not None and ncpu and cpu >= 85.0 * ncpu:
            hint += " (the CPUs are saturated: make loading cheaper rather than adding workers)"
        return hint
    if gpu is not None and gpu < GPU_UNDERUSED:
        return (f"GPU underused: the GPU is busy {round(gpu)}% of the time although only {_pct(wait)}% of "
                f"each step waits for data; host-side work dominates (Python overhead, host-to-device "
                f"copies, small kernels): try a larger batch, pin_memory with non_blocking copies, "
                f"mixed precision or torch.compile")
    rss, total = summary.get("rss_peak"), summary.get("mem_total")
    if rss and total and rss >= MEMORY_TIGHT * total:
        return (f"memory-bound: peak memory {_gb(rss)} is {_pct(rss / total)}% of the machine's "
                f"{_gb(total)}; lower the batch size or the number of workers before it is OOM-killed")
    startup, wall = summary.get("startup") or 0.0, summary.get("wall") or 0.0
    if wall > 0 and startup >= 1.0 and startup >= 0.2 * wall:
        return (f"slow start: {startup:.1f} s ({_pct(startup / wall)}% of the tracked time) passes before "
                f"the first batch of each loop; use DataLoader(persistent_workers=True) or a lighter "
                f"dataset setup")
    if wait <= COMPUTE_BOUND:
        busy = f" and the GPU is busy {round(gpu)}%" if gpu is not None else ""
        return (f"compute-bound: {_pct(1 - wait)}% of each step is spent in the loop body{busy}; to go "
                f"faster make the step cheaper (mixed precision, a larger batch per device, a faster "
                f"device or more of them)")
    return ""


#: per-rank figures a multi-process trial's profile keeps under "ranks"
_RANK_KEYS = ("steps", "samples", "samples_per_s", "steps_per_s", "data_wait_fraction", "step_p50", "step_p95",
              "wall", "rss_peak", "cpu_mean", "gpu_util_mean", "gpu_mem_peak")
_SYSTEM_KEYS = ("system_samples", "rss_peak", "cpu_mean", "cpu_peak", "gpu_util_mean", "gpu_mem_peak",
                "mem_total", "ncpu")


def merge_rank_profiles(ranks: Sequence[Mapping[str, Any] | None],
                        system: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One profile for a multi-process trial from its ranks' profiles (`ranks[r]`: rank r's, None when it sent
    none), which ran side by side in lockstep (DDP), not one after the other as `merge_summaries` assumes:

    - throughput is the trial's: `samples` and `samples_per_s` are summed over the ranks;
    - pace is the slowest rank's: `steps`, `wall`, `startup` and the step-time percentiles are the largest of
      any rank, `steps_per_s` the smallest (every rank waits for the slowest in each collective);
    - `data_wait_fraction` is the largest of any rank (a rank waiting for its data holds back all of them), so
      the hint names an input-bound rank; `data_wait_s` and `compute_s` are summed (rank-seconds);
    - system figures (CPU %, GPU) are `system`'s, the supervisor's sampler over every rank's process, when it
      took samples; else the ranks' own: CPU summed, GPU figures the largest (ranks may see the same device);
      `rss_peak` is the larger of the sampler's and the sum of the ranks' own peaks (exact per process; their
      sum an upper bound of the trial's, where the sampler's once-a-second look may miss the peak);
    - `world_size` and `ranks`, each rank's own figures (`rank`, steps, rates, data wait, memory...).
    """
    parts = [(r, dict(p)) for r, p in enumerate(ranks) if p]
    out: dict[str, Any] = {"world_size": len(ranks)}
    if not parts:
        out.update(system or {})
        out["ranks"] = []
        out["hint"] = bottleneck_hint(out)
        return out

    def values(key: str) -> list[float]:
        return [float(p[key]) for _, p in parts if p.get(key) is not None]

    def largest(key: str) -> float | None:
        v = values(key)
        return max(v) if v else None

    def summed(key: str) -> float | None:
        v = values(key)
        return sum(v) if v else None

    steps = largest("steps")
    if steps is not None:   # step figures only when a rank tracked steps (as a one-process profile has them)
        samples = summed("samples")
        slowest = values("steps_per_s")
        out.update({
            "steps": int(steps),
            "samples": int(samples) if samples is not None else None,
            "samples_per_s": summed("samples_per_s"),
            "steps_per_s": min(slowest) if slowest else None,
            "data_wait_fraction": largest("data_wait_fraction"),
        })
        for key in ("step_p50", "step_p95", "data_wait_p50", "data_wait_p95", "compute_p50", "compute_p95",
                    "wall", "startup", "measured_steps", "planned_steps"):
            out[key] = largest(key)
        for key in ("measured_steps", "planned_steps"):
            if out[key] is not None:
                out[key] = int(out[key])
        out["data_wait_s"], out["compute_s"] = summed("data_wait_s"), summed("compute_s")
    if system and system.get("system_samples"):
        out.update({k: system.get(k) for k in _SYSTEM_KEYS})
        # a sample a second can miss the ranks' peaks (and a trial's last one comes when they have exited);
        # each rank's own peak is exact (its sampler, or ru_maxrss): their sum bounds the trial's from above
        ranks_rss = summed("rss_peak")
        if ranks_rss and ranks_rss > float(out.get("rss_peak") or 0):
            out["rss_peak"] = int(ranks_rss)
    else:
        rss_v, cpu_v, peak_v = summed("rss_peak"), summed("cpu_mean"), summed("cpu_peak")
        out.update({
            "system_samples": int(largest("system_samples") or 0), "rss_peak": int(rss_v) if rss_v else rss_v,
            "cpu_mean": cpu_v, "cpu_peak": peak_v, "gpu_util_mean": largest("gpu_util_mean"),
            "gpu_mem_peak": largest("gpu_mem_peak"), "mem_total": largest("mem_total"), "ncpu": largest("ncpu"),
        })
        for key in ("mem_total", "ncpu"):
            if out[key] is not None:
                out[key] = int(out[key])
    out["ranks"] = [{"rank": r, **{k: p.get(k) for k in _RANK_KEYS}} for r, p in parts]
    out["hint"] = bottleneck_hint(out)
    return out


def profile_summary(steps: Mapping[str, Any], system: Mapping[str, Any]) -> dict[str, Any]:
    """The per-trial profile: step figures, system aggregates (`SystemSampler.peak()`) and a `hint`."""
    merged: dict[str, Any] = {**steps, **system}
    merged["hint"] = bottleneck_hint(merged)
    return merged
