"""`trial.workdir: trial`: each trial runs in a directory of its own (`<store>/workdirs/<sweep>/<trial>/`), so
that parallel trials writing the same relative file (`model.h5`, `checkpoint.pt`, `lightning_logs/`) do not
read each other's; a retry runs in the same directory and finds what the failed attempt wrote; the sweep's
directory stays reachable (SWEEPLAB_ORIGINAL_CWD, `run.original_cwd`). Real sweeps, real processes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeplab.errors import SpecError
from sweeplab.spec import parse_spec

# A W&B-style program: writes out.txt in its working directory, waits for the other trial to write its own,
# then reads it back. Attempt 1 of x=2 leaves resume.txt and fails; attempt 2 reports whether it found it.
PROGRAM = """\
import json, os, sys, time
x = int(sys.argv[1].split("=")[1])
attempt = int(os.environ["SWEEPLAB_ATTEMPT"])
with open("out.txt", "w") as f:
    f.write(str(x))
if x == 2 and attempt == 1:
    open("resume.txt", "w").write("written by attempt 1")
    sys.exit(3)
open(os.path.join(os.environ["SWEEPLAB_ORIGINAL_CWD"], f"wrote-{x}"), "w").close()
end = time.monotonic() + 60   # both trials have written their out.txt (a sleep of 0.4 s did not wait for a late one)
while not all(os.path.exists(os.path.join(os.environ["SWEEPLAB_ORIGINAL_CWD"], f"wrote-{n}")) for n in (1, 2)):
    assert time.monotonic() < end, "the other trial did not write its out.txt"
    time.sleep(0.02)
facts = {"cwd": os.getcwd(), "original": os.environ["SWEEPLAB_ORIGINAL_CWD"], "wandb_dir": os.environ.get("WANDB_DIR")}
with open(os.path.join(os.environ["SWEEPLAB_ORIGINAL_CWD"], f"facts-{x}.json"), "w") as f:
    json.dump(facts, f)
print("@sweeplab " + json.dumps({"read": int(open("out.txt").read()), "x": x,
                                 "resumed": int(os.path.exists("resume.txt"))}))
