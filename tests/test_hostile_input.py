"""Hostile input that passed the spec parser but failed later, after the store was written: every part of a
sweep the driver builds from its spec and overrides is checked before the store is opened, values YAML can
write but JSON cannot hold are refused, and numbers beyond what the store can hold are refused or not found.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeplab._yaml import yaml_load
from sweeplab.api import run_sweep
from sweeplab.errors import SpecError, UserError
from tests.test_cli_input import GOOD, TRIALS, assert_one_line_error, cli, write

SPACE = "parameters:\n  x: {values: [1, 2]}\n"

# parts of a spec only the driver built, after the store was created
LATE = {
    "early_terminate": (GOOD + SPACE + "early_terminate: {type: asha, min_iter: 0, max_iter: 9}\n", [],
                        "early_terminate.min_iter: must be at least 1; got 0"),
    "monitor": (GOOD + SPACE + "monitors: [{plateau: {patience: -1}}]\n", [],
                "monitors[0].plateau.patience: must be at least 1; got -1"),
    "override": (GOOD + SPACE, ["a..b=1"], "override key is not a dotted name; got 'a..b=1'"),
}


@pytest.mark.parametrize("case", list(LATE), ids=list(LATE))
def test_cli_refuses_what_the_driver_would_refuse_before_the_store_exists(tmp_path: Path, case: str) -> None:
    spec, overrides, fragment = LATE[case]
    write(tmp_path / "s.yaml", spec)
    assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q", *overrides), "s.yaml" if not overrides else "",
                          fragment)
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("raw, overrides, fragment", [
    ({"early_terminate": {"type": "asha", "min_iter": 0, "max_iter": 9}}, [], "early_terminate.min_iter"),
    ({"monitors": [{"plateau": {"patience": -1}}]}, [], "monitors[0].plateau.patience"),
    ({}, ["=x"], "override has no key"),
    ({"config": "base.yaml"}, ["x.y=1"], "'x' is not a mapping"),
], ids=["early_terminate", "monitor", "override", "override-on-config"])
def test_run_sweep_refuses_them_before_the_store_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        raw: dict, overrides: list[str], fragment: str) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "base.yaml", "x: 0.5\n")
    write(tmp_path / "train.py", "def train(config, run):\n    return {'loss': 1.0}\n")
    spec = {"function": "train.py:train", "method": "grid", "metric": {"name": "loss"},
            "parameters": {"x": {"values": [1]}}, **raw}
    with pytest.raises(UserError) as info:
        run_sweep(spec, store=tmp_path / "store", overrides=overrides)
    assert fragment in str(info.value)
    assert not (tmp_path / "store").exists()


# ------------------------------------------------------------------- values JSON cannot hold


@pytest.mark.parametrize("text, expected", [
    ("when: 2024-01-02\n", {"when": "2024-01-02"}),                       # a date is text, as in JSON
    ("at: 2024-01-02 10:00:00\n", {"at": "2024-01-02 10:00:00"}),
    ("2024-01-02: 1\n", {"2024-01-02": 1}),
])
def test_dates_are_read_as_text(text: str, expected: dict) -> None:
    assert yaml_load(text) == expected


@pytest.mark.parametrize("value", ["!!binary aGk=", "!!set {a, b}", "!!omap [a: 1]", "!!timestamp 2024-01-02"])
def test_values_json_cannot_hold_are_refused_by_the_spec_before_the_store(tmp_path: Path, value: str) -> None:
    write(tmp_path / "s.yaml", GOOD + f"parameters:\n  x: {{values: [{value}]}}\n")
    line = assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q"), "s.yaml: parameters.x.values[0]: line 5")
    assert f"unsupported YAML tag '{value.split()[0]}'" in line
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("value", [datetime.date(2024, 1, 2), b"hi", {1, 2}, object(), 16 ** 5000],
                         ids=["date", "bytes", "set", "object", "int-too-long-to-write"])
def test_run_sweep_refuses_a_mapping_with_values_json_cannot_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  value: object) -> None:
    monkeypatch.chdir(tmp_path)
    spec = {"function": f"{TRIALS}:quick", "method": "grid", "parameters": {"x": {"values": [1, value]}}}
    with pytest.raises(SpecError, match=r"parameters\.x\.values\[1\]: an? \w+( this long)? cannot be stored as JSON"):
        run_sweep(spec, store=tmp_path / "store")
    assert not (tmp_path / "store").exists()


# ------------------------------------------------------------------------------- enormous grids


@pytest.mark.parametrize("param, fragment", [
    ("{distribution: int_uniform, min: 0, max: 1000000000000000000000000000}", "1000000000000000000000000001 values"),
    ("{distribution: q_uniform, min: 0, max: 1, q: 1.0e-12}", "1000000000000 values"),
    ("{distribution: q_uniform, min: 0, max: 1.0e308, q: 1.0e-300}", "more than"),
], ids=["int_uniform", "q_uniform", "q_uniform-overflow"])
def test_a_grid_axis_too_large_to_enumerate_is_refused_at_once(tmp_path: Path, param: str, fragment: str) -> None:
    write(tmp_path / "s.yaml", GOOD + f"parameters:\n  x: {{values: [1]}}\n  y: {param}\n")
    assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q", timeout=60), "s.yaml: parameters.y: ", fragment,
                          "expected at most 1,000,000 values per parameter")
    assert not (tmp_path / "store").exists()


def test_a_grid_of_a_trillion_combinations_starts_at_once(tmp_path: Path) -> None:
    """Six axes of 100 values: the grid is never materialised, so its first trials start and the run ends."""
    axes = "".join(f"  p{i}: {{values: [{', '.join(map(str, range(100)))}]}}\n" for i in range(6))
    write(tmp_path / "s.yaml", GOOD + "budget: {trials: 2}\nparameters:\n  x: {values: [1]}\n" + axes)
    cp = cli(tmp_path, "sweep", "s.yaml", "-q", "--workers", "1", timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert "1000000000000 combinations" in cli(tmp_path, "sweep", "s.yaml", "--dry-run").stdout


def test_the_typed_config_check_of_a_trillion_combinations_lists_only_those_it_checks(tmp_path: Path) -> None:
    """`--dry-run` and `--smoke` check the first 512 categorical combinations: the others are counted, never
    listed (a trillion tuples ran the machine out of memory). In a process limited to 2 GiB of memory."""
    axes = "".join(f"  p{i}: {{values: [{', '.join(map(str, range(100)))}]}}\n" for i in range(6))
    write(tmp_path / "s.yaml", GOOD + "parameters:\n" + axes)
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from sweeplab.spec import load_spec\n"
        "from sweeplab.smoke import check_config_combinations\n"
        "spec = load_spec(sys.argv[1])\n"
        "problems, notes = check_config_combinations(spec, lambda p: dict(p), [], spec.function)\n"
        "print(problems, notes)\n"
    )
    cp = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.yaml")], capture_output=True, text=True,
                        timeout=120)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert "1000000000000 categorical combinations; checked the first 512" in cp.stdout


# ------------------------------------------------------------------------------- worker counts


@pytest.mark.parametrize("argv", [["-w", "\u00b2"], ["-w\u00b2"], ["--workers=\u00b2"]])   # '²'.isdigit() is True
def test_a_worker_count_that_is_not_ascii_digits_is_left_to_the_option_parser(argv: list[str]) -> None:
    from sweeplab.cli._early import GUESS_CAP, planned_workers

    assert planned_workers(["sweeplab", "sweep", "s.yaml", *argv]) == min(os.cpu_count() or 1, GUESS_CAP)


def test_a_huge_worker_count_prestarts_no_more_than_the_cores() -> None:
    from sweeplab.cli._early import GUESS_CAP, prestart_count

    assert prestart_count(100_000_000_000, 2) == GUESS_CAP
    assert prestart_count(3, 2) == 3 and prestart_count(40, 32) == 32


def test_cli_worker_count_not_ascii_digits_is_a_usage_error(tmp_path: Path) -> None:
    write(tmp_path / "s.yaml", GOOD + SPACE)
    cp = cli(tmp_path, "sweep", "s.yaml", "-q", "--workers", "\u00b2")
    assert_one_line_error(cp, "Invalid value for '--workers'")
    assert not (tmp_path / "store").exists()


def test_more_workers_than_the_machine_runs_is_refused_before_the_store(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "s.yaml", GOOD + SPACE + "workers: 100000000000\n")
    assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q", timeout=60), "100000000000 workers")
    assert not (tmp_path / "store").exists()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="100000 workers"):
        run_sweep(tmp_path / "s.yaml", store=tmp_path / "store", workers=100_000)
    assert not (tmp_path / "store").exists()


def test_a_local_backend_refuses_a_fork_bomb_of_cpu_free_workers() -> None:
    from sweeplab.backends.local import MAX_LOCAL_WORKERS, plan_slots

    assert len(plan_slots(MAX_LOCAL_WORKERS, cpus=0, gpus=0, gpu_ids=[])) == MAX_LOCAL_WORKERS
    with pytest.raises(UserError, match=f"at most {MAX_LOCAL_WORKERS:,} workers"):
        plan_slots(100_000_000_000, cpus=0, gpus=0, gpu_ids=[])


@pytest.mark.parametrize("seed", [2**32, 2**63, 10**40])
def test_a_seed_the_samplers_cannot_take_is_a_spec_error(seed: int) -> None:
    from sweeplab.spec import parse_spec

    with pytest.raises(SpecError, match=rf"seed: seed is too large; got {seed}; expected an integer from 0 to 4294"):
        parse_spec({"function": "t.py:f", "method": "tpe", "metric": {"name": "loss"}, "seed": seed}, file="s.yaml")
    assert parse_spec({"function": "t.py:f", "method": "tpe", "metric": {"name": "loss"}, "seed": 2**32 - 1}).seed


# ------------------------------------------------------------------ sweep names as directory names


@pytest.mark.parametrize("name", ["..", ".", "x" * 5000, "\u00e9" * 300, "a/../../b", "a\x00b"])
def test_every_sweep_name_is_one_safe_directory_name(name: str) -> None:
    from sweeplab.store.layout import safe_name

    safe = safe_name(name)
    assert safe not in (".", "..") and "/" not in safe and "\x00" not in safe
    assert len(f"{safe}.lock".encode()) <= 255
    assert safe_name(name + "y") != safe   # a long name keeps what tells it apart


def test_a_name_whose_directory_another_sweep_uses_is_made_unique(tmp_path: Path) -> None:
    """'my sweep' and 'my_sweep' would share logs/my_sweep/, checkpoints and the driver's lock."""
    from sweeplab.api import unique_name
    from sweeplab.store import Store

    st = Store.open(tmp_path / "store")
    try:
        st.create_sweep(name="my sweep", method="grid", metric="loss", goal="minimize", spec={}, spec_path=None,
                        seed=None)
        assert unique_name(st, "my_sweep") == "my_sweep-2"
        assert unique_name(st, "my/sweep") == "my/sweep-2"
        assert unique_name(st, "other") == "other"
    finally:
        st.close()


