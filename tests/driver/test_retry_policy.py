"""RetryPolicy: retries per trial, no retry of a failure seen twice, crash loops (pure logic)."""

from __future__ import annotations

import pytest

from sweeplab.driver.retry import CRASH_LOOP, RetryPolicy


@pytest.mark.parametrize(("failed", "deterministic", "no_retry", "halted", "expected"), [
    (1, False, False, False, True),
    (2, False, False, False, False),     # retries: 1 -> the second failure is final
    (1, True, False, False, False),      # failed the same way twice
    (1, False, True, False, False),      # bad input, a trial.timeout kill
    (1, False, False, True, False),      # time budget, crash loop, Ctrl-C
], ids=["first", "retries-spent", "deterministic", "no-retry", "halted"])
def test_retry(failed, deterministic, no_retry, halted, expected):
    policy = RetryPolicy(1, sweep="s")
    assert policy.retry(failed_attempts=failed, deterministic=deterministic, no_retry=no_retry,
                        halted=halted) is expected


@pytest.mark.parametrize(("signature", "earlier", "expected"), [
    (("ValueError", "bad"), [("ValueError", "bad")], True),
    (("ValueError", "bad"), [("ValueError", "other")], False),
    (("WorkerDied", "x"), [("WorkerDied", "x")], False),   # a lost worker says nothing about the code
    (("Killed", "x"), [("Killed", "x")], False),
], ids=["same", "different", "worker-died", "killed"])
def test_deterministic_failures(signature, earlier, expected):
    assert RetryPolicy.deterministic(signature, earlier) is expected


def test_a_crash_loop_names_the_first_failure_and_how_to_resume():
    policy = RetryPolicy(0, sweep="mine")
    for n in range(CRASH_LOOP - 1):
        policy.trial_failed(f"trial {n}: boom {n}")
        assert policy.crash_loop(running=0) is None
    policy.trial_failed("trial 9: later")
    reason = policy.crash_loop(running=0)
    assert reason is not None
    assert "first 3 trials all failed" in reason and "`sweeplab resume mine`" in reason
    assert reason.endswith("trial 0: boom 0")


def test_a_trial_that_ends_otherwise_breaks_the_run_of_failures():
    policy = RetryPolicy(0, sweep="s")
    policy.trial_failed("trial 0: a")
    policy.trial_failed("trial 1: b")
    policy.trial_ended_otherwise()
    policy.trial_failed("trial 3: c")
    assert policy.crash_loop(running=0) is None
    assert policy.first_failure == "trial 0: a"


@pytest.mark.parametrize(("running", "limit"), [(0, 3), (3, 4), (4, 5), (10, 5)])
def test_many_trials_at_once_need_more_failures_in_a_row(running, limit):
    policy = RetryPolicy(0, sweep="s")
    for n in range(limit - 1):
        policy.trial_failed(f"trial {n}: x")
    assert policy.crash_loop(running=running) is None
    policy.trial_failed("trial z: x")
    assert policy.crash_loop(running=running) is not None


@pytest.mark.parametrize(("sig", "exit_code", "killed"), [
    (9, None, True), (None, 137, True), (None, 143, True), (None, 1, False), (None, 128, False),
    (None, 255, False), (None, None, False),
], ids=["signal", "shell-sigkill", "shell-sigterm", "exit-1", "exit-128", "exit-255", "nothing"])
def test_a_process_killed_by_a_signal_never_fails_deterministically(sig, exit_code, killed):
    assert RetryPolicy.killed(sig, exit_code) is killed
    same = ("CommandFailed", "command killed by signal SIGKILL")
    assert RetryPolicy.deterministic(same, [same], killed=RetryPolicy.killed(sig, exit_code)) is not killed
