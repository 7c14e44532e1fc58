"""Recovery: a sweep's driver state built from nothing (create, fork) or rebuilt from the store (resume).

Trials that were running when a previous driver died are marked INTERRUPTED and requeued with their
parameters; the searcher is replayed from the trial history and the scheduler from the stored reports, in the
order they first happened; a completed trial is never run again.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NamedTuple

from sweeplab.driver.objectives import feasible, objective_values, rated, violations
from sweeplab.driver.rank_feed import RankFeed
from sweeplab.driver.records import TrialRecord, costs_of, judged_curve, loads
from sweeplab.driver.state import DriverState
from sweeplab.driver.watchdog import Watchdog
from sweeplab.errors import SpecError, StoreError, UserError
from sweeplab.store.queries import unknown_sweep
from sweeplab.types import Decision, SweepState, TrialSnapshot, TrialState

__all__ = ["LockHolder", "Recovery", "read_lock", "take_sweep_lock", "take_sweep_lock_early"]



def _paused(holder: LockHolder | None) -> str:
    """", which is stopped (...)" when the lock holder is a stopped process of this host (Ctrl-Z, SIGSTOP): it
    does nothing until continued, which a user told only "already being run" would not guess."""
    if holder is None or holder.elsewhere:
        return ""
    try:
        with open(f"/proc/{holder.pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""
    if state not in ("T", "t"):
        return ""
    return f", which is stopped (Ctrl-Z or SIGSTOP: `kill -CONT {holder.pid}` or `fg` in its terminal continues it)"


class LockHolder(NamedTuple):
    """The process holding a sweep's lock, as the lock file names it: its pid, host and pid namespace (a store
    on a shared disk is locked from other machines and containers too, where the pid is not this host's), and
    when it was asked to stop. A file of an older sweeplab names only the pid."""

    pid: int
    stopping: float | None = None
    host: str | None = None
    pidns: str | None = None

    @property
    def elsewhere(self) -> str | None:
        """"host NAME" or "another pid namespace ..." when the pid is not one of this host's; None when it is."""
        from sweeplab.store.queries import elsewhere

        return elsewhere(self.host, self.pidns)

    def __str__(self) -> str:
        where = self.elsewhere
        return f"pid {self.pid}" + (f" on {where}" if where else "")


def _lock_text(stopping: float | None = None) -> str:
    from sweeplab.store.queries import pid_namespace

    text = f"pid {os.getpid()}\nhost {os.uname().nodename}\npidns {pid_namespace() or ''}"
    return text if stopping is None else f"{text}\nstopping {stopping:.3f}"


#: sweep locks this process took before its driver existed (`sweeplab resume` as it starts), by the lock file's
#: (device, inode): the same file however its path is spelt (relative, then absolute after a chdir)
_EARLY: dict[tuple[int, int], IO[str]] = {}


