"""`sl.Run.from_env()`: the Run of a program run as a command trial, built from the environment the runner
sets (docs/integrations.md, command trials). Each case runs a real Python process with that environment:
what the Run writes is what the runner reads (backends/command_trial.py)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sweeplab.backends.command_trial import parse_report_line
from sweeplab.checkpoint import CheckpointManager


def _python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPLAB_")}
    env.update(extra)
    return env


def test_outside_a_sweep_the_run_is_local_and_a_callback_works_unchanged(tmp_path):
    """Plain `python train.py`: XGBoost trains with the callback; nothing is reported or checkpointed, nothing
    is restored, and no file appears; a SIGTERM asks the program to stop (it goes on to its end), a second one
    ends it as SIGTERM does."""
    pytest.importorskip("xgboost")
    cp = _python("""
        import os, signal
        import numpy as np, xgboost as xgb
        import sweeplab as sl
        from sweeplab.integrations.xgboost import SweeplabCallback

        run = sl.Run.from_env({"rounds": 3})
        callback = SweeplabCallback(run)
        assert callback.resume_model() is None and run.restore() is None
        x = np.arange(40, dtype=float).reshape(20, 2); y = x[:, 0] * 2
        booster = xgb.train({"nthread": 1}, xgb.DMatrix(x, label=y), num_boost_round=run.config.rounds,
                            evals=[(xgb.DMatrix(x, label=y), "val")], callbacks=[callback], verbose_eval=False)
        assert booster.num_boosted_rounds() == 3 and "val-rmse" in callback.metrics
        assert run.checkpoint({"w": 1}, step=0) is False and not run.should_stop
        os.kill(os.getpid(), signal.SIGTERM)
        assert run.should_stop and run.stop_reason == "SIGTERM"
        print("still here", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        print("not reached", flush=True)
    """, _env(), tmp_path)
    assert cp.returncode == -signal.SIGTERM, cp.stderr
    assert cp.stdout.split() == ["still", "here"], cp.stdout + cp.stderr
    assert not list(tmp_path.iterdir())


PROGRAM = """
    import math, os, signal
    import sweeplab as sl

    run = sl.Run.from_env()
    state = run.restore()
    print("restored", state, flush=True)
    start = state["step"] + 1 if state else 0
    for step in range(start, 4):
        run.log({"loss": 1.0 / (step + 1), "step": 10.0 + step, "odd": math.nan if step == 1 else 0.0}, step=step)
        if step == 1 and run.attempt == 1:
            os.kill(os.getpid(), signal.SIGTERM)   # a SIGTERM from outside: the Run notes it and asks to stop
        print("saved" if run.checkpoint({"step": step}, step=step) else "skipped", step, flush=True)
        if run.should_stop:
            break
"""


def test_in_a_command_trial_the_run_reports_checkpoints_and_notes_a_sigterm(tmp_path):
    """With the runner's variables: `log` writes report lines the runner reads back (step kept, a metric named
    `step` kept as a metric, NaN kept); checkpoints follow `trial.checkpoint_every` (SWEEPLAB_CHECKPOINT_EVERY)
    but a stop request lets one through, in the manager's layout the runner lists; a SIGTERM is one
    `{"@signal": ...}` line and a stop request; attempt 2 restores the stop's checkpoint and logs on from it."""
    report, ckpt = tmp_path / "report.jsonl", tmp_path / "ckpt"
    env = _env(SWEEPLAB_REPORT_FILE=str(report), SWEEPLAB_CHECKPOINT_DIR=str(ckpt), SWEEPLAB_SWEEP="s",
               SWEEPLAB_TRIAL="3", SWEEPLAB_ATTEMPT="1", SWEEPLAB_CHECKPOINT_EVERY=json.dumps(5))
    first = _python(PROGRAM, env, tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["restored None", "saved 0", "saved 1"], first.stdout   # 1: the stop's
    lines = report.read_text().splitlines()
    assert lines.count('{"@signal": "SIGTERM"}') == 1, lines
    parsed = [parse_report_line(ln) for ln in lines if not ln.startswith('{"@')]
    assert [p[0] for p in parsed] == [0, 1]
    assert parsed[0][1] == {"loss": 1.0, "step": 10.0, "odd": 0.0}
    assert math.isnan(parsed[1][1]["odd"])
    assert [i.step for i in CheckpointManager(ckpt).list()] == [0, 1]

    report.write_text("")
    second = _python(PROGRAM, {**env, "SWEEPLAB_ATTEMPT": "2"}, tmp_path)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0] == "restored {'step': 1}", second.stdout
    lines = report.read_text().splitlines()
    assert not any("@signal" in ln for ln in lines)
    # the manager's own `restored` note, once (the Run's would be a second)
    assert sum('"restored"' in ln for ln in lines if ln.startswith('{"@note"')) == 1, lines
    assert [p[0] for ln in lines if not ln.startswith('{"@') for p in [parse_report_line(ln)]] == [2, 3]
    assert second.stdout.splitlines()[1:] == ["saved 2", "skipped 3"], second.stdout   # every 5 steps: 2 is the
    # attempt's first call (always due), 3 is not due


