"""Pareto math for sweeps with several objectives: dominance, non-dominated ranks, hypervolume.

Pure functions over plain sequences (no I/O, no Optuna), shared by the driver (the hypervolume it records as
the sweep goes), the store's queries (`sweeplab best`, `status`) and the dashboard.

Points are given in the objectives' own units together with their goals; internally every objective is
turned into "lower is better" (`to_min`). A point with a missing or non-finite value (None, NaN) takes part
in nothing: it has no rank, is on no front and adds no volume.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sweeplab.types import Goal

__all__ = [
    "default_reference",
    "dominates",
    "hypervolume",
    "nondominated_ranks",
    "pareto_front",
    "to_min",
]

Point = Sequence[float | None]


def _usable(p: Point) -> bool:
    return all(v is not None and isinstance(v, (int, float)) and math.isfinite(v) for v in p)


def to_min(point: Point, goals: Sequence[Goal]) -> tuple[float, ...] | None:
    """`point` with every objective as "lower is better" (maximised ones negated); None if one is missing."""
    if len(point) != len(goals) or not _usable(point):
        return None
    return tuple(float(v) * Goal(g).sign() for v, g in zip(point, goals))  # type: ignore[arg-type]


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """True when `a` is no worse than `b` in every objective and better in one (both lower-is-better)."""
    better = False
    for x, y in zip(a, b):
        if x > y:
            return False
        if x < y:
            better = True
    return better


def nondominated_ranks(points: Sequence[Point], goals: Sequence[Goal]) -> list[int | None]:
    """Each point's front rank: 1 for the Pareto front, 2 for the front once rank 1 is removed, ...

    Identical points share a rank. None for points with a missing value. Two objectives: O(n log n)
    (`_ranks_2d`); more: O(n log(fronts) * front size) comparisons (`_ranks_sorted`).
    """
    mins = [to_min(p, goals) for p in points]
    if len(goals) == 2:
        return _ranks_2d(mins)
    return _ranks_sorted(mins)


def _ranks_sorted(mins: Sequence[tuple[float, ...] | None]) -> list[int | None]:
    """Front ranks for any number of objectives, exactly as peeling gives them, without peeling (Zhang et
    al.'s efficient non-dominated sort, binary search): in lexicographic order a point's dominators all come
    before it, and its rank is that of the first front none of whose members dominates it (a dominator in a
    later front would be dominated by a member of that one). Fronts found so far are searched by bisection:
    O(n log(fronts) * front size) comparisons instead of O(n^2) per front."""
    ranks: list[int | None] = [None] * len(mins)
    fronts: list[list[tuple[float, ...]]] = []
    for i in sorted((i for i, m in enumerate(mins) if m is not None), key=lambda i: mins[i]):  # type: ignore[arg-type,return-value]
        m = mins[i]
        assert m is not None
        lo, hi = 0, len(fronts)   # the first front with no dominator of m is in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if any(dominates(f, m) for f in fronts[mid]):
                lo = mid + 1
            else:
                hi = mid
        if lo == len(fronts):
            fronts.append([])
        fronts[lo].append(m)
        ranks[i] = lo + 1
    return ranks


def _ranks_2d(mins: Sequence[tuple[float, ...] | None]) -> list[int | None]:
    """Front ranks of two-objective points (lower is better), exactly as peeling gives them, in O(n log n).

    A point's rank is one more than the highest rank among the points that dominate it. In (x, y) order a
    point's dominators all come before it, and every earlier point with y <= its y, other than one equal to
    it, dominates it: so the rank is one more than the highest rank so far at y or below, a prefix maximum
    over y kept in a Fenwick tree. Equal points are ranked together, before any of them is added."""
    ranks: list[int | None] = [None] * len(mins)
    order = sorted((i for i, m in enumerate(mins) if m is not None), key=lambda i: mins[i])  # type: ignore[arg-type,return-value]
    ys = sorted({mins[i][1] for i in order})  # type: ignore[index]
    slot = {y: k + 1 for k, y in enumerate(ys)}
    tree = [0] * (len(ys) + 1)
    j = 0
    while j < len(order):
        point = mins[order[j]]
        assert point is not None
        end = j
        while end < len(order) and mins[order[end]] == point:
            end += 1
        k, best = slot[point[1]], 0
        while k > 0:   # the highest rank so far among points with y <= this one's
            best = max(best, tree[k])
            k -= k & -k
        for i in order[j:end]:
            ranks[i] = best + 1
        k = slot[point[1]]
        while k < len(tree):
            tree[k] = max(tree[k], best + 1)
            k += k & -k
        j = end
    return ranks


def pareto_front(points: Sequence[Point], goals: Sequence[Goal]) -> list[int]:
    """Indices of the non-dominated points (rank 1), in input order.

    Points are taken in lexicographic order, where a point's dominators all come before it; a point joins
    the front when no member so far dominates it (a dominated point's dominator is itself dominated by a
    member, or is one). O(n log n + n * front size), without ranking the other points."""
    mins = [to_min(p, goals) for p in points]
    front: list[tuple[float, ...]] = []
    on: list[int] = []
    for i in sorted((i for i, m in enumerate(mins) if m is not None), key=lambda i: mins[i]):  # type: ignore[arg-type,return-value]
        m = mins[i]
        assert m is not None
        if not any(dominates(f, m) for f in front):
            if not front or front[-1] != m:
                front.append(m)
            on.append(i)
    return sorted(on)


def default_reference(points: Sequence[Point], goals: Sequence[Goal], margin: float = 0.1) -> tuple[float, ...] | None:
    """A reference point when none is given: per objective, the worst value seen, moved `margin` of the
    value range further out (so the worst points still add volume). In the objectives' own units; None
    without a usable point."""
    mins = [m for m in (to_min(p, goals) for p in points) if m is not None]
    if not mins:
        return None
    ref = []
    for k, g in enumerate(goals):
        col = [m[k] for m in mins]
        hi, lo = max(col), min(col)
        span = (hi - lo) or max(abs(hi), 1.0)
        ref.append((hi + margin * span) * Goal(g).sign())
    return tuple(ref)


def hypervolume(points: Sequence[Point], goals: Sequence[Goal], reference: Sequence[float]) -> float:
    """The volume dominated by `points` and bounded by `reference` (all in the objectives' own units).

    Points not strictly better than the reference in every objective add nothing. Exact: a sweep over the
    first objective for two, recursive slicing (HSO) for more, which suits the small fronts of a sweep.
    """
    ref = to_min(reference, goals)
    if ref is None:
        raise ValueError(f"the reference point must be finite, one value per objective: {list(reference)}")
    mins = [m for m in (to_min(p, goals) for p in points) if m is not None]
    inside = [m for m in mins if all(x < r for x, r in zip(m, ref))]
    front = [inside[i] for i in _front_indices(inside)]
    return _hv(front, ref)


def _front_indices(mins: Sequence[Sequence[float]]) -> list[int]:
    unique = {tuple(m): i for i, m in reversed(list(enumerate(mins)))}   # first of identical points
    order = sorted(unique.items())
    kept: list[tuple[tuple[float, ...], int]] = []
    for p, i in order:   # sorted lexicographically: a dominator of p comes before p
        if not any(dominates(q, p) for q, _ in kept):
            kept.append((p, i))
    return sorted(i for _, i in kept)


def _hv(front: Sequence[Sequence[float]], ref: Sequence[float]) -> float:
    if not front:
        return 0.0
    if len(ref) == 1:
        return ref[0] - min(p[0] for p in front)
    if len(ref) == 2:
        total, y_bound = 0.0, ref[1]
        for x, y in sorted((p[0], p[1]) for p in front):
            if y < y_bound:
                total += (ref[0] - x) * (y_bound - y)
                y_bound = y
        return total
    # slice along the last objective: between consecutive values, the front of the points below the slice
    pts = sorted(front, key=lambda p: p[-1])
    total = 0.0
    for k, p in enumerate(pts):
        upper = pts[k + 1][-1] if k + 1 < len(pts) else ref[-1]
        depth = upper - p[-1]
        if depth <= 0:
            continue
        below = [q[:-1] for q in pts[: k + 1]]
        sub = [below[i] for i in _front_indices(below)]
        total += depth * _hv(sub, ref[:-1])
    return total
