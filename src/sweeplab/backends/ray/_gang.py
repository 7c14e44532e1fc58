"""One multi-process trial spread over a Ray placement group (no ray import): the torchrun environment of
each rank, and how the ranks' events become the events of one trial.

Each rank runs as an ordinary one-process trial in a `TrialHost` actor placed in its own bundle, with
`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR` (rank 0's node) and `MASTER_PORT`
(free on that node) in its environment. `Gang` merges what the ranks report, as the local supervisor
(`backends.multiproc`) does for ranks on one machine:

- rank 0's events reach the driver; the other ranks' events are dropped (only their ends count), but for
  their heartbeats (the trial lives while any rank does: ranks finishing after rank 0 returned are not a
  silent trial), system samples and profiles: the trial's samples are every rank's summed
  (`_samples.RankSamples`), as the local supervisor's sampler covers every rank's process, and one profile
  merged from every rank's (`profiling.merge_rank_profiles`, with the system figures of the summed samples)
  goes out before the trial's end;
- a rank that fails fails the trial with that rank's traceback, and the other ranks are killed;
- the capture the trial keeps (the failing rank's, or rank 0's at a NaN) names every rank's in its manifest,
  as on the local backend, so that `sweeplab repro` replays each rank with its own input;
- a rank that got SIGTERM (it stopped, or died of it while it started) preempts the trial: SIGTERM goes to
  every rank, and the trial is requeued (as on the local backend);
- a rank lost with its node makes the trial PREEMPTED (the other ranks are killed: they would block in
  a collective with the lost one);
- the trial ends once every rank has ended; ranks still running some time after rank 0 returned are
  killed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from enum import Enum
from typing import Any

from sweeplab._torch.env import GPUS_PER_RANK_VAR
from sweeplab.backends.base import TrialTask
from sweeplab.backends.events import Event, EventKind, died_of_sigterm
from sweeplab.backends.multiproc import link_captures, lost_a_peer, rank_env, rank_paths
from sweeplab.backends.ray._samples import RankSamples
from sweeplab.profiling import merge_rank_profiles

__all__ = ["Gang", "Op", "rank_tasks"]

STRAGGLER_SECONDS = 10.0   # after rank 0 returned, how long the other ranks get to return too
STOP_SETTLE = 3.0   # after a stop request and a failed rank: how long the others get to return cleanly


class Op(str, Enum):
    """What the driver must do to one rank's actor."""

    KILL = "kill"
    PREEMPT = "preempt"


def rank_tasks(task: TrialTask, nodes: Sequence[str], master_addr: str, master_port: int, *,
               threads: int | None = None, gpus: Sequence[Sequence[str]] | None = None,
               gpus_per_rank: float | None = None) -> list[TrialTask]:
    """The one-process task of every rank. `nodes[r]`: the node rank r runs on (any hashable id);
    LOCAL_RANK / LOCAL_WORLD_SIZE / NODE_RANK follow from which ranks share a node.

    `gpus[r]`: the GPU ids Ray gave rank r's actor (its CUDA_VISIBLE_DEVICES). Every rank on a node then sees
    the GPUs of all the trial's ranks there, local rank j's own k at positions [j*k, (j+1)*k): the view of
    the local backend, where the ranks share the slot's GPUs. With only its own visible, LOCAL_RANK pointed
    past them (cuda:LOCAL_RANK, which frameworks pick, did not exist, or was another rank's). Ranks that
    share a GPU (a fraction each) keep Ray's view: one GPU, cuda:0.

    `gpus_per_rank`: each rank's GPUs, SWEEPLAB_GPUS_PER_RANK in its environment: below 1 (and Ray put two
    ranks of a node on one GPU) sweeplab.torch picks gloo, not NCCL, which refuses that; 1 when Ray gave the
    node's ranks distinct GPUs."""
    world = len(nodes)
    order: list[str] = []
    for n in nodes:
        if n not in order:
            order.append(n)
    out = []
    for r, node in enumerate(nodes):
        env = rank_env(r, world, master_port, threads=threads, addr=master_addr)
        local = [i for i, n in enumerate(nodes) if n == node]
        env.update({"LOCAL_RANK": str(local.index(r)), "LOCAL_WORLD_SIZE": str(len(local)),
                    "GROUP_RANK": str(order.index(node)), "NODE_RANK": str(order.index(node))})
        shared = [str(g) for i in local for g in (gpus[i] if gpus is not None else ())]
        distinct = gpus is not None and all(gpus[i] for i in local) and len(set(shared)) == len(shared)
        if distinct:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(shared)   # (ranks sharing a GPU, gpus_per_worker < 1: as Ray set)
        if gpus_per_rank is not None:   # a fraction each, but Ray put them on distinct GPUs: none shares (NCCL)
            env[GPUS_PER_RANK_VAR] = f"{max(gpus_per_rank, 1.0) if distinct else gpus_per_rank:g}"
        merged = {k: str(v) for k, v in task.env.items()}
        merged.update(env)
        log_path, report_path = rank_paths(task, r)
        out.append(dataclasses.replace(task, world_size=1, env=merged, log_path=log_path, report_path=report_path))
    return out


