"""What a command trial reports reaches the sweep as it was reported: `sweeplab.report(...)` and W&B's hook
write a NaN or an infinity as the text "nan" / "inf" (their report file stays JSON), and the runner reads it
back as that number, as it reads `@sweeplab {"loss": NaN}` on stdout."""

from __future__ import annotations

import json
import math
import sys

import pytest

from sweeplab.backends.command_trial import parse_report_line

PROGRAM = """\
import sys, sweeplab
x = float(sys.argv[1].split("=")[1])
for step in range(4):
    loss = float("nan") if x > 1 and step >= 1 else x / (step + 1)
    sweeplab.report(loss=loss, step=step)
"""


def test_report_file_lines_keep_nan_and_infinities(tmp_path, monkeypatch):
    import sweeplab

    path = tmp_path / "report.jsonl"
    monkeypatch.setenv("SWEEPLAB_REPORT_FILE", str(path))
    assert sweeplab.report({"a": float("nan"), "b": float("inf"), "c": -math.inf, "d": 0.5}, step=3)
    step, metrics = parse_report_line(path.read_text().strip())
    assert step == 3 and metrics["d"] == 0.5
    assert math.isnan(metrics["a"]) and metrics["b"] == math.inf and metrics["c"] == -math.inf
    # the W&B hook's history row, written the same way; other text is still no number
    step, metrics = parse_report_line(json.dumps({"loss": "nan", "name": "abc", "@step": 2}))
    assert step == 2 and set(metrics) == {"loss"} and math.isnan(metrics["loss"])


@pytest.mark.slow
def test_nan_from_sweeplab_report_is_seen_by_the_nan_monitor_and_never_best(cli):
    (cli.tmp / "prog.py").write_text(PROGRAM)
    f = cli.spec("s", f"command: [{sys.executable}, prog.py, '${{args}}']\nmethod: grid\n"
                      "metric: {name: loss, goal: minimize}\nmonitors: [nan]\n"
                      "parameters:\n  x: {values: [0.5, 2.0]}\ntrial: {retries: 0}\n")
    cli("sweep", str(f), "--name", "r", "--workers", "1", "-q", check=True)
    trials = {t["params"]["x"]: t for t in cli.status("r")["trials"]}
    assert trials[0.5]["state"] == "completed"
    # it used to complete with its last finite report (2.0 at step 0), the NaNs dropped
    assert trials[2.0]["state"] == "stopped_by_rule", trials[2.0]
    assert "NaN" in trials[2.0]["reason"]
    assert json.loads(cli("best", "r", "--json").stdout)["trial"] == trials[0.5]["number"]


@pytest.mark.slow
def test_a_report_line_that_is_not_json_is_named_in_the_failure(cli):
    """`print("@sweeplab", {"loss": 0.5})` prints a Python dict, not JSON: the line was dropped without a word and
    the trial failed with "metric 'loss' was never reported (reported: nothing)"."""
    (cli.tmp / "prog.py").write_text('print("@sweeplab", {"loss": 0.5, "step": 0})\n'
                                     'print("@sweeplab", {"loss": 0.4})\n')
    f = cli.spec("s", f"command: [{sys.executable}, prog.py]\nmethod: grid\nmetric: {{name: loss}}\n"
                      "trial: {retries: 0}\n")
    cp = cli("sweep", str(f), "--name", "d", "--workers", "1", "-q")
    assert cp.returncode == 1
    reason = cli.status("d")["trials"][0]["reason"]
    assert "never reported (reported: nothing)" in reason
    assert "2 `@sweeplab` line(s) were not a JSON object" in reason and "{'loss': 0.5, 'step': 0}" in reason
    assert "{'loss': 0.5, 'step': 0}" in cp.stderr


def test_a_report_from_a_rank_a_framework_started_is_not_rank_0s(tmp_path, monkeypatch):
    """Lightning's strategy="ddp" in a command trial starts the further ranks itself, with LOCAL_RANK and
    NODE_RANK but no RANK, and they inherit the trial's report file: every report reached the sweep once per
    rank (each point twice with 2 ranks, rank 1's own value without `sync_dist`). Only rank 0's count."""
    import sweeplab

    path = tmp_path / "report.jsonl"
    monkeypatch.setenv("SWEEPLAB_REPORT_FILE", str(path))
    monkeypatch.delenv("RANK", raising=False)
    for local_rank, node_rank, kept in (("1", "0", False), ("0", "1", False), ("0", "0", True)):
        monkeypatch.setenv("LOCAL_RANK", local_rank)
        monkeypatch.setenv("NODE_RANK", node_rank)
        assert sweeplab.report(loss=0.5, step=0) is kept
    monkeypatch.setenv("RANK", "0")   # torchrun's and sweeplab's own ranks say it outright
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert sweeplab.report(loss=0.25, step=1)
    assert [parse_report_line(line)[0] for line in path.read_text().splitlines()] == [0, 1]
