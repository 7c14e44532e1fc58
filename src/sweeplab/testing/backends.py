"""The backend contract: every backend (local, ray, yours) passes these tests.

Subclass `BackendContract` in a test module and provide a `make_backend` fixture returning a callable
`make_backend(n_slots) -> Backend` (started by the suite, shut down after each test), and a `trials_file`
fixture: the path of a module of trial functions (see tests/fixtures/trials.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from sweeplab.backends.base import Backend, TrialTask
from sweeplab.backends.events import Event, EventKind

__all__ = ["BackendContract", "collect", "make_task"]


def make_task(tmp: Path, trial_id: int, target: str | None = None, *, config: dict[str, Any] | None = None,
              command: list[str] | None = None, attempt: int = 1, **kw: Any) -> TrialTask:
    base = tmp / f"t{trial_id}"
    return TrialTask(
        trial_id=trial_id, number=trial_id, attempt=attempt, sweep="contract",
        kind="command" if command else "function", target=target, command=command,
        config=config or {}, params=config or {}, log_path=str(base / f"{attempt}.log"),
        report_path=str(base / f"{attempt}.report.jsonl"), checkpoint_dir=str(base / "ckpt"),
        capture_dir=str(base / "capture"), cwd=str(tmp), heartbeat_interval=kw.pop("heartbeat_interval", 0.2),
        **kw,
    )


def collect(backend: Backend, trial_ids: Iterable[int], timeout: float = 60.0,
            on_event: Callable[[Event], None] | None = None) -> dict[int, list[Event]]:
    """Poll until every trial in `trial_ids` has an attempt-ending event; events by trial."""
    pending = set(trial_ids)
    out: dict[int, list[Event]] = {t: [] for t in pending}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for ev in backend.poll(0.1):
            out.setdefault(ev.trial, []).append(ev)
            if on_event is not None:
                on_event(ev)
            if ev.kind.ends_attempt:
                pending.discard(ev.trial)
    if pending:
        raise AssertionError(f"trials {sorted(pending)} did not end within {timeout}s: {out}")
    return out


def kinds(events: list[Event]) -> list[EventKind]:
    """The lifecycle of an attempt: its events but heartbeats and notes (info lines that may come any time)."""
    return [e.kind for e in events if e.kind not in (EventKind.HEARTBEAT, EventKind.NOTE)]


class BackendContract:
    """Behaviour every backend must have. Tests use real processes; nothing is mocked."""

    @pytest.fixture
    def backend(self, make_backend: Callable[[int], Backend]) -> Iterable[Callable[[int], Backend]]:
        started: list[Backend] = []

        def factory(n: int = 1) -> Backend:
            b = make_backend(n)
            b.start()
            started.append(b)
            return b

        yield factory
        for b in started:
            b.shutdown(grace=0.0)

    def fn(self, trials_file: str, name: str) -> str:
        return f"{trials_file}:{name}"

    def test_function_trial_streams_started_metrics_finished(self, backend, trials_file, tmp_path):
        b = backend(1)
        b.submit(make_task(tmp_path, 1, self.fn(trials_file, "quick"), config={"steps": 3, "x": 2.0}))
        ev = collect(b, [1])[1]
        ks = kinds(ev)
        assert ks[0] is EventKind.STARTED and ks[-1] is EventKind.FINISHED
        points = [p for e in ev if e.kind is EventKind.METRICS for p in e.data["points"]]
        assert [(p[0], p[1], p[2]) for p in points if p[1] == "loss"] == [(0, "loss", 1.0), (1, "loss", 0.5),
                                                                        (2, "loss", 1 / 3)]
        assert ev[-1].data["metrics"] == {"loss": 1 / 3, "x": 2.0}
        assert all(e.attempt == 1 and e.trial == 1 for e in ev)

    @pytest.mark.parametrize("every, go, stop", [(1, ([1, 10], 50), ([1], 1)), (3, ([3, 12], 48), ([3], 3))],
                             ids=["every-step", "every-3-steps"])
    @pytest.mark.parametrize("answer", ["go", "stop"])
    def test_a_trial_waits_at_its_decision_steps_for_go_or_stop(self, backend, trials_file, tmp_path, answer,
                                                                 every, go, stop):
        """With no pause between steps, only waiting for the verdict makes the ends below exact. Decision steps
        1 and 10; a trial reporting every 3 steps is judged, and waits, at the first reports past them, 3 and 12
        (a pruned trial trained on to its end when only the exact steps waited)."""
        b = backend(1)
        if not b.supports_decisions:
            pytest.skip(f"{b.name} does not hold trials at decision steps (supports_decisions is False)")
        decided: list[int] = []

        def answer_it(ev: Event) -> None:   # what the driver does after reading a report at a rung
            step = ev.data.get("decide") if ev.kind is EventKind.METRICS else None
            if step is not None:
                decided.append(step)
                if answer == "go":
                    b.go(1, step)
                else:
                    b.stop(1)

        b.submit(make_task(tmp_path, 1, self.fn(trials_file, "rungs"), config={"steps": 50, "every": every},
                           decision_steps=[1, 10], decision_metric="loss"))
        end = collect(b, [1], on_event=answer_it)[1][-1]
        assert end.kind is EventKind.FINISHED
        steps, last = go if answer == "go" else stop
        assert decided == steps and end.data["metrics"]["last_step"] == last

    def test_one_argument_function_gets_config_only(self, backend, trials_file, tmp_path):
        b = backend(1)
        b.submit(make_task(tmp_path, 1, self.fn(trials_file, "one_arg"), config={"x": 3}))
        ev = collect(b, [1])[1]
        assert ev[-1].kind is EventKind.FINISHED and ev[-1].data["metrics"] == {"value": 9.0}

    def test_exception_is_failed_with_traceback_and_worker_survives(self, backend, trials_file, tmp_path):
        b = backend(1)
        b.submit(make_task(tmp_path, 1, self.fn(trials_file, "raises"), config={"x": 7}))
        end = collect(b, [1])[1][-1]
        assert end.kind is EventKind.FAILED
        assert end.data["error_type"] == "ValueError" and "planted failure x=7" in end.data["message"]
        assert "Traceback" in end.data["traceback"] and "raises" in end.data["traceback"]
        b.submit(make_task(tmp_path, 2, self.fn(trials_file, "quick"), config={"steps": 1}))
        assert collect(b, [2])[2][-1].kind is EventKind.FINISHED

    @pytest.mark.parametrize("name, expect", [("segfault", "SIGSEGV"), ("hard_exit", "code 3")],
                             ids=["segfault", "os._exit"])
    def test_crashing_trial_fails_alone_and_slot_is_recycled(self, backend, trials_file, tmp_path, name, expect):
        b = backend(1)
        b.submit(make_task(tmp_path, 1, self.fn(trials_file, name)))
        end = collect(b, [1])[1][-1]
        assert end.kind is EventKind.FAILED and expect in end.data["reason"]
        assert b.free_slots() == 1
        b.submit(make_task(tmp_path, 2, self.fn(trials_file, "quick"), config={"steps": 2}))
        assert collect(b, [2])[2][-1].kind is EventKind.FINISHED

    def test_parallel_slots_run_at_once(self, backend, trials_file, tmp_path):
        b = backend(2)
        deadline = time.monotonic() + 60   # a slot may become free a while after start (a fork server's
        while b.free_slots() < 2 and time.monotonic() < deadline:   # imports, a Ray actor's placement):
            b.poll(0.1)                                               # the driver polls meanwhile
        assert b.free_slots() == 2
        for i in (1, 2):
            b.submit(make_task(tmp_path, i, self.fn(trials_file, "sleeper"), config={"seconds": 30}))
        assert b.free_slots() == 0 and sorted(b.running()) == [1, 2]
        seen: set[int] = set()

        def on_event(ev: Event) -> None:
            if ev.kind is EventKind.METRICS:
                seen.add(ev.trial)
                if seen == {1, 2}:   # both are running at the same time: stop them
                    b.stop(1)
                    b.stop(2)

        ev = collect(b, [1, 2], on_event=on_event)
        assert seen == {1, 2}
        assert all(ev[i][-1].kind is EventKind.FINISHED and ev[i][-1].data["stopped"] for i in (1, 2))

    def test_stop_sets_should_stop(self, backend, trials_file, tmp_path):
        b = backend(1)
        b.submit(make_task(tmp_path, 1, self.fn(trials_file, "sleeper"), config={"seconds": 60}))
        stopped = []

        def on_event(ev: Event) -> None:
            if ev.kind is EventKind.METRICS and not stopped:
                stopped.append(True)
                b.stop(1)

        end = collect(b, [1], on_event=on_event)[1][-1]
        assert end.kind is EventKind.FINISHED and end.data["stopped"] is True
        assert end.data["metrics"]["stopped_at"] >= 1

    def test_kill_ends_a_hung_trial_as_failed(self, backend, trials_file, tmp_path):
        b = backend(1)
        b.submit(make_task(tmp_path, 1, self.fn(trials_file, "hang")))

        def on_event(ev: Event) -> None:
            if ev.kind is EventKind.STARTED:
                b.kill(1, "test kill")

        end = collect(b, [1], on_event=on_event)[1][-1]
        assert end.kind is EventKind.FAILED and "test kill" in end.data["reason"]

    def test_preempt_gives_grace_to_checkpoint_then_preempted(self, backend, trials_file, tmp_path):
        b = backend(1)
        task = make_task(tmp_path, 1, self.fn(trials_file, "checkpointing"),
                         config={"steps": 1000, "delay": 0.02}, grace=10.0)
        b.submit(task)
        steps = []

        def on_event(ev: Event) -> None:
            if ev.kind is EventKind.METRICS:
                steps.extend(p[0] for p in ev.data["points"])
                if len(steps) >= 3:
                    b.preempt(1)

        ev = collect(b, [1], on_event=on_event)[1]
        assert ev[-1].kind is EventKind.PREEMPTED
        ckpts = [e for e in ev if e.kind is EventKind.CHECKPOINT]
        assert ckpts, "the trial should have checkpointed before ending"
        # a new attempt restores the checkpoint and goes on from there
        b.submit(make_task(tmp_path, 1, self.fn(trials_file, "checkpointing"),
                           config={"steps": ckpts[-1].data["step"] + 4}, attempt=2))
        ev2 = collect(b, [1])[1]
        assert ev2[-1].kind is EventKind.FINISHED, ev2[-1].data
        resumed = [p[0] for e in ev2 if e.kind is EventKind.METRICS for p in e.data["points"]]
        assert resumed[0] == ckpts[-1].data["step"] + 1

    def test_command_trial_reports_by_stdout_lines_and_report_api(self, backend, tmp_path):
        script = tmp_path / "prog.py"
        script.write_text(
            "import json, sweeplab\n"
            "for i in range(3):\n"
            "    print('@sweeplab ' + json.dumps({'step': i, 'loss': 1.0 / (i + 1)}), flush=True)\n"
            "print('plain output')\n"
            "sweeplab.report({'acc': 0.9}, step=3)\n"
        )
        b = backend(1)
        b.submit(make_task(tmp_path, 1, command=[sys.executable, str(script)]))
        ev = collect(b, [1])[1]
        assert ev[-1].kind is EventKind.FINISHED, [(e.kind, e.data) for e in ev]
        points = {(p[0], p[1]): p[2] for e in ev if e.kind is EventKind.METRICS for p in e.data["points"]}
        assert points == {(0, "loss"): 1.0, (1, "loss"): 0.5, (2, "loss"): 1 / 3, (3, "acc"): 0.9}
        log = Path(tmp_path / "t1" / "1.log").read_text()
        assert "plain output" in log

    def test_command_trial_nonzero_exit_is_failed_with_log_tail(self, backend, tmp_path):
        b = backend(1)
        b.submit(make_task(tmp_path, 1, command=[sys.executable, "-c",
                                                 "import sys; print('boom', file=sys.stderr); sys.exit(4)"]))
        end = collect(b, [1])[1][-1]
        assert end.kind is EventKind.FAILED and end.data["exit_code"] == 4 and "boom" in end.data["message"]

    def test_command_trial_failure_says_why_and_its_log_says_how_it_ran(self, backend, tmp_path):
        script = tmp_path / "prog.py"
        script.write_text("print('to stdout')\nimport sweeplab_contract_missing_module\n")
        b = backend(1)
        b.submit(make_task(tmp_path, 1, command=[sys.executable, str(script), "--lr=0.5"], seed=11))
        end = collect(b, [1])[1][-1]
        assert end.kind is EventKind.FAILED and end.data["exit_code"] == 1
        assert end.data["reason"] == ("command exited with code 1: ModuleNotFoundError: No module named "
                                      "'sweeplab_contract_missing_module'")
        assert end.data["traceback"].startswith("Traceback") and "to stdout" not in end.data["traceback"]
        head = Path(tmp_path / "t1" / "1.log").read_text().splitlines()[:4]
        assert head[1] == f"# argv: {json.dumps([sys.executable, str(script), '--lr=0.5'])}"
        assert head[2] == f"# cwd: {json.dumps(str(tmp_path))}"
        env = json.loads(head[3][len("# env: "):])
        assert env["SWEEPLAB_SEED"] == "11" and env["SWEEPLAB_TRIAL"] == "1" and "PATH" not in env

    def test_a_config_the_function_cannot_take_fails_as_bad_input(self, backend, tmp_path):
        module = tmp_path / "typed.py"
        module.write_text("from dataclasses import dataclass\n\n@dataclass\nclass Config:\n    lr: float = 0.1\n\n"
                          "def train(config: Config, run):\n    return {'loss': config.lr}\n")
        b = backend(1)
        b.submit(make_task(tmp_path, 1, f"{module}:train", config={"lrr": 3}))
        end = collect(b, [1])[1][-1]
        assert end.kind is EventKind.FAILED and end.data["error_type"] == "ConfigError"
        assert end.data["bad_input"] is True and end.data["key"] == "lrr"
        b.submit(make_task(tmp_path, 2, f"{module}:train", config={"lr": "x"}))
        end = collect(b, [2])[2][-1]
        assert end.data["bad_input"] is True and end.data["key"] == "lr"

    # ------------------------------------------------------------------ a full disk (/dev/full: every write
    # fails with ENOSPC, no mount needed)
    def test_a_command_whose_log_cannot_be_written_still_runs_and_reports(self, backend, tmp_path):
        """Its output is still drained (a program writing more than a pipe holds does not block), its reports
        still count, and the lost log is noted once; the attempt is not failed."""
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full here")
        script = tmp_path / "flood.py"
        script.write_text(
            "import json, sys\n"
            "for i in range(8):\n"
            "    sys.stdout.write(('o' * 1023 + '\\n') * 128)\n"
            "    sys.stderr.write(('e' * 1023 + '\\n') * 128)\n"
            "    print('@sweeplab ' + json.dumps({'step': i, 'loss': 1.0 / (i + 1)}), flush=True)\n"
        )
        b = backend(1)
        task = make_task(tmp_path, 1, command=[sys.executable, str(script)])
        Path(task.report_path).parent.mkdir(parents=True, exist_ok=True)
        b.submit(dataclasses.replace(task, log_path="/dev/full"))
        ev = collect(b, [1])[1]
        assert ev[-1].kind is EventKind.FINISHED, ev[-1]
        assert sorted(p[0] for e in ev if e.kind is EventKind.METRICS for p in e.data["points"]) == list(range(8))
        notes = [e.data for e in ev if e.kind is EventKind.NOTE and e.data.get("level") == "warning"]
        assert len(notes) == 1 and "/dev/full" in notes[0]["message"], notes

    @pytest.mark.parametrize("kind, says", [
        ("function", "No space left on device"), ("command", "No space left on device"),
        ("function-sigxfsz", "SIGXFSZ"), ("command-sigxfsz", "SIGXFSZ"),
    ], ids=["function", "command", "function-sigxfsz", "command-sigxfsz"])
    def test_a_trial_that_finds_the_disk_full_ends_so_not_as_a_failure(self, backend, trials_file, tmp_path,
                                                                       kind, says):
        """A function trial's print into a log on a full disk; a command that ends on "No space left on
        device"; a process killed by SIGXFSZ past a file-size limit (the worker itself, or a command's program):
        the attempt ends FAILED marked `disk_full` (the driver then stops the sweep, resumable)."""
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full here")
        b = backend(1)
        if kind == "function":
            task = dataclasses.replace(make_task(tmp_path, 1, self.fn(trials_file, "printer")), log_path="/dev/full")
        elif kind == "command":
            task = make_task(tmp_path, 1, command=[sys.executable, "-c", "import sys; sys.exit("
                                                   "'OSError: [Errno 28] No space left on device')"])
        elif kind == "function-sigxfsz":
            task = make_task(tmp_path, 1, self.fn(trials_file, "file_size_limit"),
                             config={"path": str(tmp_path / "big")})
        else:
            task = make_task(tmp_path, 1, command=["sh", "-c", f"ulimit -f 64; exec head -c 1000000 /dev/zero "
                                                               f"> {tmp_path / 'big'}"])
        b.submit(task)
        end = collect(b, [1])[1][-1]
        assert end.kind is EventKind.FAILED and end.data.get("disk_full") is True, end
        assert says in end.data["reason"], end
