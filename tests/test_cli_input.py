"""Bad input through the real command line: one line on stderr, exit 2, nothing written to the store.

Every entry point that reads YAML is covered (`sweep`, a spec's `config:` and `profile:`, `run --config`,
`run --profile`, `resume --spec`), and output that is not a terminal is never cut at 80 columns: errors
stay one line, piped tables print whole values. The commands run in subprocesses with stdout and stderr
piped and COLUMNS unset, as in CI or `sweeplab status | grep`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TRIALS = Path(__file__).resolve().parent / "fixtures" / "trials.py"
LONG_NAME = "my-project-with-a-rather-long-sweep-name-that-is-wider-than-eighty-columns-of-a-pipe"
LONG_VALUE = "a-categorical-value-long-enough-to-be-cut-when-a-table-assumes-eighty-columns-wide"
GOOD = f"function: {TRIALS}:quick\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"

BAD_YAML = {
    "non-utf8": GOOD.encode() + b"parameters: {x: {values: [1]}}\nname: caf\xe9\n",
    "deep-nesting": GOOD + "parameters: " + "{x: {parameters: " * 1000 + "{y: {value: 1}}" + "}}" * 1000 + "\n",
    "alias-bomb": "entity:\n  - &a0 [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n"
                  + "".join(f"  - &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 12))
                  + GOOD + "parameters: {x: {values: [1]}}\n",
    "duplicate-key": GOOD + "parameters:\n  x: {values: [1]}\n  x: {values: [2]}\n",
    "python-tag": GOOD + "parameters:\n  x: {values: !!python/object/apply:os.system [ls]}\n",
}
BAD_MESSAGE = {
    "non-utf8": "not UTF-8", "deep-nesting": "nested deeper than", "alias-bomb": "aliases (*name) expand",
    "duplicate-key": "parameters.x: duplicate key 'x' on line 6 (first on line 5)",
    "python-tag": "parameters.x.values: line 5",
}


def cli(cwd: Path, *args: str, store: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["SWEEPLAB_STORE"] = str(store if store is not None else cwd / "store")
    return subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def assert_one_line_error(cp: subprocess.CompletedProcess, *fragments: str) -> str:
    assert cp.returncode == 2, (cp.returncode, cp.stdout, cp.stderr)
    lines = cp.stderr.splitlines()
    assert len(lines) == 1, cp.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


# ------------------------------------------------------------------------------- bad YAML files


@pytest.mark.parametrize("case", list(BAD_YAML), ids=list(BAD_YAML))
def test_sweep_with_bad_spec_yaml_is_one_line_exit_2_and_no_store(tmp_path, case):
    spec = write(tmp_path / "sweep.yaml", BAD_YAML[case])
    cp = cli(tmp_path, "sweep", str(spec))
    assert_one_line_error(cp, f"error: {spec}: ", BAD_MESSAGE[case])
    assert cp.stdout == ""
    assert not (tmp_path / "store").exists()


ENTRY_POINTS = {
    # id: (files to write, command line); "{bad}" is replaced by the bad YAML of the case
    "spec-config": ({"configs/base.yaml": "{bad}", "s.yaml": GOOD + "config: configs/base.yaml\n"
                     "parameters: {x: {values: [1]}}\n"}, ["sweep", "s.yaml"], "configs/base.yaml"),
    "spec-profile": ({"profiles/local.yaml": "{bad}", "s.yaml": GOOD + "profile: local\n"
                      "parameters: {x: {values: [1]}}\n"}, ["sweep", "s.yaml"], "profiles/local.yaml"),
    "spec-config-dry-run": ({"base.yaml": "{bad}", "s.yaml": GOOD + "config: base.yaml\n"
                             "parameters: {x: {values: [1]}}\n"}, ["sweep", "s.yaml", "--dry-run"], "base.yaml"),
    "run-config": ({"base.yaml": "{bad}"}, ["run", f"{TRIALS}:quick", "--config", "base.yaml"], "base.yaml"),
    "run-profile": ({"profiles/gpu.yaml": "{bad}"}, ["run", f"{TRIALS}:quick", "--profile", "gpu"],
                    "profiles/gpu.yaml"),
}
CONFIG_BAD = {
    "duplicate-key": ("lr: 0.1\nmodel: {hidden: 1}\nlr: 0.2\n", "lr: duplicate key 'lr' on line 3 (first on line 1)"),
    "alias-bomb": ("a: &a0 [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 12)), "expand to more than"),
    "non-utf8": (b"lr: 0.1\nname: \xff\xfe\n", "line 2, column 7: byte 0xff at offset 14 is not UTF-8"),
    "tag": ("lr: !!python/name:os.system\n", "lr: line 1, column 5: unsupported YAML tag"),
}
CASES = [(e, c) for e in ENTRY_POINTS for c in CONFIG_BAD]


@pytest.mark.parametrize(("entry", "case"), CASES, ids=[f"{e}-{c}" for e, c in CASES])
def test_bad_config_or_profile_is_one_line_exit_2_and_no_store(tmp_path, entry, case):
    files, args, bad_file = ENTRY_POINTS[entry]
    content, fragment = CONFIG_BAD[case]
    for name, text in files.items():
        write(tmp_path / name, content if text == "{bad}" else text)
    cp = cli(tmp_path, *args)
    line = assert_one_line_error(cp, fragment)
    assert f"{(tmp_path / bad_file).resolve()}: " in line or f"{bad_file}: " in line
    assert not (tmp_path / "store").exists()


DRY_RUN_REFUSED = {
    # what the real run refuses before it writes anything, --dry-run refuses too (it said "valid", exit 0)
    "unknown-backend": ("backend: nope\n", [], "s.yaml: backend: unknown backend; got 'nope'; expected local or ray"),
    "too-many-workers": ("resources: {cpus: 100000}\n", [], "CPUs but this machine has"),
    "unknown-backend-option": ("", ["--backend", "nope"], "--backend: unknown backend 'nope'"),
}


@pytest.mark.parametrize("case", list(DRY_RUN_REFUSED), ids=list(DRY_RUN_REFUSED))
def test_dry_run_refuses_what_the_real_run_refuses(tmp_path, case):
    extra, args, fragment = DRY_RUN_REFUSED[case]
    write(tmp_path / "s.yaml", GOOD + extra + "parameters: {x: {values: [1]}}\n")
    for dry in (["--dry-run"], []):
        cp = cli(tmp_path, "sweep", "s.yaml", *args, *dry)
        assert_one_line_error(cp, fragment)
        assert cp.stdout == "" and not (tmp_path / "store").exists()


MISPLACED_OPTIONS = {
    # an option of the other kind of sweep was dropped without a word: --dry-run ran the objective's 100 trials
    "optuna-dry-run": (["--optuna", "objectives:objective", "--dry-run"], "--dry-run does not apply to --optuna"),
    "optuna-smoke": (["--optuna", "objectives:objective", "--smoke"], "--smoke does not apply to --optuna"),
    "optuna-profile": (["--optuna", "objectives:objective", "--profile", "gpu"], "--profile does not apply"),
    "spec-seed": (["s.yaml", "--seed", "3"], "--seed applies to --optuna only"),
    "spec-sampler": (["s.yaml", "--sampler", "RandomSampler"], "--sampler applies to --optuna only"),
    "spec-direction": (["s.yaml", "--direction", "maximize"], "--direction applies to --optuna only"),
}


@pytest.mark.parametrize("case", list(MISPLACED_OPTIONS), ids=list(MISPLACED_OPTIONS))
def test_an_option_of_the_other_kind_of_sweep_is_refused_not_dropped(tmp_path, case):
    args, fragment = MISPLACED_OPTIONS[case]
    write(tmp_path / "s.yaml", GOOD + "parameters: {x: {values: [1]}}\n")
    write(tmp_path / "objectives.py", "def objective(trial):\n    return trial.suggest_float('x', 0, 1)\n")
    cp = cli(tmp_path, "sweep", *args)
    assert_one_line_error(cp, fragment)
    assert cp.stdout == "" and not (tmp_path / "store").exists()


# ------------------------------------------------------------------------- a sweep that exists


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished one-trial sweep named LONG_NAME whose parameter `tag` has LONG_VALUE."""
    tmp = tmp_path_factory.mktemp("finished")
    write(tmp / "s.yaml", GOOD + f"parameters:\n  x: {{values: [1]}}\n  tag: {{values: [{LONG_VALUE}]}}\n")
    cp = cli(tmp, "sweep", "s.yaml", "--name", LONG_NAME, "--workers", "1", "-q", timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return tmp


def _store_state(tmp: Path) -> tuple[bytes, list[str]]:
    listed = json.loads(cli(tmp, "status", "--json").stdout)
    return (tmp / "store" / "store.db").read_bytes(), [s["name"] for s in listed["sweeps"]]


SAME_SPACE = f"parameters:\n  x: {{values: [1]}}\n  tag: {{values: [{LONG_VALUE}]}}\n"
RESUME_SPECS = {
    # each spec has the search space of the finished sweep: only its defect can stop the resume
    "duplicate-key": ({"new.yaml": GOOD + SAME_SPACE + "  x: {values: [1]}\n"},
                      "new.yaml: parameters.x: duplicate key 'x' on line 7 (first on line 5)"),
    "alias-bomb": ({"new.yaml": BAD_YAML["alias-bomb"].replace("parameters: {x: {values: [1]}}\n", SAME_SPACE)},
                   "aliases (*name) expand"),
    "bad-config": ({"base.yaml": CONFIG_BAD["duplicate-key"][0], "new.yaml": GOOD + "config: base.yaml\n" + SAME_SPACE},
                   "base.yaml: lr: duplicate key 'lr'"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(RESUME_SPECS), ids=list(RESUME_SPECS))
@pytest.mark.parametrize("fork", [False, True], ids=["resume", "fork"])
def test_resume_with_bad_spec_is_one_line_exit_2_and_store_unchanged(finished, case, fork):
    files, fragment = RESUME_SPECS[case]
    for name, text in files.items():
        write(finished / name, text)
    before = _store_state(finished)
    args = ["resume", LONG_NAME, "--spec", "new.yaml"] + (["--fork", f"forked-{case}"] if fork else [])
    assert_one_line_error(cli(finished, *args), fragment)
    assert _store_state(finished) == before


# ------------------------------------------------------------------------ output without a terminal


def test_long_error_is_one_line_on_a_pipe(tmp_path):
    deep = tmp_path / ("a-directory-with-a-long-name-" * 4) / ("and-another-one-" * 4)
    spec = write(deep / "my-sweep-spec-with-a-long-file-name.yaml",
                 GOOD + "parameters: {x: {values: [1]}}\nbudget: {trials: 3, time: 30 parsecs}\n")
    line = assert_one_line_error(cli(tmp_path, "sweep", str(spec)))
    assert line.startswith(f"error: {spec}: budget.time: ")
    assert len(line) > 200


@pytest.mark.parametrize("args", [["sweep"], ["sweep", "s.yaml", "--workers", "many"], ["no-such-command"],
                                  ["status", "--no-such-option"]],
                         ids=["missing-argument", "bad-option-value", "unknown-command", "unknown-option"])
def test_usage_errors_are_one_line_too(tmp_path, args):
    write(tmp_path / "s.yaml", GOOD + "parameters: {x: {values: [1]}}\n")
    assert_one_line_error(cli(tmp_path, *args), "--help`)")


DIGITS = "9" * 5000   # more digits than int() reads (sys.get_int_max_str_digits(): 4300)


@pytest.mark.parametrize("args", [["sweep", "s.yaml", "--trials", DIGITS], ["sweep", "s.yaml", "-w", DIGITS],
                                  ["sweep", "s.yaml", "--workers", "-" + DIGITS], ["dashboard", "--port", DIGITS],
                                  ["status", "--limit", DIGITS]],
                         ids=["trials", "workers", "negative-workers", "port", "limit"])
def test_an_integer_option_of_more_digits_than_int_reads_is_a_usage_error(tmp_path, args):
    """`--trials 999...` (5,000 digits) ended in a traceback (ValueError: Exceeds the limit (4300 digits)) from
    the options' fast coercion (cli/_coerce.py), on every command's integer options."""
    write(tmp_path / "s.yaml", GOOD + "parameters: {x: {values: [1]}}\n")
    assert_one_line_error(cli(tmp_path, *args), "Invalid value for", "--help`)")
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_a_gpu_id_of_more_digits_than_int_reads_is_a_short_usage_error(tmp_path, dry_run):
    write(tmp_path / "s.yaml", GOOD + "parameters: {x: {values: [1]}}\n")
    line = assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "--gpus", "0," + DIGITS,
                                     *(["--dry-run"] if dry_run else ["-q"])),
                                 "--gpus: GPU id '99999999999999999999...(5,000 digits)' is not a device number")
    assert len(line) < 400
    assert not (tmp_path / "store").exists()


