"""The dashboard read as a user reads it, in headless Chromium: a conditional sweep (parameters a trial does
not have are gaps, never zeros), text (relative times with the absolute one in a tooltip, units, counts),
a sweep too big to draw every line of, and every page on a 390 px phone screen without sideways scrolling.
Screenshots land in test-artifacts/dashboard/."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sweeplab.dashboard import create_app
from sweeplab.dashboard.synthetic import make_synthetic_store
from sweeplab.store import Store
from tests.dashboard.test_browser import ARTIFACTS, CHROMIUM
from tests.dashboard.test_browser_pictures import PHONE, _page

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="needs Debian's chromium at /usr/bin/chromium (bash .ci/install-browser.sh)"),
]


def make_conditional_store(root: Path) -> Path:
    """Sweep 'cond': `model` is cnn or mlp; cnn trials have `kernel`, mlp trials have `layers`, `act` and
    `dropout` (which is 0.0 in some of them: a real zero, to tell apart from a missing value)."""
    store = Store.open(root)
    t0 = time.time() - 7200
    with store.transaction():
        sid = store.create_sweep(name="cond", method="random", metric="acc", goal="maximize", seed=0,
                                 spec_path=None, spec={"method": "random"})
        for i in range(12):
            params: dict[str, object] = {"lr": 10 ** (-4 + i / 4)}
            if i % 2:
                params.update(model="mlp", layers=1 + i % 4, act=("relu", "tanh")[i % 3 == 0],
                              dropout=0.0 if i % 3 == 1 else 0.1 * (i % 5))
            else:
                params.update(model="cnn", kernel=(3, 5, 7)[i % 3])
            tid = store.add_trial(sid, i, params, dict(params), seed=i)
            store.add_attempt(tid, 1, started=t0 + 60 * i)
            store.add_metrics(tid, 1, [(s, "acc", 0.5 + 0.03 * i + 0.01 * s, t0 + 60 * i + s) for s in range(5)])
            store.update_trial(tid, state="completed", value=0.54 + 0.03 * i, attempts=1, started=t0 + 60 * i,
                               ended=t0 + 60 * i + 185, last_step=4, metrics={"acc": 0.54 + 0.03 * i})
            store.update_attempt(tid, 1, state="completed", ended=t0 + 60 * i + 185, exit_code=0)
            store.add_event(sid, "trial_ended", f"trial {i} completed", trial_id=tid, attempt=1, at=t0 + 60 * i + 185)
    store.close()
    return root


@pytest.fixture(scope="module")
def cond_server(tmp_path_factory: pytest.TempPathFactory, live_server_for: Any) -> Iterator[Any]:
    root = make_conditional_store(tmp_path_factory.mktemp("cond") / "store")
    with live_server_for(create_app(root)) as srv:
        yield srv


@pytest.fixture(scope="module")
def big_server(tmp_path_factory: pytest.TempPathFactory, live_server_for: Any) -> Iterator[Any]:
    root = make_synthetic_store(tmp_path_factory.mktemp("big") / "store", sweep="big", trials=2500,
                                points=20_000, with_logs=False)
    with live_server_for(create_app(root)) as srv:
        yield srv


def _dim(page: Any, label: str) -> dict[str, Any]:
    return page.evaluate("(label) => { const d = document.querySelector('#parcoords').pc.dims"
                         ".find((x) => x.label === label); return { values: d.values, range: d.range,"
                         " tickvals: d.tickvals, ticktext: d.ticktext }; }", label)


def _cell(page: Any, number: int, key: str) -> str:
    col = page.locator("#trials thead th").evaluate_all(f"(ths) => ths.findIndex((th) => th.dataset.key === '{key}')")
    return page.locator(f"#trials tr[data-number='{number}'] td").nth(col).inner_text()


def test_inactive_parameters_are_gaps_not_zeros(page: Any, cond_server: Any) -> None:
    page.goto(cond_server.url + "/sweeps/cond")
    page.wait_for_selector("#parcoords[data-rendered='1']")
    numbers = page.evaluate("() => document.querySelector('#parcoords').pc.dims.find((d) => d.label === 'model')"
                            ".values.map((v, j) => j)")
    assert len(numbers) == 12
    layers, dropout, act = _dim(page, "layers"), _dim(page, "dropout"), _dim(page, "act")
    for dim, real in ((layers, [2, 4, 2, 4, 2, 4]), (dropout, [0.0, 0.3, 0.0, 0.0, 0.4, 0.1])):
        slot = dim["tickvals"][dim["ticktext"].index("— inactive")]
        assert slot == dim["range"][0] and slot < min(real), dim           # below every real value, 0 included
        assert dim["values"][0::2] == [slot] * 6, dim                      # the cnn trials do not have it
        assert [round(v, 9) for v in dim["values"][1::2]] == real, dim    # the mlp trials' own values
    assert act["ticktext"][0] == "— inactive" and act["values"][0] == act["tickvals"][0], act
    ticks = page.locator("#parcoords .y-axis[data-label='dropout'] .tick text").all_text_contents()
    assert ticks[0] == "— inactive" and "0" in ticks, ticks
    # brushing the "— inactive" slot of `layers` keeps the trials that do not have it: the six cnn trials
    box = page.locator("#parcoords .y-axis[data-label='layers'] .brush-area").bounding_box()
    x = box["x"] + box["width"] / 2
    page.mouse.move(x, box["y"] + box["height"] - 2)
    page.mouse.down()
    page.mouse.move(x, box["y"] + box["height"] - 16, steps=5)
    page.mouse.up()
    page.wait_for_function("() => document.querySelector('#trial-count').textContent.startsWith('6 of')")
    # the table shows a dash for a parameter a trial does not have, and 0 for a real zero
    page.click("#clear-brush")
    page.wait_for_function("() => document.querySelector('#trial-count').textContent.startsWith('12 of')")
    assert _cell(page, 0, "p:layers") == "–" and _cell(page, 0, "p:dropout") == "–"
    assert _cell(page, 1, "p:dropout") == "0" and _cell(page, 1, "p:layers") == "2"
    assert _cell(page, 0, "p:kernel") == "3" and _cell(page, 1, "p:kernel") == "–"
    page.screenshot(path=str(ARTIFACTS / "cond-sweep-1400.png"), full_page=True)


ABSOLUTE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")
RELATIVE = re.compile(r"^(just now|\d+ (s|min|h|d) ago)$")


def test_times_durations_and_counts_read_as_text(page: Any, cond_server: Any) -> None:
    page.goto(cond_server.url + "/")
    page.wait_for_selector("body[data-ready='1']")
    times = page.locator("#sweeps time.ago")
    assert times.count() == 2
    for k in range(2):
        assert RELATIVE.match(times.nth(k).inner_text()), times.nth(k).inner_text()
        assert ABSOLUTE.match(times.nth(k).get_attribute("title")), times.nth(k).get_attribute("title")

    page.goto(cond_server.url + "/sweeps/cond")
    page.wait_for_selector("body[data-drawn='1']")
    header = page.inner_text("#sweep-header")
    assert "null" not in header and "undefined" not in header, header
    created = page.locator("#sweep-created time")
    assert RELATIVE.match(created.inner_text()) and ABSOLUTE.match(created.get_attribute("title"))
    durations = page.locator("#trials tbody td:nth-last-child(2)").all_inner_texts()
    assert durations and set(durations) == {"3 min 5 s"}, durations
    # event lists keep absolute times: a reader matches them against logs
    ev = page.locator("#events .ev > span.muted").first.inner_text()
    assert ABSOLUTE.match(ev), ev
    assert "null" not in page.inner_text("#importance-note")

    page.goto(cond_server.url + "/sweeps/cond/trials/3")
    page.wait_for_selector("#trial-curves[data-rendered]")
    started = page.locator("#trial-started time")
    assert started.inner_text() == "2 h ago" and ABSOLUTE.match(started.get_attribute("title"))   # 1 h 57 min
    meta = page.inner_text("#trial-header") if page.locator("#trial-header").count() else page.inner_text("main")
    assert "duration 3 min 5 s" in meta, meta
    assert ABSOLUTE.match(page.locator("#attempts tbody td:nth-child(3)").first.inner_text())


def test_a_big_sweep_draws_a_sample_says_so_and_filters_all_trials(page: Any, big_server: Any) -> None:
    page.goto(big_server.url + "/sweeps/big")
    page.wait_for_selector("body[data-shown='1']")
    note = page.inner_text("#parcoords-note")
    lines = int(page.get_attribute("#parcoords", "data-lines"))
    assert 1500 <= lines <= 1600, lines
    assert note.startswith(f"showing {lines:,} of ") and "filters apply to all" in note, note
    total = int(re.search(r"of ([\d,]+) trials", note).group(1).replace(",", ""))
    assert 2300 < total <= 2500   # every trial that ran (queued ones are not lines)
    assert page.inner_text("#trial-count") == "2,500 of 2,500 trials match"
    assert "trials 2,500" in page.inner_text("#sweep-header")
    page.wait_for_selector("#importance[data-rendered]")
    assert re.search(r"from 500 of 2,500 trials: the completed ones' final values \(1,\d{3} completed\)",
                     page.inner_text("#importance-note")), page.inner_text("#importance-note")
    # brushing filters every trial, not only the drawn ones
    box = page.locator("#parcoords .y-axis").last.locator(".brush-area").bounding_box()
    x = box["x"] + box["width"] / 2
    page.mouse.move(x, box["y"] + box["height"] * 0.5)
    page.mouse.down()
    page.mouse.move(x, box["y"] + box["height"] * 0.9, steps=5)
    page.mouse.up()
    page.wait_for_function("() => document.querySelector('#brush-note').style.display !== 'none'")
    shown = int(page.inner_text("#trial-count").split(" of ")[0].replace(",", ""))
    drawn_inside = int(page.get_attribute("#parcoords", "data-shown"))
    assert shown > drawn_inside > 0, (shown, drawn_inside)
    page.wait_for_selector("body[data-drawn='1']")
    # the history and parameter scatter draw at most 2,000 points and say so above the plot
    note = page.inner_text("#history-note")
    assert re.match(r"showing (1,9\d\d|2,0\d\d) of 2,500 trials", note), note
    assert page.evaluate("() => document.querySelector('#history').data.filter((t) => t.mode === 'markers')"
                         ".reduce((n, t) => n + t.x.length, 0)") <= 2100
    page.screenshot(path=str(ARTIFACTS / "big-sweep-1400.png"))


@pytest.mark.parametrize("path,shot", [
    ("/", "sweeps"), ("/sweeps/cond", "sweep"), ("/sweeps/cond/trials/3", "trial"),
    ("/sweeps/cond/compare?trials=2,3,5", "compare"),
])
def test_every_page_fits_a_phone_screen(browser: Any, cond_server: Any, path: str, shot: str) -> None:
    ctx, pg, errors = _page(browser, PHONE)
    try:
        pg.goto(cond_server.url + path)
        pg.wait_for_selector("body[data-ready='1']")
        if shot == "sweep":
            pg.wait_for_selector("body[data-drawn='1']")
        pg.wait_for_timeout(300)  # let Plotly's responsive resize settle
        width, inner = pg.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")
        assert width <= inner, f"{path}: the page is {width}px wide on a {inner}px screen"
        pg.screenshot(path=str(ARTIFACTS / f"cond-{shot}-390.png"), full_page=True)
    finally:
        ctx.close()
    assert not errors, errors
