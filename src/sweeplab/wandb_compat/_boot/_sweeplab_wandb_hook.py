"""Mirror what a W&B program logs into its sweeplab trial, with the real `wandb` client left in charge.

`install()` waits (a meta-path finder) until the program imports `wandb.sdk.wandb_run`, then wraps
  - `Run.log`: each committed history row becomes one report line `{"@step": _step, metric: value, ...}`,
    rows built with W&B's partial-history rules (`commit=False` adds to the row; `step=` greater than the
    current step commits the row and moves to it; a smaller step is dropped, as W&B drops it with a
    warning); values logged with `step=` are reported as they are logged (the row's other values join it
    later), so a run is judged at its rung when it logs it, not at its next log. Sources:
    wandb/sdk/wandb_run.py (`Run._log`) and the history handler of the client's internal process
    (wandb/sdk/internal/handler.py, `handle_request_partial_history`).
  - `Run._finish` (every way a run ends) and the end of the process: the run's summary as W&B has it
    (`run.summary`, with `define_metric` summaries such as `{"acc": {"max": 0.9}}`) becomes the trial's
    final metrics, and a `finish(exit_code=N)` its exit code; once finished, the summary it ended with too
    (scalars synced from TensorBoard reach it only then: `_final_summary`);
  - `wandb.init`: a run is never online (mode `offline`), whatever the program asks, but a run the program
    disables (another DDP rank's) stays disabled and is not the trial's, as under W&B's agent; in a function trial
    the trial's W&B environment (handed over by `begin_trial`) is set and its parameters file
    (WANDB_SWEEP_PARAM_PATH) written here, only when a run starts: a trial that never starts a run pays
    nothing for W&B (a file per trial costs more than the rest of a no-op trial);
  - `wandb.sweep`, `wandb.login`: inside a trial they do nothing (sweeplab is the controller); nor does
    `wandb.agent` as a function trial's module is imported, but elsewhere in a trial its first call runs
    the function it is given once (the trial is that run) and ends the trial there.
Values that are not numbers (images, tables, strings) stay in wandb's own offline files only.

A command trial's run is held at the scheduler's decision steps (an ASHA rung, a hyperband band) as a program
using `sl.Run.from_env()` is: a `wandb.log` whose row is the first at or past one (its `_step`, as mirrored)
writes the report and an `{"@decide": step}` line, then waits for the verdict file the runner writes (see
`_Hold`), so that a pruned run trains nothing past its rung (W&B's own agent lets it train on until its
controller's next look) and ASHA judges every trial at the same point.

Where the values go: the runner names a JSON-lines file in SWEEPLAB_REPORT_FILE (command trials); a worker
running a function trial passes `sink` and `final` callables instead. Standard library only.
"""

import atexit
import bisect
import fnmatch
import importlib.abc
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

_SUMMARY_KEY = "@summary"
_EXIT_KEY = "@exit_code"
_PREEMPTING_KEY = "@preempting"   # a report-file line {"@preempting": true}: the run's `mark_preempting()`
_lock = threading.Lock()
_sink: "Callable[[dict[str, float], int], None] | None" = None
_final: "Callable[[dict[str, Any]], None] | None" = None
_stopped: "Callable[[], bool] | None" = None
_patched = False
_original_log: "Callable[..., Any] | None" = None
# a function trial's W&B environment and parameters, handed over by `begin_trial` and set into os.environ at
# its first wandb.init (or before it forks); `_restore` holds what os.environ had before, for `end_trial`
_pending: "dict[str, str] | None" = None
_args: "Mapping[str, Any] | None" = None
_restore: "dict[str, str | None] | None" = None
# this process runs function trials (a sweeplab worker: `begin_trial`), where `wandb.agent` called as the trial's
# module is imported does nothing; in a command trial's program, or in a function trial's call, the first
# `wandb.agent(function=...)` runs its function (`_agent_ran`: once per trial)
_function_worker = False
_agent_ran = False
# the function trial's function reports through its sweeplab Run (`train(config, run)`): the W&B runs it starts
# are its own logging (`own_runs`), as `wandb.init` in a script is, and are not mirrored into the trial
_own_runs = False


class TrialStopped(BaseException):
    """Raised from `wandb.log` in a function trial the sweep has stopped (ASHA, hyperband): W&B's agent ends
    such a run by raising in its thread (wandb/agents/pyagent.py, `_terminate_thread`); this ends it at the
    report that decided it. A BaseException, so that the program's `except Exception` does not catch it."""


def _number(value: Any) -> "float | None":
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    item = getattr(value, "item", None)   # numpy scalars, tensors and arrays of one element
    if callable(item) and type(value).__module__.split(".")[0] in ("numpy", "torch", "jax", "jaxlib", "tensorflow"):
        numel = getattr(value, "numel", None)   # W&B logs the one element of `tensor([0.5])`, `array([[0.5]])`
        count = numel() if callable(numel) else getattr(value, "size", 1)   # (wandb.util.json_friendly)
        if getattr(value, "ndim", 0) != 0 and count != 1:
            return None
        try:
            out = item()
        except Exception:
            return None
        return float(out) if isinstance(out, (int, float)) and not isinstance(out, bool) else None
    return None


def _media(value: Any) -> bool:
    """A W&B media object as a run's summary holds it (`{"_type": "table-file", "nrows": 4, ...}`): a table
    or an image to W&B, not numbers such as `report.nrows`."""
    return isinstance(value, Mapping) and "_type" in value


def _flatten(data: "Mapping[str, Any]", prefix: str = "") -> "dict[str, float]":
    """Numbers of a logged dict, nested dicts as dotted names (W&B shows `{"a": {"b": 1}}` as `a.b`)."""
    out: dict[str, float] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if _media(value):
            continue
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}."))
            continue
        number = _number(value)
        if number is not None:
            out[name] = number
    return out


def _write_line(*objs: "dict[str, Any]") -> None:
    """Append `objs` to the report file as JSON lines, in one write."""
    path = os.environ.get("SWEEPLAB_REPORT_FILE")
    if not path or not _rank_zero():   # another rank's enabled run: only rank 0's reports count
        return
    line = "".join(json.dumps(obj, separators=(",", ":"), default=str) + "\n" for obj in objs).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _rank_zero() -> bool:
    """sweeplab.reporting's rule (this module cannot import sweeplab): `RANK` where it is set, else
    `LOCAL_RANK` and `NODE_RANK` (Lightning's own launcher); no rank at all is rank 0."""
    rank = (os.environ.get("RANK") or "").strip()
    if rank:
        return rank == "0"
    return all((os.environ.get(k) or "0").strip() == "0" for k in ("LOCAL_RANK", "NODE_RANK"))