def _file_key(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _lock_path(root: Path, name: str) -> Path:
    from sweeplab.store.layout import safe_name

    return Path(root) / "locks" / f"{safe_name(name)}.lock"


def read_lock(root: Path, name: str) -> LockHolder | None:
    """The process holding sweep `name`'s lock, or None when no process holds it. What `sweeplab stop` signals
    when the recorded driver is not (yet) that process (and the holder's pid is this host's)."""
    import fcntl

    try:
        with open(_lock_path(root, name), encoding="utf-8", errors="replace") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return _holder(fh.read())
            return None   # nobody holds it (closing the file drops our shared lock)
    except OSError:
        return None


def _holder(text: str) -> LockHolder | None:
    lines = text.split("\n")
    try:
        pid = int(lines[0].removeprefix("pid ").strip())
    except ValueError:
        return None
    fields = dict(line.partition(" ")[::2] for line in lines[1:])
    stopping = None
    with contextlib.suppress(ValueError):
        stopping = float(fields["stopping"]) if "stopping" in fields else None
    return LockHolder(pid, stopping, fields.get("host") or None, fields.get("pidns") or None)


def take_sweep_lock(root: Path, name: str, *, wait: float = 0.0, echo: Callable[[str], None] | None = None
                    ) -> IO[str]:
    """Sweep `name`'s one-driver lock (an flock on `locks/NAME.lock`, held while the returned file is open), with
    this process's pid written in it. A holder that was asked to stop (`sweeplab stop`, Ctrl-C: it marked the
    file) is waited for up to `wait` seconds (it checkpoints its trials within trial.grace); any other holder,
    or one still stopping then, is refused with a message saying which."""
    import fcntl

    path = _lock_path(root, name)
    key = _file_key(path)
    early = _EARLY.pop(key, None) if key is not None else None
    if early is not None:
        return early
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a+")   # held open, and locked, for this driver's life
    except OSError as exc:   # `locks` a file, the lock a directory (a cleanup script, a sync tool)
        where = path.parent if path.parent.exists() and not path.parent.is_dir() else path
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):   # nothing in the way: a read-only mount
            raise StoreError(f"cannot lock sweep {name!r} in the store: {where}: {exc.strerror or exc}; "
                             f"a sweep runs only where {path.parent} is writable") from None
        raise StoreError(f"cannot lock sweep {name!r} in the store: {where}: {exc.strerror or exc}; "
                         "remove or move it (it holds no results) and run the command again") from None
    deadline, told = time.monotonic() + wait, False
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            fh.seek(0)
            text = fh.read()
            found = _holder(text)
            holder = str(found) if found else (text.strip() or "another process")
            stopping = found.stopping if found else None
            if stopping is not None and time.monotonic() < deadline and not _paused(found):
                if not told and echo is not None:
                    echo(f"sweep {name}: its driver ({holder}) is stopping (asked to stop at "
                         f"{time.strftime('%H:%M:%S', time.localtime(stopping))}); waiting up to {wait:.0f}s for it "
                         "to exit")
                    told = True
                time.sleep(0.1)
                continue
            fh.close()
            if stopping is not None:
                asked = time.strftime('%H:%M:%S', time.localtime(stopping))
                paused = _paused(found)
                if paused:   # it cannot finish stopping until continued
                    raise UserError(f"sweep {name!r}: its driver ({holder}) was asked to stop at {asked}{paused}; "
                                    "it exits once continued: run the command again then") from None
                raise UserError(f"sweep {name!r}: its driver ({holder}) is still stopping (asked to stop at {asked}): "
                                "its trials checkpoint within trial.grace; wait for it to exit and run the command "
                                "again") from None
            raise UserError(f"sweep {name!r} is already being run by {holder}{_paused(found)}; "
                            f"`sweeplab stop {shlex.quote(name)}` stops it") from None
    try:   # the holder's pid, for the refusal above; a full disk fails here first (a new sweep's lock)
        fh.seek(0)
        fh.truncate()
        fh.write(_lock_text())
        fh.flush()
    except OSError as exc:
        with contextlib.suppress(OSError):
            fh.close()   # drops the flock: nothing was started
        raise StoreError(f"cannot write the store {path}: {exc.strerror or exc} (is the disk full, or a "
                         "file-size limit reached?); free some space and run the command again") from None
    return fh


def take_sweep_lock_early(root: Path, name: str, *, wait: float, echo: Callable[[str], None]) -> Callable[[], None]:
    """`take_sweep_lock` for a driver this process builds next (`sweeplab resume`, as it starts: a `stop` then
    finds it by the lock, not the pid of the driver it replaces); returns the function that drops it when no
    driver took it over (the command ended first)."""
    fh = take_sweep_lock(root, name, wait=wait, echo=echo)
    st = os.fstat(fh.fileno())
    key = (st.st_dev, st.st_ino)
    _EARLY[key] = fh

    def drop() -> None:
        if _EARLY.get(key) is fh:
            del _EARLY[key]
            fh.close()
    return drop


