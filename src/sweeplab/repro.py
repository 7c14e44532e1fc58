"""`sweeplab repro SWEEP/TRIAL`: replay a failed trial in the foreground, locally.

Function trials: same resolved config, same seed, the trial's latest checkpoint (a copy: the original is
never written) and the objects it registered with `run.capture(...)` available through `run.captured(name)`.
Command trials: the same argv, working directory and sweeplab environment variables (read from the header of
the failed attempt's log), with a copy of the trial's checkpoint directory.

A trial that ran in a directory of its own (`trial.workdir: trial`) is replayed in a copy of that directory,
as its last attempt left it (a function's module is imported in the sweep's directory first, as in the worker);
SWEEPLAB_ORIGINAL_CWD and `run.original_cwd` name the sweep's directory, as in the sweep.

A multi-process trial (`resources.workers` W > 1) is replayed as W local processes with the torchrun
variables, as the local backend started its ranks: the rank that failed runs in the foreground (its traceback,
`--debug`), the others (`sweeplab repro` again, with SWEEPLAB_REPRO_PEER set, silent) run beside it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sweeplab._values import decimal, shown_digits
from sweeplab.errors import UserError
from sweeplab.run import Run
from sweeplab.store import Store

__all__ = ["parse_trial_ref", "repro"]


def parse_trial_ref(ref: str) -> tuple[str, int]:
    sweep, sep, number = ref.rpartition("/")
    if not sep or not sweep or not (number.isascii() and number.isdigit()):
        raise UserError(f"expected SWEEP/TRIAL, e.g. xgb-diabetes/17; got {ref!r}")
    value = decimal(number)
    if value is None:   # more digits than int() reads: a traceback ("Exceeds the limit") before
        raise UserError(f"sweep {sweep!r} has no trial {shown_digits(number)}")
    return sweep, value


_PEER = "SWEEPLAB_REPRO_PEER"   # set for the other ranks of a multi-process replay
_PEER_SECONDS = 10.0           # how long the other ranks get to end once the foreground rank returned


def repro(store: Store, ref: str, *, debug: bool = False, echo: Callable[[str], None] = print) -> int:
    """Re-run a failed trial. Returns 1 when the failure reproduced, 0 when the trial now succeeds."""
    peer = os.environ.get(_PEER) == "1"
    if peer:   # one of the other ranks of a multi-process replay: the foreground rank speaks for the replay
        echo, debug = (lambda _s: None), False
    from sweeplab.backends.preload import import_all, trial_imports
    from sweeplab.backends.targets import call_trial, load_target, seed_everything, takes_run, trial_traceback
    from sweeplab.capture import capture_manifest, load_captures
    from sweeplab.config import coerce, typed_schema_of
    from sweeplab.store.layout import trial_paths

    name, number = parse_trial_ref(ref)
    sweep = store.sweep_row(name)
    if sweep is None:
        from sweeplab.store.queries import unknown_sweep

        raise unknown_sweep(store, name)
    trial = store.trial_by_number(sweep["id"], number)
    if trial is None:
        count = store.trial_count(sweep["id"])
        raise UserError(f"sweep {name!r} has no trial {number} (it has trials 0..{count - 1})")
    failed: Any = store.last_failed_attempt(trial["id"])
    nonfinite: dict[str, Any] | None = None   # a trial stopped at a NaN/inf metric (a monitor), not failed
    if failed is None:
        nonfinite, failed = _nonfinite_attempt(store, trial)
        if failed is None:
            raise UserError(f"trial {name}/{number} did not fail (state {trial['state']}); repro replays "
                            "failures (and trials stopped at a NaN or infinite metric that captured objects)")
    spec = json.loads(sweep["spec"])
    meta = spec.get("_sweeplab") or {}
    was = meta.get("cwd")
    spec_path = sweep["spec_path"]
    if was:   # the project moved since (`mv proj proj2`): its files where they are now, as `resume` finds them
        from sweeplab.store.moved import relocate

        spec_path = relocate(spec, meta, spec_path, store.root, lambda line: echo(f"  {line}"))
    if not spec.get("function"):
        if debug:
            raise UserError(f"--debug opens pdb in a function trial; {name}/{number} runs a command: "
                            "run it without --debug (its program may call breakpoint() itself)")
        return _repro_command(store, name, number, trial, failed, spec, echo, moved_from=was)
    cwd = meta.get("cwd") or "."
    root = str(store.root.resolve())
    paths = trial_paths(root, name, number, int(failed["number"]), _checkpoint_dir(spec))
    recorded = store.checkpoint_rows(trial["id"])
    src = Path(paths["checkpoint"])
    if recorded and not src.is_dir():
        raise UserError(f"trial {name}/{number} wrote checkpoints but {src} is gone; cannot replay it "
                        "from where it failed")
    world, failed_rank = _ranks_of(spec, failed)
    captured: dict[str, Any] = {}
    cap = store.latest_artifact(trial["id"], "capture")   # the failing rank's input (rank 0's at a NaN)
    rank = int(os.environ.get("RANK") or 0) if peer else failed_rank
    if cap is not None:
        cap_path = (store.root / cap["path"]).resolve()
        if store.root.resolve() not in cap_path.parents:
            raise UserError(f"capture {cap_path} is outside the store; refusing to load it")
        cap_path = _rank_capture(cap_path, rank, peer)
    if cap is not None and cap_path is not None:
        captured = load_captures(str(cap_path))
        manifest = capture_manifest(str(cap_path))
        stale = [n for n in manifest.get("stale") or () if n in captured]
        where = manifest.get("failed_loading") or {}
        skipped: dict[str, Any] = manifest["skipped"] if isinstance(manifest.get("skipped"), dict) else {}
    else:
        stale, where, skipped = [], {}, {}
    config_raw = json.loads(trial["config"] or "{}")
    target = _resolve_target(spec["function"], spec_path, cwd)
    if nonfinite is not None:
        echo(f"replaying {name}/{number} (attempt {failed['number']} logged {nonfinite['metric']} = "
             f"{nonfinite.get('value', 'nan')} at step {nonfinite['step']}: {failed['reason']})")
    else:
        echo(f"replaying {name}/{number} (attempt {failed['number']} failed: {failed['reason']})")
    echo(f"  target {target}, seed {trial['seed']}, checkpoints: {len(recorded)}, captured: "
         f"{', '.join(sorted(captured)) or 'nothing'}")
    for skipped_name, why in sorted(skipped.items()):   # run.captured(name) returns None for these
        echo(f"  not captured: {skipped_name} ({str(why)[:200]})")
    if meta.get("smoke"):
        echo("  a smoke trial: replayed in smoke mode (run.smoke set, GPUs hidden)")
    if world > 1:
        echo(f"  {world} processes (resources.workers) with the torchrun variables, rank {failed_rank} in the "
             "foreground; the other ranks run beside it")
    _warn_changed(store, name, number, int(failed["number"]), echo, _moved(was, meta))
    if stale:   # registered in the step before the failing batch was fetched: not the failing input
        echo(f"  the trial failed while loading batch {where.get('batch', '?')} of run.track loop "
             f"{where.get('loop', '?')}: {', '.join(stale)} captured in the step before is not replayed "
             "(run.captured returns None for it), so the trial reads its data again")
        captured = {k: v for k, v in captured.items() if k not in stale}

    bad: list[tuple[int, str, float]] = []   # the replay's NaN/inf values of the metric that was not finite
    logged: dict[str, Any] = {}   # each metric's last value, for the objective's verdict (_values.objective_of)

    def sink(kind: str, data: dict[str, Any]) -> None:
        if kind == "metrics":
            for step, key, value, _ in data.get("points", []):
                echo(f"  step {step}: {key} = {value:.6g}")
                logged[key] = value
                if nonfinite is not None and key == nonfinite["metric"] and not math.isfinite(value):
                    bad.append((step, key, value))

    if Path(cwd).is_dir():
        os.chdir(cwd)   # relative paths in the config resolve as they did in the sweep
        os.environ["PWD"] = os.path.abspath(cwd)
    own_dir = (spec.get("trial") or {}).get("workdir") == "trial"
    if own_dir:
        echo(f"  in a copy of the trial's own directory {paths['workdir']} (trial.workdir: trial), as its last "
             "attempt left it")
    original_cwd = os.path.abspath(cwd)
    os.environ["SWEEPLAB_ORIGINAL_CWD"] = original_cwd
    params = json.loads(trial["params"] or "{}")
    smoke = bool(meta.get("smoke"))   # a smoke trial replays as it ran: run.smoke set, on the CPU
    if smoke:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    tmp = Path(tempfile.mkdtemp(prefix="sweeplab-repro-"))   # copies: the originals are never written
    wandb: Any = None
    try:
        # as in the worker: wandb.init() in the function gets the trial's parameters (wandb.config), offline,
        # and its wandb.log reaches the replay; armed before the import, which may call wandb already
        from sweeplab.spec import wandb_args
        from sweeplab.wandb_compat import FunctionTrial, run_env

        wandb = FunctionTrial({"param_path": str(tmp / "wandb-params.yaml"),
                               "args": wandb_args(params, spec.get("parameters")), "env": run_env(name, number)})
        import_path = [cwd, str(Path(spec_path).parent) if spec_path else cwd]
        fn = load_target(target, import_path)   # imported in the sweep's directory, as in the worker
        config = coerce(config_raw, typed_schema_of(fn))
        if own_dir:   # then into a copy of the trial's directory (the original is never written)
            os.chdir(_copy_workdir(Path(paths["workdir"]), tmp / "workdir"))
            os.environ["PWD"] = os.getcwd()   # as in the sweep's worker (backends/function_trial.py)
    except BaseException:
        if wandb is not None:
            wandb.end()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    ckpt_copy = tmp / "checkpoints"
    if recorded:
        shutil.copytree(src, ckpt_copy)
        try:
            _keep_recorded_checkpoints(ckpt_copy, recorded, echo)
        except BaseException:
            wandb.end()
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _drop_later_attempts(ckpt_copy, int(failed["number"]), echo)
        if nonfinite is not None:   # written at or after the NaN step: they hold the broken state
            _drop_checkpoints_from(ckpt_copy, recorded, int(nonfinite["step"]), len(recorded), echo)
    run = Run(config=config, sink=sink, params=params, sweep=name, trial=number,
              attempt=int(failed["number"]) + 1, seed=trial["seed"], checkpoint_dir=str(ckpt_copy),
              captured=captured, smoke=smoke, rank=rank, original_cwd=original_cwd)
    if trial["seed"] is not None:
        # the sweep's workers imported these before the trial (backends/forkserver.py): so that the seed
        # seeds the same libraries here, whether `train` imports them at its top or inside
        preload = (spec.get("trial") or {}).get("preload")
        import_all(preload if preload is not None else trial_imports(target, import_path))
        seed_everything(int(trial["seed"]))
    import faulthandler

    faulthandler.enable()   # a replay that segfaults prints the Python stack where it died, as the trial's log has it
    peers = _RankPeers(world if not peer else 1, failed_rank)
    try:
        if peers.world > 1:   # the other ranks: `sweeplab repro` again, silent, each with its torchrun variables
            os.environ.update(peers.env_of(failed_rank))
            peers.start(lambda r: ([sys.executable, "-m", "sweeplab", "repro", ref, "--store", root],
                                   {**os.environ, **peers.env_of(r), _PEER: "1"}))
        result = wandb.call(lambda: call_trial(fn, config, run), run.log, lambda: run.should_stop,
                            mirror=not takes_run(fn))   # as in the worker (backends/function_trial.py)
    except Exception as exc:
        peers.end(wait=False)   # they may be waiting for this rank in a collective
        run.flush()
        raised = failed["error_type"] if nonfinite is None and "error_type" in failed.keys() else None
        if raised and raised != type(exc).__name__:   # e.g. a later checkpoint made it skip the failing step
            echo(f"the replay failed differently: attempt {failed['number']} raised {raised}, the replay "
                 f"{type(exc).__name__}:")
        else:
            echo("the failure reproduced:")
        echo(trial_traceback(exc))
        if debug:
            import pdb

            pdb.post_mortem(sys.exc_info()[2])
        return 1
    finally:
        peers.end(wait=True)
        wandb.end()
        shutil.rmtree(tmp, ignore_errors=True)
    run.flush()
    if bad:
        step, key, value = bad[0]
        echo(f"the failure reproduced: {key} = {value} at step {step}")
        return 1
    final = dict(result) if isinstance(result, Mapping) else {} if result is None else {"value": result}
    problem = _objective_problem(spec, final, logged)
    if problem is not None and nonfinite is None:
        return _ended_without_value(problem, failed, echo)
    echo(f"the trial did not fail this time; it returned {result!r}")
    return 0


def _objective_problem(spec: dict[str, Any], final: dict[str, Any], logged: Mapping[str, Any]) -> str | None:
    """Why a replay that ended without an exception (or with exit 0) still failed as the driver judges a
    trial's end: an objective missing, not a number, NaN or infinite (`_values.objective_of`); None if fine.
    A bare number the trial returned (`{"value": x}`) is the first objective's value, as in the driver."""
    from sweeplab._values import objective_of

    metric = spec.get("metric")
    names = [str(m["name"]) for m in (metric if isinstance(metric, list) else [metric])
             if isinstance(m, dict) and m.get("name")]
    if names and "value" in final and names[0] not in final and len(final) == 1:
        final = {names[0]: final.pop("value")}
    for name in names:
        _, problem = objective_of(name, final, logged)
        if problem is not None:
            return problem
    return None