def test_a_spec_worker_count_of_more_digits_than_int_reads_is_a_spec_error(tmp_path):
    """The early worker start reads a spec's `workers:` line before the CLI parses anything: int() of 5,000
    digits ended in a traceback on import, before the spec's own one-line error."""
    write(tmp_path / "s.yaml", GOOD + "parameters: {x: {values: [1]}}\nworkers: " + DIGITS + "\n")
    assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "-q"), "s.yaml: workers: ", "4300")
    assert not (tmp_path / "store").exists()


@pytest.mark.slow
@pytest.mark.parametrize("given", ["+" + DIGITS, DIGITS], ids=["more", "total"])
def test_resume_trials_of_more_digits_than_int_reads_is_named_short(finished, given):
    """`resume --trials` printed all 5,000 digits of such a value in its one-line error."""
    line = assert_one_line_error(cli(finished, "resume", LONG_NAME, "--trials", given),
                                 "--trials: expected +N", "99999999999999999999...(5,000 digits)")
    assert len(line) < 200


@pytest.mark.slow
def test_piped_status_prints_whole_names_and_values(finished):
    listing = cli(finished, "status")
    assert listing.returncode == 0, listing.stderr
    assert LONG_NAME in listing.stdout
    assert "…" not in listing.stdout
    trials = cli(finished, "status", LONG_NAME)
    assert trials.returncode == 0, trials.stderr
    assert f"tag={LONG_VALUE}" in trials.stdout and LONG_NAME in trials.stdout
    assert "…" not in trials.stdout
    rows = [line for line in trials.stdout.splitlines() if LONG_VALUE in line]
    assert len(rows) == 1   # one line per trial: nothing folded onto a second line


