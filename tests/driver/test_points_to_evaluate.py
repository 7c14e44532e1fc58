"""`points_to_evaluate`: the configurations a sweep runs first (Ray Tune's points_to_evaluate, Optuna's
enqueue_trial), completed from the base config, counted in the budget, learned by the searcher, and the same
after a resume as in a sweep never interrupted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sweeplab.errors import SpecError
from sweeplab.spec import parse_spec
from sweeplab.testing.fake import Script
from sweeplab.types import TrialState

DONE = Script().reports("loss", [0.5], every=10.0).finish()
SPACE = {"x": {"min": 0.0, "max": 1.0}, "model": {"parameters": {"width": {"values": [16, 32, 64]}}}}


class DriverKilled(BaseException):
    """Raised from the backend's poll: the driver dies where it stands, as kill -9 leaves the store."""


def _crash() -> None:
    raise DriverKilled


def _base(tmp: Path) -> str:
    path = tmp / "base.yaml"
    path.write_text("x: 0.75\nmodel: {width: 32, depth: 2}\n")
    return str(path)


def _params(sim, name: str = "s") -> list[dict]:
    return [json.loads(t["params"]) for t in sim.trials(name)]


def test_points_run_first_in_their_order_completed_from_the_base_config(sim):
    driver, backend = sim.make(DONE, slots=2, method="tpe", parameters=SPACE, config=_base(sim.tmp),
                               budget={"trials": 5},
                               points_to_evaluate=[{}, {"x": 0.1}, {"model": {"width": 64}, "x": 0}])
    driver.create(spec_path=None)
    assert sim.states() == ["queued"] * 3   # created with the sweep, before anything runs
    out = driver.run()
    assert out.counts["completed"] == 5
    submitted = [c.number for c in backend.calls_to("submit")]
    assert submitted[:3] == [0, 1, 2]
    assert _params(sim)[:3] == [{"x": 0.75, "model.width": 32}, {"x": 0.1, "model.width": 32},
                                {"x": 0.0, "model.width": 64}]   # x: 0 reaches the trial as the float a draw is
    assert json.loads(sim.trial(2)["config"]) == {"x": 0.0, "model": {"width": 64, "depth": 2}}
    # the searcher saw them as trials created before it (as a resume replays), then learnt each result
    assert sim.replayed[0] == [(0, TrialState.QUEUED), (1, TrialState.QUEUED), (2, TrialState.QUEUED)]
    assert sorted(t.number for t in sim.tells) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("method", ["random", "sobol", "tpe", "bayes", "nsga2"])
def test_a_sweep_with_points_resumed_after_its_driver_died_asks_what_an_uninterrupted_one_asks(sim, method):
    kw = dict(slots=2, method=method, parameters=SPACE, config=_base(sim.tmp), budget={"trials": 6},
              points_to_evaluate=[{"x": 0.2}, {"x": 0.9, "model.width": 16}, {}])
    sim.run(DONE, name="whole", **kw)
    driver, backend = sim.make(DONE, name="cut", **kw)
    driver.create(spec_path=None)
    backend.at(5.0, _crash)   # trials 0 and 1 running, trial 2 still queued
    with pytest.raises(DriverKilled):
        driver.run()
    assert sim.states("cut") == ["running", "running", "queued"]
    out = sim.resume(DONE, name="cut", **kw)
    assert out.counts["completed"] == 6
    assert _params(sim, "cut") == _params(sim, "whole")
    assert _params(sim, "cut")[:3] == [{"x": 0.2, "model.width": 32}, {"x": 0.9, "model.width": 16},
                                       {"x": 0.75, "model.width": 32}]


def test_a_smaller_trial_budget_runs_the_first_points(sim, tmp_path):
    import dataclasses

    from sweeplab.driver import Driver
    from sweeplab.testing.fake import FakeBackend

    spec = sim.spec(budget={"trials": 3}, points_to_evaluate=[{"x": 0.1}, {"x": 0.2}, {"x": 0.3}])
    spec = spec.with_overrides(budget=dataclasses.replace(spec.budget, trials=2))   # `--trials 2`, --smoke
    backend = FakeBackend(sim.clock, DONE, slots=1)
    driver = Driver(spec, sim.store, backend, sweep_name="s", clock=sim.clock, cwd=str(tmp_path))
    sim.driver = driver
    driver.create(spec_path=None)
    driver.run()
    assert _params(sim) == [{"x": 0.1}, {"x": 0.2}]


