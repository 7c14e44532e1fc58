"""The read side of the store: the JSON the CLI (`status --json`, `best --json`) and the dashboard serve."""

from __future__ import annotations

import collections
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from sweeplab.errors import UserError
from sweeplab.store import Store
from sweeplab.store import queries as q
from sweeplab.types import TrialState

T0 = 1_700_000_000.0


def _build(root: Path, goal: str = "minimize") -> None:
    """Sweep 'alpha': 6 trials with known values/states; sweep 'beta': empty."""
    s = Store.open(root)
    with s.transaction():
        sid = s.create_sweep(name="alpha", method="random", metric="loss", goal=goal,
                             spec={"budget": {"trials": 10, "time": "30m"}, "run_cap": 99}, spec_path=None,
                             seed=0)
        s.update_sweep(sid, spend={"trials": 6, "seconds": 12.5})
        plan = [  # (state, value, lr)
            ("completed", 0.5, 0.1),
            ("completed", 0.2, 0.01),
            ("pruned", 0.05, 0.3),        # better value but not completed: never "best"
            ("failed", None, 0.2),
            ("completed", float("nan"), 0.05),   # NaN value -> stored as NULL
            ("running", None, 0.02),
        ]
        for i, (state, value, lr) in enumerate(plan):
            tid = s.add_trial(sid, i, {"lr": lr, "opt": "adam" if i % 2 else "sgd"},
                              {"lr": lr, "model": {"hidden": 8}}, seed=i)
            s.update_trial(tid, state=state, value=value, started=T0 + i, attempts=1,
                           metrics={"loss": value, "acc": float("nan")} if value is not None else None,
                           reason="ASHA rung 1" if state == "pruned" else None,
                           profile={"steps": 3} if i == 1 else None)
            s.add_attempt(tid, 1, started=T0 + i, host="h", pid=100 + i,
                          log_path=str(root / "logs" / f"alpha-{i}.log"))
            s.add_metrics(tid, 1, [(step, "loss", 1.0 / (step + 1) + i, T0 + step) for step in range(5)])
            if i == 1:  # a retried trial: attempt 2 re-logs steps 3 and 4
                s.add_attempt(tid, 2, started=T0 + 50)
                s.add_metrics(tid, 2, [(3, "loss", -3.0, T0 + 60), (4, "loss", -4.0, T0 + 61),
                                       (0, "acc", float("nan"), T0 + 61)])
                s.add_event(sid, "retry", "attempt 1 died (SIGKILL)", trial_id=tid, attempt=1,
                            data={"signal": 9})
                s.add_checkpoint(tid, 1, step=2, path=str(root / "checkpoints" / "c1"), checksum="x",
                                 nbytes=10, seconds=0.1, at=T0 + 3)
                s.add_system_samples(tid, 1, [{"time": T0, "cpu": 50.0, "rss": 1e6},
                                              {"time": T0 + 1, "cpu": 100.0, "rss": 2e6}])
        s.create_sweep(name="beta", method="grid", metric="acc", goal="maximize", spec={}, spec_path=None,
                       seed=None)
    s.close()


@pytest.fixture
def store(tmp_path: Path):
    _build(tmp_path)
    s = Store.open(tmp_path, readonly=True)
    yield s
    s.close()


def test_list_sweeps_counts_every_state_and_picks_best_completed(store: Store) -> None:
    sweeps = q.list_sweeps(store)
    assert [s["name"] for s in sweeps] == ["alpha", "beta"]
    a = sweeps[0]
    assert set(a["counts"]) == {s.value for s in TrialState}
    assert a["counts"]["completed"] == 3 and a["counts"]["pruned"] == 1 and a["counts"]["queued"] == 0
    assert a["trials"] == 6
    assert (a["best"], a["best_trial"]) == (0.2, 1)
    assert a["budget"] == {"trials": 10, "time": "30m"}
    assert a["spend"] == {"trials": 6, "seconds": 12.5}
    assert sweeps[1]["best"] is None and sweeps[1]["trials"] == 0
    json.dumps(sweeps, allow_nan=False)


def test_best_respects_maximize_goal(tmp_path: Path) -> None:
    _build(tmp_path, goal="maximize")
    s = Store.open(tmp_path, readonly=True)
    best = q.best_trial(s, "alpha")
    assert best is not None and best["trial"] == 0 and best["value"] == 0.5
    assert q.list_sweeps(s)[0]["best_trial"] == 0


