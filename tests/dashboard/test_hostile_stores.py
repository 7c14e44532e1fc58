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


# ------------------------------------------------------------------------------------------------ tokens
def test_a_token_with_url_characters_opens_the_printed_url(demo_store: Path) -> None:
    """`--token 'a+b&c=d %/#'`: the printed URL held the token unencoded, so opening it sent another token
    ('+' read as a space, '&' cut it short, '#' never sent) and the user got 401."""
    import os
    import subprocess
    import sys
    from urllib.parse import urlsplit

    token = "a+b&c=d %/#é"
    code = ("import sys; from pathlib import Path; from sweeplab.dashboard import serve; "
            "serve(Path(sys.argv[1]), port=0, token=sys.argv[2])")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", code, str(demo_store), token], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline() if proc.stderr else ""
        url = urlsplit(line.split(": ", 1)[1].split()[0])
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        conn.request("GET", f"{url.path}?{url.query}#{url.fragment}".split("#")[0])
        r = conn.getresponse()
        r.read()
        assert r.status == 303, (line, r.status)
        cookie = r.headers["set-cookie"].split(";")[0]
        conn.request("GET", "/api/sweeps", headers={"cookie": cookie})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.terminate()
        proc.wait(15)
        if proc.stderr:
            proc.stderr.close()


def test_the_token_redirect_keeps_the_path_and_stays_on_the_dashboard(demo_store: Path,
                                                                      live_server_for: Any) -> None:
    """The redirect that drops `?token=` used the decoded path: a sweep named 'team/lr' (`team%2Flr`) lost
    its page (`/sweeps/team/lr`: 404), and `//evil.example/?token=...` redirected off the dashboard."""
    with live_server_for(create_app(demo_store, token="tok", allowed_hosts=None)) as srv:
        for asked, location in [("/sweeps/team%2Flr?token=tok&x=1", "/sweeps/team%2Flr?x=1"),
                                ("//evil.example/?token=tok", "/evil.example/"),
                                ("/\\evil.example/?token=tok", "/evil.example/"),
                                ("/sweeps/%C3%A9t%C3%A9?token=tok", "/sweeps/%C3%A9t%C3%A9")]:
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
            conn.request("GET", asked)
            r = conn.getresponse()
            r.read()
            conn.close()
            assert r.status == 303 and r.headers["location"] == location, (asked, r.headers["location"])


def test_two_dashboards_with_tokens_on_one_host_do_not_log_each_other_out(demo_store: Path,
                                                                           live_server_for: Any) -> None:
    """Cookies are per host, not per port: both dashboards set the same cookie name, so logging in to the
    second (port B) replaced the first one's cookie and every request of the first page got 401."""
    import httpx

    with live_server_for(create_app(demo_store, token="first")) as a, \
            live_server_for(create_app(demo_store, token="second")) as b, \
            httpx.Client(follow_redirects=True) as browser:
        assert browser.get(f"{a.url}/?token=first").status_code == 200
        assert browser.get(f"{b.url}/?token=second").status_code == 200
        assert browser.get(f"{a.url}/api/sweeps").status_code == 200
        assert browser.get(f"{b.url}/api/sweeps").status_code == 200


# ------------------------------------------------------------------------------------ store directories
def test_a_store_whose_logs_or_artifacts_directory_is_a_symlink_serves_nothing_through_it(
        tmp_path: Path, live_server_for: Any) -> None:
    """A hostile store: `logs` is a symlink to a directory out of the store (think /etc) and a trial's log
    path in store.db names a file there; `artifacts` is a symlink to the store's own root. Both were
    served (/etc/passwd as a trial's log, store.db as an artifact): the check resolved the directory first
    and confined the file to wherever it pointed."""
    from sweeplab.store import Store

    root = _small_store(tmp_path)
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    real_logs = tmp_path / "real-logs"
    (root / "logs").rename(real_logs)
    (root / "logs").symlink_to(outside)
    if (root / "artifacts").exists():
        (root / "artifacts").rmdir()
    (root / "artifacts").symlink_to(root)
    s = Store.open(root)
    sid = s.sweep_row("demo")["id"]
    tid = s.add_trial(sid, 100, {}, None, None)
    s.add_attempt(tid, 1, started=0.0, log_path="logs/passwd")
    s.close()
    with live_server_for(create_app(root)) as srv:
        for path in ("/files/logs/passwd", "/api/sweeps/demo/trials/100/log", "/files/artifacts/store.db",
                     "/api/sweeps/demo/trials/100/log?attempt=1"):
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read()
            conn.close()
            assert r.status == 404 and b"root:x" not in body and b"SQLite" not in body, (path, r.status)


