"""A resumed sweep keeps the config its trials ran with (docs/config.md): a changed base config or profile,
by `sweeplab resume --spec` or by editing the files, would give the new trials another config than the old
ones while the sweep compares them as one search. Real processes: the promise is about the command line."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.test_config_overrides import cli, one_line_error

TRIALS = Path(__file__).resolve().parent / "fixtures" / "trials.py"
SPEC = (f"name: s\nfunction: {TRIALS}:quick\nmethod: random\nmetric: {{name: loss, goal: minimize}}\n"
        "config: config/base.yaml\nprofile: local\nbudget: {trials: 1}\nparameters:\n  x: {values: [1.0]}\n")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A finished one-trial sweep `s` with a base config and the profile `local`."""
    tmp = tmp_path_factory.mktemp("resume-config")
    for name, text in {"config/base.yaml": "steps: 2\nmodel: {hidden: 64}\n",
                       "profiles/local.yaml": "data_dir: ./data\n", "profiles/cluster.yaml": "data_dir: /scratch\n",
                       "s.yaml": SPEC, "cluster.yaml": SPEC.replace("profile: local", "profile: cluster"),
                       "other.yaml": SPEC.replace("config/base.yaml", "config/other.yaml"),
                       "config/other.yaml": "steps: 2\nmodel: {hidden: 8}\n"}.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)
    done = cli(tmp, "sweep", "s.yaml", "-q", "--workers", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp


def _trials(tmp: Path) -> list[dict]:
    return json.loads(cli(tmp, "status", "s", "--json").stdout)["trials"]


@pytest.mark.parametrize(("args", "fragment"), [
    (["--spec", "cluster.yaml"], "data_dir was './data', now '/scratch'"),
    (["--spec", "other.yaml"], "model.hidden was 64, now 8"),
], ids=["profile", "config"])
def test_resume_with_a_spec_of_another_config_or_profile_is_refused(sweep, args, fragment):
    before = (sweep / "store" / "store.db").read_bytes()
    line = one_line_error(cli(sweep, "resume", "s", "--trials", "+1", *args))
    assert fragment in line and "--fork" in line, line
    assert (sweep / "store" / "store.db").read_bytes() == before
    assert len(_trials(sweep)) == 1


def test_resume_after_the_config_file_was_edited_is_refused_and_runs_once_restored(sweep):
    base = sweep / "config" / "base.yaml"
    text = base.read_text()
    base.write_text(text.replace("hidden: 64", "hidden: 128"))
    try:
        line = one_line_error(cli(sweep, "resume", "s", "--trials", "+1"))
        assert "model.hidden was 64, now 128" in line and "config/base.yaml" in line, line
        assert len(_trials(sweep)) == 1
    finally:
        base.write_text(text)
    done = cli(sweep, "resume", "s", "--trials", "+1", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(f"file:{sweep / 'store' / 'store.db'}?mode=ro", uri=True) as db:
        configs = [json.loads(c) for (c,) in db.execute("SELECT config FROM trials ORDER BY number")]
    assert len(configs) == 2 and configs[0] == configs[1], configs


def test_a_fork_may_take_another_profile(sweep):
    done = cli(sweep, "resume", "s", "--spec", "cluster.yaml", "--fork", "s-cluster", "--trials", "1", "-q")
    assert done.returncode == 0, done.stdout + done.stderr


def test_resume_with_overrides_says_a_resumed_sweep_keeps_its_own(sweep):
    line = one_line_error(cli(sweep, "resume", "s", "steps=5"))
    assert "unexpected extra argument(s) (steps=5)" in line and "keeps the overrides it was started with" in line


@pytest.mark.parametrize(("change", "key"), [
    ("constraints: [{metric: loss, max: 0.1}]\n", "constraints"),
    ("seed: 12345\n", "seed"),
    ("target", "metric"),
], ids=["constraints", "seed", "target"])
def test_resume_with_a_spec_that_changes_what_judges_the_trials_is_refused(sweep, change, key):
    # silently taken (constraints: stored trials' feasibility not recomputed) or silently ignored (seed)
    changed = (SPEC.replace("goal: minimize}", "goal: minimize, target: 0.1}") if change == "target"
               else SPEC + change)
    (sweep / "changed.yaml").write_text(changed)
    line = one_line_error(cli(sweep, "resume", "s", "--spec", "changed.yaml", "--trials", "+1"))
    assert f"changed.yaml: {key}: differs from sweep 's'" in line, line


def test_resume_with_another_second_objective_is_refused(sweep):
    two = SPEC.replace("metric: {name: loss, goal: minimize}", "metric: [{name: loss}, {name: x, goal: maximize}]")
    (sweep / "two.yaml").write_text(two)
    line = one_line_error(cli(sweep, "resume", "s", "--spec", "two.yaml", "--trials", "+1"))
    assert "two.yaml: metric: differs from sweep 's'" in line, line


def test_a_fork_whose_spec_searches_a_key_the_sweep_overrode_is_refused(tmp_path):
    # the fork keeps the sweep's overrides: `steps=2` won over the sampled steps while the store recorded them
    (tmp_path / "base.yaml").write_text("steps: 3\nx: 1.0\n")
    head = f"function: {TRIALS}:quick\nmethod: grid\nmetric: {{name: loss}}\nconfig: base.yaml\n"
    (tmp_path / "a.yaml").write_text(head + "parameters: {x: {values: [1.0]}}\n")
    (tmp_path / "b.yaml").write_text(head + "parameters: {x: {values: [1.0]}, steps: {values: [4, 5]}}\n")
    done = cli(tmp_path, "sweep", "a.yaml", "--name", "a", "steps=2", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    before = (tmp_path / "store" / "store.db").read_bytes()
    line = one_line_error(cli(tmp_path, "resume", "a", "--spec", "b.yaml", "--fork", "b"))
    assert "override 'steps=2' sets the sweep parameter 'steps'" in line and "a fork keeps" in line, line
    # a command trial never sees the config: the kept override would be silently ignored
    (tmp_path / "c.yaml").write_text("command: [python3, -c, 'print(1)']\nmethod: grid\nmetric: {name: loss}\n"
                                     "parameters: {x: {values: [1.0]}}\n")
    line = one_line_error(cli(tmp_path, "resume", "a", "--spec", "c.yaml", "--fork", "c"))
    assert "override 'steps=2' would be ignored: a command trial gets" in line, line
    assert (tmp_path / "store" / "store.db").read_bytes() == before
