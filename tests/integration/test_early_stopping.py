"""Early stopping, training-health monitors and budgets, end to end: the real CLI, real worker processes
and a real SQLite store, with synthetic learning curves (tests/fixtures/curves.py) instead of torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CURVES = Path(__file__).resolve().parents[1] / "fixtures" / "curves.py"


def spec(kinds: list[str], *, extra: str = "", steps: int = 9, delay: float = 0.02, method: str = "grid") -> str:
    """A sweep over curve kinds (grid order = trial order with one worker)."""
    return (f"function: {CURVES}:curve\nmethod: {method}\nseed: 0\n"
            "metric: {name: val_loss, goal: minimize}\n"
            "parameters:\n"
            f"  kind: {{values: [{', '.join(kinds)}]}}\n"
            f"  steps: {{value: {steps}}}\n"
            f"  delay: {{value: {delay}}}\n"
            f"{extra}")


ASHA_AND_MONITORS = """\
early_terminate: {type: asha, min_iter: 1, max_iter: 9, eta: 3}
monitors:
  - nan
  - exploding: {metric: grad_norm, threshold: 50}
trial: {retries: 0}
"""


def by_kind(status: dict) -> dict[str, dict]:
    return {t["params"]["kind"]: t for t in status["trials"]}


def test_diverging_trials_are_stopped_by_rules_and_hopeless_ones_pruned_by_asha(cli):
    kinds = ["good-b", "good", "hopeless-a", "nan", "explode", "hopeless-b", "inf", "hopeless-c"]
    f = cli.spec("s", spec(kinds, extra=ASHA_AND_MONITORS))
    cp = cli("sweep", str(f), "--name", "es", "--workers", "1", "-q", check=True)
    st = cli.status("es")
    trials = by_kind(st)

    assert trials["good"]["state"] == "completed" and trials["good-b"]["state"] == "completed"
    assert trials["good"]["value"] == pytest.approx(0.1 + 1 / 9)

    for kind in ("hopeless-a", "hopeless-b", "hopeless-c"):
        t = trials[kind]
        assert t["state"] == "pruned", (kind, t)
        assert t["reason"].startswith("rung 1 (step 1): val_loss 2.5 not in top 1/3"), t["reason"]

    for kind, rule, what in (("nan", "nan", "NaN"), ("inf", "nan", "inf"), ("explode", "exploding", "grad_norm")):
        t = trials[kind]
        assert t["state"] == "stopped_by_rule", (kind, t)
        assert t["reason"].startswith(f"{rule}:") and what.lower() in t["reason"].lower(), t["reason"]
        assert "step 2" in t["reason"], t["reason"]   # the first step that went wrong

    counts = st["sweep"]["counts"]
    assert (counts["completed"], counts["pruned"], counts["stopped_by_rule"]) == (2, 3, 3)
    assert st["sweep"]["state"] == "finished"

    text = cli("status", "es", check=True).stdout
    assert "stopped_by_rule" in text and "pruned" in text
    assert "rung 1 (step 1)" in text and "nan:" in text and "exploding:" in text
    assert "3 pruned" in cp.stdout and "3 stopped_by_rule" in cp.stdout


def test_a_stopped_trial_stops_early_and_its_decision_is_an_event(cli):
    """A pruned trial does not train to max_iter: it sees run.should_stop and returns."""
    kinds = ["good-b", "good", "hopeless-a"]
    f = cli.spec("s", spec(kinds, extra=ASHA_AND_MONITORS, steps=40, delay=0.04))
    cli("sweep", str(f), "--name", "ev", "--workers", "1", "-q", check=True)
    import sqlite3

    with sqlite3.connect(cli.store / "store.db") as c:
        steps = dict(c.execute("SELECT t.number, MAX(m.step) FROM metrics m JOIN trials t ON t.id = m.trial_id "
                               "GROUP BY t.number"))
        kinds_of_events = [r[0] for r in c.execute("SELECT kind FROM events WHERE message LIKE 'rung 1%'")]
    assert steps[0] == 40 and steps[1] == 40
    assert steps[2] < 40, steps            # the hopeless one was stopped long before its 40 steps
    assert kinds_of_events == ["pruned"]


def test_a_pruned_trial_trains_nothing_past_its_rung(cli):
    """At a rung the trial waits for the verdict: with no pause between steps, a hopeless trial would
    otherwise run far past step 1 before the stop reached it."""
    kinds = ["good-b", "good", "hopeless-a", "hopeless-b"]
    f = cli.spec("s", spec(kinds, steps=300, delay=0.0,
                           extra="early_terminate: {type: asha, min_iter: 1, max_iter: 300, eta: 3}\n"))
    cli("sweep", str(f), "--name", "sync", "--workers", "1", "-q", check=True)
    import sqlite3

    with sqlite3.connect(cli.store / "store.db") as c:
        rows = c.execute("SELECT t.state, MAX(m.step) FROM metrics m JOIN trials t ON t.id = m.trial_id "
                         "WHERE m.key = 'val_loss' GROUP BY t.number ORDER BY t.number").fetchall()
    assert rows == [("completed", 300), ("completed", 300), ("pruned", 1), ("pruned", 1)], rows


def test_smoke_trials_are_not_pruned(cli):
    """--smoke stops each trial after two reports: rung values of so little training are no ground to prune
    on, and a smoke trial that returns normally counts as completed (docs/debugging.md). The second trial,
    worse than the first at rung 1, was pruned there once ASHA judged rungs of fewer than eta values."""
    asha = "early_terminate: {type: asha, min_iter: 1, max_iter: 9, eta: 3}\n"
    f = cli.spec("s", spec(["good", "hopeless-a"], extra=asha))
    cp = cli("sweep", str(f), "--name", "sm", "--smoke", "--workers", "1", "-q")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert [t["state"] for t in cli.status("sm")["trials"]] == ["completed", "completed"]


def test_metric_target_ends_the_sweep_when_a_trial_reaches_it(cli):
    kinds = ["hopeless-a", "good", "hopeless-b", "hopeless-c", "good-b"]
    f = cli.spec("s", spec(kinds, steps=3, extra="metric: {name: val_loss, goal: minimize, target: 0.5}\n"))
    f.write_text(f.read_text().replace("metric: {name: val_loss, goal: minimize}\n", ""))
    cp = cli("sweep", str(f), "--name", "tg", "--workers", "1", "-q", check=True)
    st = cli.status("tg")
    assert st["sweep"]["end_reason"] == "metric.target 0.5 reached by trial 1"
    assert len(st["trials"]) == 2           # nothing created after the target was reached
    assert "metric.target 0.5 reached" in cp.stdout


@pytest.mark.parametrize(("extra", "key", "words"), [
    ("early_terminate: {type: asha, eta: 1, max_iter: 9}\n", "early_terminate.eta", ["1"]),
    ("early_terminate: {type: asha, min_iter: 30, max_iter: 27}\n", "early_terminate.min_iter", ["30"]),
    ("early_terminate: {type: hyperband, min_iter: 3, eta: 0.5}\n", "early_terminate.eta", ["0.5"]),
    ("monitors: [nann]\n", "monitors[0]", ["did you mean 'nan'"]),
    ("monitors: [{plateau: {patience: 0}}]\n", "monitors[0].plateau.patience", ["0"]),
    ("budget: {time: 30x}\n", "budget.time", ["30x"]),
    ("budget: {cpu_hours: 2 fortnights}\n", "budget.cpu_hours", ["fortnights"]),
    ("budget: {trials: 0}\n", "budget.trials", ["0"]),
], ids=["eta-1", "min-above-max", "hyperband-eta", "unknown-monitor", "patience-0", "time-unit", "hours-unit",
        "trials-0"])
def test_bad_scheduler_monitor_or_budget_is_refused_before_any_trial(cli, extra, key, words):
    f = cli.spec("bad", spec(["good"], extra=extra))
    cp = cli("sweep", str(f), "-q")
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "bad.yaml" in cp.stderr and key in cp.stderr and "Traceback" not in cp.stderr, cp.stderr
    for w in words:
        assert w in cp.stderr, cp.stderr
    db = cli.store / "store.db"
    if db.exists():                          # the store may exist; no sweep and no trial may
        assert json.loads(cli("status", "--json", check=True).stdout)["sweeps"] == []


@pytest.mark.parametrize("metric", ["val_loss", "usd"], ids=["logged", "returned-only"])
def test_a_monitor_on_a_metric_no_trial_logs_is_reported(cli, metric):
    """Also when the sweep's metric is only returned at the end (`usd`), never logged as a curve: the check
    then runs when the first trial ends (it waited for two reports of the metric, which never came)."""
    text = spec(["good", "good-b"], steps=4, extra="monitors: [{exploding: {metric: grad_nrom}}]\n")
    if metric == "usd":
        text = text.replace(":curve\n", ":priced_curve\n").replace("name: val_loss", "name: usd")
    f = cli.spec("s", text)
    cp = cli("sweep", str(f), "--name", "typo", "--workers", "1", "-q", check=True)
    assert "grad_nrom" in cp.stderr and "no trial has logged so far" in cp.stderr and "grad_norm" in cp.stderr
    assert cp.stderr.count("grad_nrom") == 1            # said once, not once per report
    assert cli.status("typo")["sweep"]["counts"]["completed"] == 2   # a warning, not an error
    import sqlite3

    with sqlite3.connect(cli.store / "store.db") as c:
        rows = c.execute("SELECT message FROM events WHERE kind = 'warning'").fetchall()
    assert len(rows) == 1 and "grad_nrom" in rows[0][0]


HEALTH = """\
import math


