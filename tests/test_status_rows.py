"""`sweeplab status SWEEP` on a long sweep: its newest trials, the running ones and the best, a line saying how many
trials there are and how to see them all (issue 18: it answers as fast at 10,000 trials as at 100);
--all / --limit N choose; --json stays every trial (the documented API) unless --limit is given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sweeplab.store import Store

T0 = 1_700_000_000.0


def _sweep(root: Path, trials: int) -> None:
    s = Store.open(root)
    with s.transaction():
        sid = s.create_sweep(name="long", method="random", metric="loss", goal="minimize", spec={},
                             spec_path=None, seed=0)
        for n in range(trials):
            tid = s.add_trial(sid, n, {"x": n}, None, seed=n, state="running", started=T0 + n, attempts=1)
            if n != 2:   # trial 2 is still running (a slow one)
                s.update_trial(tid, state="completed", value=float(n % 7), ended=T0 + n + 1)
    s.close()


def _status(root: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", "long", "--store", str(root), *args],
                        env=env, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout


def _numbers(table: str) -> list[int]:
    return [int(cells[1]) for line in table.splitlines()
            if len(cells := [c.strip() for c in line.split("│")]) > 2 and cells[1].isdigit()]


def test_status_shows_the_newest_trials_and_the_running_ones_and_says_how_to_see_all(tmp_path: Path) -> None:
    _sweep(tmp_path, 30)
    out = _status(tmp_path)
    assert _numbers(out) == [0, 2, *range(10, 30)]   # the best (value 0 first at trial 0), the running one
    assert "22 of 30 trials shown" in out and "--all" in out
    assert _numbers(_status(tmp_path, "--limit", "3")) == [0, 2, 27, 28, 29]
    data = json.loads(_status(tmp_path, "--json"))
    assert [t["number"] for t in data["trials"]] == list(range(30)) and "omitted" not in data


def test_status_all_shows_every_trial_and_no_note(tmp_path: Path) -> None:
    _sweep(tmp_path, 30)
    out = _status(tmp_path, "--all")
    assert _numbers(out) == list(range(30)) and "trials shown" not in out


def test_the_list_of_sweeps_shows_a_front_not_one_objectives_best_for_several_objectives(tmp_path: Path) -> None:
    """`sweeplab status` (every sweep): a sweep with two objectives has no single best value; its `best` cell
    is the size of its feasible Pareto front, as in its own status line, not the first objective's best
    (here trial 2's acc 0.9, whose latency puts it on the front with two others)."""
    s = Store.open(tmp_path)
    spec = {"metric": [{"name": "acc", "goal": "maximize"}, {"name": "lat", "goal": "minimize"}]}
    with s.transaction():
        sid = s.create_sweep(name="two", method="random", metric="acc", goal="maximize", spec=spec,
                             spec_path=None, seed=0)
        for n, (acc, lat) in enumerate([(0.5, 1.0), (0.4, 2.0), (0.9, 9.0), (0.7, 3.0)]):
            tid = s.add_trial(sid, n, {"x": n}, None, seed=n)
            s.update_trial(tid, state="completed", value=acc, objective_values=[acc, lat])
    s.close()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", "--store", str(tmp_path)], env=env,
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    row = next(line for line in cp.stdout.splitlines() if "two" in line)
    assert [c.strip() for c in row.split("│")][-2] == "front 3", row


def test_status_says_when_a_running_sweeps_driver_is_gone(tmp_path: Path) -> None:
    """A driver killed with `kill -9` leaves its sweep `running` in the store (its trials too, until resumed):
    `status` says the driver is gone and how to continue, where a live driver (this test's own process)
    gets no such note."""
    import time

    s = Store.open(tmp_path)
    with s.transaction():
        for name in ("dead", "live"):
            sid = s.create_sweep(name=name, method="random", metric="loss", goal="minimize", spec={},
                                 spec_path=None, seed=0)
            s.add_trial(sid, 0, {"x": 0}, None, seed=0, state="running", started=T0, attempts=1)
            started = time.time()
            if name == "dead":
                driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                driver.kill()
                driver.wait()
                pid = dead = driver.pid
            else:
                pid = os.getpid()
            s.update_sweep(sid, driver=json.dumps({"pid": pid, "host": os.uname().nodename, "started": started}))
    s.close()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}

    def status(*args: str) -> str:
        cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", *args, "--store", str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=120)
        assert cp.returncode == 0, cp.stderr
        return cp.stdout

    out = status("dead")
    assert f"its driver (pid {dead}) is gone" in out and "sweeplab resume dead" in out, out
    assert "is gone" not in status("live")
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in status().splitlines()
            if line.startswith("│")}
    assert rows == {"dead": "running (driver gone)", "live": "running"}, rows


