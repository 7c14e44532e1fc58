"""Safe by default: read-only, confined file serving, request limits, token auth, loopback binding."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sweeplab.dashboard import create_app, serve
from sweeplab.dashboard.security import is_loopback, safe_join
from sweeplab.errors import UserError
from sweeplab.store import Store


def _raw(server: Any, method: str, path: str, headers: dict[str, str] | None = None,
         body: bytes | None = None) -> tuple[int, bytes]:
    """Send exactly this request line to the real server (no client-side URL normalisation)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.putrequest(method, path, skip_accept_encoding=True)
    for k, v in (headers or {}).items():
        conn.putheader(k, v)
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


TRAVERSALS = [
    "/static/../../../../../../etc/passwd",
    "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/static/%2e%2e%2f%2e%2e%2fapp.py",
    "/static/..%2fapp.py",
    "/static/..%2f..%2fdashboard%2fapp.py",
    "/static/%252e%252e/%252e%252e/app.py",
    "/static//etc/passwd",
    "/static/%2fetc%2fpasswd",
    "/static/..%5capp.py",
    "/static/app.js%00.html",
    "/files/logs/../store.db",
    "/files/logs/%2e%2e/store.db",
    "/files/logs/..%2fstore.db",
    "/files/store.db",
    "/files/logs/%2e%2e/%2e%2e/secret.txt",
    "/files//etc/passwd",
    "/files/%2fetc%2fpasswd",
    "/files/logs/link-out.log",
    "/files/artifacts/dir-out/secret.txt",
    "/files/logs/..%5c..%5csecret.txt",
    "/files/C:%5cWindows%5cwin.ini",
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_path_traversal_is_404(live_server: Any, path: str) -> None:
    status, body = _raw(live_server, "GET", path)
    assert status == 404, (path, status, body[:200])
    assert b"outside the store" not in body and b"root:" not in body and b"SQLite" not in body


def test_files_inside_the_store_are_served(live_server: Any, demo_store: Path) -> None:
    status, body = _raw(live_server, "GET", "/files/logs/demo/trial-0-attempt-1.log")
    assert status == 200 and body.startswith(b"[trial 0] epoch 0")
    assert _raw(live_server, "GET", "/static/app.css")[0] == 200


def test_safe_join_refuses_symlinks_out_of_the_base(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "d").mkdir(parents=True)
    (base / "d" / "ok.txt").write_text("ok")
    (tmp_path / "out.txt").write_text("out")
    os.symlink(tmp_path / "out.txt", base / "d" / "link.txt")
    os.symlink(base / "d" / "ok.txt", base / "d" / "inner-link.txt")
    assert safe_join(base, "d/ok.txt") == (base / "d" / "ok.txt").resolve()
    assert safe_join(base, "d/inner-link.txt") is not None  # a symlink that stays inside is fine
    for rel in ("d/link.txt", "../out.txt", "d/../../out.txt", str(tmp_path / "out.txt"), "d", "", "d/missing"):
        assert safe_join(base, rel) is None, rel


def test_log_path_pointing_outside_the_store_is_404(tmp_path: Path, client_for: Any) -> None:
    (tmp_path / "secret.log").write_text("secret")
    root = tmp_path / "store"
    s = Store.open(root)
    sid = s.create_sweep(name="x", method="random", metric="m", goal="minimize", spec={}, spec_path=None,
                         seed=0)
    for n, log in enumerate([str(tmp_path / "secret.log"), "../secret.log", "logs/../../secret.log"]):
        tid = s.add_trial(sid, n, {}, None, None)
        s.add_attempt(tid, 1, started=0.0, log_path=log)
    s.close()
    with client_for(create_app(root)) as c:
        for n in range(3):
            r = c.get(f"/api/sweeps/x/trials/{n}/log")
            assert r.status_code == 404 and "secret" not in r.json()["error"].replace("secret.log", "")


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"])
@pytest.mark.parametrize("path", ["/", "/api/sweeps", "/api/sweeps/demo/trials/0", "/static/app.js"])
def test_write_methods_are_rejected(live_server: Any, method: str, path: str) -> None:
    status, _ = _raw(live_server, method, path, body=b"{}" if method in ("POST", "PUT", "PATCH") else None)
    assert status == 405


def test_head_is_allowed(live_server: Any) -> None:
    assert _raw(live_server, "HEAD", "/api/sweeps")[0] == 200


@pytest.mark.parametrize("headers,body,status", [
    ({}, b"x" * 100, 413),
    ({"Transfer-Encoding": "chunked"}, None, 413),
    ({"X-Pad": "a" * 20_000}, None, 431),
], ids=["body", "chunked", "huge-headers"])
def test_request_size_limits(client: Any, headers: dict[str, str], body: bytes | None, status: int) -> None:
    r = client.request("GET", "/api/sweeps", headers=headers, content=body)
    assert r.status_code == status


def test_urls_of_a_few_kilobytes_are_served(client: Any) -> None:
    # names the store holds travel in URLs: 5 KB is served; over 64 KB is refused, which only a raw socket
    # can send (the test client's own limit): test_hostile_names_api.py
    assert client.get("/api/sweeps?x=" + "a" * 5000).status_code == 200


def test_dns_rebinding_host_is_refused_on_loopback(client: Any) -> None:
    assert client.get("/api/sweeps", headers={"host": "evil.example:8765"}).status_code == 421
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "localhost"):
        assert client.get("/api/sweeps", headers={"host": host}).status_code == 200, host


