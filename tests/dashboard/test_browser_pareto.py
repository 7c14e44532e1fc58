"""A sweep with two objectives and a constraint on the dashboard, in headless Chromium: the Pareto card's
front is exactly what `sweeplab best --json` prints, infeasible trials are marked (plot and table), dragging
a rectangle on the Pareto plot filters the trials table, parallel coordinates have an axis per objective,
and a single-objective sweep's page is as it was (no Pareto card, one value column, its best trial).

The store is made once per module by the real CLI (tests/fixtures/multiobjective.py, as the multi-objective
integration tests run it). Screenshots land in test-artifacts/dashboard/."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sweeplab.dashboard import create_app
from tests.dashboard.test_browser import ARTIFACTS, CHROMIUM
from tests.dashboard.test_browser_pictures import PHONE, WIDE, _page

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "multiobjective.py"

MO_SPEC = f"""function: {FIXTURE}:trial
method: tpe
seed: 3
metric: [{{name: acc, goal: maximize}}, {{name: latency_ms, goal: minimize}}]
constraints: [{{metric: memory_gb, max: 16}}]
budget: {{trials: 24}}
trial: {{retries: 0}}
parameters:
  x: {{min: 0.0, max: 1.0}}
  y: {{min: 0.0, max: 1.0}}
"""
SINGLE_SPEC = f"""function: {FIXTURE}:trial
method: random
seed: 1
metric: {{name: acc, goal: maximize}}
budget: {{trials: 6}}
parameters:
  x: {{min: 0.0, max: 1.0}}
  y: {{min: 0.0, max: 0.5}}
"""
CONS_SPEC = (SINGLE_SPEC.replace("seed: 1", "seed: 2").replace("max: 0.5}", "max: 1.0}")
             + "constraints: [{metric: memory_gb, max: 16}]\n")
MO3_SPEC = (MO_SPEC.replace("goal: minimize}]", "goal: minimize}, {name: memory_gb, goal: minimize}]")
            .replace("budget: {trials: 24}", "budget: {trials: 10}"))


class Sweeps:
    """The module's store: sweep 'mo' (two objectives, a constraint), 'single' (one metric), 'cons' (one
    metric and a constraint) and 'mo3' (three objectives)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.store = tmp, tmp / "store"

    def cli(self, *args: str) -> str:
        env = {**os.environ, "SWEEPLAB_STORE": str(self.store), "COLUMNS": "200"}
        cp = subprocess.run([sys.executable, "-m", "sweeplab", *args], cwd=self.tmp, env=env, capture_output=True,
                            text=True, timeout=180)
        assert cp.returncode == 0, f"sweeplab {' '.join(args)}: {cp.stdout}\n{cp.stderr}"
        return cp.stdout

    def run(self, name: str, spec: str) -> None:
        (self.tmp / f"{name}.yaml").write_text(spec)
        self.cli("sweep", f"{name}.yaml", "--name", name, "--workers", "2", "-q")


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> Sweeps:
    s = Sweeps(tmp_path_factory.mktemp("pareto"))
    s.run("mo", MO_SPEC)
    s.run("single", SINGLE_SPEC)
    s.run("cons", CONS_SPEC)
    s.run("mo3", MO3_SPEC)
    return s


@pytest.fixture(scope="module")
def mo(sweeps: Sweeps) -> dict[str, Any]:
    """What the CLI says about sweep 'mo': its status and its `best --json` front."""
    return {"status": json.loads(sweeps.cli("status", "mo", "--json")),
            "front": json.loads(sweeps.cli("best", "mo", "--json"))}


