"""Multi-process trials: W ranks of one trial with the torchrun environment (DDP, Fabric, Accelerate).

A trial with `resources.workers: W` (`TrialTask.world_size` = W) is supervised by the worker that got it:
`execute_ranks` starts W processes (`python -m sweeplab.backends.rank`), each with `RANK`,
`LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR=127.0.0.1` and a free `MASTER_PORT` (held
by the supervisor until the trial ends), its share of the slot's threads, and its own log and report file,
each running the trial (its function, or its command) through `attempt.execute` as one rank. The supervisor

- forwards rank 0's metrics, checkpoints and notes to the driver (other ranks' `run.log` and
  `run.checkpoint` are dropped by `Run` itself; their events are ignored here), and at the end one
  profile merged from every rank's (`profiling.merge_rank_profiles`) with its own sampler's CPU and memory;
- passes a stop request to every rank at once and SIGTERM (preemption) to every rank (also when one rank
  was preempted by a SIGTERM of its own), and the driver's
  verdict at a decision step (`go`) to rank 0, the rank that reported and waits for it;
- ends the attempt as one trial: FINISHED with rank 0's result once every rank has returned; FAILED with
  the failing rank's traceback as soon as any rank raises or dies (the other ranks are killed), except
  after a stop request, when a rank that returned cleanly keeps the trial FINISHED (its peers broke in the
  collective it left); PREEMPTED when the trial was preempted.

Ranks run in the worker's process group, so a backend that kills the worker's group kills every rank,
and a rank whose supervisor dies gets SIGKILL from the kernel (backends/_tree.die_with_parent).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeplab._process import os_text
from sweeplab._torch.env import GPUS_PER_RANK_VAR
from sweeplab.backends import _tree
from sweeplab.backends._diskfull import disk_full_data, names_full_disk, trial_places
from sweeplab.backends.base import TrialTask
from sweeplab.backends.events import Event, EventKind, crash_stack, describe_exit, died_of_sigterm, read_events
from sweeplab.backends.execution import Execution
from sweeplab.backends.launch import THREAD_VARS, free_port, rank_env, reserve_port
from sweeplab.profiling import merge_rank_profiles

__all__ = ["THREAD_VARS", "execute_ranks", "free_port", "link_captures", "lost_a_peer", "rank_env", "rank_paths",
           "reserve_port"]

# rank 0's events that reach the driver; SYSTEM samples come from the supervisor's own sampler, which
# covers all of its children; every rank's PROFILE is kept and the trial's one is merged from them at its end
_FORWARDED = (EventKind.METRICS, EventKind.CHECKPOINT, EventKind.ARTIFACT, EventKind.NOTE)
_STRAGGLER_SECONDS = 10.0   # after rank 0 returned, how long the other ranks get to return too
_FAILURE_SETTLE = 0.5       # after a first failure, how long to wait for the rank that caused it
_STOP_SETTLE = 3.0          # the same after a stop request: how long the other ranks get to return cleanly


@dataclass
class _Rank:
    index: int
    proc: subprocess.Popen[bytes]
    rfd: int
    buf: bytearray = field(default_factory=bytearray)
    end: Event | None = None
    closed: bool = False
    profile: dict[str, Any] | None = None   # the rank's own PROFILE summary


def _rank_file(path: str, rank: int) -> str:
    if not path or rank == 0:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.rank{rank}{p.suffix}"))


def rank_paths(task: TrialTask, rank: int) -> tuple[str, str]:
    """Rank `rank`'s own (log, report file): rank 0 keeps the trial's, rank r gets `<stem>.rank<r><suffix>`
    beside them. Command ranks must not share the report file: rank 0's reader would pass the other ranks'
    reports to the driver as its own, and each rank empties the file when it starts."""
    return _rank_file(task.log_path, rank), _rank_file(task.report_path, rank)


def _spawn(task: TrialTask, rank: int, port: int, threads: int | None) -> _Rank:
    r, w = os.pipe()
    env = dict(os.environ)
    env.update({k: os_text(str(v)) for k, v in task.env.items()})
    env.update(rank_env(rank, task.world_size, port, threads=threads))
    share = _gpus_per_rank(env.get("CUDA_VISIBLE_DEVICES"), task.world_size)
    if share is not None:   # the ranks' share of the slot's GPUs: below 1 they share a device (no NCCL)
        env[GPUS_PER_RANK_VAR] = f"{share:g}"
    env["SWEEPLAB_EVENT_FD"] = str(w)
    env["PYTHONUNBUFFERED"] = "1"
    log_path, report_path = rank_paths(task, rank)
    rank_task = dataclasses.replace(task, world_size=1, log_path=log_path, report_path=report_path)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sweeplab.backends.rank"], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=None, pass_fds=(w,), env=env,
            preexec_fn=_tree.die_with_parent(),   # a rank dies with its supervisor, even mid-computation
        )
    finally:
        os.close(w)
    os.set_blocking(r, False)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(rank_task.to_dict(), default=str).encode() + b"\n")
    proc.stdin.flush()
    return _Rank(rank, proc, r)


def _gpus_per_rank(visible: str | None, world_size: int) -> float | None:
    """GPUs per rank when the slot names its devices (CUDA_VISIBLE_DEVICES); None when it does not."""
    if not visible:
        return None
    devices = [d for d in visible.split(",") if d.strip()]
    return len(devices) / world_size if devices else None


def _threads_per_rank(world_size: int) -> int | None:
    raw = os.environ.get("OMP_NUM_THREADS")
    if not raw or not raw.isdigit():
        return None
    return max(1, int(raw) // world_size)


def execute_ranks(ex: Execution) -> None:
    """Run `ex.task` as `task.world_size` ranks and send the attempt's one ending event."""
    task, channel = ex.task, ex.channel
    sel = selectors.DefaultSelector()
    ranks: list[_Rank] = []
    reserved: socket.socket | None = None
    try:
        reserved = reserve_port()   # held until every rank has ended
        port = int(reserved.getsockname()[1])
        threads = _threads_per_rank(task.world_size)
        for r in range(task.world_size):
            rank = _spawn(task, r, port, threads)
            ranks.append(rank)
            sel.register(rank.rfd, selectors.EVENT_READ, rank)
        rank0 = ranks[0]
        ex.relay_go = lambda step: _send(rank0, {"op": "go", "step": step})   # from the worker's reader
        kind, data = _supervise(ex, ranks, sel)
    except OSError as exc:
        kind, data = EventKind.FAILED, {"reason": f"cannot start the trial's processes: {exc}",
                                        "error_type": type(exc).__name__, "message": str(exc)}
    finally:
        ex.relay_go = None
        for rank in ranks:
            _kill(rank)
            with contextlib.suppress(subprocess.TimeoutExpired):
                rank.proc.wait(timeout=5)
            _close(rank, sel)
        sel.close()
        if reserved is not None:
            reserved.close()
    if ex.preempted:
        kind, data = EventKind.PREEMPTED, {"reason": "SIGTERM (preemption)"}
    _link_rank_captures(ranks, data)
    data["retire"] = True if kind is EventKind.PREEMPTED else ex.decide_retire()
    _send_profile(ex, ranks)   # with the sampler's last samples, before the attempt's end, not after
    channel.send(kind, data)


