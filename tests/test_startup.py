"""Start-up cost of the command line (issue 18, item 4), checked by behaviour rather than by timing: a command
imports what it needs and nothing heavier, and the pydantic-free option coercion answers what typer's would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import sweeplab.cli as cli
from sweeplab.cli import _coerce

NOOP = Path(__file__).resolve().parents[1] / "benchmarks" / "_noop.py"

#: never needed to run a random sweep, nor to print help
HEAVY = ("optuna", "numpy", "pandas", "scipy", "torch", "starlette", "uvicorn", "plotly", "pydantic", "psutil",
         "rich.live", "rich.table", "sweeplab.dashboard", "sweeplab.search.optuna", "sweeplab.monitors",
         "importlib.readers", "importlib.resources.readers")
#: what only running (or resuming) a sweep needs
SWEEP_ONLY = ("sweeplab.driver", "sweeplab.spec", "sweeplab.store", "sweeplab.backends.local", "yaml", "sqlite3")

_PROBE = """
import atexit, json, sys
names = json.loads(sys.argv[1])
atexit.register(lambda: sys.stderr.write("LOADED " + json.dumps([n for n in names if n in sys.modules]) + "\\n"))
sys.argv = ["sweeplab", *sys.argv[2:]]
from sweeplab.cli import main
main()
"""


def _loaded(args: list[str], names: tuple[str, ...], cwd: Path) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """Run `sweeplab ARGS` in a fresh interpreter; which of `names` it had imported when it exited."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(names), *args], cwd=cwd, text=True,
                          capture_output=True, timeout=120)
    line = [x for x in proc.stderr.splitlines() if x.startswith("LOADED ")]
    assert line, proc.stderr
    return json.loads(line[-1][len("LOADED "):]), proc


def test_help_imports_no_command_dependencies(tmp_path: Path) -> None:
    loaded, proc = _loaded(["--help"], HEAVY + SWEEP_ONLY, tmp_path)
    assert proc.returncode == 0 and "sweep" in proc.stdout
    assert loaded == []


