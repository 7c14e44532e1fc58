"""A sweep whose driver was killed (`kill -9`): the store still says `running`, and nothing will change it until
`sweeplab resume`. `sweeplab status` said the driver is gone; the dashboard showed the sweep as running, live,
for ever. Both now say so, from one check (`queries.gone_driver`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sweeplab.dashboard import create_app
from tests.dashboard.test_browser import CHROMIUM

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")]

TRAIN = """
import time
def train(config, run):
    run.log({"loss": config["x"]}, step=0)
    time.sleep(60)
"""
SPEC = """
name: killed
function: train.py:train
method: random
metric: {name: loss, goal: minimize}
budget: {trials: 4, time: 30m}
preload: false
parameters:
  x: {min: 0.0, max: 1.0}
"""


def _running_sweep(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """A real sweep's driver, once its trial runs (the trial then sleeps)."""
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "sweep.yaml").write_text(SPEC)
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    driver = subprocess.Popen([sys.executable, "-m", "sweeplab", "sweep", "sweep.yaml", "--store", str(store)],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from sweeplab.errors import UserError
    from sweeplab.store import Store, queries

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ro = Store.open(store, readonly=True)
        except UserError:   # not made yet, or being made
            ro = None
        if ro is not None:
            try:
                names = ro.sweep_names()
                if "killed" in names and queries.sweep_summary(ro, "killed")["sweep"]["counts"]["running"]:
                    return driver, store
            finally:
                ro.close()
        time.sleep(0.1)
    driver.kill()
    driver.wait()
    raise AssertionError("the sweep's trial never started")


def test_a_sweep_whose_driver_was_killed_says_so_in_the_cli_and_the_dashboard(tmp_path: Path, page: Any,
                                                                                 live_server_for: Any) -> None:
    driver, store = _running_sweep(tmp_path)
    try:
        with live_server_for(create_app(store)) as srv:
            page.goto(srv.url + "/sweeps/killed")   # open while the driver runs: live, no note
            page.wait_for_selector("body[data-ready='1']")
            page.wait_for_selector("#live.on")
            assert page.locator("h1 .driver-gone").count() == 0
            assert "of 30 min" in page.inner_text("#main"), "the time budget in seconds read as a duration"

            driver.send_signal(signal.SIGKILL)   # nothing is written: the open page learns it all the same
            driver.wait()
            killed_at = time.time()
            page.wait_for_selector("h1 .driver-gone", timeout=15_000)
            assert page.locator("h1 .driver-gone").inner_text() == "running (driver gone)"
            page.wait_for_selector("#live.idle")

            listed = page.request.get(srv.url + "/api/sweeps").json()["sweeps"][0]
            assert (listed["state"], listed["driver_gone"]) == ("running", True), listed   # stored state kept
            page.goto(srv.url + "/")
            page.wait_for_selector("body[data-ready='1']")
            assert page.locator("#sweeps tr[data-sweep='killed'] .driver-gone").inner_text() == "running (driver gone)"
            running = [t["number"] for t in page.request.get(srv.url + "/api/sweeps/killed/status").json()["trials"]
                       if t["state"] == "running"]
            page.goto(srv.url + f"/sweeps/killed/trials/{running[0]}")   # its trial: not live either
            page.wait_for_selector("body[data-ready='1']")
            assert page.locator("h1 .driver-gone").inner_text() == "running (driver gone)"
            page.wait_for_selector("#live.idle")
            # its duration ends at its last sign of life, and says so; it grew with the clock, for ever
            detail = page.request.get(srv.url + f"/api/sweeps/killed/trials/{running[0]}").json()
            assert detail["started"] <= detail["last_seen"] <= killed_at, detail
            shown = page.inner_text("#trial-duration")
            assert shown.endswith("until its last report (driver gone)"), shown
            page.wait_for_timeout(1100)
            page.reload()
            page.wait_for_selector("body[data-ready='1']")
            assert page.inner_text("#trial-duration") == shown
            page.goto("about:blank")   # stop polling before the server goes
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", "--store", str(store)], capture_output=True,
                        text=True, timeout=60)
    assert cp.returncode == 0 and "running (driver gone)" in cp.stdout, (cp.stdout, cp.stderr)


def test_a_live_driver_is_not_gone(demo_store: Path, client: Any) -> None:
    """The synthetic store's running sweep has no recorded driver: nothing is said about one."""
    assert [s["driver_gone"] for s in client.get("/api/sweeps").json()["sweeps"]] == [False, False]