"""


def _store_rows(store: Path, sweep: str) -> dict[int, dict]:
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", sweep, "--json", "--store", str(store)],
                        capture_output=True, text=True, timeout=60, check=True)
    return {t["number"]: t for t in json.loads(cp.stdout)["trials"]}


@pytest.mark.slow
def test_parallel_wandb_program_trials_each_read_their_own_file_and_a_retry_finds_its_first_attempts(cli):
    """Two workers, one W&B command (`${env} ${interpreter} ${program} ${args}`, the program found through its
    absolute path from the trial's directory): each trial reads back the out.txt it wrote (in the sweep's
    directory they read each other's), and the retry of x=2 finds resume.txt its failed attempt wrote."""
    (cli.tmp / "prog.py").write_text(PROGRAM)
    f = cli.spec("s", "program: prog.py\ncommand: ['${env}', '${interpreter}', '${program}', '${args}']\n"
                      "method: grid\nmetric: {name: x}\nparameters:\n  x: {values: [1, 2]}\n"
                      "trial: {workdir: trial, retries: 1}\n")
    cli("sweep", str(f), "--name", "wd", "--workers", "2", "-q", check=True)
    trials = {t["params"]["x"]: t for t in cli.status("wd")["trials"]}
    assert trials[1]["state"] == trials[2]["state"] == "completed", trials
    assert trials[2]["attempts"] == 2, trials[2]
    for x, t in trials.items():
        assert t["metrics"]["read"] == x, t   # its own out.txt, not the other trial's
    assert trials[2]["metrics"]["resumed"] == 1, trials[2]   # the retry ran in the same directory
    assert trials[1]["metrics"]["resumed"] == 0
    tmp = str(cli.tmp.resolve())
    for x, t in trials.items():
        own = cli.store.resolve() / "workdirs" / "wd" / str(t["number"])
        facts = json.loads((cli.tmp / f"facts-{x}.json").read_text())
        assert facts == {"cwd": str(own), "original": tmp, "wandb_dir": str(own)}, facts
        assert (own / "out.txt").read_text() == str(x)
        header = (cli.store / "logs" / "wd" / f"{t['number']}-1.log").read_text().splitlines()[:3]
        assert header[2] == f"# cwd: {json.dumps(str(own))}", header   # the log says where it ran
        assert json.loads(header[1][len("# argv: "):])[2] == str(cli.tmp.resolve() / "prog.py"), header
    assert not (cli.tmp / "out.txt").exists()   # nothing written in the sweep's directory


# ------------------------------------------------------------------------------------------ function trials
def records(config, run):
    """Writes out.txt in its working directory and records where it ran in the sweep's directory."""
    Path("out.txt").write_text(str(config["x"]))
    facts = {"cwd": os.getcwd(), "env": os.environ.get("SWEEPLAB_ORIGINAL_CWD"), "api": run.original_cwd,
             "data": Path(run.original_cwd, "data.txt").read_text(), "read": Path("out.txt").read_text(),
             "pid": os.getpid()}
    Path(run.original_cwd, f"facts-{config['x']}.json").write_text(json.dumps(facts))
    return {"x": config["x"]}


@pytest.mark.slow
def test_a_function_trial_runs_in_its_own_directory_and_reaches_the_sweeps(cli):
    """One worker, two trials (the worker is reused): each runs in its own directory, with the sweep's
    directory in SWEEPLAB_ORIGINAL_CWD and run.original_cwd, where it reads its data file."""
    (cli.tmp / "data.txt").write_text("data")
    f = cli.spec("f", f"function: {Path(__file__).resolve()}:records\nmethod: grid\nmetric: {{name: x}}\n"
                      "parameters:\n  x: {values: [1, 2]}\ntrial: {workdir: trial, retries: 0}\n")
    cli("sweep", str(f), "--name", "fn", "--workers", "1", "-q", check=True)
    trials = {t["params"]["x"]: t for t in cli.status("fn")["trials"]}
    tmp = str(cli.tmp.resolve())
    facts = {x: json.loads((cli.tmp / f"facts-{x}.json").read_text()) for x in (1, 2)}
    assert facts[1]["pid"] == facts[2]["pid"]   # one worker ran both
    for x, t in trials.items():
        own = str(cli.store.resolve() / "workdirs" / "fn" / str(t["number"]))
        assert facts[x] == {"cwd": own, "env": tmp, "api": tmp, "data": "data", "read": str(x),
                            "pid": facts[x]["pid"]}, facts[x]
    assert not (cli.tmp / "out.txt").exists()


def where_am_i(config, run):
    Path(config["out"]).write_text(json.dumps({"cwd": os.getcwd(), "api": run.original_cwd,
                                               "pwd": os.environ.get("PWD")}))
    if config.get("move"):
        os.makedirs("deeper", exist_ok=True)
        os.chdir("deeper")   # the trial's own chdir is undone too
    return {"x": 1}


def test_a_reused_worker_is_back_in_the_sweeps_directory_after_a_trial_in_its_own(tmp_path):
    """A worker that ran a trial in its own directory runs the next trial (of a sweep in the sweep's directory)
    where that one says, not where the last one left it. PWD says where each runs (a shell, or a tool that
    reads $PWD, started by the function, would otherwise be told the worker's old directory)."""
    from sweeplab.backends.events import EventKind
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.testing.backends import collect, make_task

    target = f"{Path(__file__).resolve()}:where_am_i"
    be = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]))
    be.start()
    try:
        own = tmp_path / "workdirs" / "s" / "1"
        first = dataclasses.replace(make_task(tmp_path, 1, target, config={"out": str(tmp_path / "1.json"),
                                                                           "move": True}),
                                    cwd=str(own), original_cwd=str(tmp_path))
        be.submit(first)
        assert collect(be, [1])[1][-1].kind is EventKind.FINISHED
        second = make_task(tmp_path, 2, target, config={"out": str(tmp_path / "2.json")})
        be.submit(second)
        assert collect(be, [2])[2][-1].kind is EventKind.FINISHED
        # a command trial's process is told its directory in PWD too (it inherited the worker's)
        prog = "import os, sys; open(sys.argv[1], 'w').write(os.environ.get('PWD', '') + '|' + os.getcwd())"
        third = dataclasses.replace(make_task(tmp_path, 3, command=[sys.executable, "-c", prog,
                                                                    str(tmp_path / "3.txt")]),
                                    cwd=str(tmp_path / "workdirs" / "s" / "3"), original_cwd=str(tmp_path))
        be.submit(third)
        assert collect(be, [3])[3][-1].kind is EventKind.FINISHED
    finally:
        be.shutdown(grace=0.0)
    assert json.loads((tmp_path / "1.json").read_text()) == {"cwd": str(own), "api": str(tmp_path),
                                                             "pwd": str(own)}
    # `make_task` gives no original_cwd: run.original_cwd is where the trial runs
    assert json.loads((tmp_path / "2.json").read_text()) == {"cwd": str(tmp_path), "api": str(tmp_path),
                                                             "pwd": str(tmp_path)}
    own3 = str(tmp_path / "workdirs" / "s" / "3")
    assert (tmp_path / "3.txt").read_text() == f"{own3}|{own3}"


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("value", ["foo", 3, None, ["trial"]], ids=["word", "number", "null", "list"])
def test_a_bad_workdir_is_a_spec_error_naming_the_key_the_value_and_the_choices(value):
    raw = {"function": "m:f", "method": "grid", "parameters": {"x": {"value": 1}}, "trial": {"workdir": value}}
    with pytest.raises(SpecError) as info:
        parse_spec(raw, file="sweep.yaml")
    text = str(info.value)
    assert text.startswith("sweep.yaml: trial.workdir: ") and repr(value) in text, text
    assert "one of sweep, trial" in text, text