def test_a_non_ascii_token_works_as_a_bearer_header(demo_store: Path, live_server_for: Any) -> None:
    """A client sends the header's UTF-8 bytes; the server read them as Latin-1 and compared that text's
    UTF-8 encoding with the token's: every Bearer request with a token like 'clé' got 401."""
    with live_server_for(create_app(demo_store, token="clé-秘密")) as srv:
        for token, status in (("clé-秘密", 200), ("cle-secret", 401)):
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
            conn.putrequest("GET", "/api/sweeps")
            conn.putheader("Authorization", b"Bearer " + token.encode())
            conn.endheaders()
            r = conn.getresponse()
            r.read()
            conn.close()
            assert r.status == status, token


# ------------------------------------------------------------------------------------ a replaced store
def test_a_store_deleted_and_made_again_is_served_fresh(tmp_path: Path, live_server_for: Any) -> None:
    """`rm -rf .sweeplab` and a new sweep in its place while the dashboard runs: every worker thread kept
    its connection to the deleted database and served the old sweeps until the dashboard was restarted."""
    import json
    import shutil

    from sweeplab.store import Store

    root = _small_store(tmp_path)

    def sweeps(port: int) -> tuple[int, list[str]]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/api/sweeps")
        r = conn.getresponse()
        body = json.loads(r.read())
        conn.close()
        return r.status, [s["name"] for s in body.get("sweeps", [])]

    with live_server_for(create_app(root)) as srv:
        for _ in range(8):   # several worker threads, each with its own connection
            assert sweeps(srv.port) == (200, ["demo"])
        shutil.rmtree(root)
        s = Store.open(root)
        s.create_sweep(name="again", method="grid", metric="acc", goal="maximize", spec={}, spec_path=None,
                       seed=None)
        s.close()
        for _ in range(8):
            assert sweeps(srv.port) == (200, ["again"])
        shutil.rmtree(root)
        for _ in range(8):
            assert sweeps(srv.port)[0] == 503


def test_an_html_artifact_is_a_download_not_a_page_of_the_dashboard(tmp_path: Path, live_server_for: Any) -> None:
    """Stored XSS: an artifact a trial wrote (`report.html`, `plot.svg`) served inline from the dashboard's
    origin could run script against the API; it is a download (octet-stream, attachment), text files are
    text/plain, and every answer carries nosniff and the CSP."""
    root = _small_store(tmp_path)
    (root / "artifacts").mkdir(exist_ok=True)
    for name in ("report.html", "plot.svg", "notes.txt"):
        (root / "artifacts" / name).write_text("<script>fetch('/api/sweeps')</script>")
    with live_server_for(create_app(root)) as srv:
        for name, ctype, attachment in (("report.html", "application/octet-stream", True),
                                        ("plot.svg", "application/octet-stream", True),
                                        ("notes.txt", "text/plain; charset=utf-8", False)):
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
            conn.request("GET", f"/files/artifacts/{name}")
            r = conn.getresponse()
            r.read()
            conn.close()
            assert r.status == 200 and r.headers["content-type"] == ctype, name
            assert ("attachment" in (r.headers["content-disposition"] or "")) is attachment, name
            assert r.headers["x-content-type-options"] == "nosniff"
            assert "default-src 'self'" in r.headers["content-security-policy"]


def test_a_store_with_text_where_numbers_belong_is_served_without_500(tmp_path: Path, live_server_for: Any) -> None:
    """A hostile (or hand-edited) store.db: SQLite keeps 'abc' in a REAL column. Every endpoint that read a
    trial's value or a metric point answered 500 (float('abc') in the query layer); such a value is now
    no value, as NaN is."""
    import json
    import sqlite3

    root = _small_store(tmp_path)
    db = sqlite3.connect(root / "store.db")
    db.execute("UPDATE trials SET value='abc' WHERE number=0")
    db.execute("UPDATE metrics SET value='zzz' WHERE rowid IN (SELECT rowid FROM metrics LIMIT 5)")
    db.commit()
    db.close()
    with live_server_for(create_app(root)) as srv:
        for path in ("/api/sweeps/demo/status", "/api/sweeps/demo/trials", "/api/sweeps/demo/trials?limit=5",
                     "/api/sweeps/demo/curves?key=loss&trials=0,1", "/api/sweeps/demo/importance",
                     "/api/sweeps/demo/trials/0", "/api/sweeps/demo/trials/0/curves", "/api/sweeps/demo/best"):
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=20)
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read()
            conn.close()
            assert r.status == 200, (path, r.status, body[:200])
            json.loads(body)