def test_the_error_printer_keeps_a_multi_line_message_on_one_line(capsys):
    from sweeplab.cli import print_error

    print_error("first part\n  second part\n\nthird " + "x" * 300)
    out = capsys.readouterr().err
    assert out == "error: first part; second part; third " + "x" * 300 + "\n"


# ------------------------------------------------------------------------- a sweep that does not exist


def test_an_unknown_sweep_name_is_one_short_line_with_a_did_you_mean(tmp_path):
    """A misspelt sweep name, in every command that takes one: exit 2, one line that suggests the closest
    name (case aside) and lists a few sweeps, not all of a store's hundreds. `resume` on a store that does
    not exist says so, and creates nothing there."""
    from sweeplab.store import Store

    store = tmp_path / "store"
    st = Store.open(store)
    for name in ["xgb-diabetes", *(f"nightly-{i:03d}" for i in range(200))]:
        st.create_sweep(name=name, method="grid", metric="loss", goal="minimize", spec={}, spec_path=None, seed=0)
    st.close()
    from sweeplab.store import queries

    reader = Store.open(store, readonly=True)
    try:
        assert "did you mean 'xgb-diabetes'?" in str(queries.unknown_sweep(reader, "XGB-Diabetes"))
    finally:
        reader.close()
    import sweeplab as sl

    with pytest.raises(sl.UserError, match="did you mean 'xgb-diabetes'"):   # the Python API says the same
        sl.load("xgb-diabetis", store=store)
    for args in (["status", "{}", "--json"], ["best", "{}"], ["export", "{}"], ["resume", "{}"], ["stop", "{}"],
                 ["repro", "{}/0"]):
        cp = cli(tmp_path, *[a.format("xgb-diabetis") for a in args], store=store)
        line = assert_one_line_error(cp, "no sweep named 'xgb-diabetis'", "did you mean 'xgb-diabetes'?")
        assert "nightly-150" not in line and len(line) < 500, line
        assert "201 sweeps" in line and "sweeplab status" in line, line
    cp = cli(tmp_path, "resume", "xgb-diabetes", store=tmp_path / "nowhere")
    assert_one_line_error(cp, "no sweeplab store at")
    assert not (tmp_path / "nowhere").exists()


# ------------------------------------------------------------------- text that looks like rich markup


def test_values_and_reasons_that_look_like_markup_print_as_written(tmp_path):
    """Parameter values, reasons and sweep names are the user's text: `[/]` or `[/data]` (a path in an
    exception) must not end `status` with a MarkupError, and `[red]x[/red]` must print with its brackets,
    in the sweep's own summary too."""
    from sweeplab.store import Store

    tag = "[red]x[/red]"
    write(tmp_path / "ok.yaml", GOOD + f"parameters:\n  tag: {{values: ['{tag}']}}\n")
    cp = cli(tmp_path, "sweep", "ok.yaml", "--name", "[bold]ok[/bold]", "--workers", "1")
    assert cp.returncode == 0, cp.stderr
    assert f"tag = '{tag}'" in cp.stdout and "sweep [bold]ok[/bold] finished" in cp.stdout, cp.stdout
    st = Store.open(tmp_path / "store")   # a failed trial as the driver records it: its exception's line
    with st.transaction():
        sid = st.create_sweep(name="fails", method="grid", metric="loss", goal="minimize", spec={}, spec_path=None,
                              seed=0)
        tid = st.add_trial(sid, 0, {"x": "[/]"}, None, seed=0)
        st.update_trial(tid, state="failed", reason="FileNotFoundError: no file [/data] [b]")
    st.close()
    for args, texts in ((["status"], ["[bold]ok[/bold]"]),
                        (["status", "[bold]ok[/bold]"], [f"tag={tag}", "[bold]ok[/bold]  finished"]),
                        (["best", "[bold]ok[/bold]"], [tag]),
                        (["status", "fails"], ["x=[/]", "no file [/data] [b]"])):
        cp = cli(tmp_path, *args)
        assert cp.returncode == 0, (args, cp.stderr[-500:])
        for text in texts:
            assert text in cp.stdout, (args, text, cp.stdout)


