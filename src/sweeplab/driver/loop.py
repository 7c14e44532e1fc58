"""The driver: one event loop per sweep, the only place that wires the other parts together.

    searcher (what to try) --ask/tell--> DRIVER <--events-- backend (where it runs)
    scheduler + monitors (whether to go on) --verdicts--> DRIVER --batched writes--> store

Each turn of the loop: write the events that arrived (events.py) and fill the free slots with requeued or
new trials (tasks.py builds what a backend runs), in one store transaction; poll the backend; carry out the
watchdog's orders (watchdog.py: time budget, grace, timeouts, heartbeats, idle monitors). Budgets are
counted by budget.py, retries and crash loops decided by retry.py, and `create`/`fork`/`resume` rebuild
the state from the store (recovery.py).
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import time
from typing import Any

from sweeplab.backends.events import Event, EventKind
from sweeplab.driver.events import EventWriter
from sweeplab.driver.records import Progress, SweepOutcome, TrialRecord, resources_dict, trial_seed
from sweeplab.driver.recovery import Recovery
from sweeplab.driver.watchdog import Kill
from sweeplab.errors import StoreError
from sweeplab.types import Decision, MetricPoint, Origin, SweepState, TrialState, Verdict

__all__ = ["Driver"]

_TOUCH_EVERY = 0.25        # bump sweeps.updated (what the dashboard polls) at most this often
_SPEND_EVERY = 0.1         # save the spend so far (running trials included) this often: a killed driver loses
                           # at most this much of budget.time, cpu/gpu hours and its attempts' run time
#: a SIGTERM this soon after the first is a copy of it (a kill of the process group as well as of the driver),
#: not a second request
_SAME_SIGNAL = 1.0


class Driver(Recovery, EventWriter):
    """Runs one sweep to its end (or until interrupted) on a backend, recording everything in the store."""

    # ------------------------------------------------------------------------------------------ main loop
    def run(self) -> SweepOutcome:
        """Run until the budget is spent or the space exhausted. Ctrl-C / SIGTERM stop cleanly."""
        from sweeplab.backends._start_signals import SignalHold

        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        if previous[signal.SIGHUP] is not signal.SIG_DFL and not isinstance(previous[signal.SIGHUP], SignalHold):
            del previous[signal.SIGHUP]   # `nohup`, or a handler of the caller's: theirs

        def on_signal(signum: int, frame: Any) -> None:
            if self._signal is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt   # a second Ctrl-C: stop waiting for graceful ends
            if self._signal is None:      # the first signal decides how the sweep stops (and its exit code)
                self._signal, self._signalled = signum, time.monotonic()
                self.mark_stopping()      # a `resume` typed meanwhile waits for this driver to exit
            elif signum == signal.SIGTERM and time.monotonic() - self._signalled >= _SAME_SIGNAL:
                self._hurry = True        # a second SIGTERM (`kill`, `sweeplab stop` again): stop waiting too

        if _main_thread():
            for sig in previous:
                signal.signal(sig, on_signal)
            # a start-up hold that is no backend's (`sweeplab resume` holds signals from its first moment, and a
            # Ray backend starts only now): what it held comes to this driver now, not after it ended
            for hold in {id(h): h for h in previous.values() if isinstance(h, SignalHold)}.values():
                hold.release()
        with self.store.transaction():
            self._record_driver()
        self.backend.start()
        try:
            with self.store.background_checkpoints():
                return self._loop()
        except KeyboardInterrupt:
            if self._signal is None:
                self._signal = signal.SIGINT
            return self._interrupted(grace=0.0)
        except StoreError:
            raise   # the store cannot record anything: its one-line error, as at any other moment
        except Exception as exc:   # bad input found mid-sweep, a bug or a resource error in the driver itself
            return self._crashed(exc)
        finally:
            with contextlib.suppress(Exception):
                self.backend.shutdown(grace=0.0)
            with contextlib.suppress(Exception):
                self._searcher.close()
            if _main_thread():
                for sig, handler in previous.items():   # a backend's start-up hold: what was there before it
                    signal.signal(sig, handler.original.get(sig, handler) if isinstance(handler, SignalHold)
                                  else handler)

    def request_stop(self) -> None:
        """Stop the sweep as Ctrl-C does (running trials INTERRUPTED, resumable), from another thread: what a
        background sweep's handle (`sl.sweep(..., background=True).stop()`) calls."""
        self._signal = signal.SIGINT

    def _loop(self) -> SweepOutcome:
        events: list[Event] = []
        while True:
            # one transaction per turn: the events that arrived, and the trials that replace them; a suggestion
            # computed in the background waits until they are sent (it would take the GIL from this thread)
            with self._searcher.deferring(), self.store.transaction():
                for ev in events:
                    self._handle(ev)
                self._write_where()
                if events and self.clock.monotonic() - self._touched >= _TOUCH_EVERY:
                    self.store.touch_sweep(self.sweep_id)   # readers' "changed since" token
                    self._touched = self.clock.monotonic()
                if self.clock.monotonic() - self._spend_saved >= _SPEND_EVERY:
                    self._save_running_spend()
                if self._signal is None and self._stopping is None and self._crash is None \
                        and self.backend.free_slots() > 0:
                    self._fill_slots()
            if self._signal is not None or self._stopping is not None or self._crash is not None:
                return self._interrupted()
            if not self.backend.running() and not self._can_submit():
                break
            polled_at = self.clock.monotonic()
            timeout = self._poll_timeout()
            self.watchdog.turn(polled_at, timeout, time.process_time())
            events = self.backend.poll(timeout)
            self._note_alive(events)
            self._watch(polled_at, events)
            self._progress()
        return self._finish()

    def _note_alive(self, events: list[Event]) -> None:
        """What a poll brought proves its trial alive (and reporting) now, before the watchdog judges silences:
        events are written only at the next turn, and a driver paused for a while (SIGSTOP, a debugger) finds
        its trials' heartbeats of the pause waiting in the pipe."""
        now = self.clock.monotonic()
        wall = self.clock.time()
        # the rules over time (stalled) judge progress as it arrives; the others need not be called
        hearing = [m for m in self.monitors if type(m).heard.__qualname__ != "Monitor.heard"]
        for ev in events:
            t = self.trials.get(ev.trial)
            if t is None or ev.attempt != t.attempt or ev.kind is EventKind.SYSTEM:
                continue
            t.last_seen = now
            if ev.kind is EventKind.METRICS and ev.data.get("points"):
                first = t.last_report is None
                t.last_report = now
                if hearing:
                    points = [tuple.__new__(MetricPoint, p) for p in ev.data["points"]]
                    for m in hearing:
                        m.heard(t.number, points, wall, first=first)

    def _poll_timeout(self) -> float:
        return 0.1 if self.backend.running() else 0.02

    # ------------------------------------------------------------------------------------------ submitting
    def _can_create(self) -> bool:
        self._check_budgets()
        if self._ending or self._exhausted:
            return False
        if self.max_trials is not None and len(self.trials) >= self.max_trials:
            self._end("budget.trials reached" if self.spec.budget.trials == self.max_trials
                      else f"{self.max_trials} trials reached")
            return False
        return True

    def _can_submit(self) -> bool:
        return bool(self.requeue and not self._halt) or self._can_create()

    def _fill_slots(self) -> None:
        self._check_time()      # a spent budget starts no retry or requeued trial either (a resumed sweep's
        self._check_budgets()   # budget may be spent before its first turn)
        while self.backend.free_slots() > 0:
            trial: TrialRecord | None
            if self._crash is not None:
                return
            if self.requeue and not self._halt:
                trial = self.requeue.popleft()
            elif self._can_create():
                trial = self._new_trial()
                if trial is None:
                    return
            else:
                return
            self._submit(trial)

    def _new_trial(self) -> TrialRecord | None:
        try:
            params = self._searcher.ask()
        except Exception as exc:
            self._searcher_failed(exc)
            return None
        if params is None:
            self._exhausted = True   # a searcher may say why (an Optuna objective's study.stop() or timeout)
            self._end(getattr(self._searcher, "end_reason", None) or "search space exhausted (grid finished)")
            return None
        number = len(self.trials)
        config = self.tasks.resolve_config(params)
        seed = trial_seed(self.seed, number)
        if self._resources_json is None:
            self._resources_json = resources_dict(self.spec.resources)
        with self.store.transaction():   # created running: _submit follows at once
            trial_id = self.store.add_trial(self.sweep_id, number, params, config, seed,
                                            resources=self._resources_json, state=TrialState.RUNNING.value,
                                            started=self.clock.time(), attempts=1)
        t = TrialRecord(id=trial_id, number=number, params=dict(params), config=config, seed=seed)
        t.fresh = True
        self.trials[trial_id] = t
        self.by_number[number] = t
        return t

    def _mtbf(self) -> float | None:
        failures = self._failures
        if not failures:
            return None
        return max(1.0, self.budget.elapsed() * max(1, len(self.backend.running())) / failures)

    def _submit(self, t: TrialRecord) -> None:
        if t.attempt >= 1:
            self._fence(t)      # the attempts before this one are over, whatever they still write
            self._set_aside_untrusted(t)   # it restores only checkpoints the store recorded, as recorded
        t.attempt += 1
        t.state = TrialState.RUNNING
        t.stop_verdict = t.stop_state = t.kill_reason = None
        t.stop_at = None
        t.started_mono = self.clock.monotonic()
        t.last_seen = t.started_mono
        t.last_report = None
        paths = self.tasks.paths(t)
        decisions = self.tasks.decisions(t, self.scheduler, self._sched_metric,
                                         supported=self.backend.supports_decisions)
        task = self.tasks.task(t, paths, mtbf=self._mtbf(), decisions=decisions)
        now = self.clock.time()
        with self.store.transaction():
            if t.fresh:
                t.fresh = False     # inserted as running a moment ago
            elif t.attempt == 1:
                self.store.update_trial(t.id, state=TrialState.RUNNING.value, attempts=1, started=now)
            else:
                self.store.update_trial(t.id, state=TrialState.RUNNING.value, attempts=t.attempt)
            self.store.add_attempt(t.id, t.attempt, started=now, log_path=paths["log_rel"])
        self.backend.submit(task)

    def _stop_running(self, reason: str) -> None:
        """Stop every running trial (state STOPPED) because the sweep's budget is spent."""
        now = self.clock.monotonic()
        for tid in self.backend.running():
            t = self.trials[tid]
            if t.stop_verdict is None:
                t.stop_verdict = Verdict(Decision.STOP, reason, "budget", origin=Origin.BUDGET)
                t.stop_state = TrialState.STOPPED
                t.stop_at = now
                with self.store.transaction():   # when it was asked: replay's cut (recovery)
                    self.store.add_event(self.sweep_id, "stopped", reason, trial_id=t.id, attempt=t.attempt,
                                         at=self.clock.time())
                self.backend.stop(tid)

    def _check_time(self) -> None:
        """budget.time spent: no new trials or retries; running trials are stopped, also when the sweep had
        already stopped creating trials for another reason (budget.trials, the grid done): a deadline."""
        reason = self.watchdog.time_up(ending=self._time_spent)
        if reason is not None:
            self._time_spent = True
            self._end(reason)
            self._halt = True
            self._stop_running(f"stopped: {reason}")
            self._stop_requeued(f"stopped: {reason}")

    def _stop_requeued(self, reason: str) -> None:
        """A spent budget ends the trials that wait to run again as it ends running ones: `stopped` with the
        budget's reason, not left `interrupted`, `preempted` or `queued`. They are a resumed sweep's trials that
        the killed driver was running, and trials whose retry was queued before the budget was found spent
        (a failure read in the same turn as the report that spent it)."""
        stopped = [t for t in self.requeue if t.state.is_requeueable]
        if not stopped:
            return
        with self.store.transaction():
            for t in stopped:
                self.requeue.remove(t)
                self._end_trial(t, TrialState.STOPPED, value=None, metrics={k: v for k, (_, v) in t.last.items()},
                                reason=reason, at=self.clock.time(), attempt_state=None)

    def _check_budgets(self) -> None:
        """cpu_hours / gpu_hours / cost spent: no new trials or retries; running trials finish (--hard: stop),
        also when the sweep had already stopped creating trials for another reason."""
        if self._resources_spent or not self.budget.watches_resources:
            return
        reason = self.budget.resources_reached(self._running_seconds(), self._reported())
        if reason is None:
            return
        self._resources_spent = True
        self._end(reason)
        self._halt = True
        self._stop_requeued(f"stopped: {reason}")
        if self.hard_budget:
            self._stop_running(f"stopped: {reason}")


    def _progress(self, force: bool = False) -> None:
        now = self.clock.monotonic()
        if not force and now - self._last_progress < 0.1:
            return
        self._last_progress = now
        counts = self.counts()
        done = sum(n for s, n in counts.items() if TrialState(s).is_terminal)
        eta = None
        if self.max_trials and self._durations:
            remaining = max(0, self.max_trials - done)
            per = sum(self._durations) / len(self._durations)
            eta = remaining * per / max(1, len(self.backend.running()) or self.backend.capacity())
        best = self._best
        self.on_progress(Progress(
            sweep=self.name, counts=counts, running=len(self.backend.running()), created=len(self.trials),
            budget_trials=self.max_trials, best_value=best[0] if best else None,
            best_trial=best[1] if best else None, best_params=best[2] if best else None,
            elapsed=self.budget.elapsed(), eta=eta,
        ))

    def _running_seconds(self) -> float:
        """Seconds the running attempts have held their resources so far."""
        now = self.clock.monotonic()
        return sum(now - t.started_mono for tid in self.backend.running()
                   if (t := self.trials.get(tid)) is not None and t.started_mono is not None)

    def _save_running_spend(self) -> None:
        self._spend_saved = self.clock.monotonic()
        self.store.update_sweep(self.sweep_id, spend=self.budget.snapshot(len(self.trials), self._reported(),
                                                                          self._running_seconds()))

    def _save_spend(self) -> None:
        self.store.update_sweep(self.sweep_id, spend=self.budget.totals(len(self.trials), self._reported()))

    def _finish(self) -> SweepOutcome:
        reason = self._ending or "done"
        state = self._ending_state
        shown = reason
        if not self._completed_any and self._bad_input is None:   # no answer: exit 1, whatever the cause
            if state is SweepState.FINISHED and self.retry.first_failure:
                state, reason = SweepState.FAILED, self._nothing_completed(reason)   # its trials failed
            shown = reason if state is SweepState.FAILED else self._nothing_completed(reason)
        with self.store.transaction():
            self._save_spend()
            self.store.update_sweep(self.sweep_id, state=state.value, ended=self.clock.time(), end_reason=reason)
            self.store.add_event(self.sweep_id, "sweep_ended", f"sweep {state.value}: {reason}")
        self._progress(force=True)
        code = 2 if self._bad_input is not None else 1 if state is SweepState.FAILED or not self._completed_any \
            else 0
        return self._outcome(state, shown, code)

    def _nothing_completed(self, ending: str) -> str:
        """Why a sweep ended without a completed trial: its trials, then the first failure (or why it ended:
        trials stopped by a budget, pruned or stopped by a rule)."""
        counts = ", ".join(f"{n} {s}" for s, n in self.counts().items() if n) or "none ran"
        if self.retry.first_failure:
            return f"no trial completed ({counts}): {self.retry.first_failure}"
        return f"no trial completed ({counts}; {ending})"

    def _crashed(self, exc: Exception) -> SweepOutcome:
        """The driver raised out of its loop: stop as Ctrl-C does (running trials INTERRUPTED, the sweep STOPPED
        and resumable, nothing left `running` without a driver), exit 1 with the error and its traceback. If the
        store cannot record that either, the original error is raised."""
        self._note_crash(exc, "the driver failed")
        try:
            return self._interrupted()
        except BaseException:
            with contextlib.suppress(Exception):
                self.backend.shutdown(grace=0.0)
            raise exc from None

    def _interrupted(self, grace: float | None = None) -> SweepOutcome:
        """Ctrl-C: stop running trials (INTERRUPTED, requeued on resume). SIGTERM: preempt them. A trial that
        found the disk full (`_stopping`) or an error of the driver's own (`_crash`): as Ctrl-C, but the sweep's
        reason is that one, and it exits 1."""
        sigterm = self._signal == signal.SIGTERM
        crash = self._crash if not sigterm else None
        full = self._stopping if self._signal is None and crash is None else None
        running = list(self.backend.running())
        read_only = bool(full) and "storage read-only" in str(full)   # backends/_diskfull.py: EROFS
        hangup = self._signal == signal.SIGHUP   # the terminal closed: stopped as by Ctrl-C, exit 129
        how = ("SIGTERM" if sigterm else "SIGHUP" if hangup else "driver error" if crash
               else "storage read-only" if read_only else "disk full" if full else "Ctrl-C")
        room = " once it is writable" if read_only else " once there is room"
        resume = f"`sweeplab resume {shlex.quote(self.name)}`"
        self.on_note(f"{how}: stopping {len(running)} running trial(s); {resume} continues"
                     + (room if full else " once the error is fixed" if crash else ""))
        if sigterm:
            for tid in running:
                self.backend.preempt(tid)
            wait = self.spec.trial.grace if grace is None else grace
        else:
            for tid in running:
                self.backend.stop(tid)
            wait = min(self.spec.trial.grace, 5.0) if grace is None else grace
        deadline = self.clock.monotonic() + wait
        try:
            while self.backend.running() and self.clock.monotonic() < deadline and not self._hurry:
                events = self.backend.poll(0.1)
                with self.store.transaction():
                    for ev in events:
                        if ev.kind is EventKind.FINISHED:
                            t = self.trials.get(ev.trial)
                            if t is not None and ev.attempt == t.attempt and (not ev.data.get("stopped")
                                                                              or t.stop_verdict is not None):
                                self._handle(ev)     # it really finished, or ended as we had asked: keep it
                                continue
                            self._handle_interrupted(ev)
                        elif ev.kind in (EventKind.FAILED, EventKind.PREEMPTED):
                            self._handle_interrupted(ev)
                        else:
                            self._handle(ev)
                    self._write_where()
        except KeyboardInterrupt:
            pass
        with self.store.transaction():
            now = self.clock.time()
            for tid in list(self.backend.running()):
                t = self.trials[tid]
                self._mark_interrupted(t, f"{how}: killed at a second SIGTERM, within the grace period" if self._hurry
                                       else f"{how}: killed after the grace period", now)
            self.backend.shutdown(grace=0.0)
            for t in self.trials.values():
                if t.state is TrialState.RUNNING:
                    self._mark_interrupted(t, how, now)
            self._save_spend()
            reason = (f"{full}; {resume} runs it again{room}" if full
                      else f"{crash}; {resume} continues" if crash else f"interrupted ({how})")
            self.store.update_sweep(self.sweep_id, state=SweepState.STOPPED.value, ended=now, end_reason=reason)
            self.store.add_event(self.sweep_id, "sweep_ended", f"sweep stopped: {reason}" if full or crash
                                 else f"sweep stopped by {how}; resumable")
        self._progress(force=True)   # the live line's last state: nothing running any more
        shown = f"{reason}\n{self._crash_trace}" if crash and self._crash_trace else reason
        code = self._crash_code if crash else 1 if full else 0 if sigterm else 129 if hangup else 130
        return self._outcome(SweepState.STOPPED, shown, code)


    # ------------------------------------------------------------------------------------------ orders
    def _watch(self, polled_at: float | None = None, events: list[Event] | None = None) -> None:
        """Carry out the watchdog's orders: the time budget, then the other budgets, then each trial's (their
        silences judged as of `polled_at`, when the driver last started reading what trials sent).

        Before a deadline (budget.time, trial.timeout, trial.grace) is enforced, what the trials sent that the
        driver has not read yet is read into `events` (handled at the next turn): a driver that was paused
        (SIGSTOP, a debugger) past a deadline finds there the trials that ended in time, which keep their
        result, and the backend no longer counts them running."""
        if events is not None and self.watchdog.due(self._running(), ending=self._time_spent):
            more = self.backend.poll(0.0)
            self._note_alive(more)
            events.extend(more)
        self._check_time()
        self._check_budgets()
        for order in self.watchdog.orders(self._running(), polled_at):
            t = self.trials[order.trial_id]
            if isinstance(order, Kill):
                t.kill_reason = order.reason
                t.no_retry = t.no_retry or order.final
                self._fence(t)
                self.backend.kill(t.id, order.reason)
            else:
                with self.store.transaction():
                    self._apply_verdict(t, order.verdict)


    def _running(self) -> list[TrialRecord]:
        return [t for tid in self.backend.running() if (t := self.trials.get(tid)) is not None]


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
