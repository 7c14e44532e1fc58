"""The hook's own rules: W&B's history rows, and a start-up that leaves the interpreter as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeplab.wandb_compat import BOOT_DIR
from sweeplab.wandb_compat._boot import _sweeplab_wandb_hook as hook


@pytest.fixture
def rows(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, dict[str, float]]]:
    out: list[tuple[int, dict[str, float]]] = []
    monkeypatch.setattr(hook, "_sink", lambda metrics, step: out.append((step, metrics)))
    return out


def test_history_rows_follow_wandbs_step_and_commit_rules(rows: list) -> None:
    h = hook._History()
    h.log({"a": 1}, None, None)                 # step 0, committed
    h.log({"b": 2}, None, False)                # step 1, open
    h.log({"c": 3}, None, None)                 # joins it, commits step 1
    h.log({"d": 4}, 5, None)                    # step 5, open until a later step or finish, but reported now
    h.log({"e": 5, "d": 4}, 5, None)            # joins it: only what is new is reported
    h.log({"x": 9}, 2, None)                    # smaller than the current step: dropped, as W&B drops it
    h.log({"e": 6}, 5, False)                   # the row's last value of a key is its value: reported again
    h.log({"f": {"g": 6}}, 7, True)             # commits step 5, then step 7 (nested -> dotted)
    h.log({"h": 1}, None, False)                # step 8, open (no step=): reported when committed
    h.log({"i": 2}, 8, None)                    # the same step, given: reported now
    h.commit()
    assert rows == [(0, {"a": 1.0}), (1, {"b": 2.0, "c": 3.0}), (5, {"d": 4.0}), (5, {"e": 5.0}), (5, {"e": 6.0}),
                    (7, {"f.g": 6.0}), (8, {"i": 2.0}), (8, {"h": 1.0})]


def test_only_numbers_are_mirrored(rows: list) -> None:
    np = pytest.importorskip("numpy")
    h = hook._History()
    h.log({"n": np.float32(0.5), "i": np.int64(3), "s": "text", "flag": True, "arr": np.ones(3)}, None, None)
    assert rows == [(0, {"n": 0.5, "i": 3.0})]


def test_the_startup_hook_runs_the_sitecustomize_it_hides(tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = '1'\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(BOOT_DIR), str(user)]))
    code = ("import os, sys; print(os.environ.get('USER_SITECUSTOMIZE_RAN'), "
            "any(type(f).__name__ == '_Finder' for f in sys.meta_path))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["1", "True"], out.stderr


class _Summary:
    def __init__(self, data: dict) -> None:
        self.data = data

    def _as_dict(self) -> dict:
        return self.data


def test_media_in_the_summary_are_not_metrics() -> None:
    # A public program puts a wandb.Table in run.summary next to its score; W&B keeps it as a table (its
    # summary holds {"_type": "table-file", "nrows": ..., ...}), not as numbers "report.nrows" and "report.size"
    run = type("Run", (), {"summary": _Summary({
        "classification_report_table": {"_type": "table-file", "ncols": 2, "nrows": 4, "size": 154, "path": "p"},
        "cm": {"_type": "image-file", "width": 64, "height": 48, "size": 900, "format": "png"},
        "F1 Score (Weighted)": 0.96, "val_acc": {"max": 0.9}, "nested": {"x": 1}, "_step": 3})})()
    assert hook._summary_of(run) == {"F1 Score (Weighted)": 0.96, "val_acc.max": 0.9, "val_acc": 0.9, "nested.x": 1.0}


def test_media_logged_as_dicts_are_not_metrics(rows: list) -> None:
    h = hook._History()
    h.log({"loss": 1.0, "img": {"_type": "image-file", "width": 8, "height": 8}, "extra": {"a": 2}}, None, None)
    assert rows == [(0, {"loss": 1.0, "extra.a": 2.0})]


def test_one_element_arrays_and_tensors_are_numbers_as_wandb_logs_them(rows: list) -> None:
    # `wandb.log({"val_loss": loss.unsqueeze(0)})`: W&B's history and summary hold 0.5 (wandb.util.json_friendly
    # takes the one element of a tensor or array); the trial's reports lacked it, so schedulers never saw them
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    h = hook._History()
    h.log({"t": torch.tensor([0.5]), "n": np.array([[0.25]]), "g": torch.ones(1, requires_grad=True) * 2,
           "many": torch.ones(2), "tb": torch.tensor([True]), "nb": np.array([True])}, None, None)
    assert rows == [(0, {"t": 0.5, "n": 0.25, "g": 2.0})]


def test_wandb_takes_sweeplabs_config_object_as_the_dict_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    # a trial function `def train(config): wandb.init(config=config)` gets sweeplab's read-only Config, which
    # wandb refused ("config must be a dict or have a __dict__ attribute"), in wandb.init and config.update
    pytest.importorskip("wandb")
    from wandb.sdk import wandb_helper

    from sweeplab.config import Config

    monkeypatch.setattr(wandb_helper, "_to_dict", wandb_helper._to_dict)   # given back after the test
    hook._patch_config_of(wandb_helper)   # what the hook does as wandb is imported (a trial: function_env)
    config = Config({"lr": 0.1, "opt": {"beta": 0.9}})
    assert wandb_helper.parse_config(config) == {"lr": 0.1, "opt": {"beta": 0.9}}
    with pytest.raises(TypeError):
        wandb_helper.parse_config(3)   # what wandb refuses otherwise, it still refuses


def test_a_metric_named_step_reaches_a_command_trial_as_in_a_function_trial(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # `wandb.log({"step": global_step, "loss": l})`: the report line's own "step" (W&B's _step) took its place
    from sweeplab.backends.command_trial import parse_report_line

    report = tmp_path / "r.jsonl"
    monkeypatch.setenv("SWEEPLAB_REPORT_FILE", str(report))
    monkeypatch.setattr(hook, "_sink", None)
    hook._emit({"step": 100.0, "loss": 0.5}, 0)
    assert parse_report_line(report.read_text()) == (0, {"step": 100.0, "loss": 0.5})
    assert parse_report_line('{"step": 3, "loss": 1}') == (3, {"loss": 1.0})   # sweeplab's own lines as before


def test_a_non_finite_value_the_hook_writes_reaches_the_trial_as_that_value(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook writes NaN / inf as text (strict JSON): a command trial's reader and a function trial's (the
    report file of the processes it starts) both read it back as the number, where they dropped it (so the
    `nan` monitor never saw a loss that turned NaN)."""
    import math

    from sweeplab.backends.command_trial import parse_report_line
    from sweeplab.wandb_compat import _ReportTail

    report = tmp_path / "r.jsonl"
    monkeypatch.setenv("SWEEPLAB_REPORT_FILE", str(report))
    monkeypatch.setattr(hook, "_sink", None)
    hook._emit({"loss": math.nan, "grad_norm": math.inf, "acc": 0.5}, 4)
    step, metrics = parse_report_line(report.read_text())     # type: ignore[misc]
    assert step == 4 and math.isnan(metrics["loss"]) and metrics["grad_norm"] == math.inf and metrics["acc"] == 0.5
    logged: list[tuple[dict[str, float], int | None]] = []
    tail = _ReportTail(str(report), lambda m, step=None: logged.append((m, step)), {})
    tail.close()
    [(got, at)] = logged
    assert at == 4 and math.isnan(got["loss"]) and got["grad_norm"] == math.inf and got["acc"] == 0.5


