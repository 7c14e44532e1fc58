"""A command trial: a program run in a process tree of its own, its output copied into the trial's log.

Metrics come from `@sweeplab {json}` lines on its stdout and from the report file it may append JSON lines
to; the end of its stderr gives the reason of a failure. A program whose `Run.from_env()` (or W&B run, through
sweeplab's W&B hook) reports at a decision step of the scheduler (an ASHA rung) waits there for the verdict,
which is written to its verdict file
(`_Verdicts`). Every process of the attempt ends with it
(backends/_tree.py: a reaper, PDEATHSIG, and a liveness check for the heartbeat).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from sweeplab._process import os_text
from sweeplab._values import report_values
from sweeplab.backends import _tree
from sweeplab.backends._diskfull import disk_full_data, full_disk_error, names_full_disk, trial_places
from sweeplab.backends.channel import Channel
from sweeplab.backends.events import EventKind, describe_exit
from sweeplab.backends.execution import Execution, LogCap, WorkdirError, log_header, make_workdir, send_profile
from sweeplab.types import MetricPoint

__all__ = ["execute_command", "parse_report_line"]


def parse_report_line(line: str) -> tuple[int | None, dict[str, float]] | None:
    """A JSON object of metrics, optionally with "step" (or "@step", the W&B hook's: then "step" is a metric
    like any other, as a W&B program may log one); NaN and inf as numbers or as text (`_values.report_values`);
    other non-numeric values are ignored."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    return report_values(obj)