def test_an_empty_token_is_a_one_line_error(demo_store: Path) -> None:
    """`--token "$TOKEN"` with TOKEN unset on a loopback bind: the dashboard started, printed a URL without
    a token and answered 401 to every request (a token '' that nothing could send)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    try:
        cp = subprocess.run([sys.executable, "-m", "sweeplab", "dashboard", "--store", str(demo_store),
                             "--port", "0", "--token", ""], env=env, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the dashboard served with an empty token") from None
    assert cp.returncode == 2 and "--token" in cp.stderr and "empty" in cp.stderr, cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def _logged_in(conn: http.client.HTTPConnection, token: str = "tok") -> str:
    """Open the printed URL (`/?token=...`) and return the dashboard's cookie it sets (`name=value`)."""
    conn.request("GET", f"/?token={token}")
    r = conn.getresponse()
    r.read()
    return r.headers["set-cookie"].split(";")[0]


def test_other_cookies_of_the_host_do_not_hide_the_dashboards(demo_store: Path, live_server_for: Any) -> None:
    """Browsers send a host's cookies from every port: another local app's `prefs={"k":1}` or a bare flag
    cookie, sent before ours, stopped the standard library's cookie parser, the dashboard's cookie was
    never read and every request of a logged-in page got 401."""
    with live_server_for(create_app(demo_store, token="tok")) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        ours = _logged_in(conn)
        for others in ('prefs={"k":1}', "flag", "name=a b", 'q="unterminated', "u=é"):
            conn.request("GET", "/api/sweeps", headers={"cookie": f"{others}; {ours}".encode()})
            r = conn.getresponse()
            r.read()
            assert r.status == 200, others
        conn.request("GET", "/api/sweeps", headers={"cookie": f"{ours}x"})
        r = conn.getresponse()
        r.read()
        assert r.status == 401
        conn.close()


def test_other_origins_get_no_cors_grant(client: Any) -> None:
    """A page on another site may send the dashboard a request but must never read the answer: no
    Access-Control-Allow-* header on any answer, a CORS preflight is refused (held; pinned)."""
    evil = {"origin": "http://evil.example"}
    for r in (client.get("/api/sweeps", headers=evil), client.get("/files/logs/demo/trial-0-attempt-1.log",
                                                                   headers=evil),
              client.options("/api/sweeps", headers={**evil, "access-control-request-method": "GET"})):
        assert not [h for h in r.headers if h.lower().startswith("access-control-")], r.headers
        assert r.headers["cross-origin-resource-policy"] == "same-origin"
    assert r.status_code == 405


def test_the_printed_url_opened_again_still_drops_the_token(demo_store: Path, live_server_for: Any) -> None:
    """With the cookie already set (the URL opened a second time, from history or a note), the cookie
    authenticated first and the page was served with the token left in the address bar."""
    with live_server_for(create_app(demo_store, token="tok")) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        ours = _logged_in(conn)
        conn.request("GET", "/sweeps/demo?token=tok", headers={"cookie": ours})
        r = conn.getresponse()
        r.read()
        conn.close()
        assert r.status == 303 and r.headers["location"] == "/sweeps/demo"


def test_ctrl_c_stops_the_dashboard_while_a_client_holds_a_download(tmp_path: Path) -> None:
    """A browser tab that stopped reading a large log kept `sweeplab dashboard` alive after Ctrl-C until
    the 30 s write timeout cut that client: shutdown waited for every response to finish."""
    import os
    import signal
    import subprocess
    import sys

    root = _small_store(tmp_path)
    (root / "logs" / "big.log").write_bytes(b"x" * (64 << 20))
    code = ("import sys; from pathlib import Path; from sweeplab.dashboard import serve; "
            "serve(Path(sys.argv[1]), port=0)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", code, str(root)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    sock = socket.socket()
    try:
        line = proc.stderr.readline() if proc.stderr else ""
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(b"GET /files/logs/big.log HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.settimeout(10)
        sock.recv(1)   # the response has started; this client reads no more
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)   # a hang guard: the write timeout (30 s) would end it otherwise
        except subprocess.TimeoutExpired:
            raise AssertionError("the dashboard did not stop on SIGINT while a download was pending") from None
    finally:
        sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
