"""Pure planning of the Ray backend (no ray import): what one trial asks of a node, how many trials the
cluster holds, and whether a checkpoint location is one every node can reach."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sweeplab.errors import UserError
from sweeplab.types import PLACEMENTS

__all__ = ["PLACEMENTS", "TrialDemand", "capacity", "check_fits", "checkpoint_scheme", "trial_demand"]


_NODE_LOCAL_SCHEMES = ("memory",)           # fsspec protocols that are never shared between processes
_LOCAL_FILE_SCHEMES = ("", "file", "local")  # a path on the node itself


@dataclass(frozen=True)
class TrialDemand:
    """The resources one trial holds on one node (all its processes together)."""

    cpus: float = 1.0
    gpus: float = 0.0
    custom: Mapping[str, float] = field(default_factory=dict)
    world_size: int = 1

    def ray_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": self.cpus, "num_gpus": self.gpus}
        if self.custom:
            opts["resources"] = dict(self.custom)
        return opts

    def as_resources(self) -> dict[str, float]:
        """In Ray's node resource names."""
        out = {"CPU": self.cpus, "GPU": self.gpus}
        out.update(self.custom)
        return {k: v for k, v in out.items() if v > 0}

    def per_rank(self) -> TrialDemand:
        """What one process of a multi-process trial holds: one bundle of its placement group. Custom
        resources are asked of every rank's node (a `spot: 1` trial runs only on spot nodes)."""
        w = self.world_size
        return TrialDemand(cpus=self.cpus / w, gpus=self.gpus / w, custom=dict(self.custom), world_size=1)

    def bundles(self) -> list[dict[str, float]]:
        """One placement-group bundle per rank (a zero CPU bundle still needs one entry)."""
        one = self.per_rank().as_resources() or {"CPU": 0.001}
        return [dict(one) for _ in range(self.world_size)]

    def describe(self) -> str:
        parts = [f"{self.cpus:g} CPU"]
        if self.gpus:
            parts.append(f"{self.gpus:g} GPU")
        parts += [f"{v:g} {k}" for k, v in self.custom.items()]
        text = ", ".join(parts)
        return f"{text} ({self.world_size} processes)" if self.world_size > 1 else text


def trial_demand(resources: Any, *, smoke: bool = False) -> TrialDemand:
    """From `spec.resources` (a Resources dataclass, a mapping, or None).

    A multi-process trial holds `workers x cpus_per_worker` CPUs and `workers x gpus_per_worker` GPUs on
    one node; without the per-worker keys, `cpus` and `gpus` are the trial's totals.
    """
    def get(name: str, default: Any) -> Any:
        if resources is None:
            return default
        if isinstance(resources, Mapping):
            value = resources.get(name, default)
        else:
            value = getattr(resources, name, default)
        return default if value is None else value

    world = int(get("workers", 1))
    if world < 1:
        raise UserError(f"resources.workers must be at least 1; got {world}")
    per_cpu, per_gpu = get("cpus_per_worker", None), get("gpus_per_worker", None)
    cpus = float(per_cpu) * world if per_cpu is not None else float(get("cpus", 1.0))
    gpus = float(per_gpu) * world if per_gpu is not None else float(get("gpus", 0.0))
    if smoke:
        gpus = 0.0
    if gpus > 1 and gpus != int(gpus):
        raise UserError(f"resources.gpus above 1 must be a whole number per trial; got {gpus:g}")
    custom = {str(k): float(v) for k, v in dict(get("custom", {}) or {}).items()}
    return TrialDemand(cpus=cpus, gpus=gpus, custom=custom, world_size=world)


def _fit_count(demand: TrialDemand, node: Mapping[str, float]) -> int:
    """How many such trials one node holds (0 when one does not fit)."""
    need = demand.as_resources()
    if not need:
        return 1 << 30
    counts = []
    for name, amount in need.items():
        have = float(node.get(name, 0.0))
        counts.append(math.floor(have / amount + 1e-9))
    return min(counts)