class _Reporter:
    """Turns report lines (from stdout `@sweeplab ` lines or the report file) into METRICS events."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.step = 0
        self.lock = threading.Lock()
        self.final: dict[str, Any] = {}   # a W&B run's summary (wandb_compat hook): the final metrics
        self.unread = 0                   # report lines that are not a JSON object (a Python dict printed) ...
        self.first_unread = ""            # ... and the first of them, named when the trial's metric is missing
        self.signalled = False            # the program's Run got a SIGTERM (`Run.from_env`: an `@signal` line)
        self.preempting = False           # its W&B run called `mark_preempting()` (an `@preempting` line)
        self.notes: set[str] = set()      # the `@note` lines passed on (each once)

    def line(self, text: str) -> None:
        if text.startswith('{"@note":'):   # the program's CheckpointManager: a checkpoint skipped or restored
            with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
                note = json.loads(text)["@note"]
                if note.get("kind") in ("checkpoint_corrupt", "restored") and isinstance(note.get("message"), str):
                    # once: each rank of a program that starts its own (Lightning's strategy="ddp") restores
                    # the same checkpoint, and each said so
                    if text not in self.notes:
                        self.notes.add(text)
                        self.channel.send(EventKind.NOTE, note)
            return
        if text.startswith('{"@signal":'):
            self.signalled = True
            return
        if text.startswith('{"@decide":'):   # `Run.from_env` waits at this decision step for the verdict
            with contextlib.suppress(ValueError, TypeError, KeyError):
                decide = int(json.loads(text)["@decide"])
                with self.lock:   # after the report it follows (sent under the same lock)
                    self.channel.send(EventKind.METRICS, {"points": [], "decide": decide})
            return
        if text.startswith('{"@preempting":'):   # the program's W&B run: `run.mark_preempting()`
            self.preempting = True
            return
        if text.startswith('{"@summary":'):
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                self.final.update(json.loads(text)["@summary"])
            return
        parsed = parse_report_line(text)
        if parsed is None:
            with self.lock:
                self.unread += 1
                if self.unread == 1:
                    self.first_unread = text.strip()[:200]
                    with contextlib.suppress(Exception):
                        self.channel.send(EventKind.NOTE, {
                            "level": "warning", "kind": "warning",
                            "message": f"report line `@sweeplab {self.first_unread}` is not a JSON object; ignored "
                                       "(print '@sweeplab ' + json.dumps({...}), or call sweeplab.report(...))"})
            return
        step, metrics = parsed
        if not metrics:
            return
        with self.lock:
            if step is None:
                step = self.step
            self.step = step + 1
            now = time.time()
            self.channel.send(EventKind.METRICS, {"points": [MetricPoint(step, k, v, now) for k, v in metrics.items()]})


class _Log:
    """A command trial's log file. A write that fails (a full disk, a file-size limit) loses the log from there
    on, not the trial: the program's output is still drained and read for its reports, and the loss is noted
    once (a warning NOTE event, in the sweep's events). Written by the stdout and stderr copiers under a lock.
    Past `log_max` bytes (trial.log_max) it keeps its beginning, a marker and its latest output (LogCap)."""

    def __init__(self, path: str, channel: Channel, log_max: int = 0) -> None:
        self.path = path
        self.channel = channel
        self.lost: OSError | None = None
        self._fh: Any = None
        self._cap: LogCap | None = None
        self._size = 0   # the file's size, counted (the cap is checked when it passes)
        try:
            self._fh = open(path, "ab")   # closed by __exit__
            if log_max > 0:
                self._cap = LogCap(path, log_max)
                self._size = os.fstat(self._fh.fileno()).st_size
        except OSError as exc:
            if full_disk_error(exc) is None:
                raise
            self._lose(exc)

    def __enter__(self) -> _Log:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cap is not None:
            self._cap.close()
        if self._fh is not None:
            with contextlib.suppress(OSError):   # what a lost log still held in its buffer
                self._fh.close()

    def write(self, data: bytes) -> None:
        if self.lost is not None:
            return
        try:
            self._fh.write(data)
            if self._cap is not None:
                self._size += len(data)
                if self._size > self._cap.limit:
                    self._fh.flush()
                    self._size = self._cap.check()
        except ValueError:   # closed: a grandchild held the pipe past the end of the attempt
            pass
        except OSError as exc:
            self._lose(exc)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._fh.flush()
            except ValueError:
                pass
            except OSError as exc:
                self._lose(exc)

    def _lose(self, exc: OSError) -> None:
        self.lost = exc
        with contextlib.suppress(Exception):
            self.channel.send(EventKind.NOTE, {
                "level": "warning", "kind": "warning", "path": self.path,
                "message": f"the trial's log {self.path} cannot be written ({exc.strerror or exc}): its output "
                           "from here on is not logged; the program goes on and its reports still count"})


class _Verdicts:
    """The driver's verdicts at the decision steps of a command trial, for a program whose `Run.from_env()`
    waits there (its log at an ASHA rung or hyperband band): each written to a small JSON file,
    `{"go": <the highest step to go on from>, "stop": <reason or null>}`, replaced atomically (a temporary file
    renamed over it), which the program polls (sweeplab/_program_run.py). A stop also reaches the program as
    the SIGTERM it always got; the file makes it a verdict the waiting program reads whatever its SIGTERM
    handlers do. A W&B program's hook waits the same way (wandb_compat/_boot/_sweeplab_wandb_hook.py, `_Hold`);
    a program that does not wait (plain report lines, `sweeplab.report`) never reads it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.go_step = -1
        self.stopped: str | None = None
        with contextlib.suppress(OSError):   # an earlier attempt's verdicts are not this one's
            os.unlink(path)

    def go(self, step: int) -> None:
        with self.lock:
            if step > self.go_step:
                self.go_step = step
                self._write()

    def stop(self, reason: str) -> None:
        with self.lock:
            if self.stopped is None:
                self.stopped = reason or "stopped"
                self._write()

    def _write(self) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as fh:
                fh.write(json.dumps({"go": self.go_step, "stop": self.stopped}))
            os.replace(tmp, self.path)
        except OSError:   # a full disk: the program waits out its bound (`Run`'s), then goes on
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def decision_env(task: Any, verdict_path: str) -> dict[str, str]:
    """What a program's `Run.from_env()` needs to wait at the trial's decision steps (those a function trial's
    Run gets from its task): none when the trial has none (no scheduler, or a backend that cannot answer)."""
    if not task.decision_steps or not task.decision_metric:
        return {}
    env = {"SWEEPLAB_DECISION_FILE": verdict_path,
           "SWEEPLAB_DECISION_STEPS": ",".join(str(int(s)) for s in task.decision_steps),
           "SWEEPLAB_DECISION_METRIC": str(task.decision_metric),
           "SWEEPLAB_WORKER_PID": str(os.getpid())}   # gone: the program waits no longer
    if task.decision_reports:
        env["SWEEPLAB_DECISION_REPORTS"] = "1"
    return env


def _empty(path: str) -> bool:
    try:
        return os.path.getsize(path) == 0
    except OSError:
        return False


def _wandb_without_hook(reporter: _Reporter, env: Mapping[str, str], cwd: str, log_path: str) -> None:
    """A W&B program that ran without sweeplab's hook (a wrapper script set its own PYTHONPATH, dropping the
    hook's folder): its run's history and summary are read back from the run's offline files, with a warning
    (the trial failed with "metric ... was never reported", although the run logged it)."""
    from sweeplab.wandb_compat import BOOT_DIR, offline_run_lines

    lines = offline_run_lines(env, cwd, log_path)
    if not lines:
        return
    with contextlib.suppress(Exception):
        reporter.channel.send(EventKind.NOTE, {
            "level": "warning", "kind": "warning",
            "message": f"the program's W&B run (WANDB_RUN_ID {env.get('WANDB_RUN_ID')}) reached sweeplab only "
                       "through its offline files, read after it ended: the program ran without sweeplab's W&B "
                       f"hook ({BOOT_DIR} was not on its PYTHONPATH: does a wrapper script set PYTHONPATH?), so "
                       "its reports came at its end (no early stopping or live progress)"})
    for line in lines:
        reporter.line(line)


def execute_command(ex: Execution) -> None:
    task, channel = ex.task, ex.channel
    report_path = task.report_path or str(Path(task.log_path).with_suffix(".report.jsonl"))
    try:
        for parent in {Path(task.log_path).parent, Path(report_path).parent}:
            parent.mkdir(parents=True, exist_ok=True)
        make_workdir(task)
        Path(report_path).write_text("")
    except OSError as exc:
        if full_disk_error(exc) is None:
            raise
        channel.send(EventKind.FAILED, disk_full_data(f"cannot create {exc.filename or report_path}: {exc}",
                                                      trial_places(task)))
        return
    except WorkdirError as exc:
        channel.send(EventKind.FAILED, {"reason": str(exc), "error_type": "WorkdirError", "message": str(exc)})
        return
    added = {k: str(v) for k, v in task.env.items()}
    added.update({
        "SWEEPLAB_REPORT_FILE": report_path,
        "SWEEPLAB_SWEEP": task.sweep,
        "SWEEPLAB_TRIAL": str(task.number),
        "SWEEPLAB_ATTEMPT": str(task.attempt),
        "SWEEPLAB_CHECKPOINT_DIR": task.checkpoint_dir,
        "SWEEPLAB_KEEP_CHECKPOINTS": str(task.keep_checkpoints),
        "PYTHONUNBUFFERED": "1",
        _tree.MARK: _tree.new_mark(),      # found on every process of this attempt, even orphaned ones
    })
    verdicts: _Verdicts | None = None
    held = decision_env(task, report_path + ".verdict")
    if held:
        added.update(held)
        verdicts = _Verdicts(held["SWEEPLAB_DECISION_FILE"])
        ex.relay_go = verdicts.go   # the driver's "go on" (`Execution.go`: no Run in this process)
    if "PYTHONFAULTHANDLER" not in os.environ:   # a Python program killed by a signal writes where it died
        added["PYTHONFAULTHANDLER"] = "1"
    if task.smoke:   # a program has no run.smoke: this tells it to keep everything tiny
        added["SWEEPLAB_SMOKE"] = "1"
    if task.seed is not None:
        added["SWEEPLAB_SEED"] = str(task.seed)
    if task.checkpoint_every is not None:   # for `Run.from_env().checkpoint` (a program's own saves decide alone)
        added["SWEEPLAB_CHECKPOINT_EVERY"] = json.dumps(task.checkpoint_every)
    env = dict(os.environ)
    env.update({k: os_text(v) for k, v in added.items()})   # (the C locale cannot encode a name `café`)
    if task.cwd:   # where it runs, as after a shell's `cd` (it inherited the worker's, the sweep's directory)
        env["PWD"] = os.path.abspath(task.cwd)
    argv = list(task.command or ())
    os_argv = [os_text(a) for a in argv]
    reporter = _Reporter(channel)
    reporter.step = _first_step(task.checkpoint_dir) if task.attempt > 1 else 0
    stderr_tail = bytearray()
    with _Log(task.log_path, channel, task.log_max) as log:
        log.write(log_header(task, argv=argv, added=added))
        log.flush()
        # the reaper first: a worker killed just after the program started still leaves one to end its tree
        reaper = _tree.Reaper.start(env[_tree.MARK])
        try:
            child = subprocess.Popen(
                os_argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=task.cwd or None, env=env, start_new_session=True, preexec_fn=_tree.die_with_parent(),
            )
        except OSError as exc:
            reaper.close()
            channel.send(EventKind.FAILED, {"reason": f"cannot start {argv[0] if argv else '?'}:"
                                            f" {exc.strerror or exc}", "error_type": type(exc).__name__,
                                            "message": str(exc)})
            return
        ex.child = child
        # every process of the attempt ends with it: the backend kills this group too, the reaper the rest
        channel.send(EventKind.PROCESS, {"pid": child.pid, "pgid": child.pid})
        reaper.watch(child.pid)
        ex.liveness = _tree.Liveness(child.pid, (task.log_path, report_path), task.checkpoint_dir)
        if ex.stop_requested:
            ex.stop("stop requested")
        tail = threading.Thread(target=_tail_file, args=(report_path, reporter, child, ex, verdicts), daemon=True)
        tail.start()
        checkpoints = _CheckpointWatch(task.checkpoint_dir, channel) if task.checkpoint_dir else None
        if checkpoints is not None:
            checkpoints.start()
        write_lock = threading.Lock()   # stdout and stderr lines go to the one log, whole lines at a time
        errors = threading.Thread(target=_copy_stderr, args=(child, log, write_lock, stderr_tail, ex),
                                  daemon=True)
        errors.start()
        _copy_stdout(child, log, write_lock, ex, reporter)
        code, ex.child_rss, ex.child_cpu = _wait(child)
        reaper.close()
        errors.join(timeout=5)
        tail.join(timeout=5)
        if code == 0 and "WANDB_RUN_ID" in added and not reporter.final and _empty(report_path):
            with write_lock:
                log.flush()   # the read-back looks for the run's folder in what wandb printed
            _wandb_without_hook(reporter, env, task.cwd or os.getcwd(), task.log_path)
        if checkpoints is not None:
            checkpoints.finish()
        with write_lock:
            log.flush()
    send_profile(ex)
    if ex.preempted:
        channel.send(EventKind.PREEMPTED, {"reason": "SIGTERM (preemption)", "retire": True})
    elif _cut_short(code, reporter.signalled, ex.stop_requested):
        channel.send(EventKind.PREEMPTED, {"reason": "the program got a SIGTERM sweeplab did not send (preemption)",
                                           "retire": False})
    elif reporter.preempting and code != 0 and not ex.stop_requested:   # requeued, as W&B's sweeps do
        why = describe_exit(code)[0]
        channel.send(EventKind.PREEMPTED, {"reason": f"the program's W&B run called mark_preempting() and it {why} "
                                                     "(preemption; W&B requeues such a run)", "retire": False})
    elif code == 0 and reporter.final.get("@exit_code"):   # wandb.finish(exit_code=N): failed, as in W&B
        channel.send(EventKind.FAILED, {"reason": f"wandb.finish(exit_code={reporter.final['@exit_code']})",
                                        "error_type": "CommandFailed", "message": _log_tail(task.log_path)})
    elif code == 0 or (ex.stop_requested and code in (-signal.SIGTERM, 143)):
        from sweeplab.wandb_compat import summary_metrics

        done: dict[str, Any] = {"metrics": summary_metrics(reporter.final), "stopped": ex.stop_requested}
        if reporter.unread:   # named if the sweep's metric turns out to be missing (driver/events.py)
            done["unread_reports"] = {"count": reporter.unread, "first": reporter.first_unread}
        channel.send(EventKind.FINISHED, done)
    else:
        why, exit_code, sig = describe_exit(code)
        last, text = _stderr_summary(bytes(stderr_tail))
        if names_full_disk(last, sig):   # no fault of the trial's: the driver stops the sweep
            channel.send(EventKind.FAILED, disk_full_data(
                last or f"command {why} (a file-size limit)", trial_places(task), exit_code=exit_code, signal=sig,
                traceback=text))
            return
        from sweeplab.capture import environment_facts, source_of_argv

        channel.send(EventKind.FAILED, {"reason": f"command {why}" + (f": {last}" if last else ""),
                                        "environment": environment_facts(  # the project's git
                                            task.original_cwd or task.cwd or None,
                                            source_of_argv(argv, task.cwd or None)),
                                        "exit_code": exit_code, "signal": sig, "error_type": "CommandFailed",
                                        "message": last or f"command {why}",
                                        "traceback": text or _log_tail(task.log_path, _STDERR_BYTES),
                                        "user_error": bool(_USER_ERROR.match(last))})


def _cut_short(code: int, signalled: bool, stop_requested: bool) -> bool:
    """Whether the program ended because of a SIGTERM that sweeplab did not send (a cluster signalling the
    program itself, a `kill` by hand), as its Run noted (`Run.from_env`, an `@signal` line): a preemption,
    resumable, as a worker's SIGTERM is. The Run makes SIGTERM a stop request: the framework stops, saves and
    returns, so the program exits 0 (Lightning's `fit` raises a SystemExit without a code), and it was recorded
    `completed` with the result of the epochs it had trained. Killed by a second SIGTERM (-15), or exiting 143,
    it is one too. A stop sweeplab asked for (a prune, `sweeplab stop`, the budget) is not one; nor is a
    program without a Run killed by a SIGTERM from outside: that stays a failure, retried as `trial.retries`
    says (a preemption is requeued without limit, and such a program may signal itself)."""
    return signalled and not stop_requested and code in (0, -signal.SIGTERM, 143)


#: the last line of a Python traceback ending in a sweeplab user-input error (a config key the program reads
#: that is missing, a bad override): its message says it all, where a bug in the program needs its traceback
_USER_ERROR = re.compile(
    r"(rank \d+: )?sweeplab(\.\w+)*\.(UserError|SpecError|ConfigError|ConfigKeyError|MissingExtraError): ")
_STDERR_KEEP = 64 << 10  # the end of a command trial's stderr kept in memory for its failure reason ...
_STDERR_BYTES = 2000    # ... of which at most this much (the last traceback, or the last lines) is reported
_REASON_LINE = 300      # the last line of stderr, as it appears in the one-line reason


_LINE_MAX = 1 << 20      # a stdout line longer than this goes to the log in pieces (and is no report line)
_REPORT = b"@sweeplab "


def _chunks(fd: int) -> Iterator[bytes]:
    """What a pipe brings, 64 KiB at most at a time, until its end (or an error reading it)."""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            return
        if not chunk:
            return
        yield chunk


def _wait(child: subprocess.Popen[bytes]) -> tuple[int, int, float]:
    """The program's exit code, peak RSS (bytes; 0 if unknown) and CPU seconds, waited for with `wait4`: the
    figures of a program that ended before the sampler's first look."""
    try:
        _, status, usage = os.wait4(child.pid, 0)
    except ChildProcessError:   # reaped by a concurrent poll(): Popen has its code
        return child.wait(), 0, 0.0
    child.returncode = os.waitstatus_to_exitcode(status)
    peak = usage.ru_maxrss if sys.platform == "darwin" else usage.ru_maxrss * 1024
    return child.returncode, peak, usage.ru_utime + usage.ru_stime


def _copy_stdout(child: subprocess.Popen[bytes], log: _Log, lock: threading.Lock, ex: Execution,
                 reporter: _Reporter) -> None:
    """Copy a command's stdout into its log, whole lines at a time, reading its `@sweeplab` report lines.

    Read in chunks, not lines: memory stays bounded whatever the program writes (a line of gigabytes without
    a newline, binary data): a line longer than _LINE_MAX is written out in pieces as it comes."""
    assert child.stdout is not None
    pending = bytearray()
    cut = False        # the line at the start of `pending` began in a piece already written out
    for chunk in _chunks(child.stdout.fileno()):
        pending += chunk
        end = pending.rfind(b"\n") + 1
        if end:
            block = bytes(pending[:end])
            del pending[:end]
            with lock:
                log.write(block)
                ex.output += 1
            if _REPORT in block:
                lines = block.split(b"\n")[:-1]
                for raw in lines[1:] if cut else lines:
                    if raw.startswith(_REPORT):
                        reporter.line(raw[len(_REPORT):].decode(errors="replace"))
            cut = False
        if len(pending) > _LINE_MAX:
            with lock:
                log.write(bytes(pending))
                ex.output += 1
            pending.clear()
            cut = True
    if pending:   # a last line without a newline
        with lock:
            log.write(bytes(pending))
            ex.output += 1
        if not cut and pending.startswith(_REPORT):
            reporter.line(pending[len(_REPORT):].decode(errors="replace"))


def _copy_stderr(child: subprocess.Popen[bytes], log: _Log, lock: threading.Lock, tail: bytearray,
                 ex: Execution) -> None:
    """Copy a command's stderr into its log as it comes (in chunks, not lines: a progress bar redrawn with
    carriage returns is one endless line), keeping its end for the failure reason."""
    assert child.stderr is not None
    for chunk in _chunks(child.stderr.fileno()):
        with lock:   # a log that cannot be written (closed, a full disk) drops it: the pipe is still drained
            log.write(chunk)
            ex.output += 1   # a sign of life (backends/_tree.py) also when the log cannot show it
        tail += chunk
        if len(tail) > _STDERR_KEEP:
            del tail[:len(tail) - _STDERR_KEEP]


def _stderr_summary(data: bytes) -> tuple[str, str]:
    """(the last non-empty line, the last traceback or else the last 20 lines) of a command's stderr,
    bounded: what says why a command trial failed without opening its log. A multi-process program's ranks
    (torch.distributed prefixes their tracebacks with `[rankN]: `) are one stderr: see `_first_rank_error`."""
    lines = data.decode(errors="replace").replace("\r\n", "\n").split("\n")
    if len(data) >= _STDERR_KEEP:
        lines = lines[1:]                             # the first line was cut
    text = [ln.rsplit("\r", 1)[-1] for ln in lines]  # what a terminal shows of a line redrawn with \r
    while text and not text[-1].strip():
        text.pop()
    fatal = max((i for i, ln in enumerate(text) if ln.startswith("Fatal Python error: ")), default=None)
    ranked = _first_rank_error(text) if fatal is None else None
    if ranked is not None:
        last, block = ranked
        shown = "\n".join(block).strip("\n")
    else:
        start = fatal if fatal is not None else \
            max((i for i, ln in enumerate(text) if ln.startswith("Traceback (most recent call last)")),
                default=max(0, len(text) - 20))
        shown = "\n".join(text[start:]).strip("\n")
        # faulthandler's dump (a segfault) ends with the list of extension modules: its first line says what
        # happened
        last = text[fatal].strip() if fatal is not None else \
            next((ln.strip() for ln in reversed(text) if ln.strip()), "")
    if len(shown) > _STDERR_BYTES:
        shown = "...\n" + shown[-_STDERR_BYTES:].split("\n", 1)[-1]
    if len(last) > _REASON_LINE:
        last = last[:_REASON_LINE] + "..."
    return last, shown


_RANK_LINE = re.compile(r"\[rank(\d+)\]: ?(.*)")   # torch.distributed's excepthook prefix, on every line


def _first_rank_error(text: list[str]) -> tuple[str, list[str]] | None:
    """("rank N: <its error line>", rank N's traceback) for the rank whose fatal traceback came first, in a
    stderr that torch.distributed's ranks share (a program launching its own ranks: Lightning's `strategy="ddp"`,
    torchrun, mp.spawn). The rank that broke prints first; the others then fail in consequence ("Connection
    closed by peer ... typically caused by a remote worker crashing"), and the last line of stderr, which was
    the reason, is theirs. None when no rank printed a traceback."""
    ends: dict[int, int] = {}   # rank -> where its last traceback starts
    for i, ln in enumerate(text):
        m = _RANK_LINE.match(ln)
        if m and m.group(2).startswith("Traceback (most recent call last)"):
            ends[int(m.group(1))] = i
    if not ends:
        return None
    rank, start = min(ends.items(), key=lambda kv: kv[1])
    block = [m.group(2) for ln in text[start:] if (m := _RANK_LINE.match(ln)) and int(m.group(1)) == rank]
    while block and not block[-1].strip():
        block.pop()
    error = block[-1].strip() if block else ""
    return f"rank {rank}: {error}", [f"[rank{rank}]: {ln}" for ln in block]


def _first_step(root: str | None) -> int:
    """The implicit step of a retried attempt's first report without a step: the one after the newest checkpoint
    its program finds (`CheckpointManager` under SWEEPLAB_CHECKPOINT_DIR; manifests only, nothing loaded). From
    0 again, the attempt's reports went over the history its earlier attempts had reported (the latest
    attempt's value wins at a step)."""
    if not root:
        return 0
    from sweeplab.checkpoint import CheckpointManager

    try:
        listed = CheckpointManager(root).list()
    except Exception:   # a directory it cannot read: the program will not restore from it either
        return 0
    steps = [i.step for i in listed if isinstance(i.step, int) and not isinstance(i.step, bool)]
    return steps[-1] + 1 if steps else 0


class _CheckpointWatch:
    """A command program's checkpoints (`CheckpointManager`'s layout under SWEEPLAB_CHECKPOINT_DIR) as the
    CHECKPOINT events a function trial's `run.checkpoint` sends, so that the store lists them in the same way:
    each new checkpoint once its manifest is in place, and those that went away (the program's retention) as
    `removed`. The checkpoints already there when the attempt starts are its earlier attempts' (listed)."""

    _EVERY = 0.5          # seconds between looks at a local directory ...
    _EVERY_URL = 5.0      # ... and at one behind a URL (a listing is a request)

    def __init__(self, root: str, channel: Channel) -> None:
        self.root, self.channel = root, channel
        self.known = self._scan()
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def _scan(self) -> dict[str, Any]:
        from sweeplab.checkpoint import CheckpointManager

        try:
            return {info.path: info for info in CheckpointManager(self.root).list()}
        except Exception:   # a directory it cannot read now: look again later
            return getattr(self, "known", {})

    def check(self) -> None:
        with self.lock:
            self._check()

    def _check(self) -> None:
        now = self._scan()
        gone = [p for p in self.known if p not in now]
        new = [info for p, info in now.items() if p not in self.known]
        self.known = now
        for info in new:
            self.channel.send(EventKind.CHECKPOINT, {
                "step": info.step, "path": info.path, "checksum": info.checksum, "bytes": info.bytes,
                "seconds": info.seconds, "format": info.format, "removed": gone})
            gone = []
        if gone:
            self.channel.send(EventKind.CHECKPOINT, {"path": None, "removed": gone})

    def start(self) -> None:
        self.thread = threading.Thread(target=self._watch, daemon=True, name="sweeplab-checkpoints")
        self.thread.start()

    def _watch(self) -> None:
        every = self._EVERY_URL if "://" in self.root else self._EVERY
        while not self.done.wait(every):
            self.check()

    def finish(self) -> None:
        """The program is gone: a last look, so that its last checkpoints are listed before the attempt ends."""
        self.done.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
        self.check()


def _tail_file(path: str, reporter: _Reporter, child: subprocess.Popen[bytes], ex: Execution | None = None,
               verdicts: _Verdicts | None = None) -> None:
    with open(path, "rb") as fh:
        pending = b""
        while True:
            if verdicts is not None and ex is not None and ex.stop_requested:   # stopped: a verdict too
                verdicts.stop("stop requested")
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
            else:   # a program held at its rungs waits for its report to be read: a shorter look
                time.sleep(0.05 if verdicts is None else 0.01)
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

