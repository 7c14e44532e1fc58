"""The dashboard on a long live sweep (issue 18): parameter importance is refit once 2 % more trials have
ended (from 50 on), not on every refresh of the page; below 50 trials every ended trial counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweeplab.dashboard import create_app
from sweeplab.dashboard.reader import Reader
from sweeplab.store import Store

T0 = 1_700_000_000.0


def _finish(root: Path, numbers: range) -> None:
    """Trials `numbers` of sweep 's' (created when missing) run and complete, as the driver writes them."""
    s = Store.open(root)
    row = s.sweep_row("s")
    with s.transaction():
        sid = row["id"] if row is not None else s.create_sweep(
            name="s", method="random", metric="loss", goal="minimize", spec={}, spec_path=None, seed=0)
        for n in numbers:
            x, y = (n * 37 % 101) / 101, (n * 53 % 97) / 97
            tid = s.add_trial(sid, n, {"x": x, "y": y}, None, seed=n, state="running", started=T0 + n, attempts=1)
            s.add_attempt(tid, 1, started=T0 + n)
            s.update_attempt(tid, 1, state="completed", ended=T0 + n + 1)
            s.update_trial(tid, state="completed", value=(x - 0.3) ** 2 + 0.01 * y, ended=T0 + n + 1)
    s.close()


def _used(client: Any) -> int:
    r = client.get("/api/sweeps/s/importance")
    assert r.status_code == 200, r.text[:300]
    return int(r.json()["trials_total"])


def test_importance_is_refit_after_two_percent_more_trials_end(tmp_path: Path, client_for: Any,
                                                              monkeypatch: Any) -> None:
    fits: list[int] = []

    def fit(columns: Any, **kw: Any) -> dict[str, Any]:   # the fANOVA itself is tested in test_api.py
        fits.append(len(columns["number"]))
        return {"trials_total": len(columns["number"])}

    monkeypatch.setattr("sweeplab.dashboard.routes.param_importance", fit)
    _finish(tmp_path, range(200))
    with client_for(create_app(tmp_path)) as c:
        assert _used(c) == 200
        _finish(tmp_path, range(200, 203))   # 3 more: under 2 % of 200 (4)
        assert _used(c) == 200
        _finish(tmp_path, range(203, 204))   # 4 more since the fit: refit
        assert _used(c) == 204
    assert fits == [200, 204]


def test_below_fifty_trials_every_ended_trial_changes_the_version_above_two_percent_do(tmp_path: Path) -> None:
    reader = Reader(tmp_path)
    reader.cached("importance:auto", "s", (20, 1.5, 19, 0), lambda: "fit on 20")
    assert reader.settled_version("importance:auto", "s", (21, 1.6, 20, 0)) == (21, 1.6, 20, 0)
    reader.cached("importance:auto", "s", (49, 1.5, 48, 0), lambda: "fit on 49")
    assert reader.settled_version("importance:auto", "s", (50, 1.6, 49, 0)) == (50, 1.6, 49, 0)
    reader.cached("importance:auto", "s", (500, 1.5, 499, 0), lambda: "fit on 500")
    assert reader.settled_version("importance:auto", "s", (509, 1.6, 508, 0)) == (500, 1.5, 499, 0)
    assert reader.settled_version("importance:auto", "s", (510, 1.6, 509, 0)) == (510, 1.6, 509, 0)
    assert reader.settled_version("importance:final", "s", (509, 1.6, 508, 0)) == (509, 1.6, 508, 0)