def test_api_carries_objectives_rank_feasibility_front_and_hypervolume(sweeps, mo, client_for):
    with client_for(create_app(sweeps.store)) as c:
        cols = c.get("/api/sweeps/mo/trials").json()
        listed = {s["name"]: s for s in c.get("/api/sweeps").json()["sweeps"]}
        summary = c.get("/api/sweeps/mo").json()["sweep"]
        hv = c.get("/api/sweeps/mo/hypervolume").json()
        single = c.get("/api/sweeps/single/trials").json()
    front = sorted(f["trial"] for f in mo["front"])
    assert sorted(n for n, r in zip(cols["number"], cols["rank"]) if r == 1) == front
    by_number = {t["number"]: t for t in mo["status"]["trials"]}
    for k, n in enumerate(cols["number"]):
        assert {o: cols["values"][o][k] for o in ("acc", "latency_ms")} == by_number[n]["values"]
        assert cols["feasible"][k] is by_number[n]["feasible"]
    assert False in cols["feasible"], "the seed draws trials with memory_gb > 16: the test needs infeasible ones"
    assert summary["objectives"] == [{"name": "acc", "goal": "maximize"}, {"name": "latency_ms", "goal": "minimize"}]
    assert summary["constraints"] == [{"metric": "memory_gb", "max": 16}]
    assert summary["front"] == listed["mo"]["front"] == len(front)
    assert hv["hypervolume"] and len(hv["trials"]) == len(hv["hypervolume"]) and len(hv["reference"]) == 2
    volumes = hv["hypervolume"]   # one reference for the whole series: it never goes down
    assert all(b >= a for a, b in itertools.pairwise(volumes)), volumes
    # one objective, no constraint: none of the new fields
    assert not {"values", "rank", "feasible"} & set(single) and "front" not in listed["single"]


@pytest.fixture(scope="module")
def server(sweeps: Sweeps, live_server_for: Any) -> Iterator[Any]:
    with live_server_for(create_app(sweeps.store)) as srv:
        yield srv


def _open(browser: Any, server: Any, sweep: str, viewport: dict[str, int]) -> tuple[Any, Any, list[str]]:
    ctx, page, errors = _page(browser, viewport)
    page.goto(f"{server.url}/sweeps/{sweep}")
    page.wait_for_selector("body[data-drawn='1']")
    return ctx, page, errors