def _ended_without_value(problem: str, failed: Any, echo: Callable[[str], None]) -> int:
    """Say whether a replay that ended without a usable objective failed as the attempt did: the same kind
    of problem with the same objective (the text after a colon may differ: what else was reported, how the
    value was shown)."""
    if str(failed["reason"] or "").startswith(problem.split(":")[0]):
        echo(f"the failure reproduced: {problem}")
    else:
        echo(f"the replay failed differently: attempt {failed['number']} failed with {failed['reason']!r}, the "
             f"replay ended with {problem}")
    return 1


def _nonfinite_attempt(store: Store, trial: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """For a trial that did not fail but left a capture taken at its first NaN/inf metric (a `nan` monitor
    stopped it): ({"step", "metric"}, {"number": its attempt, "reason"}); else (None, None)."""
    from sweeplab.capture import capture_manifest

    cap = store.latest_artifact(trial["id"], "capture")
    if cap is None:
        return None, None
    try:
        found = capture_manifest(str(store.root / cap["path"])).get("nonfinite")
    except (OSError, ValueError):
        return None, None
    if not isinstance(found, dict):
        return None, None
    return found, {"number": cap["attempt"], "reason": trial["reason"] or trial["state"]}


def _resolve_target(target: str, spec_path: str | None, cwd: str) -> str:
    module, _, fn = target.rpartition(":")
    if module.endswith(".py") and not Path(module).is_absolute():
        for base in ([Path(spec_path).resolve().parent] if spec_path else []) + [Path(cwd)]:
            if (base / module).exists():
                return f"{base / module}:{fn}"
    return target


def _repro_command(store: Store, name: str, number: int, trial: Any, failed: Any, spec: dict[str, Any],
                   echo: Callable[[str], None], *, moved_from: str | None = None) -> int:
    """Run a failed command trial's argv again in the foreground; returns the program's exit code.
    `moved_from`: the sweep's directory as recorded, when `relocate` moved it (the spec's `_sweeplab.cwd`): the
    log header's paths under it (cwd, argv, environment) are taken at the same place under the new one."""

    from sweeplab.store.layout import trial_paths

    log = store.root / (failed["log_path"] or "")
    how = read_log_header(log)
    if how is None:
        raise UserError(f"trial {name}/{number}: {log} does not start with the argv, cwd and env of the "
                        "attempt (a log of an older sweeplab?); run its command by hand")
    argv, cwd, added = how["argv"], how["cwd"], how["env"]
    now = (spec.get("_sweeplab") or {}).get("cwd")
    if moved_from and now and now != moved_from:
        from sweeplab.store.moved import moved_path

        def move(value: Any) -> Any:
            return moved_path(value, moved_from, now) if isinstance(value, str) else value

        argv, cwd, added = [move(a) for a in argv], move(cwd), {k: move(v) for k, v in added.items()}
    own_dir = (spec.get("trial") or {}).get("workdir") == "trial"   # its own directory, in the store
    if not own_dir and not Path(cwd).is_dir():
        raise UserError(f"trial {name}/{number} ran in {cwd}, which is gone; cannot run it there again")
    root = str(store.root.resolve())
    src = Path(trial_paths(root, name, number, int(failed["number"]), _checkpoint_dir(spec))["checkpoint"])
    tmp = Path(tempfile.mkdtemp(prefix="sweeplab-repro-"))   # copies: the store is never written
    if own_dir:   # the store's path of it now (the header's is where the store was then)
        own = trial_paths(root, name, number, int(failed["number"]))["workdir"]
        echo(f"  in a copy of the trial's own directory {own} (trial.workdir: trial), as its last attempt left it")
        cwd = str(_copy_workdir(Path(own), tmp / "workdir"))
    ckpt_copy = tmp / "checkpoints"
    try:
        if src.is_dir():
            shutil.copytree(src, ckpt_copy)
            # only what the store recorded, as a function trial's replay (and a retried attempt) restores
            _keep_recorded_checkpoints(ckpt_copy, store.checkpoint_rows(trial["id"]), echo)
            _drop_later_attempts(ckpt_copy, int(failed["number"]), echo)
        else:
            ckpt_copy.mkdir()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    env = dict(os.environ)
    env.update(added)
    env.update({"SWEEPLAB_CHECKPOINT_DIR": str(ckpt_copy), "SWEEPLAB_REPORT_FILE": str(tmp / "report.jsonl"),
                "SWEEPLAB_ATTEMPT": str(int(failed["number"]) + 1)})
    if cwd:   # where it runs, as in the sweep (backends/command_trial.py)
        env["PWD"] = os.path.abspath(cwd)
    world, failed_rank = _ranks_of(spec, failed)
    echo(f"replaying {name}/{number} (attempt {failed['number']} failed: {failed['reason']})")
    echo(f"  argv {' '.join(argv)}")
    # sweeplab's own files (the attempt fence a retry writes) are no checkpoint of the program's
    copied = src.is_dir() and any(not p.name.startswith(".") for p in src.iterdir())
    echo(f"  cwd {cwd}, seed {trial['seed']}, checkpoints copied: {'yes' if copied else 'none'}")
    if world > 1:
        echo(f"  {world} processes (resources.workers) with the torchrun variables, rank {failed_rank} in the "
             "foreground; its exit code is the replay's")
    _warn_changed(store, name, number, int(failed["number"]), echo, _moved(moved_from, spec.get("_sweeplab")))
    sys.stdout.flush()
    peers = _RankPeers(world, failed_rank)
    code: int | None = None
    try:
        if world > 1:   # every rank runs the command, each with its own report file (as in the sweep)
            env.update(peers.env_of(failed_rank))
            env["SWEEPLAB_REPORT_FILE"] = str(tmp / f"report.rank{failed_rank}.jsonl")
            peers.start(lambda r: (argv, {**env, **peers.env_of(r),
                                          "SWEEPLAB_REPORT_FILE": str(tmp / f"report.rank{r}.jsonl")}), cwd=cwd)
        code, logged = _run_reading_reports(argv, cwd, env, Path(env["SWEEPLAB_REPORT_FILE"]))
    except OSError as exc:
        echo(f"the failure reproduced: cannot start {argv[0] if argv else '?'}: {exc.strerror or exc}")
        return 1
    finally:
        peers.end(wait=code == 0)   # after a failure they may wait for the failed rank in a collective
        shutil.rmtree(tmp, ignore_errors=True)
    code = 128 - code if code < 0 else code   # killed by a signal: the shell's convention
    problem = _objective_problem(spec, {}, logged) if code == 0 else None
    if problem is not None:
        return _ended_without_value(problem, failed, echo)
    echo("the trial did not fail this time" if code == 0 else f"the failure reproduced: exit code {code}")
    return code


def _run_reading_reports(argv: list[str], cwd: str | None, env: dict[str, str], report_file: Path
                         ) -> tuple[int, dict[str, float]]:
    """Run the program in the foreground, its stdout passed on as it comes, and return its exit code and each
    metric's last reported value: from its `@sweeplab` lines, then its report file (`sweeplab.report`, the
    W&B hook), as the sweep's worker reads them (backends/command_trial.py)."""

    from sweeplab._values import report_values

    logged: dict[str, float] = {}

    def read(line: bytes) -> None:
        try:
            obj = json.loads(line)
        except ValueError:
            return
        if isinstance(obj, dict):
            logged.update(report_values(obj)[1])

    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE)
    assert child.stdout is not None
    out = sys.stdout.buffer
    for line in iter(child.stdout.readline, b""):
        out.write(line)
        out.flush()
        if line.startswith(b"@sweeplab "):
            read(line[len(b"@sweeplab "):])
    code = child.wait()
    with contextlib.suppress(OSError):
        with report_file.open("rb") as f:
            for line in f:
                read(line)
    return code, logged