def test_a_random_sweep_imports_no_heavy_library(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(f"function: {NOOP}:noop\nmethod: random\nmetric: {{name: loss, goal: minimize}}\n"
                    "budget: {trials: 2}\nparameters:\n  x: {min: 0.0, max: 1.0}\n")
    loaded, proc = _loaded(["sweep", str(spec), "--store", str(tmp_path / "st"), "-w", "2", "-q"], HEAVY, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "trials: 2 completed" in proc.stdout
    assert loaded == []


def test_a_function_trials_worker_reads_no_yaml_before_its_first_task() -> None:
    """A worker imports `Config` for every trial; PyYAML comes only with a YAML text to read."""
    probe = ("import sys, sweeplab.backends.worker as w; w._preload(); "
             "print('sweeplab.config' in sys.modules, [m for m in sys.modules if m in ('yaml', 'sweeplab._yaml')])")
    proc = subprocess.run([sys.executable, "-c", probe], text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True []"


# ------------------------------------------------------------------------------ coercion without pydantic
def _sweep_params() -> dict[str, Any]:
    import typer.main

    command = typer.main.get_command(cli.app).commands["sweep"]   # type: ignore[attr-defined]
    return {p.name: p for p in command.params}, command


def _outcome(runtime: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        return "ok", runtime.coerce(value, param=param, ctx=ctx)
    except Exception as exc:   # typer's BadParameter, with its message
        return type(exc).__name__, exc.format_message() if hasattr(exc, "format_message") else str(exc)


CASES = [
    ("workers", ["2", "0", "-3", "+4", "007", "2.0", " 3", "abc", "", "1e3", "4_000", "٣", None, 5]),
    ("name", ["run", "", " spaced ", "ünï", None]),
    ("store", ["st", "", "missing/dir", ".", "~/x", None]),
    ("spec_file", ["s.yaml", "unreadable.yaml", "nope.yaml", None]),
    ("overrides", [("a=1", "b=2"), (), None]),
    ("quiet", [True, False, "1", None]),
]


@pytest.mark.parametrize(("name", "values"), CASES, ids=[c[0] for c in CASES])
def test_the_fast_coercion_answers_what_typer_answers(name: str, values: list[Any], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if not _coerce.install():
        pytest.skip("this typer release coerces without pydantic: there is no fast path to compare")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("x: 1\n")
    (tmp_path / "unreadable.yaml").write_text("x: 1\n")
    (tmp_path / "unreadable.yaml").chmod(0)
    params, command = _sweep_params()
    param = params[name]
    ctx = command.context_class(command)
    fast = _coerce._FastCoercion(param, lambda: None)
    typers = _coerce._build(param, type(param).get_runtime_param.original)
    for value in values:
        expected = _outcome(typers, value, param, ctx)
        fast.real = None
        fast.build = lambda: typers
        assert _outcome(fast, value, param, ctx) == expected, value



# ------------------------------------------------------------------------------ workers started first
_EARLY_PROBE = """
import atexit, json, os, sys
def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
early = []
# registered before sweeplab's own exit handlers, so it runs after them: what is left of the early workers
atexit.register(lambda: print("LEFT", json.dumps([p for p in early if alive(p)]), flush=True))
sys.argv = ["sweeplab", *sys.argv[1:]]
import sweeplab.cli
import sweeplab.backends.local as local
early.extend(p.pid for _, p, _ in local._PRESTARTED)
servers = [s.proc.pid for _, _, s in local._PRESTARTED_SERVERS]
early.extend(servers)
print("EARLY", json.dumps({"pids": early, "servers": servers, "spec_read": "sweeplab.spec" in sys.modules}),
      flush=True)
sweeplab.cli.main()
"""

_PID_TRIAL = ("import os\ndef f(config, run):\n"
              "    open(os.path.join(os.environ['PIDS'], str(os.getpid())), 'w').close()\n"
              "    return {'loss': float(config['x'])}\n")


def _early_run(args: list[str], tmp_path: Path) -> tuple[dict[str, Any], list[int], subprocess.CompletedProcess[str]]:
    pids = tmp_path / "pids"
    pids.mkdir(exist_ok=True)
    env = {**os.environ, "PIDS": str(pids)}
    proc = subprocess.run([sys.executable, "-c", _EARLY_PROBE, *args], cwd=tmp_path, text=True, env=env,
                          capture_output=True, timeout=120)
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("EARLY ", "LEFT ")))
    assert "EARLY" in lines and "LEFT" in lines, proc.stdout + proc.stderr
    return json.loads(lines["EARLY"]), json.loads(lines["LEFT"]), proc


def test_a_sweep_starts_its_workers_before_reading_its_spec_and_runs_its_trials_in_them(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(_PID_TRIAL)
    spec = tmp_path / "s.yaml"
    spec.write_text(f"function: {tmp_path / 't.py'}:f\nmethod: random\nbudget: {{trials: 4}}\n"
                    "parameters:\n  x: {min: 0.0, max: 1.0}\n")
    early, left, proc = _early_run(["sweep", str(spec), "--store", str(tmp_path / "st"), "-w", "2", "-q"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "trials: 4 completed" in proc.stdout
    assert len(early["pids"]) == 2 and not early["spec_read"]   # started before the spec was even imported
    ran_in = {int(p.name) for p in (tmp_path / "pids").iterdir()}
    assert ran_in and ran_in <= set(early["pids"])   # the backend took them over: no other worker ran a trial
    assert left == []
    # the process ended without the interpreter's teardown, after closing its store (checkpointed: no WAL left)
    assert (tmp_path / "st" / "store.db").exists() and not (tmp_path / "st" / "store.db-wal").exists()


_FORKED_TRIAL = ("import os\ndef f(config, run):\n    import yaml\n"
                 "    open(os.path.join(os.environ['PIDS'], f'{os.getpid()}-{os.getppid()}'), 'w').close()\n"
                 "    return {'loss': float(config['x'])}\n")


@pytest.mark.parametrize("case", ["taken", "bad-input"])
def test_a_sweep_whose_trial_imports_libraries_starts_its_fork_server_before_reading_its_spec(
        tmp_path: Path, case: str) -> None:
    """The fork server (backends/forkserver.py) imports the trial's libraries while the command line imports;
    the backend forks its workers from it, and a sweep that ends on bad input ends it."""
    (tmp_path / "t.py").write_text(_FORKED_TRIAL)
    spec = tmp_path / "s.yaml"
    spec.write_text(f"function: {tmp_path / 't.py'}:f\nmethod: {'random' if case == 'taken' else 'nope'}\n"
                    "budget: {trials: 4}\nparameters:\n  x: {min: 0.0, max: 1.0}\n")
    early, left, proc = _early_run(["sweep", str(spec), "--store", str(tmp_path / "st"), "-w", "2", "-q"], tmp_path)
    assert len(early["servers"]) == 1 and early["pids"] == early["servers"] and not early["spec_read"]
    if case == "taken":
        assert proc.returncode == 0, proc.stderr
        assert "trials: 4 completed" in proc.stdout
        parents = {int(p.name.split("-")[1]) for p in (tmp_path / "pids").iterdir()}
        assert parents == set(early["servers"])   # every trial ran in a worker forked by the early server
    else:
        assert proc.returncode == 2 and "unknown method" in proc.stderr
    assert left == []


@pytest.mark.parametrize("case", ["bad-input", "other-plan"])
def test_early_workers_no_backend_takes_are_ended(tmp_path: Path, case: str) -> None:
    """Bad input (exit 2, nothing written), and a plan whose workers differ from those started early (two
    CPUs a trial: another OMP_NUM_THREADS): the early workers are killed, checked while the command's
    process still runs, and no trial runs in one."""
    if case == "other-plan" and (os.cpu_count() or 1) < 2:
        pytest.skip("two CPUs a trial need a machine of two cores")
    (tmp_path / "t.py").write_text(_PID_TRIAL)
    spec = tmp_path / "s.yaml"
    spec.write_text(f"function: {tmp_path / 't.py'}:f\nparameters:\n  x: {{min: 0.0, max: 1.0}}\n"
                    + ("method: nope\n" if case == "bad-input" else
                       "method: random\nbudget: {trials: 1}\nresources: {cpus: 2}\n"))
    workers = "3" if case == "bad-input" else "1"
    early, left, proc = _early_run(["sweep", str(spec), "--store", str(tmp_path / "st"), "-w", workers, "-q"],
                                   tmp_path)
    assert len(early["pids"]) == int(workers)
    if case == "bad-input":
        assert proc.returncode == 2 and "unknown method" in proc.stderr
        assert not (tmp_path / "st").exists()
    else:
        assert proc.returncode == 0, proc.stderr
        ran_in = {int(p.name) for p in (tmp_path / "pids").iterdir()}
        assert len(ran_in) == 1 and ran_in.isdisjoint(early["pids"])
    assert left == []


@pytest.mark.parametrize(("argv", "expected"), [
    (["sweeplab", "sweep", "s.yaml", "-w", "3"], 3),
    (["sweeplab", "sweep", "s.yaml", "--workers=4", "-q"], 4),
    (["/x/bin/sweeplab", "sweep", "-w5", "s.yaml"], 5),
    (["sweeplab", "sweep", "s.yaml", "--backend", "local", "-w", "2"], 2),
    (["sweeplab", "sweep", "s.yaml"], "cores"),
    (["sweeplab", "sweep", "s.yaml", "--backend", "ray", "-w", "2"], None),
    (["sweeplab", "sweep", "s.yaml", "--dry-run"], None),
    (["sweeplab", "sweep", "--help"], None),
    (["sweeplab", "sweep", "--optuna", "m:f"], None),
    (["sweeplab", "sweep", "s.yaml", "--smoke"], None),
    (["sweeplab", "sweep", "s.yaml", "--gpus=0,1"], None),
    (["sweeplab", "sweep", "s.yaml", "-w", "0"], None),
    (["sweeplab", "resume", "s"], None),
    (["/x/sweeplab/__main__.py", "sweep", "s.yaml", "-w", "2"], 2),   # python -m sweeplab
    (["pytest", "sweep"], None),
    (["/x/pytest/__main__.py", "sweep"], None),
])
def test_the_workers_a_command_line_starts_early(argv: list[str], expected: Any) -> None:
    from sweeplab.cli._early import GUESS_CAP, planned_workers

    if expected == "cores":
        expected = min(os.cpu_count() or 1, GUESS_CAP)
    assert planned_workers(argv) == expected


@pytest.mark.parametrize(("spec_text", "argv", "expected"), [
    ("method: random\nworkers: 3  # three\n", [], 3),
    ("method: random\nworkers: 3\n", ["-w", "2"], 2),   # -w wins, as in the sweep itself
    ("method: random\nbackend: ray\n", [], None),
    ("method: random\nbackend: 'local'\n", [], "cores"),
    ("parameters:\n  workers: 5\n", [], "cores"),   # not a top-level key
])
def test_the_workers_a_spec_asks_for_are_read_from_its_top_level_lines(tmp_path: Path, spec_text: str,
                                                                       argv: list[str], expected: Any) -> None:
    from sweeplab.cli._early import GUESS_CAP, planned_workers

    spec = tmp_path / "s.yaml"
    spec.write_text(spec_text)
    if expected == "cores":
        expected = min(os.cpu_count() or 1, GUESS_CAP)
    assert planned_workers(["sweeplab", "sweep", "--store", "st", str(spec), *argv]) == expected


@pytest.mark.parametrize(("workers", "cores", "first"), [(2, 2, 1), (1, 2, 1), (8, 4, 3), (2, 1, 1), (4, 64, 4)])
def test_workers_boot_beside_the_imports_on_the_cores_they_leave_free(workers: int, cores: int, first: int) -> None:
    from sweeplab.cli._early import first_batch

    assert first_batch(workers, cores) == first


def test_a_spec_read_from_a_pipe_is_left_whole(tmp_path: Path) -> None:
    """`sweeplab sweep <(...)`: guessing the workers must not consume the spec its reader needs."""
    import threading

    from sweeplab.cli._early import GUESS_CAP, planned_workers

    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)
    text = "method: random\nworkers: 1\n"
    writer = threading.Thread(target=lambda: fifo.write_text(text), daemon=True)
    writer.start()
    assert planned_workers(["sweeplab", "sweep", str(fifo)]) == min(os.cpu_count() or 1, GUESS_CAP)
    assert fifo.read_text() == text   # all of it is still there for the spec's reader


def test_a_sweep_ends_without_teardown_after_what_teardown_does_first(tmp_path: Path) -> None:
    """`entry._exit_now`: threading's exit callbacks (a ThreadPoolExecutor's thread waits for them), then
    the atexit handlers, then the exit code; no hang, nothing lost on stdout."""
    probe = ("import atexit, sys\nfrom concurrent.futures import ThreadPoolExecutor\n"
             "atexit.register(lambda: print('atexit ran'))\n"
             "pool = ThreadPoolExecutor(1)\nprint(pool.submit(lambda: 41 + 1).result())\n"
             "sys.stdout.write('buffered, unflushed')\n"
             "from sweeplab.cli.entry import _exit_now\n_exit_now(3)\n")
    proc = subprocess.run([sys.executable, "-c", probe], text=True, capture_output=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "42\nbuffered, unflushedatexit ran\n"


# ------------------------------------------------------------------------------ only the invoked command built
@pytest.mark.parametrize("args", [["--help"], ["--no-such-option"]], ids=["help", "bad-option"])
def test_the_app_of_one_command_answers_as_the_whole_app(args: list[str]) -> None:
    """`entry._app_for` builds only the command the arguments name: every command's help, usage errors and
    exit codes are what the whole app gives."""
    from typer.testing import CliRunner

    from sweeplab.cli.entry import _app_for

    runner = CliRunner()
    names = [c.callback.__name__ for c in cli.app.registered_commands]
    assert len(names) > 5
    for name in names:
        view = _app_for(["sweeplab", name])
        assert [c.callback.__name__ for c in view.registered_commands] == [name]
        whole, one = runner.invoke(cli.app, [name, *args]), runner.invoke(view, [name, *args])
        assert (one.exit_code, one.output) == (whole.exit_code, whole.output), name
    assert _app_for(["sweeplab", "sweeep"]) is cli.app and _app_for(["sweeplab", "--help"]) is cli.app