def test_workdir_values_and_default():
    base = {"function": "m:f", "method": "grid", "parameters": {"x": {"value": 1}}}
    assert parse_spec(base, file="s.yaml").trial.workdir == "sweep"
    spec = parse_spec({**base, "trial": {"workdir": "trial"}}, file="s.yaml")
    assert spec.trial.workdir == "trial"
    again = type(spec).from_jsonable(spec.to_jsonable())   # what a resumed sweep reads back from the store
    assert again.trial.workdir == "trial"


@pytest.mark.slow
def test_the_cli_refuses_a_bad_workdir_in_the_spec_and_on_the_command_line_and_a_relative_command_file(cli):
    (cli.tmp / "prog.py").write_text("print('hi')\n")
    bad = cli.spec("bad", "program: prog.py\nmethod: grid\nparameters: {x: {value: 1}}\ntrial: {workdir: foo}\n")
    cp = cli("sweep", str(bad), "-q")
    assert cp.returncode == 2 and "trial.workdir" in cp.stderr and "'foo'" in cp.stderr, cp.stderr
    assert "one of sweep, trial" in cp.stderr and str(bad.name) in cp.stderr, cp.stderr
    good = cli.spec("good", "program: prog.py\nmethod: grid\nparameters: {x: {value: 1}}\n")
    cp = cli("sweep", str(good), "--workdir", "foo", "-q")
    assert cp.returncode == 2 and "--workdir" in cp.stderr and "'foo'" in cp.stderr, cp.stderr
    # a config override (KEY=VALUE) is not the spec's key: named, not a config key nobody reads
    cp = cli("sweep", str(good), "trial.workdir=trial", "-q")
    assert cp.returncode == 2 and "--workdir trial" in cp.stderr, cp.stderr
    # `python prog.py` from the trial's own directory finds no prog.py: refused before anything is written
    rel = cli.spec("rel", f"command: [{sys.executable}, prog.py]\nmethod: grid\nparameters: {{x: {{value: 1}}}}\n")
    cp = cli("sweep", str(rel), "--workdir", "trial", "-q")
    assert cp.returncode == 2 and "command[1]" in cp.stderr and "${program}" in cp.stderr, cp.stderr
    assert not cli.store.exists()


@pytest.mark.parametrize("item", ["conf.yaml", "--config=conf.yaml", "data.path=conf.yaml"],
                         ids=["bare", "option-equals", "hydra-override"])
def test_a_relative_file_in_the_command_is_refused_also_as_the_value_of_an_option(tmp_path, item):
    """`--config=conf.yaml` (or Hydra's `data.path=conf.yaml`) names a file of the sweep's directory as much as
    `conf.yaml` alone: in the trial's own directory it names nothing, and every trial would fail."""
    from sweeplab.spec import check_command_paths

    (tmp_path / "conf.yaml").write_text("a: 1\n")
    raw = {"command": ["python", "-m", "pkg.train", item, "--lr=0.1", "${args}"], "method": "grid",
           "parameters": {"x": {"value": 1}}, "trial": {"workdir": "trial"}}
    with pytest.raises(SpecError, match=r"command\[3\]"):
        check_command_paths(parse_spec(raw, file="s.yaml"), cwd=str(tmp_path))
    check_command_paths(parse_spec({**raw, "trial": {"workdir": "sweep"}}, file="s.yaml"), cwd=str(tmp_path))
    absolute = {**raw, "command": ["python", "-m", "pkg.train", f"--config={tmp_path / 'conf.yaml'}"]}
    check_command_paths(parse_spec(absolute, file="s.yaml"), cwd=str(tmp_path))


CKPT_TO_ENV_DIR = """\
import os
d = os.environ["SWEEPLAB_CHECKPOINT_DIR"]
os.makedirs(d, exist_ok=True)
open(os.path.join(d, "c.pt"), "w").write("x")
print('@sweeplab {"loss": 1.0}')
"""