def check_fits(demand: TrialDemand, nodes: Iterable[Mapping[str, float]], *, placement: str | None = None) -> None:
    """Raise UserError when the cluster cannot hold even one trial.

    `placement` (a multi-process trial on a placement group): each rank needs one node with room for
    its bundle, and the cluster as a whole room for all of them (on distinct nodes for STRICT_SPREAD).
    """
    nodes = list(nodes)
    if placement is not None and demand.world_size > 1:
        one = demand.per_rank()
        fits = [_fit_count(one, n) for n in nodes]
        if any(fits):
            slots = sum(1 for f in fits if f) if placement == "STRICT_SPREAD" else sum(fits)
            if placement == "STRICT_PACK":
                slots = max(fits)
            if slots >= demand.world_size:
                return
            where = {"STRICT_SPREAD": " on distinct nodes", "STRICT_PACK": " on one node"}.get(placement, "")
            raise UserError(
                f"resources.workers {demand.world_size}: the Ray cluster has room for only {slots} process(es) "
                f"of {one.describe()}{where} ({placement}); lower workers or add nodes"
            )
        demand = one
    if any(_fit_count(demand, n) >= 1 for n in nodes):
        return
    have = "; ".join(
        ", ".join(f"{v:g} {k}" for k, v in sorted(n.items()) if not k.startswith(("node:", "memory",
                                                                                    "object_store")))
        for n in nodes
    ) or "no nodes"
    raise UserError(
        f"resources: no node of the Ray cluster can run a trial that needs {demand.describe()}; "
        f"the nodes have: {have}",
    )


def capacity(demand: TrialDemand, nodes: Iterable[Mapping[str, float]], *, placement: str | None = None) -> int:
    """How many trials the given nodes hold at once (`placement`: ranks spread over a placement group)."""
    nodes = list(nodes)
    if placement is None or demand.world_size <= 1:
        return sum(min(_fit_count(demand, n), 1 << 20) for n in nodes)
    fits = [min(_fit_count(demand.per_rank(), n), 1 << 20) for n in nodes]
    if placement == "STRICT_PACK":
        return sum(f // demand.world_size for f in fits)
    if placement == "STRICT_SPREAD":   # k trials fit when each node gives at most one rank to each
        k = 0
        while sum(min(f, k + 1) for f in fits) >= (k + 1) * demand.world_size and k < (1 << 20):
            k += 1
        return k
    return sum(fits) // demand.world_size


def checkpoint_scheme(root: str) -> str:
    """'' for a plain path, else the fsspec protocol of a URL ('s3', 'gs', 'file', 'memory'...)."""
    head, sep, _ = root.partition("://")
    if not sep or "/" in head or not head:
        return ""
    return head.split("::")[-1].lower()


def check_checkpoint_root(root: str, *, multi_host: bool, unseen: list[str] | None = None) -> None:
    """Checkpoints of a multi-node sweep must be where every node can read them back.

    `unseen`: the nodes that could not see a probe file the driver wrote under `root` (None: not probed).
    """
    scheme = checkpoint_scheme(root)
    if scheme in _NODE_LOCAL_SCHEMES:
        raise UserError(
            f"checkpoint_dir: {root!r} lives in one process's memory; the Ray backend needs a location "
            "every node can reach (a shared filesystem path or a URL such as s3://bucket/sweeps)"
        )
    if not multi_host or scheme not in _LOCAL_FILE_SCHEMES or not unseen:
        return
    raise UserError(
        f"checkpoint_dir: {root!r} is local to this machine: node(s) {', '.join(sorted(unseen))} of the "
        "Ray cluster cannot see it, so a preempted trial could not resume there; set checkpoint_dir to a "
        "URL every node can reach (s3://bucket/sweeps, gs://...) or to a shared filesystem (NFS, EFS)"
    )


def workdir_warning(root: str | None, *, multi_host: bool, unseen: list[str] | None) -> str | None:
    """The warning at start when trials run in their own directories (`trial.workdir: trial`, under `root`,
    the store's `workdirs/`) on a cluster of more than one machine some of which cannot see the store: each
    node then has its own directory at that path, so a retry on another node starts in an empty one and the
    files stay where they were written. A warning, not an error: a trial that keeps what must survive in
    checkpoints runs correctly (docs/scale-out.md). None when there is nothing to say."""
    if not root or not multi_host or not unseen:
        return None
    return (f"trial.workdir: trial: the store's {root} is local to this machine: node(s) "
            f"{', '.join(sorted(unseen))} of the Ray cluster cannot see it, so each node makes the trials' "
            "directories on its own disk (a retry on another node starts in an empty one, and files a trial "
            "writes there stay on its node); put the store on a shared filesystem (--store /mnt/efs/...) to "
            "keep them together")
