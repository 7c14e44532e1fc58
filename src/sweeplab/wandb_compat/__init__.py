"""W&B programs in a sweep, unchanged and offline: `wandb.init`, `wandb.config`, `wandb.log`, `run.summary`.

sweeplab does what W&B's agent does for the real `wandb` client the user has installed (nothing of ours
is named `wandb`): it writes the trial's parameters in W&B's format to a file named by
WANDB_SWEEP_PARAM_PATH, which `wandb.init()` reads into `wandb.config` (sweep values win over
`wandb.init(config=defaults)`), with WANDB_MODE=offline so nothing is sent. WANDB_DIR is left as the user
has it: W&B keeps a run's files under ./wandb in the program's working directory (programs read
`wandb/debug.log`, `wandb/latest-run`), and `wandb sync wandb/offline-run-*` uploads them later.
Sources: wandb/wandb_agent.py (Agent._command_run) and wandb/sdk/lib/config_util.py (save_config_file_from_dict).

What the program logs reaches the trial through `_boot/_sweeplab_wandb_hook.py`: command trials get
`_boot/` first on PYTHONPATH (its `sitecustomize` arms the hook, then runs the one it hides); function
trials install it in the worker (`function_trial`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from sweeplab.wandb_compat._boot._sweeplab_wandb_hook import PARAMS_ENV

__all__ = ["BOOT_DIR", "function_trial", "install_hook", "summary_metrics", "trial_env", "write_sweep_params"]

#: the folder put first on a command trial's PYTHONPATH
BOOT_DIR = Path(__file__).resolve().parent / "_boot"


def write_sweep_params(path: str | Path, args: Mapping[str, Any]) -> None:
    """Write `args` (W&B's top-level parameter names -> values, see spec.wandb_args) as the YAML file W&B's
    agent writes for WANDB_SWEEP_PARAM_PATH (the hook's `write_params`, which function trials call at
    `wandb.init`)."""
    from sweeplab.wandb_compat._boot._sweeplab_wandb_hook import write_params

    write_params(str(path), args)


def trial_env(*, param_path: str | Path, python_path: str | None = None,
              command: bool = True, params: str | None = None) -> dict[str, str]:
    """The variables a trial gets so that a W&B program runs as under W&B's agent, offline.

    `python_path` is the PYTHONPATH the trial would otherwise have; command trials get BOOT_DIR in front.
    No WANDB_DIR: W&B's agent sets none, so a run's files go where the program expects them (./wandb)."""
    env = {
        "WANDB_MODE": "offline",                 # nothing is sent anywhere
        "WANDB_SWEEP_PARAM_PATH": str(param_path),
    }
    if command:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT_DIR), python_path) if p)
    if params is not None:   # a function trial: the hook writes the file at wandb.init (see _boot's hook)
        env[PARAMS_ENV] = params
    return env


def summary_metrics(final: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a W&B run's summary, as the hook hands it over (nan/inf arrive as strings; keys
    starting with "@" are the hook's own, such as the exit code)."""
    out: dict[str, float] = {}
    for k, v in final.items():
        if k.startswith("@"):
            continue
        with contextlib.suppress(TypeError, ValueError):
            out[k] = float(v)
    return out


def install_hook() -> None:
    """Arm the hook in this process (a worker about to import a function trial's module, which may call
    `wandb.sweep`/`wandb.agent` at import as W&B's function-style scripts do)."""
    from sweeplab.wandb_compat._boot import _sweeplab_wandb_hook as hook

    hook.install()


@contextlib.contextmanager
def function_trial(log: Any, stopped: Any = None) -> Iterator[dict[str, Any]]:
    """Around one function trial in the worker: W&B runs it starts report through `log(metrics, step=)`;
    their summary (and a `wandb.finish(exit_code=N)`) lands in the yielded dict when the trial ends.

    As W&B's agent does between function runs, wandb's setup is torn down first, so that `wandb.init()`
    reads this trial's WANDB_SWEEP_PARAM_PATH rather than the previous one's. When `stopped()` turns true
    (the sweep stopped the trial), the run's next `wandb.log` ends the function, as W&B's agent ends a
    stopped run: the trial ends stopped, not failed."""
    from sweeplab.wandb_compat._boot import _sweeplab_wandb_hook as hook

    final: dict[str, Any] = {}
    if "wandb" in sys.modules:
        with contextlib.suppress(Exception):
            sys.modules["wandb"].teardown()
    hook.install(sink=lambda metrics, step: log(metrics, step=step), final=final.update, stopped=stopped)
    ok = False
    try:
        try:
            yield final
        except hook.TrialStopped:
            final.pop("@exit_code", None)   # `with wandb.init()` saw the exception: not a failure
        ok = True
    finally:
        wandb = sys.modules.get("wandb")
        if wandb is not None and getattr(wandb, "run", None) is not None:
            with contextlib.suppress(Exception):   # a run the function left open ends with it
                wandb.run.finish(exit_code=0 if ok else 1)
        hook.uninstall_sinks()