def test_a_fork_runs_the_points_after_the_trials_it_takes_and_counts_them_in_its_budget(sim):
    sim.run(DONE, budget={"trials": 2})
    driver, backend = sim.make(DONE, name="f", budget={"trials": 3}, points_to_evaluate=[{"x": 0.5}])
    assert driver.fork("s", spec_path=None) == 2
    driver.run()
    rows = sim.trials("f")
    assert [(r["number"], r["state"]) for r in rows] == [(0, "completed"), (1, "completed"), (2, "completed"),
                                                         (3, "completed"), (4, "completed")]
    assert json.loads(rows[2]["params"]) == {"x": 0.5}   # the first trial the fork runs
    assert [c.number for c in backend.calls_to("submit")] == [2, 3, 4]


COND = {"opt": {"values": ["adam", "sgd"], "when": {"sgd": {"momentum": {"min": 0.0, "max": 0.99}}}}}


@pytest.mark.parametrize(("points", "extra", "where", "what"), [
    ([{"y": 1}], {}, "points_to_evaluate[0].y", "not a parameter of the sweep"),
    ([{"x": 1.5}], {}, "points_to_evaluate[0].x", "outside the parameter's distribution"),
    ([{"x": "a"}], {}, "points_to_evaluate[0].x", "outside the parameter's distribution"),
    ([{}, {"model": {"width": 8}}], {"parameters": SPACE}, "points_to_evaluate[1].model.width", "outside"),
    ({"x": 0.5}, {}, "points_to_evaluate", "must be a list of mappings"),
    ([0.5], {}, "points_to_evaluate[0]", "a point must be a mapping"),
    ([{"x": 0.1}] * 5, {}, "points_to_evaluate", "5 points but budget.trials is 4"),
    ([{"x": 0.1}], {"method": "grid", "parameters": {"x": {"values": [0.1, 0.2]}}}, "points_to_evaluate",
     "grid tries every combination"),
], ids=["unknown", "out-of-range", "wrong-type", "nested-out-of-range", "not-a-list", "not-a-mapping",
        "over-budget", "grid"])
def test_a_bad_point_is_a_spec_error_naming_it(sim, points, extra, where, what):
    with pytest.raises(SpecError) as err:
        sim.spec(points_to_evaluate=points, **extra)
    assert err.value.key == where and what in str(err.value)


@pytest.mark.parametrize(("points", "where", "what"), [
    ([{"x": 0.5}], "points_to_evaluate[0].model.width", "the base config has no key model.width"),
    ([{"model.width": 16}, {"model.width": 32}], "points_to_evaluate[0].x", "outside the parameter's"),
], ids=["missing", "base-out-of-range"])
def test_a_point_the_base_config_cannot_complete_stops_the_sweep_before_it_exists(sim, points, where, what):
    base = sim.tmp / "small.yaml"
    base.write_text("x: 3.0\n")
    driver, _ = sim.make(DONE, parameters=SPACE, config=str(base), points_to_evaluate=points)
    with pytest.raises(SpecError) as err:
        driver.create(spec_path=None)
    assert err.value.key == where and what in str(err.value)
    assert sim.rows("SELECT * FROM sweeps") == []


def test_points_in_a_conditional_space_give_only_active_parameters(sim):
    spec = sim.spec(parameters=COND, points_to_evaluate=[{"opt": "sgd", "momentum": 0.9}, {"opt": "adam"}])
    assert spec.points == ({"opt": "sgd", "momentum": 0.9}, {"opt": "adam"})
    driver, _ = sim.make(DONE, parameters=COND, points_to_evaluate=[{"opt": "adam", "momentum": 0.9}])
    with pytest.raises(SpecError, match="conditions leave out") as err:
        driver.create(spec_path=None)
    assert err.value.key == "points_to_evaluate[0].momentum" and "if opt in ['sgd']" in str(err.value)


def test_the_stored_spec_keeps_the_points():
    spec = parse_spec({"method": "random", "function": "m:f", "parameters": {"x": {"min": 0.0, "max": 1.0}},
                       "points_to_evaluate": [{"x": 0.5}]}, file="<test>")
    again = parse_spec(spec.to_jsonable(), file="<stored>")
    assert again.points == spec.points == ({"x": 0.5},)