def _checkpoint_dir(spec: dict[str, Any]) -> str | None:
    """The sweep's `checkpoint_dir` where its driver found it: `~` expanded (driver/tasks.py), a relative
    local path the sweep's directory's (the replay may run from anywhere)."""
    ckpt = spec.get("checkpoint_dir")
    if not isinstance(ckpt, str) or not ckpt or "://" in ckpt:
        return ckpt
    if ckpt.startswith("~"):
        return os.path.expanduser(ckpt)
    cwd = (spec.get("_sweeplab") or {}).get("cwd")
    return os.path.join(cwd, ckpt) if cwd and not os.path.isabs(ckpt) else ckpt


def _copy_workdir(src: Path, dst: Path) -> Path:
    """A copy of a trial's own working directory (`trial.workdir: trial`) for its replay, which may write into
    it: the trial's files in the store are never changed. Empty when the trial left none (or it was deleted)."""
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        dst.mkdir(parents=True)
    return dst


def _rank_capture(path: Path, rank: int, peer: bool) -> Path | None:
    """The capture of `rank` in a multi-process replay: the one the manifest of the trial's capture names for it
    (`ranks`, backends/multiproc.py), a file of the same directory; else the trial's own for the foreground
    rank, and nothing for the other ranks (theirs was not kept)."""
    from sweeplab.capture import capture_manifest

    try:
        ranks = capture_manifest(str(path)).get("ranks")
    except (OSError, ValueError):
        ranks = None
    name = ranks.get(str(rank)) if isinstance(ranks, dict) else None
    if isinstance(name, str) and name == Path(name).name and name.endswith(".pkl"):
        return path.parent / name
    return None if peer else path