def _send_profile(ex: Execution, ranks: list[_Rank]) -> None:
    """Stop the supervisor's sampler (its samples cover every rank's process) and send the trial's one profile,
    merged from every rank's (profiling.merge_rank_profiles says how)."""
    system: dict[str, Any] = {}
    with ex.lock:
        ex.ended = True
        sampler, ex.sampler = ex.sampler, None
    if sampler is not None:
        with contextlib.suppress(Exception):
            sampler.stop()
            system = sampler.peak()
    if not ranks or (not any(r.profile for r in ranks) and not system.get("system_samples")):
        return
    with contextlib.suppress(Exception):
        ex.channel.send(EventKind.PROFILE, {"summary": merge_rank_profiles([r.profile for r in ranks], system)})


def _supervise(ex: Execution, ranks: list[_Rank], sel: selectors.BaseSelector) -> tuple[EventKind, dict[str, Any]]:
    stop_sent = term_sent = False
    first_failure: float | None = None
    rank0_done: float | None = None
    while True:
        if ex.stop_requested and not stop_sent:
            stop_sent = True
            for rank in ranks:
                _send(rank, {"op": "stop", "reason": "stop requested"})
        if ex.preempted and not term_sent:
            term_sent = True
            for rank in ranks:
                with contextlib.suppress(ProcessLookupError):
                    rank.proc.send_signal(signal.SIGTERM)
        for key, _ in sel.select(0.05):
            _read(key.data, ex)
        now = time.monotonic()
        for rank in ranks:
            if not rank.closed and rank.proc.poll() is not None:
                _read(rank, ex)
                _close(rank, sel)
                if rank.end is None:
                    rank.end = _crash_event(ex.task, rank)
        if not term_sent and any(r.end is not None and r.end.kind is EventKind.PREEMPTED for r in ranks) and all(
                _lost_a_peer(r) for r in ranks if r.end is not None and r.end.kind is EventKind.FAILED):
            # (a peer that lost this rank in a collective may have failed first: its symptom, not a failure)
            ex.preempted = True   # a rank got SIGTERM of its own: the whole trial is preempted (as on Ray)
            continue              # the next pass sends SIGTERM to the other ranks
        failures = [r for r in ranks if r.end is not None and r.end.kind is EventKind.FAILED]
        if failures and first_failure is None:
            first_failure = now
            if not stop_sent:   # peers blocked in a collective with the failed rank would hang: ask them to stop
                # (a stop, not SIGTERM: SIGTERM made a rank that was failing on its own at the same moment, the
                # one that broke, end as preempted, and the trial failed with its peer's symptom instead)
                for rank in ranks:
                    if rank.end is None:
                        _send(rank, {"op": "stop", "reason": "another rank failed"})
        ended = all(r.end is not None for r in ranks)
        settle = _STOP_SETTLE if stop_sent else _FAILURE_SETTLE
        if failures and all(_lost_a_peer(r) for r in failures) and not stop_sent:
            settle = _STOP_SETTLE   # only symptoms so far: give the rank that broke the time to say why
        if failures and (ended or now - (first_failure or now) >= settle):
            stopped = _stopped_unevenly(ex, ranks, failures) if stop_sent else None
            if stopped is not None:
                return stopped
            return _failure(failures)
        if ranks[0].end is not None and rank0_done is None:
            rank0_done = now
        if ended or (rank0_done is not None and now - rank0_done >= _STRAGGLER_SECONDS):
            end0 = ranks[0].end
            assert end0 is not None
            if not ended:
                late = [r.index for r in ranks if r.end is None]
                ex.channel.send(EventKind.NOTE, {"level": "warning", "kind": "ranks_killed",
                                                 "message": f"rank(s) {late} still running "
                                                            f"{_STRAGGLER_SECONDS:g}s after rank 0 returned; killed"})
            return end0.kind, dict(end0.data)