def test_dry_run_lists_the_points_as_the_first_trials_will_run_them(tmp_path):
    (tmp_path / "train.py").write_text("def train(config, run):\n    return {'loss': config['x']}\n")
    (tmp_path / "base.yaml").write_text("x: 0.25\nwidth: 32\n")
    spec = {"function": "train.py:train", "config": "base.yaml", "method": "tpe",
            "metric": {"name": "loss", "goal": "minimize"},
            "parameters": {"x": {"min": 0.0, "max": 1.0}, "width": {"values": [16, 32]}},
            "points_to_evaluate": [{}, {"width": 16}]}
    (tmp_path / "sweep.yaml").write_text(json.dumps(spec))
    out = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--dry-run"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "trial 0: x=0.25, width=32" in out.stdout and "trial 1: x=0.25, width=16" in out.stdout
    spec["points_to_evaluate"] = [{"x": 0.5, "depth": 3}]
    (tmp_path / "sweep.yaml").write_text(json.dumps(spec))
    out = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--dry-run"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "points_to_evaluate[0].depth: not a parameter of the sweep" in out.stderr


def test_points_killed_with_their_driver_run_on_resume_and_the_searcher_goes_on_after_them(tmp_path):
    """Real processes: the driver and its workers are killed (SIGKILL to the group) while the first point runs
    and the others wait; `sweeplab resume` runs the points, completes the sweep, and never reruns trial 0."""
    import os
    import signal
    import time

    (tmp_path / "train.py").write_text(
        "import os, time\n"
        "def train(config, run):\n"
        "    if config['x'] == 0.5 and not os.path.exists('resumed'):\n"
        "        open('started', 'w').close()\n"
        "        time.sleep(600)\n"
        "    return {'loss': config['x']}\n")
    (tmp_path / "sweep.yaml").write_text(json.dumps({
        "name": "p", "function": "train.py:train", "method": "tpe", "seed": 3, "workers": 1,
        "metric": {"name": "loss", "goal": "minimize"}, "budget": {"trials": 4},
        "parameters": {"x": {"min": 0.0, "max": 1.0}},
        "points_to_evaluate": [{"x": 0.5}, {"x": 0.25}]}))
    env = {**os.environ, "SWEEPLAB_STORE": str(tmp_path / "store")}
    proc = subprocess.Popen([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "-q"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "trial 0 never started"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    (tmp_path / "resumed").touch()
    out = subprocess.run([sys.executable, "-m", "sweeplab", "resume", "p", "-q"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    status = subprocess.run([sys.executable, "-m", "sweeplab", "status", "p", "--json"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    trials = json.loads(status.stdout)["trials"]
    assert [t["state"] for t in trials] == ["completed"] * 4
    assert [t["params"] for t in trials[:2]] == [{"x": 0.5}, {"x": 0.25}]
    assert [t["attempts"] for t in trials[:2]] == [2, 1]   # trial 0 ran again (killed), trial 1 once, after it


def test_a_point_value_reaches_the_trial_typed_as_the_searchers_draws_are():
    params = {"n": {"min": 1, "max": 4}, "c": {"values": [[1, 2], 2]}, "lr": {"min": 0.0, "max": 1.0},
              "q": {"distribution": "q_uniform", "min": 0, "max": 10, "q": 2}}
    spec = parse_spec({"method": "random", "function": "m:f", "parameters": params,
                       "points_to_evaluate": [{"n": 2.0, "c": 2.0, "lr": 1, "q": 4.0}, {"c": [1, 2]}]}, file="<t>")
    assert spec.points == ({"n": 2, "c": 2, "lr": 1.0, "q": 4}, {"c": [1, 2]})
    assert [type(v) for v in spec.points[0].values()] == [int, int, float, int]


def test_a_point_the_base_config_cannot_complete_is_refused_before_the_store_is_opened(tmp_path):
    import sweeplab as sl

    (tmp_path / "base.yaml").write_text("x: 0.5\n")
    spec = {"function": "train.py:train", "config": str(tmp_path / "base.yaml"), "method": "random",
            "parameters": {"x": {"min": 0.0, "max": 1.0}, "width": {"values": [16, 32]}},
            "points_to_evaluate": [{"width": 16}, {}]}
    with pytest.raises(SpecError, match=r"points_to_evaluate\[1\]\.width: no value for this parameter"):
        sl.sweep(spec, fn=lambda config, run: 0.0, store=tmp_path / "store")
    assert not (tmp_path / "store").exists()
    (tmp_path / "train.py").write_text("def train(config, run):\n    return {'loss': 0.0}\n")
    (tmp_path / "sweep.yaml").write_text(json.dumps(spec))
    out = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", "cli-store"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "points_to_evaluate[1].width" in out.stderr
    assert not (tmp_path / "cli-store").exists()