def _keep_recorded_checkpoints(copy: Path, recorded: list[Any], echo: Callable[[str], None]) -> None:
    """Leave in the replay's copy only the checkpoints the store recorded, as it recorded them (the check a
    retried attempt's driver makes, checkpoint/_trust.py): the checksum of a checkpoint's manifest (which
    `run.restore` checks the payload against before it unpickles it) must be the one the driver stored for it.
    A checkpoint directory the store does not know (another program's) is left out, with a note; a recorded one
    whose manifest no longer holds the stored checksum (replaced, tampered) is refused: nothing unpickles data
    sweeplab did not write."""
    from sweeplab.checkpoint import recorded_checksums, untrusted

    known = recorded_checksums(recorded)
    unknown: list[str] = []
    for name, _why in untrusted(str(copy), known):
        if name in known:
            raise UserError(f"checkpoint {name} of this trial does not hold the checksum the store recorded "
                            f"for it ({known[name]}): it was replaced or changed since; refusing to load it")
        unknown.append(name)
        shutil.rmtree(copy / name, ignore_errors=True)
    if unknown:
        echo(f"  {len(unknown)} checkpoint(s) the store did not record are not restored: {', '.join(unknown[:5])}")


def _drop_later_attempts(copy: Path, attempt: int, echo: Callable[[str], None]) -> None:
    """Remove from the replay's copy the checkpoints written by attempts after the failed one (its retries: the
    manifest of a `CheckpointManager` checkpoint names its attempt). A trial that failed and then went on has
    them; restored, the replay would start past the failure and replay nothing of it. It restores what the
    failed attempt had: its own last checkpoint, or an earlier attempt's."""
    late, kept = [], []
    for entry in sorted(copy.iterdir()) if copy.is_dir() else ():
        try:
            manifest = json.loads((entry / "manifest.json").read_text())
        except (OSError, ValueError):
            continue   # not a sweeplab checkpoint (a command program's own files): left as it is
        if not isinstance(manifest, dict):
            continue
        written_by = manifest.get("attempt")
        if isinstance(written_by, int) and written_by > attempt:
            late.append(entry)
        else:
            kept.append(manifest.get("step"))
    for entry in late:
        shutil.rmtree(entry, ignore_errors=True)
    if late:
        steps = [k for k in kept if isinstance(k, int)]
        start = f"restores the checkpoint of step {max(steps)}" if steps else \
            "restores the latest one from before it" if kept else "starts from scratch, as attempt " \
            f"{attempt} did (or its checkpoints were deleted since: trial.keep_checkpoints)"
        echo(f"  {len(late)} checkpoint(s) written after attempt {attempt} (by its retries) are not restored; "
             f"the replay {start}")


