"""TaskBuilder: a trial's config, import path, function target and decision steps (no processes)."""

from __future__ import annotations

from sweeplab.driver.records import TrialRecord
from sweeplab.driver.tasks import TaskBuilder, heartbeat_interval
from sweeplab.schedulers import make_scheduler
from sweeplab.spec import TrialPolicy, parse_spec
from sweeplab.types import Goal


def builder(tmp_path, *, overrides=(), function="train.py:main", workers=1):
    spec_file = tmp_path / "spec" / "sweep.yaml"
    spec_file.parent.mkdir()
    spec = parse_spec({"function": function, "method": "grid", "metric": {"name": "loss"},
                       "resources": {"workers": workers},
                       "parameters": {"opt.lr": {"values": [0.1]}}}, file=str(spec_file))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return TaskBuilder(spec, sweep="s", root=str(tmp_path / "store"), cwd=str(cwd), overrides=overrides,
                       smoke=False), spec_file.parent, cwd


def test_sampled_params_nest_and_overrides_win(tmp_path):
    b, _, _ = builder(tmp_path, overrides=["opt.lr=0.5", "epochs=3"])
    assert b.resolve_config({"opt.lr": 0.1, "opt.wd": 0.0}) == {"opt": {"lr": 0.5, "wd": 0.0}, "epochs": 3}


def test_imports_come_from_the_working_directory_then_the_spec_directory(tmp_path):
    b, spec_dir, cwd = builder(tmp_path)
    assert b.import_path() == [str(cwd), str(spec_dir.resolve())]


def test_a_function_file_is_found_beside_the_spec_before_the_working_directory(tmp_path):
    b, spec_dir, cwd = builder(tmp_path)
    assert b.function_target() == "train.py:main"                    # nowhere: left as given
    (cwd / "train.py").write_text("")
    assert b.function_target() == f"{cwd / 'train.py'}:main"
    (spec_dir / "train.py").write_text("")
    assert b.function_target() == f"{spec_dir.resolve() / 'train.py'}:main"


def test_decision_steps_for_function_trials_on_a_backend_that_answers(tmp_path):
    asha = make_scheduler({"type": "asha", "min_iter": 1, "max_iter": 9, "eta": 3}, goal=Goal.MINIMIZE,
                          file=None, metric="val")
    t = TrialRecord(id=1, number=0, params={}, config={}, seed=0)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one, _, _ = builder(tmp_path / "one")
    assert one.decisions(t, asha, "val", supported=True) == {"decision_steps": [1, 3], "decision_metric": "val"}
    assert one.decisions(t, asha, "val", supported=False) == {}
    assert one.decisions(t, None, "val", supported=True) == {}
    two, _, _ = builder(tmp_path / "two", workers=2)   # multi-process: rank 0 waits, its supervisor relays
    assert two.decisions(t, asha, "val", supported=True) == {"decision_steps": [1, 3], "decision_metric": "val"}


def test_heartbeats_are_frequent_enough_for_the_heartbeat_timeout():
    assert heartbeat_interval(TrialPolicy(heartbeat_timeout=None)) == 5.0
    assert heartbeat_interval(TrialPolicy(heartbeat_timeout=60.0)) == 5.0
    assert heartbeat_interval(TrialPolicy(heartbeat_timeout=2.0)) == 0.5
    assert heartbeat_interval(TrialPolicy(heartbeat_timeout=0.01)) == 0.05