def test_security_headers(client: Any) -> None:
    r = client.get("/")
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"


def test_the_database_connection_is_read_only(demo_store: Path) -> None:
    app = create_app(demo_store)
    store = app.app.state.reader.store()
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
        store.conn.execute("DELETE FROM trials")
    store.close()


# ------------------------------------------------------------------------------------------------ token
@pytest.fixture
def token_client(demo_store: Path, client_for: Any) -> Any:
    with client_for(create_app(demo_store, token="s3cret-token", allowed_hosts=None),
                    base_url="http://10.1.2.3:8765") as c:
        yield c


def test_token_is_required(token_client: Any) -> None:
    for url in ("/", "/api/sweeps", "/static/app.js", "/files/logs/demo/trial-0-attempt-1.log"):
        r = token_client.get(url)
        assert r.status_code == 401, url
    assert token_client.get("/api/sweeps", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert token_client.get("/api/sweeps?token=wrong").status_code == 401


def test_bearer_header_authenticates(token_client: Any) -> None:
    r = token_client.get("/api/sweeps", headers={"authorization": "Bearer s3cret-token"})
    assert r.status_code == 200 and "set-cookie" not in r.headers


def test_query_token_once_then_cookie(token_client: Any) -> None:
    r = token_client.get("/sweeps/demo?token=s3cret-token&x=1", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/sweeps/demo?x=1"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "s3cret-token" not in cookie
    # the client kept the cookie: no token needed any more
    assert token_client.get("/api/sweeps").status_code == 200
    assert token_client.get("/sweeps/demo").status_code == 200
    token_client.cookies.clear()
    assert token_client.get("/api/sweeps").status_code == 401


# ------------------------------------------------------------------------------------------------ bind
@pytest.mark.parametrize("host,loopback", [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True), ("127.0.0.2", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.10", False), ("example.com", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10"])
def test_non_loopback_bind_without_token_is_refused(demo_store: Path, host: str) -> None:
    with pytest.raises(UserError, match="--token") as info:
        serve(demo_store, host=host, port=1)
    assert "--insecure" in str(info.value)


def test_missing_store_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no sweeplab store"):
        serve(tmp_path / "none", port=1)


def test_insecure_bind_warns_and_serves(demo_store: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = ("import sys; from pathlib import Path; from sweeplab.dashboard import serve; "
            f"serve(Path(sys.argv[1]), host='0.0.0.0', port={port}, insecure=True)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", code, str(demo_store)], stderr=subprocess.PIPE, env=env,
                            text=True)
    try:
        warning = proc.stderr.readline() if proc.stderr else ""
        assert "WITHOUT authentication" in warning
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/api/sweeps")
                assert conn.getresponse().status == 200
                conn.close()
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


# ------------------------------------------------------------------------------- symlinks inside the store
@pytest.fixture
def linked_store(tmp_path: Path) -> Path:
    """A small store whose logs/ and artifacts/ hold symlinks to the database, to the store's root, to a
    file outside the store, and one trial whose recorded log path is such a symlink."""
    from sweeplab.dashboard.synthetic import make_synthetic_store

    root = make_synthetic_store(tmp_path / "store", trials=4, points=40, running=0, seed=3)
    (tmp_path / "outside.txt").write_text("outside the store\n")
    logs, artifacts = root / "logs", root / "artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "real.txt").write_text("an artifact\n")
    os.symlink(Path("..") / "store.db", logs / "db.log")                  # relative link to the database
    os.symlink(root / "store.db", logs / "db-abs.log")                     # absolute link to the database
    os.symlink(root, logs / "root")                                        # a directory link to the store
    os.symlink(tmp_path / "outside.txt", logs / "outside.log")            # out of the store entirely
    os.symlink(root / "store.db", artifacts / "db.bin")
    os.symlink(Path("..") / "logs" / "db.log", artifacts / "chain.bin")    # a chain ending at the database
    s = Store.open(root)
    sid = s.sweep_row("demo")["id"]
    tid = s.add_trial(sid, 100, {}, None, None)
    s.add_attempt(tid, 1, started=0.0, log_path="logs/db.log")
    s.close()
    return root


LINKS = ["/files/logs/db.log", "/files/logs/db-abs.log", "/files/logs/root/store.db",
         "/files/logs/root/logs/db.log", "/files/logs/outside.log", "/files/artifacts/db.bin",
         "/files/artifacts/chain.bin", "/files/logs/root/store.db-wal"]


def test_symlinks_under_logs_never_serve_the_database(linked_store: Path, live_server_for: Any) -> None:
    with live_server_for(create_app(linked_store)) as srv:
        for path in LINKS:
            status, body = _raw(srv, "GET", path)
            assert status == 404, (path, status, body[:100])
            assert b"SQLite format" not in body and b"outside the store" not in body, path
        status, body = _raw(srv, "GET", "/api/sweeps/demo/trials/100/log")
        assert status == 404 and b"SQLite format" not in body, (status, body[:100])
        # the real files next to them are still served
        assert _raw(srv, "GET", "/files/artifacts/real.txt") == (200, b"an artifact\n")
        assert _raw(srv, "GET", "/files/logs/demo/trial-0-attempt-1.log")[0] == 200


# -------------------------------------------------------------------------------------------- slow clients
class ServeProcess:
    """`sweeplab.dashboard.serve` in a child process on a free loopback port, stopped with SIGINT."""

    def __init__(self, store: Path, **kwargs: Any) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        code = ("import sys, json; from pathlib import Path; from sweeplab.dashboard import serve; "
                "serve(Path(sys.argv[1]), port=int(sys.argv[2]), **json.loads(sys.argv[3]))")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                             os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(store), str(self.port), json.dumps(kwargs)],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def __enter__(self) -> ServeProcess:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("HEAD", "/api/sweeps")
                conn.getresponse().read()
                conn.close()
                return self
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.__exit__()
                    raise RuntimeError(f"the dashboard did not start (exit code {self.proc.returncode})") from None
                time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class SlowClients:
    """`n` connections that send a request's headers one byte per connection every `pace` seconds and
    never finish them (slowloris), plus `silent` connections that send nothing; stop after `limit` s."""

    HEAD = b"GET /api/sweeps HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "

    def __init__(self, port: int, n: int, *, silent: int = 0, pace: float = 0.2, limit: float = 90.0) -> None:
        self.socks: list[socket.socket] = []
        self.opened: list[float] = []
        self.closed_at: dict[int, float] = {}
        for i in range(n + silent):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setblocking(False)
            if i < n:
                s.send(self.HEAD[:1])
            self.socks.append(s)
            self.opened.append(time.monotonic())
        self.n, self.pace, self.limit = n, pace, limit
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._dribble, daemon=True)
        self.thread.start()

    def _dribble(self) -> None:
        sent = 1
        end = time.monotonic() + self.limit
        while not self.stop.wait(self.pace) and time.monotonic() < end:
            byte = self.HEAD[sent:sent + 1] or b"a"
            sent += 1
            for i, s in enumerate(self.socks):
                self.poll(i)
                if i < self.n and i not in self.closed_at:
                    try:
                        s.send(byte)
                    except OSError:
                        self.closed_at.setdefault(i, time.monotonic())

    def poll(self, i: int) -> None:
        """Note when the server has closed connection `i` (EOF or reset)."""
        if i in self.closed_at:
            return
        try:
            data = self.socks[i].recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.closed_at[i] = time.monotonic()

    def open_count(self) -> int:
        for i in range(len(self.socks)):
            self.poll(i)
        return len(self.socks) - len(self.closed_at)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        for s in self.socks:
            s.close()


