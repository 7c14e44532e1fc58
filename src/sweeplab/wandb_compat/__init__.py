"""W&B programs in a sweep, unchanged and offline: `wandb.init`, `wandb.config`, `wandb.log`, `run.summary`.

sweeplab does what W&B's agent does for the real `wandb` client the user has installed (nothing of ours
is named `wandb`): it writes the trial's parameters in W&B's format to a file named by
WANDB_SWEEP_PARAM_PATH, which `wandb.init()` reads into `wandb.config` (sweep values win over
`wandb.init(config=defaults)`), with WANDB_MODE=offline so nothing is sent and a WANDB_RUN_ID of the run's
own, as the agent gives each run. WANDB_DIR is left as the user
has it: W&B keeps a run's files under ./wandb in the program's working directory (programs read
`wandb/debug.log`, `wandb/latest-run`), and `wandb sync wandb/offline-run-*` uploads them later.
Sources: wandb/wandb_agent.py (Agent._command_run) and wandb/sdk/lib/config_util.py (save_config_file_from_dict).

What the program logs reaches the trial through `_boot/_sweeplab_wandb_hook.py`: command trials get
`_boot/` first on PYTHONPATH (its `sitecustomize` arms the hook, then runs the one it hides); function
trials install it in the worker (`FunctionTrial`), and get their W&B environment
only when they start a run (`wandb.init`) or fork: a trial that never uses W&B pays next to nothing for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["BOOT_DIR", "FunctionTrial", "install_hook", "params_path", "run_env", "summary_metrics",
           "sweep_env", "trial_env", "write_sweep_params"]

#: the folder put first on a command trial's PYTHONPATH
BOOT_DIR = Path(__file__).resolve().parent / "_boot"


def write_sweep_params(path: str | Path, args: Mapping[str, Any]) -> None:
    """Write `args` (W&B's top-level parameter names -> values, see spec.wandb_args) as the YAML file W&B's
    agent writes for WANDB_SWEEP_PARAM_PATH (the hook's `write_params`, which function trials call at
    `wandb.init`)."""
    from sweeplab.wandb_compat._boot._sweeplab_wandb_hook import write_params

    write_params(str(path), args)


def run_env(sweep: str, number: int) -> dict[str, str]:
    """A trial's run's sweep id and name, as W&B's agent and server give them (WANDB_SWEEP_ID, WANDB_NAME;
    the hook's `run_env`)."""
    from sweeplab.wandb_compat._boot._sweeplab_wandb_hook import run_env as env

    return env(sweep, number)


def sweep_env(raw: Mapping[str, Any]) -> dict[str, str]:
    """The spec's `project` and `entity` as WANDB_PROJECT and WANDB_ENTITY, unless this process has them: W&B's
    agent, started as `wandb sweep` says (`wandb agent ENTITY/PROJECT/ID`), sets both for every run
    (wandb_agent.py, `wandb.env.set_project`), and `wandb sweep` takes them from the environment first, then
    the file. So `wandb.init()` without a project records its offline run in the sweep's project (where
    `wandb sync` uploads it), and programs that read `os.environ["WANDB_PROJECT"]` find it."""
    out: dict[str, str] = {}
    for key, var in (("project", "WANDB_PROJECT"), ("entity", "WANDB_ENTITY")):
        value = raw.get(key)
        if isinstance(value, str) and value and not os.environ.get(var):
            out[var] = value
    return out


def params_path(log_path: str) -> str:
    """Where a trial attempt's W&B parameters file goes: beside its log (`0-1.log` -> `0-1.wandb-params.yaml`)."""
    return f"{log_path[:-4] if log_path.endswith('.log') else log_path}.wandb-params.yaml"


def trial_env(*, param_path: str | Path, python_path: str | None = None,
              command: bool = True, sweep: str | None = None, number: int = 0,
              cwd: str | Path | None = None) -> dict[str, str]:
    """The variables a trial gets so that a W&B program runs as under W&B's agent, offline.

    `python_path` is the PYTHONPATH the trial would otherwise have; command trials get BOOT_DIR in front
    (function trials get these variables from the hook, at `wandb.init`: see `FunctionTrial`). `sweep` and
    `number` (the trial's) give the run its sweep id and name (WANDB_SWEEP_ID, WANDB_NAME: see `run_env`).
    `cwd` is where the program runs: WANDB_DIR is it, absolute, unless this process has one, as W&B's agent
    sets WANDB_DIR to the directory it runs in (wandb_agent.py, Agent.__init__), so a run's files go to its
    `wandb/` even when the program changes directory first (Hydra's job chdir), and programs that read
    `os.getenv("WANDB_DIR")` get a path."""
    from sweeplab.wandb_compat._boot._sweeplab_wandb_hook import new_run_id, run_env

    env = {
        "WANDB_MODE": "offline",                 # nothing is sent anywhere
        "WANDB_SWEEP_PARAM_PATH": str(param_path),
        "WANDB_RUN_ID": new_run_id(),            # each run's id, set by W&B's agent before the program starts
    }
    if sweep:
        env.update(run_env(sweep, number))
    if cwd is not None and not os.environ.get("WANDB_DIR"):
        env["WANDB_DIR"] = os.path.abspath(cwd)
    if command:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT_DIR), python_path) if p)
    return env


