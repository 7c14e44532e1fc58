"""The worker: runs trials in a process of its own and streams their events back.

`python -m sweeplab.backends.worker` reads commands as JSON lines on stdin
    {"op": "run", "task": {...TrialTask...}}   {"op": "stop", "trial": id}   {"op": "exit"}
    {"op": "go", "trial": id, "step": n}       (the trial waiting at decision step n goes on)
and writes events (backends/events.py) as JSON lines to the file descriptor named by SWEEPLAB_EVENT_FD.
A worker runs one trial at a time and is reused for the next one (cheap), unless the trial was a command
(it ran in a child process anyway), it was preempted, or its memory grew past a limit: then it exits and
the backend starts a fresh one. A trial that crashes the interpreter (segfault, os._exit) takes only this
process down; the backend turns that into a FAILED event.

The same `execute` function serves every backend: the Ray backend calls it inside an actor.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweeplab.backends import _tree
from sweeplab.backends.base import TrialTask
from sweeplab.backends.events import Event, EventKind, describe_exit, encode
from sweeplab.run import Run

__all__ = ["Channel", "execute", "main"]

_RSS_GROWTH_LIMIT = 1 << 30   # recycle the worker when a trial left it this much bigger
_RSS_CHECK_EVERY = 0.25     # ... looked at after a trial, at most this often (s)
_rss_checked = -_RSS_CHECK_EVERY
_SAMPLER_DELAY = 1.0          # a trial gets CPU/memory sampling once it has run this long
_STARTED_DELAY = 0.05         # STARTED waits this long to share a write with the next event


class Channel:
    """Thread-safe sender of one trial attempt's events (to a pipe, a Ray queue, a list...)."""

    def __init__(self, write: Callable[[bytes], None], task: TrialTask) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._held = b""
        self.trial = task.trial_id
        self.attempt = task.attempt

    def send(self, kind: EventKind | str, data: dict[str, Any] | None = None) -> None:
        kind = EventKind(kind)
        line = encode(Event(kind, self.trial, self.attempt, time.time(), data or {}))
        with self._lock:
            if kind is EventKind.STARTED:
                self._held = line     # sent with the next event, or by the heartbeat within 50 ms:
                return                # a short trial then costs the driver one wake-up, not two
            if self._held:
                line, self._held = self._held + line, b""
            self._write(line)

    def flush(self) -> None:
        """Send a held STARTED event now."""
        with self._lock:
            if self._held:
                line, self._held = self._held, b""
                self._write(line)


def fd_writer(fd: int) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    return write


# ---------------------------------------------------------------------------------------- importing targets
_module_cache: dict[str, Any] = {}


_target_cache: dict[tuple[str, tuple[str, ...], str], Callable[..., Any]] = {}


def load_target(target: str, python_path: list[str] | tuple[str, ...] = ()) -> Callable[..., Any]:
    """'pkg.mod:fn' or 'path/to/file.py:fn' -> the function (looked up once per target, path and cwd)."""
    key = (target, tuple(python_path), os.getcwd())
    fn = _target_cache.get(key)
    if fn is None:
        fn = _target_cache[key] = _load_target(target, python_path)
    return fn


def _load_target(target: str, python_path: list[str] | tuple[str, ...]) -> Callable[..., Any]:
    for p in python_path:
        if p and p not in sys.path:
            sys.path.insert(0, p)
    module_part, _, attr = target.rpartition(":")
    if not module_part or not attr:
        raise ValueError(f"function {target!r} must look like 'package.module:function' or 'file.py:function'")
    if module_part.endswith(".py") or os.sep in module_part or "/" in module_part:
        path = str(Path(module_part).resolve())
        module = _module_cache.get(path)
        if module is None:
            name = "_sweeplab_user_" + Path(path).stem
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            sys.path.insert(0, str(Path(path).parent))
            spec.loader.exec_module(module)
            _module_cache[path] = module
    else:
        module = importlib.import_module(module_part)
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise AttributeError(f"{module_part} has no function {attr!r}")
    return fn


def _seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % (2**32))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


_facts_cache: dict[Any, tuple[Any, str]] = {}