def _emit(metrics: "dict[str, float]", step: int) -> bool:
    """Send a committed row to the trial; True when it is at a decision step, where the run now waits for the
    verdict (its `@decide` line written after it: see `_Hold`)."""
    if _sink is not None:
        _sink(metrics, step)
        return False
    row: dict[str, Any] = {k: (v if math.isfinite(v) else str(v)) for k, v in metrics.items()}
    row["@step"] = step   # not "step": programs log a metric of that name (`{"step": global_step}`)
    hold = _hold() if _rank_zero() else None   # (a rank set after a fork: only rank 0's run reports and waits)
    if hold is None or hold.metric not in metrics or not hold.passes(step, metrics[hold.metric]):
        _write_line(row)
        return False
    _write_line(row, {"@decide": step})
    return True


# sweeplab.run's `_DECISION_WAIT` and _program_run's polling pace (this module cannot import sweeplab)
_DECISION_WAIT = 10.0   # longest wait for the verdict at a decision step (then the run goes on)
_POLL_FIRST, _POLL_MAX = 0.002, 0.05   # the first look at the verdict file, then ever slower ones up to this
_ALIVE_EVERY = 0.5      # how often a waiting run checks that its runner's worker is still there
_holds: "dict[str, Any]" = {}   # the process's _Hold (or None), read from its environment once


class _Hold:
    """The decision steps of a command trial (SWEEPLAB_DECISION_*, from the runner's `decision_env` in
    backends/command_trial.py) and the wait for their verdicts. The rule which row waits is
    sweeplab.run's `DecisionPoints` (the first report of the metric at or past each point; with `reports`,
    hyperband's, the points count the metric's finite reports at new steps), and the wait is
    sweeplab._program_run's `ProgramRun._await_decision`: poll the verdict file (`{"go": step, "stop":
    reason}`) until it says go on from this step or stop, for at most the bound, and no longer once the
    worker is gone or a SIGTERM came. Both are copied here, small, because this module must run without
    sweeplab (a program's own Python may not have it): keep them in step with those."""

    def __init__(self, env: "Mapping[str, str]") -> None:
        self.path = env.get("SWEEPLAB_DECISION_FILE") or ""
        self.metric = env.get("SWEEPLAB_DECISION_METRIC") or ""
        steps = set()
        for part in (env.get("SWEEPLAB_DECISION_STEPS") or "").split(","):
            try:
                steps.add(int(part))
            except ValueError:
                pass
        self.at = sorted(steps)
        self.reports = env.get("SWEEPLAB_DECISION_REPORTS") == "1"
        try:
            self.wait_for = float(env.get("SWEEPLAB_DECISION_WAIT") or _DECISION_WAIT)
        except ValueError:
            self.wait_for = _DECISION_WAIT
        try:
            self.worker = int(env.get("SWEEPLAB_WORKER_PID") or 0)
        except ValueError:
            self.worker = 0
        self.upto = -1 << 62   # the point (step or report count) the last waiting report was at
        self.count = 0
        self.top: int | None = None

    def passes(self, step: int, value: float) -> bool:
        """Whether the report of `value` at `step` waits for the verdict (called for every report of it)."""
        at = step
        if self.reports:
            again = self.top is not None and step <= self.top
            self.top = step if self.top is None else max(self.top, step)
            if again or not math.isfinite(value):
                return False
            self.count += 1
            at = self.count
        i = bisect.bisect_right(self.at, self.upto)
        if i < len(self.at) and self.at[i] <= at:
            self.upto = at
            return True
        return False

    def wait(self, step: int) -> None:
        """Wait for the verdict at `step`. In the main thread a SIGTERM that comes meanwhile ends the wait and
        is then delivered again, to what the program had for it (by default: the end of the program, as
        without the wait); from another thread the verdict, the worker or the bound ends it."""
        got: list[int] = []
        before: Any = None
        if threading.current_thread() is threading.main_thread():
            try:
                before = signal.getsignal(signal.SIGTERM)
                if before is not None and before != signal.SIG_IGN:   # (None: not set from Python: left alone)
                    signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
                else:
                    before = None
            except (ValueError, OSError):
                before = None
        try:
            self._poll(step, got)
        finally:
            if before is not None:
                signal.signal(signal.SIGTERM, before)
                if got:
                    os.kill(os.getpid(), signal.SIGTERM)

    def _poll(self, step: int, got: "list[int]") -> None:
        start = time.monotonic()
        deadline, alive_at, pause = start + self.wait_for, start + _ALIVE_EVERY, _POLL_FIRST
        while not got:
            verdict = _read_verdict(self.path)
            go = verdict.get("go")
            if verdict.get("stop") or (isinstance(go, int) and go >= step):
                return   # a stop sets nothing W&B knows of: the runner's SIGTERM follows, as under W&B's agent
            now = time.monotonic()
            if now >= deadline:
                return
            if now >= alive_at:
                if not _alive(self.worker):
                    return
                alive_at = now + _ALIVE_EVERY
            time.sleep(min(pause, deadline - now))
            pause = min(pause * 2, _POLL_MAX)


def _hold() -> "_Hold | None":
    """This process's `_Hold`: only in a command trial whose runner passed decision steps (a scheduler); else
    None, and nothing waits."""
    if "hold" not in _holds:
        env = os.environ
        hold = _Hold(env) if env.get("SWEEPLAB_REPORT_FILE") else None
        _holds["hold"] = hold if hold is not None and hold.path and hold.metric and hold.at else None
    return _holds["hold"]   # type: ignore[no-any-return]


def _read_verdict(path: str) -> "dict[str, Any]":
    try:
        with open(path) as fh:
            verdict = json.loads(fh.read())
    except (OSError, ValueError):
        return {}
    return verdict if isinstance(verdict, dict) else {}


