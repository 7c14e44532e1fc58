"""Retries and crash loops: whether a failed attempt runs again, and when failing trials end the sweep."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

__all__ = ["CRASH_LOOP", "RetryPolicy"]

CRASH_LOOP = 3      # this many trials failing in a row with nothing completed ends the sweep
_NOT_DETERMINISTIC = ("WorkerDied", "Killed", "None")   # a lost worker or a kill says nothing about the code


class RetryPolicy:
    """`trial.retries` per trial, no retry of a failure seen twice; counts trials failing in a row."""

    def __init__(self, retries: int, *, sweep: str) -> None:
        self.retries = retries
        self.sweep = sweep
        self.consecutive_failures = 0
        self.first_failure: str | None = None   # the first trial failure, shown when nothing completes

    @staticmethod
    def deterministic(signature: tuple[str, str], earlier: Sequence[tuple[str, str]], *,
                      killed: bool = False) -> bool:
        """The attempt failed exactly as an earlier one did (same error type and message): it will again.
        Never for a process `killed` by a signal (the OOM killer may not strike a second time)."""
        return signature in earlier and signature[0] not in _NOT_DETERMINISTIC and not killed

    @staticmethod
    def killed(signal: object, exit_code: object) -> bool:
        """Whether a failed attempt's process died of a signal: a signal, or an exit code 128 + N by which
        a shell (a wrapper script, `bash -c`) reports that its child died of signal N (137: SIGKILL)."""
        return signal is not None or (isinstance(exit_code, int) and 128 < exit_code <= 128 + 64)

    def retry(self, *, failed_attempts: int, deterministic: bool, no_retry: bool, halted: bool) -> bool:
        """Whether the trial runs again after its `failed_attempts`-th failed attempt."""
        return not no_retry and not deterministic and failed_attempts <= self.retries and not halted

    def trial_failed(self, description: str) -> None:
        """A trial ended FAILED (`description`: "trial N: why", kept if it is the first)."""
        self.consecutive_failures += 1
        self.first_failure = self.first_failure or description

    def trial_ended_otherwise(self) -> None:
        self.consecutive_failures = 0

    def crash_loop(self, *, running: int) -> str | None:
        """Why the sweep ends as a crash loop, or None. The caller asks only while nothing has completed:
        that many failures in a row (more when many trials run at once, they fail together) end it."""
        limit = max(CRASH_LOOP, min(running + 1, 5))
        if self.consecutive_failures < limit:
            return None
        return (f"crash loop: the first {self.consecutive_failures} trials all failed; fix the first "
                f"error and `sweeplab resume {shlex.quote(self.sweep)}`:\n{self.first_failure}")