def _facts(fn: Callable[..., Any]) -> tuple[Any, str]:
    """(typed config schema or None, how to call: 'positional' | 'keyword' | 'config') of a trial function,
    worked out once per function (inspect.signature costs more than a short trial's own work)."""
    try:
        return _facts_cache[fn]
    except (KeyError, TypeError):
        pass
    from sweeplab.config import typed_schema_of

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        style = "positional"
    else:
        positional = [p for p in params.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
        if len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in positional):
            style = "positional"
        elif not positional and "run" not in params:
            style = "none"   # W&B's wandb.agent(function=train) style: train() reads wandb.config
        else:
            style = "keyword" if "run" in params else "config"
    facts = (typed_schema_of(fn), style)
    with contextlib.suppress(TypeError):   # an unhashable callable object is inspected every time
        _facts_cache[fn] = facts
    return facts


def _call(fn: Callable[..., Any], config: Any, run: Run) -> Any:
    style = _facts(fn)[1]
    if style == "positional":
        return fn(config, run)
    if style == "keyword":
        return fn(config, run=run)
    if style == "none":
        return fn()
    return fn(config)


# ---------------------------------------------------------------------------------------- executing
class _Heartbeat(threading.Thread):
    """One thread per worker process, watching the attempt in progress (a thread per trial would cost a
    context switch at every start).

    It sends the held STARTED event after 50 ms, starts the system sampler once the attempt has run for a
    second (listing a process tree costs a few milliseconds, which would dominate short trials), then tells
    the driver the process is alive every `heartbeat_interval` and sends metrics a quiet trial kept buffered.
    """

    _TICK = 0.05

    def __init__(self) -> None:
        super().__init__(daemon=True, name="sweeplab-heartbeat")
        self._lock = threading.Lock()
        self._ex: Execution | None = None
        self._t0 = self._next = 0.0
        self._flushed = self._sampling = False

    def attach(self, ex: Execution) -> None:
        with self._lock:
            self._ex, self._t0 = ex, time.monotonic()
            self._next = self._t0 + ex.task.heartbeat_interval
            self._flushed = self._sampling = False

    def detach(self) -> None:
        with self._lock:
            self._ex = None

    def run(self) -> None:
        while True:
            time.sleep(self._TICK)
            with self._lock:
                ex = self._ex
                if ex is None:
                    continue
                now = time.monotonic()
                flush = not self._flushed and now - self._t0 >= _STARTED_DELAY
                sample = not self._sampling and now - self._t0 >= _SAMPLER_DELAY
                beat = now >= self._next
                self._flushed |= flush
                self._sampling |= sample
                if beat:
                    self._next = now + ex.task.heartbeat_interval
            with contextlib.suppress(OSError):
                if flush:
                    ex.channel.flush()
                if sample:
                    with ex.lock:
                        if not ex.ended:
                            ex.sampler = _start_sampler(ex.channel)
                if beat and ex.alive():
                    ex.channel.send(EventKind.HEARTBEAT)
                    if ex.run is not None:
                        ex.run.flush_if_stale(1.0)


_heartbeat: _Heartbeat | None = None


def _heartbeat_thread() -> _Heartbeat:
    global _heartbeat
    if _heartbeat is None:
        _heartbeat = _Heartbeat()
        _heartbeat.start()
    return _heartbeat


_made_dirs: set[str] = set()   # log directories known to exist (one mkdir per directory, not per trial)


@contextlib.contextmanager
def _redirect_output(log_path: str):  # type: ignore[no-untyped-def]
    """Send fds 1 and 2 (print, C extensions, subprocesses) to the trial's log file."""
    if not log_path:
        yield
        return
    parent = os.path.dirname(log_path)
    if parent not in _made_dirs:
        Path(parent).mkdir(parents=True, exist_ok=True)
        _made_dirs.add(parent)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = (os.dup(1), os.dup(2))
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


