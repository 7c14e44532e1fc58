"""`sweeplab init`: scaffold() writes the recommended layout, refuses to touch existing work, and every
template's smoke sweep passes out of the box (`make -C DIR smoke`)."""

from __future__ import annotations

import json
import os
import py_compile
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sweeplab.errors import UserError
from sweeplab.scaffold import scaffold, templates
from sweeplab.spec import load_spec

TEMPLATES = ("pytorch", "xgboost")
LAYOUT = {
    ".gitignore", "Makefile", "README.md", "configs/base.yaml", "data.py", "model.py", "pyproject.toml",
    "profiles/cluster.yaml", "profiles/local.yaml", "sweeps/tpe_asha.yaml", "tests/test_smoke.py", "train.py",
}
PROFILE_KEYS = {"data_dir", "output_dir", "num_workers"}


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_templates_lists_the_shipped_templates() -> None:
    assert templates() == TEMPLATES


# ------------------------------------------------------------------------------------------ layout
@pytest.mark.parametrize("template", TEMPLATES)
def test_scaffold_writes_the_recommended_layout_and_returns_it(tmp_path: Path, template: str) -> None:
    target = tmp_path / "my-project"
    written = scaffold(target, template)
    assert {p.relative_to(target).as_posix() for p in written} == LAYOUT
    assert files_under(target) == LAYOUT
    assert all(p.is_file() for p in written)


@pytest.mark.parametrize("template", TEMPLATES)
def test_profiles_hold_environment_facts_and_the_base_config_only_hyperparameters(
    tmp_path: Path, template: str
) -> None:
    scaffold(tmp_path, template)
    base = yaml.safe_load((tmp_path / "configs/base.yaml").read_text())
    for name in ("local", "cluster"):
        profile = yaml.safe_load((tmp_path / f"profiles/{name}.yaml").read_text())
        assert set(profile) == PROFILE_KEYS, name
    assert base and not set(base) & PROFILE_KEYS


@pytest.mark.parametrize("template", TEMPLATES)
def test_sweep_spec_is_tpe_with_asha_and_finds_the_project_files(tmp_path: Path, template: str) -> None:
    scaffold(tmp_path / "proj", template)
    spec_file = tmp_path / "proj/sweeps/tpe_asha.yaml"
    spec = load_spec(spec_file)
    assert spec.method == "tpe"
    assert spec.early_terminate is not None and spec.early_terminate["type"] == "asha"
    assert spec.profile == "local"
    assert Path(spec.config).resolve() == (tmp_path / "proj/configs/base.yaml").resolve()
    module, _, fn = str(spec.function).rpartition(":")
    assert fn == "train" and (spec_file.parent / module).resolve() == (tmp_path / "proj/train.py").resolve()
    raw = yaml.safe_load(spec_file.read_text())
    assert raw["monitors"] == ["nan"]
    assert raw["name"] == "proj-tpe-asha"           # the project name replaced the template's token
    epochs_key = "epochs" if template == "pytorch" else "rounds"
    base = yaml.safe_load((tmp_path / "proj/configs/base.yaml").read_text())
    assert raw["early_terminate"]["max_iter"] == base[epochs_key]


@pytest.mark.parametrize("template", TEMPLATES)
def test_scaffolded_python_files_compile_and_no_template_token_is_left(tmp_path: Path, template: str) -> None:
    for path in scaffold(tmp_path, template):
        assert "__project__" not in path.read_text(), path
        if path.suffix == ".py":
            py_compile.compile(str(path), cfile=str(tmp_path / "compiled.pyc"), doraise=True)


