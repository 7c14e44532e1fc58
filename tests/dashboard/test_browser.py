"""The dashboard in real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright).

Screenshots land in test-artifacts/dashboard/ for a human to look at.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="needs Debian's chromium at /usr/bin/chromium (bash .ci/install-browser.sh)"),
]


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.set_default_timeout(30_000)
    yield pg
    ctx.close()
    assert not errors, errors


def _count(page: Any) -> tuple[int, int]:
    m = re.match(r"(\d+) of (\d+) trials match", page.inner_text("#trial-count"))
    assert m, page.inner_text("#trial-count")
    return int(m.group(1)), int(m.group(2))


def test_sweeps_list_links_to_the_sweep(page: Any, live_server: Any) -> None:
    page.goto(live_server.url + "/")
    page.wait_for_selector("body[data-ready='1']")
    row = page.locator("#sweeps tr[data-sweep='demo']")
    assert "60" in row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "sweeps.png"), full_page=True)
    row.locator("a").first.click()
    page.wait_for_url(re.compile(r"/sweeps/demo$"))


def test_sweep_page_parcoords_brushing_filters_the_table(page: Any, live_server: Any) -> None:
    page.goto(live_server.url + "/sweeps/demo")
    page.wait_for_selector("#parcoords[data-rendered='1']")
    # One axis per parameter plus the trial state and the metric, over a canvas of lines (all 60 drawn).
    axes = page.locator("#parcoords .y-axis")
    assert axes.count() == 6
    assert page.locator("#parcoords canvas").count() == 1
    assert page.get_attribute("#parcoords", "data-lines") == "60" and page.inner_text("#parcoords-note") == ""
    page.wait_for_selector("body[data-drawn='1']")   # the charts below the fold come after the first screen
    assert page.locator("#history .scatterlayer, #history .gl-container").count() >= 1
    page.wait_for_selector("#curves[data-rendered]")
    page.wait_for_selector("#importance .bars, #importance .barlayer")
    shown, total = _count(page)
    assert shown == total == 60
    page.screenshot(path=str(ARTIFACTS / "sweep.png"), full_page=True)

    # Brush the metric axis (the last one): drag along its lower half.
    brush = page.locator("#parcoords .brush-area").last
    box = brush.bounding_box()
    x = box["x"] + box["width"] / 2
    page.mouse.move(x, box["y"] + box["height"] * 0.55)
    page.mouse.down()
    page.mouse.move(x, box["y"] + box["height"] * 0.98, steps=10)
    page.mouse.up()
    page.wait_for_function("() => document.querySelector('#brush-note').style.display !== 'none'")
    shown_after, _ = _count(page)
    assert 0 < shown_after < total
    # Every row left in the table has a value inside the brushed range.
    note = page.inner_text("#brush-note")
    lo, hi = (float(v) for v in re.search(r"\[([-\d.e]+), ([-\d.e]+)\]", note).groups())
    values = page.locator("#trials tbody tr td:nth-child(4)").all_inner_texts()
    assert values and all(lo - 1e-3 <= float(v) <= hi + 1e-3 for v in values), (note, values)
    page.screenshot(path=str(ARTIFACTS / "sweep-brushed.png"), full_page=True)

    page.click("#clear-brush")
    page.wait_for_function("() => document.querySelector('#brush-note').style.display === 'none'")
    assert _count(page) == (60, 60)


def test_table_sorts_and_filters(page: Any, live_server: Any) -> None:
    page.goto(live_server.url + "/sweeps/demo")
    page.wait_for_selector("#trials tbody tr")
    page.click("#trials th[data-key='value']")
    first = page.locator("#trials tbody tr td:nth-child(4)").all_inner_texts()
    nums = [float(v) for v in first if v != "–"]
    assert nums == sorted(nums) and nums
    page.select_option("#state-filter", "pruned")
    states = page.locator("#trials tbody tr td:nth-child(3)").all_inner_texts()
    assert states and set(states) == {"pruned"}


def test_trial_page_shows_curves_attempts_and_log(page: Any, live_server: Any) -> None:
    page.goto(live_server.url + "/sweeps/demo")
    page.wait_for_selector("#trials tbody tr")
    page.select_option("#state-filter", "failed")
    link = page.locator("#trials tbody tr td:nth-child(2) a").first
    number = link.inner_text()
    link.click()
    page.wait_for_url(re.compile(rf"/sweeps/demo/trials/{number}$"))
    page.wait_for_selector("#trial-curves[data-rendered='3']")
    assert page.locator("#trial-curves .plot .scatterlayer .trace").count() == 3
    assert page.locator("#trial-curves path.js-line").count() >= 3
    assert "Why it ended" in page.inner_text("#trial-reason")
    assert page.locator("#attempts tbody tr").count() >= 2
    page.wait_for_function("() => document.querySelector('#log').textContent.includes('epoch 0')")
    assert "retry" in page.inner_text("#trial-events")
    page.screenshot(path=str(ARTIFACTS / "trial.png"), full_page=True)


def test_a_sweep_without_trials_renders_without_errors(page: Any, live_server: Any) -> None:
    page.goto(live_server.url + "/sweeps/empty")
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("#parcoords[data-rendered='empty']").count() == 1
    assert "0 of 0 trials match" in page.inner_text("#trial-count")



FAILING_TRAIN = """
def train(config, run):
    for step in range(3):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
        if config.x == 2 and step == 1:
            raise FloatingPointError("loss is NaN at step 1")
    return {"loss": 0.5}