def _stopped_unevenly(ex: Execution, ranks: list[_Rank],
                      failures: list[_Rank]) -> tuple[EventKind, dict[str, Any]] | None:
    """After a stop request, a rank that returned cleanly while another failed: the stop reached the ranks at
    different steps, and the ones still training broke in a collective the others had left ("Connection
    closed by peer"). That is the stop's doing: the trial ends as stopped, with rank 0's result if it
    returned one, and a note naming the failure. None when no rank returned cleanly (a real failure)."""
    clean = [r.index for r in ranks if r.end is not None and r.end.kind is EventKind.FINISHED]
    if not clean:
        return None
    reason = _failure(failures)[1]["reason"]
    failed = sorted(r.index for r in failures)
    ex.channel.send(EventKind.NOTE, {
        "level": "warning", "kind": "ranks_left_unevenly",
        "message": f"after the stop request rank(s) {clean} returned and rank(s) {failed} failed "
                   f"({reason.splitlines()[0][:300]}): the ranks left the training loop at different steps; "
                   "agree on the stop with strategy.should_stop(run) (sweeplab.torch) or an all-reduce",
    })
    end0 = ranks[0].end
    if end0 is not None and end0.kind is EventKind.FINISHED:
        return EventKind.FINISHED, dict(end0.data)
    return EventKind.FINISHED, {"metrics": {}, "stopped": True}


def _link_rank_captures(ranks: list[_Rank], data: Mapping[str, Any]) -> None:
    """Name every rank's capture in the manifest of the one the trial keeps (`data["capture"]`: the failing
    rank's, or rank 0's at a NaN): `"ranks": {"1": "capture-....pkl"}`, files of the same directory, each with its
    own manifest and checksum. `sweeplab repro` gives each replayed rank its own."""
    link_captures({r.index: str(r.end.data["capture"]) for r in ranks
                   if r.end is not None and r.end.data.get("capture")}, data.get("capture"))


