"""What the dashboard shows against the store's truth, in headless Chromium, on a store written by real sweeps
(the CLI, worker processes): names with markup read as written in every plot, a curve of one point and a
point between NaN gaps are drawn, parameter importance names what it left out, the table's text filter finds
what the table shows and a column holding numbers and text sorts the numbers in order.

The store holds two sweeps: `<i>ünï</i> & sweep` (one objective; parameter `<b>lr</b>`, a categorical value
that is an HTML link, a conditional `momentum`, a constant `epochs`, a metric `<b>acc</b>%{y}`, trials that
log one point, NaN gaps or fail with markup in their error) and `<b>mo</b>` (two objectives, one named
`<b>err</b>`, a parameter `batch` whose values are 64, 8 and "auto").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.dashboard.test_browser import CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="needs Debian's chromium at /usr/bin/chromium (bash .ci/install-browser.sh)"),
]

SWEEP = "<i>ünï</i> & sweep"
LR, ACC, LINK = "<b>lr</b>", "<b>acc</b>%{y}", "<a href='https://example.com/'>sgd</a>"
TRAIN = '''
def train(config, run):
    kind, lr = config["kind"], config["<b>lr</b>"]
    if kind == "fail":
        run.log({"loss": 1.0}, step=0)
        raise RuntimeError("<b>bold</b> %{x} boom")
    if kind == "one":        # a single point
        run.log({"loss": 0.5, "<b>acc</b>%{y}": 0.7}, step=0)
        return {"loss": 0.5 + lr}
    if kind == "gaps":       # 0.6 sits between two NaN points
        for s, v in enumerate([1.0, float("nan"), 0.6, float("nan"), 0.2]):
            run.log({"loss": v, "<b>acc</b>%{y}": s / 5}, step=s)
        return {"loss": 0.2 + lr}
    for s in range(3):
        run.log({"loss": 1.0 / (s + 1) + lr, "<b>acc</b>%{y}": s / 3}, step=s)
    run.log({f"m{k:02d}": k for k in range(13)}, step=2)   # 15 metrics in all: more than the trial page draws
    return {"loss": 1.0 / 3 + lr}


def two(config, run):
    x = config["x"]
    run.log({"<b>err</b>": x, "size": 1 - x}, step=0)
    return {"<b>err</b>": x * x, "size": (1 - x) ** 2}
'''
SPEC = '''
name: "<i>ünï</i> & sweep"
function: train.py:train
method: grid
metric: {name: loss, goal: minimize}
parameters:
  "<b>lr</b>": {values: [0.0001, 0.1]}
  kind: {values: [ok, one, gaps, fail]}
  opt:
    values: ["adam", "<a href='https://example.com/'>sgd</a>"]
    when:
      "<a href='https://example.com/'>sgd</a>":
        momentum: {values: [0.9]}
  epochs: {value: 3}
'''
MO_SPEC = '''
name: "<b>mo</b>"
function: train.py:two
method: grid
metric: [{name: "<b>err</b>", goal: minimize}, {name: size, goal: minimize}]
parameters:
  x: {values: [0.1, 0.5, 0.9]}
  batch: {values: [64, "auto", 8]}
'''


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory, live_server_for: Any) -> Iterator[tuple[Any, dict[str, Any]]]:
    """The two sweeps, run by the CLI into one store, served; with `sweeplab status --json` of the first."""
    from sweeplab.dashboard import create_app

    project = tmp_path_factory.mktemp("truth")
    (project / "train.py").write_text(TRAIN)
    (project / "sweep.yaml").write_text(SPEC)
    (project / "mo.yaml").write_text(MO_SPEC)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    store = str(project / "store")
    for spec in ("sweep.yaml", "mo.yaml"):
        done = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", spec, "-q", "--workers", "2",
                               "--store", store], cwd=project, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    status = subprocess.run([sys.executable, "-m", "sweeplab", "status", SWEEP, "--json", "--store", store],
                            cwd=project, env=env, capture_output=True, text=True, timeout=120, check=True)
    with live_server_for(create_app(project / "store")) as srv:
        yield srv, json.loads(status.stdout)


@pytest.fixture(scope="module")
def shared(browser: Any, truth: Any) -> Iterator[Any]:
    """One page for the module (opening a sweep page costs a second or more): each test goes where it needs
    to and resets the table's filter and selection it uses. It asks for `truth` so that it closes before the
    server stops: a live page polling a stopped server logs ERR_CONNECTION_REFUSED (it failed the teardown)."""
    from tests.dashboard.test_browser_pictures import WIDE, _page

    ctx, pg, errors = _page(browser, WIDE)
    yield pg
    ctx.close()
    assert not errors, errors


def _open(page: Any, srv: Any, name: str) -> None:
    """The sweep's page, every chart drawn (loaded only if the page is not on it already)."""
    url = f"{srv.url}/sweeps/{quote(name, safe='')}"
    if page.url != url:
        page.goto(url)
    page.wait_for_selector("body[data-drawn='1']")
    page.fill("#trial-filter", "")