def train(config, run):
    kind = config.kind
    for step in range(1, 5):
        bad = step == 2
        point = {"val_loss": 1.0 / step, "score": step * 1.0,
                 "grad_norm": math.inf if bad and kind == "amp-skip" else 1.0,   # a step GradScaler skips
                 "lr_ratio": math.inf if bad and kind == "amp-skip" else 1.0}
        if bad and kind == "score-nan":
            point["score"] = math.nan                                          # the second objective
        run.log(point, step=step)
        if run.should_stop:
            break
    return point
"""


def test_nan_watches_every_objective_and_not_an_unrelated_metric(cli):
    """`nan` with no list: an inf gradient norm or learning-rate ratio of a healthy trial does not stop it;
    a NaN in the second objective (not loss-like) does."""
    (cli.tmp / "health.py").write_text(HEALTH)
    f = cli.spec("s", "function: health.py:train\nmethod: grid\n"
                      "metric: [{name: val_loss, goal: minimize}, {name: score, goal: maximize}]\n"
                      "parameters: {kind: {values: [amp-skip, score-nan]}}\nmonitors: [nan]\n")
    cli("sweep", str(f), "--name", "health", "--workers", "1", "-q", check=True)
    trials = by_kind(cli.status("health"))
    assert trials["amp-skip"]["state"] == "completed", trials["amp-skip"]
    assert trials["score-nan"]["state"] == "stopped_by_rule"
    assert trials["score-nan"]["reason"] == "nan: score is NaN at step 2"


# ------------------------------------------------------------------------------------------------ budgets
def test_budget_trials_caps_the_sweep_and_status_shows_the_spend(cli):
    f = cli.spec("s", spec(["good"], method="random", steps=2, extra="budget: {trials: 3}\n"))
    cp = cli("sweep", str(f), "--name", "bt", "--workers", "1", "-q", check=True)
    assert "budget.trials reached" in cp.stdout
    st = cli.status("bt")
    assert len(st["trials"]) == 3 and st["sweep"]["end_reason"] == "budget.trials reached"
    assert "trials 3/3" in cli("status", "bt", check=True).stdout


def test_budget_time_stops_running_trials_and_names_the_budget(cli):
    f = cli.spec("s", spec(["good"], method="random", steps=400, delay=0.05,
                           extra="budget: {time: 2s}\ntrial: {grace: 5s}\n"))
    cp = cli("sweep", str(f), "--name", "btime", "--workers", "1", "-q")
    assert cp.returncode == 1 and "no trial completed (1 stopped; budget.time 2s reached)" in cp.stderr
    st = cli.status("btime")
    assert st["sweep"]["end_reason"] == "budget.time 2s reached"
    assert [t["state"] for t in st["trials"]] == ["stopped"]
    assert st["trials"][0]["reason"] == "stopped: budget.time 2s reached"


def _cpu_budget_spec(hours: float, steps: int = 16) -> str:
    # each trial holds 1 cpu for ~steps x 0.05 s (0.8 s)
    return spec(["good"], method="random", steps=steps, delay=0.05,
                extra=f"resources: {{cpus: 1}}\nbudget: {{cpu_hours: {hours}, trials: 20}}\n")


def test_budget_cpu_hours_stops_creating_trials_and_lets_running_ones_finish(cli):
    f = cli.spec("s", _cpu_budget_spec(0.0005))   # 1.8 cpu-seconds
    cp = cli("sweep", str(f), "--name", "bcpu", "--workers", "1", "-q", check=True)
    st = cli.status("bcpu")
    assert st["sweep"]["end_reason"].startswith("budget.cpu_hours 0.0005 reached"), st["sweep"]["end_reason"]
    assert 2 <= len(st["trials"]) < 20
    assert all(t["state"] == "completed" for t in st["trials"])    # soft: the running trial finished
    spend = st["sweep"]["spend"]
    assert spend["cpu_seconds"] >= 1.8
    assert "cpu-hours" in cli("status", "bcpu", check=True).stdout and "budget.cpu_hours" in cp.stdout


def test_budget_cpu_hours_with_hard_stops_the_running_trial(cli):
    # 0.36 cpu-seconds, hit early in the first trial's 4 s: a driver starved of CPU on a loaded machine still
    # looks while it runs (with 0.8 s trials it once looked only after the trial had completed)
    f = cli.spec("s", _cpu_budget_spec(0.0001, steps=80))
    cp = cli("sweep", str(f), "--name", "bhard", "--workers", "1", "--hard", "-q")
    assert cp.returncode == 1 and "no trial completed (1 stopped" in cp.stderr, (cp.stdout, cp.stderr)
    st = cli.status("bhard")
    assert st["sweep"]["end_reason"].startswith("budget.cpu_hours 0.0001 reached")
    assert [t["state"] for t in st["trials"]] == ["stopped"]
    assert "budget.cpu_hours" in st["trials"][0]["reason"]


def test_budget_gpu_hours_counts_only_gpu_holding_trials(cli):
    """A CPU-only sweep holds no GPU: a gpu_hours budget never ends it."""
    f = cli.spec("s", spec(["good"], method="random", steps=2,
                           extra="budget: {gpu_hours: 0.0001, trials: 3}\n"))
    cli("sweep", str(f), "--name", "bgpu", "--workers", "1", "-q", check=True)
    st = cli.status("bgpu")
    assert st["sweep"]["end_reason"] == "budget.trials reached" and st["sweep"]["spend"]["gpu_seconds"] == 0


def test_budget_cost_sums_what_trials_report(cli):
    """budget.cost.usd limits the sum of the `usd` metric that trials log or return."""
    f = cli.spec("s", spec(["good"], method="random", steps=2,
                           extra="budget: {cost: {usd: 1.0}, trials: 20}\n"))
    body = f.read_text().replace("function: ", "function: ", 1)
    f.write_text(body.replace(f"{CURVES}:curve", f"{CURVES}:priced_curve"))
    cli("sweep", str(f), "--name", "bcost", "--workers", "1", "-q", check=True)
    st = cli.status("bcost")
    assert st["sweep"]["end_reason"].startswith("budget.cost.usd 1 reached"), st["sweep"]["end_reason"]
    assert len(st["trials"]) == 3            # 0.4 per trial: 0.4, 0.8, 1.2 >= 1
    assert st["sweep"]["spend"]["cost.usd"] == pytest.approx(1.2)


@pytest.mark.parametrize("workers", [1, 2])
def test_one_and_multi_process_trials_are_held_at_rungs(tmp_path, workers):
    """A multi-process trial's rank 0 waits at its rungs like a one-process trial (its supervisor relays the
    verdict: tests/backends/test_multiproc.py), and a promoted trial runs to its end."""
    held = [1, 3]
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.driver import Driver
    from sweeplab.spec import parse_spec
    from sweeplab.store import Store

    class Recording(LocalBackend):
        def submit(self, task):
            tasks.append(task)
            super().submit(task)

    tasks: list = []
    spec = parse_spec({"function": f"{CURVES}:curve", "method": "grid",
                       "metric": {"name": "val_loss", "goal": "minimize"},
                       "early_terminate": {"type": "asha", "min_iter": 1, "max_iter": 9, "eta": 3},
                       "resources": {"cpus": 1, "workers": workers},
                       "parameters": {"kind": {"values": ["good"]}, "steps": {"value": 4},
                                      "delay": {"value": 0.0}}}, file="<test>")
    store = Store.open(tmp_path / "store")
    backend = Recording(plan_slots(1, cpus=workers, gpus=0, gpu_ids=[]))
    driver = Driver(spec, store, backend, sweep_name="held")
    driver.create(spec_path=None)
    outcome = driver.run()
    assert outcome.counts.get("completed") == 1, outcome
    assert [list(t.decision_steps) for t in tasks] == [held]


STALLING = Path(__file__).resolve().parents[1] / "fixtures" / "stalling.py"


@pytest.mark.parametrize("trial", ["function", "program"])
def test_stalled_stops_a_trial_that_reports_only_a_heartbeat(cli, trial):
    """A trial whose loss stopped advancing while it logs a timestamp and a constant (at run.log's automatic
    step) is stalled: those reports are no progress. A healthy trial reporting a falling loss is not. A trial
    that went silent is told apart: its reason said "its reports since then advanced no step" (the driver's
    time of the last report, taken later and on another clock than the progress time, always came after
    it), where it sent no report at all."""
    head = f"function: {STALLING}:train\n" if trial == "function" else f"program: {STALLING}\n"
    # stalled after 2 s, not 1: a loaded run's healthy trial, starved that long between two reports, was stopped
    f = cli.spec("s", head + "method: grid\nmetric: {name: val_loss, goal: minimize}\n"
                 "parameters:\n  kind: {values: [stuck, healthy, silent]}\n  seconds: {value: 4}\n"
                 "monitors: [{stalled: {after: 2s}}]\ntrial: {retries: 0, grace: 1s}\n")
    cli("sweep", str(f), "--name", "st", "--workers", "2", "-q", timeout=120)
    trials = by_kind(cli.status("st"))
    stuck, healthy = trials["stuck"], trials["healthy"]
    assert stuck["state"] == "stopped_by_rule", stuck
    assert stuck["reason"].startswith("stalled: no progress for ") and "val_loss or a loss-like metric" \
        in stuck["reason"], stuck["reason"]
    assert healthy["state"] == "completed", healthy
    silent = trials["silent"]
    assert silent["state"] == "stopped_by_rule", silent
    assert silent["reason"].startswith("stalled: no report for ") and silent["reason"].endswith("(limit 2s)"), \
        silent["reason"]


ACCURACY = Path(__file__).resolve().parents[1] / "fixtures" / "accuracy.py"


def _trials(store: Path, name: str) -> list[dict]:
    """A sweep's trials as `sweeplab status --json` lists them, read in this process."""
    from sweeplab.store import Store, queries

    st = Store.open(store, readonly=True)
    try:
        return queries.sweep_status(st, name)["trials"]
    finally:
        st.close()


