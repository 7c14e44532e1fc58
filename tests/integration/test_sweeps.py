"""End-to-end sweeps through the real CLI, real worker processes and a real SQLite store."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path

import pytest

TRIALS = Path(__file__).resolve().parents[1] / "fixtures" / "trials.py"


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")

pytestmark = pytest.mark.slow


def spec(function: str, *, params: str = "  x: {values: [1, 2, 3]}", extra: str = "", method: str = "grid",
         metric: str = "loss") -> str:
    return (f"function: {TRIALS}:{function}\nmethod: {method}\nseed: 1\n"
            f"metric: {{name: {metric}, goal: minimize}}\nparameters:\n{params}\n{extra}")


def states(status: dict) -> dict[int, str]:
    return {t["number"]: t["state"] for t in status["trials"]}


def test_grid_sweep_runs_every_combination_once_and_ends(cli):
    f = cli.spec("s", spec("quick", params="  x: {values: [1, 2, 3]}\n  steps: {values: [2, 4]}"))
    cp = cli("sweep", str(f), "--name", "g", "--workers", "2", "-q", check=True)
    assert "search space exhausted" in cp.stdout
    st = cli.status("g")
    assert st["sweep"]["counts"]["completed"] == 6 and st["sweep"]["state"] == "finished"
    combos = sorted((t["params"]["x"], t["params"]["steps"]) for t in st["trials"])
    assert combos == [(1, 2), (1, 4), (2, 2), (2, 4), (3, 2), (3, 4)]
    best = json.loads(cli("best", "g", "--json", check=True).stdout)
    assert set(best) == {"sweep", "trial", "value", "params", "metrics"} and best["value"] == pytest.approx(0.25)


def test_crashing_trial_fails_alone_and_the_sweep_finishes(cli):
    f = cli.spec("s", spec("crash_on_two", extra="trial: {retries: 0}"))
    cli("sweep", str(f), "--name", "c", "--workers", "2", "-q", check=True)
    st = cli.status("c")
    by_x = {t["params"]["x"]: t for t in st["trials"]}
    assert by_x[2]["state"] == "failed" and "SIGSEGV" in by_x[2]["reason"]
    assert by_x[1]["state"] == by_x[3]["state"] == "completed"


def test_hanging_trial_is_stopped_by_budget_time(cli):
    f = cli.spec("s", spec("hang", params="  x: {value: 1}", method="random",
                           extra="budget: {time: 2s, trials: 1}\ntrial: {grace: 1s}"))
    t0 = time.monotonic()
    cp = cli("sweep", str(f), "--name", "h", "--workers", "1", "-q")
    assert cp.returncode == 1, cp.stderr     # no trial completed: the sweep has no answer
    assert "no trial completed (1 stopped; budget.time 2s reached)" in cp.stderr
    assert time.monotonic() - t0 < 60
    st = cli.status("h")
    assert st["sweep"]["end_reason"].startswith("budget.time")
    assert st["trials"][0]["state"] == "stopped"


def test_nan_objective_is_failed_and_never_best(cli):
    f = cli.spec("s", spec("nan_objective", params="  x: {values: [1]}", extra="trial: {retries: 0}"))
    cli("sweep", str(f), "--name", "n", "-q")
    st = cli.status("n")
    assert st["trials"][0]["state"] == "failed" and "nan" in st["trials"][0]["reason"].lower()
    assert json.loads(cli("best", "n", "--json").stdout) is None


def test_wrong_metric_name_fails_with_the_names_logged(cli):
    f = cli.spec("s", spec("quick", params="  x: {values: [1]}", metric="val_loss", extra="trial: {retries: 0}"))
    cli("sweep", str(f), "--name", "m", "-q")
    reason = cli.status("m")["trials"][0]["reason"]
    assert "val_loss" in reason and "loss" in reason and "never reported" in reason


def test_transient_failure_is_retried_and_completes(cli):
    f = cli.spec("s", spec("flaky", params="  x: {values: [1]}", extra="trial: {retries: 2}"))
    cli("sweep", str(f), "--name", "r", "-q", check=True)
    t = cli.status("r")["trials"][0]
    assert t["state"] == "completed" and t["attempts"] == 2


def test_deterministic_failure_is_not_retried_again(cli):
    f = cli.spec("s", spec("raises", params="  x: {values: [5]}", extra="trial: {retries: 5}"))
    cli("sweep", str(f), "--name", "d", "-q")
    t = cli.status("d")["trials"][0]
    assert t["state"] == "failed" and t["attempts"] == 2 and "same way twice" in t["reason"]


def test_crash_loop_ends_the_sweep_with_the_first_traceback(cli):
    f = cli.spec("s", spec("raises", params="  x: {min: 0, max: 1000}", method="random",
                           extra="trial: {retries: 0}\nbudget: {trials: 50}"))
    cp = cli("sweep", str(f), "--name", "loop", "--workers", "1", "-q")
    assert cp.returncode == 1
    assert "crash loop" in cp.stdout + cp.stderr and "planted failure" in cp.stdout + cp.stderr
    assert "Traceback (most recent call last)" in cp.stderr      # a bug in the trial's code: where it is
    assert cp.stderr.count("Traceback (most recent call last)") == 1, cp.stderr   # once: noted as it happened,
    # the final error line does not repeat it
    assert "error: sweep loop failed: crash loop" in cp.stderr
    st = cli.status("loop")
    assert st["sweep"]["state"] == "failed" and len(st["trials"]) < 10


def test_a_failed_trials_traceback_starts_at_the_trials_own_code(cli):
    """What the user reads (the sweep's error, `status`, `repro`) starts at their function: the frames sweeplab
    ran it through (the worker, the W&B shim, call_trial) were the first six lines of every traceback."""
    f = cli.spec("s", spec("raises", params="  x: {values: [5]}", extra="trial: {retries: 0}"))
    cp = cli("sweep", str(f), "--name", "tb", "-q")
    assert cp.returncode == 1
    shown = cp.stdout + cp.stderr
    conn = sqlite3.connect(cli.store / "store.db")
    (stored,) = conn.execute("SELECT traceback FROM attempts").fetchone()
    conn.close()
    for text in (shown, stored):
        assert "planted failure x=5" in text and "trials.py" in text, text
        for ours in ("function_trial.py", "wandb_compat", "targets.py"):
            assert ours not in text, text


def test_command_trial_sweep_from_a_wandb_spec(cli, tmp_path):
    import shutil
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "examples" / "cli_program"
    shutil.copytree(src, tmp_path / "prog")
    cli("sweep", str(tmp_path / "prog" / "sweep.yaml"), "--name", "cmd", "-q", check=True)
    st = cli.status("cmd")
    assert st["sweep"]["counts"]["completed"] == 6
    for t in st["trials"]:
        assert t["value"] is not None and "final_loss" in t["metrics"]
    log = sorted((cli.store / "logs" / "cmd").glob("0-1.log"))[0].read_text()
    assert "@sweeplab" in log


def test_bad_spec_exits_2_names_file_and_key_and_writes_nothing(cli):
    f = cli.spec("bad", spec("quick", params="  lr: {min: 0.5, max: 0.1}"))
    cp = cli("sweep", str(f))
    assert cp.returncode == 2
    assert "bad.yaml" in cp.stderr and "parameters.lr" in cp.stderr and "Traceback" not in cp.stderr
    assert not (cli.store / "store.db").exists()


def test_dry_run_describes_grid_without_running(cli):
    f = cli.spec("s", spec("quick", params="  x: {values: [1, 2, 3]}\n  y: {values: [a, b]}"))
    cp = cli("sweep", str(f), "--dry-run", check=True)
    assert "6 combinations" in cp.stdout and "grid" in cp.stdout
    assert not (cli.store / "store.db").exists()


def test_ctrl_c_then_resume_never_reruns_a_completed_trial(cli):
    f = cli.spec("s", spec("slow_square", params="  x: {min: -5.0, max: 5.0}", method="random",
                           extra="budget: {trials: 8}"))
    proc = cli.start("sweep", str(f), "--name", "cc", "--workers", "2", "-q")
    db = cli.store / "store.db"

    def completed() -> int:
        if not db.exists():
            return 0
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            try:
                return c.execute("SELECT count(*) FROM trials WHERE state='completed'").fetchone()[0]
            except sqlite3.OperationalError:
                return 0

    wait_for(lambda: completed() >= 2, timeout=60)
    proc.send_signal(signal.SIGINT)
    _, errs = proc.communicate(timeout=60)
    assert proc.returncode == 130, errs
    first = cli.status("cc")
    assert first["sweep"]["state"] == "stopped"
    done_before = {t["number"]: t["ended"] for t in first["trials"] if t["state"] == "completed"}
    assert len(done_before) >= 2
    assert all(t["state"] in ("completed", "interrupted") for t in first["trials"])
    cli("resume", "cc", "-q", check=True)
    after = cli.status("cc")
    assert after["sweep"]["state"] == "finished" and len(after["trials"]) == 8
    assert all(t["state"] == "completed" for t in after["trials"])
    for number, ended in done_before.items():   # completed before: untouched, not run again
        t = after["trials"][number]
        assert t["ended"] == ended and t["attempts"] == 1


def test_run_command_records_a_single_trial_sweep(cli):
    cp = cli("run", f"{TRIALS}:quick", "steps=4", "x=2.5", "--name", "one", "-q", check=True)
    assert "1 completed" in cp.stdout
    t = cli.status("one")["trials"][0]
    assert t["state"] == "completed" and t["metrics"]["x"] == 2.5 and t["value"] is None


def test_stop_command_ends_a_running_sweep_resumably(cli):
    f = cli.spec("s", spec("sleeper", params="  x: {values: [1, 2]}", extra="trial: {grace: 10s}"))
    proc = cli.start("sweep", str(f), "--name", "st", "--workers", "2", "-q")
    db = cli.store / "store.db"

    def running() -> bool:
        if not db.exists():
            return False
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            try:
                return c.execute("SELECT count(*) FROM trials WHERE state='running'").fetchone()[0] == 2
            except sqlite3.OperationalError:
                return False

    wait_for(running, timeout=60)
    cp = cli("stop", "st")
    assert cp.returncode == 0, cp.stderr
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    st = cli.status("st")
    assert st["sweep"]["state"] == "stopped"
    assert {t["state"] for t in st["trials"]} == {"preempted"}
    again = cli("stop", "st")
    assert again.returncode == 2 and "not running" in again.stderr


def test_priced_resource_hours_end_the_sweep_at_the_cost_limit(cli):
    f = cli.spec("s", spec("slow_square", params="  x: {min: -1.0, max: 1.0}", method="random",
                           extra="resources: {cpus: 1}\nbudget: {trials: 40, cost: {usd: 0.0003}, "
                                 "prices: {cpu_hour: 1.0}}"))
    cli("sweep", str(f), "--name", "priced", "--workers", "1", "-q", check=True)
    st = cli.status("priced")
    assert st["sweep"]["end_reason"].startswith("budget.cost.usd 0.0003 reached")
    assert 1 <= len(st["trials"]) < 40
    assert st["sweep"]["spend"]["cost.usd"] >= 0.0003
    assert all(t["state"] == "completed" for t in st["trials"])   # running trials finish (no --hard)


def test_prices_without_a_cost_limit_is_refused(cli):
    f = cli.spec("bad", spec("quick", extra="budget: {prices: {cpu_hour: 1.0}}"))
    cp = cli("sweep", str(f))
    assert cp.returncode == 2 and "budget.prices" in cp.stderr and "budget.cost" in cp.stderr


def test_trial_timeout_bounds_the_total_over_attempts(cli):
    # 6 s, not 2: a loaded run's first attempt (1.2 s of work after its start) ran out a 2 s timeout by itself
    f = cli.spec("s", spec("slow_then_fail", params="  x: {values: [1]}", extra="trial: {timeout: 6s, retries: 2}"))
    cli("sweep", str(f), "--name", "to", "-q")
    t = cli.status("to")["trials"][0]
    assert t["state"] == "failed" and "over all its attempts" in t["reason"] and t["attempts"] == 2
    import sqlite3 as sq

    with sq.connect(cli.store / "store.db") as c:
        second = c.execute("SELECT ended - started FROM attempts WHERE number=2").fetchone()[0]
    # the first attempt's 1.2 s or more counted against the 6 s: a timeout per attempt would give this one 6 s
    assert second < 6.0, second


QUAD = "  x: {min: -3.0, max: 3.0}\n  y: {values: [1, 2]}"


def test_resume_with_a_new_spec_changes_budgets_but_refuses_a_new_space(cli):
    first = cli.spec("a", spec("quick", params=QUAD, method="random", extra="budget: {trials: 4}"))
    cli("sweep", str(first), "--name", "ext", "-q", check=True)
    bigger = cli.spec("b", spec("quick", params=QUAD, method="random", extra="budget: {trials: 7}\nworkers: 1"))
    cli("resume", "ext", "--spec", str(bigger), "-q", check=True)
    st = cli.status("ext")
    assert len(st["trials"]) == 7 and st["sweep"]["budget"]["trials"] == 7
    narrower = cli.spec("c", spec("quick", params="  x: {min: 0.0, max: 3.0}\n  y: {values: [1, 2]}",
                                  method="random", extra="budget: {trials: 9}"))
    cp = cli("resume", "ext", "--spec", str(narrower), "-q")
    assert cp.returncode == 2 and "parameters.x" in cp.stderr and "--fork" in cp.stderr
    assert len(cli.status("ext")["trials"]) == 7   # nothing ran


def test_fork_seeds_a_new_sweep_with_the_old_trials_that_fit(cli):
    first = cli.spec("a", spec("quick", params=QUAD, method="random", extra="budget: {trials: 10}"))
    cli("sweep", str(first), "--name", "old", "-q", check=True)
    old = cli.status("old")["trials"]
    fits = [t for t in old if t["params"]["x"] >= 0.0]
    narrower = cli.spec("c", spec("quick", params="  x: {min: 0.0, max: 3.0}\n  y: {values: [1, 2]}",
                                  method="tpe", extra="budget: {trials: 3}"))
    cli("resume", "old", "--spec", str(narrower), "--fork", "new", "-q", check=True)
    new = cli.status("new")["trials"]
    forked = [t for t in new if (t["reason"] or "").startswith("forked from old/")]
    assert len(forked) == len(fits) and len(new) == len(fits) + 3
    assert sorted(t["params"]["x"] for t in forked) == sorted(t["params"]["x"] for t in fits)
    assert all(0.0 <= t["params"]["x"] <= 3.0 for t in new)
    assert cli.status("old")["trials"] == old   # the source sweep is untouched


READS_CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "reads_config.py"


@pytest.mark.parametrize(("trial", "kind"), [("function", "user"), ("program", "user"), ("program", "bug")])
def test_a_crash_loop_of_a_user_input_error_shows_its_message_without_a_traceback(cli, trial, kind):
    """Every trial reads a config key that does not exist: the sweep's error names the key path (and a close
    key), not a Python traceback through sweeplab's Config; the attempt keeps the traceback. A bug in
    the trial's code (a ZeroDivisionError) keeps its traceback in the sweep's error. The same config fails
    the same way: such a trial is not retried."""
    (cli.tmp / "base.yaml").write_text("model: {width: 3}\n")
    head = (f"function: {READS_CONFIG}:train\nconfig: base.yaml\n" if trial == "function" else
            f"program: {READS_CONFIG}\ncommand: [python, '${{program}}', '${{args_json_file}}']\n")
    f = cli.spec("s", head + "method: random\nseed: 1\nmetric: {name: loss, goal: minimize}\n"
                 f"parameters:\n  lr: {{min: 0.1, max: 1.0}}\n  kind: {{value: {kind}}}\n"
                 "budget: {trials: 6}\ntrial: {retries: 1}\n")
    cp = cli("sweep", str(f), "--name", "ue", "--workers", "1", "-q")
    out = cp.stdout + cp.stderr
    assert cp.returncode == 1 and "crash loop" in out, out
    if kind == "bug":
        assert "Traceback (most recent call last)" in out and "ZeroDivisionError" in out, out
        return
    assert "Traceback" not in out and 'File "' not in out, out
    assert out.count("ConfigKeyError") == 1, out            # said once, not again under the final error line
    assert {t["attempts"] for t in cli.status("ue")["trials"]} == {1}   # certain to fail again: not retried
    if trial == "function":
        assert "ConfigKeyError: model.depth: the config has no such key (did you mean 'width'?)" in out, out
    else:
        assert "ConfigKeyError: model: the config has no such key (its keys: kind, lr)" in out, out
    with sqlite3.connect(cli.store / "store.db") as c:     # the attempt keeps it (the dashboard's trial page)
        kept = [tb for (tb,) in c.execute("SELECT traceback FROM attempts")]
    assert kept and all("Traceback (most recent call last)" in tb and "reads_config.py" in tb for tb in kept), kept


def test_a_sweep_whose_name_another_driver_took_meanwhile_runs_under_the_next_free_name(cli):
    """The same spec launched twice at once: both find the name free, one takes it first. The other moves to
    the next name (`-2`), as a name found taken does, instead of stopping with 'already being run'. The test
    holds the name's lock the way a driver that got there first does."""
    import fcntl

    f = cli.spec("s", spec("quick"))
    locks = cli.store / "locks"
    locks.mkdir(parents=True)
    with open(locks / "r.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        cp = cli("sweep", str(f), "--name", "r", "--workers", "1", "-q")
        assert cp.returncode == 0, cp.stderr
    assert cli.status("r-2")["sweep"]["state"] == "finished"
    assert "r" not in [s["name"] for s in json.loads(cli("status", "--json", check=True).stdout)["sweeps"]]
