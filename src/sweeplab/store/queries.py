"""Read side of the store: pure functions over a (read-only) `Store`, returning JSON-able dicts.

These dicts are the documented JSON API (docs/api.md): `sweeplab status --json`, `sweeplab best --json` and
the dashboard all serve them unchanged. Rules: times are floats (epoch seconds); JSON columns are decoded;
NaN and infinities never appear (they become None); every function costs a bounded number of queries
(no query per trial); every public function reads one snapshot of the store (`Store.snapshot`), so the
parts of an answer (a sweep's counts and its trial list) always agree even while the driver writes.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from sweeplab.errors import UserError
from sweeplab.pareto import hypervolume, nondominated_ranks
from sweeplab.pareto import pareto_front as front_indices
from sweeplab.store.sqlite import INTEGERS, Store
from sweeplab.types import Goal, TrialState

__all__ = [
    "best_trial",
    "changed_since",
    "completed_version",
    "curves",
    "downsample",
    "driver_status",
    "elsewhere",
    "events",
    "finished_version",
    "gone_driver",
    "hypervolume_series",
    "json_safe",
    "list_sweeps",
    "metric_history",
    "metric_keys",
    "pareto_front",
    "pid_namespace",
    "rung_values",
    "sweep_id",
    "sweep_metric_keys",
    "sweep_status",
    "sweep_summary",
    "trial_columns",
    "trial_detail",
    "trial_histories",
    "trial_state_and_keys",
    "trial_states",
    "unknown_sweep",
]

MAX_CURVE_TRIALS = 200
_STATES = [s.value for s in TrialState]

P = ParamSpec("P")
R = TypeVar("R")


def _one_snapshot(fn: Callable[Concatenate[Store, P], R]) -> Callable[Concatenate[Store, P], R]:
    """Run a query entry point inside one read transaction of its store (nested calls join it)."""

    @functools.wraps(fn)
    def wrapper(store: Store, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with store.snapshot():
            return fn(store, *args, **kwargs)

    return wrapper


# ---------------------------------------------------------------------------------------------- helpers
def json_safe(obj: Any) -> Any:
    """`obj` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def _loads(text: str | None, default: Any = None) -> Any:
    if text is None or text == "":
        return default
    try:
        obj = json.loads(text)
    except ValueError:
        return default
    if "NaN" in text or "Infinity" in text:
        obj = json_safe(obj)
    return obj


def _loads_all(texts: Sequence[str | None]) -> list[Any]:
    """`_loads(text, None)` of each text, in one parse of them all (JSON columns the store wrote): a
    10,000-trial sweep's parameters decode in under half the time of 10,000 parses. Where one text is not
    well-formed JSON on its own, each is parsed alone."""
    joined = "[" + ",".join(t if t else "null" for t in texts) + "]"
    try:
        out = json.loads(joined)
    except ValueError:
        out = None
    if not isinstance(out, list) or len(out) != len(texts):
        return [_loads(t, None) for t in texts]
    return json_safe(out) if "NaN" in joined or "Infinity" in joined else out