def _alive(pid: int) -> bool:
    """Whether process `pid` is there (unknown, 0: assumed so, and the bound alone ends the wait)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:   # there, but another user's (a reused pid): the bound ends the wait
        return True
    return True


class _History:
    """One run's history rows, committed as W&B commits them; and, in a command trial, the summaries the
    program asked for with `define_metric(name, summary="min")`, kept as the rows come (see `define`)."""

    def __init__(self) -> None:
        self.step = 0
        self.row: dict[str, float] = {}
        self.sent: dict[str, float] = {}   # values of the open row already reported (logged with `step=`)
        self.open = False
        self.decide: int | None = None   # a row committed at a decision step: `log` waits for its verdict
        self.specs: dict[str, tuple[str, ...]] = {}       # define_metric name (or glob) -> aggregates
        self.aggregates: dict[str, dict[str, float]] = {}  # metric -> {"min": ..., "count": ...}

    def define(self, name: str, summary: str, goal: Any = None) -> None:
        """`define_metric(name, summary=...)`: W&B's server keeps that summary as the rows come, so a run its
        agent stops keeps it. A command trial the sweep stops is terminated before `wandb.finish()`, when
        the hook would read it: the hook keeps it too and hands it over as it changes (an `@summary` line).
        Older wandb's `summary="best"` is the min or max by `goal`. A second call for the same name adds its
        aggregates to the first's, as wandb merges them (`summary="min"`, then `"max"`: the summary holds both)."""
        wanted = [a.strip().lower() for a in summary.split(",")]   # as wandb reads them ("Min" is "min")
        if "best" in wanted:
            wanted[wanted.index("best")] = "best-max" if str(goal or "").startswith("max") else "best-min"
        known = [a for a in wanted if a in ("min", "max", "mean", "first", "last", "best-min", "best-max")]
        self.specs[name] = tuple(dict.fromkeys([*self.specs.get(name, ()), *known]))

    def _summarize(self, row: "Mapping[str, float]") -> "dict[str, float]":
        out: dict[str, float] = {}
        for key, value in row.items():
            spec = self.specs.get(key)
            if spec is None:
                spec = next((v for k, v in self.specs.items() if "*" in k and fnmatch.fnmatchcase(key, k)), ())
            if not spec or not math.isfinite(value):
                continue
            agg = self.aggregates.setdefault(key, {"count": 0.0, "sum": 0.0})
            agg["count"] += 1
            agg["sum"] += value
            values = {"min": min(agg.get("min", value), value), "max": max(agg.get("max", value), value),
                      "mean": agg["sum"] / agg["count"], "first": agg.get("first", value), "last": value}
            values["best-min"], values["best-max"] = values["min"], values["max"]
            agg.update(values)
            names = {a: "best" if a.startswith("best") else a for a in spec}
            for a, name in names.items():
                out[f"{key}.{name}"] = values[a]
            if len(spec) == 1:
                out[key] = values[spec[0]]
        return out

    def log(self, data: "Mapping[str, Any]", step: "int | None", commit: "bool | None") -> None:
        if step is not None:
            step = int(step)
            if step < self.step:   # W&B: "Tried to log to step N that is less than the current step"
                return
            if step > self.step:
                self.commit()
                self.step = step
        values = _flatten(data)
        self.row.update(values)
        self.open = True
        if (step is None and commit is None) or commit:
            self.commit()
        elif step is not None:
            self._send(values)

    def _send(self, values: "Mapping[str, float]") -> None:
        """Report `values` of the open row now. A row logged with `step=N` is committed by W&B only at the
        next log at a later step (or `commit=True`, or the end of the run), so a run reporting its rung with
        `wandb.log({...}, step=epoch)` was judged, and held, only at the next epoch's first log, one epoch
        trained past its rung. The values at step N are final as logged (W&B's row holds the last value of
        each key): report them at once; `commit` reports only what changed since."""
        new = {k: v for k, v in values.items() if k not in self.sent or not _same(self.sent[k], v)}
        self.sent.update(new)
        self._report(new)

    def commit(self) -> None:
        if not self.open:
            return
        row, sent, self.row, self.sent, self.open = self.row, self.sent, {}, {}, False
        self._report({k: v for k, v in row.items() if k not in sent or not _same(sent[k], v)})
        self.step += 1

    def _report(self, row: "dict[str, float]") -> None:
        """Values of the row at `self.step` not reported yet: to the trial, and to the summaries kept."""
        if not row:
            return
        if _emit(row, self.step):
            self.decide = self.step
        if (self.specs or _summary_keys) and _final is None:   # a command trial's (or a process of a
            summary = self._summarize(row) if self.specs else {}   # function trial's)
            # a key the program set in the summary itself (`_summary_set`) is the last value logged again
            summary.update({k: v for k, v in row.items() if k in _summary_keys and k not in summary
                            and math.isfinite(v)})
            if summary:
                _write_line({_SUMMARY_KEY: summary})


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)   # (NaN is NaN again)


def _history_of(run: Any) -> "_History":
    state = run.__dict__.get("_sweeplab_history")
    if state is None:
        state = run.__dict__["_sweeplab_history"] = _History()
    return state   # type: ignore[no-any-return]


def _summary_of(run: Any) -> "dict[str, Any]":
    try:
        raw = run.summary._as_dict()
    except Exception:
        try:
            raw = dict(run.summary)
        except Exception:
            return {}
    return _summary_from(raw)


def _summary_from(raw: "Mapping[str, Any]") -> "dict[str, Any]":
    """The trial's final metrics of a W&B run's summary (see `_summary_of`)."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if str(key).startswith("_") or _media(value):
            continue
        if isinstance(value, Mapping):
            flat = _flatten(value, f"{key}.")
            out.update(flat)
            aggregates = [k for k in value if k in ("min", "max", "mean", "last", "best", "first")]
            if len(aggregates) == 1 and f"{key}.{aggregates[0]}" in flat:   # define_metric(summary=...)
                out[str(key)] = flat[f"{key}.{aggregates[0]}"]
            continue
        number = _number(value)
        if number is not None:
            out[str(key)] = number
    return out


def in_trial() -> bool:
    """Whether W&B calls made now belong to a trial: its W&B environment is set (a command trial, or a
    function trial since its first wandb.init), or a function trial's is handed over and not yet set."""
    return _pending is not None or "WANDB_SWEEP_PARAM_PATH" in os.environ


def _in_trial(run: Any) -> bool:
    """A run is the trial's when it started with the trial's W&B environment. A process of the program that
    clears the WANDB_ variables first (W&B's cross-validation example does, for per-fold runs) starts runs
    of its own, which W&B would not count in the sweep either."""
    return bool(run.__dict__.setdefault("_sweeplab_trial", in_trial()))


def _mirrored(run: Any) -> bool:
    """Whether what `run` logs is the trial's: a trial's run, unless the function reports through its
    sweeplab Run and this run is its own logging (see `own_runs`)."""
    return _in_trial(run) and not run.__dict__.get("_sweeplab_own")


