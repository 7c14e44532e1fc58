"""Pictures that must not mislead, checked in headless Chromium on an ASHA sweep with failed, pruned and
diverged trials (tests/dashboard/conftest.py `make_asha_store`). Screenshots at 1400x900 and 390x844 land
in test-artifacts/dashboard/ for a person to look at."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.dashboard.test_browser import ARTIFACTS, CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="needs Debian's chromium at /usr/bin/chromium (bash .ci/install-browser.sh)"),
]
WIDE, PHONE = {"width": 1400, "height": 900}, {"width": 390, "height": 844}


def _page(browser: Any, viewport: dict[str, int]) -> tuple[Any, Any, list[str]]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    ctx = browser.new_context(viewport=viewport)
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.set_default_timeout(30_000)
    return ctx, pg, errors


def _numbers(texts: list[str]) -> list[float]:
    return [float(t.replace("\u2212", "-").replace("≥ ", "")) for t in texts if t.strip()]


def _open_sweep(page: Any, server: Any) -> None:
    page.goto(server.url + "/sweeps/asha")
    page.wait_for_selector("#parcoords[data-rendered='1']")
    page.wait_for_selector("#history[data-rendered]")
    page.wait_for_selector("#importance[data-rendered]")


def test_constant_parameters_are_header_facts_not_axes(page: Any, asha_server: Any) -> None:
    _open_sweep(page, asha_server)
    labels = page.locator("#parcoords .axis-title").all_text_contents()
    assert not any(t.startswith("epochs") for t in labels), labels
    assert "epochs = 30" in page.inner_text("#constants")
    options = page.locator("#scatter-param option").all_inner_texts()
    assert "epochs" not in options and page.input_value("#scatter-param") == "lr", options
    # the conditional parameter is an axis whose gaps are named, not zeros
    assert "momentum" in labels, labels


def test_failed_and_pruned_trials_show_and_outliers_do_not_flatten_the_axis(page: Any, asha_server: Any) -> None:
    _open_sweep(page, asha_server)
    # parallel coordinates: every trial that ran is a line; a state axis tells them apart
    labels = page.locator("#parcoords .axis-title").all_text_contents()
    assert "state" in labels
    ticks = page.locator("#parcoords .y-axis").nth(labels.index("state")).locator(".tick text").all_text_contents()
    assert {"completed", "pruned", "failed", "stopped by rule"} <= set(ticks), ticks
    assert page.get_attribute("#parcoords", "data-lines") == "22"
    # history: one trace per state, the failed trial included (it has no value: drawn on the bottom edge)
    traces = page.evaluate("() => document.querySelector('#history').data.map((t) => [t.name, t.yaxis || 'y'])")
    assert {("completed", "y"), ("stopped by rule", "y"), ("failed (no value)", "y2"),
            ("pruned (no value)", "y2")} <= {tuple(t) for t in traces}, traces
    # trials without a value sit on their own strip, labelled, never at the "good" end of the metric axis
    assert page.text_content("#history .y2tick text") == "no value"
    # the 6.4e12 value is pinned to the edge: ticks are ordinary numbers, increasing, no SI "T"
    yt = page.locator("#history .ytick text").all_text_contents()
    assert yt and not any("T" in t for t in yt), yt
    ys = _numbers(yt)
    assert ys == sorted(ys) and max(ys) < 100, ys
    assert "1 outlying value pinned to the edge" in page.inner_text("#history-note")   # said above the plot
    # a log-scale toggle on the metric axis
    page.click("#log-history")
    page.wait_for_function("() => document.querySelector('#history').layout.yaxis.type === 'log'")
    page.screenshot(path=str(ARTIFACTS / "asha-sweep-1400.png"), full_page=True)


def test_importance_states_its_basis_and_uncertainty(page: Any, asha_server: Any) -> None:
    _open_sweep(page, asha_server)
    assert page.get_attribute("#importance", "data-basis") == "rung"
    note = page.inner_text("#importance-note")
    assert "from 11 of 22 trials (8 pruned, 3 completed), each at step 3" in note, note
    assert "only 11 trials: too few to rank parameters reliably" in note
    assert page.locator("#importance .errorbar").count() >= 1   # the bootstrap spread is drawn
    page.select_option("#importance-basis", "final")
    page.wait_for_selector("#importance[data-basis='final']")
    assert "from 3 of 22 trials: the completed ones' final values" in page.inner_text("#importance-note")


def test_sweeps_list_shows_backend_and_the_whole_end_reason(page: Any, asha_server: Any) -> None:
    page.goto(asha_server.url + "/")
    page.wait_for_selector("body[data-ready='1']")
    row = page.locator("#sweeps tr[data-sweep='asha']")
    assert "ray · 10.0.0.5:6379" in row.inner_text()
    cell = row.locator("td.reason")
    assert "trial budget was" in cell.inner_text()
    box = cell.bounding_box()
    assert box["x"] + box["width"] <= 1400
    assert cell.evaluate("(e) => e.scrollWidth <= e.clientWidth + 1")
    assert re.search(r"\d+ (s|min|h|d) ago", row.inner_text()), row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "asha-sweeps-1400.png"), full_page=True)


def test_trial_profile_is_formatted_with_units(page: Any, asha_server: Any) -> None:
    page.goto(asha_server.url + "/sweeps/asha/trials/17")
    page.wait_for_selector("#trial-curves[data-rendered]")
    prof = page.inner_text("#profile")
    assert "rss_peak" not in prof and "408674304" not in prof, prof
    assert "peak RSS" in prof and "389.7 MB" in prof
    assert "18.3 %" in prof and "12.3 ms" in prof and "5312/s" in prof, prof
    page.screenshot(path=str(ARTIFACTS / "asha-trial-1400.png"), full_page=True)


@pytest.mark.parametrize("path,ready,shot", [
    ("/", "body[data-ready='1']", "sweeps"),
    ("/sweeps/asha", "#parcoords[data-rendered='1']", "sweep"),
    ("/sweeps/asha/trials/17", "#trial-curves[data-rendered]", "trial"),
])
def test_pages_fit_a_phone_screen(browser: Any, asha_server: Any, path: str, ready: str, shot: str) -> None:
    ctx, pg, errors = _page(browser, PHONE)
    try:
        pg.goto(asha_server.url + path)
        pg.wait_for_selector(ready)
        pg.wait_for_timeout(300)  # let Plotly's responsive resize settle
        width = pg.evaluate("() => document.documentElement.scrollWidth")
        assert width <= PHONE["width"] + 1, f"{path}: page is {width}px wide on a 390px screen"
        pg.screenshot(path=str(ARTIFACTS / f"asha-{shot}-390.png"), full_page=True)
    finally:
        ctx.close()
    assert not errors, errors


def test_compare_trials_side_by_side_with_differences_and_overlaid_curves(browser: Any, asha_server: Any) -> None:
    ctx, page, errors = _page(browser, WIDE)
    try:
        page.goto(asha_server.url + "/sweeps/asha")
        page.wait_for_selector("#trials tbody tr")
        page.click("text=clear selection")
        assert page.get_attribute("#compare-link", "aria-disabled") == "true"
        for n in (5, 17, 18):
            page.check(f"#trials tr[data-number='{n}'] input[type=checkbox]")
        page.click("#compare-link")
        page.wait_for_url(re.compile(r"/sweeps/asha/compare\?trials=5,17,18$"))
        page.wait_for_selector("#compare-curves[data-rendered='3']")
        heads = page.locator(".compare-table thead th").all_inner_texts()
        assert [h.strip() for h in heads[1:]] == ["trial 5", "trial 17", "trial 18"], heads
        row = lambda key: page.locator(f".compare-table tr[data-key='{key}']")  # noqa: E731
        assert "diff" in row("lr").get_attribute("class") and "diff" in row("optimizer").get_attribute("class")
        assert "diff" not in (row("epochs").get_attribute("class") or "")
        cells = row("momentum").locator("td").all_inner_texts()
        assert cells[2] == "not set" and cells[0] != "not set" and cells[0] != "0", cells  # a gap, not a zero
        names = page.evaluate("() => document.querySelector('#compare-curves').data.map((t) => t.name)")
        assert names == ["#5 pruned", "#17 completed", "#18 completed"], names
        page.screenshot(path=str(ARTIFACTS / "asha-compare-1400.png"), full_page=True)
        page.check("#only-diff")
        assert row("epochs").count() == 0 and row("lr").count() == 1
        page.set_viewport_size(PHONE)
        page.wait_for_timeout(300)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"] + 1
        page.screenshot(path=str(ARTIFACTS / "asha-compare-390.png"), full_page=True)
    finally:
        ctx.close()
    assert not errors, errors


def test_download_the_filtered_table_as_csv(page: Any, asha_server: Any) -> None:
    import csv

    page.goto(asha_server.url + "/sweeps/asha")
    page.wait_for_selector("#trials tbody tr")
    page.select_option("#state-filter", "pruned")
    with page.expect_download() as dl:
        page.click("#download-csv")
    assert dl.value.suggested_filename == "asha-trials.csv"
    rows = list(csv.DictReader(open(dl.value.path(), newline="")))
    assert len(rows) == 17 and {r["state"] for r in rows} == {"pruned"}
    assert {"number", "state", "value", "lr", "momentum", "optimizer", "epochs", "reason", "started"} <= set(rows[0])
    by_number = {int(r["number"]): r for r in rows}
    assert by_number[0]["momentum"] == "" and by_number[1]["momentum"] == "0.644"   # a gap, not a zero
    assert float(by_number[0]["lr"]) > 0 and by_number[0]["value"] == ""
    assert by_number[0]["reason"].startswith("ASHA: rung 1")


def test_custom_charts_scatter_and_grouped_curves_persist_in_the_url(page: Any, asha_server: Any) -> None:
    _open_sweep(page, asha_server)
    page.wait_for_function("() => document.querySelector('#chart-a').options.length > 0")
    page.select_option("#chart-kind", "scatter")
    page.select_option("#chart-a", "value")
    page.select_option("#chart-b", "p:lr")
    page.click("#add-chart")
    page.wait_for_selector("#custom-0[data-rendered]")
    names = page.evaluate("() => document.querySelector('#custom-0').data.map((t) => t.name)")
    assert {"completed", "stopped by rule"} <= set(names), names
    page.select_option("#chart-kind", "curves")
    page.select_option("#chart-a", "val_loss")
    page.select_option("#chart-b", "p:momentum")
    page.click("#add-chart")
    page.wait_for_selector("#custom-1[data-rendered]")
    assert "charts=" in page.url
    page.goto(page.url)   # a link reproduces the view
    page.wait_for_selector("#custom-1[data-rendered]")
    titles = page.locator(".custom-chart h2").all_inner_texts()
    assert len(titles) == 2 and "val_loss curves by momentum" in titles[1], titles
    groups = page.evaluate("""() => document.querySelector('#custom-1').data
        .filter((t) => t.meta && t.meta.group).map((t) => [t.meta.group, t.meta.trials])""")
    by = dict(groups)
    # the conditional parameter's gap is a group; its 11 values fall in 3 equal-count bins
    assert by["not set"] == 11 and sum(by.values()) == 22 and len(by) == 4, by
    fills = page.evaluate("() => document.querySelector('#custom-1').data.filter((t) => t.fill === 'tonexty').length")
    assert fills == len(by)   # a spread band per group
    page.screenshot(path=str(ARTIFACTS / "asha-custom-charts-1400.png"), full_page=True)
    page.locator(".remove-chart").first.click()
    assert page.locator(".custom-chart").count() == 1 and "scatter" not in page.url