def test_monitors_judge_a_maximized_objective_by_its_goal(cli):
    """`overfitting` whose `val` is the sweep's maximized metric never fired: it took the goal `minimize`, so
    the gap of an accuracy (train above val) was negative and a falling val_acc a new best. `plateau` on the
    maximized second objective of a two-objective sweep stopped a rising val_acc ("best 0.55 at step 1, now
    0.7"). Both now take the goal of the objective they watch, as `plateau`/`diverging` on the sweep's
    metric did."""
    import sweeplab as sl

    base = {"function": f"{ACCURACY}:train", "method": "grid", "parameters": {"overfit": {"values": [True, False]}}}
    sl.run_sweep({**base, "metric": {"name": "val_acc", "goal": "maximize"},
                  "monitors": [{"overfitting": {"train": "train_acc", "val": "val_acc", "patience": 3}}]},
                 store=cli.store, name="one", workers=2)
    sl.run_sweep({**base, "metric": [{"name": "size", "goal": "minimize"}, {"name": "val_acc", "goal": "maximize"}],
                  "monitors": [{"plateau": {"metric": "val_acc", "patience": 3}}]},
                 store=cli.store, name="two", workers=2)
    one = {t["params"]["overfit"]: t for t in _trials(cli.store, "one")}
    assert one[True]["state"] == "stopped_by_rule" and one[True]["reason"].startswith("overfitting: "), one[True]
    assert one[False]["state"] == "completed", one[False]
    two = {t["params"]["overfit"]: t for t in _trials(cli.store, "two")}
    assert two[False]["state"] == "completed", two[False]      # val_acc rises to the end: no plateau
    assert two[True]["state"] == "stopped_by_rule", two[True]  # it fell for 3 reports after its best
    assert two[True]["reason"].startswith("plateau: val_acc did not improve by more than 0 for 3 reports (best 0.7 "
                                          "at step 4"), two[True]["reason"]