def _finish_run(run: Any, exit_code: "int | None" = None) -> None:
    """Send the run's last row and its summary once (from finish() or at the end of the process)."""
    if run.__dict__.get("_sweeplab_done") or not _mirrored(run):
        return
    run.__dict__["_sweeplab_done"] = True
    state = run.__dict__.get("_sweeplab_history")
    if state is not None:
        with _lock:
            pending = state.open
            state.commit()
        if pending and _original_log is not None:   # wandb commits the open row at finish: do it now,
            try:                                     # so that the summary read next includes it
                _original_log(run, {}, commit=True)
            except Exception:
                pass
    summary = _summary_of(run)
    for key, value in list(summary.items()):
        if isinstance(value, float) and not math.isfinite(value):
            summary[key] = str(value)
    if exit_code:
        summary[_EXIT_KEY] = int(exit_code)
    if _final is not None:
        _final(summary)
    else:
        _write_line({_SUMMARY_KEY: summary})


def _at_exit(run: Any) -> None:
    """The process ends with `run` unfinished: its last row and summary go to the trial (`_finish_run`). A run
    that syncs TensorBoard (`sync_tensorboard=True`) is finished here as wandb's own exit hook would finish
    it, with the exit code wandb recorded (`sys.exit(N)`, 1 for an uncaught exception): the scalars it
    reads from TensorBoard's files reach its summary only as it finishes, which `_final_summary` reads."""
    wandb = sys.modules.get("wandb")
    patched = getattr(wandb, "patched", None)
    synced = isinstance(patched, Mapping) and bool(patched.get("tensorboard"))
    finish = getattr(run, "finish", None)
    if synced and callable(finish) and not getattr(run, "_is_finished", True) and _mirrored(run):
        hooks = getattr(run, "_hooks", None)
        code = getattr(hooks, "exit_code", 0)
        try:
            finish(exit_code=code if isinstance(code, int) else 1)
            return
        except Exception:
            pass
    _finish_run(run)


def _final_summary(run: Any) -> None:
    """The summary the finished run ended with (`run._final_summary`, which wandb asks its service for once the
    run is finished), for what reached it without `wandb.log`: scalars W&B reads from TensorBoard's event files
    (`wandb.init(sync_tensorboard=True)`, Stable-Baselines3's W&B integration) go into the run's history and
    summary in wandb's service process, and the last of them only as the run finishes, after `_finish_run`
    read the summary. Handed over as one more summary, which the trial merges into the first."""
    if not run.__dict__.get("_sweeplab_done") or run.__dict__.get("_sweeplab_final") or not _mirrored(run):
        return
    run.__dict__["_sweeplab_final"] = True
    items = getattr(getattr(run, "_final_summary", None), "item", None)
    if not items:
        return
    raw: dict[str, Any] = {}
    for item in items:
        key = item.key or ".".join(item.nested_key)
        try:
            raw[key] = json.loads(item.value_json)
        except ValueError:
            continue
    summary = {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v)
               for k, v in _summary_from(raw).items()}
    if not summary:
        return
    if _final is not None:
        _final(summary)
    else:
        _write_line({_SUMMARY_KEY: summary})


_warned: "set[str]" = set()
_summary_keys: "set[str]" = set()   # what a command trial's program set in its run's summary (`_summary_set`)


def _warn_once(what: str, exc: BaseException) -> None:
    """The hook could not do `what` (a feature missing from an old interpreter or wandb client): one warning,
    and the program goes on as wandb has it; the run is read back from its offline files if nothing reached
    the trial."""
    if what not in _warned:
        _warned.add(what)
        sys.stderr.write("sweeplab: W&B hook could not " + what + " (Python " + sys.version.split()[0] + "): "
                         + type(exc).__name__ + ": " + str(exc) + "; the program goes on\n")