def test_every_styled_line_of_the_command_line_asks_for_markup() -> None:
    """The consoles print text as written (no markup by default); a line that styles (`[bold]...[/bold]`)
    must say `markup=True` (and escape what it embeds), or its tags print literally."""
    import ast
    import re

    tag = re.compile(r"\[/?(bold|dim|yellow|red|green|cyan|italic|b|i)\]")
    cli_dir = Path(__file__).resolve().parents[1] / "src" / "sweeplab" / "cli"
    missing = []
    for path in sorted(cli_dir.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "print"):
                continue
            text = "".join(v.value for arg in node.args[:1] for v in ast.walk(arg)
                           if isinstance(v, ast.Constant) and isinstance(v.value, str))
            markup = any(k.arg == "markup" and isinstance(k.value, ast.Constant) and k.value.value is True
                         for k in node.keywords)
            if tag.search(text) and not markup:
                missing.append(f"{path.name}:{node.lineno}")
    assert not missing, missing


def test_every_option_and_argument_of_every_command_says_what_it_is(tmp_path) -> None:
    """`--help` of each command explains each of its options and arguments: `resume --workers`, `--gpus`,
    `run --smoke`, `--name`, `best --json`, `profile --json`, `dashboard --host`... were listed bare."""
    import typer.main

    from sweeplab.cli import app

    group = typer.main.get_command(app)
    bare = sorted(f"{name} {param.opts[0] if param.opts else param.name}"
                  for name, command in group.commands.items() for param in command.params
                  if param.name != "help" and not (getattr(param, "help", None) or "").strip())
    assert bare == []
    shown = cli(tmp_path, "resume", "--help")
    assert shown.returncode == 0 and "parallel trials" in shown.stdout


def test_the_pareto_line_after_a_sweep_quotes_a_name_with_a_space(tmp_path) -> None:
    """A sweep with several objectives ends with "`sweeplab best my sweep` lists them": the name was not quoted
    for the shell there (the `next:` line quotes it)."""
    spec = write(tmp_path / "s.yaml", f"function: {TRIALS}:quick\nmethod: grid\nname: my sweep\n"
                 "metric: [{name: loss, goal: minimize}, {name: x, goal: maximize}]\n"
                 "parameters: {x: {values: [1]}}\n")
    done = cli(tmp_path, "sweep", str(spec), "-q", "--store", str(tmp_path / "st"))
    assert done.returncode == 0, done.stderr
    assert "`sweeplab best 'my sweep'` lists them" in done.stdout, done.stdout


@pytest.mark.parametrize("case", ["a-python-script", "a-reused-pid"])
def test_stop_signals_the_recorded_driver_whatever_its_command_line(tmp_path, case) -> None:
    """A sweep driven by `python train.py` (sl.main), a script calling sl.sweep() or a notebook: `sweeplab stop`
    took the driver for gone because its command line does not say "sweeplab", and told the user to resume a
    sweep that was still running. The driver is recognised by its pid and start time, as `status` does: a
    process that started after the driver recorded itself holds a reused pid and is left alone."""
    import signal
    import time

    from sweeplab.store import Store

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        started = time.time() if case == "a-python-script" else time.time() - 3600
        st = Store.open(tmp_path / "store")
        with st.transaction():
            sid = st.create_sweep(name="s", method="grid", metric="loss", goal="minimize", spec={},
                                  spec_path=None, seed=0)
            st.update_sweep(sid, state="running", driver=json.dumps(
                {"pid": proc.pid, "host": os.uname().nodename, "started": started, "workers": None}))
        st.close()
        done = cli(tmp_path, "stop", "s")
        if case == "a-python-script":
            assert done.returncode == 0 and "asked the driver of s" in done.stdout, done.stdout + done.stderr
            assert proc.wait(timeout=30) == -signal.SIGTERM
        else:
            assert done.returncode == 2 and "is gone" in done.stderr, done.stdout + done.stderr
            assert proc.poll() is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(("args", "fragment"), [
    (["sweep", "train.py:train"], "error: train.py: a Python file is not a sweep spec; expected a YAML spec"),
    (["sweep", "train.py"], "`sweeplab run train.py:FUNCTION` runs one trial of it"),
    (["run", "s.yaml"], "error: s.yaml: `sweeplab run` runs one trial of a function (train.py:train); a sweep spec "
                        "is run by `sweeplab sweep s.yaml`"),
], ids=["sweep-function", "sweep-py-file", "run-spec"])
def test_a_file_given_to_the_other_command_says_which_command_takes_it(tmp_path, args, fragment):
    # `sweeplab sweep train.py` read Python as YAML: "invalid YAML: mapping values are not allowed here"
    write(tmp_path / "train.py", "def train(config, run):\n    return {'loss': 1.0}\n")
    write(tmp_path / "s.yaml", GOOD + "parameters: {x: {values: [1]}}\n")
    assert_one_line_error(cli(tmp_path, *args), fragment)
    assert not (tmp_path / "store").exists()


# ------------------------------------------------------------------ a terminal or pipe that is not UTF-8

ASCII_STREAMS = {   # stdout and stderr that cannot encode "é": an ASCII codec, or the C locale not coerced to UTF-8
    "PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
    "C-locale": {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"},
}
UNICODE_NAME = "café-中"


@pytest.fixture(scope="module")
def unicode_sweep(tmp_path_factory) -> Path:
    """A finished sweep named UNICODE_NAME whose parameter values and failure reason are not ASCII."""
    tmp = tmp_path_factory.mktemp("unicode")
    write(tmp / "s.yaml", f"function: {TRIALS}:hostile\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
          "parameters:\n  x: {values: [1]}\n  label: {values: ['naïve ☃', 'Ünïcode']}\n"
          "  fail: {values: [false, true]}\n")
    cp = cli(tmp, "sweep", "s.yaml", "--name", UNICODE_NAME, "--workers", "1", "-q", timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return tmp


@pytest.mark.parametrize("streams", list(ASCII_STREAMS), ids=list(ASCII_STREAMS))
@pytest.mark.parametrize("args", [["status"], ["status", UNICODE_NAME], ["status", UNICODE_NAME, "--json"],
                                  ["best", UNICODE_NAME], ["export", UNICODE_NAME, "-o", "-"]],
                         ids=["list", "status", "json", "best", "export-stdout"])
def test_text_that_the_output_cannot_encode_is_escaped_not_a_traceback(unicode_sweep, streams, args):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "LC_ALL", "LANG", "LC_CTYPE")}
    env.update(ASCII_STREAMS[streams], SWEEPLAB_STORE=str(unicode_sweep / "store"))
    cp = subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=unicode_sweep, env=env,
                        capture_output=True, timeout=120)
    assert cp.returncode == 0, (cp.stdout, cp.stderr)
    assert b"Traceback" not in cp.stderr and b"UnicodeEncodeError" not in cp.stderr, cp.stderr
    if args[0] == "export":   # a CSV file is UTF-8 whatever the terminal: the data stays exact
        assert "naïve ☃" in cp.stdout.decode("utf-8")
        return
    out = cp.stdout.decode("ascii")   # nothing the stream could not encode was written raw
    if args[-1] == "--json":
        assert json.loads(out)["sweep"]["name"] == UNICODE_NAME   # JSON escapes it itself: the name is whole
    else:
        assert "caf\\xe9" in out or "caf\\u00e9" in out, out   # the name is still legible, escaped