# ------------------------------------------------------------------------------ export targets


def test_export_writes_through_a_symlink_and_into_a_fifo_without_replacing_them(tmp_path: Path) -> None:
    """`-o /dev/stdout` or `-o /dev/null` (as root, renaming over them would replace the device for everyone)
    and a link to a shared file: the export goes where they point, and they stay what they are."""
    import stat
    import threading

    from sweeplab.dashboard.synthetic import make_synthetic_store
    from sweeplab.export import export_sweep

    store = make_synthetic_store(tmp_path / "store", trials=3, points=10, seed=1)
    (tmp_path / "shared").mkdir()
    link = tmp_path / "out.csv"
    link.symlink_to(tmp_path / "shared" / "table.csv")
    export_sweep("demo", link, store=store)
    assert link.is_symlink() and (tmp_path / "shared" / "table.csv").read_text().startswith("number,state")

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    export_sweep("demo", fifo, store=store)
    reader.join(timeout=30)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert got and got[0].startswith("number,state")


# ------------------------------------------------------------------------- what --store names


def _foreign_db(root: Path) -> Path:
    import sqlite3

    root.mkdir(parents=True)
    with sqlite3.connect(root / "store.db") as c:
        c.execute("CREATE TABLE foo(x)")
        c.execute("INSERT INTO foo VALUES (1)")
    return root / "store.db"


