"""Several objectives and constraints end to end: the real CLI, worker processes and store.

Two objectives (acc: maximize, latency_ms: minimize) and a constraint (memory_gb <= 16) from
tests/fixtures/multiobjective.py: `best` prints the feasible Pareto front, `status` shows each trial's front
rank and marks infeasible trials, the hypervolume is recorded, a resumed sweep (after Ctrl-C) keeps its
multi-objective history, and ASHA judges rungs on the objective `early_terminate.metric` names.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from sweeplab.pareto import nondominated_ranks
from sweeplab.types import Goal

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "multiobjective.py"
GOALS = (Goal.MAXIMIZE, Goal.MINIMIZE)


def spec(*, method: str = "tpe", trials: int = 12, extra: str = "", delay: float = 0.0, steps: int = 1,
         target: str | None = None) -> str:
    what = target or f"function: {FIXTURE}:trial"
    return (f"{what}\nmethod: {method}\nseed: 3\n"
            "metric: [{name: acc, goal: maximize}, {name: latency_ms, goal: minimize}]\n"
            "constraints: [{metric: memory_gb, max: 16}]\n"
            f"budget: {{trials: {trials}}}\ntrial: {{retries: 0, grace: 2}}\n"
            "parameters:\n  x: {min: 0.0, max: 1.0}\n  y: {min: 0.0, max: 1.0}\n"
            f"  steps: {{value: {steps}}}\n  delay: {{value: {delay}}}\n{extra}")


def check_front(cli, name: str) -> tuple[dict, list]:
    """`best --json` is exactly the non-dominated set of the completed feasible trials."""
    st = cli.status(name)
    front = json.loads(cli("best", name, "--json", check=True).stdout)
    done = [t for t in st["trials"] if t["state"] == "completed" and t.get("feasible")]
    points = [(t["values"]["acc"], t["values"]["latency_ms"]) for t in done]
    expected = sorted(t["number"] for t, r in zip(done, nondominated_ranks(points, GOALS)) if r == 1)
    assert sorted(f["trial"] for f in front) == expected and expected
    by_number = {t["number"]: t for t in st["trials"]}
    for f in front:
        t = by_number[f["trial"]]
        assert t["feasible"] is True and t["rank"] == 1
        assert f["values"] == t["values"] and f["params"] == t["params"]
    return st, front


def hypervolumes(cli, name: str) -> list[dict]:
    conn = sqlite3.connect(f"file:{cli.store / 'store.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT e.data FROM events e JOIN sweeps s ON s.id = e.sweep_id "
                            "WHERE s.name=? AND e.kind='hypervolume' ORDER BY e.id", (name,)).fetchall()
    finally:
        conn.close()
    return [json.loads(r[0]) for r in rows]


@pytest.mark.parametrize("kind", ["function", "command"])
def test_best_prints_the_feasible_front_and_status_marks_rank_and_infeasible(cli, kind):
    target = None if kind == "function" else f"program: {FIXTURE}\ncommand: [python3, '${{program}}', '${{args}}']"
    f = cli.spec("mo", spec(method="tpe", trials=12, target=target))
    done = cli("sweep", str(f), "--name", "mo", "--workers", "2", "-q", check=True).stdout
    st, front = check_front(cli, "mo")
    assert f"Pareto front: {len(front)} trial(s)" in done and "best: trial" not in done
    assert [o["name"] for o in st["sweep"]["objectives"]] == ["acc", "latency_ms"]
    infeasible = [t for t in st["trials"] if t.get("feasible") is False]
    assert infeasible, "seed 3 draws some y > 0.5: the test needs infeasible trials"
    assert all(t["rank"] is None and t["reason"].startswith("infeasible: memory_gb") for t in infeasible)
    assert not {t["number"] for t in infeasible} & {f["trial"] for f in front}

    text = cli("status", "mo", check=True).stdout
    assert "INFEASIBLE" in text and "1 (front)" in text and "rank" in text
    assert f"maximize acc, minimize latency_ms  front {len(front)} trial(s), hypervolume " in text, text
    shown = cli("best", "mo", check=True).stdout
    assert f"Pareto front of mo (maximize acc, minimize latency_ms): {len(front)} trial(s)" in shown

    hv = hypervolumes(cli, "mo")
    assert hv and hv[-1]["front"] == len(front) and hv[-1]["hypervolume"] > 0
    assert [h["trials"] for h in hv] == sorted(h["trials"] for h in hv)


def test_infeasible_lower_value_is_not_best(cli):
    """The best value belongs to an infeasible trial: best skips it (the constraint bites)."""
    body = (f"function: {FIXTURE}:trial\nmethod: grid\nmetric: {{name: latency_ms, goal: maximize}}\n"
            "constraints: [{metric: memory_gb, max: 16}]\n"
            "parameters:\n  x: {value: 0.5}\n  y: {values: [0.1, 0.4, 0.9]}\n")
    cli("sweep", str(cli.spec("g", body)), "--name", "g", "-q", check=True)
    best = json.loads(cli("best", "g", "--json", check=True).stdout)
    assert best["params"]["y"] == 0.4       # y = 0.9 has the highest latency but memory 28.8 GB > 16
    st = cli.status("g")
    assert st["sweep"]["best"] == best["value"] and st["sweep"]["best_trial"] == best["trial"]
    assert [t["feasible"] for t in st["trials"]] == [True, True, False]
    text = cli("status", "g", check=True).stdout
    assert "INFEASIBLE" in text


def _safe_hypervolumes(cli, name: str) -> list[dict]:
    try:
        return hypervolumes(cli, name)
    except sqlite3.OperationalError:   # not created yet, or busy: ask again
        return []


def _count(db: Path) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute("SELECT count(*) FROM trials WHERE state='completed'").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def test_resume_after_sigint_keeps_the_multiobjective_history(cli):
    # 1 s trials, interrupted after 3: the sweep is 2 s or more from its end (with 0.3 s trials and 4 awaited, a
    # loaded run's sweep once finished before the test looked)
    f = cli.spec("r", spec(method="tpe", trials=10, delay=0.5, steps=2))
    proc = cli.start("sweep", str(f), "--name", "r", "--workers", "2", "-q")
    deadline = time.monotonic() + 120
    while _count(cli.store / "store.db") < 3 or not _safe_hypervolumes(cli, "r"):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    before = hypervolumes(cli, "r")
    cp = cli("resume", "r", "-q", timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    st, _ = check_front(cli, "r")
    assert [t["state"] for t in st["trials"]] == ["completed"] * 10
    assert all(t["values"] is not None and t["feasible"] is not None for t in st["trials"])
    configs = [json.dumps(t["params"], sort_keys=True) for t in st["trials"]]
    assert len(set(configs)) == len(configs)
    after = hypervolumes(cli, "r")
    assert before and after[: len(before)] == before and len(after) >= len(before)
    counts = [h["trials"] for h in after]   # completed trials so far: the resumed driver counts on
    assert counts == sorted(set(counts)) and counts[-1] <= 10


def test_asha_judges_rungs_on_the_named_objective_and_says_so(cli):
    # grid over x with one worker: trials run in order; latency (minimize) grows with x, so ASHA on
    # latency_ms keeps low x and prunes high x (judged on acc, maximize, it would do the opposite)
    extra = "early_terminate: {type: asha, metric: latency_ms, min_iter: 1, max_iter: 9, eta: 3}\n"
    body = (f"function: {FIXTURE}:trial\nmethod: grid\n"
            "metric: [{name: acc, goal: maximize}, {name: latency_ms, goal: minimize}]\n"
            "trial: {retries: 0}\nparameters:\n  x: {values: [0.2, 0.1, 0.9, 0.95, 1.0]}\n  y: {value: 0.0}\n"
            f"  steps: {{value: 9}}\n  delay: {{value: 0.01}}\n{extra}")
    cli("sweep", str(cli.spec("a", body)), "--name", "a", "--workers", "1", "-q", check=True)
    st = cli.status("a")
    by_x = {t["params"]["x"]: t for t in st["trials"]}
    assert by_x[0.1]["state"] == by_x[0.2]["state"] == "completed"
    pruned = [t for t in st["trials"] if t["state"] == "pruned"]
    assert pruned and all(t["params"]["x"] >= 0.9 for t in pruned)
    for t in pruned:
        assert "latency_ms" in t["reason"]
        assert "judged on latency_ms (early_terminate.metric) of 2 objectives" in t["reason"], t["reason"]


def test_asha_on_a_metric_that_is_not_an_objective_judges_by_its_own_goal_or_warns(cli):
    """One objective (acc, maximize); ASHA judges latency_ms, which is none. It was judged as the sweep's
    goal, maximize, so ASHA kept the slowest trials and pruned the fastest, silently. `early_terminate.goal`
    now says its direction, and without it the spec warns that the sweep's goal is used."""
    def body(goal: str) -> str:
        return (f"function: {FIXTURE}:trial\nmethod: grid\nmetric: {{name: acc, goal: maximize}}\n"
                "trial: {retries: 0}\nparameters:\n  x: {values: [0.2, 0.1, 0.9, 0.95, 1.0]}\n  y: {value: 0.0}\n"
                "  steps: {value: 9}\n  delay: {value: 0.01}\n"
                f"early_terminate: {{type: asha, metric: latency_ms, min_iter: 1, max_iter: 9, eta: 3{goal}}}\n")
    cli("sweep", str(cli.spec("own", body(", goal: minimize"))), "--name", "own", "--workers", "1", "-q", check=True)
    by_x = {t["params"]["x"]: t["state"] for t in cli.status("own")["trials"]}
    assert by_x[0.1] == by_x[0.2] == "completed", by_x
    assert "pruned" in {by_x[x] for x in (0.9, 0.95, 1.0)}, by_x
    cp = cli("sweep", str(cli.spec("warn", body(""))), "--dry-run")
    assert cp.returncode == 0, cp.stderr
    assert "early_terminate.goal" in cp.stderr and "latency_ms" in cp.stderr and "maximize" in cp.stderr, cp.stderr