@pytest.mark.parametrize("streams", list(ASCII_STREAMS), ids=list(ASCII_STREAMS))
def test_an_error_naming_text_the_output_cannot_encode_is_still_one_line_exit_2(unicode_sweep, streams):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "LC_ALL", "LANG", "LC_CTYPE")}
    env.update(ASCII_STREAMS[streams], SWEEPLAB_STORE=str(unicode_sweep / "store"))
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "best", "cafe-中"], cwd=unicode_sweep, env=env,
                        capture_output=True, timeout=120)
    assert cp.returncode == 2, (cp.stdout, cp.stderr)
    lines = cp.stderr.decode("ascii").splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no sweep named"), lines


STORE_PATHS = {   # a --store that names no store: the user's mistake, as a missing one is (exit 2, one line)
    "missing": lambda tmp: tmp / "nowhere",
    "empty-dir": lambda tmp: (tmp / "empty").mkdir() or tmp / "empty",
    "a-file": lambda tmp: write(tmp / "notes.txt", "not a store\n"),
    "db-is-a-dir": lambda tmp: (tmp / "odd" / "store.db").mkdir(parents=True) or tmp / "odd",
}


@pytest.mark.parametrize("args", [["status"], ["best", "x"], ["export", "x"]], ids=["status", "best", "export"])
@pytest.mark.parametrize("case", list(STORE_PATHS), ids=list(STORE_PATHS))
def test_a_store_path_that_is_no_store_is_bad_input_whatever_it_is(tmp_path, case, args):
    store = STORE_PATHS[case](tmp_path)
    assert_one_line_error(cli(tmp_path, *args, "--store", str(store)), str(store))


def _on_a_terminal(cwd: Path, *args: str, columns: int) -> str:
    """What the command writes to a terminal `columns` wide (a pseudo-terminal), escape sequences removed."""
    import pty
    import re

    env = {**os.environ, "COLUMNS": str(columns), "LINES": "24", "SWEEPLAB_STORE": str(cwd / "store")}
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "sweeplab", *args], cwd=cwd, env=env, stdout=child,
                            stderr=child, stdin=subprocess.DEVNULL)
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert proc.wait(timeout=60) == 0
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))


@pytest.mark.parametrize("args", [["status"], ["status", UNICODE_NAME]], ids=["list", "sweep"])
def test_a_narrow_terminal_still_shows_every_cell_of_a_table(unicode_sweep, args):
    """COLUMNS=20 (a split pane, a phone's SSH client): rich would squeeze a table of 8 columns into 20
    characters by cutting every cell to nothing. The table is printed as wide as its words need instead, and
    the terminal wraps its lines: nothing is lost."""
    text = _on_a_terminal(unicode_sweep, *args, columns=20)
    for word in (["café-中", "finished"] if len(args) == 1 else ["completed", "failed", "naïve", "Ünïcode"]):
        assert word in text, text


def test_the_next_commands_after_a_sweep_named_like_an_option_run_as_printed(tmp_path):
    """A sweep named `-exp` (`--name=-exp`): `sweeplab status -exp` would read -e -x -p as options; the
    printed commands put the name after `--`, and each runs as printed."""
    import shlex

    write(tmp_path / "s.yaml", GOOD + "parameters: {x: {values: [1]}}\n")
    cp = cli(tmp_path, "sweep", "s.yaml", "--name=-exp", "--workers", "1", "-q", timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    step = next(line for line in cp.stdout.splitlines() if line.startswith("next: "))
    commands = [shlex.split(c) for c in step.removeprefix("next: ").split("  |  ")]
    for args in commands:
        if args[1] in ("status", "best"):
            assert args[0] == "sweeplab" and "--" in args, step
            done = cli(tmp_path, *args[1:])
            assert done.returncode == 0, (args, done.stderr)
            assert "-exp" in done.stdout


@pytest.mark.parametrize("streams", list(ASCII_STREAMS), ids=list(ASCII_STREAMS))
def test_a_trial_printing_text_the_terminal_cannot_encode_still_completes(tmp_path, streams):
    """A function trial's stdout is its log file (UTF-8), not the terminal: `print("naïve ☃")` in a trial
    completes whatever PYTHONIOENCODING or locale the sweep was started with, and the log keeps the text."""
    write(tmp_path / "pr.py", 'def f(config, run):\n    print("naïve ☃ " + str(config.x))\n    return {"loss": 1.0}\n')
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "LC_ALL", "LANG", "LC_CTYPE")}
    env.update(ASCII_STREAMS[streams], SWEEPLAB_STORE=str(tmp_path / "store"))
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "run", "pr.py:f", "x=1", "-q", "--name", "pr"],
                        cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert cp.returncode == 0, (cp.stdout, cp.stderr)
    logs = [p.read_bytes() for p in (tmp_path / "store" / "logs").rglob("*") if p.is_file()]
    assert any("naïve ☃ 1".encode() in log for log in logs), logs


@pytest.mark.parametrize("args", [["--version"], ["-V"]], ids=["--version", "-V"])
def test_the_version_is_one_line_exit_0(tmp_path, args):
    import sweeplab

    cp = cli(tmp_path, *args)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == f"sweeplab {sweeplab.__version__}\n" and cp.stderr == ""


@pytest.mark.parametrize("args", [["-h"], ["status", "-h"], ["export", "-h"]], ids=["app", "status", "export"])
def test_dash_h_is_help_as_dash_dash_help_is(tmp_path, args):
    cp = cli(tmp_path, *args)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == cli(tmp_path, *args[:-1], "--help").stdout and "Usage:" in cp.stdout


