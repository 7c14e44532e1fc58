"""`Run.from_env()`: the `Run` of a command trial's program, built from the environment its runner set.

A function trial is handed its Run; a program run as a command line (`command: [python, train.py, ...]`)
builds one with `sl.Run.from_env()`, so that the framework callbacks (`SweeplabCallback(run)`) work there
unchanged. What the Run does goes through the channels a command trial already has:

- `run.log` appends JSON lines to the report file (SWEEPLAB_REPORT_FILE), as `sweeplab.report` does;
- `run.checkpoint` / `run.restore` use the trial's checkpoint directory (SWEEPLAB_CHECKPOINT_DIR) with the
  manager's layout, which the runner watches and lists in the store; `trial.checkpoint_every` arrives in
  SWEEPLAB_CHECKPOINT_EVERY;
- at a decision step of the sweep's scheduler (an ASHA rung, a hyperband band: SWEEPLAB_DECISION_STEPS of
  SWEEPLAB_DECISION_METRIC), `run.log` waits for the driver's verdict as a function trial's does: it writes
  the report and an `{"@decide": step}` line, then polls the verdict file the runner writes
  (SWEEPLAB_DECISION_FILE) until it says go on or stop (stop sets `should_stop`), for at most `_DECISION_WAIT`
  seconds, and no longer once the runner's worker (SWEEPLAB_WORKER_PID) is gone. Without those variables
  (no scheduler, an older runner) it never waits;
- a SIGTERM (a prune, `sweeplab stop`, a preemption: the runner stops a program by SIGTERM; or a cluster
  signalling the program itself) sets `run.should_stop` instead of killing the program, and is written to the
  report file (`{"@signal": "SIGTERM"}`) so that the runner records a program that was cut short by a signal
  it did not send as preempted, whatever its exit code (Lightning ends `fit` on SIGTERM and exits 0). A
  second SIGTERM kills the program as the default action would.

Outside a sweep (a plain `python train.py`) the Run is local and inert: reports go nowhere, there is no
checkpoint to restore and none is written, and SIGTERM still asks it to stop.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from sweeplab.reporting import append_line, env_int, program_rank
from sweeplab.run import _DECISION_WAIT, Run, SmokeDone

__all__ = ["SIGNAL_MARK", "await_verdict", "run_from_env"]

SIGNAL_MARK = "@signal"   # a report-file line {"@signal": "SIGTERM"}: the program got a SIGTERM


# (the W&B hook, which cannot import sweeplab, has a copy of this wait: wandb_compat/_boot, `_Hold`)
_POLL_FIRST = 0.002   # the first look at the verdict file after a report at a decision step ...
_POLL_MAX = 0.05      # ... then ever slower looks, up to this
_ALIVE_EVERY = 0.5    # how often a waiting program checks that its runner's worker is still there


class ProgramRun(Run):
    """A Run whose reports go to a command trial's report file (or nowhere, outside a sweep)."""

    def __init__(self, *, verdict_file: str = "", worker_pid: int = 0, decision_wait: float = _DECISION_WAIT,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self._verdict_file = verdict_file
        self._worker_pid = worker_pid
        self._decision_wait = decision_wait

    def _await_decision(self, step: int) -> None:
        """At a decision step: send the report (with its `@decide` line) and poll the verdict file until it
        says go on from `step` or stop, the stop flag is set (a SIGTERM), the bound passes, or the worker that
        would answer is gone (its driver killed with it): never forever."""
        if self._stop.is_set():
            return
        self.flush(decide=step)
        stop = await_verdict(self._verdict_file, step, self._worker_pid, self._decision_wait, self._stop.is_set)
        if stop:
            self.request_stop(stop)

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        try:
            super().log(metrics, step)
        except SmokeDone as done:   # smoke mode, and the program never reads should_stop: it ends here, cleanly
            print(f"sweeplab: {done}", file=sys.stderr, flush=True)
            raise SystemExit(0) from None
        self.flush()   # no heartbeat thread here to send what stays buffered: one line per report, now

    def checkpoint(self, obj: Any, step: int | None = None, *, force: bool = False) -> bool:
        return bool(self._ckpt_dir) and super().checkpoint(obj, step, force=force)

    def checkpoint_due(self, step: int | None = None) -> bool:
        return bool(self._ckpt_dir) and super().checkpoint_due(step)

    def restore(self) -> Any:
        return super().restore() if self._ckpt_dir else None


def await_verdict(path: str, step: int, worker_pid: int, bound: float, stopped: Callable[[], bool]) -> str | None:
    """Poll the verdict file `path` until it says go on from `step` (None) or stop (its reason), `stopped()`
    is true (None), the `bound` passes, or the worker that would answer is gone (None): never forever."""
    start = time.monotonic()
    deadline, alive_at, pause = start + bound, start + _ALIVE_EVERY, _POLL_FIRST
    while not stopped():
        verdict = _read_verdict(path)
        if verdict.get("stop"):
            return str(verdict["stop"])
        go = verdict.get("go")
        if isinstance(go, int) and go >= step:
            return None
        now = time.monotonic()
        if now >= deadline or (now >= alive_at and not _alive(worker_pid)):
            return None
        if now >= alive_at:
            alive_at = now + _ALIVE_EVERY
        time.sleep(min(pause, deadline - now))
        pause = min(pause * 2, _POLL_MAX)
    return None


def _read_verdict(path: str) -> dict[str, Any]:
    """The verdict file's `{"go": step, "stop": reason}`, or {} when there is none yet (or it is unreadable)."""
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


def _decisions(env: Mapping[str, str]) -> dict[str, Any]:
    """The Run's decision steps and where their verdicts come from, from the runner's variables
    (backends/command_trial.py, `decision_env`); none (no waiting, no cost) when they are absent."""
    path, metric = env.get("SWEEPLAB_DECISION_FILE") or "", env.get("SWEEPLAB_DECISION_METRIC") or ""
    steps = []
    for part in (env.get("SWEEPLAB_DECISION_STEPS") or "").split(","):
        with contextlib.suppress(ValueError):
            steps.append(int(part))
    if not (path and metric and steps):
        return {}
    wait = _DECISION_WAIT
    with contextlib.suppress(ValueError):   # a test's (or a slow cluster's) own bound
        wait = float(env.get("SWEEPLAB_DECISION_WAIT") or wait)
    return {"decision_steps": steps, "decision_metric": metric,
            "decision_reports": env.get("SWEEPLAB_DECISION_REPORTS") == "1", "verdict_file": path,
            "worker_pid": env_int("SWEEPLAB_WORKER_PID", 0), "decision_wait": wait}


class _ReportSink:
    """Run events as report-file lines: metrics (one line per step, its step under "@step" so that a metric
    named "step" stays a metric), then `{"@decide": step}` when the batch ends at a decision step at which
    the Run waits for the verdict (in the same write); checkpoints need no line (the runner watches the
    directory), and neither do notes (the checkpoint manager writes its `restored` / `checkpoint_corrupt` ones
    itself)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind != "metrics" or not self.path:
            return
        by_step: dict[int, dict[str, Any]] = {}
        for step, key, value, _ in data.get("points") or ():
            by_step.setdefault(step, {})[key] = value if math.isfinite(value) else str(value)
        lines = [json.dumps({**values, "@step": step}, separators=(",", ":")) + "\n"
                 for step, values in by_step.items()]
        if data.get("decide") is not None:
            lines.append(json.dumps({"@decide": int(data["decide"])}) + "\n")
        if lines:
            append_line(self.path, "".join(lines))


def _checkpoint_every() -> Any:
    text = os.environ.get("SWEEPLAB_CHECKPOINT_EVERY")
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def run_from_env(config: Mapping[str, Any] | None = None) -> Run:
    """The Run of this process: the command trial's, when sweeplab started the program (SWEEPLAB_REPORT_FILE is
    set), else a local one that reports nowhere. `config` (e.g. `vars(args)`) becomes `run.config`."""
    from sweeplab.config import Config

    env = os.environ
    report = env.get("SWEEPLAB_REPORT_FILE") or ""
    if not report and env.get("SWEEPLAB_EVENT_FD"):   # a function trial's worker (or a process it started)
        warnings.warn("sl.Run.from_env() in a function trial: the Run it returns reports nowhere; use the Run "
                      "sweeplab passes to the function (`def train(config, run)`) and hand it on", stacklevel=3)
    seed = (env.get("SWEEPLAB_SEED") or "").strip()
    run = ProgramRun(
        config=Config(config or {}), sink=_ReportSink(report),
        sweep=env.get("SWEEPLAB_SWEEP", "") if report else "", trial=env_int("SWEEPLAB_TRIAL", 0),
        attempt=max(1, env_int("SWEEPLAB_ATTEMPT", 1)), seed=int(seed) if seed.lstrip("-").isdigit() else None,
        smoke=env.get("SWEEPLAB_SMOKE") == "1",
        checkpoint_dir=(env.get("SWEEPLAB_CHECKPOINT_DIR") or "") if report else "",
        keep_checkpoints=max(1, env_int("SWEEPLAB_KEEP_CHECKPOINTS", 2)), checkpoint_every=_checkpoint_every(),
        rank=program_rank(), world_size=max(1, env_int("WORLD_SIZE", 1)),
        original_cwd=env.get("SWEEPLAB_ORIGINAL_CWD"), **(_decisions(env) if report else {}),
    )
    _stop_on_sigterm(run, report)
    atexit.register(_flush_quietly, run)
    return run


def _flush_quietly(run: Run) -> None:
    """At exit: what is still buffered (nothing, normally: `log` writes at once), unless the file is gone."""
    with contextlib.suppress(OSError):
        run.flush()


def _stop_on_sigterm(run: Run, report: str) -> None:
    """SIGTERM sets `run.should_stop` (and is noted in the report file); a handler installed before keeps
    being called after it; a second SIGTERM ends the program as the default action does. Only the main
    thread can install a handler: a Run made in another thread leaves SIGTERM as it is."""
    if threading.current_thread() is not threading.main_thread():
        return
    before = signal.getsignal(signal.SIGTERM)
    got = [0]

    def on_sigterm(signum: int, frame: Any) -> None:
        got[0] += 1
        if got[0] > 1 and before in (signal.SIG_DFL, None):   # asked twice: do what SIGTERM does
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if got[0] == 1 and report:
            with contextlib.suppress(OSError):   # the report file is gone: the attempt ended anyway
                append_line(report, json.dumps({SIGNAL_MARK: "SIGTERM"}) + "\n")
        run.request_stop("SIGTERM")
        if callable(before):
            before(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)
