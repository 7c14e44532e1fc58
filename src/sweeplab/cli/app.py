"""The typer app every command registers on, and the options and helpers the commands share."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sweeplab.backends import BACKENDS
from sweeplab.cli._coerce import install as _install_fast_coercion
from sweeplab.errors import UserError

_install_fast_coercion()   # options coerced without importing pydantic (cli/_coerce.py)

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},   # every command's too (inherited)
                  help="Run many ML experiments at once, from a laptop to a Ray cluster.")


def _show_version(value: bool) -> None:
    if value:
        from sweeplab import __version__

        print(f"sweeplab {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_show_version,
                                       help="print sweeplab's version and exit")) -> None:
    """The app's own options (before the command)."""

BACKEND_NAMES = " | ".join(BACKENDS)   # the backend registry's names, for --backend help
STORE_HELP = "store directory (default: $SWEEPLAB_STORE or ./.sweeplab)"


def _store_path(store: Optional[Path]) -> Path:
    from sweeplab.store import default_store_dir

    # `--store=~/runs`: no shell expands a tilde after `=`; a directory named `~` is never what was meant
    return store.expanduser() if store is not None else default_store_dir()


def _open_store(store: Optional[Path], readonly: bool = False):  # type: ignore[no-untyped-def]
    from sweeplab.store import Store

    return Store.open(_store_path(store), readonly=readonly)


def _known_sweep(store: Optional[Path], name: str) -> None:
    """A UserError unless the store exists and holds a sweep called `name` (with a "did you mean"): checked
    read-only, so a misspelt name or --store creates nothing."""
    from sweeplab.store import queries

    st = _open_store(store, readonly=True)
    try:
        if st.sweep_row(name) is None:
            raise queries.unknown_sweep(st, name)
    finally:
        st.close()


def _name_option(name: Optional[str]) -> Optional[str]:
    """`--name` as given, or a UserError for a blank one (as the spec's blank `name:` is refused): a sweep that
    no table shows and no command line can name."""
    if name is not None and not name.strip():
        raise UserError(f"--name: expected a sweep name (a non-empty string); got {name!r}")
    return name


def _parse_gpus(text: Optional[str]) -> Optional[list[int]]:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--gpus: expected a comma-separated list of GPU ids such as 0,1; got {text!r}") from None


def _split_overrides(args: list[str]) -> list[str]:
    for a in args:
        if "=" not in a and not a.startswith("~"):
            raise UserError(f"expected key=value (or ~key) overrides after the target; got {a!r}")
    return list(args)
