"""The driver: one event loop per sweep, the only place that wires the other parts together.

    searcher (what to try) --ask/tell--> DRIVER <--events-- backend (where it runs)
    scheduler + monitors (whether to go on) --verdicts--> DRIVER --batched writes--> store

Everything the driver knows can be rebuilt from the store (`Driver.resume`): trials that were running when
a previous driver died are marked INTERRUPTED and requeued with their parameters; the searcher is replayed
from the trial history; a completed trial is never run again.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeplab._clock import Clock, RealClock
from sweeplab.backends.base import Backend, TrialTask
from sweeplab.backends.events import Event, EventKind
from sweeplab.errors import SpecError, SweeplabError, UserError
from sweeplab.store import Store
from sweeplab.types import Goal, MetricPoint, SweepState, TrialSnapshot, TrialState, Verdict

__all__ = ["Driver", "Progress", "SweepOutcome", "trial_seed"]

_CRASH_LOOP = 3            # this many trials failing in a row with nothing completed ends the sweep
_HEARTBEAT_INTERVAL = 5.0
_TOUCH_EVERY = 0.25        # bump sweeps.updated (what the dashboard polls) at most this often
_SMOKE_STEPS = 2           # smoke trials are stopped after this many reported steps


def trial_seed(sweep_seed: int, number: int) -> int:
    """A trial's seed: a fixed function of the sweep seed and the trial number."""
    return (sweep_seed * 1_000_003 + number * 7_919 + 12_345) % (2**31 - 1)


@dataclass
class _Trial:
    id: int
    number: int
    params: dict[str, Any]
    config: dict[str, Any]
    seed: int | None
    state: TrialState = TrialState.QUEUED
    attempt: int = 0                       # attempts started so far
    value: float | None = None
    last: dict[str, tuple[int, float]] = field(default_factory=dict)
    intermediate: dict[int, float] = field(default_factory=dict)
    stop_verdict: Verdict | None = None    # why we asked it to stop (pruned / rule / budget / user)
    stop_state: TrialState | None = None
    stop_at: float | None = None           # monotonic time of the stop request (grace accounting)
    kill_reason: str | None = None
    no_retry: bool = False
    started_mono: float | None = None
    last_seen: float | None = None
    last_report: float | None = None
    failures: list[tuple[str, str]] = field(default_factory=list)
    resource_seconds: float = 0.0
    spent: float = 0.0                     # seconds of earlier attempts (trial.timeout bounds the total)
    fresh: bool = False                    # just inserted as running by _new_trial
    costs: dict[str, float] = field(default_factory=dict)   # last reported value of each budget.cost name
    where: dict[str, Any] | None = None    # host/pid of the attempt, not yet written (see _write_where)

    def snapshot(self) -> TrialSnapshot:
        return TrialSnapshot(number=self.number, params=self.params, state=self.state, value=self.value)


@dataclass(frozen=True)
class Progress:
    """What a progress display needs, sent after every batch of events."""

    sweep: str
    counts: Mapping[str, int]
    running: int
    created: int
    budget_trials: int | None
    best_value: float | None
    best_trial: int | None
    best_params: Mapping[str, Any] | None
    elapsed: float
    eta: float | None


@dataclass(frozen=True)
class SweepOutcome:
    sweep: str
    state: SweepState
    reason: str
    counts: Mapping[str, int]
    best_trial: int | None
    best_value: float | None
    best_params: Mapping[str, Any] | None
    exit_code: int


class Interrupted(SweeplabError):
    """Ctrl-C or SIGTERM reached the driver."""