def test_define_metric_summaries_are_read_as_wandb_reads_them_whatever_their_case() -> None:
    # wandb lower-cases the summary ops (`summary="Min"` is "min"; wandb_run.py, define_metric): the hook kept
    # none for "Min", so a command trial the sweep stopped ended with the last value instead of the minimum
    h = hook._History()
    h.define("loss", "Min")
    h.define("acc", " MAX , Mean")
    h._summarize({"loss": 2.0, "acc": 1.0})
    assert h._summarize({"loss": 3.0, "acc": 3.0}) == {"loss.min": 2.0, "loss": 2.0, "acc.max": 3.0,
                                                         "acc.mean": 2.0}


def test_a_key_set_in_the_summary_then_logged_is_its_last_logged_value(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # a command trial's summary changes go to the trial as they are made (a stopped run keeps them, as W&B's
    # server does); a later wandb.log of the same key is W&B's summary then, not the stale value that was set
    import json
    from types import SimpleNamespace

    report = tmp_path / "r.jsonl"
    monkeypatch.setenv("SWEEPLAB_REPORT_FILE", str(report))
    monkeypatch.setattr(hook, "_sink", None)
    monkeypatch.setattr(hook, "_final", None)
    monkeypatch.setattr(hook, "_summary_keys", set())
    item = SimpleNamespace(key=("loss",), value=0.25)
    hook._summary_set(SimpleNamespace(update=[item, SimpleNamespace(key=("best", "epoch"), value=3)], remove=[]))
    hook._History().log({"loss": 0.75, "acc": 0.5}, None, None)
    summaries = [json.loads(ln)["@summary"] for ln in report.read_text().splitlines() if "@summary" in ln]
    final: dict = {}
    for s in summaries:
        final.update(s)
    assert final == {"loss": 0.75, "best.epoch": 3}


@pytest.mark.parametrize("reports", [False, True], ids=["steps", "reports"])
def test_the_hooks_copy_of_the_decision_rule_waits_at_the_reports_sweeplabs_run_waits_at(reports: bool) -> None:
    # the hook cannot import sweeplab: its copy of `DecisionPoints` (which row of a W&B run waits for the verdict)
    # must pick the reports sweeplab's Run picks, repeated steps, NaN and reports past several points included
    from sweeplab.run import DecisionPoints

    nan, inf = float("nan"), float("inf")
    reports_seen = [(0, 1.0), (1, nan), (1, 0.5), (2, 0.4), (2, 0.3), (3, inf), (5, 0.2), (6, 0.1), (7, 0.1),
                    (12, 0.1), (13, 0.1), (30, 0.1), (31, 0.1), (32, 0.1), (40, 0.1)]
    env = {"SWEEPLAB_DECISION_FILE": "v", "SWEEPLAB_DECISION_METRIC": "loss", "SWEEPLAB_DECISION_STEPS": "1,3,9,27",
           "SWEEPLAB_DECISION_REPORTS": "1" if reports else ""}
    theirs, ours = DecisionPoints([1, 3, 9, 27], reports=reports), hook._Hold(env)
    expected = [theirs.passes(step, value) for step, value in reports_seen]
    assert [ours.passes(step, value) for step, value in reports_seen] == expected
    assert sum(expected) == (3 if reports else 4)   # (a case that waits somewhere)
