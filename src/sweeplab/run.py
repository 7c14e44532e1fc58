"""`Run`: the object user code receives. log, checkpoint/restore, track, capture, should_stop.

A Run never talks to the store: it emits events through a sink (the worker's pipe to the driver, a Ray
queue, or a list in tests). Logging is buffered and sent in batches so that `run.log` costs about a
microsecond per point; checkpoints are throttled by a policy so that frequent calls are cheap no-ops.
"""

from __future__ import annotations

import bisect
import operator
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from sweeplab.types import MetricPoint

__all__ = ["Run"]

T = TypeVar("T")
_STEP_MIN, _STEP_MAX = -(2**63), 2**63 - 1   # a step is stored as SQLite's 64-bit INTEGER


def valid_step(step: Any, where: str) -> int:
    """`step` as an int the store can hold: an integer (Python's, numpy's, a bool is refused) or an integral
    float, within 64 bits. Anything else is the trial's mistake, raised here rather than sent to the driver
    (a step of 2**70 stopped the whole sweep as the driver failed to store it)."""
    if isinstance(step, bool):
        raise TypeError(f"{where}: step must be an integer, got {step!r}")
    try:
        value = operator.index(step)
    except TypeError:
        if not (isinstance(step, float) and step.is_integer()):
            raise TypeError(f"{where}: step must be an integer, got {step!r}") from None
        value = int(step)
    if not _STEP_MIN <= value < _STEP_MAX:
        raise ValueError(f"{where}: step {value} is out of range (a step is a 64-bit integer)")
    return value


def checkpoint_step(step: Any, where: str) -> int:
    """`step` of a checkpoint: a valid step (`valid_step`) that is not negative (a count of steps done; a
    negative one was written as `step--000000001`, and the checkpoint policy counted from it)."""
    value = valid_step(step, where)
    if value < 0:
        raise ValueError(f"{where}: step {value} is negative (a checkpoint's step counts the steps done: 0 or more)")
    return value


_point = tuple.__new__   # builds a MetricPoint at about half the cost of its Python-level constructor
Sink = Callable[[str, dict[str, Any]], None]   # (event kind, data): see backends/events.py

_FLUSH_POINTS = 4096      # send a metrics batch at this many buffered points ...
_FLUSH_SECONDS = 0.02     # ... or when the oldest buffered point is this old (schedulers see reports soon)
_DECISION_WAIT = 10.0     # longest wait for the verdict at a decision step (then the trial goes on)
_INF = float("inf")
_SMOKE_REPORTS = 2        # smoke mode: should_stop once this many steps were reported (as the driver counts)


class SmokeDone(BaseException):
    """Raised by `run.log` in smoke mode when a trial asked to stop (`run.should_stop`) goes on reporting new
    steps: a loop over `config.train.epochs` that never reads `should_stop` would otherwise run its full
    length (or past `trial.grace`, and fail) in a smoke run meant to be tiny. A BaseException, so that the
    trial's own `except Exception` does not swallow it; the trial ends as if it had returned (`call_trial`)."""


def passes_decision_step(decide_at: Sequence[int], decided_upto: int, step: int) -> bool:
    """Whether a report at `step` is the first at or past a decision step (sorted `decide_at`) after the
    report that last waited, at `decided_upto`: the scheduler judges a rung on the first report at or past it
    (a trial evaluating every 2 epochs reaches rung step 1 at step 2), so that report waits for the verdict;
    waiting only at the rung steps themselves let such a trial train on to its end after it was pruned. One
    rule for `Run.log` and the simulated backend (`sweeplab.testing.fake`)."""
    i = bisect.bisect_right(decide_at, decided_upto)
    return i < len(decide_at) and decide_at[i] <= step


