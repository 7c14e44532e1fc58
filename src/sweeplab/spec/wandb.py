"""W&B-only warnings: what W&B accepts with a warning (an unknown key, a command passing no parameters)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sweeplab.spec.command import passes_params
from sweeplab.spec.reader import _Reader


class _WandbWarnings(_Reader):
    """What W&B runs anyway: a warning on the spec, an error under `strict`."""

    def warn(self, message: str, key: str | None, *, note: str = "ignored, as W&B does", **kw: Any) -> None:
        """What W&B accepts with a warning: a warning here, an error under `strict`. `note` says what is
        done with it (what W&B does)."""
        err = self.error(message, key, **kw)
        if self.strict:
            raise err
        self.warnings.append(f"{err} ({note}; --strict makes this an error)")

    def param_warnings(self, function: str | None, program: str | None,
                       command: tuple[str, ...] | None) -> tuple[str, ...]:
        """A command that passes no parameters to a program that never reads wandb.config runs every trial
        with the same settings: say so (W&B's agent runs it silently)."""
        if function is not None or command is None or passes_params(command):
            return ()
        runs_program = program is not None and any("${program}" in c for c in command)   # else it names another
        files = ([program] if program is not None and runs_program else []) \
            + [c for c in command if c.endswith(".py") and "${" not in c]
        read = []
        for name in files:
            path = Path(name) if self.base_dir is None else self.base_dir / name
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if "wandb" in text and re.search(r"\.config\b", text):
                return ()   # it reads its parameters from wandb.config (WANDB_SWEEP_PARAM_PATH)
            read.append(name)
        if not read:
            return ()   # no program could be read (not there yet, or not a .py file): nothing to say of it
        shown = read[0]
        return (f"{self.file or 'spec'}: command: passes no parameters (no ${{args}}, ${{args_json}} or other "
                f"${{args...}} macro) and {shown} does not read wandb.config, so every trial runs with the same "
                "settings; add ${args} to command (or read the parameters from wandb.config)",)