class Driver:
    """Runs one sweep to its end (or until interrupted) on a backend, recording everything in the store."""

    def __init__(
        self,
        spec: Any,
        store: Store,
        backend: Backend,
        *,
        sweep_name: str,
        overrides: Sequence[str] = (),
        smoke: bool = False,
        hard_budget: bool = False,
        clock: Clock | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        on_note: Callable[[str], None] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.spec = spec
        self.store = store
        self.backend = backend
        self.name = sweep_name
        self.overrides = list(overrides)
        self.smoke = smoke
        self.hard_budget = hard_budget
        self.clock = clock or RealClock()
        self.on_progress = on_progress or (lambda p: None)
        self.on_note = on_note or (lambda s: None)
        self.cwd = cwd or os.getcwd()
        self.metric: str | None = spec.metric.name
        self.goal: Goal = spec.metric.goal
        self.trials: dict[int, _Trial] = {}          # by trial id
        self.by_number: dict[int, _Trial] = {}
        self.requeue: deque[_Trial] = deque()
        self.sweep_id = 0
        self.seed = 0
        self.searcher: Any = None
        self.scheduler: Any = None
        self._sched_metric: str | None = None
        self.monitors: list[Any] = []
        self._exhausted = False
        self._ending: str | None = None            # why no new trials are created
        self._ending_state = SweepState.FINISHED
        self._halt = False                         # no retries / requeues either (time budget, crash loop)
        self._consecutive_failures = 0
        self._first_failure: str | None = None
        self._bad_input: str | None = None         # a config no trial can build: the sweep ends, exit 2
        self._completed_any = False
        self._t0 = self.clock.monotonic()
        self._time_spent_before = 0.0
        self._signal: int | None = None
        self._last_progress = 0.0
        self._best: tuple[float, int, dict[str, Any]] | None = None
        self._durations: list[float] = []
        self._spend: dict[str, float] = {}
        self._seen_keys: set[str] = set()
        self._checked_monitor_metrics = False
        self._resources = spec.resources
        self.max_trials: int | None = spec.budget.trials
        self._config_base: dict[str, Any] | None = None
        self._resources_json: dict[str, Any] | None = None
        self._touched = -1e9
        self._failures = 0
        self._root = str(store.root.resolve())
        self._python_path: list[str] | None = None
        self._where: list[_Trial] = []
        self._target: str | None = None

    # ------------------------------------------------------------------------------------------ setup
    def _build_logic(self) -> None:
        from sweeplab.monitors import parse_monitors
        from sweeplab.schedulers import make_scheduler
        from sweeplab.search import make_searcher

        if self.searcher is not None:   # rebuilt (fork, then resume): stop the old one's prefetching
            self.searcher.close()
        file = str(self.spec.source) if self.spec.source else None
        if self.spec.method in ("gp", "bayes"):
            _one_torch_thread()   # Optuna's GP asks are ~3x faster single-threaded; this process only searches
        options = {"metric": self.metric} if self.metric else {}
        if self.metric and self.spec.metric.impute:
            options["impute"] = self.spec.metric.impute   # failed trials, as model-based searchers see them
        self.searcher = make_searcher(self.spec.method, self.spec.space, self.goal, self.seed, **options)
        for note in getattr(self.searcher, "notes", []):
            self.on_note(note)
        if self.spec.early_terminate:
            if not self.metric:
                raise SpecError("early_terminate needs metric.name: the value schedulers compare", file=file,
                                key="early_terminate")
            self.scheduler = make_scheduler(self.spec.early_terminate, goal=self.goal, file=file,
                                            metric=self.metric)
        self.monitors = (parse_monitors(list(self.spec.monitors), file=file, metric=self.metric, goal=self.goal)
                         if self.spec.monitors else [])
        # the value schedulers judge: early_terminate.metric when given, else the sweep's metric
        self._sched_metric = (getattr(self.scheduler, "metric", None) or self.metric) if self.scheduler else None

    def _lock(self) -> None:
        """One driver per sweep: an flock held for this process's life (the OS drops it if we are killed)."""
        import fcntl

        if getattr(self, "_lock_file", None) is not None:
            return
        from sweeplab.store.layout import safe_name

        path = self.store.root / "locks" / f"{safe_name(self.name)}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise UserError(f"sweep {self.name!r} is already being run by {holder}; "
                            f"`sweeplab stop {self.name}` stops it") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        self._lock_file = fh

    def create(self, *, spec_path: str | None) -> None:
        """Start a new sweep in the store."""
        self._lock()
        if self.store.sweep_row(self.name) is not None:
            raise UserError(f"a sweep named {self.name!r} already exists in {self.store.root}; "
                            f"`sweeplab resume {self.name}` continues it, or give the sweep another name")
        self.seed = self.spec.seed if self.spec.seed is not None else int.from_bytes(os.urandom(3), "big")
        self._build_logic()
        self._resolve_config({})   # a missing config file or a bad override: exit 2 before the sweep exists
        self.sweep_id = self.store.create_sweep(
            name=self.name, method=self.spec.method, metric=self.metric, goal=self.goal.value,
            spec=self._stored_spec(), spec_path=spec_path, seed=self.seed,
        )

    def _stored_spec(self) -> dict[str, Any]:
        d = dict(self.spec.to_jsonable())
        d["_sweeplab"] = {"overrides": self.overrides, "smoke": self.smoke, "cwd": self.cwd}
        return d

    def fork(self, source: str, *, spec_path: str | None) -> int:
        """Create this sweep seeded with `source`'s completed trials whose parameters fit the new space.

        They are recorded as completed trials of the new sweep (reason "forked from ..."), so the searcher
        learns from them; `budget.trials` counts the new trials only. Returns how many were taken.
        """
        src = self.store.sweep_row(source)
        if src is None:
            raise UserError(f"no sweep named {source!r} in {self.store.root}")
        self.create(spec_path=spec_path)
        import json

        kept = 0
        with self.store.transaction():
            for r in self.store.trial_rows(int(src["id"])):
                params = json.loads(r["params"] or "{}")
                if r["state"] != TrialState.COMPLETED.value or not self.spec.space.contains(params):
                    continue
                metrics = json.loads(r["metrics"] or "{}")
                value = metrics.get(self.metric) if self.metric else None
                tid = self.store.add_trial(self.sweep_id, kept, params, json.loads(r["config"] or "{}"),
                                           r["seed"], resources=json.loads(r["resources"] or "null"))
                self.store.update_trial(tid, state=TrialState.COMPLETED.value, value=value, metrics=metrics,
                                        started=r["started"], ended=r["ended"],
                                        reason=f"forked from {source}/{r['number']}")
                kept += 1
            self.store.add_event(self.sweep_id, "info", f"forked from {source}: {kept} completed trial(s) fit "
                                 "the new space", data={"source": source, "trials": kept})
        self.trials.clear()
        self.by_number.clear()
        budget = self.spec.budget.trials
        self.resume(extra_trials=budget if budget is not None else None)
        return kept

    def resume(self, *, extra_trials: int | None = None, total_trials: int | None = None,
               new_spec_path: str | None = None) -> None:
        """Rebuild the driver's state from the store; requeue interrupted and preempted trials.

        With `new_spec_path` the stored spec is replaced by `self.spec` (the caller checked that only
        budgets, early stopping, monitors, resources and trial policy changed).
        """
        row = self.store.sweep_row(self.name)
        if row is None:
            raise UserError(f"no sweep named {self.name!r} in {self.store.root}")
        self._lock()
        self.sweep_id = int(row["id"])
        if new_spec_path is not None:
            old = _loads(row["spec"]) or {}
            spec = self._stored_spec()
            spec["_sweeplab"] = {**(old.get("_sweeplab") or {}), "cwd": (old.get("_sweeplab") or {}).get("cwd",
                                                                                                        self.cwd)}
            with self.store.transaction():
                self.store.update_sweep(self.sweep_id, spec=spec, spec_path=new_spec_path)
                self.store.add_event(self.sweep_id, "info", f"spec replaced by {new_spec_path}")
        self.seed = int(row["seed"] or 0)
        spend = _loads(row["spend"]) or {}
        self._spend = {k: float(v) for k, v in spend.items() if isinstance(v, (int, float))}
        self._time_spent_before = self._spend.get("seconds", 0.0)
        self._build_logic()
        rows = self.store.trial_rows(self.sweep_id)
        history: list[TrialSnapshot] = []
        now = self.clock.time()
        with self.store.transaction():
            for r in rows:
                state = TrialState(r["state"])
                t = _Trial(id=int(r["id"]), number=int(r["number"]), params=_loads(r["params"]) or {},
                           config=_loads(r["config"]) or {}, seed=r["seed"], state=state,
                           attempt=int(r["attempts"] or 0), value=r["value"])
                t.costs = _costs_of(_loads(r["metrics"]) or {}, self.spec.budget.cost)
                if self.metric:
                    hist = self.store.metric_history(t.id).get(self.metric, [])
                    t.intermediate = {s: v for s, v in hist}
                t.spent = float(self.store.conn.execute(
                    "SELECT coalesce(sum(ended - started), 0) FROM attempts WHERE trial_id=? AND ended IS NOT NULL",
                    (t.id,)).fetchone()[0])
                self.trials[t.id] = t
                self.by_number[t.number] = t
                if state is TrialState.RUNNING:
                    t.state = TrialState.INTERRUPTED
                    self.store.update_trial(t.id, state=t.state.value, reason="the driver stopped while it ran")
                    self.store.update_attempt(t.id, t.attempt, state="interrupted", ended=now,
                                              reason="the driver stopped while it ran")
                    self.store.add_event(self.sweep_id, "interrupted", f"trial {t.number} was running when the "
                                         "driver stopped; requeued", trial_id=t.id, attempt=t.attempt)
                if t.state.is_requeueable:
                    self.requeue.append(t)
                if t.state is TrialState.COMPLETED:
                    self._completed_any = True
                    self._note_best(t)
                history.append(TrialSnapshot(number=t.number, params=t.params, state=t.state, value=t.value,
                                             history={self.metric: tuple(sorted(t.intermediate.items()))}
                                             if self.metric else {}))
            if total_trials is not None:
                self.max_trials = total_trials
            elif extra_trials is not None:
                self.max_trials = len(rows) + extra_trials
            if self.max_trials != self.spec.budget.trials:
                self._persist_budget()
            self.store.update_sweep(self.sweep_id, state=SweepState.RUNNING.value, ended=None, end_reason=None)
            self.store.add_event(self.sweep_id, "sweep_resumed",
                                 f"resumed with {len(rows)} trials, {len(self.requeue)} requeued")
        self.searcher.replay(history)
        if self.scheduler is not None:
            self._replay_scheduler()

    def _replay_scheduler(self) -> None:
        """Feed the scheduler the stored reports and trial ends in the order they first happened."""
        by_id = self.trials
        rows = self.store.conn.execute(
            "SELECT m.trial_id, m.step, m.value, m.time FROM metrics m JOIN trials t ON t.id = m.trial_id "
            "WHERE t.sweep_id = ? AND m.key = ? ORDER BY m.rowid", (self.sweep_id, self._sched_metric)).fetchall()
        timeline: list[tuple[float, int, int, Any, Any]] = [
            (float(r[3]), 0, i, r, None) for i, r in enumerate(rows) if r[0] in by_id]
        ended = {int(r["id"]): r["ended"] for r in self.store.trial_rows(self.sweep_id)}
        for t in by_id.values():
            if t.state.is_terminal:
                timeline.append((float(ended.get(t.id) or 0.0), 1, t.number, None, t))
        timeline.sort(key=lambda e: (e[0], e[1], e[2]))
        for _, kind, _, row, t in timeline:
            if kind == 0:
                value = float("nan") if row[2] is None else float(row[2])
                self.scheduler.on_report(by_id[row[0]].number, int(row[1]), value)
            else:
                self.scheduler.on_trial_end(t.number, t.state)

    def smoke_check(self) -> tuple[list[str], list[str]]:
        """Before smoke trials: the target imports and every categorical combination fits the typed config."""
        if not self.spec.function:
            return [], []
        from sweeplab.smoke import check_config_combinations

        return check_config_combinations(self.spec, self._resolve_config, self._import_path(),
                                         self._function_target())

    def _persist_budget(self) -> None:
        spec = _loads(self.store.sweep_by_id(self.sweep_id)["spec"]) or {}
        spec.setdefault("budget", {})
        if isinstance(spec["budget"], dict):
            spec["budget"]["trials"] = self.max_trials
        spec.pop("run_cap", None)
        self.store.update_sweep(self.sweep_id, spec=spec)

    # ------------------------------------------------------------------------------------------ main loop
    def run(self) -> SweepOutcome:
        """Run until the budget is spent or the space exhausted. Ctrl-C / SIGTERM stop cleanly."""
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def on_signal(signum: int, frame: Any) -> None:
            if self._signal is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt   # a second Ctrl-C: stop waiting for graceful ends
            self._signal = signum

        if _main_thread():
            for sig in previous:
                signal.signal(sig, on_signal)
        import json
        import socket

        with self.store.transaction():
            self.store.update_sweep(self.sweep_id, driver=json.dumps(
                {"pid": os.getpid(), "host": socket.gethostname(), "started": self.clock.time()}))
        self.backend.start()
        try:
            with self.store.background_checkpoints():
                return self._loop()
        except KeyboardInterrupt:
            self._signal = signal.SIGINT
            return self._interrupted(grace=0.0)
        finally:
            with contextlib.suppress(Exception):
                self.backend.shutdown(grace=0.0)
            with contextlib.suppress(Exception):
                self.searcher.close()
            if _main_thread():
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    def _loop(self) -> SweepOutcome:
        events: list[Event] = []
        while True:
            # one transaction per turn: the events that arrived, and the trials that replace them
            with self.store.transaction():
                for ev in events:
                    self._handle(ev)
                self._write_where()
                if events and self.clock.monotonic() - self._touched >= _TOUCH_EVERY:
                    self.store.touch_sweep(self.sweep_id)   # readers' "changed since" token
                    self._touched = self.clock.monotonic()
                if self._signal is None and self.backend.free_slots() > 0:
                    self._fill_slots()
            if self._signal is not None:
                return self._interrupted()
            if not self.backend.running() and not self._can_submit():
                break
            events = self.backend.poll(self._poll_timeout())
            self._check_time()
            self._progress()
        return self._finish()

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
        while self.backend.free_slots() > 0:
            if self.requeue and not self._halt:
                trial = self.requeue.popleft()
            elif self._can_create():
                trial = self._new_trial()
                if trial is None:
                    return
            else:
                return
            self._submit(trial)

    def _new_trial(self) -> _Trial | None:
        params = self.searcher.ask()
        if params is None:
            self._exhausted = True
            self._end("search space exhausted (grid finished)")
            return None
        number = len(self.trials)
        config = self._resolve_config(params)
        seed = trial_seed(self.seed, number)
        if self._resources_json is None:
            self._resources_json = _resources_dict(self._resources)
        with self.store.transaction():   # created running: _submit follows at once
            trial_id = self.store.add_trial(self.sweep_id, number, params, config, seed,
                                            resources=self._resources_json, state=TrialState.RUNNING.value,
                                            started=self.clock.time(), attempts=1)
        t = _Trial(id=trial_id, number=number, params=dict(params), config=config, seed=seed)
        t.fresh = True
        self.trials[trial_id] = t
        self.by_number[number] = t
        return t

    def _resolve_config(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """base config < profile (both read once) < sampled params < command-line overrides."""
        from sweeplab.config import apply_overrides, deep_merge
        from sweeplab.space import unflatten

        if self._config_base is None:
            self._config_base = self._load_config_base()
        merged = deep_merge(self._config_base, unflatten(dict(params)))
        return apply_overrides(merged, self.overrides) if self.overrides else merged

    def _load_config_base(self) -> dict[str, Any]:
        from sweeplab.config import load_base_config

        return load_base_config(self.spec.config, self.spec.profile, spec_file=self.spec.source, cwd=self.cwd)

    def _paths(self, t: _Trial) -> dict[str, str]:
        from sweeplab.store.layout import trial_paths

        return trial_paths(self._root, self.name, t.number, t.attempt, self.spec.checkpoint_dir)

    def _import_path(self) -> list[str]:
        """Where a trial's imports are found: the working directory, then the spec file's directory."""
        if self._python_path is None:   # depends only on the spec and cwd: resolved once
            self._python_path = [self.cwd]
            if self.spec.source is not None:
                self._python_path.append(str(Path(self.spec.source).resolve().parent))
        return list(self._python_path)

    def _task(self, t: _Trial, paths: Mapping[str, str]) -> TrialTask:
        spec = self.spec
        cwd = self.cwd
        if spec.function:
            if self._target is None:
                self._target = self._function_target()
            kind, target, command = "function", self._target, None
        else:
            from sweeplab.spec import build_command

            args_file = str(Path(paths["log"]).with_suffix(".args.json"))
            Path(args_file).parent.mkdir(parents=True, exist_ok=True)
            from sweeplab.spec import args_json

            Path(args_file).write_text(args_json(t.params))
            kind, target = "command", None
            command = build_command(spec, t.params, interpreter=sys.executable, args_json_file=args_file)
            spec_dir = Path(spec.source).resolve().parent if spec.source else None
            if spec.program and spec_dir is not None and (spec_dir / spec.program).exists() \
                    and not (Path(self.cwd) / spec.program).exists():
                cwd = str(spec_dir)   # W&B runs `program` relative to where the agent runs; we accept both
        policy = spec.trial
        world_size = int(getattr(self._resources, "workers", 1) or 1)
        return TrialTask(
            trial_id=t.id, number=t.number, attempt=t.attempt, sweep=self.name, kind=kind, target=target,
            command=command, config=t.config, params=t.params, seed=t.seed, smoke=self.smoke,
            log_path=paths["log"], report_path=paths["report"], checkpoint_dir=paths["checkpoint"],
            keep_checkpoints=policy.keep_checkpoints, checkpoint_every=policy.checkpoint_every,
            mtbf=self._mtbf(), grace=policy.grace, heartbeat_interval=_heartbeat_interval(policy),
            cwd=cwd, python_path=self._import_path(), capture_dir=paths["capture"],
            artifacts_dir=paths["artifacts"], torch_profiler=policy.torch_profiler,
            world_size=world_size, **self._decisions(t, world_size),
        )

    def _decisions(self, t: _Trial, world_size: int) -> dict[str, Any]:
        """Rungs at which a function trial waits for the scheduler's verdict (see Scheduler.decision_steps).
        Not for multi-process trials: their ranks run under a supervisor that relays only stops."""
        if self.scheduler is None or not self.spec.function or not self.backend.supports_decisions \
                or world_size > 1:
            return {}
        steps = self.scheduler.decision_steps(t.number)
        return {"decision_steps": list(steps), "decision_metric": self._sched_metric} if steps else {}

    def _function_target(self) -> str:
        """A 'file.py:fn' target is found beside the spec file first, then in the working directory."""
        target = str(self.spec.function)
        module, _, fn = target.rpartition(":")
        if module.endswith(".py") and not Path(module).is_absolute():
            candidates = []
            if self.spec.source is not None:
                candidates.append(Path(self.spec.source).resolve().parent / module)
            candidates.append(Path(self.cwd) / module)
            for c in candidates:
                if c.exists():
                    return f"{c}:{fn}"
        return target

    def _mtbf(self) -> float | None:
        failures = self._failures
        if not failures:
            return None
        return max(1.0, self._elapsed() * max(1, len(self.backend.running())) / failures)

    def _submit(self, t: _Trial) -> None:
        if t.attempt >= 1:
            self._fence(t)      # the attempts before this one are over, whatever they still write
        t.attempt += 1
        t.state = TrialState.RUNNING
        t.stop_verdict = t.stop_state = t.kill_reason = None
        t.stop_at = None
        t.started_mono = self.clock.monotonic()
        t.last_seen = t.started_mono
        t.last_report = None
        paths = self._paths(t)
        task = self._task(t, paths)
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

    # ------------------------------------------------------------------------------------------ events
    def _handle(self, ev: Event) -> None:
        t = self.trials.get(ev.trial)
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

    def _take_where(self, t: _Trial) -> dict[str, Any]:
        where, t.where = t.where, None
        return where or {}

    def _write_where(self) -> None:
        """Store host/pid of attempts that started in this turn and are still running (an attempt that also
        ended in this turn had them written with its end: one statement fewer for short trials)."""
        for t in self._where:
            if t.where:
                self.store.update_attempt(t.id, t.attempt, **self._take_where(t))
        self._where.clear()

    def _on_metrics(self, t: _Trial, ev: Event) -> None:
        points = [tuple.__new__(MetricPoint, p) for p in ev.data.get("points") or ()]   # wire lists -> MetricPoint
        self.store.add_metrics(t.id, t.attempt, points)
        if not points:
            return
        t.last_report = self.clock.monotonic()
        t.costs.update(_costs_of({p[1]: p[2] for p in points}, self.spec.budget.cost))
        metric = self.metric
        verdicts: list[Verdict] = []
        sched_metric = self._sched_metric
        for step, key, value, _ in points:
            t.last[key] = (step, value)
            if key == metric:
                t.intermediate[int(step)] = float(value)
            if key == sched_metric and self.scheduler is not None and t.stop_verdict is None:
                v = self.scheduler.on_report(t.number, int(step), float(value))
                if v.stops:
                    verdicts.append(v)
        self.store.update_trial(t.id, last_step=int(points[-1][0]))
        if (self.smoke and (len(t.intermediate) >= _SMOKE_STEPS or int(points[-1][0]) >= _SMOKE_STEPS)
                and t.stop_at is None):  # counted in reports: steps may start at 0 or at 1
            t.stop_at = self.clock.monotonic()     # smoke: fidelity shrinks to a couple of reports
            self.backend.stop(t.id)
        if self.monitors:
            rules = []
            for m in self.monitors:
                v = m.observe(t.number, points)
                if v.decision.value != "continue":
                    rules.append(v)
            rules.sort(key=_fired_at)     # several rules fired in one batch: the earliest step explains it
            verdicts = rules + verdicts   # a health rule (NaN, divergence) says more than a rung comparison
            self._check_monitor_metrics(points)
        for v in verdicts:
            self._apply_verdict(t, v)
        decide = ev.data.get("decide")
        if decide is not None and t.stop_verdict is None:   # the trial waits at a rung: it goes on
            self.backend.go(t.id, int(decide))

    def _check_monitor_metrics(self, points: Sequence[Sequence[Any]]) -> None:
        self._seen_keys.update(str(p[1]) for p in points)
        if self._checked_monitor_metrics:
            return
        done = sum(1 for x in self.trials.values() if x.last)
        if done < 1 or len(self._seen_keys) == 0:
            return
        # after the first trial has reported for a while, name monitors watching metrics nobody logs
        first = min((x for x in self.trials.values() if x.last), key=lambda x: x.number)
        if len(first.intermediate) < 2 and self.metric:
            return
        self._checked_monitor_metrics = True
        for m in self.monitors:
            wanted = m.metrics()
            missing = sorted(k for k in (wanted or ()) if k not in self._seen_keys)
            if missing:
                msg = (f"monitor {m.name!r} watches {', '.join(missing)} but no trial logs it "
                       f"(logged: {', '.join(sorted(self._seen_keys))}); fix the metric name in `monitors`")
                self.on_note(msg)
                self.store.add_event(self.sweep_id, "warning", msg, data={"monitor": m.name, "missing": missing})

    def _apply_verdict(self, t: _Trial, v: Verdict) -> None:
        data = {"rule": v.rule, **dict(v.data)}
        if v.decision.value == "warn":
            self.store.add_event(self.sweep_id, "rule", f"[warn] {v.reason}", trial_id=t.id, attempt=t.attempt,
                                 data=data)
            return
        if t.stop_verdict is not None:
            return
        pruned = v.rule in ("asha", "hyperband", "median") or v.rule.startswith("scheduler")
        t.stop_verdict = v
        t.stop_state = TrialState.PRUNED if pruned else TrialState.STOPPED_BY_RULE
        t.stop_at = self.clock.monotonic()
        self.store.add_event(self.sweep_id, "pruned" if pruned else "rule", v.reason, trial_id=t.id,
                             attempt=t.attempt, data=data)
        self.backend.stop(t.id)

    def _objective(self, t: _Trial, final: Mapping[str, Any]) -> tuple[float | None, str | None]:
        if not self.metric:
            return None, None
        if self.metric in final:
            value = final[self.metric]
        elif self.metric in t.last:
            value = t.last[self.metric][1]
        else:
            logged = sorted(set(final) | set(t.last))
            return None, (f"metric {self.metric!r} was never reported (reported: "
                          f"{', '.join(logged) if logged else 'nothing'})")
        try:
            value = float(value)
        except (TypeError, ValueError):
            return None, f"metric {self.metric!r} is not a number: {value!r}"
        if not math.isfinite(value):
            return None, f"objective {self.metric} is {value}"
        return value, None

    def _on_finished(self, t: _Trial, ev: Event) -> None:
        final = dict(ev.data.get("metrics") or {})
        metrics = {k: v for k, (_, v) in t.last.items()}
        metrics.update(final)
        value, problem = self._objective(t, final)
        now = ev.time
        t.costs.update(_costs_of(final, self.spec.budget.cost))
        held = None if t.started_mono is None else self.clock.monotonic() - t.started_mono
        self._account(t)
        if t.stop_verdict is not None and t.stop_state is not None:
            state, reason = t.stop_state, t.stop_verdict.reason
        elif problem:
            state, reason = TrialState.FAILED, problem
        else:   # returned normally (also after a smoke-mode stop): its value counts
            state, reason = TrialState.COMPLETED, None
        if state is TrialState.FAILED:
            self._consecutive_failures += 1
            self._first_failure = self._first_failure or f"trial {t.number}: {reason}"
        else:
            self._consecutive_failures = 0
        self._end_trial(t, state, value=value, metrics=metrics, reason=reason, at=now,
                        attempt_state=state.value)
        if held is not None:
            self._durations.append(held)
        self._check_crash_loop()

    def _on_failed(self, t: _Trial, ev: Event) -> None:
        d = ev.data
        reason = t.kill_reason or str(d.get("reason") or "failed")
        if t.kill_reason and d.get("reason") and t.kill_reason not in str(d.get("reason")):
            reason = f"{t.kill_reason}"
        self._account(t)
        every_trial = False
        if d.get("bad_input"):   # the worker could not build the config: failing again is certain
            t.no_retry = True
            reason, every_trial = self._config_failure(t, d)
        signature = (str(d.get("error_type")), str(d.get("message")))
        deterministic = signature in t.failures and signature[0] not in ("WorkerDied", "Killed", "None")
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
                                 "exit_code": d.get("exit_code"), "signal": d.get("signal")})
        if t.stop_verdict is not None and t.stop_state is not None:
            # we asked it to stop and it died on the way: the stop decision stands
            self._end_trial(t, t.stop_state, value=None, metrics={k: v for k, (_, v) in t.last.items()},
                            reason=t.stop_verdict.reason, at=ev.time, attempt_state=None)
            return
        retries = self.spec.trial.retries
        failed_attempts = len(t.failures)
        if (not t.no_retry and not deterministic and failed_attempts <= retries and not self._halt
                and self._signal is None):
            t.state = TrialState.QUEUED
            self.store.update_trial(t.id, state=t.state.value, reason=f"retrying after: {reason}")
            self.store.add_event(self.sweep_id, "retry",
                                 f"trial {t.number} attempt {t.attempt} failed ({reason}); retrying "
                                 f"({failed_attempts}/{retries})", trial_id=t.id, attempt=t.attempt)
            self.requeue.append(t)
            return
        if deterministic:
            reason = f"{reason} (failed the same way twice: not retried)"
        self._consecutive_failures += 1
        self._first_failure = self._first_failure or (
            f"trial {t.number}: {reason}\n{(d.get('traceback') or '').rstrip()}")
        self._end_trial(t, TrialState.FAILED, value=None, metrics={k: v for k, (_, v) in t.last.items()},
                        reason=reason, at=ev.time, attempt_state=None)
        if every_trial and self._bad_input is None:
            self._bad_input = reason   # no new trials or retries; running ones end as they will
            self._halt = True
            if self._ending is None:
                self._ending, self._ending_state = reason, SweepState.FAILED
        self._check_crash_loop()

    def _config_failure(self, t: _Trial, d: Mapping[str, Any]) -> tuple[str, bool]:
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
                where = f"config {_shown_path(str(self.spec.config))}" + (
                    f" (profile {self.spec.profile})" if self.spec.profile else "")
        return (f"{where}: {message}" if where else message), True

    def _on_preempted(self, t: _Trial, ev: Event) -> None:
        reason = str(ev.data.get("reason") or "preempted")
        self._account(t)
        self.store.update_attempt(t.id, t.attempt, **self._take_where(t), state="preempted", ended=ev.time,
                                  reason=reason)
        t.state = TrialState.PREEMPTED
        self.store.update_trial(t.id, state=t.state.value, reason=reason)
        self.store.add_event(self.sweep_id, "preempted", f"trial {t.number} preempted ({reason}); requeued",
                             trial_id=t.id, attempt=t.attempt)
        if self._signal is None:
            self.requeue.append(t)

    def _end_trial(self, t: _Trial, state: TrialState, *, value: float | None, metrics: Mapping[str, Any],
                   reason: str | None, at: float, attempt_state: str | None) -> None:
        t.state = state
        t.value = value
        self.store.update_trial(t.id, state=state.value, value=value, metrics=_finite_dict(metrics),
                                ended=at, reason=reason)
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
        self.searcher.tell(t.number, t.params, state, value,
                           intermediate=dict(t.intermediate) if t.intermediate else None)
        if self.scheduler is not None:
            self.scheduler.on_trial_end(t.number, state)
        for m in self.monitors:
            forget = getattr(m, "forget", None)
            if forget is not None:
                forget(t.number)
        target = self.spec.metric.target
        if (target is not None and value is not None and state is TrialState.COMPLETED
                and (value <= target if self.goal is Goal.MINIMIZE else value >= target)):
            self._end(f"metric.target {target:g} reached by trial {t.number}")

    def _note_best(self, t: _Trial) -> None:
        if t.value is None:
            return
        if self._best is None or self.goal.better(t.value, self._best[0]):
            self._best = (t.value, t.number, t.params)

    def _rates(self) -> tuple[float, float]:
        """(cpus, gpus) one running trial holds: resources.cpus/gpus are its totals over all its processes."""
        res = self._resources
        return float(getattr(res, "cpus", 1.0) or 0.0), float(getattr(res, "gpus", 0.0) or 0.0)

    def _account(self, t: _Trial) -> None:
        if t.started_mono is None:
            return
        held = self.clock.monotonic() - t.started_mono
        t.spent += held
        cpus, gpus = self._rates()
        self._spend["cpu_seconds"] = self._spend.get("cpu_seconds", 0.0) + held * cpus
        self._spend["gpu_seconds"] = self._spend.get("gpu_seconds", 0.0) + held * gpus
        t.started_mono = None

    def _budget_spent(self) -> str | None:
        """Which resource or cost budget is spent, counting the time running trials hold so far; or None."""
        b = self.spec.budget
        now = self.clock.monotonic()
        running = sum(now - t.started_mono for tid in self.backend.running()
                      if (t := self.trials.get(tid)) is not None and t.started_mono is not None)
        cpus, gpus = self._rates()
        for key, limit, spent, unit in (
                ("cpu_hours", b.cpu_hours, self._spend.get("cpu_seconds", 0.0) + running * cpus, "cpu"),
                ("gpu_hours", b.gpu_hours, self._spend.get("gpu_seconds", 0.0) + running * gpus, "gpu")):
            if limit is not None and spent >= limit * 3600:
                return f"budget.{key} {limit:g} reached ({spent / 3600:.3g} {unit}-hours held by trials)"
        for name, limit in (b.cost or {}).items():
            spent = self._cost(name, running)
            if spent >= limit:
                how = "spent by trials (reported and priced resource-hours)" if b.prices else "reported by trials"
                return f"budget.cost.{name} {limit:g} reached ({spent:.4g} {name} {how})"
        return None

    def _cost(self, name: str, running_seconds: float = 0.0) -> float:
        """What trials reported under `name`, plus the priced resource-hours (budget.prices) held so far."""
        reported = sum(t.costs.get(name, 0.0) for t in self.trials.values())
        prices = self.spec.budget.prices or {}
        if not prices:
            return reported
        cpus, gpus = self._rates()
        cpu_h = (self._spend.get("cpu_seconds", 0.0) + running_seconds * cpus) / 3600
        gpu_h = (self._spend.get("gpu_seconds", 0.0) + running_seconds * gpus) / 3600
        return reported + cpu_h * prices.get("cpu_hour", 0.0) + gpu_h * prices.get("gpu_hour", 0.0)

    def _stop_running(self, reason: str) -> None:
        """Stop every running trial (state STOPPED) because the sweep's budget is spent."""
        now = self.clock.monotonic()
        for tid in self.backend.running():
            t = self.trials[tid]
            if t.stop_verdict is None:
                t.stop_verdict = Verdict(_stop(), reason, "budget")
                t.stop_state = TrialState.STOPPED
                t.stop_at = now
                self.backend.stop(tid)

    def _check_crash_loop(self) -> None:
        if self._completed_any or self._ending:
            return
        limit = max(_CRASH_LOOP, min(len(self.backend.running()) + 1, 5))
        if self._consecutive_failures >= limit:
            self._end(f"crash loop: the first {self._consecutive_failures} trials all failed; fix the first "
                      f"error and `sweeplab resume {self.name}`:\n{self._first_failure}", state=SweepState.FAILED)

    # ------------------------------------------------------------------------------------------ time
    def _elapsed(self) -> float:
        return self.clock.monotonic() - self._t0

    def _check_time(self) -> None:
        now = self.clock.monotonic()
        policy = self.spec.trial
        budget_time = self.spec.budget.time
        if budget_time is not None and not self._ending and \
                self._time_spent_before + self._elapsed() >= budget_time:
            self._end(f"budget.time {budget_time:g}s reached")
            self._halt = True
            self._stop_running(f"stopped: budget.time {budget_time:g}s reached")
        self._check_budgets()
        for tid in self.backend.running():
            t = self.trials.get(tid)
            if t is None or t.started_mono is None:
                continue
            if t.stop_at is not None and now - t.stop_at > policy.grace and t.kill_reason is None:
                t.kill_reason = f"did not stop within trial.grace ({policy.grace:g}s)"
                self._fence(t)
                self.backend.kill(tid, t.kill_reason)
            elif (policy.timeout is not None and t.spent + now - t.started_mono > policy.timeout
                  and t.kill_reason is None):
                t.kill_reason = f"trial.timeout ({policy.timeout:g}s over all its attempts) exceeded"
                t.no_retry = True
                self._fence(t)
                self.backend.kill(tid, t.kill_reason)
            elif (policy.heartbeat_timeout is not None and t.last_seen is not None
                  and now - t.last_seen > policy.heartbeat_timeout and t.kill_reason is None):
                t.kill_reason = f"no heartbeat for {policy.heartbeat_timeout:g}s (trial.heartbeat_timeout; hung)"
                self._fence(t)
                self.backend.kill(tid, t.kill_reason)
            elif self.monitors and t.stop_verdict is None:
                for m in self.monitors:
                    v = m.idle(t.number, self._wall_of(t.last_report), self.clock.time())
                    if v.decision.value != "continue":
                        with self.store.transaction():
                            self._apply_verdict(t, v)
                        break

    def _fence(self, t: _Trial) -> None:
        """Declare the trial's current attempt dead in its checkpoint directory (checkpoint.fence): a write
        it makes from now on is refused or ignored, never restored by the next attempt."""
        from sweeplab.checkpoint import fence

        with contextlib.suppress(Exception):   # a location this host cannot reach: the kill still happens
            fence(self._paths(t)["checkpoint"], t.attempt)

    def _wall_of(self, mono: float | None) -> float | None:
        if mono is None:
            return None
        return self.clock.time() - (self.clock.monotonic() - mono)

    def _check_budgets(self) -> None:
        """cpu_hours / gpu_hours / cost spent: no new trials or retries; running trials finish (--hard: stop)."""
        b = self.spec.budget
        if self._ending or (b.cpu_hours is None and b.gpu_hours is None and not b.cost):
            return
        reason = self._budget_spent()
        if reason is None:
            return
        self._end(reason)
        self._halt = True
        if self.hard_budget:
            self._stop_running(f"stopped: {reason}")

    # ------------------------------------------------------------------------------------------ ending
    def _end(self, reason: str, state: SweepState = SweepState.FINISHED) -> None:
        if state is SweepState.FAILED:
            self._halt = True
        if self._ending is None:
            self._ending = reason
            self._ending_state = state
            if state is SweepState.FAILED:
                self.on_note(reason)

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in TrialState}
        for t in self.trials.values():
            out[t.state.value] += 1
        return out

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
            eta = remaining * per / max(1, len(self.backend.running()) or len(getattr(self.backend, "slots", [1])))
        best = self._best
        self.on_progress(Progress(
            sweep=self.name, counts=counts, running=len(self.backend.running()), created=len(self.trials),
            budget_trials=self.max_trials, best_value=best[0] if best else None,
            best_trial=best[1] if best else None, best_params=best[2] if best else None,
            elapsed=self._elapsed(), eta=eta,
        ))

    def _save_spend(self) -> None:
        self._spend["seconds"] = self._time_spent_before + self._elapsed()
        self._spend["trials"] = float(len(self.trials))
        for name in self.spec.budget.cost or {}:
            self._spend[f"cost.{name}"] = self._cost(name)
        self.store.update_sweep(self.sweep_id, spend=self._spend)

    def _finish(self) -> SweepOutcome:
        reason = self._ending or "done"
        state = self._ending_state
        shown = reason
        if not self._completed_any and self._bad_input is None:   # no answer: exit 1, whatever the cause
            if state is SweepState.FINISHED and self._first_failure:
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
        if self._first_failure:
            return f"no trial completed ({counts}): {self._first_failure}"
        return f"no trial completed ({counts}; {ending})"

    def _interrupted(self, grace: float | None = None) -> SweepOutcome:
        """Ctrl-C: stop running trials (INTERRUPTED, requeued on resume). SIGTERM: preempt them."""
        sigterm = self._signal == signal.SIGTERM
        running = list(self.backend.running())
        how = "SIGTERM" if sigterm else "Ctrl-C"
        self.on_note(f"{how}: stopping {len(running)} running trial(s); `sweeplab resume {self.name}` continues")
        if sigterm and hasattr(self.backend, "preempt"):
            for tid in running:
                self.backend.preempt(tid)   # type: ignore[attr-defined]
            wait = self.spec.trial.grace if grace is None else grace
        else:
            for tid in running:
                self.backend.stop(tid)
            wait = min(self.spec.trial.grace, 5.0) if grace is None else grace
        deadline = self.clock.monotonic() + wait
        try:
            while self.backend.running() and self.clock.monotonic() < deadline:
                events = self.backend.poll(0.1)
                with self.store.transaction():
                    for ev in events:
                        if ev.kind is EventKind.FINISHED:
                            t = self.trials.get(ev.trial)
                            if t is not None and ev.attempt == t.attempt and not ev.data.get("stopped"):
                                self._handle(ev)     # it really finished: keep it
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
                self._mark_interrupted(t, f"{how}: killed after the grace period", now)
            self.backend.shutdown(grace=0.0)
            for t in self.trials.values():
                if t.state is TrialState.RUNNING:
                    self._mark_interrupted(t, how, now)
            self._save_spend()
            self.store.update_sweep(self.sweep_id, state=SweepState.STOPPED.value, ended=now,
                                    end_reason=f"interrupted ({how})")
            self.store.add_event(self.sweep_id, "sweep_ended", f"sweep stopped by {how}; resumable")
        return self._outcome(SweepState.STOPPED, f"interrupted ({how})", 0 if sigterm else 130)

    def _handle_interrupted(self, ev: Event) -> None:
        t = self.trials.get(ev.trial)
        if t is None or ev.attempt != t.attempt:
            return
        self._account(t)
        state = TrialState.PREEMPTED if ev.kind is EventKind.PREEMPTED else TrialState.INTERRUPTED
        self._mark_interrupted(t, str(ev.data.get("reason") or state.value), ev.time, state)

    def _mark_interrupted(self, t: _Trial, reason: str, now: float,
                          state: TrialState = TrialState.INTERRUPTED) -> None:
        t.state = state
        self.store.update_trial(t.id, state=state.value, reason=reason)
        self.store.update_attempt(t.id, t.attempt, **self._take_where(t), state=state.value, ended=now,
                                  reason=reason)
        self.store.add_event(self.sweep_id, "interrupted" if state is TrialState.INTERRUPTED else "preempted",
                             f"trial {t.number} {state.value}: {reason}", trial_id=t.id, attempt=t.attempt)

    def _outcome(self, state: SweepState, reason: str, code: int) -> SweepOutcome:
        best = self._best
        return SweepOutcome(sweep=self.name, state=state, reason=reason, counts=self.counts(),
                            best_trial=best[1] if best else None, best_value=best[0] if best else None,
                            best_params=best[2] if best else None, exit_code=code)