@pytest.mark.parametrize("template", TEMPLATES)
def test_makefile_smoke_target_runs_the_smoke_sweep_with_an_overridable_command(
    tmp_path: Path, template: str
) -> None:
    scaffold(tmp_path, template)
    makefile = (tmp_path / "Makefile").read_text()
    assert "SWEEPLAB ?= sweeplab" in makefile
    recipe = makefile.split("\nsmoke:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert all(line.startswith("\t") for line in recipe)
    assert "\t$(SWEEPLAB) sweep $(SPEC) --smoke --store .sweeplab-smoke" in recipe
    assert "SPEC     ?= sweeps/tpe_asha.yaml" in makefile


@pytest.mark.parametrize(
    ("dirname", "expected"),
    [("My Project!", "my-project"), ("exp_01", "exp_01"), ("!!!", "project")],
    ids=["spaces-and-punctuation", "kept-as-is", "nothing-usable"],
)
def test_project_name_is_derived_from_the_directory(tmp_path: Path, dirname: str, expected: str) -> None:
    scaffold(tmp_path / dirname, "xgboost")
    raw = yaml.safe_load((tmp_path / dirname / "sweeps/tpe_asha.yaml").read_text())
    assert raw["name"] == f"{expected}-tpe-asha"


def test_missing_parent_directories_are_created_and_an_empty_directory_is_accepted(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b" / "c"
    assert scaffold(nested, "pytorch")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert files_under(empty) == set()
    scaffold(empty, "xgboost")
    assert files_under(empty) == LAYOUT


# ------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("existing", ["notes.txt", ".git/HEAD", "train.py"], ids=["file", "dotdir", "clash"])
def test_non_empty_directory_is_refused_and_left_unchanged(tmp_path: Path, existing: str) -> None:
    target = tmp_path / "work"
    (target / existing).parent.mkdir(parents=True, exist_ok=True)
    (target / existing).write_text("precious\n")
    before = snapshot(target)
    with pytest.raises(UserError, match="not empty") as info:
        scaffold(target, "pytorch")
    assert str(target) in str(info.value)
    assert "nothing was written" in str(info.value)
    assert snapshot(target) == before
    assert {p.relative_to(target).as_posix() for p in target.rglob("*")} >= set(before)
    assert not (target / "configs").exists()


def test_a_file_in_place_of_the_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "project"
    target.write_text("a file\n")
    with pytest.raises(UserError, match="not a directory"):
        scaffold(target, "xgboost")
    assert target.read_text() == "a file\n"


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("torch", "pytorch"), ("xgbost", "xgboost"), ("sklearn", None)],
    ids=["torch", "typo", "no-close-match"],
)
def test_unknown_template_lists_the_templates_and_writes_nothing(
    tmp_path: Path, name: str, suggestion: str | None
) -> None:
    target = tmp_path / "new"
    with pytest.raises(UserError) as info:
        scaffold(target, name)
    message = str(info.value)
    assert repr(name) in message and "pytorch" in message and "xgboost" in message
    if suggestion is None:
        assert "did you mean" not in message
    else:
        assert f"did you mean '{suggestion}'" in message
    assert not target.exists()


