"""Event writing: what each backend event means for its trial, the searcher, the scheduler, the monitors
and the store (one transaction per turn of the loop, opened by the caller)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sweeplab._values import objective_of
from sweeplab.backends.events import SWEEP, Event, EventKind
from sweeplab.driver.objectives import feasible, objective_problem, objective_values, rated, violated, violations
from sweeplab.driver.records import TrialRecord, costs_of, finite_dict, fired_at, judged_curve, shown_path
from sweeplab.driver.state import DriverState
from sweeplab.errors import SweeplabError
from sweeplab.types import Decision, Goal, MetricPoint, Origin, SweepState, TrialState, Verdict

__all__ = ["EventWriter"]

_SMOKE_STEPS = 2           # smoke trials are stopped after this many reported steps


class EventWriter(DriverState):
    """Turns backend events into trial states, verdicts, searcher/scheduler feedback and store rows."""

    # ------------------------------------------------------------------------------------------ events

    def _searcher_failed(self, exc: Exception) -> None:
        """The searcher raised (a bug, or a MemoryError from a model too large): the sweep stops at the end of
        this turn as Ctrl-C stops it (resumable), exit 1 with the error and its traceback. The turn's events
        are still written: a rolled-back turn would lose the trials that ended in it."""
        if self._crash is None:
            self._note_crash(exc, "the searcher failed")

    def _note_crash(self, exc: BaseException, what: str) -> None:
        """Why the sweep stops: a SweeplabError's own message and exit code (bad input found mid-sweep: 2),
        else `what` with the error's line, and its traceback (exit 1: a bug to report)."""
        from sweeplab.errors import SweeplabError

        if isinstance(exc, SweeplabError):
            self._crash, _, self._crash_trace = str(exc).partition("\n")
            self._crash_code = exc.exit_code
        else:
            import traceback

            self._crash = f"{what}: {type(exc).__name__}: {exc}".splitlines()[0][:500]
            self._crash_trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
            self._crash_code = 1
    def _handle(self, ev: Event) -> None:
        t = self.trials.get(ev.trial)
        if t is None and ev.trial == SWEEP and ev.kind is EventKind.NOTE:
            self._sweep_note(ev)
            return
        if t is None or ev.attempt != t.attempt:
            return   # an event of an attempt we already gave up on (e.g. from a killed worker)
        kind = ev.kind
        if kind is not EventKind.SYSTEM:   # samples come from a thread of the worker: no sign of the trial's life
            t.last_seen = self.clock.monotonic()
        if kind is EventKind.METRICS:
            self._on_metrics(t, ev)
        elif kind is EventKind.HEARTBEAT:
            pass
        elif kind is EventKind.STARTED:
            # written at the end of the turn, or with the attempt's end if that came in the same batch
            t.where = {"host": ev.data.get("host"), "pid": ev.data.get("pid")}
            self._where.append(t)
        elif kind is EventKind.CHECKPOINT:
            d = ev.data
            if d.get("path") is not None:   # None: only removals (a command program's own retention)
                self.store.add_checkpoint(t.id, t.attempt, step=d.get("step"), path=str(d.get("path")),
                                          checksum=d.get("checksum"), nbytes=d.get("bytes"),
                                          seconds=d.get("seconds"), at=ev.time)
            if d.get("removed"):   # retention deleted them: the store lists only checkpoints that exist
                self.store.remove_checkpoints(t.id, [str(p) for p in d["removed"]])
        elif kind is EventKind.SYSTEM:
            self.store.add_system_samples(t.id, t.attempt, ev.data.get("samples", []))
        elif kind is EventKind.PROFILE:
            self.store.update_trial(t.id, profile=ev.data.get("summary"))
        elif kind is EventKind.ARTIFACT:
            self.store.add_artifact(t.id, t.attempt, str(ev.data.get("name")),
                                    self.store.relpath(str(ev.data.get("path"))), ev.time)
        elif kind is EventKind.NOTE:
            d = ev.data
            self.store.add_event(self.sweep_id, str(d.get("kind") or d.get("level") or "info"),
                                 str(d.get("message", "")), trial_id=t.id, attempt=t.attempt, data=d, at=ev.time)
        elif kind is EventKind.FINISHED:
            self._on_finished(t, ev)
        elif kind is EventKind.FAILED:
            self._on_failed(t, ev)
        elif kind is EventKind.PREEMPTED:
            self._on_preempted(t, ev)

    def _write_where(self) -> None:
        """Store host/pid of attempts that started in this turn and are still running (an attempt that also
        ended in this turn had them written with its end: one statement fewer for short trials)."""
        for t in self._where:
            if t.where:
                self.store.update_attempt(t.id, t.attempt, **self._take_where(t))
        self._where.clear()

    def _on_metrics(self, t: TrialRecord, ev: Event) -> None:
        points = [tuple.__new__(MetricPoint, p) for p in ev.data.get("points") or ()]   # wire lists -> MetricPoint
        if not points:   # a rung's decision marker alone: its report came in an earlier batch
            self._go_on(t, ev)
            return
        self.store.add_metrics(t.id, t.attempt, points)
        t.last_report = self.clock.monotonic()
        t.costs.update(costs_of({p[1]: p[2] for p in points}, self.spec.budget.cost))
        metric = self.metric
        verdicts: list[Verdict] = []
        sched_metric = self._sched_metric
        feed = self._rank_feed
        closing = {}   # the rank rule judges a step at its last objective point in the batch (rank_feed.py)
        if feed is not None:
            closing = {p[0]: i for i, p in enumerate(points) if p[1] in feed.names}
        for i, (step, key, value, _) in enumerate(points):
            t.last[key] = (step, value)
            if key == metric:
                t.intermediate[int(step)] = float(value)
            if feed is not None and key in feed.names and self.scheduler is not None \
                    and t.stop_verdict is None:   # several objectives by rank
                vector = feed.add(t.id, int(step), key, float(value), closes_step=closing.get(step) == i)
                if vector is not None:            # ASHA.judge_by_rank takes tuples
                    v = self.scheduler.on_report(t.number, int(step), vector)  # type: ignore[arg-type]
                    if v.stops:
                        verdicts.append(dataclasses.replace(v, reason=f"{v.reason}; {self._sched_rule}")
                                        .by(Origin.SCHEDULER))
            elif key == sched_metric and self.scheduler is not None and t.stop_verdict is None:
                v = self.scheduler.on_report(t.number, int(step), float(value))
                if v.stops:
                    if self._sched_rule:
                        v = dataclasses.replace(v, reason=f"{v.reason}; {self._sched_rule}")
                    verdicts.append(v.by(Origin.SCHEDULER))
        self.store.update_trial(t.id, last_step=int(points[-1][0]))
        if (self.smoke and (len(t.intermediate) >= _SMOKE_STEPS or int(points[-1][0]) >= _SMOKE_STEPS)
                and t.stop_at is None):  # counted in reports: steps may start at 0 or at 1
            t.stop_at = self.clock.monotonic()     # smoke: fidelity shrinks to a couple of reports
            self.backend.stop(t.id)
        if self.monitors:
            rules = []
            for m in self.monitors:
                v = m.observe(t.number, points)
                if v.decision is not Decision.CONTINUE:
                    rules.append(v.by(Origin.MONITOR))
            rules.sort(key=fired_at)     # several rules fired in one batch: the earliest step explains it
            verdicts = rules + verdicts   # a health rule (NaN, divergence) says more than a rung comparison
            self._check_monitor_metrics(points)
        for v in verdicts:
            self._apply_verdict(t, v)
        self._go_on(t, ev)

    def _go_on(self, t: TrialRecord, ev: Event) -> None:
        """The trial waits at a rung (`decide`) and nothing stopped it: it goes on."""
        decide = ev.data.get("decide")
        if decide is not None and t.stop_verdict is None:
            self.backend.go(t.id, int(decide))

    def _check_monitor_metrics(self, points: Sequence[Sequence[Any]], *, ended: bool = False) -> None:
        """Once, name the monitors watching metrics no trial logs: after the first trial has reported the
        sweep's metric twice, or has ended having logged anything (`ended`: a trial whose metric is only
        returned at its end, or that logs no curve of it, would otherwise never be checked)."""
        self._seen_keys.update(str(p[1]) for p in points)
        if self._checked_monitor_metrics:
            return
        done = sum(1 for x in self.trials.values() if x.last)
        if done < 1 or len(self._seen_keys) == 0:
            return
        first = min((x for x in self.trials.values() if x.last), key=lambda x: x.number)
        if len(first.intermediate) < 2 and self.metric and not ended:
            return
        self._checked_monitor_metrics = True
        for m in self.monitors:
            wanted = m.metrics()
            missing = sorted(k for k in (wanted or ()) if k not in self._seen_keys)
            if missing:
                # said once, early (a typo must not disable a rule for long): "so far", as a metric logged
                # less often or later in training may still come (it said "no trial logs it")
                msg = (f"monitor {m.name!r} watches {', '.join(missing)}, which no trial has logged so far "
                       f"(logged: {', '.join(sorted(self._seen_keys))}); if that is a typo, fix the metric "
                       f"name in `monitors`")
                self.on_note(msg)
                self.store.add_event(self.sweep_id, "warning", msg, data={"monitor": m.name, "missing": missing})

    def _sweep_note(self, ev: Event) -> None:
        """A backend's note about the sweep, not one trial (a Ray slot whose actor does not start): in the
        event log, and on the terminal when it is a warning."""
        d = ev.data
        message = str(d.get("message", ""))
        self.store.add_event(self.sweep_id, str(d.get("kind") or d.get("level") or "info"), message, data=d,
                             at=ev.time)
        if d.get("level") == "warning":
            self.on_note(message)

    def _apply_verdict(self, t: TrialRecord, v: Verdict) -> None:
        data = {"rule": v.rule, **dict(v.data)}
        if v.decision is Decision.WARN:
            self.store.add_event(self.sweep_id, "rule", f"[warn] {v.reason}", trial_id=t.id, attempt=t.attempt,
                                 data=data)
            return
        if t.stop_verdict is not None:
            return
        pruned = v.origin is Origin.SCHEDULER   # who decided, never the rule's name
        t.stop_verdict = v
        t.stop_state = TrialState.PRUNED if pruned else TrialState.STOPPED_BY_RULE
        t.stop_at = self.clock.monotonic()
        self.store.add_event(self.sweep_id, "pruned" if pruned else "rule", v.reason, trial_id=t.id,
                             attempt=t.attempt, data=data, at=self.clock.time())   # replay's cut (recovery)
        self.backend.stop(t.id)

    def _objective(self, t: TrialRecord, final: Mapping[str, Any]) -> tuple[float | None, str | None]:
        if not self.metric:
            return None, None
        return objective_of(self.metric, final, {self.metric: t.last[self.metric][1]} if self.metric in t.last
                            else dict.fromkeys(t.last))

    def _on_finished(self, t: TrialRecord, ev: Event) -> None:
        final = dict(ev.data.get("metrics") or {})
        if ev.data.get("scalar") and self.metric and self.metric not in final and "value" in final \
                and not self.spec.multi_objective:   # `return 0.25`, as an Optuna objective returns its value
            final[self.metric] = final.pop("value")
        metrics = {k: v for k, (_, v) in t.last.items()}
        metrics.update(final)
        value, problem = self._objective(t, final)
        if problem is None and self.spec.multi_objective:
            problem = objective_problem(self.spec, metrics)
        unread = ev.data.get("unread_reports")
        if problem and "never reported" in problem and isinstance(unread, dict):   # a command trial's dropped lines
            problem += (f"; {unread.get('count')} `@sweeplab` line(s) were not a JSON object and were ignored, the "
                        f"first: `@sweeplab {unread.get('first')}` (print '@sweeplab ' + json.dumps({{...}}))")
        unusable = ev.data.get("unusable")
        if problem and "never reported" in problem and isinstance(unusable, dict):   # returned, but not a number
            if self.metric in unusable:
                problem = f"metric {self.metric!r} is not a number: the trial returned {unusable[self.metric]}"
            elif "" in unusable:
                problem += f"; the trial returned {unusable['']}, neither a number nor a mapping of metrics"
        ended = ev.data.get("smoke_ended")
        if problem and "never reported" in problem and ended is not None:   # smoke mode cut its loop (run.SmokeDone)
            problem += (f"; smoke mode ended the trial at step {ended}, before it returned, as it went on after "
                        "run.should_stop was set: read run.should_stop in its loop, or log the metric as it goes")
        now = ev.time
        self._take_params(t, ev)
        if ev.data.get("capture"):   # what the trial held at its first NaN/inf metric (for sweeplab repro)
            self.store.add_artifact(t.id, t.attempt, "capture", self.store.relpath(ev.data["capture"]), ev.time)
        t.costs.update(costs_of(final, self.spec.budget.cost))
        held = None if t.started_mono is None else self.clock.monotonic() - t.started_mono
        self._account(t)
        if t.stop_verdict is not None and t.stop_state is not None:
            state, reason = t.stop_state, t.stop_verdict.reason
        elif ev.data.get("pruned"):   # the trial pruned itself (an Optuna pruner in the objective)
            state, reason = TrialState.PRUNED, str(ev.data["pruned"])
        elif problem:
            state, reason = TrialState.FAILED, problem
        else:   # returned normally (also after a smoke-mode stop): its value counts
            state, reason = TrialState.COMPLETED, None
        if state is TrialState.FAILED:
            self.retry.trial_failed(f"trial {t.number}: {reason}")
        else:
            self.retry.trial_ended_otherwise()
        self._end_trial(t, state, value=value, metrics=metrics, reason=reason, at=now,
                        attempt_state=state.value)
        if held is not None:
            self._durations.append(held)
        self._check_crash_loop()

    def _take_params(self, t: TrialRecord, ev: Event) -> None:
        """Parameters a define-by-run trial chose while running (Optuna's suggest_*): they become its own."""
        late = ev.data.get("params")
        if isinstance(late, Mapping) and late and any(t.params.get(k) != v for k, v in late.items()):
            t.params = {**t.params, **late}
            self.store.update_trial(t.id, params=t.params)

    def _on_failed(self, t: TrialRecord, ev: Event) -> None:
        d = ev.data
        if d.get("disk_full") and not t.kill_reason:
            self._on_disk_full(t, ev)
            return
        reason = t.kill_reason or str(d.get("reason") or "failed")
        self._take_params(t, ev)
        if t.kill_reason and d.get("reason") and t.kill_reason not in str(d.get("reason")):
            reason = f"{t.kill_reason}"
        self._account(t)
        every_trial = False
        if d.get("bad_input"):   # the worker could not build the config: failing again is certain
            t.no_retry = True
            reason, every_trial = self._config_failure(t, d)
        elif d.get("user_error") and d.get("error_type") != "MissingExtraError":
            t.no_retry = True    # a mistake in the input (a config key the trial reads that is missing): the
            # same config fails the same way; a package missing on one node (MissingExtraError) may not
        signature = (str(d.get("error_type")), reason)   # as the attempt row keeps it: a resume reads it back
        deterministic = self.retry.deterministic(signature, t.failures,
                                                 killed=self.retry.killed(d.get("signal"), d.get("exit_code")))
        t.failures.append(signature)
        self._failures += 1
        self.store.update_attempt(t.id, t.attempt, **self._take_where(t), state="failed", ended=ev.time,
                                  reason=reason,
                                  error_type=d.get("error_type"), traceback=d.get("traceback"),
                                  exit_code=d.get("exit_code"), signal=d.get("signal"))
        capture = self.store.relpath(d["capture"]) if d.get("capture") else None
        if capture:
            self.store.add_artifact(t.id, t.attempt, "capture", capture, ev.time)
        ckpts = self.store.checkpoint_rows(t.id)
        self.store.add_event(self.sweep_id, "failure", f"trial {t.number} attempt {t.attempt}: {reason}",
                             trial_id=t.id, attempt=t.attempt, at=ev.time, data={
                                 "environment": d.get("environment"), "capture": capture,
                                 "checkpoint": ckpts[-1]["path"] if ckpts else None,
                                 "exit_code": d.get("exit_code"), "signal": d.get("signal"),
                                 "loading": d.get("loading")})
        if t.stop_verdict is not None and t.stop_state is not None:
            # we asked it to stop and it died on the way (killed after trial.grace): the stop decision stands
            self._end_as_asked(t, ev.time, attempt_state=None)
            return
        retries = self.retry.retries
        failed_attempts = len(t.failures)
        if self.retry.retry(failed_attempts=failed_attempts, deterministic=deterministic, no_retry=t.no_retry,
                            halted=self._halt or self._signal is not None):
            t.state = TrialState.QUEUED
            self.store.update_trial(t.id, state=t.state.value, reason=f"retrying after: {reason}")
            self.store.add_event(self.sweep_id, "retry",
                                 f"trial {t.number} attempt {t.attempt} failed ({reason}); retrying "
                                 f"({failed_attempts}/{retries})", trial_id=t.id, attempt=t.attempt)
            self.requeue.append(t)
            return
        if deterministic:
            reason = f"{reason} (failed the same way twice: not retried)"
        # the first failure is shown when the sweep fails: a user-input error (a missing config key, a bad
        # override: sweeplab's UserError in the trial) by its message alone, a bug in the trial's code with its
        # traceback (kept with the attempt either way: `sweeplab show`, the trial's log)
        trace = "" if d.get("user_error") or d.get("bad_input") else (d.get("traceback") or "").rstrip()
        self.retry.trial_failed(f"trial {t.number}: {reason}" + (f"\n{trace}" if trace else ""))
        self._end_trial(t, TrialState.FAILED, value=None, metrics={k: v for k, (_, v) in t.last.items()},
                        reason=reason, at=ev.time, attempt_state=None)
        if every_trial and self._bad_input is None:
            self._bad_input = reason   # no new trials or retries; running ones end as they will
            self._halt = True
            # a config no trial can build is why the sweep ends, even when the searcher ran out first (a one-point
            # grid with a free worker) or a budget was reached: those would record it 'finished' for a bad spec
            if self._ending is None or self._ending_state is SweepState.FINISHED:
                self._ending, self._ending_state = reason, SweepState.FAILED
        self._check_crash_loop()

    def _on_disk_full(self, t: TrialRecord, ev: Event) -> None:
        """The trial found its disk full (backends/_diskfull.py): not its fault, so no failure and no retry.
        It is left interrupted (resumable), and the sweep stops: every trial after it would find the disk as
        full. The first such trial's reason is the sweep's."""
        reason = str(ev.data.get("reason") or "found the disk full")
        self._account(t)
        self._mark_interrupted(t, reason, ev.time)
        if self._stopping is None:
            self._stopping = f"trial {t.number} {reason}"
            self._halt = True

    def _config_failure(self, t: TrialRecord, d: Mapping[str, Any]) -> tuple[str, bool]:
        """(the reason, whether every trial would fail the same way) of a config the worker could not build.

        An error at a sampled parameter's key (or inside it, or around it) belongs to this trial's sample;
        any other key comes from the base config, the profile or an override, which every trial shares."""
        key = d.get("key")
        message = str(d.get("message") or d.get("reason") or "the config cannot be built")
        from sweeplab.config import parse_override

        where = None
        for text in self.overrides:   # overrides apply last: a key they set is theirs, sampled or not
            with contextlib.suppress(SweeplabError):
                name = parse_override(text)[0]
                if key and (key == name or key.startswith(f"{name}.") or name.startswith(f"{key}.")):
                    where = f"override {text}"
        if where is None:
            sampled = (any(key == p or key.startswith(f"{p}.") or p.startswith(f"{key}.") for p in t.params)
                       if key else bool(t.params))
            if sampled:
                return f"{d.get('reason') or message} (the sampled configuration does not fit: not retried)", False
            if self.spec.config is not None:
                where = f"config {shown_path(str(self.spec.config))}" + (
                    f" (profile {self.spec.profile})" if self.spec.profile else "")
        return (f"{where}: {message}" if where else message), True

    def _on_preempted(self, t: TrialRecord, ev: Event) -> None:
        reason = str(ev.data.get("reason") or "preempted")
        self._account(t)
        if t.stop_verdict is not None and t.stop_state is not None:   # pruned, then preempted on its way out
            self._end_as_asked(t, ev.time)
            return
        self.store.update_attempt(t.id, t.attempt, **self._take_where(t), state="preempted", ended=ev.time,
                                  reason=reason)
        t.state = TrialState.PREEMPTED
        self.store.update_trial(t.id, state=t.state.value, reason=reason)
        self.store.add_event(self.sweep_id, "preempted", f"trial {t.number} preempted ({reason}); requeued",
                             trial_id=t.id, attempt=t.attempt)
        if self._signal is None:
            self.requeue.append(t)

    def _end_trial(self, t: TrialRecord, state: TrialState, *, value: float | None, metrics: Mapping[str, Any],
                   reason: str | None, at: float, attempt_state: str | None) -> None:
        t.state = state
        t.value = value
        extra = self._objective_fields(t, state, metrics)
        if t.feasible is False and state is TrialState.COMPLETED and reason is None:
            reason = f"infeasible: {violated(self.spec, metrics)}"
        self.store.update_trial(t.id, state=state.value, value=value, metrics=finite_dict(metrics),
                                ended=at, reason=reason, **extra)
        if attempt_state is not None:
            self.store.update_attempt(t.id, t.attempt, **self._take_where(t), state=attempt_state, ended=at,
                                      reason=reason)
        if state is not TrialState.COMPLETED:   # a completed trial's row says it all; the log keeps the rest
            self.store.add_event(self.sweep_id, "trial_ended",
                                 f"trial {t.number} {state.value}" + (f": {reason}" if reason else ""),
                                 trial_id=t.id, attempt=t.attempt,
                                 data={"state": state.value, "value": value})
        if state is TrialState.COMPLETED:
            self._completed_any = True
            self._note_best(t)
        told: Any = t.values if self.spec.multi_objective and state is TrialState.COMPLETED else value
        curve = judged_curve(t.intermediate, t.stop_verdict.data if t.stop_verdict is not None
                             and state is t.stop_state else None) or None
        try:
            if t.violations is None:
                self._searcher.tell(t.number, t.params, state, told, intermediate=curve)
            else:   # only sweeps with constraints pass them: a searcher without the keyword keeps working
                self._searcher.tell(t.number, t.params, state, told, intermediate=curve, constraints=t.violations)
        except Exception as exc:   # the trial's end is recorded all the same; the sweep stops (resumable)
            self._searcher_failed(exc)
        if state is TrialState.COMPLETED and self.spec.multi_objective:
            self._record_hypervolume(t, at)
        if self.scheduler is not None:
            self.scheduler.on_trial_end(t.number, state)
            if self._rank_keys and t.feasible is False:   # the rank rule's front: feasible trials only
                self.scheduler.exclude_from_front(t.number)   # type: ignore[attr-defined]
        for m in self.monitors:
            m.forget(t.number)
        if self.monitors and t.last:
            self._check_monitor_metrics((), ended=True)
        target = self.spec.metric.target
        if (target is not None and value is not None and state is TrialState.COMPLETED and t.feasible is not False
                and (value <= target if self.goal is Goal.MINIMIZE else value >= target)):   # infeasible: never best
            self._end(f"metric.target {target:g} reached by trial {t.number}")

    def _objective_fields(self, t: TrialRecord, state: TrialState, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Objective values and feasibility of an ending trial: on the record, and the store columns to set."""
        out: dict[str, Any] = {}
        if self.spec.multi_objective:
            t.values = objective_values(self.spec, metrics)
            out["objective_values"] = list(t.values or ())
        if rated(self.spec, state is TrialState.COMPLETED, metrics):
            # a trial that failed before reporting any constrained metric has no feasibility (not "infeasible")
            t.violations = violations(self.spec, metrics)
            t.feasible = feasible(self.spec, metrics)
            out["feasible"] = t.feasible
        return out

    def _record_hypervolume(self, t: TrialRecord, at: float) -> None:
        """A completed trial of a multi-objective sweep: the `hypervolume` event when it joined the front."""
        if not self.pareto.add(t.values, t.feasible):
            return
        data = self.pareto.record()
        if data is not None:
            self.store.add_event(self.sweep_id, "hypervolume",
                                 f"hypervolume {data['hypervolume']:.6g} after {data['trials']} completed trials "
                                 f"(front of {data['front']})", trial_id=t.id, data=data, at=at)

    def _handle_interrupted(self, ev: Event) -> None:
        t = self.trials.get(ev.trial)
        if t is None or ev.attempt != t.attempt:
            return
        self._account(t)
        state = TrialState.PREEMPTED if ev.kind is EventKind.PREEMPTED else TrialState.INTERRUPTED
        self._mark_interrupted(t, str(ev.data.get("reason") or state.value), ev.time, state)

    def _mark_interrupted(self, t: TrialRecord, reason: str, now: float,
                          state: TrialState = TrialState.INTERRUPTED) -> None:
        if t.stop_verdict is not None and t.stop_state is not None:
            # pruned (or stopped by a rule or a budget) before the driver's end stopped it too: that decision
            # stands, as in a sweep never interrupted; requeued, the trial would train past the rung that pruned it
            self._end_as_asked(t, now)
            return
        t.state = state
        self.store.update_trial(t.id, state=state.value, reason=reason)
        self.store.update_attempt(t.id, t.attempt, **self._take_where(t), state=state.value, ended=now,
                                  reason=reason)
        self.store.add_event(self.sweep_id, "interrupted" if state is TrialState.INTERRUPTED else "preempted",
                             f"trial {t.number} {state.value}: {reason}", trial_id=t.id, attempt=t.attempt)

    def _end_as_asked(self, t: TrialRecord, at: float, *, attempt_state: str | None = "") -> None:
        """End a trial the driver had asked to stop (`t.stop_verdict`) whose attempt ended otherwise (killed,
        preempted, interrupted): in the state the verdict gave, with its last report's value, as a trial that
        ended by the stop keeps it. `attempt_state` None: the attempt row is already written."""
        verdict, state = t.stop_verdict, t.stop_state
        if verdict is None or state is None:
            return
        value, _ = self._objective(t, {})
        self._end_trial(t, state, value=value, metrics={k: v for k, (_, v) in t.last.items()},
                        reason=verdict.reason, at=at,
                        attempt_state=state.value if attempt_state == "" else attempt_state)

    def _check_crash_loop(self) -> None:
        if self._completed_any or self._ending:
            return
        reason = self.retry.crash_loop(running=len(self.backend.running()))
        if reason is not None:
            self._end(reason, state=SweepState.FAILED)