class Execution:
    """One attempt in progress inside this process (what `stop` and SIGTERM act on)."""

    def __init__(self, task: TrialTask, channel: Channel) -> None:
        self.task = task
        self.channel = channel
        self.run: Run | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.liveness: Any = None          # a command program's signs of life (_tree.Liveness)
        self.output = 0                    # ... lines it printed so far
        self.preempted = False
        self.stop_requested = False
        self.timer: threading.Timer | None = None
        self.baseline_rss = 0
        self.sampler: Any = None
        self.lock = threading.Lock()
        self.ended = False

    @property
    def retire(self) -> bool:
        """Whether this worker should exit after the attempt (preempted, or grown by a leak)."""
        if self.preempted:
            return True
        if self.task.kind != "function":
            return False
        global _rss_checked
        now = time.monotonic()
        if now - _rss_checked < _RSS_CHECK_EVERY:   # many short trials: one look at /proc per interval
            return False
        _rss_checked = now
        rss = _rss()
        return rss is not None and rss - self.baseline_rss > _RSS_GROWTH_LIMIT

    def alive(self) -> bool:
        """Whether to send a heartbeat now: always for a function trial (this process is the trial); for a
        command trial only if its program showed a sign of life since the last beat (backends/_tree.py)."""
        liveness = self.liveness
        return liveness is None or liveness.check(self.output)

    def stop(self, reason: str) -> None:
        self.stop_requested = True
        if self.run is not None:
            self.run.request_stop(reason)
        child = self.child
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGTERM)


def _load_captures(replay: Any) -> dict[str, Any]:
    if not replay or not replay.get("capture"):
        return {}
    from sweeplab.capture import load_captures

    return load_captures(replay["capture"])


@functools.cache
def _hostname() -> str:
    return socket.gethostname()


def execute(task: TrialTask, channel: Channel, current: list[Execution | None],
            baseline_rss: int = 0) -> Execution:
    """Run one attempt to its end, sending STARTED ... FINISHED | FAILED | PREEMPTED."""
    ex = Execution(task, channel)
    ex.baseline_rss = baseline_rss
    current[0] = ex
    channel.send(EventKind.STARTED, {"pid": os.getpid(), "host": _hostname()})
    heartbeat = _heartbeat_thread()
    heartbeat.attach(ex)
    try:
        if task.kind == "command":
            _execute_command(ex)
        else:
            _execute_function(ex)
    finally:
        heartbeat.detach()
        with ex.lock:
            ex.ended = True
            sampler, ex.sampler = ex.sampler, None
        if sampler is not None:
            with contextlib.suppress(Exception):
                sampler.stop()
        if ex.timer is not None:
            ex.timer.cancel()
        current[0] = None
    return ex


