"""Hostile requests the dashboard must answer as a client error, never a 500 or invalid JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HUGE = "99999999999999999999999"   # beyond SQLite's 64-bit INTEGER


@pytest.mark.parametrize("path", [
    f"/api/sweeps/demo/trials/{HUGE}",
    f"/api/sweeps/demo/trials/{HUGE}/curves",
    f"/api/sweeps/demo/trials/{HUGE}/log",
    f"/api/sweeps/demo/curves?key=loss&trials={HUGE}",
    f"/api/sweeps/demo/events?trial={HUGE}",
])
def test_a_trial_number_beyond_the_store_is_not_found(client: Any, path: str) -> None:
    r = client.get(path)
    assert r.status_code in (200, 404), (r.status_code, r.text)
    body = json.loads(r.text)
    assert body.get("trials", []) == [] and body.get("events", []) == []


@pytest.mark.parametrize("command, ref, message", [
    ("repro", f"demo/{HUGE}", f"error: sweep 'demo' has no trial {HUGE}"),
    ("profile", f"demo/{HUGE}", f"error: sweep 'demo' has no trial {HUGE}"),
    ("repro", "demo/\u00b2", "error: expected SWEEP/TRIAL"),      # str.isdigit() is true for a superscript 2
])
def test_cli_trial_number_beyond_the_store_is_a_one_line_error(demo_store: Path, command: str, ref: str,
                                                                message: str) -> None:
    cp = subprocess.run([sys.executable, "-m", "sweeplab", command, ref, "--store", str(demo_store)],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2, cp.stderr
    assert len(cp.stderr.splitlines()) == 1 and cp.stderr.startswith(message), cp.stderr


def test_a_sweep_whose_name_has_a_slash_is_served(tmp_path: Path, client_for: Any) -> None:
    """`--name team/lr-sweep`: the browser sends the name's '/' as %2F, which the server decodes before routing."""
    from urllib.parse import quote

    from sweeplab.dashboard import create_app
    from sweeplab.store import Store

    name = "team/lr <sweep>/trials"
    st = Store.open(tmp_path)
    st.create_sweep(name=name, method="grid", metric="loss", goal="minimize", spec={}, spec_path=None, seed=None)
    st.close()
    q = quote(name, safe="")
    with client_for(create_app(tmp_path)) as c:
        for path in (f"/api/sweeps/{q}", f"/api/sweeps/{q}/trials", f"/api/sweeps/{q}/status",
                     f"/api/sweeps/{q}/events", f"/api/sweeps/{q}/keys"):
            r = c.get(path)
            assert r.status_code == 200, (path, r.status_code, r.text)
        assert c.get(f"/api/sweeps/{q}").json()["sweep"]["name"] == name
        assert "has no trial 0" in c.get(f"/api/sweeps/{q}/trials/0").json()["error"]
        for path in (f"/sweeps/{q}", f"/sweeps/{q}/compare", f"/sweeps/{q}/trials/0"):
            assert c.get(path).status_code == 200, path


@pytest.mark.parametrize("host, status", [
    ("127.0.0.1:8765", 200), ("localhost", 200), ("[::1]:8765", 200),
    ("127.0.0.1:8765@evil.example", 421), ("localhost:abc", 421), ("127.0.0.1:", 421), ("[::1]x", 421),
])
def test_the_host_header_is_a_loopback_name_and_a_numeric_port(client: Any, host: str, status: int) -> None:
    assert client.get("/api/sweeps", headers={"host": host}).status_code == status


def test_a_dashboard_bound_to_another_loopback_address_answers_to_it(demo_store: Path, client_for: Any) -> None:
    """`--host 127.0.0.2` prints http://127.0.0.2:PORT/, whose Host header the rebinding check refused."""
    from sweeplab.dashboard import create_app
    from sweeplab.dashboard.app import loopback_hosts

    with client_for(create_app(demo_store, allowed_hosts=loopback_hosts("127.0.0.2"))) as c:
        assert c.get("/api/sweeps", headers={"host": "127.0.0.2:8765"}).status_code == 200
        assert c.get("/api/sweeps", headers={"host": "evil.example:8765"}).status_code == 421
    assert "[::1]" in loopback_hosts("::1") and "127.0.0.1" in loopback_hosts("::1")


