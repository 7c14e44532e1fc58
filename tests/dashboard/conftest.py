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