class Gang:
    """The ranks of one attempt of one trial, as seen by the driver."""

    def __init__(self, task: TrialTask, world_size: int, *, straggler_seconds: float = STRAGGLER_SECONDS,
                 nodes: Sequence[str] | None = None) -> None:
        self.task = task
        self.world_size = world_size
        self.straggler_seconds = straggler_seconds
        self.ends: dict[int, Event] = {}
        self.killed: set[int] = set()        # ranks this gang (or the driver) asked to kill
        self.preempting = False              # the driver preempted the trial
        self.first_failure: int | None = None
        self.lost: int | None = None         # a rank whose actor or node was lost
        self.rank0_done: float | None = None
        self.stragglers: list[int] = []
        self.stopping = False                # a stop request was passed to the ranks
        self.failed_at: float | None = None  # when the first failure came, while stopping (kill deferred)
        self.profiles: dict[int, dict[str, Any]] = {}   # each rank's PROFILE summary, merged at the end
        self.samples = RankSamples(world_size, nodes)   # every rank's SYSTEM samples, summed

    def placed(self, nodes: Sequence[str]) -> None:
        """Rank r runs on node `nodes[r]` (ranks on one node sample the same GPUs: counted once)."""
        self.samples.nodes = list(nodes)

    def _mine(self, ev: Event) -> bool:
        return (ev.trial, ev.attempt) == (self.task.trial_id, self.task.attempt)

    def _others(self, rank: int) -> list[int]:
        return [r for r in range(self.world_size) if r != rank and r not in self.ends and r not in self.killed]

    def kill_all(self) -> list[tuple[Op, int]]:
        ops = [(Op.KILL, r) for r in range(self.world_size) if r not in self.ends and r not in self.killed]
        self.killed.update(r for _, r in ops)
        return ops

    def stop_requested(self) -> None:
        """The driver asked the trial to stop: a rank failing from here on may be the stop's doing (its peer
        returned and left it alone in a collective), so a rank that returns cleanly keeps the trial's result."""
        self.stopping = True

    def preempt_all(self) -> list[tuple[Op, int]]:
        self.preempting = True
        return [(Op.PREEMPT, r) for r in range(self.world_size) if r not in self.ends]

    def accept(self, rank: int, ev: Event, *, lost: bool = False) -> tuple[list[Event], list[tuple[Op, int]]]:
        """One event of one rank: the events to pass on to the driver and what to do to other ranks.
        `lost`: `ev` is the PREEMPTED/FAILED end made up for a rank whose actor is gone."""
        if not self._mine(ev) or rank in self.ends:
            return [], []
        if ev.kind is EventKind.PROFILE:
            self.profiles[rank] = dict(ev.data.get("summary") or {})
            return [], []
        if ev.kind is EventKind.SYSTEM:
            return self._system(self.samples.add(rank, ev.data.get("samples") or [])), []
        if ev.kind is EventKind.HEARTBEAT:   # the trial lives while any rank does, as the local supervisor beats
            return [ev], []
        if not ev.kind.ends_attempt:
            return ([ev] if rank == 0 else []), []
        if (ev.kind is EventKind.FAILED and not lost and rank not in self.killed
                and ev.data.get("error_type") == "WorkerDied"
                and died_of_sigterm(ev.data.get("exit_code"), ev.data.get("signal"))):
            # the rank's process died of SIGTERM (before its handler was installed): a preemption of the
            # trial, as on the local backend (multiproc), not a failure
            ev = dataclasses.replace(ev, kind=EventKind.PREEMPTED,
                                     data={"reason": f"rank {rank}: SIGTERM (preemption)"})
        self.ends[rank] = ev
        ops: list[tuple[Op, int]] = []
        failed = ev.kind is EventKind.FAILED and rank not in self.killed and not lost
        if failed and self.first_failure is None:
            self.first_failure = rank
            # the others may be returning from the stop, or one of them broke and made this rank lose it in a
            # collective ("Connection closed by peer") and has yet to say why: kill them later (tick)
            if self.stopping or lost_a_peer(ev.data):
                self.failed_at = time.monotonic()
            else:
                ops = self._kill_others(rank)
        elif failed and self.first_failure is not None and not lost_a_peer(ev.data) \
                and lost_a_peer(self.ends[self.first_failure].data):
            self.first_failure = rank   # the rank that broke, heard of after its peer's symptom: the trial's error
            if not self.stopping:
                self.failed_at = None
                ops = self._kill_others(rank)
        elif lost and rank not in self.killed and self.lost is None:
            self.lost = rank
            ops = self._kill_others(rank)
        elif ev.kind is EventKind.PREEMPTED and not self.preempting and rank not in self.killed:
            ops = [(Op.PREEMPT, r) for r in self._others(rank)]   # a rank saw SIGTERM: all go
            self.preempting = True
        if rank == 0 and self.rank0_done is None:
            self.rank0_done = time.monotonic()
        if self.done:
            return self._end_if_done(), ops
        return self._system(self.samples.ended(rank)), ops

    def _system(self, samples: list[dict[str, Any]]) -> list[Event]:
        if not samples:
            return []
        return [Event(EventKind.SYSTEM, self.task.trial_id, self.task.attempt, time.time(), {"samples": samples})]

    def _kill_others(self, rank: int) -> list[tuple[Op, int]]:
        others = self._others(rank)
        self.killed.update(others)
        return [(Op.KILL, r) for r in others]

    def tick(self, now: float | None = None) -> list[tuple[Op, int]]:
        """Ranks still running `straggler_seconds` after rank 0 returned are killed."""
        now = time.monotonic() if now is None else now
        if self.failed_at is not None and self.first_failure is not None and now - self.failed_at >= STOP_SETTLE:
            self.failed_at = None
            return self._kill_others(self.first_failure)
        if self.rank0_done is None or now - self.rank0_done < self.straggler_seconds:
            return []
        late = self._others(0)
        if late:
            self.stragglers.extend(late)
            self.killed.update(late)
        return [(Op.KILL, r) for r in late]

    def _end_if_done(self) -> list[Event]:
        if len(self.ends) < self.world_size:
            return []
        now = time.time()
        out: list[Event] = self._system(self.samples.flush())
        profiles = [self.profiles.get(r) for r in range(self.world_size)]
        system = self.samples.summary(profiles)
        if self.profiles or system:
            summary = merge_rank_profiles(profiles, system)
            out.append(Event(EventKind.PROFILE, self.task.trial_id, self.task.attempt, now, {"summary": summary}))
        if self.stragglers:
            out.append(Event(EventKind.NOTE, self.task.trial_id, self.task.attempt, now, {
                "level": "warning", "kind": "ranks_killed",
                "message": f"rank(s) {self.stragglers} still running {self.straggler_seconds:g}s after rank 0 "
                           "returned; killed"}))
        clean = [r for r, e in sorted(self.ends.items()) if e.kind is EventKind.FINISHED and r not in self.killed]
        if self.first_failure is not None and self.stopping and clean:
            reason = str(self.ends[self.first_failure].data.get("reason", "failed")).splitlines()[0][:300]
            out.append(Event(EventKind.NOTE, self.task.trial_id, self.task.attempt, now, {
                "level": "warning", "kind": "ranks_left_unevenly",
                "message": f"after the stop request rank(s) {clean} returned and rank {self.first_failure} failed "
                           f"({reason}): the ranks left the training loop at different steps; agree on the stop "
                           "with strategy.should_stop(run) (sweeplab.torch) or an all-reduce"}))
            data = dict(self.ends[0].data) if 0 in clean else {"metrics": {}, "stopped": True}
            kind = EventKind.FINISHED
        elif self.first_failure is not None:
            data = dict(self.ends[self.first_failure].data)
            data["reason"] = f"rank {self.first_failure}: {data.get('reason', 'failed')}"
            data["rank"] = self.first_failure
            kind = EventKind.FAILED
        elif self.lost is not None:
            data = dict(self.ends[self.lost].data)
            kind = self.ends[self.lost].kind
            data["reason"] = f"rank {self.lost}: {data.get('reason', 'lost')}"
            data["rank"] = self.lost
        elif any(e.kind is EventKind.PREEMPTED for e in self.ends.values()):
            kind, data = EventKind.PREEMPTED, dict(next(
                e.data for e in self.ends.values() if e.kind is EventKind.PREEMPTED))
        else:
            kind, data = self.ends[0].kind, dict(self.ends[0].data)
        if kind is EventKind.PREEMPTED:
            data["retire"] = True
        # every rank's capture named in the kept one's manifest, as the local supervisor does: `sweeplab repro`
        # gives each replayed rank its own input (the NaN may come from any rank's share of the batch)
        link_captures({r: str(e.data["capture"]) for r, e in self.ends.items() if e.data.get("capture")},
                      str(data["capture"]) if data.get("capture") else None)
        out.append(Event(kind, self.task.trial_id, self.task.attempt, now, data))
        return out

    @property
    def done(self) -> bool:
        return len(self.ends) >= self.world_size

    def describe(self) -> dict[str, Any]:
        return {"ends": {r: e.kind.value for r, e in self.ends.items()}, "killed": sorted(self.killed)}