def _drop_checkpoints_from(copy: Path, recorded: list[Any], step: int, count: int,
                           echo: Callable[[str], None]) -> None:
    """Remove from the replay's copy the checkpoints of step >= `step` (the step of a NaN or infinite metric):
    a trial checkpoints the state it reached after the bad batch (a monitor's stop even forces that checkpoint),
    so they hold the NaN. The replay restores the last one from before it, or starts from scratch."""
    late = [row for row in recorded if row["step"] is not None and int(row["step"]) >= step]
    for row in late:
        shutil.rmtree(copy / Path(row["path"]).name, ignore_errors=True)
    kept = [int(row["step"]) for row in recorded if row not in late and row["step"] is not None]
    if late:
        start = f"restores the checkpoint of step {max(kept)}" if kept else \
            "starts from scratch (no checkpoint from before it is kept: trial.keep_checkpoints)"
        echo(f"  {len(late)} of {count} checkpoint(s) written at or after step {step} hold the state after the "
             f"NaN and are not restored; the replay {start}")


def _ranks_of(spec: Mapping[str, Any], failed: Any) -> tuple[int, int]:
    """(world size, the rank that failed) of a trial: `resources.workers`, and the rank its reason names
    (backends/multiproc.py prefixes a rank's failure with `rank N: `); rank 0 when none is named."""
    try:
        world = max(1, int((spec.get("resources") or {}).get("workers") or 1))
    except (TypeError, ValueError):
        world = 1
    found = re.match(r"rank (\d+): ", str(failed["reason"] or ""))
    rank = int(found.group(1)) if found else 0
    return world, rank if rank < world else 0