def _choose(page: Any, select: str, value: str, drawn: str) -> None:
    """Pick `value` in a <select> and wait for the plot `drawn` to be redrawn."""
    page.evaluate("([s, v, d]) => { document.querySelector(d).dataset.rendered = '';"
                  " const e = document.querySelector(s); e.value = v; e.dispatchEvent(new Event('change')); }",
                  [select, value, drawn])
    page.wait_for_function("(d) => document.querySelector(d).dataset.rendered", arg=drawn)


# The text a plot shows (titles, ticks, legend, hover labels), and what it made of markup.
PLOT_TEXT = """(sel) => { const gd = document.querySelector(sel);
  return { text: [...gd.querySelectorAll('svg text')].map((t) => t.textContent),
           bold: gd.querySelectorAll('svg tspan[style*="bold"]').length,
           links: gd.querySelectorAll('svg a').length }; }"""


def _plot_text(page: Any, sel: str) -> dict[str, Any]:
    return page.evaluate(PLOT_TEXT, sel)


def _hover(page: Any, sel: str, trace: int = 0, point: int = 0) -> str:
    """The hover label Plotly shows for one point."""
    return page.evaluate("""([sel, c, p]) => { const gd = document.querySelector(sel);
        Plotly.Fx.unhover(gd);
        Plotly.Fx.hover(gd, [{ curveNumber: c, pointNumber: p }]);
        const t = [...gd.querySelectorAll('.hoverlayer text')].map((n) => n.textContent).join(' | ');
        return { t, bold: gd.querySelectorAll('.hoverlayer tspan[style*="bold"]').length }; }""", [sel, trace, point])


def test_importance_names_the_parameters_it_left_out(shared: Any, truth: Any) -> None:
    srv, _ = truth
    page = shared
    _open(page, srv, SWEEP)
    page.wait_for_selector("#importance[data-rendered]")
    note = page.inner_text("#importance-skipped")
    assert "epochs (constant)" in note and "momentum (missing in some trials" in note, note
    ranked = page.evaluate("() => document.querySelector('#importance').data[0].y")
    assert not any(y.startswith(("epochs", "momentum")) for y in ranked), ranked


def test_a_curve_of_one_point_and_a_point_between_gaps_are_drawn(shared: Any, truth: Any) -> None:
    srv, status = truth
    page = shared
    one = next(t["number"] for t in status["trials"] if t["params"]["kind"] == "one")
    gaps = next(t["number"] for t in status["trials"] if t["params"]["kind"] == "gaps")
    _open(page, srv, SWEEP)
    page.click("text=clear selection")
    for n in (one, gaps):
        page.click(f"#trials tr[data-number='{n}'] input")
    page.wait_for_function("() => (document.querySelector('#curves').data || []).length === 2")
    # every point that has no neighbour to draw a line to is a visible marker
    drawn = page.evaluate("""() => [...document.querySelectorAll('#curves .scatterlayer .trace')].map((tr) =>
        [...tr.querySelectorAll('path.point')].filter((p) => p.getBBox().width > 0).length)""")
    data = page.evaluate("() => document.querySelector('#curves').data.map((t) => [t.name, t.y])")
    assert sorted(drawn) == [1, 3], (drawn, data)   # 0.5 alone; 1.0, 0.6 and 0.2 around two gaps
    lone = {name: ys for name, ys in data}
    assert [0.5] in lone.values() and [1.0, None, 0.6, None, 0.2] in lone.values(), lone