class DecisionPoints:
    """Which reports of the judged metric wait for the verdict: the first at or past each decision point
    (`passes_decision_step`). The points are steps (ASHA's rungs), or, with `reports`, counts of the metric's
    reports (hyperband's bands, as W&B counts them: band 9 is the 9th report, step 40 for a trial logging
    every 5 steps). Reports are counted as the hyperband scheduler counts them: a NaN or infinite value, or a
    step at or below one already reported, is no new report. One rule for `Run.log` and the simulated backend
    (`sweeplab.testing.fake`)."""

    __slots__ = ("_count", "_top", "at", "reports", "upto")

    def __init__(self, at: Sequence[int], *, reports: bool = False) -> None:
        self.at = sorted({int(s) for s in at})
        self.reports = reports
        self.upto = -1 << 62   # the point (step or report count) the last waiting report was at
        self._count = 0
        self._top: int | None = None

    def passes(self, step: int, value: float) -> bool:
        """Whether the report of `value` at `step` waits for the verdict (call it for every report)."""
        at = step
        if self.reports:
            again = self._top is not None and step <= self._top
            self._top = step if self._top is None else max(self._top, step)
            if again or value != value or value in (_INF, -_INF):
                return False
            self._count += 1
            at = self._count
        if not passes_decision_step(self.at, self.upto, at):
            return False
        self.upto = at
        return True


