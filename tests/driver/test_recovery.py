"""Recovery: create / resume rebuild the driver's state from a real SQLite store (no backend is started)."""

from __future__ import annotations

import pytest

from sweeplab._clock import FakeClock
from sweeplab.backends.local import LocalBackend, plan_slots
from sweeplab.driver import Driver
from sweeplab.errors import UserError
from sweeplab.spec import parse_spec
from sweeplab.store import Store
from sweeplab.types import TrialState

RAW = {"function": "train.py:main", "method": "grid", "seed": 3, "metric": {"name": "loss", "goal": "minimize"},
       "early_terminate": {"type": "asha", "min_iter": 1, "max_iter": 9, "eta": 3},
       "parameters": {"x": {"values": [1, 2, 3, 4]}}}


def driver(store: Store, clock: FakeClock, **raw) -> Driver:
    spec = parse_spec({**RAW, **raw}, file="<test>")
    return Driver(spec, store, LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[])), sweep_name="r",
                  clock=clock, cwd=str(store.root.parent))


def release(d: Driver) -> None:
    """Let another driver of this process take the sweep (the lock is held for a driver's life)."""
    assert d._lock_file is not None
    d._lock_file.close()
    d._lock_file = None


@pytest.fixture
def crashed(tmp_path):
    """A sweep whose driver died with trial 0 completed (reports 1, 3) and trial 1 running."""
    clock = FakeClock()
    store = Store.open(tmp_path / "store")
    first = driver(store, clock)
    first.create(spec_path=None)
    with store.transaction():
        done = store.add_trial(first.sweep_id, 0, {"x": 1}, {"x": 1}, 1, state="running", started=clock.time(),
                               attempts=1)
        store.add_attempt(done, 1, started=clock.time())
        store.add_metrics(done, 1, [(1, "loss", 0.5, clock.time()), (3, "loss", 0.25, clock.time() + 1)])
        store.update_trial(done, state="completed", value=0.25, ended=clock.time() + 2)
        store.update_attempt(done, 1, state="completed", ended=clock.time() + 2)
        run = store.add_trial(first.sweep_id, 1, {"x": 2}, {"x": 2}, 2, state="running", started=clock.time(),
                              attempts=1)
        store.add_attempt(run, 1, started=clock.time())
    release(first)
    yield store, clock
    store.close()


def test_resume_requeues_the_running_trial_as_interrupted_and_keeps_the_completed_one(crashed):
    store, clock = crashed
    d = driver(store, clock)
    d.resume()
    states = {r["number"]: r["state"] for r in store.trial_rows(d.sweep_id)}
    assert states == {0: TrialState.COMPLETED.value, 1: TrialState.INTERRUPTED.value}
    assert [t.number for t in d.requeue] == [1]
    assert d._best is not None and d._best[:2] == (0.25, 0)
    assert d.by_number[0].intermediate == {1: 0.5, 3: 0.25}


def test_resume_replays_the_searcher_past_the_trials_it_made(crashed):
    store, clock = crashed
    d = driver(store, clock)
    d.resume()
    assert d.searcher is not None
    assert d.searcher.ask() == {"x": 3}          # grid: trials 0 and 1 took x=1 and x=2


def test_resume_replays_the_scheduler_with_the_stored_reports(crashed):
    from sweeplab.schedulers import make_scheduler
    from sweeplab.types import Goal

    store, clock = crashed
    d = driver(store, clock)
    d.resume()
    assert d.scheduler is not None

    def fresh():
        return make_scheduler(RAW["early_terminate"], goal=Goal.MINIMIZE, metric="loss")

    uninterrupted = fresh()   # what the dead driver's scheduler had seen
    uninterrupted.on_report(0, 1, 0.5)
    uninterrupted.on_report(0, 3, 0.25)
    uninterrupted.on_trial_end(0, TrialState.COMPLETED)
    empty = fresh()
    probes = [(5, 1, 0.9), (6, 1, 0.95), (7, 1, 0.99), (5, 3, 0.8)]
    replayed = [d.scheduler.on_report(*p).decision for p in probes]
    assert replayed == [uninterrupted.on_report(*p).decision for p in probes]
    assert replayed != [empty.on_report(*p).decision for p in probes]   # the replay changed what it decides


def test_resume_restores_the_spend_and_extends_the_trial_budget(crashed):
    store, clock = crashed
    with store.transaction():
        store.update_sweep(store.sweep_row("r")["id"], spend={"seconds": 40.0, "cpu_seconds": 7.0})
    d = driver(store, clock, budget={"time": 50.0})
    d.resume(extra_trials=2)
    assert d.max_trials == 4
    assert d.budget.spend["cpu_seconds"] == 7.0
    clock.advance(10.0)
    assert d.watchdog.time_up(ending=False) == "budget.time 50s reached"


def test_create_refuses_a_name_that_exists(crashed):
    store, clock = crashed
    with pytest.raises(UserError, match="already exists"):
        driver(store, clock).create(spec_path=None)