def test_bad_objective_grammar_exits_2_naming_the_key_and_writes_nothing(cli):
    body = spec().replace("{name: latency_ms, goal: minimize}", "{name: latency_ms, goal: smaller}")
    cp = cli("sweep", str(cli.spec("bad", body)), "--name", "bad", "-q")
    assert cp.returncode == 2
    assert "metric[1].goal" in cp.stderr and "smaller" in cp.stderr, cp.stderr
    assert not (cli.store / "store.db").exists() or "bad" not in cli("status", "--json").stdout


RANK_SPEC = (f"function: {FIXTURE}:trial\nmethod: grid\n"
             "metric: [{name: acc, goal: maximize}, {name: latency_ms, goal: minimize}]\n"
             "early_terminate: {type: asha, min_iter: 1, max_iter: 9, eta: 3}\n"
             "trial: {retries: 0}\nbudget: {trials: 2}\n"
             "parameters:\n  x: {values: [0.3, 0.6]}\n  y: {values: [0.0, 1.0]}\n"
             "  steps: {value: 9}\n  delay: {value: 0.01}\n")


def test_asha_without_a_metric_judges_by_rank_and_resume_replays_the_rungs(cli):
    """Without early_terminate.metric, rungs compare non-dominated ranks of (acc, latency_ms). Half the
    grid runs, then the sweep is resumed for the rest: those are judged against the replayed rungs (an
    empty rung would let them all through), and only trials dominated at the rung (y = 1) are pruned."""
    cli("sweep", str(cli.spec("k", RANK_SPEC)), "--name", "k", "--workers", "1", "-q", check=True)
    assert [t["state"] for t in cli.status("k")["trials"]] == ["completed", "completed"]
    cli("resume", "k", "--trials", "+2", "--workers", "1", "-q", check=True)
    st = cli.status("k")
    pruned = [t for t in st["trials"] if t["state"] == "pruned"]
    assert pruned and all(t["params"]["y"] == 1.0 for t in pruned), st["trials"]
    for t in pruned:
        assert "non-dominated rank 2 of (acc, latency_ms)" in t["reason"], t["reason"]
        assert "rank rule: several objectives and no early_terminate.metric" in t["reason"], t["reason"]
    assert all(t["state"] == "completed" for t in st["trials"] if t["params"]["y"] == 0.0)


