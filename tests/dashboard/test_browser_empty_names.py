"""The page with a metric named "" (the sweep's objective) and parameters named "" and "state": the curves
card, the compare page and a grouped custom chart draw them. The page's checks were falsy (`!this.key`), so a
metric named "" read as "no metrics logged", and grouping by a parameter named "" or "state" meant none."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sweeplab.dashboard import create_app
from tests.dashboard.test_browser import CHROMIUM
from tests.dashboard.test_hostile_names_api import _store

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")]


@pytest.fixture(scope="module")
def empty_server(tmp_path_factory: pytest.TempPathFactory, live_server_for: Any) -> Iterator[Any]:
    root = _store(tmp_path_factory.mktemp("empty") / "store", "s", ["", "loss"], ["", "state"])
    with live_server_for(create_app(root)) as srv:
        yield srv


def _names(page: Any, plot: str) -> list[str]:
    return sorted(page.evaluate(f"() => document.querySelector('{plot}').data.filter((t) => t.name)"
                                ".map((t) => t.name)"))


def test_a_metric_named_empty_is_plotted_on_the_sweep_and_compare_pages(page: Any, empty_server: Any) -> None:
    page.goto(empty_server.url + "/sweeps/s")
    page.wait_for_selector("#curves[data-rendered]")
    assert page.eval_on_selector("#curve-key", "s => s.value") == ""
    assert page.locator("#curves .placeholder").count() == 0
    assert len(_names(page, "#curves")) == 3
    page.goto(empty_server.url + "/sweeps/s/compare?trials=0,2")
    page.wait_for_selector("#compare-curves[data-rendered]")
    assert page.eval_on_selector("#compare-key", "s => s.value") == ""
    assert page.eval_on_selector("#compare-curves", "p => p.dataset.rendered") == "2"


@pytest.mark.parametrize("param", ["", "state"], ids=["empty", "state"])
def test_curves_grouped_by_a_parameter_named_empty_or_state_group_by_it(page: Any, empty_server: Any,
                                                                       param: str) -> None:
    page.goto(empty_server.url + "/sweeps/s")
    page.wait_for_selector("#chart-a option", state="attached")
    page.select_option("#chart-kind", "curves")
    page.select_option("#chart-a", "loss")
    page.select_option("#chart-b", f"p:{param}")
    page.click("#add-chart")
    page.wait_for_selector("#custom-0[data-rendered]")
    groups = page.evaluate("""() => document.querySelector('#custom-0').data
        .filter((t) => t.meta && t.meta.group).map((t) => t.meta.group)""")
    # the parameter's three values (0.1 + j, 0.2 + j, 0.3 + j), not "all" nor the trials' state
    assert len(groups) == 3 and "all" not in groups and "completed" not in groups, groups
    page.goto(page.url)   # the chart's URL reproduces it
    page.wait_for_selector("#custom-0[data-rendered]")
    assert len(page.evaluate("""() => document.querySelector('#custom-0').data
        .filter((t) => t.meta && t.meta.group)""")) == 3


def test_a_trial_of_many_metrics_names_the_first_20_left_undrawn(page: Any, tmp_path: Any,
                                                                  live_server_for: Any) -> None:
    """The note under a trial's curves listed every metric not drawn: for 100,000 metrics, megabytes of text."""
    root = _store(tmp_path / "store", "s", [f"k{j:03d}" for j in range(80)], ["lr"])
    with live_server_for(create_app(root)) as srv:
        page.goto(srv.url + "/sweeps/s/trials/0")
        page.wait_for_selector("#trial-curves-note:has-text('not drawn')", timeout=60_000)
        named = ", ".join(f"k{j:03d}" for j in range(12, 32))   # the page draws 12
        assert page.inner_text("#trial-curves-note") == f"12 of 80 metrics drawn; not drawn: {named} and 48 more"
