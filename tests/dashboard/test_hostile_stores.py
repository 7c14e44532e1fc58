"""A second pass of hostile stores and clients: files that change while served, tokens and redirects."""

from __future__ import annotations

import http.client
import socket
from pathlib import Path
from typing import Any

from sweeplab.dashboard import create_app
from sweeplab.dashboard.synthetic import make_synthetic_store


def _small_store(tmp_path: Path) -> Path:
    return make_synthetic_store(tmp_path / "store", trials=2, points=10, running=0, seed=5)


class _SlowReader(http.client.HTTPConnection):
    """An HTTP connection with a tiny receive buffer: the server is still sending when the headers are read."""

    def connect(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(self.timeout)
        self.sock.connect((self.host, self.port))


def test_a_log_that_grows_while_it_is_downloaded_is_served_as_it_was(tmp_path: Path,
                                                                       live_server_for: Any) -> None:
    """A running trial appends to its log while /files/ sends it: the response is the file as it was when
    the response started (its Content-Length). It read on to the end of the grown file and sent more bytes
    than it had declared: the server raised 'Too much data for declared Content-Length' and the client got a
    broken response."""
    root = _small_store(tmp_path)
    log = root / "logs" / "live.log"
    size = (32 << 20) + 1000   # not a whole number of the server's 64 KB chunks
    log.write_bytes(b"x" * size)
    with live_server_for(create_app(root)) as srv:
        conn = _SlowReader("127.0.0.1", srv.port, timeout=20)
        try:
            conn.request("GET", "/files/logs/live.log")
            resp = conn.getresponse()
            assert resp.status == 200
            assert int(resp.headers["content-length"]) == size
            with log.open("ab") as fh:   # the trial writes on while the body is still being sent
                fh.write(b"y" * (1 << 20))
            body = resp.read()
        finally:
            conn.close()
        assert len(body) == size and body.count(b"y") == 0
        head = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        head.request("HEAD", "/files/logs/live.log")
        r = head.getresponse()
        assert r.status == 200 and int(r.headers["content-length"]) == size + (1 << 20) and r.read() == b""
        head.close()