def _execute_function(ex: Execution) -> None:
    task, channel = ex.task, ex.channel
    if task.world_size > 1:   # several processes for one trial: this worker supervises them
        from sweeplab.backends.multiproc import execute_ranks

        execute_ranks(ex)
        return
    run: Run | None = None
    building = False
    wandb_final: dict[str, Any] = {}
    try:
        with _redirect_output(task.log_path):
            _write_header(task)
            old_env = {k: os.environ.get(k) for k in task.env}
            os.environ.update({k: str(v) for k, v in task.env.items()})
            cwd = os.getcwd()
            try:
                if task.cwd:
                    os.chdir(task.cwd)
                if "WANDB_SWEEP_PARAM_PATH" in task.env:   # before the import: W&B scripts call wandb there
                    from sweeplab.wandb_compat import install_hook

                    install_hook()
                fn = load_target(task.target or "", list(task.python_path))
                from sweeplab.config import coerce

                building = True       # a ConfigError from here on is bad input: the config cannot be built
                config = coerce(dict(task.config), _facts(fn)[0])
                building = False
                run = Run(
                    config=config, sink=channel.send, params=task.params, sweep=task.sweep,
                    trial=task.number, attempt=task.attempt, seed=task.seed, smoke=task.smoke,
                    smoke_steps=task.smoke_steps, checkpoint_dir=task.checkpoint_dir,
                    keep_checkpoints=task.keep_checkpoints, checkpoint_every=task.checkpoint_every,
                    mtbf=task.mtbf, captured=_load_captures(task.replay),
                    rank=int(os.environ.get("RANK", "0")), torch_profiler=task.torch_profiler,
                    artifacts_dir=task.artifacts_dir, decision_steps=task.decision_steps,
                    decision_metric=task.decision_metric,
                )
                ex.run = run
                if ex.stop_requested:
                    run.request_stop("stop requested")
                if task.seed is not None:
                    _seed_everything(task.seed)
                if "WANDB_SWEEP_PARAM_PATH" in task.env:   # wandb.init()/log in the function reach the run
                    from sweeplab.wandb_compat import function_trial

                    result = None   # the sweep stopped the function at a wandb.log (it returned nothing)
                    with function_trial(run.log, stopped=lambda: run.should_stop) as wandb_final:
                        result = _call(fn, config, run)
                else:
                    result = _call(fn, config, run)
            finally:
                os.chdir(cwd)
                for k, v in old_env.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        run.flush()
        _send_profile(ex)
        if ex.preempted:
            channel.send(EventKind.PREEMPTED, {"reason": "SIGTERM (preemption)", "retire": True})
            return
        from sweeplab.run import objective_from

        metrics, _ = objective_from(result, None)
        if wandb_final:
            metrics = {**_wandb_summary(wandb_final), **metrics}
        channel.send(EventKind.FINISHED, {"metrics": metrics, "stopped": run.should_stop, "retire": ex.retire})
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt) and not ex.preempted:
            raise
        if run is not None:
            with contextlib.suppress(Exception):
                run.flush()
        _send_profile(ex)
        if ex.preempted:
            channel.send(EventKind.PREEMPTED, {"reason": "SIGTERM (preemption)", "retire": True})
            return
        tb = traceback.format_exc()
        capture_ref = None
        if run is not None and run.captures and task.capture_dir:
            with contextlib.suppress(Exception):
                from sweeplab.capture import save_captures

                capture_ref = save_captures(run.captures, task.capture_dir)
        from sweeplab.capture import environment_facts
        from sweeplab.errors import ConfigError

        data = {
            "environment": environment_facts(task.cwd or None),
            "reason": f"{type(exc).__name__}: {exc}".strip()[:500],
            "error_type": type(exc).__name__, "message": str(exc)[:2000], "traceback": tb[-20000:],
            "capture": capture_ref, "retire": ex.retire,
        }
        if building and isinstance(exc, ConfigError):   # deterministic: the driver never retries it
            data.update(bad_input=True, key=exc.key, message=str(exc))
        channel.send(EventKind.FAILED, data)


def _start_sampler(channel: Channel) -> Any:
    """CPU %, RSS (and GPU via NVML) of this worker and its children, sampled once a second."""
    try:
        from sweeplab.profiling import SystemSampler

        sampler = SystemSampler(lambda samples: channel.send(EventKind.SYSTEM, {"samples": samples}),
                                interval=1.0, flush_every=5)
        sampler.start()
        return sampler
    except Exception:
        return None


def _send_profile(ex: Execution) -> None:
    """Stop the sampler and send the per-trial profile summary (step timings + system figures + hint)."""
    with contextlib.suppress(Exception):
        steps = (ex.run.profile_summary() if ex.run is not None else None) or {}
        system: dict[str, Any] = {}
        with ex.lock:
            ex.ended = True
            sampler, ex.sampler = ex.sampler, None
        if sampler is not None:
            sampler.stop()
            system = sampler.peak()
        if steps or system.get("system_samples"):   # mem_total and ncpu alone are no profile
            # imported only by trials with something to say
            from sweeplab.profiling import profile_summary

            ex.channel.send(EventKind.PROFILE, {"summary": profile_summary(steps, system)})


def _rss() -> int | None:
    """This process's resident memory: /proc/self/statm where it exists (no import), else psutil."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:
        return None


def parse_report_line(line: str) -> tuple[int | None, dict[str, float]] | None:
    """A JSON object of metrics, optionally with "step". Non-numeric values are ignored."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    step = obj.pop("step", None)
    out: dict[str, float] = {}
    for k, v in obj.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[str(k)] = float(v)
    return (int(step) if isinstance(step, (int, float)) else None), out


