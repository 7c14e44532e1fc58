"""Start a sweep's workers before the command line is imported (issue 18, item 4: small sweeps feel instant).
`sweeplab.cli` imports this module before anything else, and importing it is what starts them.

`sweeplab sweep SPEC -w 2` spends most of its start importing typer, rich, the spec parser and the driver,
one core busy; each worker then spends about as long starting Python and importing its own modules. Started
first, from the arguments alone, the workers boot on the other cores while the command line imports and
reads the spec, instead of after it: at most cores - 1 of them at first (`first_batch`), the others once the
command line is imported (`start_rest`). The backend the sweep builds later takes them over only when it
would have started exactly these workers (same count at most, same environment: `backends/local.py`,
`prestart`); anything else, a sweep that ends early (bad input, exit 2) or runs elsewhere, ends them (SIGKILL
to their process group, as the backend's own shutdown does). `planned` also tells `cli/entry.py` that this
process is a plain sweep, which it ends without the interpreter's teardown.

Only a plain `sweeplab sweep` does this; a command run for help, a dry run, an Optuna objective, a smoke run,
GPUs named on the command line or a backend other than local start their workers, if any, as before.
"""

from __future__ import annotations

import os
import re
import sys

#: options after which `sweeplab sweep` starts no local worker of the plain kind
_SKIP = ("--help", "-h", "--dry-run", "--optuna", "--smoke", "--gpus")
#: the options of `sweeplab sweep` that take a value (cli/start.py); the others are flags
_VALUED = ("-w", "--workers", "--backend", "--address", "--name", "--store", "--gpus", "--trials", "--function",
           "-c", "--config", "-p", "--profile",
           "--optuna", "--direction", "--sampler", "--pruner", "--seed", "--from-study")
#: workers started on a guess (neither -w nor a spec's `workers:`) are at most this many
GUESS_CAP = 8
#: top-level `workers: N` and `backend: NAME` lines of a spec, read without a YAML parser (a guess only)
_SPEC_WORKERS = re.compile(r"^workers:[ \t]*([0-9]{1,18})[ \t]*(?:#.*)?$", re.M)   # (int() of 5,000 digits raises)
_SPEC_BACKEND = re.compile(r"^backend:[ \t]*[\"']?([A-Za-z_]\w*)", re.M)
#: the top-level `function: file.py:fn` line (unquoted or quoted), and whether a spec names `preload` at all
_SPEC_FUNCTION = re.compile(r"^function:[ \t]*[\"']?([^\s\"'#]+)", re.M)
_SPEC_PRELOAD = re.compile(r"^[ \t]*preload:", re.M)


def planned_workers(argv: list[str]) -> int | None:
    """How many workers `argv` (a `sweeplab` command line) will start, guessed before anything is imported:
    `-w`/`--workers`, else the spec's top-level `workers:` line, else one per core (at most GUESS_CAP);
    None when it is not a plain local sweep. A wrong guess costs only the start of workers the backend
    then ends, or starts the rest of."""
    if len(argv) < 2 or not _is_sweeplab(argv[0]) or argv[1] != "sweep":
        return None
    workers: int | None = None
    spec: str | None = None
    args = argv[2:]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            spec = spec or (args[i + 1] if i + 1 < len(args) else None)
            break
        name, eq, value = arg.partition("=")
        if name in _SKIP:
            return None
        if name in _VALUED and not eq:
            i += 1
            value = args[i] if i < len(args) else ""
        if name == "--backend" and value != "local":
            return None
        if name in ("-w", "--workers"):
            workers = int(value) if _digits(value) else None
        elif arg.startswith("-w") and _digits(arg[2:]):   # -w2
            workers = int(arg[2:])
        elif not arg.startswith("-") and spec is None:
            spec = arg
        i += 1
    global planned_spec
    planned_spec = spec
    if workers is None:
        text = _head(spec)
        backend = _SPEC_BACKEND.search(text)
        if backend is not None and backend.group(1) != "local":
            return None
        given = _SPEC_WORKERS.search(text)
        workers = int(given.group(1)) if given else min(os.cpu_count() or 1, GUESS_CAP)
    return workers if workers >= 1 else None