def _timed_get(port: int, path: str, headers: dict[str, str]) -> tuple[int, float]:
    t0 = time.monotonic()
    r = httpx.get(f"http://127.0.0.1:{port}{path}", headers=headers, timeout=10)
    return r.status_code, time.monotonic() - t0


def test_slow_header_clients_do_not_deny_the_dashboard(demo_store: Path) -> None:
    """200 slowloris connections are open (no token: they never get that far); a normal request with the
    token still answers 200 within a second. A long header timeout keeps the slow ones open throughout."""
    bearer = {"authorization": "Bearer s3cret"}
    with ServeProcess(demo_store, token="s3cret", header_timeout=120) as srv:
        slow = SlowClients(srv.port, 200)
        try:
            results = [_timed_get(srv.port, "/api/sweeps", bearer) for _ in range(5)]
            assert [status for status, _ in results] == [200] * 5, results
            assert min(t for _, t in results) < 1.0, results
            assert slow.open_count() == 200  # they were really holding their connections all along
        finally:
            slow.close()


def test_slow_header_clients_are_cut_after_the_header_timeout(demo_store: Path) -> None:
    """With a 1 s header timeout, connections that dribble their headers or send nothing are closed by
    the server (not before the timeout), while normal requests keep being answered."""
    with ServeProcess(demo_store, header_timeout=1.0) as srv:
        slow = SlowClients(srv.port, 20, silent=5, pace=0.1, limit=60)
        try:
            deadline = time.monotonic() + 30
            while slow.open_count() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert slow.open_count() == 0, f"{slow.open_count()} slow connections still open after 30 s"
            waited = [slow.closed_at[i] - slow.opened[i] for i in range(len(slow.socks))]
            assert min(waited) >= 0.9, waited
            assert _timed_get(srv.port, "/api/sweeps", {})[0] == 200
        finally:
            slow.close()