def summary_metrics(final: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a W&B run's summary, as the hook hands it over (nan/inf arrive as strings; keys
    starting with "@" are the hook's own, such as the exit code)."""
    out: dict[str, float] = {}
    for k, v in final.items():
        if k.startswith("@"):
            continue
        with contextlib.suppress(TypeError, ValueError):
            out[k] = float(v)
    return out


def _wandb_records(path: str) -> Any:
    """The records of a run's `.wandb` file (W&B's transaction log: a 7-byte `:W&B` header, then LevelDB's log
    format, 32 KiB blocks of chunks `crc32(4) length(2) type(1)`, types FULL 1, FIRST 2, MIDDLE 3, LAST 4), each
    the bytes of a `wandb_internal_pb2.Record`. A torn tail (the program killed while writing) ends the scan."""
    import struct

    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b":W&B":
        return
    pos, buf, block = 7, b"", 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:   # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        if pos + 7 + length > len(data):
            return
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk
        elif kind == 4:
            yield buf + chunk
            buf = b""


def _set_nested(target: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        inner = target.get(key)
        if not isinstance(inner, dict):
            inner = target[key] = {}
        target = inner
    target[keys[-1]] = value


# a walk for a run's files looks at this many entries in all, and at most _WALK_FOLDER of each folder (a folder
# of a million images is cut short, and the walk goes on to the next, shallowest first)
_WALK_BUDGET, _WALK_FOLDER = 200_000, 2000
_SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", ".git", ".venv", "venv", ".tox"})


def _find_run_files(run_id: str, bases: list[str], log_path: str | None) -> list[str]:
    """The `.wandb` files of the run `run_id`, wherever the program put them: `wandb/` (or `.wandb/`, as wandb
    names it when that exists) under WANDB_DIR or the working directory; else the folder wandb printed to the
    trial's log ("Run data is saved locally in ...", "wandb sync ..."), which finds `wandb.init(dir=...)` and
    `wandb.Settings(root_dir=...)` anywhere; else a bounded walk below the working directory (a quiet run whose
    program set its own WANDB_DIR or dir=), and the temporary directory wandb falls back to."""
    import glob
    import re
    import tempfile

    name = f"run-{run_id}.wandb"
    # a process that starts several runs with the trial's id (`wandb.init(reinit=True)` in a loop) gets a
    # folder of each: wandb adds `-1`, `-2` to a name already taken (`offline-run-<time>-<id>-1`)
    folder_name = re.compile(rf"offline-run-[0-9_]+-{re.escape(run_id)}(-[0-9]+)?")

    def at(folder: str) -> list[str]:
        pattern = os.path.join(glob.escape(folder), f"offline-run-*-{glob.escape(run_id)}*", name)
        return [p for p in glob.glob(pattern) if folder_name.fullmatch(os.path.basename(os.path.dirname(p)))]

    found: list[str] = []
    for base in bases:
        for sub in ("wandb", ".wandb"):
            found += at(os.path.join(base, sub))
    if found:
        return found
    if log_path:
        with contextlib.suppress(OSError):
            with open(log_path, "rb") as f:   # wandb prints the folder as the run starts and as it ends: the
                head = f.read(1 << 20)         # log's first and last MiB hold it, however long the log
                f.seek(max(f.tell(), os.fstat(f.fileno()).st_size - (1 << 20)))
                text = (head + b"\n" + f.read()).decode("utf-8", "replace")
            text = re.sub(r"\x1b\[[0-9;]*m", "", text)   # wandb colours the path on a terminal
            tail = f"-{run_id}"
            at_ = text.find("offline-run-")
            while at_ >= 0:   # the path around each mention (no regex scan: a long line of a progress bar
                start = max(text.rfind(c, 0, at_) for c in " \t\n\r'\"`") + 1   # stays linear)
                end = text.find(tail, at_)
                if end >= 0 and not any(c in text[at_:end] for c in " \t\n\r/\\"):
                    end += len(tail)
                    suffix = re.match(r"-[0-9]+", text[end:end + 12])   # a second run's `-1`
                    path = os.path.join(text[start:end + (suffix.end() if suffix else 0)], name)
                    if os.path.isfile(path):
                        found.append(path)
                at_ = text.find("offline-run-", at_ + 1)
    if found:
        return found
    from collections import deque

    budget = _WALK_BUDGET
    for base in bases:
        stack = deque([(base, 0)])   # the shallowest folders first
        while stack and budget > 0:
            folder, depth = stack.popleft()
            try:
                entries = os.scandir(folder)
            except OSError:
                continue
            with entries:
                subdirs: list[os.DirEntry[str]] = []
                for entry in entries:   # lazily: a folder of a million images stops at its share
                    budget -= 1
                    if budget <= 0 or len(subdirs) >= _WALK_FOLDER:
                        break
                    subdirs.append(entry)
            for entry in subdirs:
                with contextlib.suppress(OSError):
                    if not entry.is_dir(follow_symlinks=False) or entry.name in _SKIP_DIRS:
                        continue
                    if entry.name in ("wandb", ".wandb"):   # however many runs it holds
                        found += at(entry.path)
                    elif entry.name.startswith(("offline-run-", "run-")):
                        continue   # another run's files
                    elif depth < 8:
                        stack.append((entry.path, depth + 1))
    return found or at(os.path.join(tempfile.gettempdir(), "wandb"))


def _run_order(path: str) -> tuple[str, int, float]:
    """The order runs of one id started in: their folders' start time (`offline-run-20260101_120000-<id>`),
    then wandb's `-N` for a name already taken, then the file's time."""
    folder = os.path.basename(os.path.dirname(path))[len("offline-run-"):]
    stamp, _, rest = folder.partition("-")
    number = rest.rpartition("-")[2] if rest.count("-") else "0"
    try:
        mtime = os.path.getmtime(path)
    except OSError:
        mtime = 0.0
    return stamp, int(number) if number.isdigit() else 0, mtime


def offline_run_lines(env: Mapping[str, str], cwd: str | None = None, log_path: str | None = None) -> list[str]:
    """What a command trial's W&B run logged, read back from the run's own offline files, as the hook's report
    lines (history rows at W&B's `_step`, then `{"@summary": ...}`, the summary as wandb-core computed it,
    `define_metric` aggregates included). For a program that ran without the hook: a wrapper script that sets
    its own PYTHONPATH (`PYTHONPATH=. python train.py "$@"`) drops the hook's folder, and its trial failed with
    "metric ... was never reported" although its run logged the metric. The runs are those with the trial's
    WANDB_RUN_ID, found as `_find_run_files` says (WANDB_DIR, the working directory, the folder wandb printed
    to the trial's log `log_path`), each in turn in the order they started, as the hook reports a program's
    runs (one that starts several, `wandb.init(reinit=True)` in a loop, has a folder of each). Nothing when
    there is no such run or no wandb here to read it with."""
    run_id = env.get("WANDB_RUN_ID")
    if not run_id:
        return []
    found = _find_run_files(run_id, list(dict.fromkeys(d for d in (env.get("WANDB_DIR"), cwd) if d)), log_path)
    if not found:
        return []
    try:
        from wandb.proto import wandb_internal_pb2 as pb
    except Exception:
        return []
    lines: list[str] = []
    runs = {os.path.realpath(p): p for p in found}
    for path in sorted(runs.values(), key=_run_order):   # each run the program started with the trial's id, in
        lines += _run_lines(path, pb)                     # order, as the hook reports them
    return lines


def _run_lines(path: str, pb: Any) -> list[str]:
    """One offline run's history rows and summary (see `offline_run_lines`)."""
    from sweeplab.wandb_compat._boot._sweeplab_wandb_hook import _flatten, _summary_from

    lines: list[str] = []
    summary: dict[str, Any] = {}
    exit_code = 0
    try:
        for data in _wandb_records(path):
            record = pb.Record()   # type: ignore[attr-defined]
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "history":
                row: dict[str, Any] = {}
                for item in record.history.item:
                    with contextlib.suppress(ValueError):
                        _set_nested(row, list(item.nested_key) or [item.key], json.loads(item.value_json))
                step = row.get("_step")
                metrics = _flatten({k: v for k, v in row.items() if not str(k).startswith("_")})
                if metrics and isinstance(step, int):
                    lines.append(json.dumps({**metrics, "@step": step}, default=str))
            elif kind == "summary":
                for item in record.summary.update:
                    with contextlib.suppress(ValueError):
                        _set_nested(summary, list(item.nested_key) or [item.key], json.loads(item.value_json))
                for item in record.summary.remove:
                    keys = list(item.nested_key) or [item.key]
                    inner: Any = summary
                    for key in keys[:-1]:
                        inner = inner.get(key) if isinstance(inner, dict) else None
                    if isinstance(inner, dict):
                        inner.pop(keys[-1], None)
            elif kind == "exit":
                exit_code = record.exit.exit_code
    except Exception:
        return []
    final = _summary_from(summary)
    if exit_code:
        final["@exit_code"] = exit_code
    if final:
        lines.append(json.dumps({"@summary": final}, default=str))
    return lines


def install_hook() -> None:
    """Arm the hook in this process (a worker about to import a function trial's module, which may call
    `wandb.sweep`/`wandb.agent` at import as W&B's function-style scripts do)."""
    from sweeplab.wandb_compat._boot import _sweeplab_wandb_hook as hook

    hook.install()


def _hook() -> Any:
    from sweeplab.wandb_compat._boot import _sweeplab_wandb_hook as hook

    global _hook_module
    _hook_module = hook
    return hook


_hook_module: Any = None


class FunctionTrial:
    """A function trial's W&B side in the worker, from before its module is imported (which may call
    `wandb.sweep`/`wandb.agent` there, as W&B's function-style scripts do) to the trial's end.

    It arms the hook and hands it the trial's setup (`TrialTask.wandb`: {"param_path", "args", "env", and "dir",
    the trial's own directory with trial.workdir: trial, its WANDB_DIR}). The trial's
    W&B environment (`trial_env`) is set into os.environ only when the trial starts a run (`wandb.init`),
    with its parameters file, or before it forks; `end` takes it back. A trial that never uses W&B pays a
    few attribute stores for all this."""

    def __init__(self, setup: Mapping[str, Any]) -> None:
        self._hook = hook = _hook_module or _hook()
        self.final: dict[str, Any] = {}   # the summary of W&B runs it started ("@exit_code": a failure)
        if not hook.installed():
            hook.install()
        hook.begin_trial(setup["param_path"], setup.get("args") or {}, setup.get("env"), cwd=setup.get("dir"))
        self._report = hook.report_path(str(setup["param_path"]))

    def call(self, fn: Callable[[], Any], log: Callable[..., Any], stopped: Callable[[], bool] | None = None, *,
             mirror: bool = True) -> Any:
        """`fn()`, with the W&B runs it starts reporting through `log(metrics, step=)`; their summary (and a
        `wandb.finish(exit_code=N)`) lands in `final`.

        As W&B's agent does between function runs, wandb's setup is torn down first, so that `wandb.init()`
        reads this trial's WANDB_SWEEP_PARAM_PATH rather than the previous one's; and again after `fn`, so that
        wandb's service process ends with the trial rather than being killed as a leftover child of the worker
        (whose exit then printed wandb's "Connection lost" traceback). When `stopped()` turns true
        (the sweep stopped the trial), the run's next `wandb.log` ends the function, as W&B's agent ends a
        stopped run: the trial ends stopped, not failed (and `fn` returns None). `sys.exit()` or `sys.exit(0)`
        in `fn` ends it as a return of None would. A run it finished with `wandb.finish(exit_code=N)`, N not 0,
        fails the trial (TrialError), as W&B marks the run failed and as a command trial fails. A run marked
        `mark_preempting()` leaves `final["@preempting"]`: if `fn` then raises, the trial is preempted
        (backends/function_trial.py), as W&B requeues such a run.

        `mirror=False`: `fn` reports through its sweeplab Run (a `train(config, run)` function), and the W&B
        runs it starts are its own logging, not the trial's reports (see the hook's `own_runs`)."""
        hook = self._hook
        if "wandb" in sys.modules:
            with contextlib.suppress(Exception, SystemExit):   # (see the teardown after `fn`)
                sys.modules["wandb"].teardown()
        tail: _ReportTail | None = None
        if mirror:
            hook.set_sinks(lambda metrics, step: log(metrics, step=step), self.final.update, stopped)
            tail = _ReportTail(self._report, log, self.final)   # the runs of processes the function starts
        else:
            hook.own_runs()
        ok = False
        try:
            try:
                result = fn()
            except hook.TrialStopped:
                self.final.pop("@exit_code", None)   # `with wandb.init()` saw the exception: not a failure
                result = None
            except SystemExit as exc:   # `wandb.finish(); sys.exit()` at the end of the function: W&B's agent
                if exc.code not in (None, 0):   # runs it in a thread, which the exit just ends; exit 0 ends
                    raise                       # a command trial's program as well. Any other code fails it.
                result = None
            ok = True
        finally:
            wandb = sys.modules.get("wandb")
            if wandb is not None and getattr(wandb, "run", None) is not None:
                with contextlib.suppress(Exception):   # a run the function left open ends with it
                    wandb.run.finish(exit_code=0 if ok else 1)
            if wandb is not None:   # wandb's service process ends with the trial, as the worker would end it
                # (a child left over): killed, its exit hook printed "ConnectionResetError: Connection lost"
                # when the worker exited, once per trial. wandb.teardown() calls sys.exit() when its service
                # ended with an error: that is no exit of the trial's
                with contextlib.suppress(Exception, SystemExit):
                    teardown = getattr(wandb, "teardown", None)
                    if callable(teardown):
                        teardown()
            hook.uninstall_sinks()
            if tail is not None:
                tail.close()
        code = self.final.get("@exit_code")
        if code:   # `wandb.finish(exit_code=1)` (after a caught failure): W&B marks the run failed, and a
            # command trial fails for it; so does the function's
            from sweeplab.errors import TrialError

            raise TrialError(f"wandb.finish(exit_code={code})")
        return result

    def end(self) -> None:
        """The trial ended (however it ended): the hook forgets it, and os.environ is as it was before."""
        self._hook.end_trial()


class _ReportTail:
    """Reads what the processes a function trial starts (DDP ranks, forked or spawned) report of their W&B runs
    (the hook's report file, as a command trial's program writes it) into the trial while the function runs:
    history rows to `log(metrics, step=)`, a run's summary into `final`."""

    def __init__(self, path: str, log: Callable[..., Any], final: dict[str, Any]) -> None:
        self._path, self._log, self._final = path, log, final
        self._offset = 0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="sweeplab-wandb-report", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self._done.wait(0.2):
            self.drain()

    def drain(self) -> None:
        with self._lock:
            try:
                with open(self._path, "rb") as f:
                    f.seek(self._offset)
                    data = f.read()
            except OSError:
                return
            end = data.rfind(b"\n") + 1   # whole lines only: a writer may be half-way through one
            self._offset += end
            for line in data[:end].splitlines():
                with contextlib.suppress(Exception):
                    self._line(json.loads(line))

    def _line(self, obj: dict[str, Any]) -> None:
        if "@summary" in obj:
            self._final.update(obj["@summary"])
            return
        if obj.get("@preempting"):   # its run's `mark_preempting()`: see `FunctionTrial.call`
            self._final["@preempting"] = True
            return
        from sweeplab._values import report_values

        # as a command trial's report lines are read: a NaN or inf (written as text) is the value it stands
        # for, and reaches `nan` as one logged in the function itself does (they were dropped here)
        step, metrics = report_values(obj)
        if metrics:
            self._log(metrics, step=step)

    def close(self) -> None:
        """The function returned (its processes have ended): the last lines, then the thread stops."""
        self._done.set()
        self._thread.join(timeout=5)
        self.drain()