def _dashboard(store: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sweeplab", "dashboard", "--store", str(store), *args],
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("port", ["busy", "70000", "-1"])
def test_a_port_in_use_or_out_of_range_is_one_error_line(demo_store: Path, port: str) -> None:
    """uvicorn logged 'address already in use' after the URL was printed and exited 3; 70000 raised
    OverflowError."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = _dashboard(demo_store, "--port", str(busy.getsockname()[1]) if port == "busy" else port)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert ("address already in use" if port == "busy" else "--port must be from 0 to 65535") in err.lower()


def test_port_0_serves_on_the_free_port_it_prints(demo_store: Path) -> None:
    import re
    import signal
    import urllib.request

    proc = _dashboard(demo_store, "--port", "0")
    try:
        line = proc.stderr.readline() if proc.stderr else ""
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m and m.group(1) != "0", line
        with urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/api/sweeps", timeout=30) as r:
            assert r.status == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def test_cli_status_limit_beyond_the_store_is_every_trial(demo_store: Path) -> None:
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "status", "demo", "-n", HUGE, "--json", "--store",
                         str(demo_store)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert len(json.loads(cp.stdout)["trials"]) == 60


def test_clients_that_never_read_their_responses_do_not_deny_the_dashboard(tmp_path: Path,
                                                                            live_server_for: Any) -> None:
    """More clients than request slots ask for a large file and read nothing: while they wait (up to the
    write timeout) the others are still answered. A request's slot was held until its last byte was sent,
    so 64 such clients made the dashboard answer 503 to everyone, again after each write timeout."""
    import socket
    import urllib.request

    from sweeplab.dashboard import create_app
    from sweeplab.dashboard.synthetic import make_synthetic_store

    root = make_synthetic_store(tmp_path / "store", trials=2, points=10, running=0)
    (root / "logs" / "big.log").write_bytes(b"x" * (8 << 20))
    app = create_app(root)
    app.max_in_flight = 4
    with live_server_for(app) as srv:
        stuck = []
        try:
            for _ in range(8):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect(("127.0.0.1", srv.port))
                s.sendall(b"GET /files/logs/big.log HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                stuck.append(s)
            for s in stuck:   # every one of them is answered (or refused) before the others ask
                s.settimeout(10)
                s.recv(1, socket.MSG_PEEK)
            for _ in range(3):
                with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/api/sweeps", timeout=10) as r:
                    assert r.status == 200
        finally:
            for s in stuck:
                s.close()


@pytest.mark.parametrize("query", ["events?trial=-1", "events?trial=-7", "trials/{n}/log?attempt=0",
                                   "trials/{n}/log?attempt=-1"])
def test_a_negative_trial_or_attempt_is_no_other_ones_data(client: Any, demo_store: Path, query: str) -> None:
    """`?trial=-1` and `?attempt=0` name no trial and no attempt: they were clamped to trial 0 and attempt 1,
    whose events and log were then served as if asked for."""
    from sweeplab.store import Store
    from sweeplab.store import queries as q

    ro = Store.open(demo_store, readonly=True)
    n = next(t["number"] for t in q.sweep_status(ro, "demo")["trials"] if t["attempts"] >= 1)
    ro.close()
    r = client.get("/api/sweeps/demo/" + query.format(n=n))
    assert r.status_code == 400, (r.status_code, r.text)
    error = json.loads(r.text)["error"]
    assert ("'trial'" in error or "'attempt'" in error) and ("0 or more" in error or "1 or more" in error), error


@pytest.mark.parametrize("args", [[b"status", b"\xc3"], [b"best", b"d\xc3mo"], [b"export", b"\xc3", b"-o", b"-"],
                                  [b"profile", b"\xc3/1"], [b"stop", b"\xc3"]])
def test_cli_a_sweep_name_that_is_not_utf8_is_a_one_line_error(demo_store: Path, args: list[bytes]) -> None:
    """A name argument that is not valid UTF-8 (a name cut inside a character, a Latin-1 terminal) reaches
    Python as lone surrogates, which SQLite cannot bind: every command ended in a UnicodeEncodeError traceback
    (as the dashboard's page did on /sweeps/%C3: tests/dashboard/test_browser_hostile_names.py)."""
    cp = subprocess.run([sys.executable.encode(), b"-m", b"sweeplab", *args, b"--store", bytes(demo_store)],
                        capture_output=True, timeout=60)
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: no sweep named '") and "sweeps: demo" in err, err


LONGER = "9" * 5000   # more digits than Python's int() reads (sys.get_int_max_str_digits(): 4300)


@pytest.mark.parametrize("path, status, fragment", [
    (f"/api/sweeps/demo/trials/{LONGER}", 404, "has no trial 99999999999999999999...(5,000 digits)"),
    (f"/api/sweeps/demo/trials/{LONGER}/curves", 404, "has no trial 99999999999999999999...(5,000 digits)"),
    (f"/api/sweeps/demo/trials/{LONGER}/log", 404, "has no trial 99999999999999999999...(5,000 digits)"),
    (f"/sweeps/demo/trials/{LONGER}", 200, None),    # the page; its API calls say the trial is not there
    (f"/api/sweeps/demo/events?trial={LONGER}", 404, "has no trial 99999999999999999999...(5,000 digits)"),
    (f"/api/sweeps/demo/curves?key=loss&trials={LONGER}", 200, None),
    (f"/api/sweeps/demo/events?limit={LONGER}&after_id={LONGER}", 200, None),
    (f"/api/sweeps/demo/trials/1/log?tail={LONGER}&attempt={LONGER}", 404,
     "trial 1 has no attempt 99999999999999999999...(5,000 digits)"),
    (f"/api/sweeps/demo/events?trial=-{LONGER}", 400, "'trial' must be a number 0 or more"),
])
def test_a_number_of_more_digits_than_int_reads_is_beyond_the_store(client: Any, path: str, status: int,
                                                                     fragment: str | None) -> None:
    """A trial number of 5,000 digits in the path was a 500 (Starlette's int convertor raised ValueError:
    "Exceeds the limit (4300 digits)", and the server logged a traceback); in a query it was a 400 saying
    '... must be an integer', for a number. It is a number beyond any the store holds, as 23 digits are."""
    r = client.get(path)
    assert r.status_code == status, (r.status_code, r.text[:300])
    if path.startswith("/api/"):
        body = json.loads(r.text)
        assert body.get("trials", []) == [] and body.get("events", []) == []
        if fragment is not None:
            assert fragment in body["error"] and len(body["error"]) < 200, body["error"]


@pytest.mark.parametrize("command", ["repro", "profile"])
def test_cli_a_trial_number_of_more_digits_than_int_reads_is_a_one_line_error(demo_store: Path,
                                                                                command: str) -> None:
    cp = subprocess.run([sys.executable, "-m", "sweeplab", command, f"demo/{LONGER}", "--store", str(demo_store)],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2, cp.stderr[-500:]
    assert len(cp.stderr.splitlines()) == 1, cp.stderr[-500:]
    assert cp.stderr.startswith("error: sweep 'demo' has no trial 99999999999999999999...(5,000 digits)"), cp.stderr


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/static/plotly.min.js", "/sweeps/demo"])
def test_a_range_of_a_unit_the_dashboard_does_not_know_is_ignored(client: Any, path: str) -> None:
    """`Range: lines=1-2` (a unit other than bytes) was a 400 on the page and its static files: a server MUST
    ignore a Range of a unit it does not understand (RFC 9110, 14.2), and answer the whole file."""
    r = client.get(path, headers={"Range": "lines=1-2"})
    assert r.status_code == 200, (r.status_code, r.text[:200])
    if path in ("/", "/static/app.js"):   # byte ranges are still served (the plotly bundle goes gzipped whole)
        assert client.get(path, headers={"Range": "bytes=0-3"}).status_code == 206