class Run:
    """Handed to `train(config, run)`. Attribute docs:

    config      the resolved config (attribute access: `run.config.model.hidden`)
    params      the sampled parameters (flat, dotted names)
    trial       the trial number within its sweep; `attempt` counts retries from 1
    seed        derived from the sweep seed and the trial number (None when no seed is set)
    smoke       True in smoke mode: keep everything tiny
    rank        this process's rank (multi-process trials); only rank 0's logs and result count
    world_size  the trial's number of processes (1 but for `resources.workers` > 1)
    original_cwd  the sweep's working directory, absolute: where relative paths resolved before
                `trial.workdir: trial` ran the trial in a directory of its own (`os.path.join(run.original_cwd,
                config.data)`); the same as the trial's working directory otherwise (SWEEPLAB_ORIGINAL_CWD)
    """

    def __init__(
        self,
        *,
        config: Any,
        sink: Sink,
        params: Mapping[str, Any] | None = None,
        sweep: str = "",
        trial: int = 0,
        attempt: int = 1,
        seed: int | None = None,
        smoke: bool = False,
        smoke_steps: int = 3,
        checkpoint_dir: str = "",
        keep_checkpoints: int = 2,
        checkpoint_every: Any = None,
        mtbf: float | None = None,
        captured: Mapping[str, Any] | None = None,
        rank: int = 0,
        world_size: int = 1,
        torch_profiler: Mapping[str, Any] | None = None,
        artifacts_dir: str = "",
        decision_steps: Sequence[int] = (),
        decision_metric: str | None = None,
        decision_reports: bool = False,
        original_cwd: str | None = None,
    ) -> None:
        self.config = config
        # the directory the trial's relative paths resolved in before `trial.workdir: trial` moved it into one
        # of its own (the sweep's working directory); the working directory when the Run was made otherwise
        self.original_cwd = os.path.abspath(original_cwd) if original_cwd else os.getcwd()
        self.params = dict(params or {})
        self.sweep = sweep
        self.trial = trial
        self.attempt = attempt
        self.seed = seed
        self.smoke = smoke
        self.rank = rank
        self.world_size = world_size
        self._sink = sink
        self._smoke_steps = smoke_steps
        self._smoke_reported: set[int] = set()
        self.smoke_ended: int | None = None   # the step at which smoke mode ended the trial (SmokeDone)
        self._buf: list[MetricPoint] = []
        self._buf_t0 = 0.0
        self._auto_step = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stop_reason = ""
        # only rank 0 reports, so only it waits (the others meet it in a collective)
        self._decide_at = DecisionPoints(decision_steps if decision_metric and rank == 0 else (),
                                         reports=decision_reports)
        self._decide_metric = decision_metric or ""   # no points without it (`_decide_at.at` is empty)
        self._decided = threading.Condition()
        self._go_step = -1
        self._ckpt_dir = checkpoint_dir
        self._keep = keep_checkpoints
        self._ckpt_every = checkpoint_every
        self._mtbf = mtbf
        self._ckpt: Any = None
        self._policy: Any = None
        self._trackers: list[Any] = []
        self._tracked_loops = 0
        self._captures: dict[str, Any] = {}
        self._capture_in_step: dict[str, bool] = {}   # registered inside a run.track loop body
        self._nonfinite: dict[str, Any] | None = None  # the captures when a metric was first NaN/inf
        self._captured = dict(captured or {})
        self._torch_profiler = dict(torch_profiler) if torch_profiler else None
        self._artifacts_dir = artifacts_dir
        self.pruned: str | None = None            # why the trial pruned itself (`prune`), else None
        self.suggested: dict[str, Any] = {}       # parameters the trial chose while running (`suggest`)

    @classmethod
    def from_env(cls, config: Mapping[str, Any] | None = None) -> Run:
        """The Run of a program run as a command trial (`command: [python, train.py, ...]`), built from the
        environment sweeplab's runner sets, so that code written for a Run (the framework callbacks:
        `SweeplabCallback(sl.Run.from_env())`) works in a program too. Reports go to the trial's report file,
        checkpoints to its checkpoint directory, and SIGTERM sets `should_stop`. Outside a sweep (plain
        `python train.py`) it is a local Run that reports nowhere and keeps no checkpoint. `config` (e.g.
        `vars(args)`) becomes `run.config`. See docs/integrations.md (command trials)."""
        from sweeplab._program_run import run_from_env

        return run_from_env(config)

    # ------------------------------------------------------------------ metrics
    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record metric values at `step` (default: one more than the previous step).

        At a rung of the sweep's scheduler (ASHA, hyperband), a report of the judged metric waits for the
        verdict before returning: check `should_stop` right after it."""
        if not isinstance(metrics, Mapping):
            raise TypeError(f"run.log: expected a mapping of metric names to numbers, e.g. {{'loss': 0.5}}; got "
                            f"{type(metrics).__name__} {repr(metrics)[:100]}")
        if not all(type(k) is str for k in metrics):   # an int key reached the store as a number, not a name
            for bad_key in (k for k in metrics if not isinstance(k, str)):   # a str subclass is a name too
                raise TypeError(f"run.log: a metric name must be a string, got {type(bad_key).__name__} "
                                f"{repr(bad_key)[:100]}")
        if step is None:
            step = self._auto_step
        if type(step) is not int or not _STEP_MIN <= step < _STEP_MAX:
            step = valid_step(step, "run.log")
        self._auto_step = step + 1
        now = time.time()
        try:
            points = [_point(MetricPoint, (step, key, float(value), now)) for key, value in metrics.items()]
        except (TypeError, ValueError, OverflowError):   # OverflowError: an int too large for a float
            bad = next(((k, v) for k, v in metrics.items() if not _is_number(v)), ("?", metrics))
            raise TypeError(f"run.log: metric {bad[0]!r} must be a number (a float can hold), "
                            f"got {repr(bad[1])[:100]}") from None
        with self._lock:
            buf = self._buf
            if not buf:
                self._buf_t0 = now
            buf.extend(points)
            due = len(buf) >= _FLUSH_POINTS or now - self._buf_t0 >= _FLUSH_SECONDS
        if self._captures and self._nonfinite is None:
            for p in points:
                if p[2] != p[2] or p[2] in (_INF, -_INF):   # NaN or inf: keep what the trial held then
                    self._nonfinite = {"step": step, "metric": p[1], "value": p[2],
                                       "objects": dict(self._captures)}
                    break
        if self.smoke and not self._stop.is_set():
            self._smoke_reported.add(step)
            if len(self._smoke_reported) >= _SMOKE_REPORTS or step >= _SMOKE_REPORTS:
                self.request_stop("smoke: a couple of reports are enough")   # now, not a driver round trip later
        elif self.smoke:
            self._smoke_reported.add(step)
            if len(self._smoke_reported) >= _SMOKE_REPORTS + 2:   # a trial that never reads run.should_stop
                self.flush()
                self.smoke_ended = step
                raise SmokeDone(f"smoke: ended at step {step}: the trial went on reporting after "
                                "run.should_stop was set")
        judged = self._decide_metric
        if self._decide_at.at and judged in metrics and self._decide_at.passes(step, float(metrics[judged])):
            self._await_decision(step)
        elif due:
            self.flush()

    def _await_decision(self, step: int) -> None:
        """At a rung of the scheduler: send the report now and wait until the driver says go on or stop,
        so a pruned trial trains nothing past its rung (at most `_DECISION_WAIT` seconds, a round trip
        through the driver normally: about a millisecond on this machine's local backend)."""
        if self._stop.is_set():
            return
        self.flush(decide=step)
        deadline = time.monotonic() + _DECISION_WAIT
        with self._decided:
            while self._go_step < step and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._decided.wait(left)

    def go(self, step: int) -> None:
        """The driver's verdict at decision step `step`: continue (called by the worker)."""
        with self._decided:
            self._go_step = max(self._go_step, int(step))
            self._decided.notify_all()

    def has_stale(self, max_age: float = 1.0) -> bool:
        """Whether points have been buffered for longer than `max_age` s (a cheap look, no lock)."""
        return bool(self._buf) and time.time() - self._buf_t0 >= max_age

    def flush_if_stale(self, max_age: float = 1.0) -> None:
        """Send points buffered for longer than `max_age` s (the worker's heartbeat calls it, so a trial
        that logs and then computes for a long time does not hold its last points back)."""
        if self._buf and time.time() - self._buf_t0 >= max_age:
            self.flush()

    def flush(self, decide: int | None = None) -> None:
        """Send buffered metrics now (called automatically; also at the end of the trial). `decide`: this
        batch ends with a report at that decision step, and the trial waits for the verdict."""
        with self._lock:   # sent under the lock: batches from two threads (heartbeat, trial) keep their order
            if not self._buf and decide is None:
                return
            # with `decide` and nothing buffered, the marker goes alone: the heartbeat's flush took the rung's
            # report first (the driver judged it then), and the trial waits for the verdict all the same
            points, self._buf = self._buf, []
            if self.rank == 0:
                self._sink("metrics", {"points": points} if decide is None else {"points": points, "decide": decide})

    # ------------------------------------------------------------------ stopping
    @property
    def should_stop(self) -> bool:
        """True once the scheduler, a monitor, the user or a SIGTERM asked this trial to stop."""
        return self._stop.is_set()

    @property
    def stop_reason(self) -> str:
        return self._stop_reason

    def request_stop(self, reason: str = "") -> None:
        """Ask the trial to stop at its next check (used by the worker; safe from signal handlers)."""
        self._stop_reason = self._stop_reason or reason
        self._stop.set()
        if self._decide_at.at:   # a trial waiting at a decision step wakes up to stop (an RLock: a signal
            with self._decided:   # handler interrupting the waiting thread may take it again)
                self._decided.notify_all()

    def prune(self, reason: str = "pruned") -> None:
        """Mark this trial as pruned by its own decision (e.g. an Optuna pruner in a define-by-run
        objective): once it returns, the trial ends PRUNED instead of COMPLETED."""
        self.pruned = reason or "pruned"
        self.request_stop(self.pruned)

    def suggest(self, params: Mapping[str, Any]) -> None:
        """Record parameters the trial chose while running (define-by-run search): the driver stores them
        as the trial's parameters when it ends."""
        self.suggested.update(params)

    # ------------------------------------------------------------------ checkpoints
    def _manager(self) -> Any:
        if self._ckpt is None:
            from sweeplab.checkpoint import CheckpointManager, CheckpointPolicy

            if not self._ckpt_dir:
                raise RuntimeError("this run has no checkpoint directory")
            self._ckpt = CheckpointManager(self._ckpt_dir, keep=self._keep, attempt=self.attempt)
            self._policy = CheckpointPolicy(self._ckpt_every, mtbf=self._mtbf)
        return self._ckpt

    def checkpoint(self, obj: Any, step: int | None = None, *, force: bool = False) -> bool:
        """Save `obj` (a dict, bytes, a torch state_dict, a directory path...) atomically.

        Returns True when it was written; False when the `trial.checkpoint_every` policy skipped it.
        A stop request (preemption, pruning) always lets the next checkpoint through.
        """
        if step is not None and (type(step) is not int or not 0 <= step < _STEP_MAX):
            step = checkpoint_step(step, "run.checkpoint")
        manager = self._manager()
        if not (force or self.should_stop or self._policy.due(step)):
            return False
        if self.rank != 0:
            return False
        self.flush()   # metrics logged before a checkpoint must reach the store before it can be resumed from
        info = manager.save(obj, step=step)
        self._policy.record(step, info.seconds)
        self._sink(
            "checkpoint",
            {"step": info.step, "path": info.path, "checksum": info.checksum, "bytes": info.bytes,
             "seconds": info.seconds, "format": info.format, "removed": list(info.removed)},
        )
        return True

    def checkpoint_due(self, step: int | None = None) -> bool:
        """Whether a checkpoint at `step` would be written now (the `trial.checkpoint_every` policy, or a stop
        request). For code whose checkpoint is costly to build (a framework writing its own files): check
        first, build only when due, then call `checkpoint(obj, step, force=True)`. Counts as one call."""
        self._manager()
        return self.rank == 0 and (self.should_stop or self._policy.due(step))

    def restore(self) -> Any:
        """The latest valid checkpoint of this trial (across its attempts), or None."""
        manager = self._manager()
        # the ranks of a multi-process trial restore the same checkpoint: the latest of the earlier attempts,
        # never one rank 0 has written in this attempt already (a rank that starts late would resume after it)
        found = manager.latest(before_attempt=self.attempt) if self.world_size > 1 else manager.latest()
        for path, reason in getattr(manager, "corrupt", ()):
            self._sink("note", {"level": "warning", "kind": "checkpoint_corrupt",
                                        "message": f"checkpoint {path} skipped: {reason}", "path": path})
        if found is None:
            return None
        info, obj = found
        if isinstance(info.step, int) and not isinstance(info.step, bool):
            # `log` without a step goes on after the restored step, not from 0 again over the history the
            # earlier attempts logged (the latest attempt's value wins at a step)
            self._auto_step = max(self._auto_step, info.step + 1)
        self._sink("note", {"level": "info", "kind": "restored",
                                    "message": f"restored checkpoint of step {info.step}", "step": info.step})
        return obj

    # ------------------------------------------------------------------ profiling
    def track(self, iterable: Iterable[T], *, batch_size: int | None = None) -> Iterator[T]:
        """Iterate `iterable`, timing data-wait vs compute per step; in smoke mode stop after a few steps."""
        from sweeplab.profiling import StepTracker

        if not self._trackers:   # one tracker for the whole trial: exact percentiles across epochs
            self._trackers.append(StepTracker(max_steps=self._smoke_steps if self.smoke else None))
        self._tracked_loops += 1
        steps = self._trackers[0].track(iterable, batch_size=batch_size)
        if self._torch_profiler and self._tracked_loops == 1 and self.rank == 0:
            return self._profiled(steps)
        return steps

    def _profiled(self, steps: Iterator[T]) -> Iterator[T]:
        """Capture a torch.profiler trace of steps [start, start+steps) into the trial's artifacts."""
        from pathlib import Path

        opts = self._torch_profiler or {}
        start, count = int(opts.get("start", 10)), int(opts.get("steps", 5))
        prof: Any = None
        for i, item in enumerate(steps):
            if i == start:
                import torch.profiler as tp

                prof = tp.profile(activities=[tp.ProfilerActivity.CPU]
                                  + ([tp.ProfilerActivity.CUDA] if _cuda_available() else []))
                prof.__enter__()
            yield item
            if prof is not None and i == start + count - 1:
                prof.__exit__(None, None, None)
                out = Path(self._artifacts_dir or ".") / f"torch-trace-attempt{self.attempt}.json"
                self._export_trace(prof, out)
                prof = None
        if prof is not None:
            prof.__exit__(None, None, None)

    def _export_trace(self, prof: Any, out: Any) -> None:
        """Write the trace and list it as an artifact; a trace that cannot be written (a full disk: torch only
        logs that) is a warning, never the trial's failure, and no artifact is listed for it."""
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(out))
            written = out.is_file() and out.stat().st_size > 0
            why = "torch could not write it (is the disk full?)"
        except OSError as exc:
            written, why = False, exc.strerror or str(exc)
        if written:
            self._sink("artifact", {"name": "torch_trace", "path": str(out)})
        else:
            self._sink("note", {"level": "warning", "kind": "warning",
                                "message": f"torch profiler trace {out} not written: {why}"})

    def profile_summary(self) -> dict[str, Any] | None:
        if not self._trackers:
            return None
        return dict(self._trackers[0].summary())

    # ------------------------------------------------------------------ failure capture
    def capture(self, name: str, obj: Any) -> None:
        """Keep a reference to `obj` (e.g. the current batch); saved only if the trial fails."""
        self._captures[name] = obj
        self._capture_in_step[name] = bool(self._trackers) and self._trackers[0].in_step

    def loading_failure(self, exc: BaseException) -> dict[str, Any] | None:
        """When `exc` came from fetching a batch of a `run.track` loop (the loader, not the loop body):
        {"loop", "batch" (1-based, in that loop), "stale": captures registered in an earlier step's body,
        which hold the batch before the one that failed}; else None."""
        found = self._trackers[0].fetch_error if self._trackers else None
        if found is None:
            return None
        seen: set[int] = set()
        e: BaseException | None = exc
        while e is not None and id(e) not in seen:   # the trial may have wrapped the loader's error
            if e is found[0]:
                return {"loop": self._tracked_loops, "batch": found[1],
                        "stale": sorted(n for n, inside in self._capture_in_step.items() if inside)}
            seen.add(id(e))
            e = e.__cause__ or e.__context__
        return None

    def captured(self, name: str, default: Any = None) -> Any:
        """In `sweeplab repro`: the object the failed trial registered under `name`."""
        return self._captured.get(name, default)

    @property
    def captures(self) -> dict[str, Any]:
        return dict(self._captures)

    @property
    def nonfinite_captures(self) -> dict[str, Any] | None:
        """{"step", "metric", "value", "objects"}: what `capture` held when `log` first got a NaN or infinite value
        (a `nan` monitor stops such a trial without an exception), or None."""
        return self._nonfinite

    def __repr__(self) -> str:
        return f"Run(sweep={self.sweep!r}, trial={self.trial}, attempt={self.attempt})"