def test_busy_connections_are_not_cut_by_the_header_timeout(demo_store: Path) -> None:
    """A kept-alive connection that sends whole requests promptly is not cut while it keeps doing so."""
    with ServeProcess(demo_store, header_timeout=1.0) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:  # three header timeouts' worth of requests on one connection
            conn.request("GET", "/api/sweeps")
            assert conn.getresponse().read().startswith(b'{"sweeps"')
            time.sleep(0.2)
        conn.close()


def test_at_the_connection_cap_the_longest_waiting_connection_makes_room(demo_store: Path,
                                                                         live_server_for: Any) -> None:
    """With room for 8 connections, 20 slow ones do not lock out a normal request: each new connection
    closes the one that has waited longest for its headers, and the open ones stay within the cap."""
    with live_server_for(create_app(demo_store), max_connections=8, header_timeout=120) as srv:
        slow = SlowClients(srv.port, 20, pace=0.2, limit=60)
        try:
            results = [_timed_get(srv.port, "/api/sweeps", {}) for _ in range(3)]
            assert [status for status, _ in results] == [200] * 3, results
            deadline = time.monotonic() + 30
            while slow.open_count() > 8 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert slow.open_count() <= 8
            assert 0 in slow.closed_at and 19 not in slow.closed_at   # the oldest went first, the newest stays
        finally:
            slow.close()


def test_a_client_that_stops_reading_is_cut_and_frees_its_request_slot(tmp_path: Path,
                                                                         live_server_for: Any) -> None:
    """A client asks for a 64 MB log and reads nothing: after the write timeout it is disconnected (its
    request slot was given back when its response started: test_hostile_clients.py)."""
    from sweeplab.dashboard.synthetic import make_synthetic_store

    root = make_synthetic_store(tmp_path / "store", trials=2, points=10, running=0)
    (root / "logs" / "big.log").write_bytes(b"x" * (64 << 20))
    app = create_app(root)
    with live_server_for(app, write_timeout=1.0) as srv:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", srv.port))
        try:
            sock.sendall(b"GET /files/logs/big.log HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            connections = srv.server.server_state.connections
            deadline = time.monotonic() + 10
            while not connections and time.monotonic() < deadline:   # the connection is open...
                time.sleep(0.05)
            deadline = time.monotonic() + 30
            while connections and time.monotonic() < deadline:       # ...and is given up on
                time.sleep(0.1)
            assert not connections, "the unread response is still being sent after 30 s"
            assert app.in_flight == 0
            sock.settimeout(10)
            received = 0
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
            assert received < 64 << 20   # cut off, not delivered
        except ConnectionResetError:
            pass  # the abort may reach us as a reset: cut off all the same
        finally:
            sock.close()
        assert _timed_get(srv.port, "/api/sweeps", {})[0] == 200
