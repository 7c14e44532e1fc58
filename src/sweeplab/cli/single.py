"""`sweeplab run`: one trial of a function, recorded as a single-trial sweep; and `sl.main(train)`, the same
from a script's own command line (`python train.py lr=0.01`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

from sweeplab.api import check_spec as _check_spec
from sweeplab.api import refuse_in_trial_import
from sweeplab.api import unique_name as _unique_name
from sweeplab.cli.app import _name_option, _open_store, _split_overrides, app, store_option
from sweeplab.cli.driving import _run_driver
from sweeplab.cli.output import console
from sweeplab.errors import UserError


# ---------------------------------------------------------------------------------------------- run
@app.command(context_settings={"allow_extra_args": False})
def run(
    target: str = typer.Argument(..., help="a function, e.g. train.py:train or pkg.module:train"),
    overrides: Optional[list[str]] = typer.Argument(None, metavar="[KEY=VALUE]...",
                                                help="config overrides, e.g. lr=0.01 model.hidden=256"),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="base config YAML"),
    profile: Optional[str] = typer.Option(None, "--profile", "-p", help="environment profile name"),
    store: Optional[Path] = store_option(),
    smoke: bool = typer.Option(False, "--smoke", help="a tiny run on the CPU (run.smoke is set)"),
    name: Optional[str] = typer.Option(None, "--name", callback=_name_option,
                                       help="name of the recorded run (default: run-FUNCTION)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no live progress"),
) -> None:
    """Run one trial of a function (recorded as a single-trial sweep): the same code path as a sweep."""
    from sweeplab.backends import preload_of
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.spec import parse_spec

    if ":" not in target and Path(target).suffix in (".yaml", ".yml"):   # a spec given to the wrong command
        raise UserError(f"{target}: `sweeplab run` runs one trial of a function (train.py:train); a sweep spec is "
                        f"run by `sweeplab sweep {target}`")
    raw: dict[str, Any] = {"function": target, "method": "grid", "parameters": {}, "run_cap": 1}
    if config is None:
        config = _config_beside(target)
        if config is not None:   # said even with -q: which config a run used is not progress
            console.print(f"config: {config} (beside the function's file; --config chooses another)",
                          markup=False)
    if config is not None:
        # a pipe (`--config <(...)`, /dev/fd/63) is named as given: resolved, it is /proc/PID/fd/pipe:[N], no file
        raw["config"] = str(config.resolve() if config.is_file() else config.absolute())
    if profile:
        raw["profile"] = profile
    spec = parse_spec(raw, file="<sweeplab run>", base_dir=Path.cwd())
    overrides = _split_overrides(overrides or [])
    _check_spec(spec, overrides, config_key="--config", profile_key="--profile")   # before the store exists
    if name is not None:
        from sweeplab.spec import check_sweep_name

        check_sweep_name(name, key="--name")
    st = _open_store(store)
    where = target.rpartition(":")[0] or target
    stem = (Path(where).stem if where.endswith(".py") else where.rpartition(".")[2]).replace(".", "-") or "run"
    sweep_name = _unique_name(st, name or f"run-{stem}")
    be = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]), hide_gpus=smoke, preload=preload_of(spec))
    _run_driver(spec, st, be, sweep_name=sweep_name, overrides=overrides, smoke=smoke,
                hard=False, quiet=quiet, create=True, spec_path=None, single=True)


def _config_beside(target: str) -> Optional[Path]:
    """`config.yaml` beside a `FILE.py:function` target, the layout of the examples and of `sl.main(train,
    config="config.yaml")`: the base config of a `sweeplab run` given no --config. None elsewhere."""
    where = target.rpartition(":")[0]
    if not where.endswith(".py"):
        return None
    beside = Path(where).parent / "config.yaml"
    return beside if beside.is_file() else None


# ---------------------------------------------------------------------------------------- sl.main
def script_main(fn: Callable[..., Any] | str, argv: Sequence[str] | None = None, *, config: str | Path | None = None,
         profile: str | None = None) -> NoReturn:
    """Run one trial of `fn` from the command line, as `sweeplab run FILE:FN` does, and exit with its code.

        if __name__ == "__main__":
            sl.main(train, config="configs/base.yaml", profile="local")   # python train.py lr=0.01 model.hidden=256

    `argv` (default `sys.argv[1:]`) takes what `sweeplab run` takes after its target: `key=value` overrides,
    `--config`, `--profile`, `--store`, `--smoke`, `--name`, `-q`. `config` and `profile` are the defaults
    of `--config` and `--profile`; a relative `config` is found beside the function's file (as Hydra's
    `config_path`), so the script runs from any directory. The trial runs in a worker process and is recorded
    as a single-trial sweep: a plain `python train.py` and a sweep share one code path. Exit codes are the
    CLI's (0 completed, 1 failed, 2 bad input, 130 interrupted).
    """
    from sweeplab.cli.output import print_error
    from sweeplab.notebook import target_of

    try:
        if os.environ.get("SWEEPLAB_REPORT_FILE"):
            name = getattr(fn, "__name__", fn)
            raise UserError(f"sl.main({name}) was called inside a sweeplab command trial, where it would start a "
                            f"sweep of its own: name the function in the spec instead (function: FILE.py:{name})")
        refuse_in_trial_import()
        target = target_of(fn)
        if argv is not None and (isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence)
                                 or not all(isinstance(a, str) for a in argv)):   # "lr=1" was read letter by letter
            raise UserError(f"sl.main: argv {argv!r:.100} is not a list of strings; expected a command line such as "
                            "['lr=0.01', '--smoke'] (default: sys.argv[1:])")
        if config is not None and not isinstance(config, (str, os.PathLike)):
            raise UserError(f"sl.main: config {config!r:.100} is not a path; expected e.g. 'configs/base.yaml'")
        if profile is not None and not isinstance(profile, str):
            raise UserError(f"sl.main: profile {profile!r:.100} is not a profile's name; expected e.g. 'local'")
    except UserError as e:   # as the CLI reports bad input: one line, exit 2
        print_error(str(e))
        sys.exit(2)
    rest = list(sys.argv[1:] if argv is None else argv)
    if "--help" in rest or "-h" in rest:   # the script's own usage, not `sweeplab run`'s (with a TARGET)
        _script_help(Path(sys.argv[0]).name, target, config=config, profile=profile)
        sys.exit(0)
    if config is not None and not _given(rest, "--config", "-c"):
        path = Path(config)
        if not path.is_absolute():
            path = _file_of(fn, target).parent / path
        rest += ["--config", str(path)]
    if profile is not None and not _given(rest, "--profile", "-p"):
        rest += ["--profile", profile]
    from sweeplab.cli import entry

    entry.script = Path(sys.argv[0]).name
    sys.argv = [sys.argv[0], "run", target, *rest]
    entry.main()
    sys.exit(0)   # cli_main always exits; this keeps the NoReturn promise for type checkers


def _script_help(prog: str, target: str, *, config: str | Path | None, profile: str | None) -> None:
    """`python train.py --help`: the options of `sweeplab run` under the script's name, without its TARGET."""
    import copy

    import click
    import typer.main

    from sweeplab.cli.app import app

    run_command = typer.main.get_command(app).commands["run"]   # type: ignore[attr-defined]
    shown = copy.copy(run_command)
    shown.params = [p for p in run_command.params if p.name != "target"]
    defaults = "".join(f" {flag} {value}" for flag, value in (("--config", config), ("--profile", profile))
                       if value is not None)
    function = target.rpartition(":")[2]
    shown.help = (f"One trial of {function}(config, run), recorded as a single-trial sweep, as `sweeplab run "
                  f"{prog}:{function}` runs it." + (f"\n\nDefaults from sl.main:{defaults} (a relative config "
                                                    "is found beside the script)." if defaults else ""))
    with click.Context(shown, info_name=prog) as ctx:
        click.echo(shown.get_help(ctx))


def _given(args: Sequence[str], *options: str) -> bool:
    """True when `args` give one of `options`: `--profile gpu`, `--profile=gpu` or `-pgpu` (a short option's value
    attached, which a default appended after it used to replace in silence)."""
    short = tuple(o for o in options if len(o) == 2 and o[0] == "-" and o[1] != "-")
    return any(a in options or a.startswith(tuple(f"{o}=" for o in options)) or (a.startswith(short) and len(a) > 2)
               for a in args)


def _file_of(fn: Any, target: str) -> Path:
    """The file that defines `fn` (its directory anchors a relative default config), else the working directory."""
    import inspect

    try:
        file = inspect.getsourcefile(fn) if callable(fn) else None
    except TypeError:
        file = None
    where = target.rpartition(":")[0]
    if file is None and where.endswith(".py"):
        file = where
    if file is None:
        file = getattr(sys.modules.get(where), "__file__", None)
    return Path(file).resolve() if file else Path.cwd() / "_"