def test_best_says_the_completed_trials_are_infeasible_not_that_there_are_none(tmp_path: Path) -> None:
    """Every completed trial broke a constraint: `best` (exit 1) says so, rather than "no completed trial
    with a value yet" beside a status listing two completed trials with values."""
    s = Store.open(tmp_path)
    spec = {"metric": {"name": "acc", "goal": "maximize"}, "constraints": [{"metric": "mem", "max": 1}]}
    with s.transaction():
        sid = s.create_sweep(name="c", method="grid", metric="acc", goal="maximize", spec=spec, spec_path=None,
                             seed=0)
        for n in range(2):
            tid = s.add_trial(sid, n, {"x": n}, None, seed=n)
            s.update_trial(tid, state="completed", value=0.5 + n, feasible=False)
    s.close()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "best", "c", "--store", str(tmp_path)], env=env,
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 1, cp.stderr
    assert "no completed feasible trial" in cp.stdout and "2 completed trial(s) are infeasible" in cp.stdout, cp.stdout


def test_status_of_a_sweep_whose_budget_is_stored_as_text(tmp_path: Path) -> None:
    """A store whose spec keeps a budget as written (`time: 2h`, as the dashboard's synthetic store and
    stores of other writers do) ended `sweeplab status NAME` with a traceback (`:g` of a str)."""
    s = Store.open(tmp_path)
    with s.transaction():
        sid = s.create_sweep(name="b", method="random", metric="loss", goal="minimize", spec={
            "budget": {"trials": 5, "time": "2h", "cpu_hours": "1.5", "gpu_hours": None, "cost": {"usd": "ten"}}},
            spec_path=None, seed=0)
        s.update_sweep(sid, spend=json.dumps({"seconds": 12.0, "cpu_seconds": 7200.0, "gpu_seconds": 3600.0}))
    s.close()
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", "b", "--store", str(tmp_path)],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert "spend: trials 0/5, time 12s/2h, cpu-hours 2.000/1.5, gpu-hours 1.000, usd 0/ten" in cp.stdout, cp.stdout


