"""A trial of many points and many metrics on the dashboard: `/trials/N/curves` is downsampled server-side
with the extremes, the last point and the non-finite values kept; `/trials/N` and `/importance` answer
from what they need and from a cache that the next write to the store invalidates."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from sweeplab.dashboard import create_app
from sweeplab.dashboard.synthetic import make_synthetic_store
from sweeplab.store import Store

N = 50_000


def _value(s: int) -> float:
    if s == 12_345:
        return 1e6     # one spike
    if s == 33_333:
        return -1e6    # one dip
    if 20_000 <= s < 20_050:
        return math.nan   # a run of NaN (stored as NULL)
    if s == 40_000:
        return math.inf
    return math.sin(s / 500)


def _large_store(tmp_path: Path, keys: int = 120) -> Path:
    """make_synthetic_store's sweep 'demo' plus trial 99: `loss` at 50,000 steps and `keys` more metrics."""
    root = make_synthetic_store(tmp_path / "store", trials=3, points=10, running=0, seed=3)
    st = Store.open(root)
    with st.transaction():
        sid = st.conn.execute("SELECT id FROM sweeps WHERE name='demo'").fetchone()[0]
        tid = st.add_trial(sid, 99, {"lr": 0.01}, {"lr": 0.01}, seed=99)
        st.add_attempt(tid, 1, started=time.time(), host="h", pid=1, log_path=None)
        st.add_metrics(tid, 1, [(s, "loss", _value(s), 1000.0 + s) for s in range(N)]
                       + [(0, f"k{j:04d}", float(j), 1000.0) for j in range(keys)])
        st.update_trial(tid, state="completed", value=0.5, attempts=1, started=1000.0, ended=time.time(),
                        reason=None, last_step=N - 1, profile=None,
                        metrics={"loss": 0.5, **{f"k{j:04d}": float(j) for j in range(keys)}})
    st.close()
    return root


def test_a_long_curve_is_downsampled_keeping_extremes_the_last_point_and_non_finite_markers(
        tmp_path: Path, client_for: Any) -> None:
    root = _large_store(tmp_path, keys=3)
    with client_for(create_app(root)) as c:
        body = c.get("/api/sweeps/demo/trials/99/curves?max_points=200").json()
    loss = body["curves"]["loss"]
    assert loss["n"] == N and len(loss["step"]) == len(loss["values"]) <= 200 + 4
    by_step = dict(zip(loss["step"], loss["values"]))
    assert by_step[12_345] == 1e6 and by_step[33_333] == -1e6             # the extremes
    assert loss["step"][-1] == N - 1 and loss["values"][-1] == _value(N - 1)   # the last point
    assert by_step[20_000] is None and by_step[40_000] is None            # NaN and inf: gaps, not dropped
    assert loss["step"] == sorted(loss["step"]) and loss["step"][0] == 0


def test_trial_curves_draw_its_first_50_metrics_and_the_detail_lists_them_all(tmp_path: Path,
                                                                           client_for: Any) -> None:
    root = _large_store(tmp_path, keys=120)
    with client_for(create_app(root)) as c:
        detail = c.get("/api/sweeps/demo/trials/99").json()
        curves = c.get("/api/sweeps/demo/trials/99/curves").json()
    assert len(detail["metric_keys"]) == 121 and len(detail["metrics"]) == 121
    assert list(curves["curves"]) == sorted(detail["metric_keys"])[:50] and curves["state"] == "completed"
    assert curves["curves"]["k0007"] == {"n": 1, "step": [0], "values": [7.0]}


def test_trial_answers_are_cached_until_the_store_changes(tmp_path: Path, client_for: Any) -> None:
    root = _large_store(tmp_path, keys=3)
    with client_for(create_app(root)) as c:
        first = c.get("/api/sweeps/demo/trials/99").content
        assert c.get("/api/sweeps/demo/trials/99").content == first
        assert c.get("/api/sweeps/demo/trials/0").json()["number"] == 0    # another trial: its own answer
        curves = c.get("/api/sweeps/demo/trials/99/curves?max_points=100").json()
        st = Store.open(root)
        with st.transaction():
            tid = st.conn.execute("SELECT t.id FROM trials t WHERE t.number=99").fetchone()[0]
            st.add_metrics(tid, 1, [(N, "loss", 7.0, 1000.0 + N), (0, "a-new-one", 1.0, 1000.0)])
        st.close()
        detail = c.get("/api/sweeps/demo/trials/99").json()
        assert "a-new-one" in detail["metric_keys"]
        again = c.get("/api/sweeps/demo/trials/99/curves?max_points=100").json()
        assert again["curves"]["loss"]["n"] == curves["curves"]["loss"]["n"] + 1
        assert again["curves"]["loss"]["values"][-1] == 7.0 and "a-new-one" in again["curves"]


def test_importance_of_a_sweep_with_a_trial_of_many_metrics(tmp_path: Path, client_for: Any) -> None:
    root = _large_store(tmp_path, keys=2000)
    with client_for(create_app(root)) as c:
        r = c.get("/api/sweeps/demo/importance")
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    assert body["sweep"] == "demo" and body["n_trials"] == 4