def test_the_text_filter_finds_what_the_table_shows(shared: Any, truth: Any) -> None:
    srv, status = truth
    page = shared
    _open(page, srv, SWEEP)
    page.fill("#trial-filter", "1e-4")     # how the table shows 0.0001
    page.wait_for_function("() => !document.querySelector('#trial-count').innerText.startsWith('16 of')")
    small = sorted(t["number"] for t in status["trials"] if t["params"][LR] == 0.0001)
    got = sorted(int(n) for n in page.eval_on_selector_all("#trials tbody tr", "rs => rs.map(r => r.dataset.number)"))
    assert got == small, got


def _brush(page: Any, label: str, top: float, bottom: float) -> str:
    """Drag along the parallel-coordinates axis `label` from `top` to `bottom` (fractions of its height from
    the top); the table's "brushed:" note."""
    box = page.locator(f"#parcoords .y-axis[data-label=\"{label}\"] .brush-area").bounding_box()
    x = box["x"] + box["width"] / 2
    page.mouse.move(x, box["y"] + box["height"] * top)
    page.mouse.down()
    page.mouse.move(x, box["y"] + box["height"] * bottom, steps=6)
    page.mouse.up()
    page.wait_for_function("() => document.querySelector('#brush-note').style.display !== 'none'")
    return str(page.inner_text("#brush-note"))


def test_a_brushed_range_is_named_in_the_parameters_units(shared: Any, truth: Any) -> None:
    """The note says which values a brushed axis keeps as the axis shows them: a log axis's bounds as values
    (not their log10), a categorical axis's categories (not their positions), the "inactive" slot."""
    srv, status = truth
    page = shared
    _open(page, srv, SWEEP)
    page.click("#clear-brush")
    note = _brush(page, f"{LR} (log)", 0.0, 0.3)
    lo, hi = (float(v) for v in re.search(rf"{re.escape(LR)} ∈ \[([-\d.e]+), ([-\d.e]+)\]", note).groups())
    assert 1e-4 < lo < 0.1 and hi == 0.1, note
    page.click("#clear-brush")
    kinds = set(re.search(r"kind ∈ \{([^}]*)\}", _brush(page, "kind", 0.55, 1.0)).group(1).split(", "))
    assert kinds and kinds < {"fail", "gaps", "ok", "one"}, kinds
    shown = {int(n) for n in page.eval_on_selector_all("#trials tbody tr", "rs => rs.map(r => r.dataset.number)")}
    assert shown == {t["number"] for t in status["trials"] if t["params"]["kind"] in kinds}
    page.click("#clear-brush")
    ticks = page.locator("#parcoords .y-axis[data-label='momentum'] .tick text").all_text_contents()
    assert ticks == ["— inactive", "0.9"], ticks   # its one value and the slot of trials without it
    assert _brush(page, "momentum", 0.93, 1.0) == "brushed: momentum inactive"
    page.click("#clear-brush")


def test_the_trial_page_names_the_metrics_it_does_not_draw(shared: Any, truth: Any) -> None:
    srv, status = truth
    page = shared
    ok = next(t["number"] for t in status["trials"] if t["params"]["kind"] == "ok")
    page.goto(f"{srv.url}/sweeps/{quote(SWEEP, safe='')}/trials/{ok}")
    page.wait_for_selector("#trial-curves[data-rendered]")
    assert page.locator("#trial-curves .plot").count() == 12
    assert page.inner_text("#trial-curves-note") == "12 of 15 metrics drawn; not drawn: m10, m11, m12"


