"""The typer app every command registers on, and the options and helpers the commands share."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
import typer.core

from sweeplab.backends import BACKENDS
from sweeplab.cli._coerce import install as _install_fast_coercion
from sweeplab.errors import UserError

_install_fast_coercion()   # options coerced without importing pydantic (cli/_coerce.py)

class _Command(typer.core.TyperCommand):
    """A command that refuses an option given twice (`--profile a --profile b`, `-w 2 -w 4`): click keeps the last
    value in silence, so a command line said two things and the sweep did one (a script's `-pgpu` beside
    `sl.main(profile=...)`'s default, a wrapper adding `--workers` to a user's own). An option meant to repeat
    (`--direction`) and an on/off flag are unaffected."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            for param in dict.fromkeys(order):
                if (getattr(param, "param_type_name", "") == "option" and not param.multiple
                        and not getattr(param, "count", False) and not getattr(param, "is_flag", False)
                        and order.count(param) > 1):
                    given = _values_of(param, args)
                    both = f": {given[0]} and {given[1]}" if len(given) > 1 else ""
                    raise UserError(f"{max(param.opts, key=len)} given twice{both}; expected it once (the last would "
                                    "silently replace the first)")
        return super().parse_args(ctx, args)


def _values_of(option: Any, args: list[str]) -> list[str]:
    """How `option` was written in `args`, each time (`--profile a`, `-pgpu`, `--profile=b`)."""
    names = [*option.opts, *option.secondary_opts]
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg in names and i + 1 < len(args):
            out.append(f"{arg} {args[i + 1]}")
        elif any(arg.startswith(f"{n}=") for n in names if n.startswith("--")):
            out.append(arg)
        elif any(arg.startswith(n) and len(arg) > 2 for n in names if len(n) == 2):
            out.append(arg)
    return [repr(v) for v in out]


class _App(typer.Typer):
    """The app: its commands refuse an option given twice (`_Command`)."""

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", _Command)
        return super().command(*args, **kwargs)


app = _App(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},   # every command's too (inherited)
                  help="Run many ML experiments at once, from a laptop to a Ray cluster.")


def _show_version(value: bool) -> None:
    if value:
        from sweeplab import __version__
        from sweeplab.cli.output import write_stdout

        write_stdout(f"sweeplab {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_show_version,
                                       help="print sweeplab's version and exit")) -> None:
    """The app's own options (before the command)."""

BACKEND_NAMES = " | ".join(BACKENDS)   # the backend registry's names, for --backend help
STORE_HELP = "store directory (default: $SWEEPLAB_STORE or ./.sweeplab)"


def _store_arg(value: str | Path) -> Path:
    """`--store` as a path; an empty one (`--store "$UNSET_VAR"`) is refused: Path("") is the working
    directory, which took store.db, logs/ and checkpoints/ straight into it."""
    if isinstance(value, Path):
        return value
    if not value.strip():
        raise typer.BadParameter(f"{value!r} is empty; expected the store directory (e.g. --store runs/.sweeplab),"
                                 " or no --store for $SWEEPLAB_STORE or ./.sweeplab")
    return Path(value)


def store_option() -> Any:
    """The `--store` option every command takes."""
    return typer.Option(None, "--store", help=STORE_HELP, parser=_store_arg)


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
    from sweeplab.cli.output import utf8_argument

    return utf8_argument(name)   # `--name café` in the C locale: the name typed, not its surrogate escapes


def _parse_gpus(text: Optional[str]) -> Optional[list[int]]:
    """`--gpus 0,1` as [0, 1]; an empty `--gpus ''` is no GPU. A part that is not a device number (`a`, `1.5`,
    `-1`, an empty one in `0,,1`) or a device named twice (`0,0`) is refused, at --dry-run too: they were dropped
    or passed on in silence (`0,0,-1` planned two trials on GPU 0 and one on no GPU)."""
    if text is None:
        return None
    if not text.strip():
        return []
    from sweeplab._values import decimal, shown_digits
    from sweeplab.api import check_gpu_ids

    ids: list[int] = []
    for part in text.split(","):
        item = part.strip()
        number = decimal(item) if item.isascii() and item.isdigit() else None   # None: 5,000 digits too
        if number is None:
            what = "an empty GPU id" if not item else f"GPU id {shown_digits(item)!r} is not a device number"
            given = text if len(text) <= 80 else f"{text[:60]}...({len(text):,} characters)"
            raise UserError(f"--gpus: {what}; expected a comma-separated list of GPU ids (whole numbers from 0) "
                            f"such as 0,1; got {given!r}")
        ids.append(number)
    return check_gpu_ids(ids, key="--gpus", given=repr(text))


def _split_overrides(args: list[str]) -> list[str]:
    """The KEY=VALUE arguments, each decoded as the UTF-8 text it is in the C locale (`label=café` was read as
    `caf\\udcc3\\udca9`, then refused as invalid YAML): a config is UTF-8 text, as its file is."""
    from sweeplab.cli.output import utf8_argument

    for a in args:
        if "=" not in a and not a.startswith("~"):
            raise UserError(f"expected key=value (or ~key) overrides after the target; got {a!r}")
    return [utf8_argument(a) for a in args]