def test_unknown_template_is_reported_before_the_directory_check(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(UserError, match="unknown template"):
        scaffold(tmp_path, "nope")


# ------------------------------------------------------------------------------------------ for real
def sweeplab_command() -> str:
    """The sweeplab of this Python environment (its console script, or `python -m sweeplab`)."""
    script = Path(sys.executable).parent / "sweeplab"
    return str(script) if script.exists() else f"{sys.executable} -m sweeplab"


def make() -> str:
    found = shutil.which("make")
    if found is None:
        pytest.skip("make is not installed")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("template", TEMPLATES)
def test_init_then_make_smoke_passes_out_of_the_box(tmp_path: Path, template: str) -> None:
    project = tmp_path / f"{template}-project"
    init = subprocess.run([*shlex.split(sweeplab_command()), "init", str(project), "--template", template],
                          capture_output=True, text=True, timeout=120, check=False)
    assert init.returncode == 0, init.stdout + init.stderr
    assert files_under(project) == LAYOUT
    done = subprocess.run([make(), "-C", str(project), "smoke", f"SWEEPLAB={sweeplab_command()}"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(project / ".sweeplab-smoke" / "store.db") as db:
        states = [row[0] for row in db.execute("SELECT state FROM trials")]
    assert len(states) == 2
    assert "completed" in states and "failed" not in states
    assert not (project / "outputs").exists()        # smoke trials write nothing outside the store


@pytest.mark.slow
def test_make_smoke_fails_when_the_scaffolded_code_is_broken(tmp_path: Path) -> None:
    project = tmp_path / "broken"
    scaffold(project, "xgboost")
    model = project / "model.py"
    model.write_text(model.read_text().replace("config.learning_rate", "config.learning_rat"))
    done = subprocess.run([make(), "-C", str(project), "smoke", f"SWEEPLAB={sweeplab_command()}"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode != 0
    assert "learning_rat" in done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("template", TEMPLATES)
def test_the_projects_own_smoke_test_passes(tmp_path: Path, template: str) -> None:
    project = tmp_path / "project"
    scaffold(project, template)
    env = {**os.environ, "SWEEPLAB": sweeplab_command()}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


RESUME_SCRIPT = """
import json, sys
sys.path.insert(0, ".")
from sweeplab.config import coerce, resolve_config, typed_schema_of
from sweeplab.run import Run
from train import train

def attempt(fidelity):
    cfg = resolve_config(base="configs/base.yaml", profile="local", params={}, overrides=[fidelity])
    events = []
    run = Run(config=coerce(cfg, typed_schema_of(train)), sink=lambda kind, data: events.append((kind, data)),
              sweep="resume", trial=0, seed=0, checkpoint_dir="ckpt", checkpoint_every=1)
    result = train(run.config, run)
    run.flush()
    steps = sorted({p[0] for kind, data in events if kind == "metrics" for p in data["points"]})
    restored = [data["step"] for kind, data in events if kind == "note" and data.get("kind") == "restored"]
    return {"result": result, "steps": steps, "restored": restored}

print(json.dumps([attempt(sys.argv[1]), attempt(sys.argv[2])]))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("template", "first", "second"),
    [("pytorch", "epochs=2", "epochs=4"), ("xgboost", "rounds=10", "rounds=15")],
    ids=["pytorch", "xgboost"],
)
def test_train_resumes_from_its_checkpoint_where_it_left_off(
    tmp_path: Path, template: str, first: str, second: str
) -> None:
    """A second attempt with a larger budget restores the first one's checkpoint and trains only the rest."""
    scaffold(tmp_path, template)
    done = subprocess.run([sys.executable, "-c", RESUME_SCRIPT, first, second], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    one, two = json.loads(done.stdout.strip().splitlines()[-1])
    n1, n2 = int(first.split("=")[1]), int(second.split("=")[1])
    assert one["restored"] == [] and one["steps"] == list(range(1, n1 + 1))
    assert two["restored"] == [n1] and two["steps"] == list(range(n1 + 1, n2 + 1))
    metric = "val_loss" if template == "pytorch" else "val_rmse"
    assert metric in two["result"]
    if template == "xgboost":
        assert two["result"]["rounds"] == n2
    assert (tmp_path / "outputs" / "resume" / "0").is_dir()   # the final model, outside smoke mode


# ------------------------------------------------------------------------------------------ cli errors
@pytest.mark.parametrize(
    "where",
    ["under-a-file", "name-too-long"],
)
def test_init_where_the_directory_cannot_be_created_is_one_line_error(tmp_path: Path, where: str) -> None:
    (tmp_path / "a-file").write_text("x\n")
    target = tmp_path / "a-file" / "project" if where == "under-a-file" else tmp_path / ("p" * 300)
    done = subprocess.run([*shlex.split(sweeplab_command()), "init", str(target), "--template", "xgboost"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stderr.startswith("error: cannot create "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_init_next_step_is_a_command_that_runs_as_printed(tmp_path: Path) -> None:
    done = subprocess.run([*shlex.split(sweeplab_command()), "init", "my project", "--template", "xgboost"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "next: make -C 'my project' smoke" in done.stdout


def test_init_next_step_for_a_directory_named_like_an_option_is_not_read_as_one(tmp_path: Path) -> None:
    """`sweeplab init -t xgboost -- -exp`: `make -C -exp smoke` would give make the options -e -x -p; the printed step
    names the directory as ./-exp, and make, run as printed, finds the project's Makefile there."""
    done = subprocess.run([*shlex.split(sweeplab_command()), "init", "--template", "xgboost", "--", "-exp"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    step = next(line for line in done.stdout.splitlines() if line.startswith("next: "))
    assert step == "next: make -C ./-exp smoke", step
    dry = subprocess.run([make(), "-n", *shlex.split(step.removeprefix("next: make "))], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False)
    assert dry.returncode == 0 and "--smoke" in dry.stdout, dry.stdout + dry.stderr


@pytest.mark.parametrize("template", TEMPLATES)
def test_make_sweep_passes_extra_sweeplab_options(tmp_path: Path, template: str) -> None:
    """`make sweep ARGS="--trials 2 --workers 1"` (a tiny budget, say) reaches `sweeplab sweep`: the Makefile
    had no way to pass an option but to smuggle it into SPEC."""
    scaffold(tmp_path, template)
    done = subprocess.run([make(), "-n", "-C", str(tmp_path), "sweep", "ARGS=--trials 2 --workers 1"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "sweeplab sweep sweeps/tpe_asha.yaml --trials 2 --workers 1" in done.stdout