def _num(x: Any) -> float | None:
    """A finite number, else None: NULL, NaN/inf, and text in a REAL column (SQLite keeps 'abc' there; a
    hand-edited or hostile store.db must not make every reader raise)."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _sweep_or_raise(store: Store, name: str) -> sqlite3.Row:
    row = store.conn.execute("SELECT * FROM sweeps WHERE name=?", (name,)).fetchone() if is_text(name) else None
    if row is None:
        raise unknown_sweep(store, name)
    return row


SHOWN_NAMES = 8   # sweeps an unknown-name error lists (a store can hold hundreds; `status` lists them all)


def is_text(name: Any) -> bool:
    """True when `name` is text SQLite can hold: a command-line argument that is not valid UTF-8 (`$'\\xc3'`, a
    name cut inside a character) reaches Python with lone surrogates, which no stored name has and which
    SQLite cannot bind (a UnicodeEncodeError traceback instead of "no sweep named ...")."""
    if not isinstance(name, str):
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@_one_snapshot
def unknown_sweep(store: Store, name: str) -> UserError:
    """The error for a sweep name the store does not hold: the closest name (case aside) as a "did you mean",
    then the first few sweeps and how many there are, so that the line stays one short line."""
    import difflib

    names = [r[0] for r in store.conn.execute("SELECT name FROM sweeps ORDER BY id")]
    text = f"no sweep named {name!r} in {store.root}"
    lowered = {n.lower(): n for n in reversed(names)}   # the oldest of names equal but for case
    close = difflib.get_close_matches(str(name).lower(), list(lowered), n=1, cutoff=0.6)
    if close:
        text += f"; did you mean {lowered[close[0]]!r}?"
    if not names:
        return UserError(f"{text}; it holds no sweeps yet")
    if len(names) <= SHOWN_NAMES:
        return UserError(f"{text}; sweeps: {', '.join(names)}")
    return UserError(f"{text}; sweeps: {', '.join(names[:SHOWN_NAMES])}, ... ({len(names)} sweeps; "
                     "`sweeplab status` lists them)")


def _bounded(n: Any) -> int:
    """A count or position from a caller (`status -n 99999999999999999999999`), within what SQLite binds."""
    return max(0, min(int(n), INTEGERS.stop - 1))


def _trial_or_raise(store: Store, sweep: sqlite3.Row, number: int) -> sqlite3.Row:
    row = store.conn.execute(
        "SELECT * FROM trials WHERE sweep_id=? AND number=?", (sweep["id"], number)
    ).fetchone() if number in INTEGERS else None
    if row is None:
        lo, hi = store.conn.execute(
            "SELECT MIN(number), MAX(number) FROM trials WHERE sweep_id=?", (sweep["id"],)
        ).fetchone()
        have = "it has no trials" if lo is None else f"trials are {lo}..{hi}"
        raise UserError(f"sweep {sweep['name']!r} has no trial {number}; {have}")
    return row


def _goal(sweep: sqlite3.Row) -> Goal:
    try:
        return Goal(sweep["goal"])
    except ValueError:
        return Goal.MINIMIZE


def _relpath(store: Store, path: str | None) -> str | None:
    return None if path is None else store.relpath(path)


# ---------------------------------------------------------------------------------------------- sweeps
def _sweep_dicts(store: Store, rows: Sequence[sqlite3.Row]) -> list[dict[str, Any]]:
    if not rows:
        return []
    ids = [r["id"] for r in rows]
    marks = ",".join("?" * len(ids))
    counts: dict[int, dict[str, int]] = {i: dict.fromkeys(_STATES, 0) for i in ids}
    sql = (f"SELECT sweep_id, state, n FROM trial_counts WHERE sweep_id IN ({marks}) AND n != 0"
           if store.columns("trial_counts") else   # kept by triggers; a store before them counts its trials
           f"SELECT sweep_id, state, COUNT(*) FROM trials WHERE sweep_id IN ({marks}) GROUP BY sweep_id, state")
    for sid, state, n in store.conn.execute(sql, ids):
        counts[sid][state] = counts[sid].get(state, 0) + n
    best = _best_of(store, ids)
    out = []
    for r in rows:
        spec = _loads(r["spec"], {}) or {}
        budget = dict(spec.get("budget") or {}) if isinstance(spec, dict) else {}
        if isinstance(spec, dict) and spec.get("run_cap") is not None:
            budget.setdefault("trials", spec["run_cap"])
        b = best.get((r["id"], _goal(r)))
        objectives = _objectives(spec, r)
        if b and len(objectives) > 1:   # a tie in the first objective goes to a trial on the front (best_trial)
            tie = _undominated_among_ties(store, r["id"], b[1], objectives)
            b = (tie["number"], b[1]) if tie is not None else b
        out.append({
            "name": r["name"],
            "state": r["state"],
            "method": r["method"],
            "metric": r["metric"],
            "goal": r["goal"],
            "created": r["created"],
            "updated": r["updated"],
            "ended": r["ended"],
            "end_reason": r["end_reason"],
            "counts": counts[r["id"]],
            "trials": sum(counts[r["id"]].values()),
            "best": _num(b[1]) if b else None,
            "best_trial": b[0] if b else None,
            "spend": _loads(r["spend"], {}) or {},
            "budget": budget,
            "backend": r["backend"] if "backend" in r.keys() else None,   # None: a store before version 2
            "address": r["address"] if "address" in r.keys() else None,
            "objectives": [{"name": n, "goal": g.value} for n, g in objectives],
            "constraints": list(spec.get("constraints") or []) if isinstance(spec, dict) else [],
            "driver_gone": gone_driver(r) is not None,
        })
    return out


def driver_status(row: sqlite3.Row) -> tuple[str, dict[str, Any] | None, Any]:
    """Whether the recorded driver of a sweep (its stored row) runs: `(status, driver, process)`, status one of
    "none" (the sweep is not `running`, or recorded no driver), "elsewhere" (recorded on another host: not
    knowable here), "unknown" (this host, but its process may not be looked at), "gone" (killed with `kill -9`,
    its machine rebooted: nothing marked the sweep ended; or its pid is now a newer process than the driver
    that recorded itself) and "alive" (with its psutil process). A driver is its pid and start time, as
    `sweeplab stop` recognises it: `status` and the dashboard say "driver gone", `resume` refuses a live one."""
    if row["state"] != "running" or "driver" not in row.keys() or not row["driver"]:
        return "none", None, None
    try:
        driver = json.loads(row["driver"])
        if not isinstance(driver, dict):
            return "none", None, None
        if driver.get("host") != os.uname().nodename or elsewhere(driver["host"], driver.get("pidns")):
            return "elsewhere", driver, None
        pid, started = int(driver["pid"]), float(driver.get("started") or 0.0)
    except (ValueError, TypeError, KeyError):
        return "none", None, None
    import psutil

    try:
        proc = psutil.Process(pid)
        alive = proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= started + 1.0
    except psutil.NoSuchProcess:
        return "gone", driver, None
    except psutil.Error:   # not ours to look at
        return "unknown", driver, None
    return ("alive", driver, proc) if alive else ("gone", driver, None)


def pid_namespace() -> str | None:
    """This process's pid namespace (`pid:[4026531836]`), which a driver records with its pid: a driver of another
    namespace on this host (a container with the host's name) has a pid that may be any process here."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def elsewhere(host: str | None, pidns: str | None) -> str | None:
    """Where a process recorded as (host, pid namespace) runs when its pid is not this host's own: "host NAME",
    "another pid namespace of this host (a container)", or None (here, or not recorded)."""
    if host is None:
        return None
    if host != os.uname().nodename:
        return f"host {host}"
    if pidns and pidns != pid_namespace():   # a container with the host's name
        return "another pid namespace of this host (a container)"
    return None


def gone_driver(row: sqlite3.Row) -> dict[str, Any] | None:
    """The recorded driver of a `running` sweep when it is known to be gone (`driver_status`), else None; the
    stored state stays `running`."""
    status, driver, _ = driver_status(row)
    return driver if status == "gone" else None


def _best_sql(store: Store, goal: Goal, where: str = "t.sweep_id = s.id") -> str:
    """The best completed feasible trial of a sweep by `goal` (lowest number among ties): a seek down the
    (sweep_id, state, value) index that stops at the first feasible row, however many trials there are."""
    order = "ASC" if goal is Goal.MINIMIZE else "DESC"
    return (f"SELECT t.id FROM trials t WHERE {where} AND t.state='completed' AND t.value IS NOT NULL"
            f"{_feasible_only(store).replace('feasible', 't.feasible')} ORDER BY t.value {order}, t.number ASC "
            "LIMIT 1")


def _best_of(store: Store, ids: Sequence[int]) -> dict[tuple[int, Goal], tuple[int, float]]:
    """(sweep id, goal) -> (number, value) of its best trial, for both goals: one query per goal."""
    marks = ",".join("?" * len(ids))
    out: dict[tuple[int, Goal], tuple[int, float]] = {}
    for goal in Goal:
        for sid, number, value in store.conn.execute(
            f"SELECT s.id, t.number, t.value FROM sweeps s JOIN trials t ON t.id = ({_best_sql(store, goal)}) "
            f"WHERE s.id IN ({marks})", ids,
        ):
            out[(sid, goal)] = (number, value)
    return out


# ---------------------------------------------------------------------------------- several objectives
def _feasible_only(store: Store) -> str:
    """The SQL condition that leaves out infeasible trials (none before schema version 3)."""
    return " AND coalesce(feasible, 1) = 1" if "feasible" in store.columns("trials") else ""


def _objectives(spec: Any, sweep: sqlite3.Row) -> list[tuple[str, Goal]]:
    """(name, goal) of each objective: the stored spec's `metric` list, else the sweep's one metric."""
    metric = spec.get("metric") if isinstance(spec, dict) else None
    if isinstance(metric, list):
        out = []
        for m in metric:
            if isinstance(m, dict) and isinstance(m.get("name"), str):
                try:
                    out.append((m["name"], Goal(m.get("goal", "minimize"))))
                except ValueError:
                    out.append((m["name"], Goal.MINIMIZE))
        return out
    return [(sweep["metric"], _goal(sweep))] if sweep["metric"] else []


def _objective_values(row: sqlite3.Row, names: Sequence[str]) -> list[float | None] | None:
    if "objective_values" not in row.keys() or row["objective_values"] is None:
        return None
    values = _loads(row["objective_values"], None)
    if not isinstance(values, list) or len(values) != len(names):
        return None
    return [_num(v) for v in values]


def _front_points(rows: Sequence[sqlite3.Row], names: Sequence[str]) -> list[Sequence[float | None]]:
    """Each trial's objective values where it counts for the front (completed, feasible), else Nones."""
    points: list[Sequence[float | None]] = []
    for r in rows:
        values = _objective_values(r, names)
        usable = (r["state"] == TrialState.COMPLETED.value and values is not None
                  and ("feasible" not in r.keys() or r["feasible"] != 0))
        points.append(values if usable and values is not None else [None] * len(names))
    return points


def _ranks(rows: Sequence[sqlite3.Row], objectives: Sequence[tuple[str, Goal]]) -> list[int | None]:
    """Each trial's front rank among the completed feasible trials (1: the Pareto front); None for the
    others, and for every trial of a sweep with one objective."""
    if len(objectives) < 2:
        return [None] * len(rows)
    names, goals = [n for n, _ in objectives], [g for _, g in objectives]
    return nondominated_ranks(_front_points(rows, names), goals)


def _trial_rows(store: Store, sweep_id: int, where: str = "", args: Sequence[Any] = (),
                tail: str = "ORDER BY number") -> list[sqlite3.Row]:
    extra = "".join(f", {c}" for c in ("objective_values", "feasible") if c in store.columns("trials"))
    return store.conn.execute(
        f"SELECT number, state, value, params, attempts, started, ended, reason, metrics{extra} FROM trials "
        f"WHERE sweep_id=? {where} {tail}", (sweep_id, *args)).fetchall()


_ACTIVE = ("queued", "running")


def _latest_rows(store: Store, sweep_id: int, limit: int, goal: Goal) -> list[sqlite3.Row]:
    """The sweep's `limit` newest trials (by number), every queued or running one and the best one, by
    number: index seeks whose cost follows `limit` and the number of workers, not the size of the sweep."""
    latest = _trial_rows(store, sweep_id, tail="ORDER BY number DESC LIMIT ?", args=(_bounded(limit),))
    active = _trial_rows(store, sweep_id, f"AND state IN ({','.join('?' * len(_ACTIVE))})", _ACTIVE,
                         tail="")   # (ordered by number, SQLite would walk every trial in number order)
    best = _trial_rows(store, sweep_id, f"AND id = ({_best_sql(store, goal, 't.sweep_id=?')})", (sweep_id,),
                       tail="")
    by_number = {r["number"]: r for r in (*latest, *active, *best)}
    return [by_number[n] for n in sorted(by_number)]


@_one_snapshot
def pareto_front(store: Store, name: str) -> list[dict[str, Any]]:
    """The feasible Pareto front of a sweep with several objectives, by trial number:
    [{"trial": n, "values": {objective: value}, "params": {...}}] (what `sweeplab best --json` prints)."""
    sweep = _sweep_or_raise(store, name)
    objectives = _objectives(_loads(sweep["spec"], {}), sweep)
    rows = _trial_rows(store, sweep["id"])
    names = [n for n, _ in objectives]
    if len(objectives) < 2:
        return []
    on = set(front_indices(_front_points(rows, names), [g for _, g in objectives]))   # the front alone, not ranks
    return [{"trial": r["number"], "values": dict(zip(names, _objective_values(r, names) or [])),
             "params": _loads(r["params"], {})}
            for i, r in enumerate(rows) if i in on]


@_one_snapshot
def hypervolume_series(store: Store, name: str) -> dict[str, Any]:
    """The hypervolume of the sweep's feasible front as it grew (the driver's `hypervolume` events):
    {"trials": [completed trials so far], "hypervolume": [...], "reference": [...] of the latest row}.

    Without a fixed reference (every objective's `reference`) the driver's reference follows the front, so
    its recorded volumes are on different scales; each row's volume is then recomputed from the front points
    it recorded against the latest reference: one scale, and a series that never decreases (each front
    weakly dominates the one before it)."""
    sweep = _sweep_or_raise(store, name)
    rows = [_loads(text, {}) or {} for (text,) in store.conn.execute(
        "SELECT data FROM events WHERE sweep_id=? AND kind='hypervolume' ORDER BY id", (sweep["id"],))]
    reference = rows[-1].get("reference") if rows else None
    goals = [g for _, g in _objectives(_loads(sweep["spec"], {}), sweep)]
    volumes: list[float | None] = []
    for data in rows:
        points = data.get("points")
        if data.get("reference") != reference and isinstance(points, list) and reference and goals:
            try:
                volumes.append(hypervolume(points, goals, reference))
                continue
            except (TypeError, ValueError):   # a malformed row: shown as recorded
                pass
        volumes.append(_num(data.get("hypervolume")))
    return {"trials": [d.get("trials") for d in rows], "hypervolume": volumes, "reference": reference}


@_one_snapshot
def list_sweeps(store: Store) -> list[dict[str, Any]]:
    """Every sweep in the store, oldest first, with trial counts by state, best value, spend and budget."""
    rows = store.conn.execute("SELECT * FROM sweeps ORDER BY id").fetchall()
    return _sweep_dicts(store, rows)


@_one_snapshot
def sweep_id(store: Store, name: str) -> int:
    """The id of the sweep called `name`; a UserError naming the sweeps there are when there is none."""
    return int(_sweep_or_raise(store, name)["id"])


def _sweep_dict(store: Store, row: sqlite3.Row) -> dict[str, Any]:
    return _sweep_dicts(store, [row])[0]


@_one_snapshot
def sweep_summary(store: Store, name: str) -> dict[str, Any]:
    """One sweep (as in `list_sweeps`) plus its resolved spec: {"sweep", "spec", "spec_path", "seed"}."""
    row = _sweep_or_raise(store, name)
    return {"sweep": _sweep_dict(store, row), "spec": _loads(row["spec"], {}), "spec_path": row["spec_path"],
            "seed": row["seed"]}


def _trial_dict(row: sqlite3.Row, names: Sequence[str] = (), rank: int | None = None) -> dict[str, Any]:
    out = {
        "number": row["number"],
        "state": row["state"],
        "value": _num(row["value"]),
        "params": _loads(row["params"], {}),
        "attempts": row["attempts"],
        "started": row["started"],
        "ended": row["ended"],
        "reason": row["reason"],
        "metrics": _loads(row["metrics"], None),
    }
    if len(names) > 1:   # several objectives: each one's value and the trial's front rank
        values = _objective_values(row, names)
        out["values"] = dict(zip(names, values)) if values is not None else None
        out["rank"] = rank
    if "feasible" in row.keys() and row["feasible"] is not None:
        out["feasible"] = bool(row["feasible"])
    return out


@_one_snapshot
def sweep_status(store: Store, name: str, limit: int | None = None) -> dict[str, Any]:
    """The sweep (as in `list_sweeps`) and all of its trials, by number. With several objectives each trial
    has "values" and "rank" (1: on the feasible Pareto front); with constraints, "feasible".

    With `limit`, only the `limit` newest trials, every queued or running one and the best one (with several
    objectives: the whole feasible Pareto front), still by number (the sweep's "trials" and "counts" count
    them all), and "omitted": how many trials were left out. With one objective its cost then does not grow
    with the sweep (ranks over several objectives need every trial).
    """
    sweep = _sweep_or_raise(store, name)
    objectives = _objectives(_loads(sweep["spec"], {}), sweep)
    names = [n for n, _ in objectives]
    if limit is None or len(objectives) > 1:
        rows = _trial_rows(store, sweep["id"])
        ranks = _ranks(rows, objectives)
    else:
        rows = _latest_rows(store, sweep["id"], limit, _goal(sweep))
        ranks = [None] * len(rows)
    pairs = list(zip(rows, ranks))
    if limit is not None and len(objectives) > 1:
        keep = {r["number"] for r in rows[-limit:] if limit > 0}
        pairs = [(r, rank) for r, rank in pairs if r["number"] in keep or rank == 1 or r["state"] in _ACTIVE]
    out: dict[str, Any] = {"sweep": _sweep_dict(store, sweep),
                           "trials": [_trial_dict(r, names, rank) for r, rank in pairs]}
    if limit is not None:
        out["omitted"] = out["sweep"]["trials"] - len(out["trials"])
    return out


@_one_snapshot
def best_trial(store: Store, name: str) -> dict[str, Any] | None:
    """The best COMPLETED feasible trial with a finite value (by the sweep's goal), or None."""
    sweep = _sweep_or_raise(store, name)
    best = _best_sql(store, _goal(sweep), "t.sweep_id=?")
    row = store.conn.execute(f"SELECT number, value, params, metrics FROM trials WHERE id = ({best})",
                             (sweep["id"],)).fetchone()
    if row is None or _num(row["value"]) is None:
        return None
    objectives = _objectives(_loads(sweep["spec"], {}), sweep)
    if len(objectives) > 1:   # several trials best in the first objective: one of them on the front
        row = _undominated_among_ties(store, sweep["id"], row["value"], objectives) or row
    return {
        "sweep": name,
        "trial": row["number"],
        "value": _num(row["value"]),
        "params": _loads(row["params"], {}),
        "metrics": _loads(row["metrics"], None),
    }


def _undominated_among_ties(store: Store, sweep_id: int, value: float,
                            objectives: Sequence[tuple[str, Goal]]) -> sqlite3.Row | None:
    """Of the completed feasible trials whose first objective is the best `value`, when there are several, the
    lowest-numbered one that no other of them dominates in the others (else None): the best trial of a sweep
    with several objectives is the first objective's, and a tie there (0.0 accuracy lost, a quantised
    latency) was broken by trial number alone, so `best` could be a dominated trial, (0, 2) where (0, 0) was
    there too. An index range read of the ties."""
    ties = store.conn.execute(
        "SELECT number, value, params, metrics, objective_values FROM trials WHERE sweep_id=? AND "
        f"state='completed' AND value=?{_feasible_only(store)} ORDER BY number", (sweep_id, value),
    ).fetchall()
    if len(ties) < 2:
        return None
    names = [n for n, _ in objectives]
    on = front_indices([_objective_values(t, names) or [None] * len(names) for t in ties],
                       [g for _, g in objectives])
    return ties[min(on)] if on else None


def _last_seq(store: Store, sweep_id: int) -> int:
    """The sweep's highest trial change number (`trials.seq`): an index seek; 0 before schema version 4."""
    if "seq" not in store.columns("trials"):
        return 0
    row = store.conn.execute("SELECT seq FROM trials WHERE sweep_id=? AND seq IS NOT NULL ORDER BY seq DESC "
                             "LIMIT 1", (sweep_id,)).fetchone()
    return int(row[0]) if row else 0


@_one_snapshot
def trial_columns(store: Store, name: str, since: int | None = None, limit: int | None = None,
                  with_metrics: bool = True) -> dict[str, Any]:
    """All trials of a sweep in columnar form (compact; what the dashboard's plots and table need).

    {"sweep": ..., "n": N, "number": [...], "state": [...], "value": [...], "started": [...],
     "ended": [...], "attempts": [...], "reason": [...], "params": {name: [...]},
     "metrics": {key: [...]}, "seq": S, "full": true}  -- params/metrics hold None where a trial lacks that
    name; "seq" is the sweep's highest trial change number.

    With `since` (a "seq" an earlier answer gave), only the trials that changed after it, in the same form
    with "full": false ("n" counts them): an index range read, its cost set by how many changed, not by the
    size of the sweep. The whole list ("full": true) comes back instead where a change list cannot be
    merged: a sweep with several objectives (a trial's front rank depends on every other trial) or a store
    before schema version 4.

    With `limit`, the first `limit` trials by number (a table's first page, an index range) and "total":
    how many trials the sweep has; "full" is true when that is all of them. A sweep with several objectives
    gets every trial (their ranks need them all).

    Without `with_metrics`, "metrics" is empty and the final metrics are not parsed (parameter importance
    needs none of them: a trial of 100,000 final metrics took seconds to parse).
    """
    sweep = _sweep_or_raise(store, name)
    seq = _last_seq(store, sweep["id"])
    several = len(_objectives(_loads(sweep["spec"], {}), sweep)) > 1
    delta = since is not None and "seq" in store.columns("trials") and not several
    page = limit is not None and since is None and not several
    if delta:   # by the (sweep_id, seq) index, then by number here (ORDER BY number would walk the sweep)
        rows = sorted(_trial_rows(store, sweep["id"], "AND seq > ?", (_bounded(since or 0),), tail=""),
                      key=lambda r: r["number"])
    elif page:
        rows = _trial_rows(store, sweep["id"], tail="ORDER BY number LIMIT ?", args=(_bounded(limit or 0),))
    else:
        rows = _trial_rows(store, sweep["id"])
    n = len(rows)
    summary = _sweep_dict(store, sweep)
    params: dict[str, list[Any]] = {}
    metrics: dict[str, list[Any]] = {}
    for target, field in ((params, "params"), (metrics, "metrics"))[:2 if with_metrics else 1]:
        for i, obj in enumerate(_loads_all([r[field] for r in rows])):
            if not isinstance(obj, dict):
                continue
            for k, v in obj.items():
                col = target.get(k)
                if col is None:
                    col = target[k] = [None] * n
                col[i] = v if isinstance(v, (int, float, str, bool)) or v is None else json.dumps(v)
    return {
        "sweep": summary,
        "n": n,
        "number": [r["number"] for r in rows],
        "state": [r["state"] for r in rows],
        "value": [_num(r["value"]) for r in rows],
        "started": [r["started"] for r in rows],
        "ended": [r["ended"] for r in rows],
        "attempts": [r["attempts"] for r in rows],
        "reason": [r["reason"] for r in rows],
        "params": params,
        "metrics": metrics,
        **_objective_columns(store, sweep, rows),
        "seq": seq,
        "full": not delta and (not page or n >= summary["trials"]),
        **({"since": since} if delta else {}),
        **({"total": summary["trials"]} if page else {}),
    }


def _objective_columns(store: Store, sweep: sqlite3.Row, rows: Sequence[sqlite3.Row]) -> dict[str, Any]:
    """trial_columns' extra columns: "feasible" (with constraints) and, with several objectives,
    "values" {objective: [...]} and "rank" [...] (1: on the feasible Pareto front)."""
    out: dict[str, Any] = {}
    if "feasible" in store.columns("trials") and any(r["feasible"] is not None for r in rows):
        out["feasible"] = [None if r["feasible"] is None else bool(r["feasible"]) for r in rows]
    objectives = _objectives(_loads(sweep["spec"], {}), sweep)
    if len(objectives) > 1:
        names = [n for n, _ in objectives]
        per_trial = [_objective_values(r, names) or [None] * len(names) for r in rows]
        out["values"] = {name: [v[k] for v in per_trial] for k, name in enumerate(names)}
        out["rank"] = _ranks(rows, objectives)
    return out


@_one_snapshot
def sweep_metric_keys(store: Store, sweep_id: int) -> list[str] | None:
    """The metric keys the sweep's trials have logged, by name, from `sweep_keys` (kept by the writer as
    points arrive): one indexed read of a row per key. None for a store before schema version 4 (the caller
    then scans the trials' metrics, `metric_keys`)."""
    if not store.columns("sweep_keys"):
        return None
    return [r[0] for r in store.conn.execute("SELECT key FROM sweep_keys WHERE sweep_id=? ORDER BY key",
                                             (sweep_id,))]


@_one_snapshot
def trial_states(store: Store, sweep_id: int) -> list[tuple[int, str]]:
    """(trial id, state) of every trial of the sweep with id `sweep_id`, by trial number."""
    return [(int(r[0]), str(r[1])) for r in store.conn.execute(
        "SELECT id, state FROM trials WHERE sweep_id=? ORDER BY number", (sweep_id,))]


@_one_snapshot
def completed_version(store: Store, name: str) -> tuple[Any, ...]:
    """A token that changes only when the sweep's set of completed trials (or their values) changes:
    (count, total of values, highest number). Caches of answers over completed trials key on it."""
    row = store.conn.execute(
        "SELECT COUNT(*), TOTAL(t.value), MAX(t.number) FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
        "WHERE s.name=? AND t.state='completed'",
        (name,),
    ).fetchone()
    return tuple(row)


_ENDED = tuple(s.value for s in TrialState if s.is_terminal)


@_one_snapshot
def finished_version(store: Store, name: str) -> tuple[Any, ...]:
    """Like `completed_version`, over every trial that has ended (completed, pruned, stopped, failed...):
    caches of answers that use early-stopped trials' intermediate values key on it. Its first item is how
    many trials have ended."""
    marks = ",".join("?" * len(_ENDED))
    counted = store.columns("trial_counts")
    if "changes" in counted:   # kept by triggers: a few rows, however many trials ended; integers only
        count, changes, steps = store.conn.execute(
            "SELECT TOTAL(c.n), SUM(c.changes), TOTAL(c.step_total) FROM trial_counts c "
            f"JOIN sweeps s ON s.id = c.sweep_id WHERE s.name=? AND c.state IN ({marks})", (name, *_ENDED),
        ).fetchone()
        return (int(count), changes or 0, steps)
    if counted:   # a store of schema version 3 (read as it is): values summed as floats
        count, total, steps = store.conn.execute(
            "SELECT TOTAL(c.n), TOTAL(c.value_total), TOTAL(c.step_total) FROM trial_counts c "
            f"JOIN sweeps s ON s.id = c.sweep_id WHERE s.name=? AND c.state IN ({marks})", (name, *_ENDED),
        ).fetchone()
        return (int(count), _num(total), steps)
    row = store.conn.execute(
        "SELECT COUNT(*), TOTAL(t.value), MAX(t.number), TOTAL(t.last_step) FROM trials t "
        f"JOIN sweeps s ON s.id = t.sweep_id WHERE s.name=? AND t.state IN ({marks})",
        (name, *_ENDED),
    ).fetchone()
    return tuple(row)


# Trials whose intermediate values describe their configuration (a failed trial's may be garbage).
_RUNG_STATES = ("completed", "pruned", "stopped_by_rule", "stopped")


@_one_snapshot
def rung_values(store: Store, name: str, key: str) -> dict[str, Any]:
    """Each ended trial's value of metric `key` at one common step (a "rung"), for comparing trials that
    were stopped early (ASHA, hyperband, median) with those that ran to the end.

    The rung is the highest step that at least half of the trials which logged `key` reached; a trial's
    value there is its last finite value at or before that step. Returns {"step", "number": [...],
    "state": [...], "value": [...]} (step None when no trial logged `key`).
    """
    sweep = _sweep_or_raise(store, name)
    marks = ",".join("?" * len(_RUNG_STATES))
    rows = store.conn.execute(
        "SELECT t.id, t.number, t.state, (SELECT MAX(m.step) FROM metrics m WHERE m.trial_id=t.id AND m.key=? "
        "AND m.value IS NOT NULL) AS last FROM trials t "
        f"WHERE t.sweep_id=? AND t.state IN ({marks}) ORDER BY t.number",
        (key, sweep["id"], *_RUNG_STATES),
    ).fetchall()
    rows = [r for r in rows if r["last"] is not None]
    if not rows:
        return {"step": None, "number": [], "state": [], "value": []}
    lasts = sorted((r["last"] for r in rows), reverse=True)
    step = lasts[(len(lasts) + 1) // 2 - 1]
    keep = [r for r in rows if r["last"] >= step]
    # One query for every kept trial's value at the rung (an index seek each), not a query per trial.
    at_rung = dict(store.conn.execute(
        "SELECT j.value, (SELECT m.value FROM metrics m WHERE m.trial_id=j.value AND m.key=? AND m.step<=? "
        "AND m.value IS NOT NULL ORDER BY m.step DESC, m.attempt DESC, m.rowid DESC LIMIT 1) FROM json_each(?) j",
        (key, step, json.dumps([r["id"] for r in keep])),
    ).fetchall())
    number, state, value = [], [], []
    for r in keep:
        v = _num(at_rung.get(r["id"]))
        if v is not None:
            number.append(r["number"])
            state.append(r["state"])
            value.append(v)
    return {"step": step, "number": number, "state": state, "value": value}


# ---------------------------------------------------------------------------------------------- trials
def _attempt_dict(store: Store, row: sqlite3.Row) -> dict[str, Any]:
    d = {k: row[k] for k in row.keys() if k not in ("id", "trial_id")}
    d["slot"] = _loads(row["slot"], None)
    d["log_path"] = _relpath(store, row["log_path"])
    return d


def _event_dict(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "time": row["time"],
        "kind": row["kind"],
        "message": row["message"],
        "trial": row["trial"],
        "attempt": row["attempt"],
        "data": _loads(row["data"], None),
    }


def _system_summary(store: Store, trial_id: int) -> dict[str, Any]:
    r = store.conn.execute(
        "SELECT COUNT(*), AVG(cpu), MAX(cpu), MAX(rss), AVG(gpu_util), MAX(gpu_mem), MIN(time), MAX(time) "
        "FROM system_samples WHERE trial_id=?",
        (trial_id,),
    ).fetchone()
    keys = ("samples", "cpu_mean", "cpu_max", "rss_max", "gpu_util_mean", "gpu_mem_max", "first", "last")
    return {k: (_num(v) if k != "samples" else v) for k, v in zip(keys, r)}


@_one_snapshot
def metric_keys(store: Store, trial_ids: Iterable[int]) -> list[str]:
    """Distinct metric keys logged by these trials.

    A recursive skip-scan over the (trial_id, key, step) index: one index seek per (trial, key) pair,
    however many points each trial logged.
    """
    ids = sorted({int(i) for i in trial_ids})
    if not ids:
        return []
    sql = (
        "WITH RECURSIVE k(tid, key) AS ("
        " SELECT j.value, (SELECT MIN(m.key) FROM metrics m WHERE m.trial_id = j.value) FROM json_each(?) AS j"
        " UNION ALL"
        " SELECT k.tid, (SELECT MIN(m.key) FROM metrics m WHERE m.trial_id = k.tid AND m.key > k.key)"
        " FROM k WHERE k.key IS NOT NULL"
        ") SELECT DISTINCT key FROM k WHERE key IS NOT NULL ORDER BY key"
    )
    return [r[0] for r in store.conn.execute(sql, (json.dumps(ids),))]


@_one_snapshot
def trial_state_and_keys(store: Store, name: str, number: int, limit: int) -> tuple[str, list[str]]:
    """A trial's state and its first `limit` metric keys (as `metric_keys` orders them), for the dashboard's
    trial curves: not `trial_detail`, which reads every final metric (100,000 of them took seconds)."""
    t = _trial_or_raise(store, _sweep_or_raise(store, name), number)
    sql = (
        "WITH RECURSIVE k(key) AS ("
        " SELECT (SELECT MIN(m.key) FROM metrics m WHERE m.trial_id = ?)"
        " UNION ALL"
        " SELECT (SELECT MIN(m.key) FROM metrics m WHERE m.trial_id = ? AND m.key > k.key)"
        " FROM k WHERE k.key IS NOT NULL LIMIT ?"
        ") SELECT key FROM k WHERE key IS NOT NULL"
    )
    keys = [r[0] for r in store.conn.execute(sql, (t["id"], t["id"], int(limit) + 1))][:limit]
    return str(t["state"]), keys


@_one_snapshot
def trial_detail(store: Store, name: str, number: int) -> dict[str, Any]:
    """Everything about one trial: config, final metrics, attempts, events, checkpoints, profile, keys."""
    sweep = _sweep_or_raise(store, name)
    t = _trial_or_raise(store, sweep, number)
    tid = t["id"]
    attempts = [
        _attempt_dict(store, r)
        for r in store.conn.execute("SELECT * FROM attempts WHERE trial_id=? ORDER BY number", (tid,))
    ]
    evs = [
        _event_dict(r)
        for r in store.conn.execute(
            "SELECT e.*, ? AS trial FROM events e WHERE e.trial_id=? ORDER BY e.id", (number, tid)
        )
    ]
    checkpoints = [
        {
            "attempt": r["attempt"], "step": r["step"], "path": _relpath(store, r["path"]),
            "checksum": r["checksum"], "bytes": r["bytes"], "seconds": _num(r["seconds"]), "time": r["time"],
        }
        for r in store.conn.execute("SELECT * FROM checkpoints WHERE trial_id=? ORDER BY id", (tid,))
    ]
    artifacts = [
        {"attempt": r["attempt"], "name": r["name"], "path": _relpath(store, r["path"]), "time": r["time"]}
        for r in store.conn.execute("SELECT * FROM artifacts WHERE trial_id=? ORDER BY id", (tid,))
    ]
    log_path = next((a["log_path"] for a in reversed(attempts) if a["log_path"]), None)
    keys = metric_keys(store, [tid])
    system = _system_summary(store, tid)
    gone = gone_driver(sweep) is not None
    return {
        "sweep": name,
        "goal": sweep["goal"],
        "metric": sweep["metric"],
        "number": number,
        "state": t["state"],
        "value": _num(t["value"]),
        "params": _loads(t["params"], {}),
        "config": _loads(t["config"], None),
        "metrics": _loads(t["metrics"], None),
        "seed": t["seed"],
        "created": t["created"],
        "started": t["started"],
        "ended": t["ended"],
        "reason": t["reason"],
        "resources": _loads(t["resources"], None),
        "last_step": t["last_step"],
        "attempt_count": t["attempts"],
        "profile": _loads(t["profile"], None),
        "system": system,
        "attempts": attempts,
        "events": evs,
        "checkpoints": checkpoints,
        "artifacts": artifacts,
        "metric_keys": keys,
        "log_path": log_path,
        "driver_gone": gone,
        "last_seen": (_last_sign_of_life(store, t, keys, attempts, evs, checkpoints, system)
                      if gone and t["ended"] is None and t["started"] is not None else None),
    }


def _last_sign_of_life(store: Store, trial: sqlite3.Row, keys: Sequence[str], attempts: Sequence[dict[str, Any]],
                       evs: Sequence[dict[str, Any]], checkpoints: Sequence[dict[str, Any]],
                       system: Mapping[str, Any]) -> float:
    """When the store last heard of a trial that never ended: its start, its attempts' starts and ends, its
    events, checkpoints and system samples, and the report of each metric's last step (one index seek per key,
    however many points). For a trial left `running` by a driver that is gone: its duration ends there, not
    now (nothing runs it any more)."""
    times = [trial["started"], system.get("last")]
    times += [a.get(k) for a in attempts for k in ("started", "ended")]
    times += [e["time"] for e in evs] + [c["time"] for c in checkpoints]
    for key in keys:
        row = store.conn.execute("SELECT time FROM metrics WHERE trial_id=? AND key=? ORDER BY step DESC LIMIT 1",
                                 (trial["id"], key)).fetchone()
        times.append(row[0] if row else None)
    return max(float(x) for x in times if isinstance(x, (int, float)) and math.isfinite(x))


# ---------------------------------------------------------------------------------------------- curves
def _point(value: Any) -> float:
    """A stored metric value as a float, NaN for NULL and for what is no number (text in a hostile store)."""
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def downsample(steps: Sequence[float], values: Sequence[float | None],
               max_points: int) -> tuple[list[Any], list[Any]]:
    """Min/max-per-bucket downsampling that keeps the first and last points, every extreme, and where the
    values were not finite.

    Series no longer than `max_points` come back unchanged (None values kept: they plot as gaps).
    Longer ones: the finite values are cut into max_points // 2 buckets of equal point count, and each
    bucket contributes its minimum and its maximum, in step order; a run of non-finite values (NaN, inf)
    keeps its first point as None (a gap and the page's marker: dropping them drew a diverged run as a
    smooth curve), at most one run a bucket; the series' last point is always kept.
    """
    n = len(steps)
    if n <= max_points:
        return list(steps), [_num(v) for v in values]
    import numpy as np

    x = np.asarray(steps, dtype=float)
    y = (np.frombuffer(values, dtype=float) if isinstance(values, array) and values.typecode == "d"
         else np.asarray([np.nan if v is None else v for v in values], dtype=float))
    ok = np.isfinite(y)
    finite = np.flatnonzero(ok)
    buckets = max(1, (max_points - 2) // 2)
    m = len(finite)
    if m <= max_points:
        kept = finite
    else:
        inner = np.arange(1, m - 1)
        b = (inner - 1) * buckets // (m - 2)
        # Within each bucket, order by value: the first is the min, the last the max.
        order = np.lexsort((y[finite[inner]], b))
        sorted_b = b[order]
        starts = np.flatnonzero(np.r_[True, sorted_b[1:] != sorted_b[:-1]])
        ends = np.r_[starts[1:], len(order)] - 1
        kept = finite[np.unique(np.r_[0, inner[order[starts]], inner[order[ends]], m - 1])]
    bad = np.flatnonzero(~ok)
    if len(bad):
        runs = bad[np.r_[True, np.diff(bad) > 1]]   # the first point of each run of non-finite values
        if len(runs) > buckets:
            runs = runs[np.unique(np.linspace(0, len(runs) - 1, buckets).astype(int))]
        kept = np.union1d(kept, runs)
    keep = np.union1d(kept, [n - 1])
    xs, ys = x[keep], y[keep]
    return ([int(s) if float(s).is_integer() else float(s) for s in xs],
            [v if math.isfinite(v) else None for v in ys.tolist()])


@_one_snapshot
def curves(store: Store, name: str, numbers: Sequence[int], key: str,
           max_points: int = 1000) -> dict[str, Any]:
    """One metric's curve for each of the given trials, downsampled to at most ~max_points points each.

    When a step was logged by several attempts (a resumed trial), the latest attempt's value wins.
    """
    sweep = _sweep_or_raise(store, name)
    max_points = max(4, min(int(max_points), 100_000))
    wanted = sorted({int(n) for n in numbers if int(n) in INTEGERS})[:MAX_CURVE_TRIALS]
    if not wanted:
        return {"sweep": name, "key": key, "max_points": max_points, "trials": []}
    marks = ",".join("?" * len(wanted))
    trows = store.conn.execute(
        f"SELECT id, number, state, reason, value FROM trials WHERE sweep_id=? AND number IN ({marks}) "
        "ORDER BY number",
        (sweep["id"], *wanted),
    ).fetchall()
    by_id = {r["id"]: r for r in trows}
    # each trial's points as two compact arrays (steps, values with NaN for a NULL), not a dict of Python
    # objects: a trial of 2 million points took 340 MB and 13 s to downsample to 1,000, now a tenth of that
    series: dict[int, tuple[array[int], array[float]]] = {tid: (array("q"), array("d")) for tid in by_id}
    if by_id:
        idmarks = ",".join("?" * len(by_id))
        current, steps, values, last = None, array("q"), array("d"), None
        for tid, step, value in store.conn.execute(
            f"SELECT trial_id, step, value FROM metrics WHERE key=? AND trial_id IN ({idmarks}) "
            "ORDER BY trial_id, step, attempt, rowid",
            (key, *by_id),
        ):
            if tid != current:
                current, (steps, values), last = tid, series[tid], None
            v = _point(value)
            if step == last:   # the step again, from a later attempt (a resumed trial): the latest wins
                values[-1] = v
            else:
                try:
                    steps.append(step)
                except (TypeError, OverflowError):   # a step that is no integer (a hostile store): no point
                    continue
                values.append(v)
                last = step
    out = []
    for tid, r in by_id.items():
        steps, values = series[tid]
        xs, ys = downsample(steps, values, max_points)
        out.append({
            "number": r["number"], "state": r["state"], "reason": r["reason"], "value": _num(r["value"]),
            "n": len(steps), "step": xs, "values": ys,
        })
    return {"sweep": name, "key": key, "max_points": max_points, "trials": out}


# ---------------------------------------------------------------------------------------------- events
@_one_snapshot
def events(store: Store, name: str, *, trial: int | None = None, after_id: int = 0,
           limit: int = 500, newest: bool = False) -> list[dict[str, Any]]:
    """Events of a sweep (or one of its trials) with id > after_id, oldest first, at most `limit`.

    With `newest`, the last `limit` of them (still returned oldest first).
    """
    sweep = _sweep_or_raise(store, name)
    limit = max(1, min(int(limit), 10_000))
    sql = (
        "SELECT e.*, t.number AS trial FROM events e LEFT JOIN trials t ON t.id = e.trial_id "
        "WHERE e.sweep_id=? AND e.id>? "
    )
    args: list[Any] = [sweep["id"], _bounded(after_id)]
    if trial is not None:
        t = _trial_or_raise(store, sweep, int(trial))
        sql += "AND e.trial_id=? "
        args.append(t["id"])
    sql += f"ORDER BY e.id {'DESC' if newest else 'ASC'} LIMIT ?"
    args.append(_bounded(limit))
    out = [_event_dict(r) for r in store.conn.execute(sql, args)]
    return out[::-1] if newest else out


# ---------------------------------------------------------------------------------------------- live
@_one_snapshot
def changed_since(store: Store, name: str | None, token: str | None) -> dict[str, Any]:
    """A cheap change check for live views: {"token": str, "changed": bool}.

    The token combines the sweep's `updated` time, its trial count, the newest event id and the newest
    metrics rowid; any write the driver makes moves at least one of them. A running sweep's driver found gone
    (`gone_driver`: killed, so it wrote nothing) moves it too, so a live page learns it. Pass the previous
    token back.
    """
    c = store.conn
    mrow = c.execute("SELECT MAX(rowid) FROM metrics").fetchone()[0] or 0
    if name is None:
        upd, nsweeps = c.execute("SELECT MAX(updated), COUNT(*) FROM sweeps").fetchone()
        ev = c.execute("SELECT MAX(id) FROM events").fetchone()[0] or 0
        ntrials = c.execute("SELECT MAX(id) FROM trials").fetchone()[0] or 0
        new = f"{upd or 0!r}:{nsweeps}:{ntrials}:{ev}:{mrow}"
        running = c.execute("SELECT * FROM sweeps WHERE state='running'").fetchall()
        gone = sum(gone_driver(r) is not None for r in running)
        new += f":gone{gone}" if gone else ""
    else:
        sweep = _sweep_or_raise(store, name)
        ev = c.execute("SELECT MAX(id) FROM events WHERE sweep_id=?", (sweep["id"],)).fetchone()[0] or 0
        # Trials are numbered 0, 1, ... in the order they are added: their count is the highest number + 1,
        # an index seek (COUNT(*) would walk every trial of the sweep).
        ntrials = c.execute("SELECT COALESCE(MAX(number) + 1, 0) FROM trials WHERE sweep_id=?",
                            (sweep["id"],)).fetchone()[0]
        new = f"{sweep['updated']!r}:{ntrials}:{ev}:{mrow}" + (":gone" if gone_driver(sweep) is not None else "")
    return {"token": new, "changed": token != new}


# ---------------------------------------------------------------------------------------------- export
@_one_snapshot
def metric_history(store: Store, name: str) -> dict[int, dict[str, list[tuple[int, float | None, float]]]]:
    """Every metric point of every trial of a sweep: {trial number: {key: [(step, value, time), ...] by step}}
    (`trial_histories`, gathered: a test's or a small sweep's whole history)."""
    return {number: {key: list(points) for key, points in curves.items()}
            for number, curves in trial_histories(store, name)}


def trial_histories(store: Store, name: str
                    ) -> Iterator[tuple[int, dict[str, Iterator[tuple[int, float | None, float]]]]]:
    """Each trial's metric points, one trial at a time by number, for exports (sweeplab.export): (trial number,
    {key: iterator of (step, value, time) by step}); trials without points are left out. When several
    attempts logged a step (a resumed trial), the latest attempt's point wins, as in `curves`. NaN (stored as
    NULL) is None. Iterate inside `store.snapshot()`, and each key's points before the next trial's.

    The points stream from the (trial_id, key, step) index, one key's query at a time: a sweep of trials of
    millions of points is exported in constant memory (gathering every point of the sweep first took
    hundreds of megabytes, and gathering one trial's took as much for one long trial)."""
    sweep = _sweep_or_raise(store, name)
    trials = store.conn.execute("SELECT id, number FROM trials WHERE sweep_id=? ORDER BY number",
                                (sweep["id"],)).fetchall()
    for tid, number in trials:
        keys = metric_keys(store, [tid])
        if keys:
            yield int(number), _trial_curves(store, tid, keys)


def _trial_curves(store: Store, trial_id: int, keys: Sequence[Any]
                  ) -> dict[str, Iterator[tuple[int, float | None, float]]]:
    """`{key: points}` of one trial from ONE query ordered by (key, step): a key's iterator reads on from that
    shared cursor when the keys are read in order (`metric_keys`' order, the index's), else it runs its own
    query (`_key_points`). A query per key took 45 us each: a trial of 100,000 metrics spent 5 s on them."""
    rows = store.conn.execute("SELECT key, step, value, time FROM metrics WHERE trial_id=? "
                              "ORDER BY key, step, attempt, rowid", (trial_id,))
    ahead: list[Any] = [next(rows, None)]   # the shared cursor's next row, not yet taken by a key

    def points(key: Any) -> Iterator[tuple[int, float | None, float]]:
        row = ahead[0]
        if row is None or row[0] != key:   # read out of order (or a key the cursor passed): its own query
            yield from _key_points(store, trial_id, key)
            return
        held: tuple[int, float | None, float] | None = None
        while row is not None and row[0] == key:
            point = (int(row[1]), _num(row[2]), float(row[3]))
            if held is not None and held[0] != point[0]:
                yield held
            held = point
            row = ahead[0] = next(rows, None)
        if held is not None:
            yield held

    return {str(key): points(key) for key in keys}


def _key_points(store: Store, trial_id: int, key: str) -> Iterator[tuple[int, float | None, float]]:
    """One trial's points of `key` by step, the latest attempt's where several logged a step."""
    held: tuple[int, float | None, float] | None = None
    for step, value, when in store.conn.execute(
            "SELECT step, value, time FROM metrics WHERE trial_id=? AND key=? ORDER BY step, attempt, rowid",
            (trial_id, key)):
        point = (int(step), _num(value), float(when))
        if held is not None and held[0] != point[0]:
            yield held
        held = point
    if held is not None:
        yield held