def test_an_sqlite_database_of_another_program_is_never_written(tmp_path: Path) -> None:
    db = _foreign_db(tmp_path / "other")
    before = db.read_bytes()
    write(tmp_path / "s.yaml", GOOD + SPACE)
    cp = cli(tmp_path, "sweep", "s.yaml", "-q", store=tmp_path / "other")
    assert cp.returncode == 1 and len(cp.stderr.splitlines()) == 1, cp.stderr
    assert "is an SQLite database of another program (tables: foo), not a sweeplab store" in cp.stderr
    assert db.read_bytes() == before
    cp = cli(tmp_path, "status", store=tmp_path / "other")
    assert cp.returncode == 1 and "not a sweeplab store" in cp.stderr and len(cp.stderr.splitlines()) == 1


def test_a_store_path_that_is_a_file_says_so(tmp_path: Path) -> None:
    from sweeplab.errors import StoreError
    from sweeplab.store import Store

    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreError, match="is a file, not a directory"):
        Store.open(tmp_path / "afile")
    (tmp_path / "st" / "store.db").mkdir(parents=True)
    for readonly in (False, True):
        with pytest.raises(StoreError, match="store.db is a directory, not an SQLite database"):
            Store.open(tmp_path / "st", readonly=readonly)


def test_a_store_path_that_is_a_dangling_or_looping_link_says_so(tmp_path: Path) -> None:
    """`--store` a symbolic link to nothing (or to itself) said "not writable: File exists" (mkdir's error)."""
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    write(tmp_path / "s.yaml", GOOD)
    for name in ("dangling", "loop"):
        cp = cli(tmp_path, "sweep", "s.yaml", "-q", store=tmp_path / name)
        assert cp.returncode == 2 and "is a symbolic link to" in cp.stderr, cp.stderr
        assert len(cp.stderr.strip().splitlines()) == 1, cp.stderr
    assert not (tmp_path / "gone").exists()


