"""A function trial: the trial function called in this process, its output sent to the trial's log."""

from __future__ import annotations

import _signal
import contextlib
import errno
import os
import signal
import sys
import threading
from collections.abc import Mapping
from functools import cache
from typing import Any

from sweeplab._process import os_text
from sweeplab.backends._diskfull import disk_full_data, full_disk_error, trial_places
from sweeplab.backends.events import EventKind
from sweeplab.backends.execution import Execution, LogCap, log_header, make_workdir, redirect_output, send_profile
from sweeplab.backends.targets import call_trial, load_target, seed_everything, takes_run, trial_facts, trial_traceback
from sweeplab.run import Run

__all__ = ["execute_function"]


def _load_captures(replay: Any) -> dict[str, Any]:
    if not replay or not replay.get("capture"):
        return {}
    from sweeplab.capture import load_captures

    return load_captures(replay["capture"])


_LIMITS = ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_RSS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC",
           "RLIMIT_STACK", "RLIMIT_CORE", "RLIMIT_MEMLOCK")


def _raw_environ() -> dict[Any, Any] | None:
    """A copy of os.environ's encoded mapping (CPython's `_data`), which compares without decoding every
    variable (~25 µs a trial for `dict(os.environ)`); None where it is not there."""
    data = getattr(os.environ, "_data", None)
    return dict(data) if isinstance(data, dict) else None


class _ProcessState:
    """What a trial function may change in its process and the next trial in this worker must not see: the
    environment, sys.path, the umask, the signal handlers (the worker's SIGTERM handler makes a stop a
    preemption), the resource limits (an RLIMIT_AS a trial set to bound its memory) and the working directory.
    Taken before the trial, put back after it; what cannot be put back (a hard limit lowered, a nice value
    raised) makes the worker retire."""

    def __init__(self) -> None:
        self.cwd = os.getcwd()
        self.raw_env = _raw_environ()
        self._env = dict(os.environ) if self.raw_env is None else None
        self.path = list(sys.path)
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.handlers: dict[int, Any] = {}
        # the standard signals, as plain numbers (signal.valid_signals() alone took ~0.1 ms a trial); a real-time
        # signal's handler is left to the trial that sets it
        for sig in range(1, getattr(signal, "SIGRTMIN", signal.NSIG)):
            try:
                self.handlers[sig] = _signal.getsignal(sig)
            except (ValueError, OSError):
                continue
        self.threads = {t for t in threading.enumerate() if not t.daemon}
        self.limits: dict[int, tuple[int, int]] = {}
        self.nice: int | None = None
        with contextlib.suppress(Exception):
            import resource

            for name in _LIMITS:
                if hasattr(resource, name):
                    self.limits[getattr(resource, name)] = resource.getrlimit(getattr(resource, name))
            self.nice = os.getpriority(os.PRIO_PROCESS, 0)

    def restore(self) -> bool:
        """Put the state back; False if some of it could not be (the worker should not run another trial)."""
        whole = True
        with contextlib.suppress(Exception):
            import resource

            for res, limit in self.limits.items():
                if resource.getrlimit(res) != limit:
                    try:
                        resource.setrlimit(res, limit)
                    except (ValueError, OSError):
                        whole = False
            if self.nice is not None and os.getpriority(os.PRIO_PROCESS, 0) != self.nice:
                try:
                    os.setpriority(os.PRIO_PROCESS, 0, self.nice)
                except OSError:
                    whole = False
        with contextlib.suppress(OSError):
            os.chdir(self.cwd)
        self._restore_env()
        sys.path[:] = self.path
        os.umask(self.umask)
        if threading.current_thread() is threading.main_thread():
            for sig, handler in self.handlers.items():
                if handler is not None and _signal.getsignal(sig) is not handler:
                    with contextlib.suppress(ValueError, OSError, TypeError):
                        signal.signal(sig, handler)
        return whole

    def _restore_env(self) -> None:
        """Put back the variables that changed (the task's own, always; what the trial set or removed), and
        only those: decoding the whole environment to compare it cost more than the rest of a no-op trial."""
        was, now = self.raw_env, _raw_environ()
        if was is None or now is None:   # not CPython's os.environ: compare it decoded
            env = self._env or {}
            if dict(os.environ) != env:
                for key in set(os.environ) - set(env):
                    os.environ.pop(key, None)
                os.environ.update(env)
            return
        decode_key = getattr(os.environ, "decodekey", os.fsdecode)
        decode_value = getattr(os.environ, "decodevalue", os.fsdecode)
        for key in now.keys() - was.keys():
            os.environ.pop(decode_key(key), None)
        for key, value in was.items():
            if now.get(key) != value:
                os.environ[decode_key(key)] = decode_value(value)

    @staticmethod
    def fds_used_up() -> bool:
        """Whether the trial left the lower half of the process's file descriptors all open (a leak, which opens
        them in order, or all of them used up): the next trial on this worker would fail opening its log."""
        try:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            free = os.dup(2)   # the lowest free descriptor: every one below it is open (2 syscalls, where
            os.close(free)     # listing /proc/self/fd cost 8 µs a trial)
            return soft != resource.RLIM_INFINITY and free >= soft // 2
        except OSError as exc:   # none left to open
            return exc.errno in (errno.EMFILE, errno.ENFILE)
        except Exception:
            return False

    def threads_left(self) -> bool:
        """Whether the trial left a thread of its own running that would keep going in the next trial."""
        return any(t.is_alive() and not t.daemon and t not in self.threads for t in threading.enumerate())