"""
FAILING_SPEC = """
name: fpe
function: train.py:train
method: grid
metric: {name: loss, goal: minimize}
trial: {retries: 1}
parameters:
  x: {values: [1, 2]}
"""


@pytest.fixture(scope="module")
def real_sweep_server(tmp_path_factory: pytest.TempPathFactory, live_server_for: Any) -> Iterator[Any]:
    """A real sweep (CLI, worker processes): trial 0 completes, trial 1 raises FloatingPointError twice."""
    from sweeplab.dashboard import create_app

    project = tmp_path_factory.mktemp("fpe")
    (project / "train.py").write_text(FAILING_TRAIN)
    (project / "sweep.yaml").write_text(FAILING_SPEC)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "-q", "--workers", "2",
                           "--store", str(project / "store")], cwd=project, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    with live_server_for(create_app(project / "store")) as srv:
        yield srv


def _trial_page(page: Any, server: Any, number: int) -> str:
    page.goto(f"{server.url}/sweeps/fpe/trials/{number}")
    page.wait_for_selector("#attempts tbody tr")
    page.wait_for_selector("#trial-curves[data-rendered]")
    return str(page.inner_text("body"))


def test_a_failed_trial_names_its_exception_type_once(page: Any, real_sweep_server: Any) -> None:
    text = _trial_page(page, real_sweep_server, 1)
    assert "FloatingPointError: FloatingPointError" not in text
    reason = page.inner_text("#trial-reason")
    assert reason.count("FloatingPointError") == 1 and "loss is NaN at step 1" in reason, reason
    cells = page.locator("#attempts tbody td.reason").all_inner_texts()
    assert cells == ["FloatingPointError: loss is NaN at step 1"] * 2, cells
    page.screenshot(path=str(ARTIFACTS / "trial-failed.png"), full_page=True)


def test_a_completed_trial_page_has_no_stray_null(page: Any, real_sweep_server: Any) -> None:
    text = _trial_page(page, real_sweep_server, 0)
    header = page.inner_text("#trial-header")
    assert "Trial 0" in header and "completed" in header
    assert "null" not in header and "undefined" not in header, header
    assert not re.search(r"\b(null|undefined)\b", text), text[:2000]


def test_the_csv_download_quotes_text_a_spreadsheet_would_run_as_a_formula(
        page: Any, tmp_path: Path, live_server_for: Any) -> None:
    """CSV injection: the table's "download CSV" writes hostile text (a parameter's value and name, a failed
    trial's reason) with a leading single quote, as `sweeplab export` does; numbers stay numbers."""
    import csv

    import sweeplab as sl
    from sweeplab.dashboard import create_app
    from tests.test_export import _TRIGGER, FORMULAS, TRIALS, _is_number, _unescape

    store = tmp_path / "store"
    sl.run_sweep({"function": f"{TRIALS}:hostile", "method": "grid", "metric": {"name": "loss", "goal": "minimize"},
                  "parameters": {"label": {"values": FORMULAS}, "fail": {"values": [False, True]},
                                 "x": {"value": -0.5}, "@cmd": {"value": "=1+1"}},
                  "trial": {"retries": 0}}, store=store, name="hx", workers=2)
    with live_server_for(create_app(store)) as srv:
        page.goto(srv.url + "/sweeps/hx")
        page.wait_for_selector("#trials tbody tr")
        with page.expect_download() as dl:
            page.click("#download-csv")
        raw = list(csv.reader(open(dl.value.path(), newline="", encoding="utf-8")))
    header, rows = raw[0], raw[1:]
    assert "'@cmd" in header and len(rows) == 2 * len(FORMULAS)
    for row in raw:
        for cell in row:
            assert not cell.startswith(_TRIGGER) or _is_number(cell), (cell, row)
    table = [dict(zip(header, r)) for r in rows]
    assert sorted({_unescape(r["label"]) for r in table}) == sorted(FORMULAS)
    assert {r["'@cmd"] for r in table} == {"'=1+1"} and {r["x"] for r in table} == {"-0.5"}
    assert {r["value"] for r in table if r["state"] == "completed"} == {"-0.5"}
