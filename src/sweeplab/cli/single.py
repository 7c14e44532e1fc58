"""`sweeplab run`: one trial of a function, recorded as a single-trial sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from sweeplab.api import check_spec as _check_spec
from sweeplab.api import unique_name as _unique_name
from sweeplab.cli.app import STORE_HELP, _open_store, _split_overrides, app
from sweeplab.cli.driving import _run_driver


# ---------------------------------------------------------------------------------------------- run
@app.command(context_settings={"allow_extra_args": False})
def run(
    target: str = typer.Argument(..., help="a function, e.g. train.py:train or pkg.module:train"),
    overrides: Optional[list[str]] = typer.Argument(None, metavar="[KEY=VALUE]..."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="base config YAML"),
    profile: Optional[str] = typer.Option(None, "--profile", "-p", help="environment profile name"),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    smoke: bool = typer.Option(False, "--smoke"),
    name: Optional[str] = typer.Option(None, "--name"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Run one trial of a function (recorded as a single-trial sweep): the same code path as a sweep."""
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.spec import parse_spec

    raw: dict[str, Any] = {"function": target, "method": "grid", "parameters": {}, "run_cap": 1}
    if config is not None:
        raw["config"] = str(config.resolve())
    if profile:
        raw["profile"] = profile
    spec = parse_spec(raw, file="<sweeplab run>", base_dir=Path.cwd())
    overrides = _split_overrides(overrides or [])
    _check_spec(spec, overrides)   # before the store exists: nothing is written for bad input
    st = _open_store(store)
    where = target.rpartition(":")[0] or target
    stem = (Path(where).stem if where.endswith(".py") else where.rpartition(".")[2]).replace(".", "-") or "run"
    sweep_name = _unique_name(st, name or f"run-{stem}")
    be = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]), hide_gpus=smoke)
    _run_driver(spec, st, be, sweep_name=sweep_name, overrides=overrides, smoke=smoke,
                hard=False, quiet=quiet, create=True, spec_path=None, single=True)