_PR_SET_CHILD_SUBREAPER = 36


@cache
def _prctl() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


def _subreaper(on: bool) -> None:
    """Make this process the one an orphaned descendant is given to (Linux), instead of init: a daemon the
    trial detached (setsid and a double fork) stays a descendant that `_end_leftovers` finds. On only while a
    function runs: a command trial's orphans are its reaper's to end (backends/_tree.py)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        _prctl()(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def _has_children() -> bool:
    """Whether this process has a child, alive or not yet waited for (one system call: psutil's search of the
    whole process table for descendants cost a millisecond at every trial's end). With the subreaper on while
    the function ran, every descendant it left is a child's, or a child itself. True when it cannot say."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    except (OSError, AttributeError):   # no waitid (not POSIX)
        return True
    return True


def _end_leftovers(ex: Execution, pid: int) -> None:
    """What the trial left running ends with it. In a child the function forked and that came back here (it
    returned or raised instead of calling os._exit), nothing is sent: it ends at once, as its parent speaks
    for the trial. In the worker, every process the attempt started and left running (forked children,
    subprocesses) is killed before the trial's end is sent, and the worker retires: it is not reused."""
    if os.getpid() != pid:
        os._exit(0)
    _subreaper(False)
    if not _has_children():
        return
    _stop_loky()
    try:
        import psutil

        children = psutil.Process(pid).children(recursive=True)
    except Exception:
        return
    if not children:
        return
    for child in children:
        with contextlib.suppress(Exception):
            child.kill()
    with contextlib.suppress(Exception):
        psutil.wait_procs(children, timeout=5)
    ex.retiring = True


def _stop_loky() -> None:
    """Shut down joblib's process pool and its resource tracker, which a trial using `n_jobs=-1` (sklearn's
    `cross_val_score`, joblib's `Parallel`, as Optuna's sklearn examples do) leaves running for reuse: killed
    as leftovers, the worker's exit found the tracker dead, relaunched it and printed a KeyError traceback per
    semaphore and "resource_tracker: process died unexpectedly" to the sweep's terminal after every trial."""
    if "joblib.externals.loky" not in sys.modules:
        return
    with contextlib.suppress(Exception):
        from joblib.externals.loky import reusable_executor

        executor = reusable_executor._executor
        if executor is not None:   # joblib's MemmappingExecutor: terminate also unregisters its temp folders
            getattr(executor, "terminate", executor.shutdown)()
            reusable_executor._executor = None
    with contextlib.suppress(Exception):
        from joblib.externals.loky.backend import resource_tracker

        stop = getattr(resource_tracker._resource_tracker, "_stop", None)
        if callable(stop):
            stop()


def _chdir(path: str) -> None:
    """Into the trial's working directory, with PWD saying so (as a shell's `cd` does): a shell or a tool the
    function starts reads $PWD, which otherwise named the worker's old directory. The worker restores its
    environment after the trial."""
    os.chdir(path)
    os.environ["PWD"] = os.path.abspath(path)


def _log_traceback(exc: BaseException, cap: LogCap | None) -> None:
    """Write the trial's traceback to its log (fd 2), after what it printed (not while `cap` cuts the log: what
    is written then may be lost)."""
    with contextlib.suppress(Exception):
        text = trial_traceback(exc).encode(errors="backslashreplace")
        with cap.holding() if cap is not None else contextlib.nullcontext():
            sys.stderr.flush()
            os.write(2, text)


def execute_function(ex: Execution) -> None:
    task, channel = ex.task, ex.channel
    pid = os.getpid()
    run: Run | None = None
    fn: Any = None
    building = False
    wandb_final: dict[str, Any] = {}
    wandb: Any = None   # the trial's W&B side (wandb_compat.FunctionTrial), if it may start W&B runs
    # what a failure's report needs, imported before the trial can use up its file descriptors: imported then, a
    # trial that leaked them all died as a bare "killed by SIGABRT"
    import sweeplab.capture  # noqa: F401
    try:
        with redirect_output(task.log_path, log_header(task) if task.log_path else b"", task.log_max) as cap:
            ex.log_cap = cap
            before = _ProcessState()
            _subreaper(True)
            os.environ.update({k: os_text(str(v)) for k, v in task.env.items()})
            try:
                own_dir = bool(task.cwd and task.original_cwd) and task.cwd != task.original_cwd   # workdir: trial
                if task.cwd and not own_dir:
                    _chdir(task.cwd)
                if task.wandb is not None:   # before the import: W&B scripts call wandb there
                    from sweeplab.wandb_compat import FunctionTrial

                    wandb = FunctionTrial(task.wandb)
                if own_dir:   # the module is imported (its top level run) in the sweep's directory, as every
                    # trial's is otherwise and as a forked worker's preload was; the function runs in its own
                    os.chdir(task.original_cwd)
                    fn = load_target(task.target or "", list(task.python_path))
                    make_workdir(task)   # here, not in the driver: on Ray, on the trial's node
                    _chdir(task.cwd)
                else:
                    fn = load_target(task.target or "", list(task.python_path))
                from sweeplab.config import coerce

                building = True       # a ConfigError from here on is bad input: the config cannot be built
                config = coerce(dict(task.config), trial_facts(fn)[0])
                building = False
                run = Run(
                    config=config, sink=channel.send, params=task.params, sweep=task.sweep,
                    trial=task.number, attempt=task.attempt, seed=task.seed, smoke=task.smoke,
                    smoke_steps=task.smoke_steps, checkpoint_dir=task.checkpoint_dir,
                    keep_checkpoints=task.keep_checkpoints, checkpoint_every=task.checkpoint_every,
                    mtbf=task.mtbf, captured=_load_captures(task.replay),
                    rank=int(os.environ.get("RANK", "0")), world_size=int(os.environ.get("WORLD_SIZE") or 1),
                    torch_profiler=task.torch_profiler,
                    artifacts_dir=task.artifacts_dir, decision_steps=task.decision_steps,
                    decision_metric=task.decision_metric, decision_reports=task.decision_reports,
                    original_cwd=task.original_cwd or os.getcwd(),
                )
                ex.run = run
                if ex.stop_requested:
                    run.request_stop("stop requested")
                if task.seed is not None:
                    seed_everything(task.seed)
                if wandb is not None:   # wandb.init()/log in the function reach the run (a W&B-style function's;
                    wandb_final = wandb.final   # one given the Run reports through it: its W&B runs are its own)
                    result = wandb.call(lambda: call_trial(fn, config, run), run.log, lambda: run.should_stop,
                                        mirror=not takes_run(fn))
                else:
                    result = call_trial(fn, config, run)
            except BaseException as exc:
                if task.log_path and not ex.preempted and not isinstance(exc, SystemExit):   # the log ends with
                    _log_traceback(exc, cap)   # it, as `python train.py` would (inside the cap: its beginning, its end)
                raise
            finally:
                if wandb is not None:   # the W&B environment its wandb.init set, if any, goes
                    wandb.end()
                whole = before.restore()
                ex.retiring = ex.retiring or not whole or before.threads_left() or before.fds_used_up()
        run.flush()
        _end_leftovers(ex, pid)
        send_profile(ex)
        if ex.preempted:
            channel.send(EventKind.PREEMPTED, {"reason": "SIGTERM (preemption)", "retire": True})
            return
        from sweeplab.run import objective_from, unusable_returns

        metrics, _ = objective_from(result, None)
        unusable = unusable_returns(result)
        if wandb_final:
            from sweeplab.wandb_compat import summary_metrics

            # its W&B runs' summary wins over what it returns, as W&B's agent ignores the return
            metrics = {**metrics, **summary_metrics(wandb_final)}
        finished = {"metrics": metrics, "stopped": run.should_stop, "retire": ex.decide_retire()}
        if result is not None and not isinstance(result, Mapping) and not unusable:
            finished["scalar"] = True   # a bare number: the sweep's metric (the driver knows its name)
        if unusable:   # named where a metric is missing: it was returned, not as a number
            finished["unusable"] = unusable
            if "" in unusable:
                channel.send(EventKind.NOTE, {"level": "warning", "kind": "warning", "message": (
                    f"the trial returned {unusable['']}: neither a number nor a mapping of metrics, so nothing of "
                    "it was recorded (return a float, or a dict like {'loss': 0.1})")})
        if run.smoke_ended is not None:
            finished["smoke_ended"] = run.smoke_ended
        nonfinite = run.nonfinite_captures
        if nonfinite is not None and task.capture_dir:   # a NaN loss's input, for repro (on every rank: the NaN
            # may come from any rank's share of the batch; backends/multiproc.py links them to rank 0's)
            with contextlib.suppress(Exception):
                from sweeplab.capture import save_captures

                finished["capture"] = save_captures(nonfinite["objects"], task.capture_dir, nonfinite={
                    "step": nonfinite["step"], "metric": nonfinite["metric"], "value": nonfinite["value"]})
        if run.pruned is not None or run.suggested:   # a define-by-run trial (Optuna objective)
            finished.update(pruned=run.pruned, params=run.suggested)
        channel.send(EventKind.FINISHED, finished)
    except BaseException as exc:   # a KeyboardInterrupt too: workers and ranks ignore SIGINT (Ctrl-C is the
        # driver's), so one here is the function's own, a failure of the trial like any other exception
        if run is not None:
            with contextlib.suppress(Exception):
                run.flush()
        _end_leftovers(ex, pid)
        send_profile(ex)
        if ex.preempted:
            channel.send(EventKind.PREEMPTED, {"reason": "SIGTERM (preemption)", "retire": True})
            return
        if wandb_final.get("@preempting") and not ex.stop_requested:   # requeued, as W&B requeues such a run
            channel.send(EventKind.PREEMPTED, {"reason": f"the function's W&B run called mark_preempting() and it "
                                                         f"raised {type(exc).__name__} (preemption; W&B requeues "
                                                         "such a run)", "retire": False})
            return
        from sweeplab.capture import (
            environment_facts,
            exception_message,
            failure_reason,
            save_captures,
            source_of_function,
        )

        if full_disk_error(exc) is not None:   # no fault of the trial's: the driver stops the sweep
            channel.send(EventKind.FAILED, disk_full_data(
                exception_message(exc) or type(exc).__name__, trial_places(task),
                traceback=trial_traceback(exc)[-20000:]))
            return
        tb = trial_traceback(exc)
        capture_ref = None

        loading = run.loading_failure(exc) if run is not None else None   # the loader failed, not the body
        if run is not None and run.captures and task.capture_dir:
            with contextlib.suppress(Exception):
                capture_ref = save_captures(run.captures, task.capture_dir,
                                            stale=loading["stale"] if loading else (), loading=loading)
        from sweeplab.errors import ConfigError, UserError

        data = {
            "environment": environment_facts(task.original_cwd or task.cwd or None,   # the project's git
                                             source_of_function(fn) if fn else None),
            "reason": failure_reason(exc, loading),
            "error_type": type(exc).__name__, "message": exception_message(exc)[:2000], "traceback": tb[-20000:],
            "capture": capture_ref, "retire": ex.decide_retire(),
            # a mistake in the input (a config key the trial reads that is missing, a bad override): its
            # message says it all, where a bug in the trial's code needs its traceback
            "user_error": isinstance(exc, UserError),
        }
        if loading is not None:
            data["loading"] = {"loop": loading["loop"], "batch": loading["batch"]}
        if run is not None and run.suggested:
            data["params"] = run.suggested
        if building and isinstance(exc, ConfigError):   # deterministic: the driver never retries it
            data.update(bad_input=True, key=exc.key, message=str(exc))
        channel.send(EventKind.FAILED, data)