def test_markup_in_names_and_values_reads_as_written_in_every_plot(shared: Any, truth: Any) -> None:
    srv, _ = truth
    page = shared
    _open(page, srv, SWEEP)
    assert page.inner_text("#sweep-header h1").startswith(SWEEP)
    _choose(page, "#scatter-param", LR, "#scatter")
    _choose(page, "#curve-key", ACC, "#curves")
    shown = {sel: _plot_text(page, sel) for sel in ("#history", "#scatter", "#importance", "#curves")}
    for sel, got in shown.items():
        assert (got["bold"], got["links"]) == (0, 0), (sel, got)
    assert LR in shown["#scatter"]["text"], shown["#scatter"]["text"]
    assert ACC in shown["#curves"]["text"], shown["#curves"]["text"]
    assert any(t.startswith(LR) for t in shown["#importance"]["text"]), shown["#importance"]["text"]
    hover = _hover(page, "#scatter")
    assert f"{LR}=" in hover["t"] and not hover["bold"], hover
    # a categorical value that is a link: a tick label and a hover label, as written
    _choose(page, "#scatter-param", "opt", "#scatter")
    got = _plot_text(page, "#scatter")
    assert LINK in got["text"] and got["links"] == 0, got
    k, j = page.evaluate("() => document.querySelector('#scatter').data.map((t, k) => [k, t.x.findIndex((x) => "
                         "String(x).includes('example'))]).find(([, j]) => j >= 0)")
    assert LINK in _hover(page, "#scatter", k, j)["t"]

    # a failed trial's end marker: its reason (with markup and a %{x}) is the hover label
    failed = page.evaluate("() => { const v = document.querySelector('#trials'); return [...v.querySelectorAll("
                           "'tbody tr')].find((r) => r.innerText.includes('failed')).dataset.number; }")
    _choose(page, "#curve-key", "loss", "#curves")   # (the failed trial logged no ACC)
    page.click("text=clear selection")
    page.click(f"#trials tr[data-number='{failed}'] input")
    page.wait_for_function("() => document.querySelector('#curves').data && document.querySelector('#curves')"
                           ".data.some((t) => t.mode === 'markers')")
    marker = page.evaluate("() => document.querySelector('#curves').data.findIndex((t) => t.mode === 'markers')")
    hover = _hover(page, "#curves", marker)
    assert "<b>bold</b> %{x} boom" in hover["t"] and not hover["bold"], hover

    # the trial page's plot of that metric, titled by its name
    page.goto(f"{srv.url}/sweeps/{quote(SWEEP, safe='')}/trials/0")
    page.wait_for_selector("#trial-curves[data-rendered]")
    got = _plot_text(page, "#trial-curves")
    assert ACC in got["text"] and got["bold"] == 0, got

    # two objectives, one named with markup: the Pareto card's axis titles and hover labels
    _open(page, srv, "<b>mo</b>")
    page.wait_for_selector("#card-pareto[data-rendered]")
    got = _plot_text(page, "#card-pareto")
    assert "<b>err</b> (min ↓)" in got["text"] and got["bold"] == 0, got
    front = page.evaluate("() => document.querySelector('#card-pareto').data.findIndex((t) => t.mode === 'markers')")
    hover = _hover(page, "#card-pareto", front)
    assert "<b>err</b>=" in hover["t"] and not hover["bold"], hover
    # the importance bars are of the first objective, and the card says so
    assert page.inner_text("#importance-basis-text").startswith("for <b>err</b> (the first objective), from 9 of 9")


def test_a_column_of_numbers_and_text_sorts_the_numbers_in_order(shared: Any, truth: Any) -> None:
    srv, _ = truth
    page = shared
    _open(page, srv, "<b>mo</b>")
    page.click("#trials th[data-key='p:batch']")
    cells = page.eval_on_selector_all(
        "#trials tbody tr", "rs => rs.map(r => r.children[[...document.querySelectorAll('#trials thead th')]"
        ".findIndex((th) => th.dataset.key === 'p:batch')].innerText)")
    assert cells == ["8"] * 3 + ["64"] * 3 + ["auto"] * 3, cells
    page.click("#trials th[data-key='p:batch']")   # descending: the reverse
    cells = page.eval_on_selector_all(
        "#trials tbody tr", "rs => rs.map(r => r.children[[...document.querySelectorAll('#trials thead th')]"
        ".findIndex((th) => th.dataset.key === 'p:batch')].innerText)")
    assert cells == ["auto"] * 3 + ["64"] * 3 + ["8"] * 3, cells