def test_a_store_path_with_an_unexpanded_tilde_is_the_home_directory(tmp_path):
    """SWEEPLAB_STORE="~/runs" from a .env file or a container's environment, or `--store=~/runs` (no shell
    expands a tilde after `=`): the store is under $HOME, never a directory named `~` in the working directory."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    write(work / "s.yaml", GOOD + "parameters: {x: {values: [1]}}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(HOME=str(home), SWEEPLAB_STORE="~/runs")
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "s.yaml", "--name", "t", "-q"], cwd=work,
                        env=env, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    assert (home / "runs" / "store.db").is_file() and not (work / "~").exists()
    del env["SWEEPLAB_STORE"]
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", "t", "--store=~/runs"], cwd=work, env=env,
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0 and "completed" in cp.stdout, cp.stderr


def test_a_table_wider_than_the_terminal_leaves_the_console_following_the_terminal_size():
    """After a table printed wider than the terminal, the console's width is the terminal's again, read at
    each print: a later resize (or the live progress panel) is not stuck at the table's width."""
    import io

    from sweeplab.cli.output import Table, _Console

    console = _Console(file=io.StringIO(), force_terminal=True, width=30)
    console._width = None   # as on a real terminal without COLUMNS: its size is read at each print
    before = console.width
    table = Table("a", "b")
    table.add_row("word-" * 20, "x")
    console.print(table)
    assert console._width is None and console.width == before
    assert "word-" * 3 in console.file.getvalue().replace("\n", "")