@pytest.mark.parametrize("workdir", ["trial", "sweep"])
def test_a_checkpoint_dir_under_home_reaches_a_command_trial_expanded(tmp_path, monkeypatch, workdir):
    """`checkpoint_dir: ~/ckpts` is the home directory's (docs/spec.md): a command trial was given
    SWEEPLAB_CHECKPOINT_DIR=~/ckpts/... as written, and saved into a directory named `~` in its working
    directory, where the driver (which expands it) never looked."""
    import sweeplab as sl

    home, here = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    here.mkdir()
    (here / "ck.py").write_text(CKPT_TO_ENV_DIR)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(here)
    spec = {"name": "hc", "program": "ck.py", "method": "grid", "metric": {"name": "loss"},
            "parameters": {"x": {"value": 1}}, "checkpoint_dir": "~/ckpts", "trial": {"workdir": workdir}}
    sl.sweep(spec, workers=1, store=str(tmp_path / "store"), progress=False)
    assert (home / "ckpts" / "hc" / "0" / "c.pt").is_file()
    assert not list(tmp_path.rglob("~"))


# ------------------------------------------------------------------------------------------------- repro
LEAVES_STATE = """\
import os, sys
found = os.path.exists("state.txt")
with open("state.txt", "a") as f:
    f.write("attempt\\n")
print("ran in", os.getcwd(), "found", found, "original", os.environ["SWEEPLAB_ORIGINAL_CWD"])
sys.exit(1)
"""


def leaves_state(config, run):
    found = Path("state.txt").exists()
    with open("state.txt", "a") as f:
        f.write("attempt\n")
    raise ValueError(f"ran in {os.getcwd()} found {found} original {run.original_cwd}")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["command", "function"])
def test_repro_replays_a_trial_in_a_copy_of_its_own_directory(cli, kind):
    """The replay finds what the trial left in its directory (state.txt), runs in a copy of it (the trial's own
    is not written), and the sweep's directory is still SWEEPLAB_ORIGINAL_CWD / run.original_cwd."""
    if kind == "command":
        (cli.tmp / "prog.py").write_text(LEAVES_STATE)
        target = "program: prog.py\n"
    else:
        target = f"function: {Path(__file__).resolve()}:leaves_state\n"
    f = cli.spec("r", target + "method: grid\nparameters: {x: {value: 1}}\ntrial: {workdir: trial, retries: 0}\n")
    assert cli("sweep", str(f), "--name", "rp", "--workers", "1", "-q").returncode == 1
    own = cli.store.resolve() / "workdirs" / "rp" / "0"
    assert (own / "state.txt").read_text() == "attempt\n"
    cp = cli("repro", "rp/0")
    out = cp.stdout + cp.stderr
    assert cp.returncode == 1 and "the failure reproduced" in out, out
    assert f"in a copy of the trial's own directory {own}" in out, out
    ran_in = out.rsplit("ran in ", 1)[1].split()[0]   # the replay's (the first is the trial's reason)
    assert ran_in != str(own) and ran_in.endswith("/workdir"), out
    assert f"{ran_in} found True original {cli.tmp.resolve()}" in out, out
    assert (own / "state.txt").read_text() == "attempt\n"   # the store's copy is unchanged


def checkpoints_then_fails(config, run):
    run.checkpoint({"epoch": 1}, step=1, force=True)
    raise ValueError("after its checkpoint")


@pytest.mark.slow
def test_repro_from_another_directory_finds_a_relative_checkpoint_dir_in_the_sweeps(cli):
    """`checkpoint_dir: ckpt` is the sweep's directory's `ckpt/`: `sweeplab repro` run from elsewhere looked for
    it under its own directory and refused ("wrote checkpoints but ckpt/rx/0 is gone")."""
    f = cli.spec("rx", f"function: {Path(__file__).resolve()}:checkpoints_then_fails\nmethod: grid\n"
                       "parameters: {x: {value: 1}}\ntrial: {workdir: trial, retries: 0}\ncheckpoint_dir: ckpt\n")
    assert cli("sweep", str(f), "--name", "rx", "--workers", "1", "-q").returncode == 1
    assert (cli.tmp / "ckpt" / "rx" / "0").is_dir()
    elsewhere = cli.tmp / "elsewhere"
    elsewhere.mkdir()
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "repro", "rx/0", "--store", str(cli.store.resolve())],
                        cwd=elsewhere, env=cli.env(), capture_output=True, text=True, timeout=120)
    out = cp.stdout + cp.stderr
    assert "the failure reproduced" in out and "after its checkpoint" in out, out
    assert "is gone" not in out, out


