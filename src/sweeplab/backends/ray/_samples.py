"""The system samples of a multi-process trial on Ray, one series from every rank's (no ray import).

On the local backend one sampler watches the trial's whole process tree (the supervisor and every rank), so
each SYSTEM sample is the trial's. On Ray each rank runs in an actor of its own (maybe on another node), with
a sampler over its own process tree: `RankSamples` joins those series into the trial's, as the local one.

Each rank samples once a second from its own start, so the ranks' samples are put in one-second buckets
(from the trial's first sample) and a bucket is summed over the ranks: CPU %, RSS and process count add up;
a rank with no sample in a bucket (its sampler drifted by one) counts with its previous one while it still
runs, and two of one rank in a bucket are combined (`_combine`). GPU figures are per node, not per rank:
every rank on a node samples the same devices (the GPUs of the trial's ranks there), so a node counts once;
the nodes' memory adds up and their utilisation is the mean weighted by each node's GPU memory.

A bucket goes out once every rank still running has sampled past it (or 30 s later: a rank whose sampler
sends nothing holds back no one), the rest at the trial's end (`flush`). The trial's system figures
(`summary`) come from the joined series, as the local sampler's `peak()` does from its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["RankSamples"]

_INTERVAL = 1.0   # the ranks' samplers' (backends/execution._start_sampler)
_LAG = 30         # buckets: one this far behind the newest goes out without a rank that has not sampled it


class RankSamples:
    def __init__(self, world_size: int, nodes: Sequence[str] | None = None) -> None:
        self.world_size = world_size
        self.nodes: list[str] = list(nodes) if nodes is not None else [str(r) for r in range(world_size)]
        self._t0: float | None = None
        self._buckets: dict[int, dict[int, dict[str, Any]]] = {}   # bucket -> rank -> its last sample there
        self._last_bucket: dict[int, int] = {}                     # rank -> its latest bucket seen
        self._prev: dict[int, dict[str, Any]] = {}                 # rank -> its sample before the next bucket out
        self._ended: set[int] = set()
        self._done: int | None = None                              # buckets up to this one went out
        self._n = self._gpu_n = 0
        self._cpu_sum = self._cpu_peak = self._gpu_util_sum = self._gpu_mem_peak = 0.0
        self._rss_peak = 0

    def add(self, rank: int, samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rank `rank`'s samples; returns the trial's samples that are complete now."""
        for s in samples:
            if not isinstance(s, dict) or not isinstance(s.get("time"), (int, float)):
                continue
            if self._t0 is None:
                self._t0 = float(s["time"])
            b = math.floor((float(s["time"]) - self._t0) / _INTERVAL)
            if self._done is not None:   # late for a bucket that went out: the next one
                b = max(b, self._done + 1)
            bucket = self._buckets.setdefault(b, {})
            bucket[rank] = _combine(bucket[rank], s) if rank in bucket else s
            self._last_bucket[rank] = max(self._last_bucket.get(rank, b), b)
        return self._emit(final=False)

    def ended(self, rank: int) -> list[dict[str, Any]]:
        """Rank `rank` has ended (its last samples came before its end)."""
        self._ended.add(rank)
        return self._emit(final=False)

    def flush(self) -> list[dict[str, Any]]:
        return self._emit(final=True)

    def _emit(self, *, final: bool) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        newest = max(self._last_bucket.values(), default=0)
        for b in sorted(self._buckets):
            if not final and newest - b < _LAG and any(r not in self._ended and self._last_bucket.get(r, -1) <= b
                                                      for r in range(self.world_size)):
                break   # a running rank has not sampled past this bucket yet
            own = self._buckets.pop(b)
            parts = dict(own)
            for r, prev in self._prev.items():   # a running rank that skipped this bucket: its previous sample
                if r not in parts and self._last_bucket.get(r, -1) > b:
                    parts[r] = prev
            self._prev.update(own)
            self._done = b
            out.append(self._join(own, parts))
        return out

    def _join(self, own: dict[int, dict[str, Any]], parts: dict[int, dict[str, Any]]) -> dict[str, Any]:
        merged: dict[str, Any] = {
            "time": max(float(s["time"]) for s in own.values()),
            "cpu": round(sum(float(s.get("cpu") or 0.0) for s in parts.values()), 1),
            "rss": sum(int(s.get("rss") or 0) for s in parts.values()),
            "procs": sum(int(s.get("procs") or 0) for s in parts.values()),
        }
        per_node: dict[str, dict[str, Any]] = {}
        for r in sorted(parts):   # a node's devices once: its lowest rank's figures
            s = parts[r]
            if "gpu_util" in s:
                per_node.setdefault(self.nodes[r] if r < len(self.nodes) else str(r), s)
        if per_node:
            gpus = list(per_node.values())
            total = sum(float(s.get("gpu_mem_total") or 0.0) for s in gpus)
            util = (sum(float(s["gpu_util"]) * float(s.get("gpu_mem_total") or 0.0) for s in gpus) / total
                    if total > 0 else sum(float(s["gpu_util"]) for s in gpus) / len(gpus))
            merged.update({"gpu_util": util, "gpu_mem": sum(float(s.get("gpu_mem") or 0.0) for s in gpus),
                           "gpu_mem_total": total})
        self._n += 1
        self._cpu_sum += merged["cpu"]
        self._cpu_peak = max(self._cpu_peak, merged["cpu"])
        self._rss_peak = max(self._rss_peak, merged["rss"])
        if "gpu_util" in merged:
            self._gpu_n += 1
            self._gpu_util_sum += merged["gpu_util"]
            self._gpu_mem_peak = max(self._gpu_mem_peak, merged["gpu_mem"])
        return merged

    def summary(self, profiles: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
        """The trial's system figures from the joined samples (None without any), as `SystemSampler.peak()`;
        `mem_total` and `ncpu` (from the ranks' `profiles`) add up over the trial's nodes."""
        if not self._n:
            return None
        machine: dict[str, dict[str, int]] = {}
        for r, p in enumerate(profiles):
            node = machine.setdefault(self.nodes[r] if r < len(self.nodes) else str(r), {})
            for key in ("mem_total", "ncpu"):
                if p and p.get(key) is not None:
                    node[key] = max(node.get(key, 0), int(p[key]))
        n, g = self._n, self._gpu_n
        return {
            "system_samples": n, "rss_peak": self._rss_peak, "cpu_mean": self._cpu_sum / n, "cpu_peak": self._cpu_peak,
            "gpu_util_mean": self._gpu_util_sum / g if g else None, "gpu_mem_peak": self._gpu_mem_peak if g else None,
            **{key: (sum(m[key] for m in machine.values() if key in m)
                     if any(key in m for m in machine.values()) else None) for key in ("mem_total", "ncpu")},
        }


def _combine(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two samples of one rank in one bucket (its sampler drifted, or its final sample came soon after the
    last): CPU % averaged, memory and processes at their larger (the final sample, taken once the function
    returned, had let go of what the trial held), the later time."""
    out = {**a, **b, "time": max(float(a["time"]), float(b["time"])),
           "cpu": round((float(a.get("cpu") or 0.0) + float(b.get("cpu") or 0.0)) / 2, 1),
           "rss": max(int(a.get("rss") or 0), int(b.get("rss") or 0)),
           "procs": max(int(a.get("procs") or 0), int(b.get("procs") or 0))}
    if "gpu_mem" in a and "gpu_mem" in b:
        out["gpu_mem"] = max(float(a["gpu_mem"]), float(b["gpu_mem"]))
    return out
