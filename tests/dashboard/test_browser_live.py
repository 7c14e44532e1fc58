"""A live sweep page in real headless Chromium (issue 18): the first screen shows the table's first page
before every trial's columns arrive, and a refresh asks only for the trials changed since the page's last
answer (`/trials?since=`) and merges them into what it has."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sweeplab.dashboard import create_app
from sweeplab.store import Store
from tests.dashboard.test_browser import CHROMIUM

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")]

T0 = 1_700_000_000.0
TRIALS = 80   # more than the first page (50)


@pytest.fixture
def live(tmp_path: Path, live_server_for: Any) -> Iterator[tuple[Any, Store, int]]:
    w = Store.open(tmp_path)
    with w.transaction():
        sid = w.create_sweep(name="live", method="random", metric="loss", goal="minimize", spec={},
                             spec_path=None, seed=0)
        for n in range(TRIALS):
            tid = w.add_trial(sid, n, {"lr": 10 ** -(1 + n % 4), "depth": n % 5}, None, seed=n, state="running",
                              started=T0 + n, attempts=1)
            w.add_metrics(tid, 1, [(0, "loss", 1.0 / (n + 1), T0 + n)])
            if n < TRIALS - 3:
                w.update_trial(tid, state="completed", value=1.0 / (n + 1), ended=T0 + n + 1)
    with live_server_for(create_app(tmp_path)) as srv:
        yield srv, w, sid
    w.close()


def test_first_page_then_every_trial_then_only_the_changes(live: tuple[Any, Store, int], page: Any) -> None:
    # `live` first: its server is torn down after the page closes (a page still polling a closed server
    # logged ERR_CONNECTION_REFUSED, which the page fixture counts as a console error)
    srv, w, sid = live
    trials_urls: list[str] = []
    page.on("request", lambda r: trials_urls.append(r.url) if "/trials" in r.url and "/api/" in r.url else None)
    first = page.request.get(srv.url + "/api/sweeps/live/trials?limit=50").json()
    assert (first["n"], first["total"], first["full"], first["number"][-1]) == (50, TRIALS, False, 49)
    page.goto(srv.url + "/sweeps/live")
    page.wait_for_selector("body[data-drawn='1']")
    assert re.match(rf"{TRIALS} of {TRIALS} trials match", page.inner_text("#trial-count"))
    assert any(u.endswith("/trials?limit=50") for u in trials_urls), trials_urls
    page.evaluate("async () => { window.__cols = await (await fetch('/api/sweeps/live/trials')).json(); }")
    before = len(trials_urls)

    with w.transaction():   # the driver: one trial ends with a new value, a new one starts with a new parameter
        w.update_trial(w.trial_by_number(sid, TRIALS - 1)["id"], state="failed", reason="boom", ended=T0 + 99)
        w.update_trial(w.trial_by_number(sid, 3)["id"], value=0.001)
        w.add_trial(sid, TRIALS, {"lr": 0.5, "depth": 1, "width": 64}, None, seed=1, state="running",
                    started=T0 + 100, attempts=1)
    page.wait_for_function(f"document.querySelector('#trial-count')?.innerText?.startsWith('{TRIALS + 1} of')",
                           timeout=30_000)
    refreshes = trials_urls[before:]
    assert refreshes and all("/trials?since=" in u for u in refreshes), refreshes

    # The page's merge of the change list equals the whole list read again.
    got = page.evaluate("""async () => {
        const { mergeTrials } = await import('/static/sweep.js');
        const delta = await (await fetch(`/api/sweeps/live/trials?since=${window.__cols.seq}`)).json();
        const merged = mergeTrials(window.__cols, delta);
        const full = await (await fetch('/api/sweeps/live/trials')).json();
        const pick = (c) => JSON.stringify(['n', 'number', 'state', 'value', 'reason', 'ended', 'params', 'metrics']
            .map((k) => k === 'params' || k === 'metrics' ? Object.keys(c[k]).sort().map((p) => [p, c[k][p]]) : c[k]));
        return { delta: delta.n, full: delta.full, merged: pick(merged), whole: pick(full) };
    }""")
    assert (got["delta"], got["full"]) == (3, False)
    assert json.loads(got["merged"]) == json.loads(got["whole"])


def _curves(page: Any) -> list[int]:
    """The trials whose learning curves the sweep page draws."""
    return sorted(page.evaluate("() => (document.querySelector('#curves').data || []).filter((t) => t.name)"
                                ".map((t) => Number(t.name.slice(1).split(' ')[0]))"))


def test_default_curves_follow_a_live_sweep_until_the_user_picks(live: tuple[Any, Store, int], page: Any) -> None:
    """The learning curves drawn by default (the five best, the running ones...) follow the sweep as trials
    start and end, until the user ticks or clears trials: from then on their choice is kept."""
    srv, w, sid = live
    page.goto(srv.url + "/sweeps/live")
    page.wait_for_selector("#curves[data-rendered]")
    # the five best completed (the latest numbers: value 1/(n+1)) and the three running ones
    assert _curves(page) == [72, 73, 74, 75, 76, 77, 78, 79]
    with w.transaction():   # trial 77 completes (the new best), trial 80 starts and reports
        w.update_trial(w.trial_by_number(sid, 77)["id"], state="completed", value=1 / 78, ended=T0 + 90)
        tid = w.add_trial(sid, TRIALS, {"lr": 0.5, "depth": 1}, None, seed=1, state="running", started=T0 + 100,
                          attempts=1)
        w.add_metrics(tid, 1, [(0, "loss", 0.9, T0 + 100)])
    page.wait_for_function("() => (document.querySelector('#curves').data || []).some((t) => t.name === '#80 running')",
                           timeout=30_000)
    assert _curves(page) == [73, 74, 75, 76, 77, 78, 79, 80]
    page.click("text=clear selection")      # the user's choice: no curves
    page.wait_for_selector("#curves .placeholder")
    before = page.inner_text("#trial-count")
    with w.transaction():
        w.add_trial(sid, TRIALS + 1, {"lr": 0.5, "depth": 2}, None, seed=2, state="running", started=T0 + 101,
                    attempts=1)
    page.wait_for_function(f"(document.querySelector('#trial-count')?.innerText ?? {before!r}) !== {before!r}",
                           timeout=30_000)
    assert page.inner_text("#selection-note") == "0 selected" and page.locator("#curves .placeholder").count() == 1


def test_no_change_is_lost_while_the_page_loads_or_when_a_refresh_fails(live: tuple[Any, Store, int],
                                                                         browser: Any) -> None:
    """A change made while the page loads (after it read the trials, before it starts polling) and a change
    whose refresh failed (a dropped request, the server restarting) are both shown: the sweep's last changes
    must not leave a finished sweep shown as running, "up to date"."""
    from tests.dashboard.test_browser_pictures import WIDE, _page

    srv, w, sid = live
    ctx, page, errors = _page(browser, WIDE)
    held: list[Any] = []
    page.route("**/static/plotly.min.js", lambda route: held.append(route))   # the load waits for it: held
    page.goto(srv.url + "/sweeps/live")
    page.wait_for_function(f"document.querySelector('#trial-count')?.innerText?.startsWith('{TRIALS} of')")
    while not held:
        page.wait_for_timeout(20)
    with w.transaction():   # trial 77 completes while the page has its trials but is still loading
        w.update_trial(w.trial_by_number(sid, TRIALS - 3)["id"], state="completed", value=0.5, ended=T0 + 200)
        w.add_event(sid, "trial_ended", "trial 77 completed", at=T0 + 200)
    held[0].continue_()
    page.wait_for_function(f"document.querySelector('#sweep-header .counts')?.innerText?.includes('{TRIALS - 2} "
                           "completed')", timeout=30_000)

    page.wait_for_function("(document.querySelector('#live')?.innerText ?? 'connecting…') !== 'connecting…'")  # polling
    dropped: list[str] = []

    def drop_once(route: Any) -> None:
        if dropped:
            route.continue_()
        else:
            dropped.append(route.request.url)
            route.abort()

    page.route("**/api/sweeps/live/trials?since=*", drop_once)
    with w.transaction():   # the sweep's last change: its last trials end, it finishes
        for n in (TRIALS - 2, TRIALS - 1):
            w.update_trial(w.trial_by_number(sid, n)["id"], state="completed", value=0.5, ended=T0 + 200)
        w.update_sweep(sid, state="finished", ended=T0 + 200)
    page.wait_for_function(f"document.querySelector('#sweep-header .counts')?.innerText === '{TRIALS} completed'"
                           " && document.querySelector('#sweep-header .badge')?.innerText === 'finished'",
                           timeout=30_000)
    ctx.close()
    assert dropped and all("ERR_FAILED" in e for e in errors), (dropped, errors)   # the dropped request only