class _Reporter:
    """Turns report lines (from stdout `@sweeplab ` lines or the report file) into METRICS events."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.step = 0
        self.lock = threading.Lock()
        self.final: dict[str, Any] = {}   # a W&B run's summary (wandb_compat hook): the final metrics

    def line(self, text: str) -> None:
        if text.startswith('{"@summary":'):
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                self.final.update(json.loads(text)["@summary"])
            return
        parsed = parse_report_line(text)
        if parsed is None:
            return
        step, metrics = parsed
        if not metrics:
            return
        with self.lock:
            if step is None:
                step = self.step
            self.step = step + 1
            now = time.time()
            self.channel.send(EventKind.METRICS, {"points": [[step, k, v, now] for k, v in metrics.items()]})


def _execute_command(ex: Execution) -> None:
    task, channel = ex.task, ex.channel
    Path(task.log_path).parent.mkdir(parents=True, exist_ok=True)
    report_path = task.report_path or str(Path(task.log_path).with_suffix(".report.jsonl"))
    Path(report_path).write_text("")
    added = {k: str(v) for k, v in task.env.items()}
    added.update({
        "SWEEPLAB_REPORT_FILE": report_path,
        "SWEEPLAB_SWEEP": task.sweep,
        "SWEEPLAB_TRIAL": str(task.number),
        "SWEEPLAB_ATTEMPT": str(task.attempt),
        "SWEEPLAB_CHECKPOINT_DIR": task.checkpoint_dir,
        "PYTHONUNBUFFERED": "1",
        _tree.MARK: _tree.new_mark(),      # found on every process of this attempt, even orphaned ones
    })
    if task.seed is not None:
        added["SWEEPLAB_SEED"] = str(task.seed)
    env = dict(os.environ)
    env.update(added)
    argv = list(task.command or ())
    reporter = _Reporter(channel)
    stderr_tail = bytearray()
    with open(task.log_path, "ab") as log:
        log.write(_header(task, argv=argv, added=added))
        log.flush()
        try:
            child = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=task.cwd or None, env=env, start_new_session=True, preexec_fn=_tree.die_with_parent(),
            )
        except OSError as exc:
            channel.send(EventKind.FAILED, {"reason": f"cannot start {argv[0] if argv else '?'}:"
                                            f" {exc.strerror or exc}", "error_type": type(exc).__name__,
                                            "message": str(exc)})
            return
        ex.child = child
        # every process of the attempt ends with it: the backend kills this group too, the reaper the rest
        channel.send(EventKind.PROCESS, {"pid": child.pid, "pgid": child.pid})
        reaper = _tree.Reaper.start(child.pid, env[_tree.MARK])
        ex.liveness = _tree.Liveness(child.pid, (task.log_path, report_path), task.checkpoint_dir)
        if ex.stop_requested:
            ex.stop("stop requested")
        tail = threading.Thread(target=_tail_file, args=(report_path, reporter, child), daemon=True)
        tail.start()
        write_lock = threading.Lock()   # stdout and stderr lines go to the one log, whole lines at a time
        errors = threading.Thread(target=_copy_stderr, args=(child, log, write_lock, stderr_tail), daemon=True)
        errors.start()
        assert child.stdout is not None
        for raw in child.stdout:
            with write_lock:
                log.write(raw)
                ex.output += 1
            if raw.startswith(b"@sweeplab "):
                reporter.line(raw[10:].decode(errors="replace"))
        code = child.wait()
        reaper.close()
        errors.join(timeout=5)
        tail.join(timeout=5)
        with write_lock:
            log.flush()
    _send_profile(ex)
    if ex.preempted:
        channel.send(EventKind.PREEMPTED, {"reason": "SIGTERM (preemption)", "retire": True})
    elif code == 0 and reporter.final.get("@exit_code"):   # wandb.finish(exit_code=N): failed, as in W&B
        channel.send(EventKind.FAILED, {"reason": f"wandb.finish(exit_code={reporter.final['@exit_code']})",
                                        "error_type": "CommandFailed", "message": _log_tail(task.log_path)})
    elif code == 0 or (ex.stop_requested and code in (-signal.SIGTERM, 143)):
        channel.send(EventKind.FINISHED, {"metrics": _wandb_summary(reporter.final), "stopped": ex.stop_requested})
    else:
        why, exit_code, sig = describe_exit(code)
        last, text = _stderr_summary(bytes(stderr_tail))
        channel.send(EventKind.FAILED, {"reason": f"command {why}" + (f": {last}" if last else ""),
                                        "exit_code": exit_code, "signal": sig, "error_type": "CommandFailed",
                                        "message": last or f"command {why}",
                                        "traceback": text or _log_tail(task.log_path, _STDERR_BYTES)})


_STDERR_KEEP = 64 << 10  # the end of a command trial's stderr kept in memory for its failure reason ...
_STDERR_BYTES = 2000    # ... of which at most this much (the last traceback, or the last lines) is reported
_REASON_LINE = 300      # the last line of stderr, as it appears in the one-line reason


def _copy_stderr(child: subprocess.Popen[bytes], log: Any, lock: threading.Lock, tail: bytearray) -> None:
    """Copy a command's stderr into its log as it comes (in chunks, not lines: a progress bar redrawn with
    carriage returns is one endless line), keeping its end for the failure reason."""
    assert child.stderr is not None
    fd = child.stderr.fileno()
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        with lock, contextlib.suppress(ValueError):   # closed: a grandchild held stderr past the wait
            log.write(chunk)
        tail += chunk
        if len(tail) > _STDERR_KEEP:
            del tail[:len(tail) - _STDERR_KEEP]


def _stderr_summary(data: bytes) -> tuple[str, str]:
    """(the last non-empty line, the last traceback or else the last 20 lines) of a command's stderr,
    bounded: what says why a command trial failed without opening its log."""
    lines = data.decode(errors="replace").replace("\r\n", "\n").split("\n")
    if len(data) >= _STDERR_KEEP:
        lines = lines[1:]                             # the first line was cut
    text = [ln.rsplit("\r", 1)[-1] for ln in lines]  # what a terminal shows of a line redrawn with \r
    while text and not text[-1].strip():
        text.pop()
    start = max((i for i, ln in enumerate(text) if ln.startswith("Traceback (most recent call last)")),
                default=max(0, len(text) - 20))
    shown = "\n".join(text[start:]).strip("\n")
    if len(shown) > _STDERR_BYTES:
        shown = "...\n" + shown[-_STDERR_BYTES:].split("\n", 1)[-1]
    last = next((ln.strip() for ln in reversed(text) if ln.strip()), "")
    if len(last) > _REASON_LINE:
        last = last[:_REASON_LINE] + "..."
    return last, shown


_ENV_SHOWN = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _header(task: TrialTask, *, argv: list[str] | None = None, added: dict[str, str] | None = None) -> bytes:
    """The first lines of every trial's log: how the attempt ran (argv or function, working directory, and
    the environment variables sweeplab set: never the whole environment, which may hold secrets). Values are
    JSON; `sweeplab repro` reads a command trial's back from here."""
    env = {k: os.environ[k] for k in _ENV_SHOWN if k in os.environ}   # the backend set these for the slot
    env.update(added if added is not None else {k: str(v) for k, v in task.env.items()})
    lines = [f"# sweeplab: sweep {task.sweep}, trial {task.number}, attempt {task.attempt}"]
    if argv is not None:
        lines.append(f"# argv: {json.dumps(argv)}")
    else:
        lines.append(f"# function: {json.dumps(task.target)}")
    lines.append(f"# cwd: {json.dumps(os.path.abspath(task.cwd or os.getcwd()))}")
    lines.append(f"# env: {json.dumps(env, sort_keys=True)}")
    return ("\n".join(lines) + "\n").encode()


