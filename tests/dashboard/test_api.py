"""The JSON API of the dashboard, against a generated store (docs/api.md documents every endpoint)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sweeplab.dashboard import create_app
from sweeplab.dashboard.synthetic import make_synthetic_store
from sweeplab.store import Store
from sweeplab.store import queries as q
from sweeplab.types import TrialState


@pytest.fixture
def ro(demo_store: Path) -> Iterator[Store]:
    s = Store.open(demo_store, readonly=True)
    yield s
    s.close()


def _get(client: Any, url: str, status: int = 200) -> Any:
    r = client.get(url)
    assert r.status_code == status, (url, r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json")
    return r.json()


def _same(a: Any) -> Any:
    return json.loads(json.dumps(a))


def test_sweeps_list_is_the_query_layers_json(client: Any, ro: Store) -> None:
    body = _get(client, "/api/sweeps")
    assert body == {"sweeps": _same(q.list_sweeps(ro))}
    sweep = body["sweeps"][0]
    assert sweep["name"] == "demo" and sweep["trials"] == 60
    assert set(sweep["counts"]) == {s.value for s in TrialState}


def test_status_and_best_are_what_the_cli_prints(client: Any, ro: Store) -> None:
    assert _get(client, "/api/sweeps/demo/status") == _same(q.sweep_status(ro, "demo"))
    best = _get(client, "/api/sweeps/demo/best")["best"]
    assert best == _same(q.best_trial(ro, "demo"))
    completed = [t for t in q.sweep_status(ro, "demo")["trials"] if t["state"] == "completed"]
    assert best["value"] == min(t["value"] for t in completed)


def test_sweep_summary_carries_the_spec(client: Any) -> None:
    body = _get(client, "/api/sweeps/demo")
    assert body["sweep"]["name"] == "demo"
    assert set(body["spec"]["parameters"]) == {"lr", "hidden", "dropout", "optimizer"}


def test_trials_are_columnar_and_revalidate_with_etag(client: Any) -> None:
    r = client.get("/api/sweeps/demo/trials")
    assert r.status_code == 200
    body = r.json()
    assert body["n"] == 60 and len(body["params"]["lr"]) == 60 and len(body["state"]) == 60
    assert body["number"] == list(range(60))
    again = client.get("/api/sweeps/demo/trials", headers={"if-none-match": r.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


def test_unknown_sweep_and_trial_are_404_with_a_helpful_message(client: Any) -> None:
    assert "sweeps: demo" in _get(client, "/api/sweeps/nope/trials", 404)["error"]
    assert "has no trial 999" in _get(client, "/api/sweeps/demo/trials/999", 404)["error"]
    assert _get(client, "/api/not-an-endpoint", 404)["error"]


@pytest.mark.parametrize("url", [
    "/api/sweeps/demo/curves?key=val_loss&trials=1,x",
    "/api/sweeps/demo/curves?trials=1",
    "/api/sweeps/demo/curves?key=val_loss&trials=" + ",".join(map(str, range(300))),
    "/api/sweeps/demo/events?after_id=abc",
], ids=["non-int-trial", "no-key", "too-many-trials", "bad-after-id"])
def test_bad_queries_are_400(client: Any, url: str) -> None:
    assert _get(client, url, 400)["error"]


def test_curves_are_downsampled_server_side(client: Any, ro: Store) -> None:
    full = _get(client, "/api/sweeps/demo/curves?key=val_loss&trials=0,1,2")
    assert [t["number"] for t in full["trials"]] == [0, 1, 2]
    for t in full["trials"]:
        assert len(t["step"]) == len(t["values"]) == t["n"]
    small = _get(client, "/api/sweeps/demo/curves?key=loss&trials=0&max_points=4")
    t0 = small["trials"][0]
    assert t0["n"] > 4 and len(t0["step"]) <= 4
    assert t0["step"][0] == 0 and t0["step"][-1] == t0["n"] - 1


def test_keys_list_every_logged_metric(client: Any) -> None:
    assert _get(client, "/api/sweeps/demo/keys")["keys"] == ["loss", "lr_now", "val_loss"]


def test_importance_ranks_the_parameter_that_matters_first(client: Any) -> None:
    body = _get(client, "/api/sweeps/demo/importance")
    assert body["method"] == "fanova"
    ranked = [d["param"] for d in body["importances"]]
    assert ranked[0] == "lr" and set(ranked) == {"lr", "hidden", "dropout", "optimizer"}
    assert sum(d["importance"] for d in body["importances"]) == pytest.approx(1.0)
    assert _get(client, "/api/sweeps/demo/importance") == body  # cached, identical


def test_trial_detail_curves_and_log(client: Any, ro: Store) -> None:
    failed = next(t["number"] for t in q.sweep_status(ro, "demo")["trials"] if t["attempts"] == 2)
    d = _get(client, f"/api/sweeps/demo/trials/{failed}")
    assert [a["number"] for a in d["attempts"]] == [1, 2]
    assert any(e["kind"] == "retry" for e in d["events"])
    assert d["log_path"] == f"logs/demo/trial-{failed}-attempt-2.log"
    curves = _get(client, f"/api/sweeps/demo/trials/{failed}/curves")
    assert set(curves["curves"]) == {"loss", "lr_now", "val_loss"}
    log = _get(client, f"/api/sweeps/demo/trials/{failed}/log")
    assert log["text"].startswith(f"[trial {failed}] epoch 0") and not log["truncated"]
    tail = _get(client, f"/api/sweeps/demo/trials/{failed}/log?tail=40")
    assert tail["truncated"] and len(tail["text"]) < 40 and log["text"].endswith(tail["text"])
    first = _get(client, f"/api/sweeps/demo/trials/{failed}/log?attempt=1")
    assert first["path"].endswith("attempt-1.log")


def test_events_page_forward_from_an_id(client: Any) -> None:
    newest = _get(client, "/api/sweeps/demo/events?newest=1&limit=5")["events"]
    assert len(newest) == 5
    after = _get(client, f"/api/sweeps/demo/events?after_id={newest[0]['id']}")["events"]
    assert [e["id"] for e in after] == [e["id"] for e in newest[1:]]


def test_changes_token_is_stable_until_a_write(client_for: Any, tmp_path: Path) -> None:
    root = make_synthetic_store(tmp_path, trials=5, points=50, with_logs=False)
    with client_for(create_app(root)) as c:
        first = c.get("/api/changes?sweep=demo").json()
        same = c.get(f"/api/changes?sweep=demo&token={first['token']}").json()
        assert same == {"token": first["token"], "changed": False}
        trials_before = c.get("/api/sweeps/demo/trials").json()
        w = Store.open(root)
        sid = w.sweep_row("demo")["id"]
        w.add_trial(sid, 5, {"lr": 0.01, "hidden": 32, "dropout": 0.1, "optimizer": "sgd"}, None, None)
        w.close()
        moved = c.get(f"/api/changes?sweep=demo&token={first['token']}").json()
        assert moved["changed"] and moved["token"] != first["token"]
        trials_after = c.get("/api/sweeps/demo/trials").json()  # the token-keyed cache saw the write
        assert trials_after["n"] == trials_before["n"] + 1


def test_pages_serve_the_single_page_app(client: Any) -> None:
    for url in ("/", "/sweeps/demo", "/sweeps/demo/trials/3"):
        r = client.get(url)
        assert r.status_code == 200 and "<main id=\"main\">" in r.text
    assert "cdn" not in client.get("/").text.lower()
    # Plotly.js is loaded by the pages' script when a chart needs it, from this server (no CDN)
    assert 's.src = "/static/plotly.min.js"' in client.get("/static/util.js").text


def test_plotly_bundle_comes_from_the_python_package_gzipped(client: Any) -> None:
    import plotly

    r = client.get("/static/plotly.min.js", headers={"accept-encoding": "gzip"})
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
    bundled = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    assert r.content == bundled  # httpx decompressed it
    assert client.get("/static/plotly.min.js", headers={"if-none-match": r.headers["etag"]}).status_code == 304


def test_store_missing_is_503_not_a_crash(client_for: Any, tmp_path: Path) -> None:
    with client_for(create_app(tmp_path / "nothing")) as c:
        r = c.get("/api/sweeps")
        assert r.status_code == 503 and "no sweeplab store" in r.json()["error"]


def test_importance_on_an_asha_sweep_uses_the_pruned_trials_at_a_common_step(
        client_for: Any, asha_store: Any) -> None:
    """17 of 20 trials were pruned: importance from the 3 completed ones alone said 1.000 with confidence."""
    from sweeplab.dashboard import create_app

    with client_for(create_app(asha_store)) as c:
        auto = _get(c, "/api/sweeps/asha/importance")
        assert auto["basis"] == "rung" and auto["rung_step"] == 3, auto
        assert auto["trials_used"] == 11 and auto["by_state"] == {"pruned": 8, "completed": 3}
        assert auto["bases"] == {"final": 3, "rung": 11}
        final = _get(c, "/api/sweeps/asha/importance?basis=final")
        assert final["basis"] == "final" and final["trials_used"] == 3
        for body in (auto, final):   # few trials: said plainly, with a spread on every bar
            assert body["confidence"] == "low" and f"only {body['trials_used']} trials" in body["message"]
            assert body["importances"] and all(
                d["lo"] is not None and 0 <= d["lo"] <= d["hi"] <= 1 for d in body["importances"])
        skipped = {d["param"]: d["why"] for d in auto["skipped"]}
        assert skipped["epochs"] == "constant" and "conditional" in skipped["momentum"]
        assert c.get("/api/sweeps/asha/importance?basis=best").status_code == 400


def test_sweeps_list_says_which_backend_a_sweep_ran_on(client_for: Any, asha_store: Any) -> None:
    from sweeplab.dashboard import create_app

    with client_for(create_app(asha_store)) as c:
        (s,) = _get(c, "/api/sweeps")["sweeps"]
        assert (s["backend"], s["address"]) == ("ray", "10.0.0.5:6379")


@pytest.mark.parametrize("values,expect", [
    ([0.3] * 6, "every trial has the same value"),                  # nothing to explain
    ([1e160, 0.1, 0.3, 0.4, 0.2, 0.5], "too far apart"),             # variance overflows: bars of 0
    ([1e308, -1e308, 0.3, 0.4, 0.2, 0.5], "too far apart"),          # an AssertionError inside fANOVA (a 500)
], ids=["constant-values", "overflowing-spread", "extreme-values"])
def test_importance_that_cannot_be_computed_says_why_and_draws_no_bars(values: list[float], expect: str) -> None:
    from sweeplab.dashboard.importance import param_importance

    cols = {"state": ["completed"] * 6, "value": values, "number": list(range(6)),
            "params": {"a": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "b": [1, 2, 1, 2, 1, 2]}}
    got = param_importance(cols)
    assert got["importances"] == [] and expect in got["message"], got


@pytest.mark.parametrize("header", ["*", "ETAG", '"x", ETAG', 'W/ETAG', ' ETAG , "y"'],
                         ids=["star", "exact", "in-a-list", "weak", "spaces"])
def test_if_none_match_is_read_as_rfc_9110_says(client: Any, header: str) -> None:
    r = client.get("/api/sweeps/demo/trials")
    again = client.get("/api/sweeps/demo/trials", headers={"if-none-match": header.replace("ETAG", r.headers["etag"])})
    assert again.status_code == 304 and again.content == b""
    other = client.get("/api/sweeps/demo/trials", headers={"if-none-match": '"nope", W/"other"'})
    assert other.status_code == 200


def test_a_log_of_an_attempt_the_trial_did_not_have_says_so(client: Any, ro: Store) -> None:
    once = next(t["number"] for t in q.sweep_status(ro, "demo")["trials"] if t["attempts"] == 1)
    body = _get(client, f"/api/sweeps/demo/trials/{once}/log?attempt=2", 404)
    assert body["error"] == f"trial {once} has no attempt 2 (it has attempt 1)", body