def test_a_function_file_that_does_not_exist_is_refused_before_the_store(tmp_path: Path) -> None:
    write(tmp_path / "s.yaml", GOOD.replace(f"function: {TRIALS}:quick", "function: nope.py:train") + SPACE)
    assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q"), "s.yaml: function: function file not found; "
                          "got 'nope.py'")
    assert not (tmp_path / "store").exists()
    assert_one_line_error(cli(tmp_path, "run", "nope.py:train"), "function file not found")
    assert not (tmp_path / "store").exists()
    # a name longer than the OS takes (ENAMETOOLONG): the same one-line error, not a traceback
    long = "d" * 300 + ".py"
    write(tmp_path / "s.yaml", GOOD.replace(f"function: {TRIALS}:quick", f"function: {long}:train") + SPACE)
    assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q"), "s.yaml: function: function file not found")
    assert not (tmp_path / "store").exists()


def test_nesting_deeper_than_the_yaml_limit_is_refused_from_python_and_overrides_too(tmp_path: Path) -> None:
    from sweeplab.config import parse_override
    from sweeplab.errors import ConfigError
    from sweeplab.spec import parse_spec

    params: dict = {"v": {"value": 1}}
    for _ in range(3000):   # a Python mapping: no YAML reader counted its levels
        params = {"g": {"parameters": params}}
    with pytest.raises(SpecError, match="nested deeper than 100 levels"):
        parse_spec({"function": "t.py:f", "method": "random", "parameters": params})
    with pytest.raises(ConfigError, match="override key is nested deeper than 100 levels"):
        parse_override("a." * 3000 + "b=1")   # a config that deep could not be stored as JSON
    assert parse_override("a." * 99 + "b=1")[1] == 1


@pytest.mark.parametrize("key", ["timeout", "heartbeat_timeout"])
@pytest.mark.parametrize("value", [0, "0s", 0.0])
def test_a_trial_timeout_of_zero_is_a_spec_error(key: str, value: object) -> None:
    from sweeplab.spec import parse_spec

    with pytest.raises(SpecError, match=rf"trial\.{key}: must be above 0: every trial would be stopped at once"):
        parse_spec({"function": "t.py:f", "method": "grid", "trial": {key: value}}, file="s.yaml")
    assert parse_spec({"function": "t.py:f", "method": "grid", "trial": {"heartbeat_timeout": None}}).trial


