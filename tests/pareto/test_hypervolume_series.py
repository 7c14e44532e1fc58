"""The hypervolume series a reader sees is on one scale and never decreases, although the driver's reference
point (when the spec fixes none) follows the front as it grows."""

from __future__ import annotations

import random
from itertools import pairwise
from types import SimpleNamespace

from sweeplab.driver.objectives import ParetoTracker
from sweeplab.store import Store, queries
from sweeplab.types import Goal


def _recorded(tracker: ParetoTracker, points: list[tuple[float, float]]) -> list[dict]:
    rows = []
    for p in points:
        if tracker.add(p, True):
            rows.append(tracker.record())
    return rows


def test_the_series_is_recomputed_on_the_latest_reference_and_never_decreases(tmp_path):
    goals = (Goal.MAXIMIZE, Goal.MINIMIZE)
    spec = SimpleNamespace(objectives=[SimpleNamespace(goal=g, reference=None) for g in goals])
    rng = random.Random(7)
    points = [(rng.random(), 10 + 40 * rng.random()) for _ in range(60)]
    rows = _recorded(ParetoTracker(spec), points)
    recorded = [r["hypervolume"] for r in rows]
    assert any(b < a for a, b in pairwise(recorded))   # the driver's own volumes: moving scale

    st = Store.open(tmp_path / "st")
    try:
        sid = st.create_sweep(name="mo", method="tpe", metric="acc", goal="maximize", spec={
            "metric": [{"name": "acc", "goal": "maximize"}, {"name": "lat", "goal": "minimize"}]},
            spec_path=None, seed=0)
        for r in rows:
            st.add_event(sid, "hypervolume", data=r)
        series = queries.hypervolume_series(st, "mo")
    finally:
        st.close()
    volumes = series["hypervolume"]
    assert series["reference"] == rows[-1]["reference"] and volumes[-1] == recorded[-1]
    assert all(b >= a for a, b in pairwise(volumes)) and volumes[0] < volumes[-1]
