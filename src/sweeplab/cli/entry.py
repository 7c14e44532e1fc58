"""The console entry point: exit codes 0 ok, 1 runtime failure, 2 bad input, 130 interrupted."""

from __future__ import annotations

import copy
import os
import sys
from typing import NoReturn

import typer

from sweeplab.cli import _early
from sweeplab.cli.app import app
from sweeplab.cli.output import print_error
from sweeplab.errors import SweeplabError, UserError

#: the script's name when `sl.main(train)` runs this command line for `python train.py ...` (cli/single.py):
#: its help is `train.py --help`, not `train.py run --help` (`run` would be read as an override)
script: str | None = None


def main() -> None:
    """Console entry point: user mistakes print one line and exit 2; no traceback."""
    try:
        _main()
    except SystemExit as e:
        if _early.planned is not None and (e.code is None or isinstance(e.code, int)):
            _exit_now(e.code or 0)   # a plain `sweeplab sweep` run as the console script (cli/_early.py)
        raise


def _exit_now(code: int) -> NoReturn:
    """End the process without the interpreter's teardown, which frees every module one by one (typer,
    rich, the driver...: ~7 % of a 2-trial sweep's driver), as the workers do (backends/worker.py). What the
    teardown does first still happens, in its order: threading's own exit callbacks (a ThreadPoolExecutor's
    threads wait for them) and the wait for threads that are not daemons (`threading._shutdown`, what the
    interpreter calls), then the atexit handlers (logging's flush among them), then the standard streams are
    flushed. The sweep closed its store itself (cli/start.py)."""
    import threading

    from sweeplab._exit import exit_now

    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    else:   # an interpreter without it: wait for the threads that are not daemons
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
    exit_now(code)


def _app_for(argv: list[str]) -> typer.Typer:
    """The app with only the command `argv` names, when it names one: typer builds a click command, every
    option of it, for each registered command on each start, and only the one invoked ever runs (its help,
    usage errors and exit codes are the same). Anything else (no command, an unknown or misspelt one, whose
    error lists or suggests the others; `--help`) gets the whole app."""
    if len(argv) < 2 or app.registered_groups:
        return app
    chosen = [c for c in app.registered_commands if c.callback is not None
              and (c.name or typer.main.get_command_name(c.callback.__name__)) == argv[1]]
    if len(chosen) != 1:
        return app
    view = copy.copy(app)
    view.registered_commands = chosen
    view.callback()(_one_command)   # a group still (typer runs an app of one command as that command alone)
    return view


def _one_command() -> None:
    """The group of `_app_for`'s one command: no options, does nothing."""


def _main() -> None:
    try:
        if sys.stdout is None and any(a in ("--help", "-h") for a in sys.argv[1:]):
            # started with fd 1 closed (`>&-`): click's echo writes the help nowhere and the command exited 0,
            # while every other output says so (cli/output.py)
            from sweeplab.cli.output import _CLOSED_STDOUT

            raise SweeplabError(_CLOSED_STDOUT)
        code = _app_for(sys.argv)(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print_error("interrupted", prefix="")
        sys.exit(130)
    except UserError as e:
        print_error(str(e))
        sys.exit(2)
    except SweeplabError as e:
        print_error(str(e))
        sys.exit(e.exit_code)
    except OSError as e:   # typer's help or click's echo, whose stdout cannot be written (a full disk)
        if not _stdout_fails(e):
            raise
        from sweeplab.cli.output import OutputError, _to_devnull

        _to_devnull(sys.stdout)
        print_error(str(OutputError(e)))
        sys.exit(1)
    except Exception as e:  # click usage errors
        if isinstance(e, typer.Abort):
            sys.exit(130)
        if not _is_click_error(e):
            raise
        if type(e).__name__ == "NoArgsIsHelpError":   # `sweeplab` alone: the help
            e.show()  # type: ignore[attr-defined]
            sys.exit(2)
        ctx = getattr(e, "ctx", None)
        usage = f" (see `{script or ctx.command_path} --help`)" if ctx is not None else ""
        print_error(f"{e.format_message()}{_override_hint(e)}{usage}")  # type: ignore[attr-defined]
        sys.exit(2)


def _stdout_fails(exc: OSError) -> bool:
    """Whether `exc` came from writing stdout: click's `echo` (help, usage) or a rich console of typer's
    raised it, or what stdout still buffers fails to flush the same way. The commands' own output says so
    itself (cli/output.py)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None and (tb.tb_frame.f_code.co_name == "echo"
                           or tb.tb_frame.f_code.co_filename.endswith(os.path.join("rich", "console.py"))):
        return True
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError as again:
        return again.errno == exc.errno
    return False


def _override_hint(e: BaseException) -> str:
    """`--lr=0.1` given where a config override was meant: say how overrides are written; `resume NAME lr=0.1`:
    say why a resume takes none."""
    option = getattr(e, "option_name", None)
    if (type(e).__name__ == "UsageError" and sys.argv[1:2] == ["resume"] and "unexpected extra argument" in
            str(getattr(e, "message", "")) and any("=" in a or a.startswith("~") for a in sys.argv[3:])):
        return ("; a resumed sweep keeps the overrides it was started with (its trials must share one config): "
                "other overrides are a new sweep")
    if type(e).__name__ != "NoSuchOption" or not isinstance(option, str):
        return ""
    given = next((a for a in sys.argv[1:] if a.startswith(f"{option}=")), None)
    if given is None:
        return ""
    return f"; a config override is written without dashes: write it {given.lstrip('-')}"


def _is_click_error(e: BaseException) -> bool:
    """A click usage error (bad or missing argument, unknown option or command), from click itself or
    from the copy of click that newer typer releases carry."""
    return any(c.__name__ == "ClickException" and c.__module__.split(".")[0] in ("click", "typer")
               for c in type(e).__mro__)