def _digits(text: str) -> bool:
    """ASCII digits only: `str.isdigit` is also true for '²', which `int` refuses (the typer option reports it);
    and at most 18 of them: `int` raised ValueError for more than 4,300 (a traceback on import)."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def _head(path: str | None) -> str:
    """The start of the spec file (its top-level keys are usually there); '' when it cannot be read, or is
    not a regular file (a pipe such as `<(...)` must be left whole for the spec's reader)."""
    if not path or not os.path.isfile(path):
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(65536)
    except OSError:
        return ""


def _is_sweeplab(program: str) -> bool:
    """The console script, or `python -m sweeplab` (whose argv[0] is sweeplab/__main__.py)."""
    name = os.path.basename(program)
    return name in ("sweeplab", "sweeplab.exe") or (
        name == "__main__.py" and os.path.basename(os.path.dirname(program)) == "sweeplab")


#: the workers this process started early; None: not a plain local sweep run as the console script
planned: int | None = None
#: the spec file of that sweep
planned_spec: str | None = None


#: workers `prestart` kept back, started by `start_rest` once the command line is imported
_rest = 0


def first_batch(workers: int, cores: int) -> int:
    """How many of `workers` start before the command line's imports: at most one fewer than the cores.
    Those imports are the sweep's serial path, and the scheduler shares cores evenly among the processes
    that can run: three processes on two cores would give the command line two thirds of one. The others
    start once the imports are done, and boot while the spec is read and the store set up."""
    return min(workers, max(1, cores - 1))


def prestart_count(workers: int, cores: int) -> int:
    """How many of `workers` are started early at all: at most the cores (or GUESS_CAP). A local sweep of
    one-CPU trials runs at most one per core (more is refused once the spec is read), and one that asks for
    more (`workers: 100000`, `resources.cpus: 0`) gets the others from its backend, after its input is
    checked: started here, before any check, they would be a fork bomb on a typo."""
    return min(workers, max(cores, GUESS_CAP))


def prestart(argv: list[str] | None = None) -> None:
    """Start the workers `planned_workers` expects (nothing for any other command): the first batch now."""
    global planned, _rest
    n = planned = planned_workers(sys.argv if argv is None else argv)
    if n is None:
        return
    from sweeplab.backends.local import prestart as start_workers

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = prestart_count(n, cores)
    preload = _preload(planned_spec) if n >= 2 else ()
    if preload:   # the workers will be forked from a fork server that imports these: start it instead
        from sweeplab.backends.local import prestart_fork_server

        prestart_fork_server(preload)
        return
    first = first_batch(n, cores)
    _rest = n - first
    start_workers(first)


def _preload(spec: str | None) -> tuple[str, ...]:
    """The libraries the spec's `function:` imports (backends/preload.trial_imports), as the backend will read
    them; none for a command, a spec that names `preload` itself, or SWEEPLAB_FORK_SERVER=0."""
    text = _head(spec)
    function = _SPEC_FUNCTION.search(text)
    if function is None or _SPEC_PRELOAD.search(text) or os.environ.get("SWEEPLAB_FORK_SERVER", "1") == "0":
        return ()
    from sweeplab.backends.preload import trial_imports

    assert spec is not None
    return trial_imports(function.group(1), [os.path.dirname(os.path.abspath(spec)), os.getcwd()])


def start_rest() -> None:
    """Start the workers `prestart` kept back (`sweeplab.cli` calls this at the end of its imports)."""
    global _rest
    if _rest > 0:
        from sweeplab.backends.local import prestart as start_workers

        start_workers(_rest)
        _rest = 0


def release() -> None:
    """End the prestarted workers no backend took over (a sweep on another backend)."""
    local = sys.modules.get("sweeplab.backends.local")
    if local is not None:
        local.release_prestarted()


prestart()