class _RankPeers:
    """The ranks of a multi-process replay other than the foreground one: started with the torchrun
    variables of backends/multiproc.py on a reserved local port, killed when the replay ends (and by the
    kernel if the replay dies: a segfault in the foreground rank)."""

    def __init__(self, world: int, foreground: int) -> None:
        self.world, self.foreground = world, foreground
        self.procs: list[subprocess.Popen[bytes]] = []
        self._port: socket.socket | None = None

    def env_of(self, rank: int) -> dict[str, str]:
        from sweeplab.backends.launch import rank_env, reserve_port

        if self._port is None:
            self._port = reserve_port()   # held until the replay ends, as the backend holds it
        return rank_env(rank, self.world, int(self._port.getsockname()[1]))

    def start(self, how: Callable[[int], tuple[list[str], dict[str, str]]], cwd: str | None = None) -> None:
        from sweeplab.backends._tree import die_with_parent

        for r in range(self.world):
            if r != self.foreground:
                argv, env = how(r)
                self.procs.append(subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                                   preexec_fn=die_with_parent()))

    def end(self, *, wait: bool) -> None:
        """Wait up to _PEER_SECONDS for the other ranks when the foreground one ended cleanly, then kill them."""
        deadline = time.monotonic() + _PEER_SECONDS
        for proc in self.procs:
            if wait:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self.procs = []
        if self._port is not None:
            self._port.close()
            self._port = None


