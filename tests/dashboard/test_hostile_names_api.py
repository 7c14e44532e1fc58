"""Names a store accepts and the dashboard must serve: an empty metric name, names of many kilobytes."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from sweeplab.dashboard import create_app
from sweeplab.dashboard.security import MAX_URL
from sweeplab.dashboard.server import REQUEST_HEAD_LIMIT
from sweeplab.store import Store

LONG = "m" * 6000                      # over the old 4 KB URL limit, ASCII
LONG_WIDE = "é" * 4000                 # 8000 bytes of UTF-8, 24,000 once percent-encoded


def _store(root: Path, sweep: str, keys: list[str], params: list[str]) -> Path:
    s = Store.open(root)
    with s.transaction():
        sid = s.create_sweep(name=sweep, method="random", metric=keys[0], goal="minimize", seed=0, spec_path=None,
                             spec={"method": "random", "parameters": {p: {"min": 0.0, "max": 1.0} for p in params}})
        for i in range(3):
            params_i = {p: 0.1 * (i + 1) + j for j, p in enumerate(params)}
            tid = s.add_trial(sid, i, params_i, dict(params_i), seed=i)
            s.add_attempt(tid, 1, started=time.time(), host="h", pid=1, log_path=None)
            s.add_metrics(tid, 1, [(step, k, float(i + step + j), time.time())
                                   for step in range(3) for j, k in enumerate(keys)])
            s.update_trial(tid, state="completed", value=float(i + 2), attempts=1, started=time.time(),
                           ended=time.time(), reason=None, last_step=2, profile=None,
                           metrics={k: float(i + 2 + j) for j, k in enumerate(keys)})
    s.close()
    return root


@pytest.mark.parametrize("key", ["", " ", LONG, LONG_WIDE], ids=["empty", "blank", "6000-bytes", "8000-utf8-bytes"])
def test_a_metric_of_any_name_the_store_holds_is_plotted(tmp_path: Path, client_for: Any, key: str) -> None:
    """`/curves?key=` answered 400 for a metric named "" (the check was falsiness, not absence), and a
    name over 4 KB got 414 (the URL limit was below the names the store accepts)."""
    root = _store(tmp_path / "store", "s", [key, "loss"], ["lr"])
    with client_for(create_app(root)) as c:
        assert key in c.get("/api/sweeps/s/keys").json()["keys"]
        r = c.get(f"/api/sweeps/s/curves?key={quote(key, safe='')}&trials=0,1,2")
        assert r.status_code == 200, r.text[:200]
        body = r.json()
        assert body["key"] == key
        assert [t["values"] for t in body["trials"]] == [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0], [2.0, 3.0, 4.0]]
        assert key in c.get("/api/sweeps/s/trials/1/curves").json()["curves"]
        assert c.get("/api/sweeps/s/curves?trials=0").status_code == 400   # no key at all: still a 400


@pytest.mark.parametrize("name", [LONG, LONG_WIDE], ids=["6000-bytes", "8000-utf8-bytes"])
def test_a_sweep_and_parameters_with_names_of_kilobytes_are_served(tmp_path: Path, client_for: Any,
                                                                    name: str) -> None:
    root = _store(tmp_path / "store", name, ["loss"], [name, "lr"])
    base = "/api/sweeps/" + quote(name, safe="")
    with client_for(create_app(root)) as c:
        assert c.get("/api/sweeps").json()["sweeps"][0]["name"] == name
        for rest in ("", "/status", "/trials", "/keys", "/importance", "/trials/0", "/trials/0/curves",
                     "/curves?key=loss&trials=0"):
            r = c.get(base + rest)
            assert r.status_code == 200, (rest, r.status_code, r.text[:200])
        assert name in c.get(base + "/trials").json()["params"]
        assert c.get("/sweeps/" + quote(name, safe="")).status_code == 200   # the page itself


def _raw(port: int, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def test_a_real_server_serves_a_long_name_and_refuses_absurd_urls_with_414_or_431(tmp_path: Path,
                                                                                  live_server_for: Any) -> None:
    """Through uvicorn (its h11 buffer was 16 KB: a long name got a plain 400 there even under the URL
    limit), a 24 KB URL is served; a URL over `MAX_URL` gets the guard's 414, and a request head beyond what
    h11 buffers a 414 (URL) or 431 (headers) in JSON, not "Invalid HTTP request received"."""
    root = _store(tmp_path / "store", LONG_WIDE, [LONG_WIDE], ["lr"])
    with live_server_for(create_app(root)) as srv:
        name = quote(LONG_WIDE, safe="")
        ok = _raw(srv.port, f"GET /api/sweeps/{name}/curves?key={name}&trials=0 HTTP/1.1\r\n"
                            f"Host: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        assert ok.startswith(b"HTTP/1.1 200"), ok[:300]
        for size, status, text in [(MAX_URL + 10, b"414", b"URL too long"),
                                   (REQUEST_HEAD_LIMIT + 10, b"414", b"URL too long")]:
            r = _raw(srv.port, b"GET /api/sweeps?x=" + b"a" * size + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Connection: close\r\n\r\n")
            assert r.startswith(b"HTTP/1.1 " + status) and text in r, r[:300]
        r = _raw(srv.port, b"GET /api/sweeps HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Big: "
                 + b"a" * REQUEST_HEAD_LIMIT
                 + b"\r\n\r\n")
        assert r.startswith(b"HTTP/1.1 431") and b"headers too large" in r, r[:300]