def _write_header(task: TrialTask) -> None:
    """The log header of a function trial, written to fd 1 (the trial's log while it runs)."""
    if task.log_path:
        with contextlib.suppress(OSError):
            fd_writer(1)(_header(task))


def _wandb_summary(final: dict[str, Any]) -> dict[str, float]:
    """The numbers of a W&B run's summary (nan/inf arrive as strings)."""
    out: dict[str, float] = {}
    for k, v in final.items():
        if k.startswith("@"):
            continue
        with contextlib.suppress(TypeError, ValueError):
            out[k] = float(v)
    return out


def _tail_file(path: str, reporter: _Reporter, child: subprocess.Popen[bytes]) -> None:
    with open(path, "rb") as fh:
        pending = b""
        while True:
            chunk = fh.read()
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    reporter.line(line.decode(errors="replace"))
            elif child.poll() is not None:
                chunk = fh.read()
                if not chunk:
                    break
                pending += chunk
            else:
                time.sleep(0.05)
        if pending.strip():
            reporter.line(pending.decode(errors="replace"))


def _log_tail(path: str, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def _preload() -> None:
    """Import what every trial needs before the first task (profiling and psutil come later, lazily:
    the sampler starts after a second and `run.track` imports its tracker on first use)."""
    with contextlib.suppress(Exception):
        import sweeplab.config  # noqa: F401


# ---------------------------------------------------------------------------------------- process main
def main() -> int:
    fd = int(os.environ["SWEEPLAB_EVENT_FD"])
    write = fd_writer(fd)
    current: list[Execution | None] = [None]
    tasks: list[TrialTask | None] = []
    have_task = threading.Condition()
    sigterm = {"got": False}

    def on_sigterm(signum: int, frame: Any) -> None:
        sigterm["got"] = True
        ex = current[0]
        if ex is not None:
            ex.preempted = True
            ex.stop("preempted (SIGTERM)")
            if ex.timer is None:
                ex.timer = threading.Timer(ex.task.grace, _grace_expired, args=(ex,))
                ex.timer.daemon = True
                ex.timer.start()
        else:
            os._exit(0)

    def _grace_expired(ex: Execution) -> None:
        with contextlib.suppress(Exception):
            ex.channel.send(EventKind.PREEMPTED, {"reason": f"SIGTERM; grace of {ex.task.grace:g}s expired",
                                                  "retire": True})
        if ex.child is not None:
            with contextlib.suppress(Exception):
                os.killpg(ex.child.pid, signal.SIGKILL)
        os._exit(143)

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the driver's to handle

    def reader() -> None:
        for line in sys.stdin:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            op = msg.get("op")
            if op == "run":
                with have_task:
                    tasks.append(TrialTask.from_dict(msg["task"]))
                    have_task.notify()
            elif op == "go":
                ex = current[0]
                if ex is not None and ex.run is not None and ex.task.trial_id == msg.get("trial"):
                    ex.run.go(int(msg.get("step", -1)))
            elif op == "stop":
                ex = current[0]
                if ex is not None and ex.task.trial_id == msg.get("trial"):
                    ex.stop(msg.get("reason") or "stop requested")
                else:
                    with have_task:   # a stop that overtook its task: mark it
                        for t in tasks:
                            if t.trial_id == msg.get("trial"):
                                tasks.remove(t)
                                Channel(write, t).send(EventKind.FINISHED, {"metrics": {}, "stopped": True})
            elif op == "exit":
                break
        else:
            # stdin closed without "exit": the driver died. An orphan must not go on writing checkpoints
            # beside the attempt a resumed driver will start, so it ends now, with its command children.
            ex = current[0]
            if ex is not None and ex.child is not None:
                with contextlib.suppress(Exception):
                    os.killpg(ex.child.pid, signal.SIGKILL)
            os._exit(1)
        with have_task:
            tasks.append(None)
            have_task.notify()

    threading.Thread(target=reader, daemon=True, name="sweeplab-control").start()
    _preload()
    baseline = _rss() or 0
    while True:
        with have_task:
            while not tasks:
                have_task.wait()
            task = tasks.pop(0)
        if task is None:
            return 0
        ex = execute(task, Channel(write, task), current, baseline)
        if ex.preempted or sigterm["got"] or ex.retire:
            return 0   # the backend saw "retire" in the last event and starts a fresh worker


def _exit(code: int) -> None:
    """End the process without the interpreter's teardown (freeing every module of a process that ran
    numpy or torch takes tens of milliseconds, which the driver would wait for at the end of each sweep):
    atexit handlers of user code and libraries still run, and standard streams are flushed."""
    import atexit

    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
