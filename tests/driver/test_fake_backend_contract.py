"""FakeBackend passes the backend contract the local and Ray backends pass, with scripts that do what the
contract's trial functions (tests/fixtures/trials.py) do. This is what keeps the fake faithful: the same
event order and data shapes, the same answers to stop / go / kill / preempt, slots recycled the same way.

The command-trial tests and the config-building test are not run: a fake starts no command and runs no
user function, so there is nothing of them to check.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from sweeplab._clock import FakeClock
from sweeplab.backends.base import TrialTask
from sweeplab.backends.events import EventKind
from sweeplab.testing.backends import BackendContract
from sweeplab.testing.fake import FakeBackend, Script

TRIALS = str(Path(__file__).resolve().parents[1] / "fixtures" / "trials.py")


def fixture_scripts(backend_ref: list[FakeBackend]):
    """Scripts for the contract's trial functions, by name (the part of task.target after ':')."""

    def script(task: TrialTask) -> Script:
        name = (task.target or "").rpartition(":")[2]
        c = task.config
        if name == "quick":
            steps, x = int(c.get("steps", 3)), float(c.get("x", 0.0))
            out = Script()
            for s in range(steps):
                out = out.metrics(s, {"loss": 1.0 / (s + 1), "x": x}, after=0.01)
            return out.finish({"loss": 1.0 / steps, "x": x})
        if name == "one_arg":
            return Script().finish({"value": float(c["x"]) ** 2}, after=0.01)
        if name == "raises":
            return Script().metrics(0, {"loss": 1.0}, after=0.01).fail("ValueError", f"planted failure x={c.get('x')}")
        if name == "segfault":
            return Script().crash(sig=signal.SIGSEGV, after=0.01)
        if name == "hard_exit":
            return Script().crash(exit_code=3, after=0.01)
        if name == "sleeper":           # logs every 0.05 s until stopped; returns the step it stopped at
            out = Script()
            for s in range(int(float(c.get("seconds", 60)) / 0.05)):
                out = out.metrics(s, {"loss": 1.0 / (s + 1), "stopped_at": float(s + 1)}, after=0.05)
            return out.finish()
        if name == "hang":              # alive (heartbeats) and deaf to stops until killed
            return Script().finish(after=1e9).ignore_stop()
        if name == "rungs":             # no pause between steps; returns the last step it reached
            out = Script()
            every = int(c.get("every", 1))
            for s in range(every, int(c.get("steps", 50)) + 1, every):
                out = out.metrics(s, {"loss": 1.0 / s, "last_step": float(s)}, after=0.0)
            return out.finish()
        if name == "checkpointing":     # checkpoints every step, goes on from the last checkpoint
            ckpts = [e.data["step"] for e in backend_ref[0].events
                     if e.kind is EventKind.CHECKPOINT and e.trial == task.trial_id]
            first = ckpts[-1] + 1 if ckpts else 0
            steps, delay = int(c.get("steps", 10)), float(c.get("delay", 0.0))
            out = Script()
            for s in range(first, steps):
                out = out.metrics(s, {"loss": 1.0 / (s + 1)}, after=delay).checkpoint(s)
            return out.finish({"loss": 1.0 / steps})
        raise AssertionError(f"no script for {name!r}")

    return script


class TestFakeBackendContract(BackendContract):
    @pytest.fixture
    def make_backend(self):
        def make(n: int) -> FakeBackend:
            ref: list[FakeBackend] = []
            ref.append(FakeBackend(FakeClock(), fixture_scripts(ref), slots=n))
            return ref[0]

        return make

    @pytest.fixture
    def trials_file(self):
        return TRIALS

    @pytest.mark.skip(reason="a fake backend starts no command (covered by the local and Ray backends)")
    def test_command_trial_reports_by_stdout_lines_and_report_api(self):
        pass

    @pytest.mark.skip(reason="a fake backend starts no command (covered by the local and Ray backends)")
    def test_command_trial_nonzero_exit_is_failed_with_log_tail(self):
        pass

    @pytest.mark.skip(reason="a fake backend starts no command (covered by the local and Ray backends)")
    def test_command_trial_failure_says_why_and_its_log_says_how_it_ran(self):
        pass

    @pytest.mark.skip(reason="a fake backend runs no user function: configs are built by the real worker")
    def test_a_config_the_function_cannot_take_fails_as_bad_input(self):
        pass

    @pytest.mark.skip(reason="a fake backend writes no log and no file (covered by the local and Ray backends)")
    def test_a_command_whose_log_cannot_be_written_still_runs_and_reports(self):
        pass

    @pytest.mark.skip(reason="a fake backend writes no log and no file (covered by the local and Ray backends)")
    def test_a_trial_that_finds_the_disk_full_ends_so_not_as_a_failure(self):
        pass
