"""Task building: from a trial's parameters to the TrialTask a backend runs (config, paths, command, env)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeplab.backends.base import TrialTask
from sweeplab.driver.records import TrialRecord

if TYPE_CHECKING:
    from sweeplab.schedulers.base import Scheduler
    from sweeplab.spec import SweepSpec, TrialPolicy

__all__ = ["TaskBuilder", "heartbeat_interval"]

_HEARTBEAT_INTERVAL = 5.0


def heartbeat_interval(policy: TrialPolicy) -> float:
    """How often a worker says it is alive: often enough for `trial.heartbeat_timeout` to be fair."""
    hb = policy.heartbeat_timeout
    if hb is None:
        return _HEARTBEAT_INTERVAL
    return max(0.05, min(_HEARTBEAT_INTERVAL, hb / 4))


class TaskBuilder:
    """Everything a trial's attempt needs that follows from the spec, the working directory and the trial."""

    def __init__(self, spec: SweepSpec, *, sweep: str, root: str, cwd: str, overrides: Sequence[str],
                 smoke: bool) -> None:
        self.spec = spec
        self.sweep = sweep
        self.root = root
        self.cwd = cwd
        self.overrides = list(overrides)
        self.smoke = smoke
        self.world_size = int(spec.resources.workers or 1)
        self._config_base: dict[str, Any] | None = None
        self._python_path: list[str] | None = None
        self._target: str | None = None
        self._interpreter: tuple[str, str] | None = None   # (${interpreter}, why), resolved once
        # (spec.wandb_args, wandb_compat.params_path, .run_env, the spec's WANDB_PROJECT/WANDB_ENTITY)
        self._wandb_fns: tuple[Any, Any, Any, dict[str, str]] | None = None

    def resolve_config(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """base config < profile (both read once) < sampled params < command-line overrides."""
        from sweeplab.config import apply_overrides, deep_merge
        from sweeplab.space import unflatten

        if self._config_base is None:
            self._config_base = self._load_config_base()
        merged = deep_merge(self._config_base, unflatten(dict(params)))
        return apply_overrides(merged, self.overrides) if self.overrides else merged

    def _load_config_base(self) -> dict[str, Any]:
        from sweeplab.config import load_base_config

        return load_base_config(self.spec.config, self.spec.profile, spec_file=self.spec.source, cwd=self.cwd)

    def paths(self, t: TrialRecord) -> dict[str, str]:
        from sweeplab.store.layout import trial_paths

        return trial_paths(self.root, self.sweep, t.number, t.attempt, self._checkpoint_dir())

    def checkpoint_root(self) -> str:
        """The sweep's checkpoint directory: one directory per trial number in it."""
        from sweeplab.store.layout import trial_paths

        return trial_paths(self.root, self.sweep, 0, 1, self._checkpoint_dir())["checkpoint"].rsplit("/", 1)[0]

    def _checkpoint_dir(self) -> str | None:
        """The spec's `checkpoint_dir`, `~` expanded; a relative local path (`ckpt`) made absolute against the
        sweep's directory when trials run in their own (`trial.workdir: trial`): there it would name a directory
        in each trial's, which the driver (fences, the watch of a command trial's checkpoints) never looks at."""
        ckpt = self.spec.checkpoint_dir
        if ckpt and ckpt.startswith("~"):   # the home directory's: a command trial's SWEEPLAB_CHECKPOINT_DIR
            return os.path.expanduser(ckpt)   # held `~/...` as written, a directory named `~` in its cwd
        if ckpt and self.spec.trial.workdir == "trial" and "://" not in ckpt and not os.path.isabs(ckpt):
            return os.path.join(self.cwd, ckpt)
        return ckpt

    def import_path(self) -> list[str]:
        """Where a trial's imports are found: the working directory, then the spec file's directory."""
        if self._python_path is None:   # depends only on the spec and cwd: resolved once
            self._python_path = [self.cwd]
            if self.spec.source is not None:
                self._python_path.append(str(Path(self.spec.source).resolve().parent))
        return list(self._python_path)

    def task(self, t: TrialRecord, paths: Mapping[str, str], *, mtbf: float | None,
             decisions: Mapping[str, Any]) -> TrialTask:
        spec = self.spec
        cwd = self.cwd   # where the trial would run with trial.workdir: sweep (a program's: beside the spec)
        own_dir = spec.trial.workdir == "trial"
        wandb = None
        if spec.function:
            if self._target is None:
                self._target = self.function_target()
            kind, target, command = "function", self._target, None
            env: dict[str, str] = {}
            wandb = self._wandb_setup(t, paths)
            if own_dir:   # its WANDB_DIR: where it runs, as a command trial's (the worker runs elsewhere)
                wandb["dir"] = paths["workdir"]
        else:
            from sweeplab.spec import args_json, build_command, resolve_interpreter

            env = {}
            args_file = str(Path(paths["log"]).with_suffix(".args.json"))
            Path(args_file).parent.mkdir(parents=True, exist_ok=True)
            Path(args_file).write_text(args_json(t.params, spec.raw.get("parameters")))
            kind, target = "command", None
            if self._interpreter is None:   # PATH does not change during a sweep: looked up once
                self._interpreter = resolve_interpreter()
            interpreter, why = self._interpreter
            spec_dir = Path(spec.source).resolve().parent if spec.source else None
            if spec.program and spec_dir is not None and (spec_dir / spec.program).exists() \
                    and not (Path(self.cwd) / spec.program).exists():
                cwd = str(spec_dir)   # W&B runs `program` relative to where the agent runs; we accept both
            command = build_command(spec, t.params, interpreter=interpreter, args_json_file=args_file,
                                    program_dir=cwd if own_dir else None)
            if "${interpreter}" in (spec.effective_command or ()):   # the log header shows which Python ran it
                env["SWEEPLAB_INTERPRETER"] = f"{interpreter} ({why})"
            env.update(self._wandb_env(t, paths, paths["workdir"] if own_dir else cwd,
                                       import_dir=cwd if own_dir else None))
        original = cwd
        if own_dir:   # trial.workdir: trial: its own directory, the same for every attempt (a retry resumes there)
            cwd = paths["workdir"]
        env["SWEEPLAB_ORIGINAL_CWD"] = original
        policy = spec.trial
        return TrialTask.make(
            trial_id=t.id, number=t.number, attempt=t.attempt, sweep=self.sweep, kind=kind, target=target,
            command=command, config=t.config, params=t.params, seed=t.seed, smoke=self.smoke,
            log_path=paths["log"], report_path=paths["report"], checkpoint_dir=paths["checkpoint"],
            log_max=policy.log_max, keep_checkpoints=policy.keep_checkpoints, checkpoint_every=policy.checkpoint_every,
            mtbf=mtbf, grace=policy.grace, heartbeat_interval=heartbeat_interval(policy),
            cwd=cwd, original_cwd=original, python_path=self.import_path(), capture_dir=paths["capture"],
            artifacts_dir=paths["artifacts"], torch_profiler=policy.torch_profiler,
            world_size=self.world_size, env=env, wandb=wandb, **decisions,
        )

    def _wandb_env(self, t: TrialRecord, paths: Mapping[str, str], cwd: str, *,
                   import_dir: str | None = None) -> dict[str, str]:
        """W&B's agent environment for a command trial (offline), and its parameters file, so that
        `wandb.init()` in the program gets its parameters; `cwd` is where the program runs (WANDB_DIR).
        `import_dir`, for a trial moved into its own directory, goes last on PYTHONPATH: what the program
        imported from the directory it ran in (`python -m pkg.train`) it still finds."""
        from sweeplab.spec import wandb_args
        from sweeplab.wandb_compat import params_path, sweep_env, trial_env, write_sweep_params

        param_path = params_path(paths["log"])
        write_sweep_params(param_path, wandb_args(t.params, self.spec.raw.get("parameters")))
        python_path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), import_dir) if p) or None
        return {**trial_env(param_path=param_path, python_path=python_path, sweep=self.sweep,
                            number=t.number, cwd=cwd), **sweep_env(self.spec.raw)}

    def _wandb_setup(self, t: TrialRecord, paths: Mapping[str, str]) -> dict[str, Any]:
        """A function trial's W&B setup (TrialTask.wandb): where its parameters file goes and what it holds.
        The worker writes the file and sets the W&B environment only if the trial starts a W&B run (a file
        and an environment per trial would cost more than the rest of a no-op trial)."""
        if self._wandb_fns is None:   # imported once, not per trial
            from sweeplab.spec import wandb_args
            from sweeplab.wandb_compat import params_path, run_env, sweep_env

            self._wandb_fns = (wandb_args, params_path, run_env, sweep_env(self.spec.raw))
        wandb_args, params_path, run_env, project = self._wandb_fns
        return {"param_path": params_path(paths["log"]), "args": wandb_args(t.params, self.spec.raw.get("parameters")),
                "env": {**run_env(self.sweep, t.number), **project}}

    def decisions(self, t: TrialRecord, scheduler: Scheduler | None, metric: str | None, *,
                  supported: bool) -> dict[str, Any]:
        """Rungs at which a trial waits for the scheduler's verdict (see Scheduler.decision_steps): a function
        trial's Run, and a command trial's program that reports through `Run.from_env()` (its runner passes
        them on; a program that does not wait never asks for a verdict). In a multi-process trial rank 0
        reports and waits (its supervisor relays the verdict); the other ranks go on until they meet it in
        their next collective."""
        if scheduler is None or not supported:
            return {}
        steps = scheduler.decision_steps(t.number)
        if not steps:
            return {}
        if scheduler.decides_on_reports:   # hyperband's bands count reports, whatever the steps
            return {"decision_steps": list(steps), "decision_metric": metric, "decision_reports": True}
        return {"decision_steps": list(steps), "decision_metric": metric}

    def function_target(self) -> str:
        """A 'file.py:fn' target is found beside the spec file first, then in the working directory."""
        target = str(self.spec.function)
        module, _, fn = target.rpartition(":")
        if module.endswith(".py") and not Path(module).is_absolute():
            candidates = []
            if self.spec.source is not None:
                candidates.append(Path(self.spec.source).resolve().parent / module)
            candidates.append(Path(self.cwd) / module)
            for c in candidates:
                if c.exists():
                    return f"{c}:{fn}"
        return target