def test_json_to_a_closed_standard_output_is_a_one_line_error_not_a_traceback(finished):
    """`sweeplab status --json >&-` (a cron line or a daemon with no stdout): exit 1 and one line on stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["SWEEPLAB_STORE"] = str(finished / "store")
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", "--json"], cwd=finished, env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120,
                        preexec_fn=lambda: os.close(1))
    assert cp.returncode == 1, cp.stderr
    assert cp.stderr.startswith("error: ") and len(cp.stderr.splitlines()) == 1, cp.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_asking_a_sweep_for_help_starts_no_early_worker(flag):
    from sweeplab.cli._early import planned_workers

    assert planned_workers(["sweeplab", "sweep", "s.yaml", "-w", "2"]) == 2
    assert planned_workers(["sweeplab", "sweep", "s.yaml", "-w", "2", flag]) is None


@pytest.mark.parametrize("name", ["", "   ", "\t"], ids=["empty", "spaces", "tab"])
@pytest.mark.parametrize("command", ["sweep", "run"])
def test_a_blank_name_option_is_refused_as_a_blank_spec_name_is(tmp_path, command, name):
    """`--name "  "` made a sweep no table or command line can show or name; the spec's `name: "  "` was
    already refused. Both are bad input: one line, exit 2, no store."""
    write(tmp_path / "s.yaml", GOOD + "parameters: {x: {values: [1]}}\n")
    args = ["sweep", "s.yaml"] if command == "sweep" else ["run", f"{TRIALS}:quick"]
    assert_one_line_error(cli(tmp_path, *args, "--name", name, "-q"), "--name")
    assert not (tmp_path / "store").exists()


# ---------------------------------------------------------------- one key, one value: nothing silently replaced

BASE = "steps: 2\nlr: 0.1\nmodel: {hidden: 4}\n"
DUPLICATES = {   # id: (command line after the target, fragments the one-line error names)
    "same-key": (["lr=1", "lr=2"], ["lr: ", "'lr=2'", "lr=1 and lr=2", "expected each config key in one override"]),
    "same-value": (["lr=1", "lr=1"], ["lr: ", "lr=1 and lr=1"]),
    "plus-plus": (["lr=1", "++lr=2"], ["lr: ", "lr=1 and ++lr=2"]),
    "added-twice": (["+new=1", "++new=2"], ["new: ", "+new=1 and ++new=2"]),
    "delete-and-set": (["~lr", "lr=2"], ["lr: ", "~lr and lr=2"]),
    "parent-then-child": (["model={hidden: 8}", "model.hidden=16"], ["model: ", "model.hidden=16",
                                                                      "one would replace the other"]),
    "child-then-parent": (["model.hidden=16", "model={hidden: 8}"], ["model: ", "model.hidden=16 and model={"]),
    "option-twice": (["--profile", "a", "--profile=b"], ["--profile given twice", "'--profile a' and '--profile=b'"]),
    "short-option-twice": (["-q", "-pa", "-p", "b"], ["--profile given twice", "'-pa' and '-p b'"]),
}


@pytest.mark.parametrize(("command", "case"), [("sweep", c) for c in DUPLICATES] + [("run", "same-key"),
                                                                                   ("run", "short-option-twice")],
                         ids=[*DUPLICATES, "run-same-key", "run-short-option-twice"])
def test_a_key_or_option_given_twice_is_refused_naming_both_values(tmp_path, command, case):
    write(tmp_path / "configs" / "base.yaml", BASE)
    for name in ("a", "b"):
        write(tmp_path / "profiles" / f"{name}.yaml", "data_dir: /tmp\n")
    write(tmp_path / "s.yaml", GOOD + "config: configs/base.yaml\nparameters: {x: {values: [1]}}\n")
    args, fragments = DUPLICATES[case]
    head = ["sweep", "s.yaml", "--dry-run"] if command == "sweep" else ["run", f"{TRIALS}:quick", "-c",
                                                                       "configs/base.yaml"]
    assert_one_line_error(cli(tmp_path, *head, *args), *fragments)
    assert not (tmp_path / "store").exists()


def test_the_python_api_refuses_a_key_overridden_twice(tmp_path):
    import sweeplab as sl
    from sweeplab.errors import ConfigError

    spec = {"function": f"{TRIALS}:quick", "method": "grid", "metric": {"name": "loss", "goal": "minimize"},
            "config": str(write(tmp_path / "base.yaml", BASE))}
    for call in (sl.run_sweep, sl.sweep):
        with pytest.raises(ConfigError, match=r"^steps: override 'steps=3' names 'steps' again.*steps=1 and steps=3"):
            call(spec, store=tmp_path / "store", overrides=["steps=1", "lr=0.5", "steps=3"])
    assert not (tmp_path / "store").exists()


def test_a_script_option_with_its_value_attached_replaces_the_default_of_sl_main(tmp_path):
    # `python train.py -pgpu` beside sl.main(train, profile="local"): the default was appended after it and won
    write(tmp_path / "profiles" / "local.yaml", "steps: 1\n")
    write(tmp_path / "profiles" / "gpu.yaml", "steps: 4\n")
    write(tmp_path / "train.py", f"import sys\nsys.path.insert(0, {str(TRIALS.parent)!r})\nimport sweeplab as sl\n"
          "from trials import quick\n\nif __name__ == '__main__':\n    sl.main(quick, profile='local')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["SWEEPLAB_STORE"] = str(tmp_path / "store")
    cp = subprocess.run([sys.executable, "train.py", "-pgpu", "-q"], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    best = json.loads(cli(tmp_path, "best", "run-trials", "--json").stdout)
    assert best["metrics"]["loss"] == pytest.approx(1 / 4)   # the gpu profile's 4 steps


# -------------------------------------------- a file that is not there is named with who points to it

SPEC_TAIL = "parameters: {x: {values: [1]}}\n"
MISSING_FILES = {   # id: (spec lines, extra arguments, fragments of the one-line error)
    "spec-config": ("config: configs/nope.yaml\n", [],
                    ["error: s.yaml: config: config file not found", "configs/nope.yaml",
                     "expected a readable YAML file (a relative config: is read from the spec file's directory)"]),
    "spec-config-is-a-dir": ("config: configs\n", [], ["error: s.yaml: config: cannot read the config file",
                                                       "expected a readable YAML file"]),
    "spec-profile": ("profile: nope\n", [], ["error: s.yaml: profile: unknown profile", "got 'nope'",
                                            "expected one of the available profiles: local"]),
    "spec-profile-path": ("profile: profiles/nope.yaml\n", [], ["error: s.yaml: profile: profile file not found",
                                                               "got 'profiles/nope.yaml'", "does not exist"]),
    "option-config": ("config: configs/base.yaml\n", ["--config", "configs/nope.yaml"],
                      ["error: --config: config file not found", "configs/nope.yaml", "expected a readable"]),
    "option-profile": ("profile: local\n", ["--profile", "nope"], ["error: --profile: unknown profile", "got 'nope'"]),
}


@pytest.mark.parametrize("case", list(MISSING_FILES), ids=list(MISSING_FILES))
def test_a_missing_config_or_profile_is_named_with_the_spec_key_or_option_that_names_it(tmp_path, case):
    lines, args, fragments = MISSING_FILES[case]
    write(tmp_path / "configs" / "base.yaml", BASE)
    write(tmp_path / "profiles" / "local.yaml", "data_dir: /tmp\n")
    write(tmp_path / "s.yaml", GOOD + lines + SPEC_TAIL)
    line = assert_one_line_error(cli(tmp_path, "sweep", "s.yaml", "--dry-run", *args), *fragments)
    assert args or "--" not in line   # a spec's own key is not called an option, nor an option a spec key
    assert not (tmp_path / "store").exists()


def test_run_names_its_missing_config_by_its_option(tmp_path):
    assert_one_line_error(cli(tmp_path, "run", f"{TRIALS}:quick", "-c", "nope.yaml"),
                          "error: --config: config file not found", str(tmp_path / "nope.yaml"))
    assert not (tmp_path / "store").exists()


# ------------------------------------------------------------------------------------------- GPU ids

BAD_GPUS = {"duplicate-and-negative": ("0,0,-1", "GPU id '-1' is not a device number"),
            "duplicate": ("1,0,1", "GPU 1 is given twice"),
            "not-a-number": ("0,a", "GPU id 'a' is not a device number"),
            "fraction": ("1.5", "GPU id '1.5' is not a device number"),
            "empty-part": ("0,,1", "an empty GPU id")}


# every case at --dry-run; one real run per kind of check (a repeated id, an id that is no number)
GPU_CASES = [(case, True) for case in BAD_GPUS] + [("duplicate", False), ("not-a-number", False)]


@pytest.mark.parametrize(("case", "dry_run"), GPU_CASES,
                         ids=[f"{case}-{'dry-run' if dry else 'run'}" for case, dry in GPU_CASES])
def test_bad_gpu_ids_are_refused_at_dry_run_as_at_the_run(tmp_path, case, dry_run):
    text, fragment = BAD_GPUS[case]
    write(tmp_path / "s.yaml", GOOD + SPEC_TAIL)
    cp = cli(tmp_path, "sweep", "s.yaml", f"--gpus={text}", *(["--dry-run"] if dry_run else ["-q"]))
    assert_one_line_error(cp, f"error: --gpus: {fragment}", f"got {text!r}", "expected")
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("ids", [[0, 0], [-1], [0, 1.0], [True], "0,1"], ids=["duplicate", "negative", "float",
                                                                            "bool", "text"])
def test_the_python_api_refuses_bad_gpu_ids_before_the_store(tmp_path, ids):
    import sweeplab as sl
    from sweeplab.errors import UserError

    spec = {"function": f"{TRIALS}:quick", "method": "grid", "metric": {"name": "loss", "goal": "minimize"},
            "parameters": {"x": {"values": [1]}}}
    with pytest.raises(UserError, match=r"^gpu_ids: .*expected"):
        sl.run_sweep(spec, store=tmp_path / "store", gpu_ids=ids)
    assert not (tmp_path / "store").exists()


# ------------------------------------------- a sweep name the C locale cannot encode, through every command

C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}   # ASCII file names too


def c_locale_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "LC_ALL", "LANG", "LC_CTYPE")}
    env.update(C_LOCALE, SWEEPLAB_STORE=str(cwd / "store"))
    return subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=cwd, env=env, capture_output=True,
                          timeout=120)


@pytest.fixture(scope="module")
def c_locale_sweep(tmp_path_factory) -> Path:
    """A finished sweep named UNICODE_NAME, one of whose trials failed, started in the C locale."""
    tmp = tmp_path_factory.mktemp("c-locale")
    write(tmp / "s.yaml", f"function: {TRIALS}:hostile\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
          "parameters:\n  x: {values: [1]}\n  label: {values: ['naïve']}\n  fail: {values: [false, true]}\n")
    cp = c_locale_cli(tmp, "sweep", "s.yaml", "--name", UNICODE_NAME, "-w", "1", "-q")
    assert cp.returncode == 0, (cp.stdout, cp.stderr)
    return tmp


C_LOCALE_COMMANDS = {   # id: (arguments, what stdout or stderr shows once it worked)
    "resume": (["resume", UNICODE_NAME, "--trials", "+1", "-q"], b"results:"),
    "fork": (["resume", UNICODE_NAME, "--spec", "s.yaml", "--fork", "fourchette-\u00e9", "-q"], b"results:"),
    "status": (["status", UNICODE_NAME], b"completed"),
    "best": (["best", UNICODE_NAME], b"best of caf"),
    "repro": (["repro", f"{UNICODE_NAME}/1"], b"ValueError: na"),
    # a trial of under 20 ms may have no profile at all (exit 1): either way the command found the trial
    "profile": (["profile", f"{UNICODE_NAME}/0"], (b"no step figures", b"no profile recorded")),
    "export": (["export", UNICODE_NAME], b"wrote "),
    "stop": (["stop", UNICODE_NAME], b"is not running"),
    "run": (["run", f"{TRIALS}:quick", "--name", "r\u00fcn-\u4e2d", "label=\u00e9t\u00e9", "-q"], b"results:"),
}


@pytest.mark.parametrize("case", list(C_LOCALE_COMMANDS), ids=list(C_LOCALE_COMMANDS))
def test_every_command_naming_a_sweep_works_in_the_c_locale(c_locale_sweep, case):
    """In the C locale (no UTF-8 coercion) Python reads `café-中` from argv as surrogate escapes and can name no
    file `café-中`: `resume` said 'no sweep named caf\\udcc3...', and a sweep, run or fork named so ended in a
    UnicodeEncodeError traceback as it created the sweep's lock file."""
    args, shown = C_LOCALE_COMMANDS[case]
    cp = c_locale_cli(c_locale_sweep, *args)
    assert b"Traceback" not in cp.stderr and b"no sweep named" not in cp.stderr, cp.stderr
    assert any(s in cp.stdout + cp.stderr for s in (shown if isinstance(shown, tuple) else (shown,))), (
        cp.stdout, cp.stderr)
    no_profile = case == "profile" and b"no profile recorded" in cp.stdout
    assert cp.returncode == (2 if case == "stop" else 1 if case == "repro" or no_profile else 0), (cp.stdout,
                                                                                                 cp.stderr)