REPORTS_NAN = Path(__file__).resolve().parents[1] / "fixtures" / "reports_nan.py"


def test_nan_monitor_sees_a_non_finite_value_a_command_trial_reports(cli):
    """`sweeplab.report` writes NaN and inf as text (strict JSON has no such number): they reach the monitors
    as the values they are, as an `@sweeplab` line's NaN does, instead of being dropped (the trial then
    completed with its last finite loss as its value)."""
    f = cli.spec("s", f"program: {REPORTS_NAN}\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
                 "parameters:\n  bad: {values: [nan, inf]}\n  how: {values: [report, line]}\n"
                 "monitors: [nan]\ntrial: {retries: 0}\n")
    cli("sweep", str(f), "--name", "cn", "--workers", "2", "-q")
    trials = cli.status("cn")["trials"]
    assert len(trials) == 4
    for t in trials:
        assert t["state"] == "stopped_by_rule", (t["state"], t["reason"])
        assert t["reason"] == f"nan: loss is {'NaN' if t['params']['bad'] == 'nan' else 'inf'} at step 3", t


def test_resume_rebuilds_a_monitors_count_from_the_stored_reports(cli):
    """A plateau counted over an interrupted attempt goes on counting after `sweeplab resume` (the monitors
    are fed the stored points, as the scheduler is), so the trial stops at the report it would have stopped
    at without the interruption: the 7th, not the 7th of the new attempt."""
    import signal
    import sqlite3
    import time

    # the first attempt holds after its 2nd report until the file `go` exists: the interrupt comes after
    # exactly 2 reports (a delay of 0.25 s between reports let a loaded run's make 7, the plateau's stop)
    go = cli.store.parent / "go"
    f = cli.spec("s", f"function: {STALLING}:flat\nmethod: grid\nmetric: {{name: val_loss, goal: minimize}}\n"
                 f"parameters:\n  steps: {{value: 40}}\n  delay: {{value: 0.05}}\n  hold: {{value: '{go}'}}\n"
                 "  hold_at: {value: 2}\nmonitors: [{plateau: {patience: 6}}]\n")
    proc = cli.start("sweep", str(f), "--name", "pr", "--workers", "1", "-q")
    db = cli.store / "store.db"

    def stored() -> int:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
                return int(c.execute("SELECT count(*) FROM metrics WHERE key='val_loss'").fetchone()[0])
        except sqlite3.Error:
            return 0

    deadline = time.monotonic() + 60
    while stored() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    before = stored()
    assert before == 2, before
    go.write_text("")
    cli("resume", "pr", "-q")
    [t] = cli.status("pr")["trials"]
    assert t["state"] == "stopped_by_rule" and t["attempts"] == 2, t
    assert t["reason"].startswith("plateau: val_loss did not improve by more than 0 for 6 reports "
                                  f"(best 1 at step 1, now 1 at step {7 - before})"), (before, t["reason"])