def test_best_trial_ignores_non_completed_and_nan(store: Store) -> None:
    best = q.best_trial(store, "alpha")
    assert best == {"sweep": "alpha", "trial": 1, "value": 0.2, "params": {"lr": 0.01, "opt": "adam"},
                    "metrics": {"loss": 0.2, "acc": None}}
    assert q.best_trial(store, "beta") is None


def test_unknown_sweep_names_the_existing_ones(store: Store) -> None:
    with pytest.raises(UserError, match=r"no sweep named 'gamma' in .*; sweeps: alpha, beta"):
        q.sweep_status(store, "gamma")


def test_sweep_status_lists_trials_without_nan(store: Store) -> None:
    st = q.sweep_status(store, "alpha")
    assert st["sweep"]["name"] == "alpha"
    assert [t["number"] for t in st["trials"]] == list(range(6))
    t4 = st["trials"][4]
    assert t4["state"] == "completed" and t4["value"] is None
    assert st["trials"][2]["reason"] == "ASHA rung 1"
    text = json.dumps(st, allow_nan=False)   # raises on NaN
    assert "NaN" not in text


def test_trial_detail_has_attempts_events_checkpoints_and_relative_log_path(store: Store) -> None:
    d = q.trial_detail(store, "alpha", 1)
    assert d["config"] == {"lr": 0.01, "model": {"hidden": 8}}
    assert [a["number"] for a in d["attempts"]] == [1, 2]
    assert d["attempts"][0]["pid"] == 101
    assert d["attempts"][0]["log_path"] == str(Path("logs") / "alpha-1.log")
    assert d["log_path"] == str(Path("logs") / "alpha-1.log")
    assert [e["kind"] for e in d["events"]] == ["retry"] and d["events"][0]["data"] == {"signal": 9}
    assert d["events"][0]["trial"] == 1
    assert d["checkpoints"][0]["path"] == str(Path("checkpoints") / "c1")
    assert d["metric_keys"] == ["acc", "loss"]
    assert d["profile"] == {"steps": 3}
    assert d["system"]["samples"] == 2 and d["system"]["cpu_max"] == 100.0
    json.dumps(d, allow_nan=False)
    with pytest.raises(UserError, match="has no trial 42; trials are 0..5"):
        q.trial_detail(store, "alpha", 42)


def test_curves_latest_attempt_wins_and_nan_is_none(store: Store) -> None:
    c = q.curves(store, "alpha", [1, 0, 99], "loss")
    assert [t["number"] for t in c["trials"]] == [0, 1]
    t1 = c["trials"][1]
    assert t1["step"] == [0, 1, 2, 3, 4]
    assert t1["values"][3:] == [-3.0, -4.0]
    acc = q.curves(store, "alpha", [1], "acc")["trials"][0]
    assert acc["values"] == [None]
    json.dumps(acc, allow_nan=False)



def test_curves_of_a_hostile_store_skip_what_is_no_number(tmp_path: Path) -> None:
    """Curves are read into compact arrays (a trial of millions of points took hundreds of MB as Python
    objects): a step or a value that is no number in a hand-edited store is no point, never a crash."""
    _build(tmp_path)
    import sqlite3

    with sqlite3.connect(tmp_path / "store.db") as c:
        rows = c.execute("SELECT m.rowid, m.step FROM metrics m JOIN trials t ON t.id = m.trial_id "
                         "WHERE t.number = 1 AND m.key = 'loss' AND m.attempt = 2 ORDER BY m.step").fetchall()
        c.execute("UPDATE metrics SET step = 'abc' WHERE rowid = ?", (rows[0][0],))
        c.execute("UPDATE metrics SET value = 'zz' WHERE rowid = ?", (rows[1][0],))
    c.close()
    s = Store.open(tmp_path, readonly=True)
    try:
        t1 = q.curves(s, "alpha", [1], "loss")["trials"][0]
    finally:
        s.close()
    assert len(t1["step"]) == len(t1["values"]) == t1["n"] and all(isinstance(x, int) for x in t1["step"])
    assert None in t1["values"]
    json.dumps(t1, allow_nan=False)


@pytest.mark.parametrize("n,max_points", [(10, 100), (10_000, 100), (1001, 1000), (5, 4)],
                         ids=["short", "long", "just-over", "tiny"])