COMMAND_PROGRAM = """\
import json, os, sys
utf8 = lambda text: os.fsencode(text).decode("utf-8")   # the bytes it was given, read as UTF-8
print(json.dumps({"argv": [utf8(a) for a in sys.argv[1:]], "sweep": utf8(os.environ["SWEEPLAB_SWEEP"])}))
print("@sweeplab " + json.dumps({"loss": 1.0}))
"""


def test_a_command_trial_with_text_the_c_locale_cannot_encode_runs_and_gets_it_as_utf8(tmp_path):
    """A command trial of a sweep named `café-中`, or given `label=naïve`, failed every attempt in the C locale
    ('worker process exited with code 1'): its worker could not encode the sweep's name in the program's
    environment, nor the value in its argv, and died on a UnicodeEncodeError traceback. The program gets
    them as the UTF-8 the name and value are, whatever its locale."""
    write(tmp_path / "prog.py", COMMAND_PROGRAM)
    write(tmp_path / "s.yaml", f"command: ['{sys.executable}', prog.py, '${{args}}']\nmethod: grid\n"
          "metric: {name: loss, goal: minimize}\nparameters:\n  label: {values: ['naïve']}\n")
    cp = c_locale_cli(tmp_path, "sweep", "s.yaml", "--name", UNICODE_NAME, "-q")
    assert cp.returncode == 0, (cp.stdout, cp.stderr)
    assert b"Traceback" not in cp.stderr, cp.stderr
    logs = list((tmp_path / "store" / "logs").iterdir())
    shown = next(json.loads(line) for line in (logs[0] / "0-1.log").read_text("utf-8").splitlines()
                 if line.startswith("{\"argv\""))
    assert shown == {"argv": ["--label=naïve"], "sweep": UNICODE_NAME}



@pytest.mark.parametrize("args", [["--help"], ["-h"], ["status", "--help"], ["sweep", "s.yaml", "-h"]],
                         ids=["help", "h", "command-help", "after-arguments"])
def test_help_with_stdout_closed_is_one_error_line_exit_1(tmp_path, args):
    """`sweeplab --help >&-` printed nothing and exited 0 (click's echo writes nowhere when there is no stdout),
    while every other output said `standard output is closed` and exited 1."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    cp = subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1))
    assert cp.returncode == 1, cp.stderr
    assert cp.stderr.startswith("error: standard output is closed") and len(cp.stderr.splitlines()) == 1, cp.stderr


@pytest.mark.parametrize("target, fragments", [
    ("nomodule:f", ["function: module 'nomodule' not found", "got 'nomodule:f'"]),
    ("json.nomodule:f", ["module 'json.nomodule' not found"]),
    ("helpers:nofn", ["helpers.py has no function 'nofn'", "did you mean 'nofun'?"]),
], ids=["missing-module", "missing-submodule", "missing-function"])
def test_a_spec_function_that_cannot_be_imported_is_refused_before_the_store(tmp_path, target, fragments):
    """`function: nomodule:f` failed every trial (ModuleNotFoundError), after the sweep was written."""
    write(tmp_path / "helpers.py", "def nofun(config):\n    return {'loss': 1.0}\n")
    spec = write(tmp_path / "s.yaml", f"function: {target}\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
                 "parameters: {x: {values: [1]}}\n")
    line = assert_one_line_error(cli(tmp_path, "sweep", str(spec)), *fragments, "s.yaml")
    assert "Traceback" not in line
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("args", [["sweep", "s.yaml", "-q", "--store", ""], ["sweep", "s.yaml", "-q", "--store="],
                                  ["status", "--store", ""], ["run", f"{TRIALS}:quick", "--store", " "]],
                         ids=["sweep", "sweep-equals", "status", "run-blank"])
def test_an_empty_store_option_is_a_usage_error_not_the_working_directory(tmp_path, args):
    """`--store "$UNSET_VAR"` ran the sweep with the working directory as the store: store.db, logs/, locks/
    and checkpoints/ written straight into it."""
    write(tmp_path / "s.yaml", GOOD + "parameters: {x: {values: [1]}}\n")
    assert_one_line_error(cli(tmp_path, *args), "--store", "is empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