def _below_half(trial, points):
    """A rule of your own: stop when val_acc falls below 0.5."""
    for p in points:
        if p.key == "val_acc" and p.value < 0.5:
            return f"val_acc fell to {p.value:.3g} at step {p.step}"
    return None


def test_monitors_made_in_python_run_in_a_sweep_and_built_in_ones_resume(cli):
    """The rules `sweeplab.monitors` builds in Python were refused in a sweep's spec mapping ("a
    OverfittingMonitor cannot be stored as JSON"), and a sweep given them otherwise stored their repr, which
    `sweeplab resume` rejected as an unknown monitor. They now run, are stored as their spec entries (a
    built-in rule resumes as it was built), and a rule of your own, a Python function no store can hold, is
    named when a resume cannot run it."""
    import sweeplab as sl
    from sweeplab.monitors import custom, overfitting

    base = {"function": f"{ACCURACY}:train", "method": "random", "metric": {"name": "val_acc", "goal": "maximize"},
            "parameters": {"overfit": {"value": True}}, "budget": {"trials": 1}}
    built = sl.run_sweep({**base, "monitors": [overfitting("train_acc", "val_acc", patience=3)]},
                         store=cli.store, name="py", workers=1)
    mine = sl.run_sweep({**base, "monitors": [custom(_below_half)]}, store=cli.store, name="mine", workers=1)
    assert built.counts.get("stopped_by_rule") == 1 and mine.counts.get("stopped_by_rule") == 1
    [t] = _trials(cli.store, "py")
    assert t["reason"].startswith("overfitting: the gap between val_acc and train_acc grew for 3 reports"), t
    [t] = _trials(cli.store, "mine")
    assert t["reason"].startswith("_below_half: val_acc fell to 0.49"), t
    resumed = cli("resume", "py", "--trials", "+1", "-q")   # the stored rule is rebuilt: the new trial stops too
    assert resumed.returncode in (0, 1), resumed.stdout + resumed.stderr
    assert [t["state"] for t in _trials(cli.store, "py")] == ["stopped_by_rule"] * 2
    refused = cli("resume", "mine", "--trials", "+1")
    assert refused.returncode == 2 and "custom '_below_half'" in refused.stderr, refused.stderr