@pytest.mark.parametrize("param, message", [
    ({"min": -1.7e308, "max": 1.7e308}, "the range from min to max is wider than a float"),   # draws were inf
    ({"distribution": "int_uniform", "min": 0, "max": 10**400}, "max is too large"),        # OverflowError
    ({"distribution": "normal", "mu": 10**400, "sigma": 1}, "mu is too large"),
])
def test_a_range_wider_than_a_float_is_a_spec_error(param: dict, message: str) -> None:
    from sweeplab.space import parse_parameters

    with pytest.raises(SpecError, match=rf"parameters\.x\.\w+: {message}"):
        parse_parameters({"x": param})
    space = parse_parameters({"x": {"min": -1e307, "max": 1e307}})
    assert all(-1e307 <= space.from_unit([u])["x"] <= 1e307 for u in (0.0, 0.5, 0.999))


@pytest.mark.parametrize("raw", [
    {"budget": {"time": 10**400}}, {"trial": {"timeout": 10**400}}, {"metric": {"name": "loss", "target": 10**400}},
    {"constraints": [{"metric": "m", "max": 10**400}]},
    {"metric": [{"name": "a", "reference": 10**400}, {"name": "b"}]},
    {"parameters": {"x": {"values": [1], "probabilities": [10**400]}}},
], ids=["budget.time", "trial.timeout", "target", "constraint", "reference", "probabilities"])
def test_an_int_beyond_a_float_is_a_spec_error_not_an_overflow(raw: dict) -> None:
    from sweeplab.spec import parse_spec

    with pytest.raises(SpecError):
        parse_spec({"function": "t.py:f", "method": "random", "metric": {"name": "loss"}, **raw}, file="s.yaml")


@pytest.mark.parametrize("option", ["--trials", "--workers"])
def test_cli_zero_trials_or_workers_is_a_usage_error_before_the_store(tmp_path: Path, option: str) -> None:
    """--trials 0 created the sweep and ended it with no trial (exit 1); --workers 0 meant 'one per core'."""
    write(tmp_path / "s.yaml", GOOD + SPACE)
    assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q", option, "0"), f"{option} must be at least 1; got 0")
    assert not (tmp_path / "store").exists()


def test_resume_with_no_or_negative_trials_is_refused_and_the_stored_spec_kept(tmp_path: Path) -> None:
    """`resume --trials -5` stored budget.trials -5 in the sweep: every later resume failed on it."""
    write(tmp_path / "s.yaml", GOOD + "parameters:\n  x: {values: [1]}\n")
    assert cli(tmp_path, "sweep", "s.yaml", "-q", "--workers", "1").returncode == 0
    before = json.loads(cli(tmp_path, "status", "s", "--json").stdout)
    for trials in ("-5", "+0", "+-3"):
        assert_one_line_error(cli(tmp_path, "resume", "s", f"--trials={trials}", "-q"), "--trials: ", "at least 1")
    assert_one_line_error(cli(tmp_path, "resume", "s", "--trials=+1", "--workers", "0"), "--workers must be at least 1")
    assert json.loads(cli(tmp_path, "status", "s", "--json").stdout) == before
    assert cli(tmp_path, "resume", "s", "--trials=+1", "-q", "--workers", "1").returncode == 0


def test_the_arguments_of_a_spec_with_many_parameters_are_built_in_linear_time() -> None:
    """60,000 parameters (a 1.4 MB spec) took minutes per trial: each name was compared with every other.
    CPU time, with a margin of about 100x: the quadratic version needs minutes here."""
    import time

    from sweeplab.spec.command import wandb_args

    raw = {f"p{i}": {"value": i} for i in range(40_000)}
    raw["model"] = {"parameters": {"hidden": {"value": 1}}}
    params = {**{f"p{i}": i for i in range(40_000)}, "model.hidden": 1, "extra.key": 2}
    start = time.process_time()
    out = wandb_args(params, raw)
    assert time.process_time() - start < 10
    assert out["model"] == {"hidden": 1} and out["extra.key"] == 2 and out["p39999"] == 39999