def objective_from(result: Any, metric: str | None) -> tuple[dict[str, float], float | None]:
    """Split a trial's return value into final metrics and the objective (None when absent)."""
    metrics: dict[str, float] = {}
    if isinstance(result, Mapping):
        for k, v in result.items():
            try:
                metrics[str(k)] = _final_float(v)
            except (TypeError, ValueError, ArithmeticError):
                continue
    elif _is_scalar(result):   # numpy and torch scalars too (np.float32, a 0-d tensor), as Optuna reads them
        metrics[metric or "value"] = _final_float(result)
    value = metrics.get(metric) if metric else None
    return metrics, value


def unusable_returns(result: Any) -> dict[str, str]:
    """What of a trial's return value is no metric, shown for messages: the keys of a mapping whose values are
    not numbers (`{"loss": "abc"}`), or "" for a return that is neither a number nor a mapping (a string, a
    list). None returns nothing; so does a number. Dropped from the metrics, they were reported as "never
    reported" without saying what the trial had returned instead."""
    if result is None:
        return {}
    if isinstance(result, Mapping):
        return {str(k): _shown(v) for k, v in result.items() if not _is_number(v)}
    return {} if _is_scalar(result) else {"": _shown(result)}


def _is_scalar(v: Any) -> bool:
    """A number a trial may return as its objective: not a bool, not text (`"0.5"` is likely a path or a
    label returned by mistake), and convertible by float()."""
    return not isinstance(v, (bool, str, bytes)) and _is_number(v)


def _shown(v: Any) -> str:
    text = repr(v)
    return f"{text[:80]}... ({type(v).__name__})" if len(text) > 80 else f"{text} ({type(v).__name__})"


def _final_float(v: Any) -> float:
    """A final metric as a float; a number too large for one (an int of 400 digits) is infinite, as a
    Decimal('1e400') is, rather than an OverflowError from sweeplab's code failing the trial."""
    try:
        return float(v)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def _is_number(v: Any) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError, OverflowError):
        return False


def _cuda_available() -> bool:
    import sys

    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())
