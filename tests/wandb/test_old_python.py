"""The files sweeplab injects into a W&B program's interpreter (the hook's `_boot/`, first on a command trial's
PYTHONPATH) run under the Python the program has, which may be older than sweeplab's: W&B programs pinned to
Python 3.6/3.7 (wandb <= 0.15 supports them) failed at start-up with a SyntaxError of ours. No old Python runs
these tests: the files are checked against 3.6's grammar and for what 3.6 evaluates as it defines them."""

from __future__ import annotations
import __future__

import ast
import builtins
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeplab.wandb_compat import BOOT_DIR

BOOT_FILES = sorted(BOOT_DIR.glob("*.py"))


@pytest.mark.parametrize("path", BOOT_FILES, ids=lambda p: p.name)
def test_the_boot_files_parse_under_python_36s_grammar(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path), feature_version=(3, 6))
    for node in ast.walk(tree):   # a __future__ feature 3.6 does not know is a SyntaxError there (annotations: 3.7)
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                assert getattr(__future__, alias.name).optional[:2] <= (3, 6), f"from __future__ import {alias.name}"


def _evaluated_annotations(tree: ast.Module) -> list[ast.expr]:
    """The annotations Python 3.6 evaluates as it runs the module (without `from __future__ import
    annotations`): a function's parameters and return, a module's or a class's variables; not a function's
    local variables."""
    out: list[ast.expr] = []

    def visit(node: ast.AST, local: bool) -> None:
        if isinstance(node, ast.AnnAssign) and not local:
            out.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None and arg.annotation is not None:
                    out.append(arg.annotation)
            if node.returns is not None:
                out.append(node.returns)
            for child in node.body:
                visit(child, True)
            return
        elif isinstance(node, ast.ClassDef):
            for child in node.body:
                visit(child, False)
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt) or isinstance(child, ast.ExceptHandler):
                visit(child, local)

    for stmt in tree.body:
        visit(stmt, False)
    return out


@pytest.mark.parametrize("path", BOOT_FILES, ids=lambda p: p.name)
def test_python_36_can_define_what_the_boot_files_annotate(path: Path) -> None:
    # without `from __future__ import annotations` 3.6 evaluates these as it defines them, and `dict[str, Any]`,
    # `Callable[..., Any]` (collections.abc) or `str | None` raise TypeError before Python 3.9/3.10
    tree = ast.parse(path.read_text())
    bad = [ast.unparse(a) for a in _evaluated_annotations(tree)
           if not (isinstance(a, ast.Constant) and (a.value is None or isinstance(a.value, str)))
           and not (isinstance(a, ast.Name) and (a.id == "Any" or hasattr(builtins, a.id)))]
    assert not bad, f"{path.name}: annotations Python 3.6 would evaluate: {bad[:5]}"


def test_on_a_python_too_old_for_the_hook_the_program_runs_with_a_warning(tmp_path: Path) -> None:
    # the program's interpreter lacks what the hook needs: one line says so, and the program runs as it would
    # without sweeplab (no "Error in sitecustomize", no traceback); its run can still be read back afterwards
    code = ("import sys; sys.version_info = (3, 5, 10, 'final', 0); sys.path.insert(0, sys.argv[1]); "
            "import sitecustomize; print('ran', any(type(f).__name__ == '_Finder' for f in sys.meta_path))")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(BOOT_DIR)], capture_output=True, text=True,
                         timeout=60, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ran", "False"]
    assert out.stderr.startswith("sweeplab: W&B hook not installed") and "3.5" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_the_startup_file_reads_as_any_python_3_would(tmp_path: Path) -> None:
    # sitecustomize is what an interpreter too old for the hook runs first: a SyntaxError there is Python's
    # "Error in sitecustomize", and the sitecustomize it hides would not run
    tree = ast.parse((BOOT_DIR / "sitecustomize.py").read_text(), feature_version=(3, 4))
    assert not any(isinstance(n, (ast.JoinedStr, ast.AnnAssign)) for n in ast.walk(tree))


def test_a_feature_missing_at_run_time_is_a_warning_and_the_program_runs(tmp_path: Path) -> None:
    # the hook uses something the program's interpreter lacks (here math.isfinite, taken away as the program
    # logs): wandb.log raised
    # the hook's AttributeError out of the program; now one warning, and wandb keeps what was logged
    pytest.importorskip("wandb", reason="pip install 'sweeplab[wandb]'")
    (tmp_path / "train.py").write_text(
        "import math\nimport wandb\nrun = wandb.init(mode='offline')\nisfinite = math.isfinite\ndel math.isfinite\n"
        "for i in range(3):\n    run.log({'loss': 1.0 / (i + 1)})\nmath.isfinite = isfinite\nrun.finish()\n"
        "print('done')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(PYTHONPATH=str(BOOT_DIR), WANDB_MODE="offline", WANDB_SILENT="true",
               SWEEPLAB_REPORT_FILE=str(tmp_path / "report.jsonl"), WANDB_SWEEP_PARAM_PATH=str(tmp_path / "p.yaml"))
    (tmp_path / "p.yaml").write_text("wandb_version: 1\n")
    out = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.split()[-1:] == ["done"], out.stderr
    assert out.stderr.count("sweeplab: W&B hook could not mirror wandb.log") == 1, out.stderr
    assert "Traceback" not in out.stderr