def _table_numbers(page: Any) -> list[int]:
    return sorted(int(n) for n in page.eval_on_selector_all("#trials tbody tr", "rs => rs.map(r => r.dataset.number)"))


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_pareto_card_front_infeasible_marks_and_brushing(browser, server, mo):
    ctx, page, errors = _open(browser, server, "mo", WIDE)
    trials = mo["status"]["trials"]
    front = sorted(f["trial"] for f in mo["front"])
    infeasible = sorted(t["number"] for t in trials if t.get("feasible") is False)
    plot = page.wait_for_selector("#card-pareto[data-rendered='acc,latency_ms']")
    drawn = page.evaluate("""() => Object.fromEntries(document.querySelector('#card-pareto').data.map(
        (t) => [t.meta.group, {x: t.x, y: t.y, n: (t.customdata || []).map((d) => d[0])}]))""")
    # the front drawn is `sweeplab best --json`, at its values; the infeasible trials are their own trace
    assert sorted(drawn["Pareto front"]["n"]) == front
    want = {f["trial"]: (f["values"]["acc"], f["values"]["latency_ms"]) for f in mo["front"]}
    got = drawn["Pareto front"]
    assert {n: (x, y) for n, x, y in zip(got["n"], got["x"], got["y"])} == want
    assert sorted(drawn["infeasible"]["n"]) == infeasible and infeasible
    assert not set(drawn["dominated"]["n"]) & (set(front) | set(infeasible))
    # the staircase joins the front: every front point is on it, x never goes back, each step is level or upright
    edge = list(zip(drawn["edge"]["x"], drawn["edge"]["y"]))
    assert set(want.values()) <= set(edge)
    assert all(b[0] >= a[0] and (a[0] == b[0] or a[1] == b[1]) for a, b in itertools.pairwise(edge))
    # the header names objectives, constraint and front size; the table ranks and marks
    assert page.inner_text("#sweep-objectives") == "objectives acc (maximize), latency_ms (minimize)"
    assert "memory_gb ≤ 16" in page.inner_text("#sweep-constraints")
    assert f"Pareto front {len(front)} trials" in page.inner_text("#sweep-front")
    assert page.query_selector("#best-link") is None
    heads = page.eval_on_selector_all("#trials thead th", "hs => hs.map(h => h.textContent)")
    assert {"rank", "acc", "latency_ms"} <= set(heads) and "value" not in heads
    marked = sorted(int(n) for n in page.eval_on_selector_all(
        "#trials tbody tr", "rs => rs.filter(r => r.querySelector('.badge.infeasible')).map(r => r.dataset.number)"))
    assert marked == infeasible
    ranked = sorted(int(n) for n in page.eval_on_selector_all(
        "#trials tbody tr", "rs => rs.filter(r => r.textContent.includes('1 (front)')).map(r => r.dataset.number)"))
    assert ranked == front
    labels = page.evaluate("() => document.querySelector('#parcoords').pc.dims.map((d) => d.label)")
    assert "acc" in labels and "latency_ms" in labels
    assert int(page.wait_for_selector("#card-hypervolume[data-rendered]").get_attribute("data-rendered")) > 0
    # the history's "best so far" (first objective) never steps onto an infeasible trial
    steps = page.evaluate("""() => document.querySelector('#history').data.find((t) => t.name === 'best so far')""")
    run, want_steps = None, []
    for t in sorted(trials, key=lambda t: t["number"]):
        if t["state"] == "completed" and t.get("feasible") and t["value"] is not None:
            run = t["value"] if run is None else max(run, t["value"])
            want_steps.append((t["number"], run))
    assert list(zip(steps["x"], steps["y"]))[:-1] == want_steps
    page.screenshot(path=str(ARTIFACTS / "pareto-wide.png"), full_page=True)

    # drag a rectangle over the middle of the plot: the table keeps exactly the trials inside it
    plot.scroll_into_view_if_needed()
    box = page.query_selector("#card-pareto .nsewdrag").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.25, box["y"] + box["height"] * 0.2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5, steps=5)
    page.mouse.move(box["x"] + box["width"] * 0.8, box["y"] + box["height"] * 0.85, steps=5)
    page.mouse.up()
    page.wait_for_selector("#brush-note:not([style*='none'])")
    x0, x1, y0, y1 = page.evaluate("""() => { const ax = document.querySelector('#card-pareto')._fullLayout;
        const s = ax.selections[0]; return [s.x0, s.x1, s.y0, s.y1]; }""")
    inside = sorted(t["number"] for t in trials if t["values"]
                    and min(x0, x1) <= t["values"]["acc"] <= max(x0, x1)
                    and min(y0, y1) <= t["values"]["latency_ms"] <= max(y0, y1))
    assert 0 < len(inside) < len(trials)
    assert _table_numbers(page) == inside
    assert "acc ∈" in page.inner_text("#brush-note")
    # "clear filters" clears the rectangle too: every trial is back
    page.click("#clear-brush")
    page.wait_for_selector("#brush-note[style*='none']", state="attached")
    assert _table_numbers(page) == sorted(t["number"] for t in trials)
    assert page.evaluate("() => document.querySelector('#card-pareto').layout.selections.length") == 0
    ctx.close()
    assert not errors, errors


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_single_objective_page_unchanged_and_phone_fits(browser, server, sweeps):
    best = json.loads(sweeps.cli("best", "single", "--json"))
    ctx, page, errors = _open(browser, server, "single", WIDE)
    assert page.query_selector("[data-card='pareto']") is None
    assert page.eval_on_selector("#extra-cards", "e => e.style.display") == "none"
    heads = page.eval_on_selector_all("#trials thead th", "hs => hs.map(h => h.textContent)")
    assert "value" in heads and "rank" not in heads
    assert f"(trial {best['trial']})" in page.inner_text("#best-link")
    assert page.eval_on_selector("#trials tbody tr.best", "r => r.dataset.number") == str(best["trial"])
    labels = page.evaluate("() => document.querySelector('#parcoords').pc.dims.map((d) => d.label)")
    assert labels[-1] == "acc" and "latency_ms" not in labels
    ctx.close()
    assert not errors, errors
    # the multi-objective page on a phone: no sideways scrolling of the page, the Pareto card drawn
    ctx, page, errors = _open(browser, server, "mo", PHONE)
    page.wait_for_selector("#card-pareto[data-rendered]")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    page.screenshot(path=str(ARTIFACTS / "pareto-phone.png"), full_page=True)
    ctx.close()
    assert not errors, errors


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_constraints_three_objectives_list_and_other_pages(browser, server, sweeps, mo):
    ctx, page, errors = _page(browser, WIDE)
    # the sweeps list: the front's size where a sweep has several objectives, the best value elsewhere
    page.goto(server.url + "/")
    page.wait_for_selector("#sweeps tbody tr")
    assert page.inner_text("tr[data-sweep='mo'] td.front") == f"front: {len(mo['front'])} trials"
    single = json.loads(sweeps.cli("best", "single", "--json"))
    assert page.get_attribute("tr[data-sweep='single'] a[title^='trial']", "title") == f"trial {single['trial']}"
    # one objective and a constraint: infeasible trials marked, the best is `sweeplab best` (never infeasible)
    cons = json.loads(sweeps.cli("status", "cons", "--json"))
    infeasible = sorted(t["number"] for t in cons["trials"] if t.get("feasible") is False)
    assert infeasible, "seed 2 draws trials with memory_gb > 16: the test needs infeasible ones"
    best = json.loads(sweeps.cli("best", "cons", "--json"))
    page.goto(server.url + "/sweeps/cons")
    page.wait_for_selector("body[data-drawn='1']")
    assert page.query_selector("[data-card='pareto']") is None
    assert f"(trial {best['trial']})" in page.inner_text("#best-link")
    assert "memory_gb ≤ 16" in page.inner_text("#sweep-constraints")
    assert sorted(int(n) for n in page.eval_on_selector_all(
        "#trials tbody tr", "rs => rs.filter(r => r.querySelector('.badge.infeasible')).map(r => r.dataset.number)"
    )) == infeasible
    crossed = page.evaluate("""() => {
        const t = document.querySelector('#history').data.find((d) => d.name === 'completed');
        return t.customdata.filter((d, k) => t.marker.symbol[k] === 'x').map((d) => d[0]); }""")
    assert sorted(crossed) == infeasible
    # three objectives: a pair selector; the front drawn is the front over all three
    front3 = sorted(f["trial"] for f in json.loads(sweeps.cli("best", "mo3", "--json")))
    page.goto(server.url + "/sweeps/mo3")
    page.wait_for_selector("#card-pareto[data-rendered='acc,latency_ms']")
    page.select_option("#pareto-y", label="memory_gb")
    page.wait_for_selector("#card-pareto[data-rendered='acc,memory_gb']")
    assert page.get_attribute("#card-pareto", "data-front") == ",".join(map(str, front3))
    labels = page.evaluate("() => document.querySelector('#parcoords').pc.dims.map((d) => d.label)")
    assert {"acc", "latency_ms", "memory_gb"} <= set(labels)
    # a front trial's page and the compare view of two front trials render without errors
    a, b = (f["trial"] for f in mo["front"][:2])
    page.goto(f"{server.url}/sweeps/mo/trials/{a}")
    page.wait_for_selector("#trial-value")
    page.goto(f"{server.url}/sweeps/mo/compare?trials={a},{b}")
    page.wait_for_selector("body[data-drawn='1'], #compare-key")
    ctx.close()
    assert not errors, errors