def test_downsample_keeps_extremes_and_endpoints(n: int, max_points: int) -> None:
    steps = list(range(n))
    values = [math.sin(i / 7.0) * (1 + i % 13) for i in steps]
    values[n // 3] = 1e6  # a spike must survive
    xs, ys = q.downsample(steps, values, max_points)
    assert len(xs) == len(ys) <= max(max_points, 4)
    assert xs[0] == 0 and xs[-1] == n - 1
    assert xs == sorted(xs)
    assert max(ys) == 1e6 and min(ys) == min(values)
    assert all(values[x] == y for x, y in zip(xs, ys))


def test_events_paging_and_trial_filter(store: Store) -> None:
    all_ev = q.events(store, "alpha")
    assert all_ev[0]["kind"] == "sweep_created"
    assert [e["id"] for e in all_ev] == sorted(e["id"] for e in all_ev)
    later = q.events(store, "alpha", after_id=all_ev[0]["id"], limit=1)
    assert len(later) == 1 and later[0]["id"] > all_ev[0]["id"]
    assert [e["kind"] for e in q.events(store, "alpha", trial=1)] == ["retry"]
    assert q.events(store, "alpha", trial=0) == []


def test_changed_since_moves_on_every_kind_of_write(tmp_path: Path) -> None:
    _build(tmp_path)
    r = Store.open(tmp_path, readonly=True)
    w = Store.open(tmp_path)
    sid = w.sweep_row("alpha")["id"]
    tid = w.conn.execute("SELECT id FROM trials WHERE sweep_id=? AND number=5", (sid,)).fetchone()[0]
    tok = q.changed_since(r, "alpha", None)["token"]
    assert q.changed_since(r, "alpha", tok) == {"token": tok, "changed": False}
    writes = [
        lambda: w.add_metrics(tid, 1, [(9, "loss", 0.1, T0)]),
        lambda: w.add_event(sid, "info", "hello"),
        lambda: w.add_trial(sid, 6, {"lr": 1}, None, None),
        lambda: w.touch_sweep(sid),
    ]
    for write in writes:
        write()
        now = q.changed_since(r, "alpha", tok)
        assert now["changed"] and now["token"] != tok
        tok = now["token"]
    g = q.changed_since(r, None, None)["token"]
    w.add_event(sid, "info", "again")
    assert q.changed_since(r, None, g)["changed"]


def test_trial_columns_is_columnar_and_aligned(store: Store) -> None:
    cols = q.trial_columns(store, "alpha")
    assert cols["n"] == 6 and cols["number"] == list(range(6))
    assert cols["params"]["lr"] == [0.1, 0.01, 0.3, 0.2, 0.05, 0.02]
    assert cols["params"]["opt"][:2] == ["sgd", "adam"]
    assert cols["metrics"]["acc"][0] is None and cols["value"][4] is None
    json.dumps(cols, allow_nan=False)


def test_events_newest_returns_the_tail_in_order(store: Store) -> None:
    every = q.events(store, "alpha")
    tail = q.events(store, "alpha", limit=2, newest=True)
    assert [e["id"] for e in tail] == [e["id"] for e in every[-2:]]


class _WriteBetween:
    """A read connection that lets the writer commit right after the first statement matching `after` ran:
    the moment between two statements of one answer, made deterministic."""

    def __init__(self, conn: Any, after: str, write: Any) -> None:
        self._conn, self._after, self._write = conn, after, write
        self.fired = False

    def execute(self, sql: str, params: Any = ()) -> Any:
        cur = self._conn.execute(sql, params)
        if not self.fired and self._after in sql:
            self.fired = True
            return _Rows(cur.fetchall(), self._write)
        return cur


class _Rows(list):
    """The rows of a finished statement (read before the write), as a cursor."""

    def __init__(self, rows: list[Any], write: Any) -> None:
        super().__init__(rows)
        write()

    def fetchall(self) -> list[Any]:
        return list(self)

    def fetchone(self) -> Any:
        return self[0] if self else None


@pytest.mark.parametrize("query, after", [
    ("status", "SELECT number, state, value, params"),
    ("columns", "SELECT number, state, value, params"),
    ("list", "SELECT * FROM sweeps ORDER BY id"),
])
def test_an_answer_is_one_snapshot_even_when_the_driver_commits_midway(tmp_path: Path, query: str,
                                                                         after: str) -> None:
    _build(tmp_path)
    w = Store.open(tmp_path)
    sid = w.sweep_row("alpha")["id"]

    def driver_commits() -> None:   # trial 5 ends and trial 6 starts, in one batch
        with w.transaction():
            tid = w.conn.execute("SELECT id FROM trials WHERE sweep_id=? AND number=5", (sid,)).fetchone()[0]
            w.update_trial(tid, state="completed", value=0.01)
            w.add_trial(sid, 6, {"lr": 0.5}, None, None, state="running")

    plain = Store.open(tmp_path, readonly=True)
    r = Store(plain.root, _WriteBetween(plain.conn, after, driver_commits), readonly=True)  # type: ignore[arg-type]
    before = {"completed": 3, "pruned": 1, "failed": 1, "running": 1}
    if query == "status":
        data = q.sweep_status(r, "alpha")
        counts, states = data["sweep"]["counts"], [t["state"] for t in data["trials"]]
    elif query == "columns":
        data = q.trial_columns(r, "alpha")
        counts, states = data["sweep"]["counts"], data["state"]
    else:   # the sweeps are read first, then their counts
        counts, states = q.list_sweeps(r)[0]["counts"], [s for s, n in before.items() for _ in range(n)]
    assert r.conn.fired   # the write really happened in the middle of the answer
    assert {k: v for k, v in counts.items() if v} == dict(collections.Counter(states)) == before
    assert len(q.sweep_status(plain, "alpha")["trials"]) == 7   # the next answer sees it
    plain.close()
    w.close()


# ------------------------------------------------------------------------ several objectives at scale
def _peeled(points, goals):
    """Front ranks by definition, for reference: peel the non-dominated points, again and again."""
    from sweeplab.pareto import dominates, to_min

    mins = [to_min(p, goals) for p in points]
    ranks = [None] * len(points)
    left = [i for i, m in enumerate(mins) if m is not None]
    rank = 1
    while left:
        front = [i for i in left if not any(dominates(mins[j], mins[i]) for j in left if j != i)]
        for i in front:
            ranks[i] = rank
        left = [i for i in left if i not in set(front)]
        rank += 1
    return ranks


@pytest.mark.parametrize("dims", [2, 3, 4])
def test_front_ranks_match_their_definition_with_ties_duplicates_and_missing_values(dims: int) -> None:
    from sweeplab.pareto import nondominated_ranks, pareto_front
    from sweeplab.types import Goal

    rng = random.Random(dims)
    goals = [Goal.MAXIMIZE, Goal.MINIMIZE, Goal.MINIMIZE, Goal.MAXIMIZE][:dims]
    for _ in range(40):
        n = rng.randint(0, 60)
        points = [tuple(rng.choice([0.0, -0.0, 1.0, 2.0, 3.0, rng.random()]) for _ in range(dims)) for _ in range(n)]
        points += [points[0]] * 3 if points else []                        # identical points share a rank
        points += [(None, 1.0, 2.0, 3.0)[:dims], (math.nan, 0.0, 0.0, 0.0)[:dims], (math.inf, 0.0, 0.0, 0.0)[:dims]]
        expected = _peeled(points, goals)
        assert nondominated_ranks(points, goals) == expected
        assert pareto_front(points, goals) == [i for i, r in enumerate(expected) if r == 1]


def test_status_and_best_of_thousands_of_trials_with_two_objectives_do_not_compare_every_pair(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`status` ranks every trial and `best` lists the front: on 1,500 trials peeling fronts pair by pair
    took tens of millions of comparisons (9 s for `sweeplab status` at 3,000 trials). Counted, not timed:
    the work must stay within a few comparisons per trial."""
    import sweeplab.pareto as pareto

    n = 1500
    s = Store.open(tmp_path)
    spec = {"metric": [{"name": "acc", "goal": "maximize"}, {"name": "lat", "goal": "minimize"},
                       {"name": "mem", "goal": "minimize"}]}
    rng = random.Random(0)
    with s.transaction():
        for name, k in (("two", 2), ("three", 3)):
            sid = s.create_sweep(name=name, method="random", metric="acc", goal="maximize",
                                 spec={"metric": spec["metric"][:k]}, spec_path=None, seed=0)
            for i in range(n):
                tid = s.add_trial(sid, i, {"x": i}, None, seed=i)
                values = [round(rng.random(), 3) for _ in range(k)]
                s.update_trial(tid, state="completed", value=values[0], objective_values=values)
    s.close()
    calls = [0]
    real = pareto.dominates

    def counted(a, b):
        calls[0] += 1
        return real(a, b)

    monkeypatch.setattr(pareto, "dominates", counted)
    reader = Store.open(tmp_path, readonly=True)
    try:
        ranks = [t["rank"] for t in q.sweep_status(reader, "two")["trials"]]
        front = q.pareto_front(reader, "two")
        assert len(ranks) == n and min(ranks) == 1 and [f["trial"] for f in front] == [
            i for i, r in enumerate(ranks) if r == 1]
        assert calls[0] <= 10 * n, calls[0]
        calls[0] = 0
        assert q.pareto_front(reader, "three")
        assert calls[0] <= 100 * n, calls[0]
        calls[0] = 0
        assert len(q.sweep_status(reader, "three", limit=10)["trials"]) >= 10
        assert calls[0] <= 200 * n, calls[0]
    finally:
        reader.close()


def test_a_driver_that_dies_moves_the_change_token_without_a_write(tmp_path: Path) -> None:
    """A killed driver writes nothing, so the live pages' change token stayed put and an open page showed the
    sweep running for ever: the driver found gone now moves the token (of the sweep and of the store)."""
    import os
    import subprocess
    import sys
    import time

    from sweeplab.store import queries as q

    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        s = Store.open(tmp_path)
        with s.transaction():
            sid = s.create_sweep(name="d", method="random", metric="loss", goal="minimize", spec={},
                                 spec_path=None, seed=0)
            s.update_sweep(sid, driver=json.dumps({"pid": driver.pid, "host": os.uname().nodename,
                                                   "started": time.time()}))
        s.close()
        ro = Store.open(tmp_path, readonly=True)
        alive = q.changed_since(ro, "d", None)["token"], q.changed_since(ro, None, None)["token"]
        assert not q.list_sweeps(ro)[0]["driver_gone"]
        driver.kill()
        driver.wait()
        assert q.changed_since(ro, "d", alive[0])["changed"] and q.changed_since(ro, None, alive[1])["changed"]
        assert q.list_sweeps(ro)[0]["driver_gone"] and q.sweep_summary(ro, "d")["sweep"]["state"] == "running"
        gone = q.changed_since(ro, "d", None)["token"]
        assert not q.changed_since(ro, "d", gone)["changed"]   # and then stays put
        ro.close()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_best_of_a_sweep_with_several_objectives_breaks_a_tie_in_the_first_by_the_others(tmp_path: Path) -> None:
    """The best trial is the first objective's; among trials tied there, one on the front, not merely the
    lowest-numbered (that was (0, 2) though (0, 0) was there too)."""
    s = Store.open(tmp_path)
    metric = [{"name": "err", "goal": "minimize"}, {"name": "lat", "goal": "minimize"}]
    with s.transaction():
        sid = s.create_sweep(name="mo", method="random", metric="err", goal="minimize", spec={"metric": metric},
                             spec_path=None, seed=0)
        for i, values in enumerate([[0.5, 0.0], [0.0, 2.0], [0.0, 3.0], [0.0, 0.0], [0.0, 0.0]]):
            tid = s.add_trial(sid, i, {"x": i}, None, seed=i)
            s.update_trial(tid, state="completed", value=values[0], objective_values=values)
    best = q.best_trial(s, "mo")
    assert best is not None and (best["trial"], best["value"]) == (3, 0.0)
    (listed,) = [w for w in q.list_sweeps(s) if w["name"] == "mo"]   # `status --json`, the dashboard's list
    assert (listed["best_trial"], listed["best"]) == (3, 0.0)
    with s.transaction():   # one objective: ties still go to the lowest number
        sid = s.create_sweep(name="one", method="random", metric="err", goal="minimize", spec={}, spec_path=None,
                             seed=0)
        for i in range(3):
            tid = s.add_trial(sid, i, {"x": i}, None, seed=i)
            s.update_trial(tid, state="completed", value=0.0)
    assert q.best_trial(s, "one")["trial"] == 0   # type: ignore[index]
