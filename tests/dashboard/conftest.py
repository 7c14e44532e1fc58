"""Fixtures for the dashboard: a generated store, an in-process client, and a real uvicorn server."""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sweeplab.dashboard import create_app
from sweeplab.dashboard.app import server_config
from sweeplab.dashboard.synthetic import make_synthetic_store
from sweeplab.store import Store

LOCAL = "http://127.0.0.1:8765"


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sweep 'demo': 60 trials in every state, ~3000 metric points, log files; sweep 'empty': no trials.
    Plus a file *outside* the store and symlinks under logs/ and artifacts/ pointing out (traversal tests)."""
    base = tmp_path_factory.mktemp("dash")
    root = make_synthetic_store(base / "store", trials=60, points=3000, seed=1)
    w = Store.open(root)  # a second sweep that has not started a trial yet
    w.create_sweep(name="empty", method="grid", metric="acc", goal="maximize", spec={}, spec_path=None,
                   seed=None)
    w.close()
    (base / "secret.txt").write_text("outside the store\n")
    os.symlink(base / "secret.txt", root / "logs" / "link-out.log")
    os.symlink(base, root / "artifacts" / "dir-out")
    return root


@pytest.fixture(scope="session")
def client(demo_store: Path):
    with make_client(create_app(demo_store)) as c:
        yield c


def make_client(app: object, base_url: str = LOCAL) -> Any:
    """Starlette's in-process client (its httpx deprecation notice is not ours to fix)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    return TestClient(app, base_url=base_url)


@pytest.fixture
def client_for() -> Any:
    """`client_for(app)`: an in-process client for another app (another store, a token...)."""
    return make_client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """A real uvicorn in a thread, configured as `serve` configures it (header deadline, connection cap)."""

    def __init__(self, app: object, **limits: Any) -> None:
        import uvicorn

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(server_config(app, host="127.0.0.1", port=self.port, **limits))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="session")
def live_server_for() -> Any:
    """`with live_server_for(app) as srv:` serves another app (another store, a token...) on a free port."""
    return LiveServer


@pytest.fixture(scope="session")
def live_server(demo_store: Path) -> Iterator[LiveServer]:
    """The dashboard served by a real uvicorn on a free loopback port (raw HTTP, browser tests)."""
    with LiveServer(create_app(demo_store)) as srv:
        yield srv


def make_asha_store(root: Path) -> Path:
    """Sweep 'asha' as a user reported it: 20 trials of which 17 were pruned by ASHA at steps 1, 3 and 9
    and 3 completed at step 27, plus one failed trial and one that diverged (val_loss 6.4e12 at step 0).
    `epochs` is a constant (`{value: 30}`), `momentum` is conditional (only the sgd trials have it). It ran
    on the Ray backend; trial 0 has a full profile (raw byte counts)."""
    import math
    import random

    rng = random.Random(7)
    store = Store.open(root)
    t0 = time.time() - 3600
    with store.transaction():
        sid = store.create_sweep(
            name="asha", method="random", metric="val_loss", goal="minimize", seed=0, spec_path="sweep.yaml",
            spec={"method": "random", "metric": {"name": "val_loss", "goal": "minimize"},
                  "scheduler": {"type": "asha", "min_resource": 1, "max_resource": 27, "reduction_factor": 3},
                  "parameters": {"lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1},
                                 "optimizer": {"values": ["adam", "sgd"]},
                                 "momentum": {"min": 0.0, "max": 0.99}, "epochs": {"value": 30}}},
        )
        rungs = [1] * 9 + [3] * 5 + [9] * 3 + [27] * 3 + [-1, -2]   # -1 failed, -2 diverged
        for i, rung in enumerate(rungs):
            lr = 10 ** rng.uniform(-4, -1)
            opt = "sgd" if i % 2 else "adam"
            params: dict[str, object] = {"lr": lr, "optimizer": opt, "epochs": 30}
            if opt == "sgd":
                params["momentum"] = round(rng.uniform(0.0, 0.99), 3)
            tid = store.add_trial(sid, i, params, dict(params), seed=i)
            start = t0 + i * 60
            log_rel = f"logs/asha/trial-{i}-attempt-1.log"
            (root / log_rel).parent.mkdir(parents=True, exist_ok=True)
            (root / log_rel).write_text(f"[trial {i}] epoch 0\n")
            store.add_attempt(tid, 1, started=start, host="node-1", pid=2000 + i, log_path=log_rel)
            floor = 0.1 + 0.3 * (math.log10(lr) + 2.5) ** 2
            last = {-1: 1, -2: 0}.get(rung, rung)
            points = []
            for step in range(last + 1):
                v = floor + 2.0 * math.exp(-step / 6)
                points.append((step, "val_loss", 6.4e12 if rung == -2 else v, start + step))
            store.add_metrics(tid, 1, points)
            state = {27: "completed", -1: "failed", -2: "stopped_by_rule"}.get(rung, "pruned")
            reason = {"pruned": f"ASHA: rung {rung}: val_loss not in top 1/3",
                      "failed": "RuntimeError: CUDA error: out of memory",
                      "stopped_by_rule": "diverged: val_loss 6.4e12 > 1e6 at step 0"}.get(state)
            value = points[-1][2] if state in ("completed", "stopped_by_rule") else None
            profile = {"steps": last + 1, "samples_per_s": 5312.4, "data_wait_fraction": 0.183,
                       "step_p50": 0.0123, "cpu_mean": 87.25, "rss_peak": 408674304} if i == 17 else None
            store.update_trial(tid, state=state, value=value, attempts=1, started=start, ended=start + last + 1,
                               reason=reason, last_step=last, profile=profile,
                               metrics=None if state == "failed" else {"val_loss": points[-1][2]})
            store.update_attempt(tid, 1, state=state, ended=start + last + 1, reason=reason,
                                 exit_code=1 if state == "failed" else 0)
        store.update_sweep(sid, state="finished", ended=t0 + 1800, backend="ray", address="10.0.0.5:6379",
                           end_reason="budget: all 22 trials of the ASHA bracket ended; the search space of the "
                                      "random searcher was not exhausted but the trial budget was")
    store.close()
    return root


@pytest.fixture(scope="session")
def asha_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_asha_store(tmp_path_factory.mktemp("asha") / "store")


@pytest.fixture(scope="session")
def asha_server(asha_store: Path) -> Iterator[LiveServer]:
    with LiveServer(create_app(asha_store)) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian chromium, one per test module (tests/dashboard/test_browser*.py)."""
    from playwright.sync_api import sync_playwright

    from tests.dashboard.test_browser import ARGS, CHROMIUM

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A wide (1400x900) page whose console errors fail the test; test_browser.py has its own."""
    from tests.dashboard.test_browser_pictures import WIDE, _page

    ctx, pg, errors = _page(browser, WIDE)
    yield pg
    ctx.close()
    assert not errors, errors