def test_a_retry_that_starts_over_is_not_stopped_as_a_plateau(cli):
    """Attempt 1 of a healthy trial fails at step 5 (a lost data server) and is retried; attempt 2 trains
    again from step 0. Its loss, falling as before, was judged against attempt 1's best: `plateau` stopped the
    trial after 3 reports ("best 0.1667 at step 5, now 0.3333 at step 2")."""
    (cli.tmp / "retry.py").write_text(
        "def train(config, run):\n"
        "    for step in range(8):\n"
        "        run.log({'val_loss': 1.0 / (step + 1)}, step=step)\n"
        "        if run.attempt == 1 and step == 5:\n"
        "            raise ConnectionError('lost the data server')\n"
        "    return {'val_loss': 1.0 / 8}\n")
    f = cli.spec("s", "function: retry.py:train\nmethod: grid\nmetric: {name: val_loss, goal: minimize}\n"
                 "parameters:\n  x: {value: 1}\ntrial: {retries: 1}\n"
                 "monitors: [{plateau: {metric: val_loss, patience: 3}}]\n")
    cli("sweep", str(f), "--name", "rt", "-q", timeout=60)
    (trial,) = cli.status("rt")["trials"]
    assert (trial["state"], trial["attempts"]) == ("completed", 2), trial
