"""W&B-only warnings: what W&B accepts with a warning (an unknown key, a command passing no parameters), and what
its client refuses that sweeplab runs (min and max of mixed types)."""

from __future__ import annotations

import re
from collections.abc import Mapping
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

    def _program_text(self, name: str) -> str | None:
        """The program's text, found where the sweep runs it: from the working directory (as W&B's agent runs
        `program`, and sweeplab too), else beside the spec file (which sweeplab also accepts)."""
        for path in (Path(name), *(() if self.base_dir is None else (self.base_dir / name,))):
            try:
                return path.read_text(errors="replace")
            except OSError:
                continue
        return None

    def mixed_bounds(self, raw: Any) -> None:
        """`lr: {min: 0, max: 0.1}` with no distribution: W&B's client refuses the file ("Parameter lr is
        ambiguous, please specify bounds as both floats ... or ints": wandb/apis/public/sweeps.py,
        _validate_config_and_fill_distribution, run by `wandb sweep` and `wandb.sweep`, on top-level
        parameters only). sweeplab draws from uniform, which is what the bounds say, and warns."""
        if not isinstance(raw, Mapping):
            return
        for name, node in raw.items():
            if not isinstance(node, Mapping) or "distribution" in node or "min" not in node or "max" not in node:
                continue
            kinds = {_bound_kind(node["min"]), _bound_kind(node["max"])}
            if kinds == {"int", "float"}:
                self.warn("min and max mix an integer and a float without a distribution", f"parameters.{name}",
                          value={"min": node["min"], "max": node["max"]},
                          expected="both floats (min: 0.0) for uniform, both integers for int_uniform, "
                                   "or a distribution",
                          note=f"W&B refuses this file (\"Parameter {name} is ambiguous\"); sweeplab draws from "
                               "uniform")

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
            text = self._program_text(name)
            if text is None:
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


def _bound_kind(value: Any) -> str | None:
    """"int" or "float" as W&B's client tells them apart (a bool is neither here: it is no bound)."""
    if isinstance(value, bool):
        return None
    return "int" if isinstance(value, int) else "float" if isinstance(value, float) else None
