"""A sweep a real `sweeplab sweep` ran with hostile names and values (HTML, `<script>`, quotes, unicode, a
300-character metric and parameter name, nested values, NaN and infinite objectives, a trial with no metrics),
read in headless Chromium at desktop and phone widths: nothing runs, everything reads as written, and no
page scrolls sideways (docs/dashboard.md). A long metric name widened its select, its card and the page to
2,700 px; a long metric name on a trial page widened the metrics list the same way."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from sweeplab.dashboard import create_app
from tests.dashboard.test_browser import CHROMIUM
from tests.dashboard.test_browser_pictures import PHONE, WIDE, _page

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")]

LONG = "val_loss_" + "L" * 300
NAME = "evil<img src=x onerror=alert(1)>/team \"q\" 'ü'"
TRAIN = f"""
def train(config, run):
    i = config["x"]
    if i == 3:
        return   # no metrics at all
    loss = [float("nan"), float("inf"), -0.0, 0.5, 2.0, 1e-300][i]
    for s in range(3):
        run.log({{"loss": loss, "<script>alert(2)</script>": 1.0, "ünï 🚀": 3.0, {LONG!r}: 4.0}}, step=s)
"""
SPEC = {   # written as JSON, which YAML reads
    "name": NAME, "function": "train.py:train", "method": "grid", "metric": {"name": "loss", "goal": "minimize"},
    "trial": {"retries": 0}, "preload": False, "workers": 1,   # in order: trials 0 and 1 fail, 2 completes
    "parameters": {"x": {"values": [0, 1, 2, 3, 4, 5]},
                   "<b>html</b>": {"values": ["<script>alert('v')</script>", "p" * 300]},
                   "P" * 300: {"value": {"nested": [1, {"deep": "<i>x</i>"}]}}},
}

# Unicode's bidirectional controls in a sweep's, a parameter's and a metric's name and in a value: obeyed, the
# right-to-left override shows "report\u202efdp.exe" as "reportexe.pdf" (and the rest of its line backwards)
BIDI = "\u202e\u2066\u200f\u061c"
BIDI_NAME = "report\u202efdp.exe"
BIDI_TRAIN = """
def train(config, run):
    run.log({"acc\u202edrow": 0.5, "loss": 1.0}, step=0)
    run.log({"acc\u202edrow": 0.7, "loss": 0.5}, step=1)
    return {"loss": 0.5}
"""
BIDI_SPEC = {"name": BIDI_NAME, "function": "bidi.py:train", "method": "grid", "preload": False,
             "metric": {"name": "loss", "goal": "minimize"},
             "parameters": {"opt\u202eim": {"values": ["ad\u202emaw", "sg\u200fd\u061c"]}}}


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory: pytest.TempPathFactory, live_server_for: Any) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("hostile")
    (root / "train.py").write_text(TRAIN)
    (root / "sweep.yaml").write_text(json.dumps(SPEC))
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", "store"], cwd=root,
                        capture_output=True, text=True, timeout=120)
    assert "trials: " in cp.stdout, (cp.stdout, cp.stderr)
    (root / "bidi.py").write_text(BIDI_TRAIN)
    (root / "bidi.yaml").write_text(json.dumps(BIDI_SPEC))
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "bidi.yaml", "--store", "store"], cwd=root,
                        capture_output=True, text=True, timeout=120)
    assert "trials: " in cp.stdout, (cp.stdout, cp.stderr)
    with live_server_for(create_app(root / "store")) as srv:
        yield srv


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["wide", "phone"])
def test_hostile_names_read_as_written_and_no_page_scrolls_sideways(browser: Any, hostile_server: Any,
                                                                    viewport: dict[str, int]) -> None:
    ctx, pg, errors = _page(browser, viewport)
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    q = quote(NAME, safe="")
    try:
        for path in ("/", f"/sweeps/{q}", f"/sweeps/{q}/trials/2", f"/sweeps/{q}/trials/3",
                     f"/sweeps/{q}/compare?trials=0,2,4"):
            pg.goto(hostile_server.url + path)
            pg.wait_for_selector("body[data-ready='1']")
            if path == f"/sweeps/{q}":
                pg.wait_for_selector("body[data-drawn='1']")
                pg.wait_for_selector("#curve-key option", state="attached")
                assert "<b>html</b>" in pg.inner_text("#main")
            assert NAME in pg.inner_text("body"), path
            pg.wait_for_timeout(300)   # Plotly's responsive resize
            width, inner = pg.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")
            assert width <= inner, f"{path}: the page is {width}px wide on a {inner}px screen"
            assert pg.locator("img").count() == 0 and pg.locator("#main script, #main b i").count() == 0
    finally:
        ctx.close()
    assert not dialogs and not errors, (dialogs, errors)


def test_a_metric_with_a_long_name_has_curves(hostile_server: Any) -> None:
    """A 309-character metric name, logged by the sweep, was refused by /curves as "query parameter 'key' (a
    metric name) is required" (it took at most 200 characters): the learning curves of that metric failed."""
    import urllib.request

    url = (f"{hostile_server.url}/api/sweeps/{quote(NAME, safe='')}/curves?"
           f"key={quote(LONG, safe='')}&trials=2,4")
    with urllib.request.urlopen(url, timeout=60) as r:
        body = json.loads(r.read())
    assert [(t["number"], t["values"]) for t in body["trials"]] == [(2, [4.0, 4.0, 4.0]), (4, [4.0, 4.0, 4.0])]