class Recovery(DriverState):
    """create / fork / resume, and the replay of the searcher and scheduler that resume needs."""

    # ------------------------------------------------------------------------------------------ setup
    def _build_logic(self) -> None:
        from sweeplab.schedulers import make_scheduler
        from sweeplab.search import make_searcher

        if self.searcher is not None:   # rebuilt (fork, then resume): stop the old one's prefetching
            self.searcher.close()
        file = str(self.spec.source) if self.spec.source else None
        options: dict[str, Any] = {"metric": self.metric} if self.metric else {}
        if self.metric and self.spec.metric.impute:
            options["impute"] = self.spec.metric.impute   # failed trials, as model-based searchers see them
        if self.spec.multi_objective:   # every objective's goal, the first one's is `goal`
            options["goals"] = tuple(o.goal.value for o in self.spec.objectives)
        if self.spec.constraints:
            options["constraints"] = len(self.spec.constraints)
        self.searcher = make_searcher(self.spec.method, self.spec.space, self.goal, self.seed, **options)
        self.searcher.bind(root=str(self.store.root.resolve()), sweep=self.name)
        for note in self.searcher.notes:
            self.on_note(note)
        if self.spec.early_terminate:
            if not self.metric:
                raise SpecError("early_terminate needs metric.name: the value schedulers compare", file=file,
                                key="early_terminate")
            self.scheduler = make_scheduler(self.spec.early_terminate, goal=self.spec.scheduler_goal, file=file,
                                            metric=self.metric)   # built in smoke mode too: its keys are checked
            if self.smoke:   # two reports are no ground to prune on: smoke trials run to their stop (monitors act)
                self.scheduler = None
        self.monitors = []
        if self.spec.monitors:   # imported only then: a sweep without monitors does not pay for the module
            from sweeplab.monitors import parse_monitors

            judged = [*(o.name for o in self.spec.objectives), (self.spec.early_terminate or {}).get("metric"),
                      *(c.metric for c in self.spec.constraints)]   # what `nan` watches besides the losses
            self.monitors = parse_monitors(list(self.spec.monitors), file=file, metric=self.metric, goal=self.goal,
                                           watch=[str(m) for m in judged if m],
                                           goals={str(o.name): o.goal for o in self.spec.objectives if o.name})
        # the value schedulers judge: early_terminate.metric when given, else the sweep's metric
        self._sched_metric = (self.scheduler.metric or self.metric) if self.scheduler else None
        if self.scheduler is not None and self.spec.multi_objective:   # the rung rule, named in PRUNED reasons
            judge_by_rank = getattr(self.scheduler, "judge_by_rank", None)
            named = (self.spec.early_terminate or {}).get("metric")
            if not named and judge_by_rank is not None:
                self._rank_keys = tuple(str(o.name) for o in self.spec.objectives)
                self._rank_feed = RankFeed(self._rank_keys)
                judge_by_rank(tuple(o.goal for o in self.spec.objectives), self._rank_keys)
                self._sched_rule = "rank rule: several objectives and no early_terminate.metric"
            else:
                how = "early_terminate.metric" if named else "the first objective"
                self._sched_rule = (f"judged on {self._sched_metric} ({how}) of {len(self.spec.objectives)} "
                                    "objectives")
        self.watchdog = Watchdog(self.spec.trial, self.monitors, self.budget, self.clock)

    def _lock(self) -> None:
        """One driver per sweep: an flock held for this process's life (the OS drops it if we are killed). A lock
        this process took already (`take_sweep_lock` by `sweeplab resume`, as it starts) is this driver's."""
        if self._lock_file is not None:
            return
        self._lock_file = take_sweep_lock(self.store.root, self.name, wait=self.spec.trial.grace + 10.0,
                                          echo=self.on_note)

    def mark_stopping(self) -> None:
        """Say in the lock file that this driver was asked to stop (SIGTERM, Ctrl-C) and when: a `resume` typed
        meanwhile waits for it to exit, or says it is stopping, rather than "already being run"."""
        fh = self._lock_file
        if fh is None:
            return
        with contextlib.suppress(OSError, ValueError):
            fh.seek(0)
            fh.truncate()
            fh.write(_lock_text(stopping=time.time()))
            fh.flush()

    def _record_driver(self) -> None:
        """This process as the sweep's driver (what `sweeplab stop` signals and `status` checks), written as it
        takes the sweep: recorded only once the loop began, a `stop` during a long replay of the history found
        the killed driver's pid ("its driver is gone"), and the resume ran on."""
        import json

        from sweeplab.store.queries import pid_namespace

        self.store.update_sweep(self.sweep_id, driver=json.dumps(   # the host: gethostname()'s, without `socket`
            {"pid": os.getpid(), "host": os.uname().nodename, "started": self.clock.time(),
             "pidns": pid_namespace(),    # a driver in a container is looked up in its own namespace only
             "workers": self.backend.requested_workers,   # `resume` runs as wide again,
             "hard": self.hard_budget}))                   # and stops trials at a budget as it did

    def unlock(self) -> None:
        """Release the one-driver lock once this driver is done: a process that outlives its sweep (a
        notebook kernel, `sl.sweep` in a script that goes on) must not keep `sweeplab resume` out."""
        fh, self._lock_file = self._lock_file, None
        if fh is not None:
            fh.close()   # closing the file drops its flock

    def create(self, *, spec_path: str | None, unique: bool = False, points: bool = True) -> None:
        """Start a new sweep in the store. `unique`: the name was made unique (`api.unique_name`, `base-2`...)
        before; a sweep of that name started meanwhile by another process (the same spec launched twice at
        once) moves this one to the next free name, where it would otherwise be refused. `points`: create the
        spec's `points_to_evaluate` as its first trials (`fork` creates them after the trials it takes)."""
        for _ in range(1000):
            try:
                self._lock()
                if self.store.sweep_row(self.name) is None:
                    break
                taken: UserError = UserError(
                    f"a sweep named {self.name!r} already exists in {self.store.root}; `sweeplab resume "
                    f"{shlex.quote(self.name)}` continues it, or give the sweep another name")
            except UserError as exc:   # its lock is held: another driver is creating or running it
                taken = exc
            if not unique:
                raise taken
            self.unlock()
            self._rename(_next_name(self.name, self.store))
        self._check_checkpoint_root()
        self._check_sweep_dirs()
        self.seed = self.spec.seed if self.spec.seed is not None else int.from_bytes(os.urandom(3), "big")
        self._build_logic()
        base = self.tasks.resolve_config({})   # a missing config file or a bad override: exit 2 before the sweep exists
        chosen = self._points(base)            # ... and so does a point the base config cannot complete
        # the sweep and its points together: a sweep committed without them (a driver killed in between) never
        # ran them, its searcher's suggestions took their place on `resume`
        with self.store.transaction():
            self.sweep_id = self.store.create_sweep(
                name=self.name, method=self.spec.method, metric=self.metric, goal=self.goal.value,
                spec=self._stored_spec(), spec_path=spec_path, seed=self.seed,
            )
            self._record_driver()
            queued = self._queue_points(chosen, first=0) if points and chosen else []
        if queued:
            self._searcher.replay(queued)

    def _points(self, base: dict[str, Any]) -> list[dict[str, Any]]:
        """The spec's `points_to_evaluate`, each completed from the base config, as many as the trial budget
        holds (`--trials 2`, smoke mode: the first ones)."""
        from sweeplab.spec.points import complete_points

        chosen = complete_points(self.spec, base)
        return chosen[:self.max_trials] if self.max_trials is not None else chosen

    def _queue_points(self, chosen: list[dict[str, Any]], *, first: int) -> list[TrialSnapshot]:
        """Create the points as queued trials `first`, `first + 1`...: the loop runs them before it asks the
        searcher for anything, and a resume finds them as it finds any trial created and not yet run."""
        from sweeplab.driver.records import resources_dict, trial_seed

        history = []
        with self.store.transaction():
            for number, params in enumerate(chosen, start=first):
                config = self.tasks.resolve_config(params)
                seed = trial_seed(self.seed, number)
                tid = self.store.add_trial(self.sweep_id, number, params, config, seed,
                                           resources=resources_dict(self.spec.resources))
                t = TrialRecord(id=tid, number=number, params=dict(params), config=config, seed=seed,
                                state=TrialState.QUEUED)
                self.trials[tid] = t
                self.by_number[number] = t
                self.requeue.append(t)
                history.append(TrialSnapshot(number=number, params=t.params, state=TrialState.QUEUED, value=None))
            self.store.add_event(self.sweep_id, "info", f"{len(chosen)} point(s) to evaluate queued as trials "
                                 f"{first}-{first + len(chosen) - 1}", data={"points": len(chosen)})
        return history

    def _rename(self, name: str) -> None:
        self.name = self.retry.sweep = self.tasks.sweep = name

    def _check_sweep_dirs(self) -> None:
        """The sweep's directories (its logs, artifacts and working directories under the store, its checkpoint
        directory on a local disk) are directories where they exist. A file in the place of one (a cleanup script,
        a sync tool) failed every trial the same way (`FileExistsError`, `NotADirectoryError`) and burned the
        sweep's budget on failures: it is one error line naming it instead, before anything runs."""
        from sweeplab.store.layout import safe_name

        safe = safe_name(self.name)
        places = [(self.store.root / sub / safe, what) for sub, what in
                  (("logs", "logs"), ("artifacts", "artifacts"), ("workdirs", "working directories"))]
        root = str(self.tasks.checkpoint_root())
        if "://" not in root:   # a checkpoint directory at a URL is the trials' to reach
            places.append((Path(root), "checkpoints"))
        for place, what in places:
            if os.path.lexists(place) and not place.is_dir():
                raise StoreError(f"{place} is not a directory: the trials of sweep {self.name!r} keep their {what} "
                                 "there; remove or move it and run the command again")

    def _check_checkpoint_root(self) -> None:
        """A new sweep's trials restore what is in its checkpoint directory: it must hold nothing (a sweep of
        the same name from another store, sharing `checkpoint_dir:`, would lend its trials its checkpoints)."""
        from sweeplab.checkpoint import entries

        root = self.tasks.checkpoint_root()
        try:
            found = entries(root)
        except OSError:   # unreadable here: the trials' own saves will say why
            return
        if found:
            raise UserError(f"{root} already holds checkpoints of a sweep named {self.name!r} that is not in "
                            f"{self.store.root} (trials {', '.join(found[:5])}{', ...' if len(found) > 5 else ''}); "
                            "a new sweep would resume its trials from them: give the sweep another name, or delete "
                            "that directory")

    def _discard_unrecorded(self, numbers: set[int]) -> None:
        """Checkpoints of trial numbers the store does not have were written by a trial a killed driver started
        but never recorded: its next trial of that number (other parameters, maybe) must not restore them."""
        from sweeplab.checkpoint import discard, entries

        root = self.tasks.checkpoint_root()
        try:
            found = entries(root)
        except OSError:
            return
        for name in found:
            if name.isdigit() and int(name) not in numbers:
                with contextlib.suppress(OSError):
                    discard(f"{root}/{name}")
                self.store.add_event(self.sweep_id, "info", f"removed the checkpoints of trial {name}, which the "
                                     "driver that started it never recorded", data={"trial": int(name)})

    def _set_aside_untrusted(self, t: TrialRecord) -> None:
        """Before a retried attempt restores: the checkpoints of its trial that no longer hold the checksum the
        store recorded for them (replaced or changed on disk while the sweep was down) are set aside, so that it
        restores the newest one that does (or starts fresh); each one is said in the trial's events. One the store
        never recorded is restored as before: its event was lost with the node or the driver that died (on a
        lost Ray node, the last ones written; with `keep_checkpoints` of them the only ones on disk), and a late
        write of a dead attempt is the fence's to refuse. `sweeplab repro` refuses both (checkpoint/_trust.py)."""
        from sweeplab.checkpoint import recorded_checksums, set_aside, untrusted

        root = str(self.tasks.paths(t)["checkpoint"])
        try:
            found = untrusted(root, recorded_checksums(self.store.checkpoint_rows(t.id)), unrecorded=False)
        except Exception:   # a location this host cannot reach now: the attempt's restore will say why
            return
        for name, why in found:
            try:
                where = set_aside(root, name)
            except Exception:
                where = ""
            self.store.remove_checkpoints(t.id, [name])
            self.store.add_event(self.sweep_id, "checkpoint_untrusted",
                                 f"checkpoint {name} of trial {t.number} is not restored: {why}"
                                 + (f"; moved to {where}" if where else ""),
                                 trial_id=t.id, attempt=t.attempt, data={"checkpoint": name, "moved_to": where})

    def _stored_spec(self) -> dict[str, Any]:
        d = dict(self.spec.to_jsonable())
        d["_sweeplab"] = {"overrides": self.overrides, "smoke": self.smoke, "cwd": self.cwd}
        if self.spec.config is not None:   # a base config given as a pipe: gone at resume, so kept here
            from sweeplab._yaml import piped_text

            piped = piped_text(self.spec.config)
            if piped is not None:
                d["_sweeplab"]["config_text"] = piped
        return d

    def fork(self, source: str, *, spec_path: str | None) -> int:
        """Create this sweep seeded with `source`'s completed trials whose parameters fit the new space.

        They are recorded as completed trials of the new sweep (reason "forked from ..."), so the searcher
        learns from them; `budget.trials` counts the new trials only. Returns how many were taken.
        """
        src = self.store.sweep_row(source)
        if src is None:
            raise unknown_sweep(self.store, source)
        import json

        # all or nothing: a fork committed before it held the old trials (a driver killed, a store error in
        # between) left a sweep that never learnt from them, and its name taken for the fork done again
        with self.store.transaction():
            self.create(spec_path=spec_path, points=False)
            kept = 0
            for r in self.store.trial_rows(int(src["id"])):
                params = json.loads(r["params"] or "{}")
                if r["state"] != TrialState.COMPLETED.value or not self.spec.space.contains(params):
                    continue
                metrics = json.loads(r["metrics"] or "{}")
                value = metrics.get(self.metric) if self.metric else None
                tid = self.store.add_trial(self.sweep_id, kept, params, json.loads(r["config"] or "{}"),
                                           r["seed"], resources=json.loads(r["resources"] or "null"))
                extra: dict[str, Any] = {}
                if self.spec.multi_objective:   # the new spec's objectives and constraints, from its metrics
                    extra["objective_values"] = list(objective_values(self.spec, metrics) or ())
                if self.spec.constraints:
                    extra["feasible"] = feasible(self.spec, metrics)
                self.store.update_trial(tid, state=TrialState.COMPLETED.value, value=value, metrics=metrics,
                                        started=r["started"], ended=r["ended"],
                                        reason=f"forked from {source}/{r['number']}", **extra)
                kept += 1
            self.store.add_event(self.sweep_id, "info", f"forked from {source}: {kept} completed trial(s) fit "
                                 "the new space", data={"source": source, "trials": kept})
            chosen = self._points(self.tasks.resolve_config({}))
            if chosen:   # after the trials taken, queued: resume below requeues and replays them
                self._queue_points(chosen, first=kept)
            trials = self.spec.budget.trials   # counts the new trials, the points among them
            if trials is not None:
                self.max_trials = kept + trials
                self._persist_budget()
        self.trials.clear()
        self.by_number.clear()
        self.requeue.clear()
        self.resume(total_trials=kept + trials if trials is not None else None)
        return kept

    def resume(self, *, extra_trials: int | None = None, total_trials: int | None = None,
               new_spec_path: str | None = None) -> None:
        """Rebuild the driver's state from the store; requeue interrupted and preempted trials.

        With `new_spec_path` the stored spec is replaced by `self.spec` (the caller checked that only
        budgets, early stopping, monitors, resources and trial policy changed).
        """
        for what, n in (("more trials (+N)", extra_trials), ("a new total of trials", total_trials)):
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):   # before any write
                raise UserError(f"--trials: {what} must be at least 1; got {n!r}")
        row = self.store.sweep_row(self.name)
        if row is None:
            raise unknown_sweep(self.store, self.name)
        self._lock()
        try:
            _refuse_a_live_driver(self.name, row)
            self._check_sweep_dirs()
        except (UserError, StoreError):
            self.unlock()
            raise
        self.sweep_id = int(row["id"])
        if new_spec_path is not None:
            old = loads(row["spec"]) or {}
            spec = self._stored_spec()
            spec["_sweeplab"] = {**(old.get("_sweeplab") or {}), "cwd": (old.get("_sweeplab") or {}).get("cwd",
                                                                                                        self.cwd)}
            with self.store.transaction():
                self.store.update_sweep(self.sweep_id, spec=spec, spec_path=new_spec_path)
                self.store.add_event(self.sweep_id, "info", f"spec replaced by {new_spec_path}")
        self.seed = int(row["seed"] or 0)
        spend = loads(row["spend"]) or {}
        self.budget.restore(spend)
        alive = self.budget.restore_alive(spend)   # when a killed driver last saw its running attempts
        self._build_logic()
        rows = self.store.trial_rows(self.sweep_id)
        history: list[TrialSnapshot] = []
        now = self.clock.time()
        decided = self.store.stop_verdicts(self.sweep_id)
        with self.store.transaction():
            self._discard_unrecorded({int(r["number"]) for r in rows})
            for r in rows:
                state = TrialState(r["state"])
                t = TrialRecord(id=int(r["id"]), number=int(r["number"]), params=loads(r["params"]) or {},
                           config=loads(r["config"]) or {}, seed=r["seed"], state=state,
                           attempt=int(r["attempts"] or 0), value=r["value"])
                t.costs = costs_of(loads(r["metrics"]) or {}, self.spec.budget.cost)
                self._restore_objectives(t, r)
                if self.metric:
                    hist = self.store.metric_history(t.id).get(self.metric, [])
                    t.intermediate = {s: v for s, v in hist}
                self.trials[t.id] = t
                self.by_number[t.number] = t
                verdict = decided.get(t.id)
                if verdict is not None and (state is TrialState.RUNNING or state.is_requeueable):
                    self._end_as_decided(t, state, verdict, alive, now)
                elif state is TrialState.RUNNING:
                    t.state = TrialState.INTERRUPTED
                    self.store.update_trial(t.id, state=t.state.value, reason="the driver stopped while it ran")
                    # ended when the driver that ran it last saw it, not now: its downtime is no run time
                    ended = _last_alive(self.store.attempt_started(t.id, t.attempt), alive, now)
                    self.store.update_attempt(t.id, t.attempt, state="interrupted", ended=ended,
                                              reason="the driver stopped while it ran")
                    self.store.add_event(self.sweep_id, "interrupted", f"trial {t.number} was running when the "
                                         "driver stopped; requeued", trial_id=t.id, attempt=t.attempt)
                t.spent = self.store.attempt_seconds(t.id)   # trial.timeout bounds them all
                if t.state.is_requeueable:
                    t.failures = self.store.attempt_failures(t.id)   # retries count over the trial's life
                    for step, key, value, _ in self.store.metric_points(t.id):   # its last reports, as a live
                        # retry keeps them: an attempt that restores its last step's checkpoint and returns
                        # nothing ends with the value its earlier attempt reported, and the costs it reported count
                        t.last[str(key)] = (int(step), math.nan if value is None else float(value))
                    t.costs.update(costs_of({k: v for k, (_, v) in t.last.items()}, self.spec.budget.cost))
                    self.requeue.append(t)
                if verdict is not None and t.state in (TrialState.PRUNED, TrialState.STOPPED_BY_RULE):
                    t.intermediate = judged_curve(t.intermediate, loads(verdict["data"]))   # as told live
                if t.state is TrialState.COMPLETED:
                    self._completed_any = True
                    self._note_best(t)
                    if self.spec.multi_objective:
                        self.pareto.add(t.values, t.feasible)
                history.append(TrialSnapshot(number=t.number, params=t.params, state=t.state, value=t.value,
                                             history={self.metric: tuple(sorted(t.intermediate.items()))}
                                             if self.metric else {}, values=t.values, constraints=t.violations))
            if total_trials is not None:
                self.max_trials = total_trials
            elif extra_trials is not None:
                self.max_trials = len(rows) + extra_trials
            if self.max_trials != self.spec.budget.trials:
                self._persist_budget()
            self.store.update_sweep(self.sweep_id, state=SweepState.RUNNING.value, ended=None, end_reason=None)
            self._record_driver()
            self.store.add_event(self.sweep_id, "sweep_resumed",
                                 f"resumed with {len(rows)} trials, {len(self.requeue)} requeued")
        self._searcher.replay(history)
        if self.scheduler is not None:
            self._replay_scheduler()
        if self.monitors:
            self._replay_monitors()

    def _end_as_decided(self, t: TrialRecord, was: TrialState, verdict: Any, alive: float | None,
                        now: float) -> None:
        """A trial the scheduler pruned (or a monitor stopped) that had not ended when its driver went down
        (killed in the trial's last moments, or an older driver that requeued it): it ends as decided, with what
        it had reported when the decision was taken, instead of running again past the rung that pruned it."""
        state = TrialState.PRUNED if verdict["kind"] == "pruned" else TrialState.STOPPED_BY_RULE
        cut = float(verdict["time"])
        last: dict[str, Any] = {}
        t.intermediate = {}   # what it reported after the decision, its searcher never heard of either
        for step, key, value, at in self.store.metric_points(t.id):
            if float(at) <= cut:
                last[str(key)] = value
                if key == self.metric:
                    t.intermediate[int(step)] = math.nan if value is None else float(value)
        value = last.get(self.metric) if self.metric else None
        t.state, t.value = state, None if value is None else float(value)
        extra: dict[str, Any] = {}
        if self.spec.multi_objective:
            t.values = objective_values(self.spec, last)
            extra["objective_values"] = list(t.values or ())
        if rated(self.spec, state is TrialState.COMPLETED, last):
            t.violations, t.feasible = violations(self.spec, last), feasible(self.spec, last)
            extra["feasible"] = t.feasible
        running = self.store.attempt_started(t.id, t.attempt) if was is TrialState.RUNNING else None
        # ended when the driver that ran it last saw it (as an interrupted attempt): its downtime is no run time
        ended = _last_alive(running, alive, now)
        reason = str(verdict["message"])
        self.store.update_trial(t.id, state=state.value, value=t.value, metrics=last, ended=ended, reason=reason,
                                **extra)
        if running is not None:   # the attempt the killed driver left running ends with the trial
            self.store.update_attempt(t.id, t.attempt, state=state.value, ended=ended, reason=reason)
        self.store.add_event(self.sweep_id, "trial_ended", f"trial {t.number} {state.value}: {reason} (decided "
                             "before the driver stopped; not run again)", trial_id=t.id, attempt=t.attempt,
                             data={"state": state.value, "value": t.value})

    def _restore_objectives(self, t: TrialRecord, row: Any) -> None:
        """A stored trial's objective values and constraint violations, back on its record (resume)."""
        if not t.state.is_terminal:
            return
        metrics = loads(row["metrics"]) or {}
        if self.spec.multi_objective:
            stored = loads(row["objective_values"]) if "objective_values" in row.keys() else None
            t.values = tuple(stored) if stored is not None else objective_values(self.spec, metrics)
        if rated(self.spec, t.state is TrialState.COMPLETED, metrics):   # as the live driver rated it
            t.violations = violations(self.spec, metrics)
            t.feasible = feasible(self.spec, metrics)

    def _replay_scheduler(self) -> None:
        """Feed the scheduler the stored reports and trial ends in the order they first happened."""
        by_id, scheduler = self.trials, self.scheduler
        if scheduler is None:
            return
        rows = (self._rank_reports() if self._rank_keys
                else self.store.metric_reports(self.sweep_id, self._sched_metric or ""))
        asked = self.store.stop_requests(self.sweep_id)   # live, reports after a stop verdict are not judged
        timeline: list[tuple[float, int, int, Any, Any]] = [
            (float(r[3]), 0, i, r, None) for i, r in enumerate(rows)
            if r[0] in by_id and float(r[3]) <= asked.get(r[0], math.inf)]
        ended = {int(r["id"]): r["ended"] for r in self.store.trial_rows(self.sweep_id)}
        for t in by_id.values():
            if t.state.is_terminal:
                timeline.append((float(ended.get(t.id) or 0.0), 1, t.number, None, t))
        timeline.sort(key=lambda e: (e[0], e[1], e[2]))
        # what the live driver decided stands: it pruned a trial at the step its `pruned` event names and let
        # every report before that go on; ordered by times, a report that reached it late (buffered points) may
        # meet other trials' results in another order here, and the scheduler may say otherwise
        pruned_at: dict[int, float] = {}
        for tid, v in self.store.stop_verdicts(self.sweep_id).items():
            if v["kind"] == "pruned":
                step = (loads(v["data"]) or {}).get("step")
                pruned_at[tid] = float(step) if isinstance(step, (int, float)) else -math.inf   # older rows: as is
        for _, kind, _, row, t in timeline:
            if kind == 0:
                value = row[2] if isinstance(row[2], tuple) else float("nan") if row[2] is None else float(row[2])
                number = by_id[row[0]].number
                verdict = scheduler.on_report(number, int(row[1]), value)  # type: ignore[arg-type]
                if verdict.stops and int(row[1]) < pruned_at.get(row[0], math.inf):
                    scheduler.overrule(number)
            else:
                scheduler.on_trial_end(t.number, t.state)
                if self._rank_keys and t.feasible is False:   # as live: the rank rule's front is feasible
                    scheduler.exclude_from_front(t.number)   # type: ignore[attr-defined]

    def _replay_monitors(self) -> None:
        """Feed the monitors the stored points of the trials that go on, in the order they were stored, up to
        the first stop request (as live): a plateau's count, a best so far, a running median are what the
        driver that ran them had built (monitors keep their state over a trial's attempts and forget it once
        the trial ends, so ended trials need none). What they decide here was decided and recorded then."""
        from sweeplab.types import MetricPoint

        asked = self.store.stop_requests(self.sweep_id)
        for t in self.trials.values():
            if t.state.is_terminal:
                continue
            cut = asked.get(t.id, math.inf)
            points = [MetricPoint(int(step), str(key), math.nan if value is None else float(value), float(at))
                      for step, key, value, at in self.store.metric_points(t.id) if float(at) <= cut]
            if points:
                for m in self.monitors:
                    if m.observe(t.number, points).decision is Decision.STOP:
                        m.forget(t.number)   # a stop recorded then ended the trial in `resume`; this one was
                        # not (a rule a `--spec` added): it judges the new attempt afresh instead of staying
                        # spent. A warning it gave is not given again while its condition holds, as live

    def _rank_reports(self) -> list[tuple[int, int, tuple[float, ...], float]]:
        """The rank rule's reports, as the live driver fed them: (trial id, step, every objective's value,
        time) once a trial has reported every objective at that step, in the order that happened."""
        rows = sorted(((float(r[3]), i, k, r) for k, key in enumerate(self._rank_keys)
                       for i, r in enumerate(self.store.metric_reports(self.sweep_id, key))),
                      key=lambda e: (e[0], e[1], e[2]))
        closing = {(int(r[0]), int(r[1])): n for n, (_, _, _, r) in enumerate(rows)}   # a step's last row
        feed, out = self._rank_feed or RankFeed(self._rank_keys), []   # live reports go on from its state
        for n, (at, _, k, r) in enumerate(rows):
            tid, step = int(r[0]), int(r[1])
            vector = feed.add(tid, step, self._rank_keys[k], float("nan") if r[2] is None else float(r[2]),
                              closes_step=closing[(tid, step)] == n)
            if vector is not None:
                out.append((tid, step, vector, at))
        return out

    def smoke_check(self) -> tuple[list[str], list[str]]:
        """Before smoke trials: the target imports and every categorical combination fits the typed config."""
        if not self.spec.function:
            return [], []
        from sweeplab.smoke import check_config_combinations

        return check_config_combinations(self.spec, self.tasks.resolve_config, self.tasks.import_path(),
                                         self.tasks.function_target())

    def _persist_budget(self) -> None:
        row = self.store.sweep_by_id(self.sweep_id)
        if row is None:
            return
        spec = loads(row["spec"]) or {}
        spec.setdefault("budget", {})
        if isinstance(spec["budget"], dict):
            spec["budget"]["trials"] = self.max_trials
        spec.pop("run_cap", None)
        self.store.update_sweep(self.sweep_id, spec=spec)