def test_in_smoke_mode_a_program_that_never_reads_should_stop_ends_cleanly(tmp_path):
    """`--smoke` (SWEEPLAB_SMOKE=1): a loop over its full length that never reads `run.should_stop` is ended by
    `run.log` two new steps after the stop request, as in a function trial; the program exits 0 (it crashed
    with a `SmokeDone` traceback, and the smoke trial failed)."""
    report = tmp_path / "report.jsonl"
    env = _env(SWEEPLAB_REPORT_FILE=str(report), SWEEPLAB_SMOKE="1", SWEEPLAB_TRIAL="0", SWEEPLAB_ATTEMPT="1")
    cp = _python("""
        import sweeplab as sl
        run = sl.Run.from_env()
        for step in range(1000):
            run.log({"loss": 1.0 / (step + 1)}, step=step)
        print("not reached")
    """, env, tmp_path)
    assert cp.returncode == 0 and "not reached" not in cp.stdout, cp.stdout + cp.stderr
    assert [parse_report_line(ln)[0] for ln in report.read_text().splitlines()] == [0, 1, 2, 3]


def test_in_a_function_trial_from_env_warns_that_its_run_reports_nowhere(tmp_path):
    """A function trial is handed its Run; `from_env` in its process (no report file there) would drop every
    report in silence."""
    cp = _python("""
        import warnings, sweeplab as sl
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            run = sl.Run.from_env()
        print(len(seen), seen[0].message if seen else "")
    """, _env(SWEEPLAB_EVENT_FD="9"), tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.startswith("1 sl.Run.from_env() in a function trial"), cp.stdout


def test_the_same_restored_note_from_two_ranks_is_one_event():
    """Lightning's own DDP launcher runs the program once per rank; every rank's checkpoint manager notes the
    checkpoint it restored (the same one): the sweep's events listed `restored` once per rank."""
    from sweeplab.backends.command_trial import _Reporter

    sent: list[tuple[object, dict]] = []

    class Channel:
        def send(self, kind, data=None):
            sent.append((kind, data))

    reporter = _Reporter(Channel())  # type: ignore[arg-type]
    note = '{"@note":{"level":"info","kind":"restored","step":4,"message":"restored checkpoint of step 4"}}'
    for line in (note, note, note.replace("4", "5")):
        reporter.line(line)
    assert [d["step"] for _, d in sent] == [4, 5]


REPORTER = """\
import pathlib, sys
import sweeplab

args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
kind, out = args["kind"], pathlib.Path(args["out"])
for step in range(int(args["steps"])):
    (out / f"{kind}.trained").write_text(str(step))          # this step was trained
    floor = 0.2 if kind.endswith("-b") else 0.1
    loss = floor + 1.0 / (step + 1) if kind.startswith("good") else 2.0 + 0.5 / (step + 1)
    if args["how"] == "step":
        sweeplab.report({"train_loss": loss * 2}, step=step)
        sweeplab.report(val_loss=loss, step=step)
    else:                                                    # no step: the runner counts on from the last
        sweeplab.report(train_loss=loss * 2, val_loss=loss)
"""


@pytest.mark.parametrize("how", ["step", "auto"])
@pytest.mark.parametrize("early", ["asha", "hyperband"])
def test_a_program_reporting_through_sweeplab_report_is_held_at_its_rung(tmp_path, how, early):
    """`sweeplab.report()` waits at a rung (an ASHA rung step, a hyperband band's report) for the verdict, as
    `sl.Run.from_env()`'s `run.log` does, so a pruned program trains nothing past it: it had no reply channel,
    and a hopeless program (no pause between steps) trained on until the SIGTERM of its prune reached it."""
    import sqlite3

    import sweeplab as sl

    (tmp_path / "train.py").write_text(REPORTER)
    out = tmp_path / "out"
    out.mkdir()
    spec = {"program": str(tmp_path / "train.py"), "method": "grid", "metric": {"name": "val_loss", "goal": "minimize"},
            "early_terminate": {"type": early, "min_iter": 1, "max_iter": 300, "eta": 3}, "trial": {"retries": 0},
            "parameters": {"kind": {"values": ["good-b", "good", "hopeless-a", "hopeless-b"]}, "steps": {"value": 300},
                           "out": {"value": str(out)}, "how": {"value": how}}}
    sl.run_sweep(spec, store=tmp_path / "store", workers=1, name="held")
    with sqlite3.connect(tmp_path / "store" / "store.db") as c:
        reported = c.execute("SELECT t.state, MAX(m.step) FROM metrics m JOIN trials t ON t.id = m.trial_id "
                             "WHERE m.key = 'val_loss' GROUP BY t.number ORDER BY t.number").fetchall()
    rung = 1 if early == "asha" else 0   # hyperband's band 1 is the first report
    assert reported == [("completed", 299), ("completed", 299), ("pruned", rung), ("pruned", rung)]
    trained = {p.stem: int(p.read_text()) for p in out.glob("*.trained")}
    assert trained == {"good-b": 299, "good": 299, "hopeless-a": rung, "hopeless-b": rung}