def test_a_fork_carries_objective_values_and_feasibility_into_the_new_sweep(cli):
    cli("sweep", str(cli.spec("o", spec(method="random", trials=6))), "--name", "old", "-q", check=True)
    more = cli.spec("n", spec(method="tpe", trials=2))
    cli("resume", "old", "--spec", str(more), "--fork", "new", "-q", check=True)
    st, _ = check_front(cli, "new")
    forked = [t for t in st["trials"] if (t["reason"] or "").startswith("forked from old/")]
    assert forked and all(t["values"] is not None and t["feasible"] is not None for t in forked)


SIZE_ONCE = """\
def train(config, run):
    run.log({"size": config.size}, step=0)          # known before training: logged once
    for step in range(1, 10):
        acc = config.q * (1 - 1 / (step + 1))
        run.log({"acc": acc}, step=step)
        if run.should_stop:
            break
    return {"acc": acc, "size": config.size}
"""


def test_the_rank_rule_carries_an_objective_logged_once_live_and_on_resume(cli):
    """A parameter count logged once at step 0 used to give no vector at any rung: the rank rule never
    judged and nothing was pruned. It is carried to every later step, live and in the resume replay."""
    (cli.tmp / "size_once.py").write_text(SIZE_ONCE)
    body = ("function: size_once.py:train\nmethod: grid\n"
            "metric: [{name: acc, goal: maximize}, {name: size, goal: minimize}]\n"
            "early_terminate: {type: asha, min_iter: 1, max_iter: 9, eta: 3}\n"
            "trial: {retries: 0}\nbudget: {trials: 2}\n"
            "parameters:\n  q: {values: [0.9, 0.5]}\n  size: {values: [1.0, 9.0]}\n")
    cli("sweep", str(cli.spec("once", body)), "--name", "once", "--workers", "1", "-q", check=True)
    cli("resume", "once", "--trials", "+2", "--workers", "1", "-q", check=True)
    trials = cli.status("once")["trials"]
    best = next(t for t in trials if t["params"] == {"q": 0.9, "size": 1.0})
    assert best["state"] == "completed"
    pruned = [t for t in trials if t["state"] == "pruned"]
    assert pruned, trials
    for t in pruned:
        assert "non-dominated rank" in t["reason"] and "of (acc, size)" in t["reason"], t["reason"]