@pytest.mark.parametrize("make, reason", [
    (lambda p: p.symlink_to(p.name), "Too many levels of symbolic links"),
    (lambda p: p.symlink_to("gone.yaml"), "No such file or directory"),
    (lambda p: p.mkdir(), "a directory"),
], ids=["symlink-loop", "broken-symlink", "directory"])
def test_a_profile_file_that_cannot_be_read_is_named_not_called_unknown(tmp_path: Path, make, reason: str) -> None:
    """`profiles/gpu.yaml` exists but is a symlink loop, a dangling symlink or a directory: the error named no
    file and said 'unknown profile ... (did you mean 'gpu'?)', for the very name the user had typed."""
    write(tmp_path / "s.yaml", GOOD + SPACE + "profile: gpu\n")
    (tmp_path / "profiles").mkdir()
    make(tmp_path / "profiles" / "gpu.yaml")
    line = assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q"), str(tmp_path / "profiles" / "gpu.yaml"),
                                 reason)
    assert "unknown profile" not in line and "did you mean" not in line
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("name", ["a\x00b", "a\nb", "a\tb", "a\x1b[31mred", "a\x7f", "a\x9bb"],
                         ids=["nul", "newline", "tab", "escape", "del", "c1-csi"])
def test_a_spec_name_with_a_control_character_is_refused_before_the_store(tmp_path: Path, name: str) -> None:
    """`name: "a\\0b"` made a sweep no command could name again (an argument cannot hold a NUL byte; the
    printed `sweeplab best 'a\\x00b'` names another sweep), and a newline, a tab or an escape made the printed
    next commands name something else than the stored sweep."""
    write(tmp_path / "s.yaml", GOOD + SPACE + f"name: {json.dumps(name)}\n")
    assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q"), "s.yaml: name: ", "control character",
                          repr(name))
    assert not (tmp_path / "store").exists()
    with pytest.raises(SpecError, match="control character"):
        from sweeplab.spec import parse_spec
        parse_spec({"function": "t.py:f", "method": "random", "name": name, "parameters": {"x": {"values": [1]}}})


@pytest.mark.parametrize("command", ["sweep", "run"])
def test_a_name_option_with_a_control_character_is_refused_before_the_store(tmp_path: Path, command: str) -> None:
    """The same for `--name`: `sweeplab sweep s.yaml --name $'a\\nb'` recorded a sweep the printed commands
    could not name."""
    write(tmp_path / "s.yaml", GOOD + SPACE)
    args = ["s.yaml"] if command == "sweep" else [f"{TRIALS}:quick"]
    assert_one_line_error(cli(tmp_path, command, *args, "--name", "a\nb", "-q"), "--name: ", "control character")
    assert not (tmp_path / "store").exists()


def test_run_sweep_refuses_a_name_with_a_control_character_before_the_store(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"name: a sweep name cannot hold a control character \('\\x00'\)"):
        run_sweep({"function": f"{TRIALS}:quick", "method": "grid",
                  "parameters": {"x": {"values": [1]}}}, store=tmp_path / "store", name="a\x00b")
    assert not (tmp_path / "store").exists()


def test_a_function_its_file_does_not_define_is_refused_before_the_store(tmp_path: Path) -> None:
    """`function: train.py:trian` created the sweep, then failed every trial with an AttributeError. The file
    is read (not imported: that would run the user's code) for its top-level names."""
    write(tmp_path / "train.py", "import math\n\ndef train(config, run):\n    return {'loss': 1.0}\n")
    write(tmp_path / "s.yaml", GOOD.replace(f"function: {TRIALS}:quick", "function: train.py:trian") + SPACE)
    assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q"), "s.yaml: function: ",
                          "train.py has no function 'trian'", "did you mean 'train'?")
    assert not (tmp_path / "store").exists()
    assert_one_line_error(cli(tmp_path, "run", "train.py:trian"), "has no function 'trian'")
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("source", [
    "from helpers import *\n",
    "def __getattr__(name):\n    return lambda config, run: {'loss': 1.0}\n",
    "def _make():\n    globals()['train'] = lambda config, run: {'loss': 1.0}\n_make()\n",
    "if True:\n    def train(config, run):\n        return {'loss': 1.0}\n",
    "try:\n    from fast import train\nexcept ImportError:\n    train = lambda config, run: {'loss': 1.0}\n",
    "def train(:\n",
], ids=["star-import", "module-getattr", "globals", "in-if", "in-try", "syntax-error"])
def test_a_file_that_may_define_the_function_is_not_refused(tmp_path: Path, source: str) -> None:
    from sweeplab.spec.target import top_level_names

    write(tmp_path / "train.py", source)
    names = top_level_names(tmp_path / "train.py")
    assert names is None or "train" in names


