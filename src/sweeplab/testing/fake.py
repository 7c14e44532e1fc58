"""A scripted, in-process backend on a fake clock: driver tests that simulate hours in milliseconds.

`FakeBackend` runs no process. Each attempt follows a `Script`: timed steps that emit the events a real
worker would (STARTED, METRICS, CHECKPOINT, FINISHED, FAILED, PREEMPTED, heartbeats), with the data shapes of
backends/worker.py and backends/local.py. `poll(timeout)` moves the shared `FakeClock` to the next scripted
moment (at most `timeout` ahead) instead of sleeping, so the driver's watchdog sees time pass exactly as
scripted. Every call the driver makes (submit, stop, go, preempt, kill, ...) is recorded in `calls`.

    clock = FakeClock()
    curve = Script().reports("loss", [0.9, 0.5, 0.3], every=60.0).finish()
    backend = FakeBackend(clock, lambda task: curve, slots=2)
    driver = Driver(spec, store, backend, sweep_name="demo", clock=clock)   # spec: budget.trials 4
    driver.create(spec_path=None)
    driver.run()                                  # three simulated minutes per trial, no sleeping
    assert [c.number for c in backend.calls_to("submit")] == [0, 1, 2, 3]

How a scripted trial answers the driver (as the worker does):
    stop       it returns `stop_delay` seconds later: FINISHED {"stopped": True} with its last reported
               values; never with `.ignore_stop()` or once hung
    preempt    SIGTERM: it returns the same way but ends PREEMPTED; if it has not ended within the task's
               grace, PREEMPTED "grace expired"; a hung trial ignores it
    kill       FAILED "<reason> (killed by signal SIGKILL)", error_type "Killed", at the next poll
    go         a trial waiting at a decision step (task.decision_steps) goes on; one the driver never
               answers goes on after `DECISION_WAIT` seconds, as `Run` does
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sweeplab._clock import FakeClock
from sweeplab.backends.base import Backend, TrialTask
from sweeplab.backends.events import Event, EventKind, describe_exit
from sweeplab.errors import BackendError
from sweeplab.run import DecisionPoints

__all__ = ["DECISION_WAIT", "Call", "FakeBackend", "Script", "Step"]

#: how long a trial waits at a decision step for go / stop before going on (run.py's _DECISION_WAIT)
DECISION_WAIT = 10.0
_INF = float("inf")
#: moments closer than this are one (scripted times are sums of floats: rounding must not split a moment)
_EPS = 1e-6


@dataclass(frozen=True)
class Step:
    """One scripted moment: `after` seconds after the previous step (or the attempt's start), do `op`."""

    after: float
    op: str                      # metrics | event | checkpoint | finish | fail | crash | preempt | hang
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Script:
    """What one attempt does, step by step. Immutable: every method returns a longer copy.

    A script that runs out of steps returns normally (FINISHED with its last reported values).
    """

    steps: tuple[Step, ...] = ()
    stop_delay: float = 0.0      # seconds from a stop / SIGTERM to the trial's return
    ignores_stop: bool = False   # the trial never checks should_stop (only a kill, or grace expiry, ends it)

    def _then(self, after: float, op: str, **data: Any) -> Script:
        if after < 0:
            raise ValueError(f"a step cannot come before the previous one (after={after})")
        return replace(self, steps=(*self.steps, Step(float(after), op, data)))

    def metrics(self, step: int, values: Mapping[str, float], *, after: float = 1.0) -> Script:
        """`run.log(values, step=step)`: one METRICS event (with "decide" at a decision step)."""
        return self._then(after, "metrics", step=int(step), values=dict(values))

    def reports(self, key: str, values: Iterable[float], *, every: float = 1.0, start: int = 0) -> Script:
        """One report of `key` per step from `start`, `every` seconds apart (a learning curve)."""
        out = self
        for i, v in enumerate(values):
            out = out.metrics(start + i, {key: v}, after=every)
        return out

    def checkpoint(self, step: int, *, after: float = 0.0, seconds: float = 0.01) -> Script:
        """`run.checkpoint(..., step=step)`: a CHECKPOINT event under the task's checkpoint_dir."""
        return self._then(after, "checkpoint", step=int(step), seconds=seconds)

    def event(self, kind: EventKind, data: Mapping[str, Any] | None = None, *, after: float = 0.0) -> Script:
        """Any other event as is (NOTE, ARTIFACT, SYSTEM, PROFILE)."""
        return self._then(after, "event", kind=EventKind(kind), data=dict(data or {}))

    def finish(self, metrics: Mapping[str, float] | None = None, *, after: float = 0.0) -> Script:
        """The trial returns `metrics` (None: the last reported value of each key)."""
        return self._then(after, "finish", metrics=None if metrics is None else dict(metrics))

    def fail(self, error_type: str = "RuntimeError", message: str = "planted failure", *,
             after: float = 0.0) -> Script:
        """The trial raises `error_type(message)`. The same type and message on two attempts is what the
        driver calls a deterministic failure."""
        return self._then(after, "fail", error_type=error_type, message=message)

    def disk_full(self, message: str = "cannot write checkpoint under /ckpt: [Errno 28] No space left on device",
                  *, after: float = 0.0) -> Script:
        """The trial finds its disk full (a checkpoint, a write of its own): FAILED marked `disk_full`, as the
        worker sends it (backends/_diskfull.py)."""
        return self._then(after, "disk_full", message=message)

    def crash(self, *, exit_code: int | None = None, sig: int | None = None, after: float = 0.0) -> Script:
        """The worker process dies (os._exit(code) or a signal such as SIGSEGV): FAILED "WorkerDied"."""
        if (exit_code is None) == (sig is None):
            raise ValueError("crash needs exactly one of exit_code and sig")
        return self._then(after, "crash", code=exit_code if sig is None else -int(sig))

    def preempt(self, *, after: float = 0.0) -> Script:
        """A spot reclaim: SIGTERM reaches the worker here (as `FakeBackend.preempt` would)."""
        return self._then(after, "preempt")

    def hang(self, *, after: float = 0.0) -> Script:
        """The process freezes (SIGSTOP, a wedged C call): no more events, not even heartbeats."""
        return self._then(after, "hang")

    def ignore_stop(self) -> Script:
        """The trial never checks should_stop: a stop does nothing, SIGTERM ends it only at grace expiry."""
        return replace(self, ignores_stop=True)

    def on_stop(self, *, after: float) -> Script:
        """The trial returns `after` seconds after a stop / SIGTERM (it notices should_stop late)."""
        return replace(self, stop_delay=float(after))


@dataclass(frozen=True)
class Call:
    """One call the driver made: `op` is start | submit | stop | go | preempt | kill | shutdown.

    `arg` is the TrialTask for submit, the step for go, the reason for kill, the grace for shutdown."""

    op: str
    at: float                    # clock.monotonic() of the call
    trial: int | None = None     # trial id (store row)
    number: int | None = None    # trial number
    attempt: int | None = None
    arg: Any = None


@dataclass
class _Attempt:
    task: TrialTask
    script: Script
    wake: float                               # when STARTED is sent
    started: bool = False
    index: int = 0                            # next step
    due: float | None = None                  # when steps[index] runs (None: waiting or hung)
    heartbeat: float | None = None
    stop_requested: bool = False
    preempting: bool = False
    end_at: float | None = None               # a stop / SIGTERM makes the trial return then
    grace_expiry: float | None = None         # SIGTERM's grace timer (the worker's _grace_expired)
    waiting: int | None = None                # the decision step it waits at
    decide: DecisionPoints | None = None      # which reports wait (Run.log's rule), made at the first report
    wait_until: float = _INF
    hung: bool = False
    kill_reason: str | None = None
    last: dict[str, float] = field(default_factory=dict)

    def next_time(self) -> float:
        if self.kill_reason is not None or not self.started:
            return self.wake
        if self.hung:
            return _INF
        times = [t for t in (self.due, self.heartbeat, self.end_at, self.grace_expiry) if t is not None]
        if self.waiting is not None:
            times.append(self.wait_until)
        return min(times, default=_INF)


class FakeBackend(Backend):
    """A backend whose trials follow scripts on a `FakeClock` (see the module docstring).

    `scripts` is one Script for every attempt, or a function of the TrialTask (task.number, task.attempt,
    task.params, ...) returning one. `max_polls` bounds a test whose driver never ends (AssertionError).
    """

    name = "fake"

    def __init__(self, clock: FakeClock, scripts: Script | Callable[[TrialTask], Script], *, slots: int = 1,
                 supports_decisions: bool = True, max_polls: int | None = 100_000) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1; got {slots}")
        self.max_polls = max_polls          # a driver that never ends fails the test instead of hanging it
        self.polls = 0
        self.clock = clock
        self._scripts = scripts
        self.slots = slots
        self.supports_decisions = supports_decisions
        self.calls: list[Call] = []
        self.events: list[Event] = []        # every event poll returned, in order
        self._running: dict[int, _Attempt] = {}
        self._tasks: dict[int, TrialTask] = {}   # the latest task of each trial id
        self._pid = 10_000
        self._actions: list[tuple[float, Callable[[], None]]] = []

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Call `action` from `poll` once the clock's monotonic time reaches `when` (before that poll's
        events). Simulates what happens outside the trials: a Ctrl-C (`os.kill(os.getpid(), SIGINT)`),
        a driver killed mid-sweep (an action that raises), a user's stop."""
        self._actions.append((float(when), action))
        self._actions.sort(key=lambda x: x[0])

    # ----------------------------------------------------------------------------- the record
    def calls_to(self, op: str) -> list[Call]:
        """The recorded calls of one kind, in order."""
        return [c for c in self.calls if c.op == op]

    @property
    def tasks(self) -> list[TrialTask]:
        """Every submitted task, in order."""
        return [c.arg for c in self.calls_to("submit")]

    def _record(self, op: str, trial_id: int | None = None, arg: Any = None) -> None:
        task = arg if isinstance(arg, TrialTask) else self._tasks.get(trial_id) if trial_id is not None else None
        self.calls.append(Call(op, self.clock.monotonic(), trial_id, task.number if task else None,
                               task.attempt if task else None, arg))

    # ----------------------------------------------------------------------------- Backend
    def start(self) -> None:
        self._record("start")

    def free_slots(self) -> int:
        return self.slots - len(self._running)

    def capacity(self) -> int:
        return self.slots

    def running(self) -> list[int]:
        return list(self._running)

    def submit(self, task: TrialTask) -> None:
        if self.free_slots() <= 0:
            raise BackendError("submit() called with no free slot")
        if task.trial_id in self._running:
            raise BackendError(f"trial {task.trial_id} already has an attempt running")
        self._tasks[task.trial_id] = task
        self._record("submit", task.trial_id, task)
        script = self._scripts(task) if callable(self._scripts) else self._scripts
        self._running[task.trial_id] = _Attempt(task, script, wake=self.clock.monotonic())

    def stop(self, trial_id: int) -> None:
        self._record("stop", trial_id)
        a = self._running.get(trial_id)
        if a is not None:
            self._request_stop(a)

    def go(self, trial_id: int, step: int) -> None:
        self._record("go", trial_id, step)
        a = self._running.get(trial_id)
        if a is not None and a.waiting is not None and step >= a.waiting:
            self._go_on(a, self.clock.monotonic())

    def preempt(self, trial_id: int) -> None:
        self._record("preempt", trial_id)
        a = self._running.get(trial_id)
        if a is not None:
            self._sigterm(a, self.clock.monotonic())

    def kill(self, trial_id: int, reason: str) -> None:
        self._record("kill", trial_id, reason)
        a = self._running.get(trial_id)
        if a is not None and a.kill_reason is None:
            a.kill_reason = reason
            a.wake = self.clock.monotonic()

    def shutdown(self, *, grace: float = 0.0) -> None:
        self._record("shutdown", arg=grace)
        self._running.clear()

    def poll(self, timeout: float) -> list[Event]:
        """Advance the clock to the next scripted moment (at most `timeout` ahead); its events."""
        self.polls += 1
        if self.max_polls is not None and self.polls > self.max_polls:
            running = {a.task.number: ("hung" if a.hung else f"step {a.index}") for a in self._running.values()}
            raise AssertionError(f"FakeBackend polled {self.max_polls} times (simulated {self.clock.monotonic():g}"
                                 f" s) and the driver has not ended; running trials by number: {running}")
        now = self.clock.monotonic()
        first = min((a.next_time() for a in self._running.values()), default=_INF)
        if self._actions:
            first = min(first, self._actions[0][0])
        if first > now + _EPS:
            self.clock.advance(min(first, now + max(0.0, timeout)) - now)
            now = self.clock.monotonic()
        while self._actions and self._actions[0][0] <= now + _EPS:
            _, action = self._actions.pop(0)
            action()
        out: list[Event] = []
        for tid, a in list(self._running.items()):
            while a.next_time() <= now + _EPS:
                ended = self._fire(a, now, out)
                if ended:
                    del self._running[tid]
                    break
        self.events.extend(out)
        return out

    # ----------------------------------------------------------------------------- a trial's life
    def _event(self, a: _Attempt, kind: EventKind, data: dict[str, Any]) -> Event:
        return Event(kind, a.task.trial_id, a.task.attempt, self.clock.time(), data)

    def _fire(self, a: _Attempt, now: float, out: list[Event]) -> bool:
        """Run whatever of `a` is due at `now`; True when its attempt ended."""
        if a.kill_reason is not None:
            how, code, sig = describe_exit(-signal.SIGKILL)
            reason = f"{a.kill_reason} ({how})"
            out.append(self._event(a, EventKind.FAILED, {"reason": reason, "error_type": "Killed",
                                                         "exit_code": code, "signal": sig, "message": reason}))
            return True
        if not a.started:
            a.started = True
            self._pid += 1
            out.append(self._event(a, EventKind.STARTED, {"pid": self._pid, "host": "fake"}))
            a.heartbeat = now + max(a.task.heartbeat_interval, 1e-3)
            a.due = now + a.script.steps[0].after if a.script.steps else now
            return False
        if a.end_at is not None and a.end_at <= now + _EPS:
            return self._returns(a, None, out)
        if a.grace_expiry is not None and a.grace_expiry <= now + _EPS:
            out.append(self._event(a, EventKind.PREEMPTED, {
                "reason": f"SIGTERM; grace of {a.task.grace:g}s expired", "retire": True}))
            return True
        if a.waiting is not None and a.wait_until <= now + _EPS:
            self._go_on(a, now)
            return False
        if a.due is not None and a.due <= now + _EPS:
            return self._step(a, now, out)
        if a.heartbeat is not None and a.heartbeat <= now + _EPS:
            out.append(self._event(a, EventKind.HEARTBEAT, {}))
            a.heartbeat = now + max(a.task.heartbeat_interval, 1e-3)
        return False

    def _step(self, a: _Attempt, now: float, out: list[Event]) -> bool:
        steps = a.script.steps
        if a.index >= len(steps):
            return self._returns(a, None, out)
        step = steps[a.index]
        a.index += 1
        a.due = now + steps[a.index].after if a.index < len(steps) else now
        d = step.data
        if step.op == "metrics":
            values = {k: float(v) for k, v in d["values"].items()}
            a.last.update(values)
            t = self.clock.time()
            data: dict[str, Any] = {"points": [[d["step"], k, v, t] for k, v in values.items()]}
            task = a.task
            if a.decide is None:
                a.decide = DecisionPoints(task.decision_steps, reports=task.decision_reports)
            if (task.decision_metric in values and a.decide.passes(d["step"], values[task.decision_metric])
                    and not a.stop_requested):
                data["decide"] = d["step"]
                a.waiting, a.wait_until, a.due = d["step"], now + DECISION_WAIT, None
            out.append(self._event(a, EventKind.METRICS, data))
        elif step.op == "checkpoint":
            path = f"{a.task.checkpoint_dir}/step-{d['step']:010d}"
            out.append(self._event(a, EventKind.CHECKPOINT, {
                "step": d["step"], "path": path, "checksum": f"fake-{a.task.trial_id}-{d['step']}",
                "bytes": 1, "seconds": d["seconds"], "format": "pickle"}))
        elif step.op == "event":
            out.append(self._event(a, d["kind"], dict(d["data"])))
        elif step.op == "finish":
            return self._returns(a, d["metrics"], out)
        elif step.op == "fail":
            return self._raises(a, d["error_type"], d["message"], out)
        elif step.op == "crash":
            return self._dies(a, d["code"], out)
        elif step.op == "disk_full":
            if a.preempting:
                return self._returns(a, None, out)
            out.append(self._event(a, EventKind.FAILED, {
                "disk_full": True, "reason": f"found the disk full: {d['message']}", "error_type": "DiskFull",
                "message": d["message"]}))
            return True
        elif step.op == "preempt":
            self._sigterm(a, now)
        elif step.op == "hang":
            a.hung, a.due, a.heartbeat = True, None, None
        return False

    def _returns(self, a: _Attempt, metrics: Mapping[str, float] | None, out: list[Event]) -> bool:
        """The trial function returned (worker.py: PREEMPTED after a SIGTERM, else FINISHED)."""
        if a.preempting:
            out.append(self._event(a, EventKind.PREEMPTED, {"reason": "SIGTERM (preemption)", "retire": True}))
        else:
            final = dict(a.last if metrics is None else metrics)
            out.append(self._event(a, EventKind.FINISHED, {"metrics": final, "stopped": a.stop_requested,
                                                           "retire": False}))
        return True

    def _raises(self, a: _Attempt, error_type: str, message: str, out: list[Event]) -> bool:
        if a.preempting:
            return self._returns(a, None, out)
        tb = (f"Traceback (most recent call last):\n  File \"{a.task.target}\", in trial\n"
              f"{error_type}: {message}\n")
        out.append(self._event(a, EventKind.FAILED, {
            "environment": {}, "reason": f"{error_type}: {message}".strip()[:500], "error_type": error_type,
            "message": message[:2000], "traceback": tb, "capture": None, "retire": False}))
        return True

    def _dies(self, a: _Attempt, code: int, out: list[Event]) -> bool:
        """The worker process ended under the trial (local.py's _on_exit)."""
        if a.preempting:
            out.append(self._event(a, EventKind.PREEMPTED, {"reason": "worker preempted (SIGTERM)"}))
            return True
        how, exit_code, sig = describe_exit(code)
        reason = f"worker process {how}"
        out.append(self._event(a, EventKind.FAILED, {"reason": reason, "error_type": "WorkerDied",
                                                     "exit_code": exit_code, "signal": sig, "message": reason}))
        return True

    def _request_stop(self, a: _Attempt) -> None:
        if a.hung or a.script.ignores_stop or a.stop_requested:
            return
        a.stop_requested = True
        a.end_at = self.clock.monotonic() + a.script.stop_delay

    def _sigterm(self, a: _Attempt, now: float) -> None:
        if a.hung or a.preempting:
            return
        a.preempting = True
        self._request_stop(a)
        a.grace_expiry = now + a.task.grace

    def _go_on(self, a: _Attempt, now: float) -> None:
        a.waiting, a.wait_until = None, _INF
        steps = a.script.steps
        a.due = now + steps[a.index].after if a.index < len(steps) else now