def _last_alive(started: float | None, alive: float | None, now: float) -> float:
    """When an attempt a killed driver left running ended, as far as the store can tell: when that driver last
    saved its spend (`alive`), or the attempt's start when it began after that (the driver died in the moments
    before its next save). Its downtime is no run time: an attempt ended at `now` (the resume) counted the hours
    the machine was down against `trial.timeout`, which then failed the trial unrun. `now` without a record."""
    if alive is None or started is None or not started <= now or not alive <= now:
        return now
    return max(started, alive)


def _next_name(name: str, store: Any) -> str:
    """The name after `name` in `base`, `base-2`, `base-3`... that no sweep of `store` has (nor its directories)."""
    import re

    from sweeplab.store.layout import safe_name

    m = re.fullmatch(r"(.*)-(\d+)", name)
    base, i = (m.group(1), int(m.group(2)) + 1) if m else (name, 2)
    taken = {safe_name(n) for n in store.sweep_names()}
    while safe_name(f"{base}-{i}") in taken:
        i += 1
    return f"{base}-{i}"


def _refuse_a_live_driver(name: str, row: Any) -> None:
    """The one-driver rule beyond the lock file: the flock on `locks/NAME.lock` keeps a second driver out only
    while that file is there; one deleted under a running driver (a cleanup script) let `resume` take a new
    lock and drive the sweep beside it. A `running` sweep whose recorded driver (`queries.driver_status`) is
    alive and not this process is refused the same way."""
    from sweeplab.store.queries import driver_status

    status, _, proc = driver_status(row)
    if status == "alive" and proc.pid != os.getpid():
        raise UserError(f"sweep {name!r} is already being run by pid {proc.pid}{_paused(LockHolder(proc.pid))}; "
                        f"`sweeplab stop {shlex.quote(name)}` stops it")
