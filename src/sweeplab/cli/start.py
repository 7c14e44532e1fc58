"""`sweeplab sweep`: start a sweep from a spec file, or describe it and estimate its cost (--dry-run)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import typer

from sweeplab.api import backend_name, default_name
from sweeplab.api import check_backend_plan as _check_backend_plan
from sweeplab.api import check_spec as _check_spec
from sweeplab.api import unique_name as _unique_name
from sweeplab.cli import _early
from sweeplab.cli.app import (
    BACKEND_NAMES,
    _name_option,
    _open_store,
    _parse_gpus,
    _split_overrides,
    _store_path,
    app,
    store_option,
)
from sweeplab.cli.driving import _make_backend, _run_driver
from sweeplab.cli.output import console, err, escape
from sweeplab.errors import UserError


# ---------------------------------------------------------------------------------------------- sweep
@app.command()
def sweep(
    ctx: typer.Context,
    spec_file: Optional[Path] = typer.Argument(None, metavar="SPEC",
                                               help="sweep spec (YAML; W&B sweep files work as is)"),
    overrides: Optional[list[str]] = typer.Argument(None, metavar="[KEY=VALUE]...",
                                                    help="config overrides for every trial"),
    workers: Optional[int] = typer.Option(None, "--workers", "-w",
                                          help="parallel trials (default: spec, or one per core)"),
    backend: Optional[str] = typer.Option(None, "--backend", help=f"{BACKEND_NAMES} (default: spec, or local)"),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (ray backend)"),
    name: Optional[str] = typer.Option(None, "--name", callback=_name_option,
                                       help="sweep name (default: spec name or file name)"),
    store: Optional[Path] = store_option(),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU ids to use, e.g. 0,1 (default: detected)"),
    trials: Optional[int] = typer.Option(None, "--trials", help="override budget.trials"),
    profile: Optional[str] = typer.Option(None, "--profile", "-p", help="environment profile (replaces the "
                                          "spec's profile:), e.g. local or cluster"),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="base config YAML (replaces the spec's "
                                          "config:); a pipe such as <(...) is read once"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help="where each trial runs (replaces the spec's "
                                          "trial.workdir): sweep (this directory, shared) or trial (a directory "
                                          "of its own per trial, under the store)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate and describe the sweep; run nothing"),
    smoke: bool = typer.Option(False, "--smoke", help="a few tiny trials on the CPU before the real thing"),
    hard: bool = typer.Option(False, "--hard", help="when a budget is hit, stop running trials too"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no live progress"),
    function: Optional[str] = typer.Option(None, "--function", help="run this function for each trial "
                                           "(train.py:train), e.g. for a W&B sweep run by wandb.agent(function=)"),
    strict: bool = typer.Option(False, "--strict", help="what W&B only warns about in a spec is an error"),
    optuna: Optional[str] = typer.Option(None, "--optuna", help="run this Optuna objective (module:objective "
                                         "or file.py:objective) instead of a spec; see docs/optuna.md"),
    direction: Optional[list[str]] = typer.Option(None, "--direction", help="--optuna: minimize | maximize; "
                                                  "once per objective for several (or minimize,maximize)"),
    sampler: Optional[str] = typer.Option(None, "--sampler", help="--optuna: an optuna.samplers class name"),
    pruner: Optional[str] = typer.Option(None, "--pruner", help="--optuna: an optuna.pruners class name"),
    seed: Optional[int] = typer.Option(None, "--seed", help="--optuna: the sweep's seed"),
    from_study: Optional[str] = typer.Option(None, "--from-study", help="--optuna: import an Optuna study's "
                                             "trials first (STORAGE_URL::STUDY_NAME)"),
) -> None:
    """Run a sweep from a spec file (or an Optuna objective with --optuna)."""
    from sweeplab.spec import load_spec

    for option, value in (("--trials", trials), ("--workers", workers)):   # 0: no sweep / not "per core"
        if value is not None and value < 1:
            raise UserError(f"{option} must be at least 1; got {value}")

    _refuse_misplaced(optuna is not None, {
        "--dry-run": dry_run, "--smoke": smoke, "--hard": hard, "--gpus": gpus, "--profile": profile,
        "--config": config, "--function": function, "--strict": strict}, {
        "--direction": direction, "--sampler": sampler, "--pruner": pruner, "--seed": seed, "--from-study": from_study})
    if optuna is not None:
        if spec_file is not None:
            raise UserError(f"--optuna runs an objective without a spec: drop {spec_file}")
        from sweeplab.cli.optuna_sweep import run_optuna
        from sweeplab.spec.limits import workdir_choice

        run_optuna(optuna, trials=trials, workers=workers, backend=backend, address=address, name=name,
                   store=store, quiet=quiet, direction=direction, sampler=sampler, pruner=pruner, seed=seed,
                   from_study=from_study,
                   workdir=workdir_choice(workdir, key="--workdir") if workdir is not None else None)
    if spec_file is None:
        ctx.fail("Missing argument 'SPEC' (or --optuna module:objective).")   # a usage error, exit 2
    spec = load_spec(spec_file, strict=strict, function=function)
    for warning in spec.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}", markup=True)
    for key in spec.ignored:
        if key in ("project", "entity"):   # wandb_compat.sweep_env
            err.print(f"[dim]info: {escape(spec_file)}: '{escape(key)}' is given to the programs as "
                      f"WANDB_{key.upper()}, as W&B's agent gives it; offline, nothing is sent[/dim]", markup=True)
            continue
        err.print(f"[dim]info: {escape(spec_file)}: '{escape(key)}' is a W&B setting that does not apply offline; "
                  "ignored[/dim]", markup=True)
    if config is not None:   # as given (absolute), not resolved: a pipe's /dev/fd/N is not a file's path
        spec = spec.with_overrides(config=config.absolute())
    if profile is not None:
        spec = spec.with_overrides(profile=profile or None)   # the same spec on a laptop and on a cluster
    if workdir is not None:
        import dataclasses

        from sweeplab.spec.limits import workdir_choice

        spec = spec.with_overrides(trial=dataclasses.replace(spec.trial, workdir=workdir_choice(workdir,
                                                                                                key="--workdir")))
    if trials is not None:
        spec = _with_budget_trials(spec, trials)
    if smoke:
        spec = _with_budget_trials(spec, min(spec.budget.trials or 2, 2))
    overrides = _split_overrides(overrides or [])
    _check_spec(spec, overrides,   # config files, overrides, scheduler, monitors: before the store exists
                config_key="config" if config is None else "--config",
                profile_key="profile" if profile is None else "--profile", backend=backend)
    if name is not None:
        from sweeplab.spec import check_sweep_name

        check_sweep_name(name, key="--name")
    if dry_run:
        # what the run refuses before it writes anything: an unknown backend, a local plan the machine
        # cannot hold (a Ray cluster is not contacted)
        _check_backend_plan(spec, workers=workers, backend=backend, gpu_ids=_parse_gpus(gpus))
        _describe(spec, spec_file, overrides)
        _check_typed_config(spec, overrides)
        _estimate(spec, spec_file, store, workers)
        raise typer.Exit(0)
    backend_name(spec, backend)   # an unknown --backend is refused before the store is created
    # built before the store is opened too: too many workers for this machine, or a Ray address that does not
    # answer, is bad input and writes nothing (a local backend starts no process until be.start())
    be = _make_backend(spec, workers=workers, backend=backend, address=address, gpus=gpus, smoke=smoke,
                       store_root=_store_path(store))
    try:
        st = _open_store(store)
    except BaseException:
        be.shutdown(grace=0.0)
        raise
    try:
        _start_sweep(spec, spec_file, st, be, name=name, overrides=overrides, smoke=smoke, hard=hard, quiet=quiet)
    finally:
        st.close()   # closed here, not by the interpreter's teardown (which a sweep skips: cli/entry.py)


def _refuse_misplaced(is_optuna: bool, spec_only: dict[str, Any], optuna_only: dict[str, Any]) -> None:
    """An option of the other kind of sweep is bad input, not dropped: `--dry-run` with `--optuna` ran the
    objective's trials, `--seed` with a spec left the spec's seed in place."""
    if is_optuna:
        given = [k for k, v in spec_only.items() if v not in (None, False)]
        if given:
            raise UserError(f"{given[0]} does not apply to --optuna (an Optuna objective run without a spec); "
                            "drop it")
    else:
        given = [k for k, v in optuna_only.items() if v not in (None, [])]
        if given:
            raise UserError(f"{given[0]} applies to --optuna only; a spec sets the sweep's seed, goal and "
                            "method in its file (seed:, metric.goal, method:)")


def _start_sweep(spec: Any, spec_file: Path, st: Any, be: Any, *, name: Optional[str],
                 overrides: Optional[list[str]], smoke: bool, hard: bool, quiet: bool) -> None:
    try:
        sweep_name = _unique_name(st, name or default_name(spec))   # cli_program/sweep.yaml -> cli_program
    except BaseException:
        be.shutdown(grace=0.0)
        raise
    if be.name == "local":
        be.start()   # workers boot while the driver sets up (those cli/_early.py started are taken over)
    else:
        _early.release()
    try:
        _run_driver(spec, st, be, sweep_name=sweep_name, overrides=list(overrides or []),
                    smoke=smoke, hard=hard, quiet=quiet, create=True, spec_path=str(spec_file.resolve()))
    finally:
        be.shutdown(grace=0.0)


def _with_budget_trials(spec: Any, n: int) -> Any:
    import dataclasses

    return spec.with_overrides(budget=dataclasses.replace(spec.budget, trials=n))


def _describe(spec: Any, spec_file: Path, overrides: Sequence[str] = ()) -> None:
    from sweeplab.monitors import parse_monitors
    from sweeplab.schedulers import make_scheduler

    file = str(spec_file)
    metric, goal = spec.metric.name, spec.metric.goal
    scheduler = (make_scheduler(spec.early_terminate, file=file, metric=metric, goal=spec.scheduler_goal)
                 if spec.early_terminate else None)
    monitors = parse_monitors(list(spec.monitors), file=file, metric=metric, goal=goal) if spec.monitors else []
    points = _describe_points(spec, overrides)
    console.print(f"[bold]{escape(spec.name or spec_file.stem)}[/bold]: valid", markup=True)
    console.print(f"  method   {spec.method}" + (f" (seed {spec.seed})" if spec.seed is not None else ""))
    if spec.multi_objective:
        console.print("  metric   " + ", ".join(f"{o.goal.value} {o.name}" for o in spec.objectives)
                      + " (several objectives: `best` prints the Pareto front)")
    elif spec.metric.name:
        console.print(f"  metric   {spec.metric.goal.value} {spec.metric.name}")
    for c in spec.constraints:
        console.print(f"  constraint {c.describe()} (a trial past it is infeasible)")
    target = spec.function or " ".join(spec.command or ()) or spec.program
    console.print(f"  runs     {target}")
    if spec.trial.workdir == "trial":
        console.print("  workdir  each trial in a directory of its own: <store>/workdirs/<sweep>/<trial>/ "
                      "(trial.workdir: trial)", markup=False)
    if spec.is_function:   # what every trial's config is built from, in merge order (docs/config.md)
        layers = [f"base {spec.config}" if spec.config is not None else "no base config",
                  f"profile {spec.profile}" if spec.profile else "no profile",
                  "overrides " + " ".join(overrides) if overrides else "no overrides"]
        console.print("  config   " + " < ".join(layers[:2]) + " < parameters < " + layers[2], markup=False)
    console.print("  search space:")
    for line in spec.space.describe():
        console.print(f"    {line}")
    if spec.method == "grid":
        console.print(f"  grid     {spec.space.grid_size()} combinations")
    for line in points:
        console.print(line, markup=False)
    b = spec.budget
    limits = {"trials": b.trials, "time": b.time, "cpu_hours": b.cpu_hours, "gpu_hours": b.gpu_hours,
              **{f"cost.{k}": v for k, v in (b.cost or {}).items()}}
    console.print("  budget   " + (" ".join(f"{k}={v:g}" for k, v in limits.items() if v is not None) or "none"))
    if scheduler is not None:
        console.print(f"  early stopping: {scheduler.describe()}")
        if spec.multi_objective:   # the rung rule with several objectives (docs/spec.md#several-objectives)
            named = spec.early_terminate.get("metric")
            rank = not named and hasattr(scheduler, "judge_by_rank")
            console.print("  rung rule: " + (
                "non-dominated rank of " + ", ".join(str(o.name) for o in spec.objectives) if rank else
                f"{named or spec.metric.name} alone"
                + (" (early_terminate.metric)" if named else " (the first objective)")))
    for m in monitors:
        console.print(f"  monitor: {getattr(m, 'name', m)}")


def _describe_points(spec: Any, overrides: Sequence[str]) -> list[str]:
    """`points_to_evaluate` as the first trials will run them (a point the base config cannot complete is the
    error the sweep would stop on)."""
    from sweeplab.api import completed_points

    points = completed_points(spec, overrides)
    lines = [f"  first    {len(points)} point(s) to evaluate, before the searcher's:"] if points else []
    lines += [f"    trial {i}: " + ", ".join(f"{k}={v!r}" for k, v in p.items()) for i, p in enumerate(points)]
    return lines


def _check_typed_config(spec: Any, overrides: list[str]) -> None:
    """--dry-run: every combination of categorical values the spec can produce fits the function's typed config
    (`values: [32, auto]` for an int field, a parameter no field declares), as `--smoke` checks before its trials.
    A target that does not import here (a package only the cluster has) is a note: the dry-run checks the spec."""
    if not spec.function:
        return
    from sweeplab.driver.tasks import TaskBuilder
    from sweeplab.smoke import check_config_combinations

    tasks = TaskBuilder(spec, sweep="", root="", cwd=os.getcwd(), overrides=overrides, smoke=False)
    target = tasks.function_target()
    problems, notes = check_config_combinations(spec, tasks.resolve_config, tasks.import_path(), target)
    if problems and problems[0].startswith("cannot import"):
        console.print(f"  config   not checked against a typed config: {problems[0]}", markup=False)
        return
    for line in problems:
        err.print(f"config check: {line}", markup=False)
    if problems:
        raise UserError(f"the config of the sweep's trials does not fit the function's typed config ({len(problems)} "
                        "problem(s) above)")
    if not notes or "declares no typed config" not in notes[-1]:
        from sweeplab.backends.targets import load_target
        from sweeplab.config import typed_schema_of

        schema = typed_schema_of(load_target(target, tasks.import_path()))
        console.print(f"  config   the parameters fit {getattr(schema, '__name__', 'the typed config')}")


def _estimate(spec: Any, spec_file: Path, store: Optional[Path], workers: Optional[int]) -> None:
    """Cost estimate from this spec's latest smoke run (recorded next to the spec, or in the store)."""
    from sweeplab.smoke import estimate_lines, load_smoke_timing

    db = _store_path(store) / "store.db"
    st = _open_store(store, readonly=True) if db.exists() else None
    try:
        timing = load_smoke_timing(spec_file, st)
    finally:
        if st is not None:
            st.close()
    if timing is None:
        console.print("  cost     unknown: run `sweeplab sweep SPEC --smoke` first to time a step")
        return
    n = workers or spec.workers or max(1, os.cpu_count() or 1)
    for i, line in enumerate(estimate_lines(spec, timing, n)):
        console.print(("  cost     " if i == 0 else "           ") + line, markup=False)
