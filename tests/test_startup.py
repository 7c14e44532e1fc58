"""Start-up cost of the command line (issue 18, item 4), checked by behaviour rather than by timing: a command
imports what it needs and nothing heavier, and the pydantic-free option coercion answers what typer's would."""

from __future__ import annotations

import json
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
         "rich.live", "rich.table", "sweeplab.dashboard", "sweeplab.search.optuna")
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