@pytest.mark.parametrize("kind", ["command", "function"])
def test_a_trial_directory_that_cannot_be_made_fails_the_attempt_naming_it(tmp_path, kind):
    """A Ray node where the store's path cannot be created: the attempt fails with a reason naming the trial's
    directory (a command trial's worker used to die: "worker process exited with code 1")."""
    from sweeplab.backends.events import EventKind
    from sweeplab.backends.local import LocalBackend, plan_slots
    from sweeplab.testing.backends import collect, make_task

    if kind == "command":
        task = make_task(tmp_path, 1, command=[sys.executable, "-c", "print(1)"])
    else:
        task = make_task(tmp_path, 1, f"{Path(__file__).resolve()}:where_am_i",
                         config={"out": str(tmp_path / "o.json")})
    blocker = tmp_path / "a-file"
    blocker.write_text("")   # a directory cannot be made inside a file
    be = LocalBackend(plan_slots(1, cpus=0, gpus=0, gpu_ids=[]))
    be.start()
    try:
        be.submit(dataclasses.replace(task, cwd=str(blocker / "workdirs" / "1"), original_cwd=str(tmp_path)))
        end = collect(be, [1])[1][-1]
    finally:
        be.shutdown(grace=0.0)
    assert end.kind is EventKind.FAILED, end
    assert f"cannot create the trial's working directory {blocker / 'workdirs' / '1'} (trial.workdir: trial)" \
        in end.data["reason"], end.data
    assert not (tmp_path / "o.json").exists()


def test_a_relative_checkpoint_dir_stays_the_sweeps_when_trials_run_in_their_own(tmp_path):
    """`checkpoint_dir: ckpt` is relative to the sweep's directory: a trial in its own directory would have
    written its checkpoints under that one, where the driver (fences, a command trial's checkpoint watch)
    does not look."""
    from sweeplab.driver.records import TrialRecord
    from sweeplab.driver.tasks import TaskBuilder

    raw = {"function": "m:f", "method": "grid", "parameters": {"x": {"value": 1}}, "checkpoint_dir": "ckpt"}
    for workdir, expected in (("trial", f"{tmp_path}/ckpt/s/3"), ("sweep", "ckpt/s/3")):
        spec = parse_spec({**raw, "trial": {"workdir": workdir}}, file="s.yaml")
        tasks = TaskBuilder(spec, sweep="s", root=str(tmp_path / "store"), cwd=str(tmp_path), overrides=(),
                            smoke=False)
        paths = tasks.paths(TrialRecord(id=1, number=3, params={}, config={}, seed=None, attempt=1))
        assert paths["checkpoint"] == expected, paths
        assert tasks.checkpoint_root() == expected.rsplit("/", 1)[0]
    assert paths["workdir"] == f"{tmp_path}/store/workdirs/s/3"


# ------------------------------------------------------------------------------------------------ resume
RESUMES_FROM_CWD = """\
import os, json, time
if os.path.exists("mark.txt"):
    print("@sweeplab " + json.dumps({"resumed": 1, "attempt": int(os.environ["SWEEPLAB_ATTEMPT"])}))
else:
    open("mark.txt", "w").write("first attempt")
    time.sleep(60)   # the driver is killed meanwhile
"""


@pytest.mark.slow
def test_a_trial_run_again_after_the_driver_died_runs_in_its_directory_again(cli):
    """`sweeplab resume` after the driver was killed mid-trial: the trial's next attempt runs in the same
    directory and finds what the first one wrote there (the path depends on the store, the sweep and the
    trial's number only)."""
    import signal
    import time

    (cli.tmp / "prog.py").write_text(RESUMES_FROM_CWD)
    f = cli.spec("r", "program: prog.py\nmethod: grid\nmetric: {name: resumed, goal: maximize}\n"
                      "parameters: {x: {value: 1}}\ntrial: {workdir: trial}\n")
    proc = cli.start("sweep", str(f), "--name", "rs", "--workers", "1", "-q")
    mark = cli.store / "workdirs" / "rs" / "0" / "mark.txt"
    try:
        deadline = time.monotonic() + 60
        while not mark.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert mark.exists(), proc.communicate(timeout=5) if proc.poll() is not None else "no mark.txt"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)   # the driver and its workers (their own session: this one only)
        proc.communicate(timeout=30)
    cli("resume", "rs", "-q", check=True)
    trial = cli.status("rs")["trials"][0]
    assert trial["state"] == "completed" and trial["metrics"]["resumed"] == 1, trial
    assert trial["metrics"]["attempt"] >= 2, trial
