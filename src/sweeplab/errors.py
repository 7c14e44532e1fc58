"""Exception hierarchy.

    SweeplabError                 root: everything sweeplab raises on purpose
    ├── UserError                 a mistake of the user's: printed compactly, no traceback, exit code 2
    │   ├── SpecError             sweep spec (file, key path, value, expectation)
    │   ├── ConfigError           experiment config / profile / overrides
    │   └── MissingExtraError     an optional dependency is not installed (names the extra)
    ├── StoreError                the SQLite store cannot be opened, written or read
    ├── BackendError              a backend cannot start or run trials
    └── TrialError                raised inside a worker for a trial that failed (carries the reason)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendError",
    "ConfigError",
    "MissingExtraError",
    "SpecError",
    "StoreError",
    "SweeplabError",
    "TrialError",
    "UserError",
]


class SweeplabError(Exception):
    """Root of every error sweeplab raises on purpose."""

    exit_code = 1


class UserError(SweeplabError):
    """A user mistake: shown as one compact message, without a traceback."""

    exit_code = 2


def _describe(
    message: str,
    *,
    file: str | None = None,
    key: str | None = None,
    value: Any = ...,
    expected: str | None = None,
    hint: str | None = None,
) -> str:
    where = ": ".join(p for p in (file, key) if p)
    parts = [f"{where}: {message}" if where else message]
    if value is not ...:
        parts.append(f"got {value!r}")
    if expected:
        parts.append(f"expected {expected}")
    text = "; ".join(parts)
    if hint:
        text += f" ({hint})"
    return text


class SpecError(UserError):
    """The sweep spec is invalid. The message names file, key path, value and expectation."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        key: str | None = None,
        value: Any = ...,
        expected: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.file, self.key, self.value, self.expected, self.hint = file, key, value, expected, hint
        self.reason = message
        super().__init__(
            _describe(message, file=file, key=key, value=value, expected=expected, hint=hint)
        )

    def with_file(self, file: str) -> SpecError:
        """The same error, located in `file` (used when a parser learns the file late)."""
        return type(self)(
            self.reason, file=file, key=self.key, value=self.value,
            expected=self.expected, hint=self.hint,
        )


class ConfigError(SpecError):
    """The experiment config, a profile or a command-line override is invalid."""


class MissingExtraError(UserError):
    """An optional dependency is missing; the message names the extra that installs it."""

    def __init__(self, module: str, extra: str, purpose: str = "") -> None:
        self.module, self.extra = module, extra
        what = f" for {purpose}" if purpose else ""
        super().__init__(
            f"'{module}' is needed{what} but is not installed: pip install 'sweeplab[{extra}]'"
        )


class StoreError(SweeplabError):
    """The store cannot be opened, written or read (path, cause)."""


class BackendError(SweeplabError):
    """A backend cannot start or run trials."""


class TrialError(SweeplabError):
    """A trial failed; `reason` is a one-line summary."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