def _patch_run_class(module: Any) -> None:
    cls = getattr(module, "Run", None)
    if cls is None or getattr(cls, "_sweeplab_patched", False):
        return
    # every way a run ends (finish(), wandb.finish(), `with wandb.init()`) goes through Run._finish
    # (wandb 0.16 to the newest); log() is the one public way to add to its history
    global _original_log
    finish_name = "_finish" if hasattr(cls, "_finish") else "finish"
    original_log, original_finish = cls.log, getattr(cls, finish_name)
    _original_log = original_log

    def log(self: Any, data: Any, step: Any = None, commit: Any = None, *args: Any, **kwargs: Any) -> Any:
        result = original_log(self, data, step, commit, *args, **kwargs)
        mirrored, decide = False, None
        try:
            mirrored = isinstance(data, Mapping) and _mirrored(self)
            if mirrored:
                state = _history_of(self)
                with _lock:
                    state.log(data, step, commit)
                    decide, state.decide = state.decide, None
        except Exception as exc:   # (an interpreter or wandb lacking what the hook uses): wandb logged it
            _warn_once("mirror wandb.log", exc)
        hold = _hold() if decide is not None else None
        if hold is not None and decide is not None:   # outside the lock (a SIGTERM handler may finish the run
            hold.wait(decide)                          # meanwhile), and what the program's handler raises, raises
        if mirrored and _stopped is not None and _stopped():
            raise TrialStopped("stopped by the sweep's scheduler")
        return result

    def _finish(self: Any, *args: Any, **kwargs: Any) -> Any:
        exit_code = kwargs.get("exit_code", args[0] if args else None)
        try:
            _finish_run(self, exit_code)
        except Exception as exc:
            sys.stderr.write(f"sweeplab: could not read the W&B run's summary: {exc}\n")
        result = original_finish(self, *args, **kwargs)
        try:
            _final_summary(self)
        except Exception as exc:
            sys.stderr.write(f"sweeplab: could not read the W&B run's final summary: {exc}\n")
        return result

    original_define = getattr(cls, "define_metric", None)

    def define_metric(self: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_define(self, name, *args, **kwargs)   # type: ignore[misc]
        summary = kwargs.get("summary", args[3] if len(args) > 3 else None)
        try:
            if isinstance(name, str) and isinstance(summary, str) and _mirrored(self):
                with _lock:
                    _history_of(self).define(name, summary, kwargs.get("goal"))
        except Exception as exc:
            _warn_once("follow define_metric", exc)
        return result

    original_summary = getattr(cls, "_summary_update_callback", None)

    def _summary_update_callback(self: Any, record: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_summary(self, record, *args, **kwargs)   # type: ignore[misc]
        try:
            if _final is None and _mirrored(self):
                _summary_set(record)
        except Exception as exc:
            _warn_once("follow run.summary", exc)
        return result

    original_preempting = getattr(cls, "mark_preempting", None)

    def mark_preempting(self: Any, *args: Any, **kwargs: Any) -> Any:
        """W&B requeues a sweep run marked preempting that then exits with a non-zero code (its "Signal handling
        and sweep runs" contract); the runner makes such a command trial `preempted` (requeued), not failed,
        and a function trial whose function then raises (the mark goes into its `final`)."""
        result = original_preempting(self, *args, **kwargs)   # type: ignore[misc]
        try:
            if _mirrored(self) and _final is not None:
                _final({_PREEMPTING_KEY: True})
            elif _mirrored(self):
                _write_line({_PREEMPTING_KEY: True})
        except Exception as exc:
            _warn_once("follow mark_preempting", exc)
        return result

    patches = [("log", log, original_log), (finish_name, _finish, original_finish)]
    if original_preempting is not None:
        patches.append(("mark_preempting", mark_preempting, original_preempting))
    if original_define is not None:
        patches.append(("define_metric", define_metric, original_define))
    if original_summary is not None:
        patches.append(("_summary_update_callback", _summary_update_callback, original_summary))
    for name, fn, orig in patches:
        fn.__doc__, fn.__name__, fn.__wrapped__ = orig.__doc__, name, orig  # type: ignore[attr-defined]
        setattr(cls, name, fn)
    _patch_property(cls, "sweep_id", lambda run: run.__dict__.get("_sweeplab_sweep_id"))
    _patch_property(cls, "url", _run_url, instead=True)   # wandb's getter would warn, and say None
    cls._sweeplab_patched = True


def _summary_set(record: Any) -> None:
    """What a command trial's program sets in its run's summary itself (`run.summary["best_loss"] = best`,
    `run.summary.update({...})`: wandb's SummaryRecord, keys as paths) goes to the trial as it is set, as W&B's
    server gets each change as it is made: a run the sweep stops (terminated before `wandb.finish()`, when the
    hook reads the whole summary) keeps it, as under W&B."""
    raw: dict[str, Any] = {}
    for item in getattr(record, "update", None) or ():
        keys = [str(k) for k in (item.key if isinstance(item.key, (tuple, list)) else (item.key,))]
        if not keys:
            continue
        target = raw
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = item.value
    summary = {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v)
               for k, v in _summary_from(raw).items()}
    if summary:
        _summary_keys.update(summary)
        _write_line({_SUMMARY_KEY: summary})


def _run_url(run: Any) -> "str | None":
    """Where a trial's offline run is (`file://.../wandb/offline-run-...`): under W&B's agent `run.url` is the
    run's page, and programs use it as a string (`logging.info("Wandb url: " + wandb.run.url)`); an
    offline run has none (wandb warns "URL not available in offline run" and returns None)."""
    if not run.__dict__.get("_sweeplab_trial"):
        return None
    try:
        return Path(run.dir).resolve().parent.as_uri()
    except Exception:
        return None


def _patch_property(cls: Any, name: str, fallback: "Callable[[Any], Any]", instead: bool = False) -> None:
    """`run.<name>` of a trial's run answers as under W&B's agent where the offline run has nothing (None):
    `sweep_id` is the trial's WANDB_SWEEP_ID, although the run's offline files hold none (see
    `offline_init`); `url` is the run's folder (see `_run_url`). `instead`: the trial's run does not ask
    wandb's own getter at all."""
    prop = cls.__dict__.get(name)
    if not isinstance(prop, property) or prop.fget is None:
        return
    fget = prop.fget

    def get(self: Any) -> Any:
        if instead and self.__dict__.get("_sweeplab_trial"):
            return fallback(self)
        value = fget(self)
        return value if value else (fallback(self) or value)

    get.__doc__ = fget.__doc__
    setattr(cls, name, property(get, prop.fset, prop.fdel, prop.__doc__))


# what a YAML double-quoted scalar cannot hold raw (not printable in YAML, or a line break it would fold into a
# space): written as `\\uXXXX`, which YAML reads back as that character
_YAML_ESCAPE = re.compile("[^\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: str) -> str:
    """`value` as a YAML double-quoted scalar: JSON's, but a character beyond U+FFFF raw, not as JSON's
    surrogate pair (`\\ud83d\\ude80`), which YAML reads as two lone surrogates (`values: ["rocket <emoji>"]`
    reached wandb.config as text print() cannot encode)."""
    return _YAML_ESCAPE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))


def _flow(value: Any) -> str:
    """`value` as JSON, which YAML reads as the same value, except floats: Python writes `1e-05` and `1e+16`
    with no dot, which YAML 1.1 (PyYAML, wandb's reader) takes for text, so they are written `1.0e-05` as
    PyYAML writes them; and text beyond U+FFFF (see `_text`). TypeError/ValueError for what JSON cannot say
    (NaN, infinities, other types)."""
    if isinstance(value, str):
        return _text(value)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(value)
        text = float.__repr__(value)
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_text(str(k))}: {_flow(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value).__name__)


def write_params(path: str, args: "Mapping[str, Any]") -> None:
    """Write `args` (W&B's top-level parameter names -> values) as the YAML file W&B's agent writes for
    WANDB_SWEEP_PARAM_PATH: `wandb_version: 1` then `name: {value: v}` per parameter (wandb/sdk/lib/
    config_util.py, save_config_file_from_dict). Each entry is a JSON flow mapping, which YAML reads the
    same (and is ~50x faster to write than yaml.safe_dump), its floats as YAML 1.1 reads floats (see
    `_flow`); values JSON cannot say as YAML reads them (NaN, infinities, other types) are written by
    PyYAML, which wandb itself depends on."""
    try:
        lines = [f"{_text(str(k))}: {{\"value\": {_flow(v)}}}" for k, v in args.items()]
        text = "\n".join(["wandb_version: 1", *lines]) + "\n"
    except (TypeError, ValueError):
        import yaml

        body = {str(k): {"value": v} for k, v in args.items()}
        text = "wandb_version: 1\n\n" + yaml.safe_dump(body, default_flow_style=False, allow_unicode=True,
                                                        sort_keys=False)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _apply_trial_env() -> None:
    """Set a function trial's handed-over W&B environment into os.environ (once per trial)."""
    global _pending
    env, _pending = _pending, None
    if env is not None:
        _set_env(env)


def _set_env(env: "Mapping[str, str]") -> None:
    """Set `env` into os.environ for the trial, remembering what it held before (for `end_trial`)."""
    global _restore
    restore = _restore if _restore is not None else {}
    for k, v in env.items():
        restore.setdefault(k, os.environ.get(k))
        os.environ[k] = v
    _restore = restore