@pytest.mark.parametrize("path", ["/sweeps/%C3", "/sweeps/%C3/trials/1", "/sweeps/%C3/compare?trials=1,2"])
def test_an_address_cut_inside_a_percent_escape_says_so(hostile_server: Any, page: Any, path: str) -> None:
    """`/sweeps/%C3` (a link to sweep "ü", %C3%BC, cut short): decodeURIComponent threw before the page started,
    which stayed "Loading…" for ever with an uncaught URIError."""
    page.goto(hostile_server.url + path)
    page.wait_for_selector("body[data-ready='1']")
    assert "is not a valid percent-encoded name" in page.inner_text("#main .error")


def test_bidirectional_controls_in_names_and_values_are_shown_as_escapes_not_obeyed(hostile_server: Any,
                                                                                   page: Any) -> None:
    """A sweep, a parameter, a metric and a value named with U+202E (right-to-left override), an isolate, a
    mark: the dashboard obeyed them, so a name showed backwards and reordered its line. Every text the pages
    show (HTML, SVG charts, tooltips, the tab's title) now has them as escapes, as the command line prints
    them; the links and the API still name the sweep as it is."""
    q = quote(BIDI_NAME, safe="")
    shown_text = """() => { const out = [document.title]; const w = document.createTreeWalker(document.body, 4);
        while (w.nextNode()) out.push(w.currentNode.nodeValue);
        for (const e of document.querySelectorAll('[title]')) out.push(e.getAttribute('title'));
        return out.join('\\n'); }"""
    for path, ready in (("/", None), (f"/sweeps/{q}", "body[data-drawn='1']"), (f"/sweeps/{q}/trials/0", None),
                        (f"/sweeps/{q}/compare?trials=0,1", None)):
        page.goto(hostile_server.url + path)
        page.wait_for_selector("body[data-ready='1']")
        if ready:
            page.wait_for_selector(ready)
            page.wait_for_selector("#curve-key option", state="attached")
        page.wait_for_timeout(300)   # Plotly draws after the page is ready
        text = page.evaluate(shown_text)
        assert not any(ch in text for ch in BIDI), (path, [ch for ch in BIDI if ch in text])
        assert "report\\u202efdp.exe" in text, path
        if path != "/":
            assert "report\\u202efdp.exe" in page.title(), page.title()
        if path.endswith("/trials/0"):
            assert "acc\\u202edrow" in text and "opt\\u202eim" in text and "ad\\u202emaw" in text, text
    page.goto(hostile_server.url + f"/sweeps/{q}")
    page.wait_for_selector("body[data-drawn='1']")
    assert "ad\\u202emaw" in page.evaluate(shown_text) and "sg\\u200fd\\u061c" in page.evaluate(shown_text)


def test_a_stored_negative_zero_shows_its_sign(hostile_server: Any, page: Any) -> None:
    """Trial 2 reported a loss of -0.0: its page showed 0 (JavaScript's String(-0) is "0"), where `sweeplab
    status` shows -0."""
    page.goto(hostile_server.url + f"/sweeps/{quote(NAME, safe='')}/trials/2")
    page.wait_for_selector("body[data-ready='1']")
    assert page.inner_text("#trial-value") == "-0"
