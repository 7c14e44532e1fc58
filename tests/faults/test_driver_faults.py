"""Faults of the driver: kill -9 at random moments, SIGTERM, and extending a finished sweep.

What must hold after `sweeplab resume`: exactly the budgeted trials completed, none completed twice,
trials completed before the fault untouched, and no orphaned worker left running or writing.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

BUDGET = 6


def _tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` with its size and mtime (ns): a fingerprint of what was written."""
    out: dict[str, tuple[int, int]] = {}
    for p in root.rglob("*"):
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if p.is_file():
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def _completed(chaos, sweep: str) -> dict[int, tuple[float, float]]:
    return {t["number"]: (t["ended"], t["value"]) for t in chaos.trials(sweep) if t["state"] == "completed"}


def _assert_exactly_once(chaos, sweep: str, budget: int) -> None:
    trials = chaos.trials(sweep)
    assert sorted(t["number"] for t in trials) == list(range(budget))
    assert all(t["state"] == "completed" for t in trials), [(t["number"], t["state"]) for t in trials]
    for t in trials:
        attempts = chaos.attempts(t["id"])
        states = [a["state"] for a in attempts]
        assert states.count("completed") == 1, (t["number"], states)
        assert states[-1] == "completed" and "running" not in states, (t["number"], states)
        assert t["attempts"] == len(attempts) == attempts[-1]["number"]
        params = json.loads(t["params"])
        assert t["value"] == pytest.approx((float(params["x"]) - 0.3) ** 2)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_driver(chaos, reap, proc, delay: float) -> tuple[dict[int, tuple[float, float]], list[int]]:
    """SIGKILL the driver `delay` seconds from now; check its orphans die without writing anything.

    Returns the trials completed before the kill (number -> (ended, value)) and those left 'running'.
    """
    driver = psutil.Process(proc.pid)
    time.sleep(delay)
    workers = driver.children(recursive=True)
    reap.extend(w.pid for w in workers)
    assert proc.poll() is None, "the sweep ended before the kill; lengthen its trials"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    killed_at = time.time()
    before = _completed(chaos, "dk")

    # orphans notice the driver is gone (stdin EOF) and end at once, taking nothing with them. An ended orphan
    # is a zombie until init reaps it (psutil.wait_procs waited for that: about 1 s here), so zombies count as ended
    deadline = time.monotonic() + 10
    while (alive := [p.pid for p in workers if _running(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive, f"orphaned workers still running: {alive}"
    assert not chaos.stray_workers()
    ckpts = chaos.store / "checkpoints"
    fingerprint = _tree_state(ckpts)
    time.sleep(0.3)
    assert _tree_state(ckpts) == fingerprint, "something wrote checkpoints after the driver was killed"
    for name, (_, mtime_ns) in fingerprint.items():
        assert mtime_ns / 1e9 <= killed_at + 1.0, f"{name} written after the kill"
    assert chaos.integrity() == "ok"
    # trials that were running are still marked running: the driver had no chance to say otherwise
    running = [t["number"] for t in chaos.trials("dk") if t["state"] == "running"]
    return before, running


@pytest.mark.parametrize("run", range(4), ids=lambda r: f"run{r}")
def test_resume_after_driver_kill_loses_no_completed_trial(chaos, reap, run):
    """Run r kills the driver at a seeded random moment in [0.4 r, 0.4 r + 0.4] s after the first trial
    started (early runs hit the first trials, late runs the last ones); the last run also kills the
    resuming driver once."""
    rng = random.Random(1000 + run)
    gate = chaos.tmp / "gate"   # the last trial waits at its last step until the final resume: no kill comes late
    body = chaos.faulty_spec("stepper", method="random", seed=run,
                             params=chaos.params(x="{min: -1.0, max: 1.0}", steps=12, delay=0.05, gate=str(gate),
                                                 gate_from=BUDGET - 1),
                             extra=f"budget: {{trials: {BUDGET}}}\ntrial: {{retries: 1}}")
    proc = chaos.start("sweep", str(chaos.spec("s", body)), "--name", "dk", "--workers", "2", "-q")
    reap.append(proc.pid)
    chaos.wait_for(lambda: chaos.running_attempt("dk", 0), what="first trial running", proc=proc)
    before, running = _kill_driver(chaos, reap, proc, rng.uniform(0.4 * run, 0.4 * (run + 1)))
    interrupted = set(running)
    if run == 3:
        proc = chaos.start("resume", "dk", "-q")
        reap.append(proc.pid)
        chaos.wait_for(lambda: any(t["state"] == "running" for t in chaos.trials("dk")), what="resumed",
                       proc=proc)
        again, running = _kill_driver(chaos, reap, proc, rng.uniform(0.1, 0.6))
        for number, kept in before.items():
            assert again[number] == kept
        before = again
        interrupted |= set(running)

    gate.write_text("")
    cp = chaos("resume", "dk", "-q", timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert chaos.status("dk")["sweep"]["state"] == "finished"
    _assert_exactly_once(chaos, "dk", BUDGET)
    after = _completed(chaos, "dk")
    for number, kept in before.items():      # completed before the kill: same end time, same value
        assert after[number] == kept
    assert not chaos.stray_workers()
    for number in interrupted:               # requeued: the killed attempt is recorded as interrupted
        states = [a["state"] for a in chaos.attempts(chaos.trial("dk", number)["id"])]
        assert "interrupted" in states and states[-1] == "completed", (number, states)
    events = chaos.events("interrupted")
    assert {e["trial_id"] for e in events} == {chaos.trial("dk", n)["id"] for n in interrupted}


def test_sigterm_to_the_driver_preempts_running_trials_exits_0_and_resume_finishes(chaos, reap):
    gate = chaos.tmp / "gate"   # trials wait at their last step until the resume: none ends before the SIGTERM
    body = chaos.faulty_spec("stepper", method="random",
                             params=chaos.params(x="{min: -1.0, max: 1.0}", steps=50, delay=0.02, gate=str(gate)),
                             extra="budget: {trials: 3}\ntrial: {grace: 10s}")
    proc = chaos.start("sweep", str(chaos.spec("s", body)), "--name", "term", "--workers", "2")
    reap.append(proc.pid)
    for n in (0, 1):
        att = chaos.wait_for(lambda n=n: chaos.running_attempt("term", n), what=f"trial {n} running",
                             proc=proc)
        chaos.wait_for(lambda a=att: max((c["step"] for c in chaos.checkpoints(a["trial_id"], 1)), default=-1)
                       >= 2, what="checkpoints",
                       proc=proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    assert "resume" in out + err

    st = chaos.status("term")
    assert st["sweep"]["state"] == "stopped"
    assert len(st["trials"]) == 2
    preempted = {}
    for t in chaos.trials("term"):
        assert t["state"] == "preempted", (t["number"], t["state"])
        a = chaos.attempts(t["id"])
        assert [x["state"] for x in a] == ["preempted"]
        last = chaos.steps(t["id"], 1)[-1]
        assert max(c["step"] for c in chaos.checkpoints(t["id"], 1)) == last   # checkpointed on the way out
        preempted[t["number"]] = last

    gate.write_text("")
    cp = chaos("resume", "term", "-q", timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    st = chaos.status("term")
    assert st["sweep"]["state"] == "finished" and len(st["trials"]) == 3 and not chaos.stray_workers()
    for t in chaos.trials("term"):
        assert t["state"] == "completed"
        if t["number"] in preempted:
            states = [a["state"] for a in chaos.attempts(t["id"])]
            assert states == ["preempted", "completed"]
            assert chaos.steps(t["id"], 2)[0] == preempted[t["number"]] + 1   # resumed, not restarted
        else:
            assert t["attempts"] == 1


def _sweep_with_two_trials_running(chaos, reap, name: str, *, steps: int):
    """`sweeplab sweep --name NAME` of 3 stepper trials on 2 workers, once both are running: its process. The
    trials end only once the test writes `<tmp>/gate` (a loaded run's sweep was over before the test looked)."""
    gate = chaos.tmp / "gate"
    body = chaos.faulty_spec("stepper", method="random",
                             params=chaos.params(x="{min: -1.0, max: 1.0}", steps=steps, delay=0.03, gate=str(gate)),
                             extra="budget: {trials: 3}")
    proc = chaos.start("sweep", str(chaos.spec("s", body)), "--name", name, "--workers", "2", "-q")
    reap.append(proc.pid)
    chaos.wait_for(lambda: chaos.running_attempt(name, 1), what="two trials running", proc=proc)
    return proc


def test_resume_while_the_driver_runs_is_refused_and_changes_nothing(chaos, reap):
    proc = _sweep_with_two_trials_running(chaos, reap, "twice", steps=60)
    second = chaos("resume", "twice", "-q", timeout=120)
    assert proc.poll() is None, "the first driver should still be running"
    assert second.returncode != 0 and "Traceback" not in second.stdout + second.stderr
    assert "twice" in second.stderr and str(proc.pid) in second.stderr, second.stderr   # names the driver
    (chaos.tmp / "gate").write_text("")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    _assert_exactly_once(chaos, "twice", 3)
    assert all(t["attempts"] == 1 for t in chaos.trials("twice"))
    assert not chaos.events("interrupted")
    chaos("resume", "twice", "-q", check=True)          # the first driver is gone: resume is allowed again
    assert len(chaos.trials("twice")) == 3


def test_resume_with_more_trials_runs_exactly_that_many_more(chaos):
    body = chaos.faulty_spec("stepper", method="random",
                             params=chaos.params(x="{min: -1.0, max: 1.0}", steps=2, delay=0.0),
                             extra="budget: {trials: 3}")
    chaos("sweep", str(chaos.spec("s", body)), "--name", "more", "--workers", "2", "-q", check=True)
    before = {t["number"]: tuple(t) for t in chaos.trials("more")}
    assert len(before) == 3 and chaos.status("more")["sweep"]["state"] == "finished"

    chaos("resume", "more", "--trials", "+3", "-q", check=True)
    trials = chaos.trials("more")
    assert [t["number"] for t in trials] == [0, 1, 2, 3, 4, 5]
    assert all(t["state"] == "completed" and t["attempts"] == 1 for t in trials)
    for t in trials[:3]:
        assert tuple(t) == before[t["number"]]          # the first three are untouched
    xs = [json.loads(t["params"])["x"] for t in trials]
    assert len(set(xs)) == 6, f"the searcher repeated earlier parameters: {xs}"
    assert chaos.status("more")["sweep"]["state"] == "finished"

    chaos("resume", "more", "-q", check=True)           # a finished sweep without --trials: nothing more
    assert len(chaos.trials("more")) == 6


STUBBORN = """import signal, time
def train(config, run):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # stops only when killed (after trial.grace)
    while True:
        time.sleep(0.05)
"""


@pytest.mark.parametrize("budget", ["time: 2s", "cpu_hours: 0.0005"])
def test_a_resumed_sweep_whose_budget_was_spent_starts_no_attempt(chaos, reap, budget):
    """The driver is killed while its trials outlive the stop that budget.time (or --hard cpu_hours) asked
    of them; `sweeplab resume` finds the budget spent: the sweep ends again at once, and the trials that were
    interrupted are not started again (they were, and ran until their grace ran out)."""
    (chaos.tmp / "stubborn.py").write_text(STUBBORN)
    body = (f"function: stubborn.py:train\nmethod: random\nmetric: {{name: loss, goal: minimize}}\n"
            f"parameters:\n  x: {{min: 0.0, max: 1.0}}\nbudget: {{{budget}}}\ntrial: {{grace: 40s}}\n")
    proc = chaos.start("sweep", str(chaos.spec("s", body)), "--name", "spent", "--workers", "2", "--hard", "-q")
    reap.append(proc.pid)
    chaos.wait_for(lambda: len(chaos.events("stopped")) == 2, what="both trials asked to stop", proc=proc)
    reap.extend(w.pid for w in psutil.Process(proc.pid).children(recursive=True))
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert [t["state"] for t in chaos.trials("spent")] == ["running", "running"]

    cp = chaos("resume", "spent", "-q", timeout=100)      # a restarted attempt would wait out its 40 s grace
    assert cp.returncode == 1, cp.stdout + cp.stderr      # nothing completed
    st = chaos.status("spent")["sweep"]
    assert st["state"] == "finished" and st["end_reason"].startswith(f"budget.{budget.split(':')[0]}"), st
    for t in chaos.trials("spent"):
        assert [a["number"] for a in chaos.attempts(t["id"])] == [1], t["number"]   # no new attempt
        assert t["state"] == "stopped" and t["reason"] == f"stopped: {st['end_reason']}", dict(t)
    assert not chaos.stray_workers()


def test_resume_runs_as_many_workers_as_the_sweep_ran_with(chaos, reap):
    """`sweeplab sweep --workers W` then `sweeplab resume` (no --workers): W trials at once again, not one per
    core (a resumed TPE/GP sweep asked differently, and a sweep sized for a cluster share fell back)."""
    width = (os.cpu_count() or 1) + 1   # more than one per core: the default never reaches it
    body = chaos.faulty_spec("stepper", method="random",
                             params=chaos.params(x="{min: -1.0, max: 1.0}", steps=400, delay=0.05),
                             extra=f"budget: {{trials: {2 * width}}}\ntrial: {{grace: 10s}}\nresources: {{cpus: 0}}")
    spec = chaos.spec("wide", body)

    def running() -> int:
        return len([t for t in chaos.trials("wide") if t["state"] == "running"])

    for args in (("sweep", str(spec), "--name", "wide", "--workers", str(width)), ("resume", "wide")):
        proc = chaos.start(*args)
        reap.append(proc.pid)
        chaos.wait_for(lambda: running() == width, what=f"{width} trials running ({' '.join(args[:1])})",
                       proc=proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, out + err
    assert not chaos.stray_workers()


def test_retries_and_same_failures_count_across_a_driver_kill_and_resume(chaos, reap, tmp_path):
    """trial.retries bounds a trial's failed attempts over its whole life, and "failed the same way twice"
    spans a resume: each trial fails (attempt 1), is retried (attempt 2, killed with its driver), and fails
    again after `sweeplab resume`. A resumed driver used to forget the failures before it: every resume gave
    a trial its retries anew (trial 0: 4 failed attempts with retries 2), and a repeated failure ran once more.
    Each retry restores the newest checkpoint (attempt k restores step k - 1, written by attempt k - 1)."""
    ready = tmp_path / "ready"
    ready.mkdir()
    body = chaos.faulty_spec("fails_around_a_kill", params=chaos.params(
        x=0.5, same="{values: [false, true]}", ready=str(ready)), extra="trial: {retries: 2}")
    proc = chaos.start("sweep", str(chaos.spec("rk", body)), "--name", "rk", "--workers", "2", "-q")
    reap.append(proc.pid)
    chaos.wait_for(lambda: len(list(ready.iterdir())) == 2, what="both trials waiting on attempt 2", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    cp = chaos("resume", "rk", "-q", timeout=120)
    assert cp.returncode == 1, cp.stdout + cp.stderr      # nothing completed
    different, same = chaos.trial("rk", 0), chaos.trial("rk", 1)
    states = {n: [a["state"] for a in chaos.attempts(chaos.trial("rk", n)["id"])] for n in (0, 1)}
    # retries 2: three failed attempts in all, the killed one not counted
    assert states[0] == ["failed", "interrupted", "failed", "failed"], states
    assert different["state"] == "failed" and different["reason"] == "RuntimeError: boom 4", different["reason"]
    # the second "boom" (attempt 3) is the first one's repeat: not retried
    assert states[1] == ["failed", "interrupted", "failed"], states
    assert same["state"] == "failed" and same["reason"].endswith("(failed the same way twice: not retried)")
    for n, attempts in ((0, 4), (1, 3)):
        assert [_restored(chaos, "rk", n, a) for a in range(1, attempts + 1)] == [None, *range(attempts - 1)]
    assert not chaos.stray_workers()


def _restored(chaos, sweep: str, number: int, attempt: int) -> int | None:
    got = chaos.rows("SELECT data FROM events WHERE kind='restored' AND trial_id=? AND attempt=?",
                     chaos.trial(sweep, number)["id"], attempt)
    return json.loads(got[0]["data"])["step"] if got else None


# Runs `sweeplab sweep`/`resume` (or `sl.sweep`) in a process of its own whose Driver sends itself a SIGTERM just
# after it created (or resumed) the sweep: after the local backend's start (its workers running), before
# Driver.run installs its handler.
_BETWEEN = """
import os, signal, sys
from sweeplab.driver import Driver

how, store, spec, sig = sys.argv[1:5]
for method in ("create", "resume"):
    def hit(self, *a, _orig=getattr(Driver, method), **k):
        got = _orig(self, *a, **k)
        os.kill(os.getpid(), getattr(signal, sig))
        return got
    setattr(Driver, method, hit)
if how == "api":
    import sweeplab as sl
    handle = sl.sweep(spec, store=store, workers=2, name="between")
    print("outcome", handle.state.value if hasattr(handle, "state") else handle)
else:
    args = [spec, "--name", "between"] if how == "sweep" else ["between", "--trials", "+1"]
    sys.argv = ["sweeplab", how, *args, "--store", store, "--workers", "2", "-q"]
    from sweeplab.cli import main
    main()
"""


@pytest.mark.parametrize(("how", "sig"), [("sweep", "SIGTERM"), ("resume", "SIGTERM"), ("api", "SIGTERM"),
                                          ("sweep", "SIGINT"), ("sweep", "SIGHUP")])
def test_sigterm_between_the_local_backend_s_start_and_the_driver_s_run_stops_the_sweep_resumable(
        chaos, reap, how, sig):
    """`sweeplab sweep` (and `resume`, and `sl.sweep`) start the local backend's workers before they create
    (resume) the sweep and run its driver, whose SIGTERM handler comes in `Driver.run`: a SIGTERM in between
    got the default action (the process ended by it, exit -15) and the sweep just created was left `running`
    (a Ctrl-C too: exit 130, the sweep `running`). Held until the driver's handlers are in place, it is the
    driver's stop: exit 0 (130 for Ctrl-C), sweep `stopped` and resumable, no worker left; `sweeplab resume`
    then runs the budget."""
    import subprocess
    import sys

    body = chaos.faulty_spec("stepper", method="random",
                             params=chaos.params(x="{min: -1.0, max: 1.0}", steps=2, delay=0.0),
                             extra="budget: {trials: 2}")
    spec = chaos.spec("s", body)
    if how == "resume":   # a finished sweep, extended by one trial: the SIGTERM comes as it is resumed
        chaos("sweep", str(spec), "--name", "between", "--trials", "1", "-q", check=True)
    # SIGINT at its default, as a terminal's Ctrl-C finds it (a process started ignoring it keeps ignoring it)
    proc = subprocess.Popen([sys.executable, "-c", _BETWEEN, how, str(chaos.store), str(spec), sig],
                            cwd=chaos.tmp, env=chaos.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    reap.append(proc.pid)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == {"SIGTERM": 0, "SIGINT": 130, "SIGHUP": 129}[sig], (proc.returncode, out, err)
    assert chaos.rows("SELECT state FROM sweeps")[0]["state"] == "stopped"
    assert not chaos.stray_workers()
    chaos("resume", "between", "--trials", "3", "-q", check=True)
    _assert_exactly_once(chaos, "between", 3)


def test_resume_is_refused_while_the_driver_runs_even_after_its_lock_file_was_deleted(chaos, reap):
    """The one-driver rule is an flock on <store>/locks/SWEEP.lock; another process deleting that file (a
    cleanup script, `rm -r .sweeplab/locks`) left the running driver holding a lock on a file no one else can
    open, and `sweeplab resume` took a new one: two drivers ran the sweep at once, each requeuing and running
    the other's trials (attempts refused as stale, a trial failed by one driver and completed by the other).
    The running driver, recorded in the sweep (pid and start time, on this host), refuses the second one too."""
    proc = _sweep_with_two_trials_running(chaos, reap, "unlocked", steps=40)
    for lock in (chaos.store / "locks").iterdir():
        lock.unlink()
    second = chaos("resume", "unlocked", "-q", timeout=120)
    assert proc.poll() is None, "the first driver should still be running"
    assert second.returncode == 2 and "Traceback" not in second.stderr, second.stdout + second.stderr
    assert str(proc.pid) in second.stderr, second.stderr   # names the running driver
    (chaos.tmp / "gate").write_text("")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    _assert_exactly_once(chaos, "unlocked", 3)
    assert all(t["attempts"] == 1 for t in chaos.trials("unlocked"))
    assert not chaos.events("interrupted") and not chaos.events("failure")


# on the driver's PYTHONPATH: the driver kills itself (SIGKILL) as it records the first trial of a fork
KILL_IN_FORK = """
import os, signal
import sweeplab.store.sqlite as s

_add_trial = s.Store.add_trial

def add_trial(self, sweep_id, number, *args, **kwargs):
    row = self.sweep_by_id(sweep_id)
    if row is not None and row["name"] == os.environ.get("KILL_FORK_INTO"):
        os.kill(os.getpid(), signal.SIGKILL)
    return _add_trial(self, sweep_id, number, *args, **kwargs)

s.Store.add_trial = add_trial
"""


def test_a_fork_killed_before_it_took_the_old_trials_leaves_no_half_made_sweep(chaos, tmp_path):
    """`resume OLD --spec NEW.yaml --fork NEW` committed the new sweep before it copied the old trials into it: a
    driver killed in between (or a store error there: disk full, locked) left NEW without the forked trials and
    with the new spec's budget, and `--fork NEW` again was refused ("already exists"), so the fork could only go on
    as a sweep that never learnt from OLD. Now the fork is recorded all at once: after the kill there is no NEW,
    and the same command makes it, with every completed trial of OLD that fits."""
    params = chaos.params(x="{min: -1.0, max: 1.0}", steps=2, delay=0.0)
    old = chaos.spec("old", chaos.faulty_spec("stepper", method="random", params=params,
                                              extra="budget: {trials: 4}"))
    chaos("sweep", str(old), "--name", "old", "-q", check=True)
    before = chaos.dump_sweep("old")
    wider = chaos.params(x="{min: -2.0, max: 2.0}", steps=2, delay=0.0)
    new = chaos.spec("new", chaos.faulty_spec("stepper", method="random", params=wider,
                                              extra="budget: {trials: 2}"))
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(KILL_IN_FORK)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(inject), os.environ.get("PYTHONPATH")) if p))
        mp.setenv("KILL_FORK_INTO", "forked")
        cp = chaos("resume", "old", "--spec", str(new), "--fork", "forked", "-q")
    assert cp.returncode == -signal.SIGKILL, cp.stderr
    assert chaos.integrity() == "ok" and chaos.dump_sweep("old") == before
    assert not chaos.rows("SELECT 1 FROM sweeps WHERE name='forked'")   # nothing half made

    chaos("resume", "old", "--spec", str(new), "--fork", "forked", "-q", check=True)
    trials = chaos.trials("forked")
    assert len(trials) == 4 + 2 and all(t["state"] == "completed" for t in trials), [dict(t) for t in trials]
    assert sum(1 for t in trials if str(t["reason"] or "").startswith("forked from old/")) == 4
    assert chaos.dump_sweep("old") == before


def test_a_sweep_killed_as_it_queued_its_points_to_evaluate_still_runs_them(chaos, tmp_path):
    """A new sweep was committed before its `points_to_evaluate` were queued as its first trials: a driver killed in
    between left a sweep without them, and `resume` never ran them (the searcher's suggestions took their place).
    Now the sweep and its points are recorded together: after such a kill there is no sweep, or one with them."""
    params = chaos.params(x="{min: -1.0, max: 1.0}", steps=2, delay=0.0)
    body = chaos.faulty_spec("stepper", method="random", params=params,
                             extra="budget: {trials: 3}\npoints_to_evaluate: [{x: 0.25}]")
    spec = chaos.spec("pts", body)
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(KILL_IN_FORK)   # kills the driver at the sweep's first trial
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(inject), os.environ.get("PYTHONPATH")) if p))
        mp.setenv("KILL_FORK_INTO", "pts")
        cp = chaos("sweep", str(spec), "--name", "pts", "-q")
    assert cp.returncode == -signal.SIGKILL, cp.stderr
    assert chaos.integrity() == "ok"
    if chaos.rows("SELECT 1 FROM sweeps WHERE name='pts'"):
        chaos("resume", "pts", "-q", check=True)
    else:
        chaos("sweep", str(spec), "--name", "pts", "-q", check=True)
    trials = chaos.trials("pts")
    assert len(trials) == 3 and all(t["state"] == "completed" for t in trials), [dict(t) for t in trials]
    assert json.loads(trials[0]["params"])["x"] == 0.25, [t["params"] for t in trials]


def _interrupted_in_its_first_moments(chaos, proc) -> int:
    """Kill the driver -9 while a trial's attempt is recorded as started after the driver last saved its spend
    (`saved_at`): the moments between a submission and the driver's next turn. The store's write lock, taken
    from here, holds the driver still while that is checked. Returns the trial's number."""
    import sqlite3

    while proc.poll() is None:
        if not chaos.rows("SELECT 1 FROM attempts"):   # the store and the first attempt are not there yet
            time.sleep(0.01)
            continue
        conn = sqlite3.connect(str(chaos.db_path), timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")   # the driver writes nothing more until the kill
            spend = conn.execute("SELECT spend FROM sweeps").fetchone()
            saved_at = (json.loads(spend[0]) if spend and spend[0] else {}).get("saved_at")
            row = conn.execute("SELECT t.number, a.started FROM attempts a JOIN trials t ON t.id = a.trial_id "
                               "WHERE a.ended IS NULL ORDER BY a.started DESC LIMIT 1").fetchone()
            if saved_at is not None and row is not None and row[1] > saved_at:
                os.kill(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=30)
                return int(row[0])
        finally:
            conn.close()
        time.sleep(0.002)
    raise AssertionError("the sweep ended before the driver could be killed in a trial's first moments")


def test_an_attempt_begun_just_before_a_driver_kill_does_not_count_the_downtime_to_trial_timeout(chaos, reap):
    """The driver records the spend (and when it last knew its attempts alive) every turn; an attempt it started
    after that was ended at the resume's time, so the hours the machine was down counted as the trial's run time
    and a `trial.timeout` failed it at once, unrun ("trial.timeout exceeded")."""
    body = chaos.faulty_spec("stepper", params=chaos.params(x="{values: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]}",
                                                            steps=2, delay=0.02),
                             extra="trial: {timeout: 3s, retries: 0}")
    proc = chaos.start("sweep", str(chaos.spec("dt", body)), "--name", "dt", "-q", "--workers", "1")
    reap.append(proc.pid)
    number = _interrupted_in_its_first_moments(chaos, proc)
    chaos.wait_for(lambda: not chaos.stray_workers(), what="the workers end with their driver")
    time.sleep(3.5)   # the machine is down for longer than trial.timeout
    cp = chaos("resume", "dt", "-q")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    t = chaos.trial("dt", number)
    assert t["state"] == "completed", t["reason"]
    first = chaos.attempts(t["id"])[0]
    assert first["state"] == "interrupted" and first["ended"] - first["started"] < 3.0


def test_stop_while_a_resume_replays_the_sweep_s_history_stops_it(chaos, reap):
    """`sweeplab stop` while `sweeplab resume` replays a long history (a model-based searcher told thousands of
    trials) found the killed driver's pid in the store ("its driver is gone; `sweeplab resume` continues"),
    exit 2, and the resume then ran on: the resuming process is recorded as the driver as it takes the sweep."""
    from sweeplab.store import Store

    body = chaos.faulty_spec("stepper", params=chaos.params(x="{min: 0.0, max: 1.0}", steps=1, delay=0.0),
                             method="tpe", extra="budget: {trials: 1}")
    chaos("sweep", str(chaos.spec("rp", body)), "--name", "rp", "-q", "--workers", "1", check=True)
    st = Store.open(chaos.store)
    try:
        with st.transaction():   # a long history, as thousands of trials leave it
            sweep_id = int(st.sweep_row("rp")["id"])
            for n in range(1, 3001):
                x = n / 3001
                tid = st.add_trial(sweep_id, n, {"x": x, "steps": 1, "delay": 0.0}, {"x": x, "steps": 1,
                                   "delay": 0.0}, n, state="completed", attempts=1)
                st.update_trial(tid, value=(x - 0.3) ** 2, metrics={"loss": (x - 0.3) ** 2})
    finally:
        st.close()
    proc = chaos.start("resume", "rp", "-q", "--trials", "+2")
    reap.append(proc.pid)
    chaos.wait_for(lambda: chaos.events("sweep_resumed"), interval=0.005, what="the resume took the sweep",
                   proc=proc)
    os.kill(proc.pid, signal.SIGSTOP)   # held where it is: in its replay, unless a starved test came late
    try:
        before = len(chaos.trials("rp"))   # 3001 when it was held in its replay (a loaded run: maybe past it)
        cp = chaos("stop", "rp")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert proc.returncode == 0, out + err
    assert chaos.rows("SELECT state FROM sweeps WHERE name='rp'")[0][0] == "stopped"
    assert len(chaos.trials("rp")) == before   # no trial created once it was asked to stop