def _params_file() -> None:
    """Before a run starts in a function trial: its W&B environment, and its parameters file."""
    _apply_trial_env()
    path = os.environ.get("WANDB_SWEEP_PARAM_PATH")
    if path and _args is not None and not os.path.exists(path):
        write_params(path, _args)


def new_run_id() -> str:
    """A run id as W&B's agent hands one to each run in WANDB_RUN_ID (wandb.util.generate_id: 8 base-36
    digits); programs read it before wandb.init (`hydra.run.dir=...${oc.env:WANDB_RUN_ID}`)."""
    return "".join("0123456789abcdefghijklmnopqrstuvwxyz"[b % 36] for b in os.urandom(8))


def run_env(sweep: str, number: int) -> "dict[str, str]":
    """What W&B's agent tells a run of its sweep, besides its id and parameters: the sweep's id
    (WANDB_SWEEP_ID: programs read `wandb.run.sweep_id` or the variable to know they run in a sweep, and
    take `wandb.config` only then) and a name (WANDB_NAME: W&B's server names every run, `dainty-sweep-3`;
    programs put `wandb.run.name` in paths, where None fails). sweeplab's are the sweep's name and
    `<sweep>-<trial number>`, with the name's characters other than letters, digits, `-`, `_` and `.` as `_`,
    as the sweep's folders under the store name it (store.layout.safe_name): W&B's ids and names are safe in
    paths, and programs put them there (`f"models/{wandb.run.sweep_id}_{wandb.run.name}.pt"`), where a
    sweep's free-text `name:` (`sweep_EleutherAI/pythia-70m`) named folders that do not exist."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in sweep).strip(".") or "sweep"
    return {"WANDB_SWEEP_ID": safe, "WANDB_NAME": safe + "-" + str(number)}


def begin_trial(param_path: str, args: "Mapping[str, Any]", env: "Mapping[str, str] | None" = None,
                cwd: "str | None" = None) -> None:
    """A function trial starts in this process. Its W&B environment (WANDB_MODE=offline,
    WANDB_SWEEP_PARAM_PATH=`param_path`, a WANDB_RUN_ID of its own, and `env` (see `run_env`), as for a
    command trial) is set at its first wandb.init, or before it forks (so that forked processes inherit it,
    as they would under W&B's agent); `args`, its parameters, are written to `param_path` then. When the
    process has imported wandb, or as soon as it does (the trial's module importing it), both are made at
    once, as W&B's agent makes them before calling the function: programs read WANDB_SWEEP_ID, WANDB_RUN_ID
    or the parameters file first, and `wandb.setup()` (or a `wandb.Image`) before `wandb.init()` reads
    wandb's settings from the environment for good. A trial that never imports wandb pays nothing for it.
    `cwd`: where the function runs, its WANDB_DIR (a trial in its own directory is set up before it moves
    there); by default this process's working directory."""
    global _pending, _args, _function_worker, _agent_ran
    _function_worker, _agent_ran = True, False
    _pending = {"WANDB_MODE": "offline", "WANDB_SWEEP_PARAM_PATH": param_path, "WANDB_RUN_ID": new_run_id(),
                **(env or {}), **_children_env(param_path)}
    if not os.environ.get("WANDB_DIR"):   # as W&B's agent sets it in its own process (agents/pyagent.py)
        _pending["WANDB_DIR"] = os.path.abspath(cwd or os.getcwd())
    _args = args
    if "wandb" in sys.modules:   # a W&B program: its environment and parameters file now, as W&B's agent
        _params_file()           # makes them before it calls the function (programs read them first, and
                                 # wandb.setup() reads the environment for good)


def report_path(param_path: str) -> str:
    """Where the processes a function trial starts report their W&B runs (beside its parameters file)."""
    stem = param_path[:-len(".wandb-params.yaml")] if param_path.endswith(".wandb-params.yaml") else param_path
    return f"{stem}.wandb-report.jsonl"


def _children_env(param_path: str) -> "dict[str, str]":
    """What a function trial's processes need to report their W&B runs, as a command trial's program does: the
    report file (SWEEPLAB_REPORT_FILE), and this hook's folder first on PYTHONPATH for processes started by
    `spawn` or exec (torch.multiprocessing.spawn's DDP ranks); forked ones have the hook already. Under W&B's
    agent, rank 0's run in such a process is the sweep's run: it inherits the agent's W&B environment."""
    boot = os.path.dirname(os.path.abspath(__file__))
    path = os.environ.get("PYTHONPATH", "")
    if boot not in path.split(os.pathsep):
        path = os.pathsep.join(p for p in (boot, path) if p)
    return {"SWEEPLAB_REPORT_FILE": report_path(param_path), "PYTHONPATH": path}


def own_runs() -> None:
    """The function trial's function reports through its sweeplab Run (`train(config, run)`, the callbacks of
    sweeplab.integrations): the W&B runs it starts are its own logging (docs/integrations.md), which keeps
    W&B's files as they are, and are not the trial's reports. Their rows (at W&B's `_step`, not the steps the
    function reports at) are not mirrored into the trial, their summary is not its final metrics, and
    `wandb.log` does not end a function the sweep stops (it sees `run.should_stop` and ends as it chooses).
    Processes it starts get no report file either. The runs still get the trial's W&B environment."""
    global _own_runs, _sink, _final, _stopped
    _own_runs = True
    _sink, _final, _stopped = None, None, None
    if _pending is not None:
        _pending.pop("SWEEPLAB_REPORT_FILE", None)
    elif _restore is not None and "SWEEPLAB_REPORT_FILE" in _restore:   # set already: as it was before
        before = _restore.pop("SWEEPLAB_REPORT_FILE")
        if before is None:
            os.environ.pop("SWEEPLAB_REPORT_FILE", None)
        else:
            os.environ["SWEEPLAB_REPORT_FILE"] = before


def end_trial() -> None:
    """The function trial ended: forget its callables and parameters, and give os.environ back what it held
    before the trial's W&B environment was set."""
    global _sink, _final, _stopped, _pending, _args, _restore, _own_runs
    _sink, _final, _stopped, _pending, _args = None, None, None, None, None
    _own_runs = False
    restore, _restore = _restore, None
    for k, v in (restore or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _forked_child() -> None:
    """In a forked child the trial's environment is what it inherited (set before the fork): the child may
    clear it to start runs of its own, and restoring is the parent's business. The parent's callables
    (`set_sinks`) reach the trial from the parent only: the child's runs write to the report file instead."""
    global _pending, _restore, _sink, _final, _stopped
    _pending, _restore = None, None
    _sink, _final, _stopped = None, None, None
    _holds.clear()   # its runs' decision steps are counted from its own reports (read again from its environment)


def _patch_init(wandb: Any) -> None:
    init = getattr(wandb, "init", None)
    if init is None or getattr(init, "_sweeplab_patched", False):
        return

    def offline_init(*args: Any, **kwargs: Any) -> Any:
        trial = in_trial()
        if trial:
            _params_file()   # a function trial's W&B environment first: its WANDB_MODE is the trial's
        if _disabled(kwargs):   # not the trial's run (another DDP rank's), as under W&B's agent
            if trial:
                sys.stderr.write("sweeplab: this W&B run is disabled (mode \"disabled\"): as under W&B's agent, "
                                 "what it logs does not reach the trial\n")
            trial = False
        else:
            kwargs["mode"] = "offline"   # nothing is sent anywhere, whatever the program asks
        sweep_id = None
        if trial:
            _ignore_run_id(kwargs)
            # the run's files get no sweep id: `wandb sync` of a run whose sweep W&B's server does not know
            # fails ("sweep ... not found", wandb/wandb#8115); the program sees it (Run.sweep_id, patched)
            sweep_id = os.environ.pop("WANDB_SWEEP_ID", None)
            _forget_sweep_id(sweep_id)
        try:
            run = init(*args, **kwargs)
        finally:
            if sweep_id is not None:
                os.environ["WANDB_SWEEP_ID"] = sweep_id
        if run is not None and hasattr(run, "__dict__"):
            run.__dict__["_sweeplab_trial"] = trial
            run.__dict__["_sweeplab_own"] = trial and _own_runs
            if sweep_id:
                run.__dict__["_sweeplab_sweep_id"] = sweep_id
            atexit.register(_at_exit, run)   # runs before wandb's own exit hook (LIFO)
        return run

    offline_init.__doc__, offline_init.__wrapped__ = init.__doc__, init  # type: ignore[attr-defined]
    offline_init._sweeplab_patched = True  # type: ignore[attr-defined]
    wandb.init = offline_init
    _patch_controller(wandb)
    _patch_config_of(sys.modules.get("wandb.sdk.wandb_helper"))
    _patch_config_defaults(sys.modules.get("wandb.sdk.lib.config_util"))


def _config_defaults_elsewhere() -> "str | None":
    """The sweep's directory's `config-defaults.yaml`, for a trial's run started in another directory (its own,
    `trial.workdir: trial`) that has none. wandb reads that file from the working directory into every run's
    config (`wandb.config.epochs` with no `epochs` in the sweep), and W&B's agent runs the program where the
    file is; a trial moved to its own directory lost its defaults ("object has no attribute 'epochs'")."""
    original = os.environ.get("SWEEPLAB_ORIGINAL_CWD")
    if not original or not in_trial():
        return None
    try:
        if os.path.realpath(os.getcwd()) == os.path.realpath(original):
            return None
    except OSError:
        return None
    path = os.path.join(original, "config-defaults.yaml")
    return path if os.path.isfile(path) else None


def _patch_config_defaults(config_util: Any) -> None:
    read = getattr(config_util, "dict_from_config_file", None)
    if read is None or getattr(read, "_sweeplab_patched", False):
        return

    def dict_from_config_file(filename: Any, *args: Any, **kwargs: Any) -> Any:
        if filename == "config-defaults.yaml" and not os.path.exists(filename):
            try:
                elsewhere = _config_defaults_elsewhere()
            except Exception as exc:
                _warn_once("find config-defaults.yaml", exc)
                elsewhere = None
            if elsewhere:
                filename = elsewhere
        return read(filename, *args, **kwargs)

    dict_from_config_file._sweeplab_patched = True  # type: ignore[attr-defined]
    config_util.dict_from_config_file = dict_from_config_file


def _disabled(kwargs: "Mapping[str, Any]") -> bool:
    """Whether the program asks `wandb.init` for a disabled run, as wandb decides the mode: `mode=`, else the
    `settings=` given (a `wandb.Settings` or a dict), else WANDB_MODE, which the program may have set itself (a
    trial starts with "offline"). DDP scripts give the ranks other than 0 a disabled run so that their
    `wandb.log` calls do nothing (`mode="disabled" if rank > 0`, or `os.environ["WANDB_MODE"] = "disabled"`):
    under W&B's agent such a run reaches no sweep, so here it is not the trial's run (its summary, the rank's
    own last values, used to replace rank 0's)."""
    mode = kwargs.get("mode")
    if mode is None:
        settings = kwargs.get("settings")
        if isinstance(settings, Mapping):
            mode = settings.get("mode")
        elif settings is not None:
            given = getattr(settings, "model_fields_set", None)   # pydantic: the fields the program passed
            if given is None or "mode" in given:
                mode = getattr(settings, "mode", None)
    if mode is None:
        mode = os.environ.get("WANDB_MODE")
    return mode == "disabled"


def _patch_config_of(helper: Any) -> None:
    """`wandb.init(config=config)` and `wandb.config.update(config)` take sweeplab's own config object (a
    read-only Mapping, what a `def train(config)` trial function gets), and any other mapping wandb would
    refuse ("config must be a dict or have a __dict__ attribute", wandb/sdk/wandb_helper.py `_to_dict`, which
    both go through): it is taken as the plain dict it holds. What wandb accepts is left to wandb."""
    to_dict = getattr(helper, "_to_dict", None)
    if to_dict is None or getattr(to_dict, "_sweeplab_patched", False):
        return

    def _to_dict(params: Any) -> Any:
        if isinstance(params, Mapping) and not isinstance(params, dict) and not hasattr(params, "__dict__"):
            plain = getattr(params, "to_dict", None)
            params = plain() if callable(plain) else {k: v for k, v in params.items()}
        return to_dict(params)

    _to_dict._sweeplab_patched = True  # type: ignore[attr-defined]
    helper._to_dict = _to_dict


def _forget_sweep_id(sweep_id: "str | None") -> None:
    """wandb's settings, read from the environment when it set up before this run (`wandb.setup()`,
    `wandb.Image` or `wandb.Api()` before `wandb.init()`), forget the trial's sweep id too (wandb >= 0.19:
    `wandb_setup._singleton.settings`), so that the run's files hold none (see `offline_init`)."""
    singleton = getattr(sys.modules.get("wandb.sdk.wandb_setup"), "_singleton", None)
    settings = getattr(singleton, "settings", None)
    if sweep_id and getattr(settings, "sweep_id", None) == sweep_id:
        try:
            settings.sweep_id = None   # type: ignore[union-attr]
            environ = getattr(singleton, "_settings_environ", None)   # else wandb.init warns that the
            if isinstance(environ, dict):                            # environment changed since its setup
                environ.pop("WANDB_SWEEP_ID", None)
        except Exception:
            pass


def _ignore_run_id(kwargs: "dict[str, Any]") -> None:
    """A sweep's run takes the id its agent gives it (WANDB_RUN_ID): W&B ignores `wandb.init(id=...)` "when
    running a sweep" (wandb_init.py, `clear_run_path_if_sweep_or_launch`), so that a program passing a fixed
    id (`id=args.run_id, resume="allow"`) still starts one run per trial. The offline run here has no sweep
    id for W&B to see (see `offline_init`), so the hook drops it, as W&B does, with W&B's warning."""
    run_id = kwargs.get("id")
    if run_id is not None and run_id != os.environ.get("WANDB_RUN_ID"):
        sys.stderr.write(f"wandb: WARNING Ignoring run_id {run_id!r} when running a sweep.\n")
        del kwargs["id"]


def _patch_controller(wandb: Any) -> None:
    """Inside a trial, sweeplab is the sweep's controller and agent: a script in W&B's
    `wandb.sweep(config)` + `wandb.agent(sweep_id, function=train)` style, imported for its `train`,
    creates no sweep and starts no agent, and `wandb.login()` asks for no key. A program (or a trial's
    function) that hands `wandb.agent` a function while the trial runs gets it called once, and the trial ends
    there: see `agent`."""
    def wrap(name: str, inside: "Callable[..., Any]") -> None:
        original = getattr(wandb, name, None)
        if original is None or getattr(original, "_sweeplab_patched", False):
            return

        def patched(*args: Any, **kwargs: Any) -> Any:
            return inside(*args, **kwargs) if in_trial() else original(*args, **kwargs)

        patched.__doc__, patched.__wrapped__ = original.__doc__, original  # type: ignore[attr-defined]
        patched._sweeplab_patched = True  # type: ignore[attr-defined]
        setattr(wandb, name, patched)

    def sweep(*args: Any, **kwargs: Any) -> str:
        sys.stderr.write("sweeplab: wandb.sweep() creates nothing inside a sweeplab trial\n")
        return os.environ.get("WANDB_SWEEP_ID") or os.environ.get("SWEEPLAB_SWEEP") or "sweeplab"

    def agent(*args: Any, **kwargs: Any) -> None:
        global _agent_ran
        function = kwargs.get("function", args[1] if len(args) > 1 else None)
        if function is None or _agent_ran or (_function_worker and _sink is None):   # (a function trial's
            # module calling it at import, as W&B's quickstart scripts do: sweeplab calls the function itself)
            sys.stderr.write("sweeplab: wandb.agent() returns at once inside a sweeplab trial (sweeplab runs the "
                             "trials)\n")
            return
        # the trial's program (or its function) hands the agent its function (`function=lambda: main(args)`, a
        # closure over what its __main__ parsed, which no --function target can name): the trial is one run of it, as
        # W&B's agent runs one per run (wandb/agents/pyagent.py, _run_job: the function, then finish();
        # finish(exit_code=1) if it raised). The exception fails the trial, with its traceback.
        _agent_ran = True
        sys.stderr.write("sweeplab: wandb.agent() runs its function once: this trial is one run of it\n")
        try:
            function()
        except BaseException:
            _finish_current(wandb, 1)
            raise
        _finish_current(wandb, 0)
        # What the script does after `wandb.agent` returns runs once the whole sweep is over under W&B (asking
        # `wandb.Api()` for the best run, retraining with its config): it is the sweep's end, not a run's, so it
        # does not run in a trial (offline, `wandb.Api()` failed every trial). A command trial's program exits 0;
        # a function trial's function ends as a return would (`sys.exit(0)`).
        sys.stderr.write("sweeplab: the agent's run is over and so is the trial: what follows wandb.agent() in "
                         "the script runs after the whole sweep under W&B, not here (see `sweeplab best`)\n")
        sys.stdout.flush()
        raise SystemExit(0)

    wrap("sweep", sweep)
    wrap("agent", agent)
    wrap("login", lambda *args, **kwargs: True)


def _finish_current(wandb: Any, exit_code: int) -> None:
    """End the run the agent's function left open, as W&B's agent does after each function call."""
    if getattr(wandb, "run", None) is not None:
        try:
            wandb.finish(exit_code=exit_code)
        except Exception:
            pass


def _after_import(name: str, module: Any) -> None:
    if name == "wandb.sdk.wandb_run":
        _patch_run_class(module)
    elif name == "wandb":
        _patch_init(module)
        _params_file()   # a function trial's module imports wandb: its W&B environment now (begin_trial)


class _Finder(importlib.abc.MetaPathFinder):
    """Runs `_after_import` once `wandb` or `wandb.sdk.wandb_run` has been executed."""

    _names = ("wandb", "wandb.sdk.wandb_run")

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self._names:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            try:
                _after_import(fullname, module)
            except Exception as exc:
                sys.stderr.write(f"sweeplab: could not hook {fullname}: {exc}\n")

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def installed() -> bool:
    """Whether `install` ran in this process (its finder stays: later imports of wandb are patched)."""
    return _patched


def install(sink: "Callable[[dict[str, float], int], None] | None" = None,
            final: "Callable[[dict[str, Any]], None] | None" = None,
            stopped: "Callable[[], bool] | None" = None) -> None:
    """Mirror W&B runs of this process into the trial: to `sink(metrics, step)` / `final(summary)` when
    given (function trials), else to the file in SWEEPLAB_REPORT_FILE. `stopped()` true (a function trial
    the sweep stopped): the trial's run's next `log` raises TrialStopped. Safe to call more than once."""
    global _sink, _final, _stopped, _patched
    _sink, _final, _stopped = sink, final, stopped
    for name in _Finder._names:
        if name in sys.modules:
            _after_import(name, sys.modules[name])
    if not _patched:
        sys.meta_path.insert(0, _Finder())
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_apply_trial_env, after_in_child=_forked_child)
        _patched = True


def set_sinks(sink: "Callable[[dict[str, float], int], None] | None",
              final: "Callable[[dict[str, Any]], None] | None", stopped: "Callable[[], bool] | None" = None) -> None:
    """Where the runs of a function trial report (see `install`; the hook is installed already)."""
    global _sink, _final, _stopped
    _sink, _final, _stopped = sink, final, stopped


def uninstall_sinks() -> None:
    """Forget the callables of a finished function trial (later runs write to the report file, if any)."""
    global _sink, _final, _stopped
    _sink, _final, _stopped = None, None, None