# ------------------------------------------------------------------------------------------------ helpers
def _stop() -> Any:
    from sweeplab.types import Decision

    return Decision.STOP


def _one_torch_thread() -> None:
    with contextlib.suppress(Exception):
        import torch

        torch.set_num_threads(1)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _heartbeat_interval(policy: Any) -> float:
    hb = policy.heartbeat_timeout
    if hb is None:
        return _HEARTBEAT_INTERVAL
    return max(0.05, min(_HEARTBEAT_INTERVAL, hb / 4))


def _shown_path(path: str) -> str:
    """A path as the user likely typed it: relative to the working directory when inside it."""
    rel = os.path.relpath(path) if os.path.isabs(path) else path
    return path if rel.startswith("..") else rel


def _loads(text: str | None) -> Any:
    import json

    return json.loads(text) if text else None


def _fired_at(v: Verdict) -> float:
    """The step at which a monitor fired (inf when it does not say)."""
    try:
        return float(v.data.get("step", math.inf))
    except (TypeError, ValueError):
        return math.inf


def _costs_of(values: Mapping[str, Any], names: Mapping[str, float] | None) -> dict[str, float]:
    """The finite values of the budget.cost names among `values` (metrics a trial logged or returned)."""
    out: dict[str, float] = {}
    for name in names or ():
        try:
            v = float(values[name])
        except (KeyError, TypeError, ValueError):
            continue
        if math.isfinite(v):
            out[name] = v
    return out


def _finite_dict(d: Mapping[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k, v in d.items():
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        out[k] = f if math.isfinite(f) else None
    return out


def _resources_dict(res: Any) -> dict[str, Any]:
    from dataclasses import asdict, is_dataclass

    return asdict(res) if is_dataclass(res) else dict(res or {})
