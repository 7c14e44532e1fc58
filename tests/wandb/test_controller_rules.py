"""Controller rules as W&B's controller applies them (wandb/sweeps: hyperband_stopping.py, grid_search.py),
and the spec problems W&B only warns about."""

from __future__ import annotations

import pytest

from sweeplab.errors import SpecError
from sweeplab.schedulers.hyperband import HyperbandScheduler
from sweeplab.space import parse_parameters
from sweeplab.spec import parse_spec

# The cases below are what W&B's controller decides today: wandb/sweeps, hyperband_stopping.py,
# hyperband_stop_runs (since "Hyperband now correctly stops more runs", wandb/sweeps#99): band b is the
# b-th report of the metric (`h[band - 1]`, `band <= len(history)`); with min_iter the bands go on
# (`s` only counts bands below max_iter). The sweeps 0.2.0 wheel on PyPI predates that fix (`h[band]`).


def test_hyperband_judges_band_b_at_the_b_th_report_as_wandb() -> None:
    # a finished with 10, 9; b's first report is 11: band 1 is that first report, the threshold (top
    # 1/3 of [10, 11]) is 10, and W&B stops b there, not one report later
    sched = HyperbandScheduler(min_iter=1, eta=3)
    sched.on_report(0, 0, 10.0)
    sched.on_report(0, 1, 9.0)
    v = sched.on_report(1, 0, 11.0)
    assert v.stops and v.data["band"] == 1


def test_hyperband_docstring_case_of_wandbs_controller() -> None:
    # the runs in hyperband_stop_runs' docstring (max_iter 5, eta 2, s 2: bands 1 and 2); W&B stops b only
    # (band 2 is the 2nd report: threshold 8 of [9, 6, 10, 7, 8]; c's 8 is not worse)
    sched = HyperbandScheduler(max_iter=5, s=2, eta=2)
    histories = {0: [10, 9], 4: [10, 6, 6], 1: [10, 10], 3: [10, 7, 7], 2: [10, 8, 8]}   # a, e, b, d, c
    for trial in (0, 4):
        for step, value in enumerate(histories[trial]):
            sched.on_report(trial, step, value)
    stopped = set()
    for step in range(3):
        for trial in (1, 3, 2):
            if step < len(histories[trial]) and trial not in stopped \
                    and sched.on_report(trial, step, histories[trial][step]).stops:
                stopped.add(trial)
    assert stopped == {1}


def test_hyperband_with_min_iter_and_s_keeps_judging_as_wandb() -> None:
    # min_iter 1, eta 2, s 1: W&B's bands are 1, 2, 4, ... (s is ignored beside min_iter); b is worse than
    # the top half at band 2 (threshold 6 of [5, 6, 9]) and W&B stops it at its 2nd report
    sched = HyperbandScheduler(min_iter=1, eta=2, s=1)
    for trial, history in ((0, [10, 5, 4]), (2, [10, 6, 5])):
        for step, value in enumerate(history):
            sched.on_report(trial, step, value)
    assert not sched.on_report(1, 0, 10.0).stops
    v = sched.on_report(1, 1, 9.0)
    assert v.stops and v.data["band"] == 2


def test_grid_over_q_uniform_leaves_max_out_as_wandb() -> None:
    space = parse_parameters({"x": {"distribution": "q_uniform", "min": 0, "max": 10, "q": 2}})
    assert [p["x"] for p in space.grid()] == [0, 2, 4, 6, 8]


BASE = {"method": "random", "program": "train.py", "metric": {"name": "loss", "goal": "minimize"},
        "parameters": {"lr": {"min": 0.1, "max": 1.0}}}


def test_unknown_top_level_key_is_a_warning_with_did_you_mean() -> None:
    spec = parse_spec({**BASE, "earlyterminate": {"type": "hyperband"}}, file="sweep.yaml")
    assert len(spec.warnings) == 1 and "did you mean 'early_terminate'?" in spec.warnings[0]
    assert "sweep.yaml: earlyterminate" in spec.warnings[0]


def test_extra_early_terminate_keys_are_dropped_with_a_warning() -> None:
    raw = {**BASE, "early_terminate": {"type": "hyperband", "min_iter": 1, "et": 3}}
    spec = parse_spec(raw, file="sweep.yaml")
    assert spec.early_terminate == {"type": "hyperband", "min_iter": 1}
    assert "early_terminate.et" in spec.warnings[0] and "did you mean 'eta'?" in spec.warnings[0]


@pytest.mark.parametrize("extra", [{"earlyterminate": 1}, {"early_terminate": {"type": "hyperband",
                                                                                 "min_iter": 1, "et": 3}}])
def test_strict_turns_wandb_warnings_into_errors(extra: dict) -> None:
    with pytest.raises(SpecError, match="unknown key"):
        parse_spec({**BASE, **extra}, file="sweep.yaml", strict=True)


def test_a_goal_typo_is_still_an_error() -> None:
    with pytest.raises(SpecError, match="did you mean 'maximize'"):
        parse_spec({**BASE, "metric": {"name": "loss", "goal": "maximum"}}, file="sweep.yaml")


def test_a_command_passing_no_parameters_is_warned_about(tmp_path) -> None:
    (tmp_path / "train.py").write_text("print('no parameters read')\n")
    raw = {**BASE, "command": ["${env}", "python", "${program}"]}
    spec = parse_spec(raw, file=str(tmp_path / "sweep.yaml"))
    assert any("passes no parameters" in w and "add ${args}" in w for w in spec.warnings)
    (tmp_path / "train.py").write_text("import wandb\nrun = wandb.init()\nprint(wandb.config.lr)\n")
    assert parse_spec(raw, file=str(tmp_path / "sweep.yaml")).warnings == ()


def test_a_wandb_file_without_program_names_the_function_option() -> None:
    raw = {k: v for k, v in BASE.items() if k != "program"}
    with pytest.raises(SpecError, match=r"--function train\.py:train"):
        parse_spec(raw, file="sweep.yaml")


def test_grid_sorts_names_as_wandb_sorts_the_keys_written() -> None:
    # W&B sorts the keys of each `parameters` block as strings (wandb/sweeps params.py, HyperParameterSet.
    # from_config: `sorted(d.items())`), the last varying fastest: a dotted name written flat is one key, so
    # `data-size` ('-' sorts before '.') comes before `data.dir`, and the nested `opt` before `opt.a`
    space = parse_parameters({"data.dir": {"values": ["x", "y"]}, "data-size": {"values": [1, 2]},
                              "opt": {"parameters": {"lr": {"values": [0.1, 0.2]}}}, "opt.a": {"values": ["p", "q"]}})
    assert [name for name, _ in space.grid_axes()] == ["data-size", "data.dir", "opt.lr", "opt.a"]
    combos = [(c["data-size"], c["data.dir"], c["opt.lr"], c["opt.a"]) for c in space.grid()]
    assert combos[:3] == [(1, "x", 0.1, "p"), (1, "x", 0.1, "q"), (1, "x", 0.2, "p")]