@pytest.mark.parametrize("override", [
    "a" * 100_000 + "=1",                       # an unknown key as long as an argument can be
    "~" + "a" * 100_000,                        # a deleted key the config does not have
    "steps=" + "a: " * 30_000,                  # a value that reads as YAML syntax
    "steps=[" + "1," * 30_000 + "1",            # a value that does not parse
    "steps=1," + "2," * 30_000 + "3",           # Hydra's multirun syntax
    "=" + "x" * 100_000,
], ids=["unknown-key", "deleted-key", "syntax-value", "unparsable-value", "multirun", "no-key"])
def test_an_error_about_a_huge_override_stays_short(tmp_path: Path, override: str) -> None:
    """A 100,000-character override made a 400 KB error line (the key and the override written out in full,
    four times): the message names them abbreviated."""
    write(tmp_path / "c.yaml", "steps: 1\n")
    write(tmp_path / "s.yaml", GOOD + "config: c.yaml\n" + SPACE)
    line = assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q", override))
    assert len(line) < 1000, len(line)
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("line", [
    'config: "base\\0.yaml"', 'checkpoint_dir: "ckpt\\0"', 'profile: "gpu\\0"', 'address: "auto\\0"',
    'function: "tr\\0ain.py:train"',
], ids=["config", "checkpoint_dir", "profile", "address", "function"])
def test_a_path_or_name_with_a_nul_byte_is_refused_before_the_store(tmp_path: Path, line: str) -> None:
    """`config: "base\\0.yaml"` ended in a traceback (ValueError: embedded null byte, from open()), and
    `checkpoint_dir: "ckpt\\0"` in one after the store was created: no path, module or address holds a NUL."""
    spec = GOOD.replace(f"function: {TRIALS}:quick\n", "") if line.startswith("function") else GOOD
    write(tmp_path / "s.yaml", spec + SPACE + line + "\n")
    key = line.partition(":")[0]
    assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q"), f"s.yaml: {key}: ", "NUL")
    assert not (tmp_path / "store").exists()


def test_a_yaml_file_name_with_a_nul_byte_is_the_error_asked_for(tmp_path: Path) -> None:
    from sweeplab._yaml import read_yaml
    from sweeplab.errors import ConfigError

    with pytest.raises(ConfigError, match="NUL"):
        read_yaml(tmp_path / "a\x00b.yaml", what="config", error=ConfigError)
    with pytest.raises(SpecError, match="NUL"):
        run_sweep(str(tmp_path / "a\x00b.yaml"), store=tmp_path / "store")
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("spec", [
    'command: [/bin/echo, "a\\0b", "${args}"]\nparameters: {x: {values: [1]}}\n',
    'command: [/bin/echo, "${args}"]\nparameters: {x: {values: ["ok", "a\\0b"]}}\n',
    'command: [/bin/echo, "${args_no_hyphens}"]\nparameters: {"x\\0y": {value: 1}}\n',
    'program: p.py\nparameters: {x: {value: "a\\0b"}}\n',
], ids=["command-item", "value", "name", "program-default-command"])
def test_a_nul_byte_a_command_trial_would_pass_as_an_argument_is_refused_before_the_store(tmp_path: Path,
                                                                                          spec: str) -> None:
    """No argument of a program can hold a NUL byte: every trial's worker ended in a traceback (ValueError:
    embedded null byte, from Popen), retried, then failed with 'worker process exited with code 1'."""
    write(tmp_path / "p.py", "print('ran')\n")
    write(tmp_path / "s.yaml", "method: grid\n" + spec)
    line = assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q"), "s.yaml: ", "NUL byte")
    assert "Traceback" not in line
    assert not (tmp_path / "store").exists()