CONSTRAINED = """\
KINDS = {"a": (0.9, 1.0, 99.0), "b": (0.5, 5.0, 1.0), "c": (0.4, 3.0, 1.0)}   # acc scale, size, memory_gb


def train(config, run):
    q, size, memory = KINDS[config.kind]
    for step in range(1, 10):
        acc = q * (1 - 1 / (step + 1))
        run.log({"acc": acc, "size": size}, step=step)
        if run.should_stop:
            break
    return {"acc": acc, "size": size, "memory_gb": memory}
"""


def test_an_infeasible_trial_prunes_no_trial_by_the_rank_rule_live_or_after_resume(cli):
    """Trial a beats c at rung 1 on both objectives (b does not) but breaks memory_gb <= 16: it is not on the sweep's
    front, so c is not pruned as 'dominated there by trial 0 of the front' (a and b run, then a resume
    replays them before c)."""
    (cli.tmp / "constrained.py").write_text(CONSTRAINED)
    body = ("function: constrained.py:train\nmethod: grid\n"
            "metric: [{name: acc, goal: maximize}, {name: size, goal: minimize}]\n"
            "constraints: [{metric: memory_gb, max: 16}]\n"
            "early_terminate: {type: asha, min_iter: 1, max_iter: 9, eta: 3}\n"
            "trial: {retries: 0}\nbudget: {trials: 2}\nparameters:\n  kind: {values: [a, b, c]}\n")
    cli("sweep", str(cli.spec("cons", body)), "--name", "cons", "--workers", "1", "-q", check=True)
    cli("resume", "cons", "--trials", "+1", "--workers", "1", "-q", check=True)
    trials = {t["params"]["kind"]: t for t in cli.status("cons")["trials"]}
    assert trials["a"]["state"] == "completed" and trials["a"]["feasible"] is False
    assert trials["c"]["state"] == "completed", trials["c"]