def test_status_and_best_never_write_the_stores_terminal_control_characters(tmp_path: Path) -> None:
    """A command trial whose last error line is colored (most tools color `ERROR`), and a sweep named with an
    escape (in a store written before such names were refused): `status` and `best` wrote them raw, so ESC [2J
    cleared the user's screen and OSC 0 set the terminal's title (and a right-to-left override showed a value
    backwards). They are written as escapes now (the JSON escapes them as ever)."""
    (tmp_path / "prog.py").write_text('import sys\nprint("\\x1b[1;31mERROR\\x1b[0m: \\x1b]0;pwned\\x07 nan '
                                      'loss\\x1b[2J\\x9b1m", file=sys.stderr)\nsys.exit(3)\n')
    (tmp_path / "sweep.yaml").write_text('name: cmdred\nprogram: prog.py\nmethod: grid\n'
                                         'metric: {name: loss, goal: minimize}\ntrial: {retries: 0}\n'
                                         'parameters:\n  x: {values: ["\\u202egnp.exe"]}\n')
    store = str(tmp_path / "store")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}

    def cli(*args: str, code: int = 0) -> str:
        cp = subprocess.run([sys.executable, "-m", "sweeplab", *args, "--store", store], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
        assert cp.returncode == code, cp.stderr
        return cp.stdout + cp.stderr

    cli("sweep", "sweep.yaml", code=1)
    name = "cmd\x1b[31mred"   # a new sweep can no longer be named so (spec.check_sweep_name); an older store's can
    import sqlite3

    with sqlite3.connect(tmp_path / "store" / "store.db") as db:
        db.execute("UPDATE sweeps SET name=? WHERE name='cmdred'", (name,))
    outputs = [cli("status"), cli("status", name), cli("status", name, "--all"), cli("best", name, code=1),
               cli("status", "nope", code=2)]
    for out in outputs:
        assert not any(ch in out for ch in "\x1b\x07\x9b\u202e"), repr(out)
    assert "cmd\\x1b[31mred" in outputs[0] and "cmd\\x1b[31mred" in outputs[3], outputs
    assert "\\x1b[1;31mERROR\\x1b[0m: \\x1b]0;pwned\\x07 nan loss\\x1b[2J\\x9b1m" in outputs[2], outputs[2]
    assert "x=\\u202egnp.exe" in outputs[2], outputs[2]   # a right-to-left override: shown, not obeyed
    reason = json.loads(cli("status", name, "--json"))["trials"][0]["reason"]
    assert "\x1b[1;31mERROR" in reason, reason   # the data itself is kept as it is


def test_a_store_whose_path_is_not_utf8_is_read_as_it_is_written(tmp_path: Path) -> None:
    """A store directory named in Latin-1 (`caf\\xe9/`, a valid Linux path): the sweep wrote it, but every read
    (status, best, export, the dashboard) ended in a UnicodeEncodeError traceback, the read-only open
    percent-encoding the path as UTF-8 text."""
    (tmp_path / "q.py").write_text("def train(config, run):\n    run.log({'loss': config['x']})\n")
    (tmp_path / "s.yaml").write_text("name: s\nfunction: q.py:train\nmethod: grid\n"
                                     "metric: {name: loss, goal: minimize}\npreload: false\n"
                                     "parameters:\n  x: {values: [2.0, 1.0]}\n")
    store = os.fsencode(tmp_path) + b"/caf\xe9"

    def cli(*args: bytes) -> str:
        cp = subprocess.run([sys.executable.encode(), b"-m", b"sweeplab", *args, b"--store", store], cwd=tmp_path,
                            capture_output=True, timeout=120)
        assert cp.returncode == 0, cp.stderr.decode(errors="replace")
        return cp.stdout.decode(errors="replace")

    cli(b"sweep", b"s.yaml")
    assert json.loads(cli(b"best", b"s", b"--json"))["value"] == 1.0
    assert "s " in cli(b"status") and json.loads(cli(b"status", b"s", b"--json"))["sweep"]["trials"] == 2
    assert cli(b"export", b"s", b"-o", b"-").splitlines()[0].startswith("number,state,value")


def test_status_shows_a_small_cpu_hour_spend_that_ended_the_sweep_not_zero(tmp_path: Path) -> None:
    """A sweep ended by `budget.cpu_hours: 1e-5` after 4.26e-05 CPU-hours printed `cpu-hours 0.000/1e-05`:
    a spend of zero, under the limit its own end reason said it had reached."""
    s = Store.open(tmp_path)
    with s.transaction():
        sid = s.create_sweep(name="b", method="random", metric="loss", goal="minimize",
                             spec={"budget": {"cpu_hours": 1e-5, "gpu_hours": 2e-5}}, spec_path=None, seed=0)
        s.update_sweep(sid, spend=json.dumps({"seconds": 1.0, "cpu_seconds": 0.1534, "gpu_seconds": 0.0036}))
    s.close()
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", "b", "--store", str(tmp_path)],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert "cpu-hours 4.26e-05/1e-05, gpu-hours 1e-06/2e-05" in cp.stdout, cp.stdout