def link_captures(found: Mapping[int, str], primary: str | None) -> None:
    """Name the ranks' captures `found` ({rank: payload path}) in the manifest of `primary`, the one the trial
    keeps (the local supervisor's ranks, and the Ray gang's: `_link_rank_captures`)."""
    if not primary:
        return
    same_dir = {str(i): Path(p).name for i, p in found.items() if Path(p).parent == Path(primary).parent}
    if len(same_dir) < 2:
        return
    manifest_path = Path(primary).with_suffix(".json")
    with contextlib.suppress(OSError, ValueError):
        manifest = json.loads(manifest_path.read_text())
        manifest["ranks"] = same_dir
        tmp = manifest_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(manifest))
        os.replace(tmp, manifest_path)


#: what a rank's collective call raises when a peer rank died or broke (gloo, NCCL, the c10d store): a symptom
_PEER_LOST = re.compile(r"Connection (closed|reset) by peer|remote worker|ncclRemoteError|remote process exited"
                        r"|DistNetworkError|Broken pipe|Socket Timeout|peer (closed|disconnected)", re.IGNORECASE)


def lost_a_peer(data: Mapping[str, Any]) -> bool:
    """Whether a rank's failure (its event's data) is the symptom of another rank's: its collective call lost
    the peer. Such a failure gives way to another rank's own (here and in the Ray backend's gang)."""
    return bool(_PEER_LOST.search(f"{data.get('reason', '')}\n{data.get('message', '')}"))


def _lost_a_peer(rank: _Rank) -> bool:
    return rank.end is not None and lost_a_peer(rank.end.data)


def _failure(failures: list[_Rank]) -> tuple[EventKind, dict[str, Any]]:
    """The rank whose error made the others fail: the first failure that is not a peer's symptom (rank 0 in the
    all-reduce raises gloo's "Connection closed by peer" as soon as rank 1 dies, often before the supervisor
    sees rank 1's exit or gets its report), else the first failure."""
    causes = [r for r in failures if not _lost_a_peer(r)] or failures
    first = min(causes, key=lambda r: (r.end.time if r.end is not None else 0.0, r.index))
    assert first.end is not None
    data = dict(first.end.data)
    data["reason"] = f"rank {first.index}: {data.get('reason', 'failed')}"
    data["rank"] = first.index
    return EventKind.FAILED, data


def _crash_event(task: TrialTask, rank: _Rank) -> Event:
    how, exit_code, sig = describe_exit(rank.proc.returncode)
    if names_full_disk("", sig):   # a file-size limit: no fault of the trial's
        return Event(EventKind.FAILED, task.trial_id, task.attempt, time.time(), disk_full_data(
            f"process {how} (a file-size limit, RLIMIT_FSIZE)", trial_places(task), exit_code=exit_code,
            signal=sig))
    if died_of_sigterm(exit_code, sig):
        return Event(EventKind.PREEMPTED, task.trial_id, task.attempt, time.time(),
                     {"reason": f"rank {rank.index}: SIGTERM (preemption)"})
    reason = f"process {how}"
    data: dict[str, Any] = {"reason": reason, "error_type": "WorkerDied", "exit_code": exit_code, "signal": sig,
                            "message": reason}
    stack = crash_stack(rank_paths(task, rank.index)[0]) if sig else None
    if stack:   # faulthandler's dump of where the rank died (rank.py enables it)
        data["traceback"] = stack
    return Event(EventKind.FAILED, task.trial_id, task.attempt, time.time(), data)


def _read(rank: _Rank, ex: Execution) -> None:
    if rank.closed:
        return
    for ev in read_events(rank.rfd, rank.buf, 1 << 16):
        if ev.kind.ends_attempt:
            if rank.end is None:
                rank.end = ev
        elif ev.kind is EventKind.PROFILE:
            rank.profile = ev.data.get("summary")
        elif rank.index == 0 and ev.kind in _FORWARDED:
            ex.channel.send(ev.kind, ev.data)


def _send(rank: _Rank, msg: Mapping[str, Any]) -> None:
    stdin = rank.proc.stdin
    if stdin is None or rank.proc.poll() is not None:
        return
    with contextlib.suppress(BrokenPipeError, OSError, ValueError):
        stdin.write(json.dumps(msg).encode() + b"\n")
        stdin.flush()


def _kill(rank: _Rank) -> None:
    if rank.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            rank.proc.kill()


def _close(rank: _Rank, sel: selectors.BaseSelector) -> None:
    if rank.closed:
        return
    rank.closed = True
    with contextlib.suppress(KeyError, ValueError):
        sel.unregister(rank.rfd)
    with contextlib.suppress(OSError):
        os.close(rank.rfd)
    if rank.proc.stdin is not None:
        with contextlib.suppress(OSError, BrokenPipeError):
            rank.proc.stdin.close()