def _moved(was: str | None, meta: Any) -> tuple[str, str] | None:
    """(old, new) directory of a sweep whose project `relocate` found moved, else None."""
    now = meta.get("cwd") if isinstance(meta, dict) else None
    return (was, str(now)) if was and now and now != was else None


def _warn_changed(store: Store, name: str, number: int, attempt: int, echo: Callable[[str], None],
                  moved: tuple[str, str] | None = None) -> None:
    """Say so when the source file the failed attempt ran (its SHA-256 is in the failure event) has changed
    or is gone: the replay runs today's code, which may not fail the same way. `moved`: (old, new) directory of
    a project moved since (`relocate`): the file is compared where it is now."""
    from sweeplab.capture import source_changes
    from sweeplab.store.moved import moved_path
    from sweeplab.store.queries import events

    for ev in events(store, name, trial=number, limit=10_000):
        if ev["kind"] == "failure" and ev["attempt"] == attempt and isinstance(ev["data"], dict):
            source = (ev["data"].get("environment") or {}).get("source")
            if moved is not None and isinstance(source, dict) and isinstance(source.get("path"), str):
                source = {**source, "path": moved_path(source["path"], *moved)}
            why = source_changes(source)
            if why:
                echo(f"  warning: {why}")
            return


def read_log_header(path: Path) -> dict[str, Any] | None:
    """{"argv", "cwd", "env"} from the first lines of a command trial's log (see execution.log_header), or None."""
    found: dict[str, Any] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for _ in range(8):
                line = fh.readline()
                for key in ("argv", "cwd", "env"):
                    if line.startswith(f"# {key}: "):
                        found[key] = json.loads(line[len(key) + 4:])
    except (OSError, ValueError):
        return None
    if not isinstance(found.get("argv"), list) or not isinstance(found.get("env"), dict) or "cwd" not in found:
        return None
    return found