def test_a_nul_byte_a_command_trial_passes_inside_json_is_no_error(tmp_path: Path) -> None:
    """`${args_json}` writes a NUL as \\u0000: the program gets it."""
    write(tmp_path / "s.yaml", 'method: grid\ncommand: [/bin/echo, "${args_json}"]\n'
                               'parameters: {x: {values: ["a\\0b"]}}\n')
    cp = cli(tmp_path, "sweep", "s.yaml", "-q")
    assert cp.returncode == 0, cp.stderr


@pytest.mark.parametrize("value", ["9" * 5000 + "s", "9" * 5000 + ":30", "9" * 5000 + ":30:00", "1" + "h" * 5000],
                         ids=["seconds", "clock", "clock-seconds", "unit"])
def test_an_error_about_a_huge_duration_stays_one_short_line(tmp_path: Path, value: str) -> None:
    """`budget.time: "999...:30"` (5,000 digits) ended in a traceback (the clock-time hint's int() of the hours:
    "Exceeds the limit (4300 digits)"); `"999...s"` was one error line of 5 KB, the value written out whole."""
    write(tmp_path / "s.yaml", GOOD + SPACE + f"budget: {{time: '{value}'}}\n")
    line = assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q"), "s.yaml: budget.time: ")
    assert len(line) < 600, len(line)
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("fork, fragment", [("", "--fork: expected a sweep name (a non-empty string); got ''"),
                                            ("  ", "--fork: expected a sweep name (a non-empty string)"),
                                            ("a\nb", "--fork: a sweep name cannot hold a control character")],
                         ids=["empty", "blank", "newline"])
def test_a_fork_name_is_checked_as_a_sweep_name_before_the_store_changes(tmp_path: Path, fork: str,
                                                                         fragment: str) -> None:
    """`resume OLD --fork '' --spec NEW.yaml` made a sweep named '' (a blank row in `status`), and
    `--fork $'a\\nb'` one the printed next commands could not name: `--name` refused both, `--fork` did not."""
    write(tmp_path / "s.yaml", GOOD + SPACE)
    assert cli(tmp_path, "sweep", "s.yaml", "-q", "--name", "old").returncode == 0
    before = (tmp_path / "store" / "store.db").read_bytes()
    assert_one_line_error(cli(tmp_path, "resume", "old", "--spec", "s.yaml", "--fork", fork, "-q"), fragment)
    assert json.loads(cli(tmp_path, "status", "--json").stdout)["sweeps"][0]["name"] == "old"
    assert len(json.loads(cli(tmp_path, "status", "--json").stdout)["sweeps"]) == 1
    assert (tmp_path / "store" / "store.db").read_bytes() == before


@pytest.mark.parametrize("name", ["", "   "], ids=["empty", "blank"])
def test_run_sweep_refuses_a_blank_name_before_the_store(tmp_path: Path, name: str) -> None:
    """`sl.run_sweep(spec, name="   ")` recorded a sweep whose name is blank (a blank row in `status`), and
    `name=""` one named 'sweep': the spec's `name:` and `--name` refuse both."""
    with pytest.raises(SpecError, match=r"name: a sweep name cannot be blank"):
        run_sweep({"function": f"{TRIALS}:quick", "method": "grid",
                  "parameters": {"x": {"values": [1]}}}, store=tmp_path / "store", name=name)
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("where", ["config", "profile"])
def test_a_parameter_through_a_config_key_with_a_dot_is_refused_before_the_store(tmp_path: Path, where: str) -> None:
    """A base config (or profile) written `model.hidden: 5` and a sweep searching `model.hidden`: every trial got
    the sampled model: {hidden: 7} and the stale 'model.hidden': 5 beside it, and the sweep ran."""
    write(tmp_path / "c.yaml", "steps: 1\n" + ("model.hidden: 5\n" if where == "config" else ""))
    write(tmp_path / "profiles" / "p.yaml", "model.hidden: 5\n" if where == "profile" else "data: /d\n")
    write(tmp_path / "s.yaml", GOOD + "config: c.yaml\nprofile: p\nparameters:\n  model.hidden: {values: [7]}\n")
    assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q"), "parameters.model.hidden: ",
                          "'model.hidden' is one key of the config, with a dot in it", "model: {hidden: ...}")
    assert not (tmp_path / "store").exists()
