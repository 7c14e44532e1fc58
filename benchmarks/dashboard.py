"""Dashboard benchmark: is a big sweep fast to open?

Generates a store with one sweep of 10,000 trials and >= 1,000,000 metric points (through the store's
writer API), serves it with uvicorn on a free 127.0.0.1 port in a separate process, and times:

1. every JSON endpoint the pages use: p50 / p95 / max over --repeat requests each (warm caches);
2. opening the sweep page: the HTML, its scripts, and the API calls the page makes at load, cold (first
   request after the server starts, caches empty) and warm; Plotly.js is timed on its own (browsers
   cache it after the first visit);
3. with --browser (and /usr/bin/chromium present): the sweep page in headless Chromium, from the page's
   own performance marks: the header and the table's first page painted (`data-first`), the first screen
   with every trial painted (header, parallel coordinates, table: `data-shown`) and
   every chart drawn (`data-drawn`), cold (empty browser cache, first visit after the server started) and
   warm, against the sweeps list in the same browser as a floor.

Targets (issue 7): sweep page opens in < 1 s, API p95 < 200 ms.

    python benchmarks/dashboard.py                 # 10,000 trials, 1,000,000 points
    python benchmarks/dashboard.py --quick         # 1,000 trials, 100,000 points
    python benchmarks/dashboard.py --browser       # also time a real headless Chromium
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from sweeplab.dashboard.synthetic import make_synthetic_store
from sweeplab.store import Store

API_P95_MS = 200.0
OPEN_MS = 1000.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Client:
    """Keep-alive HTTP client, like a browser tab (gzip accepted)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def get(self, path: str) -> tuple[float, int, bytes]:
        t0 = time.perf_counter()
        try:
            self.conn.request("GET", path, headers={"accept-encoding": "gzip"})
            resp = self.conn.getresponse()
        except (http.client.HTTPException, OSError):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            self.conn.request("GET", path, headers={"accept-encoding": "gzip"})
            resp = self.conn.getresponse()
        body = resp.read()
        dt = (time.perf_counter() - t0) * 1000
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: {resp.status} {body[:200]!r}")
        return dt, resp.status, body


def _start_server(root: Path, port: int) -> subprocess.Popen[bytes]:
    code = ("import sys; from pathlib import Path; from sweeplab.dashboard import serve; "
            "serve(Path(sys.argv[1]), port=int(sys.argv[2]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-c", code, str(root), str(port)], env=env,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the dashboard server did not start") from None
            time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def _page_load(client: Client, sweep: str, curve_trials: str) -> list[tuple[str, float, int]]:
    """The requests the sweep page makes when it opens (scripts, then data), in order."""
    paths = [f"/sweeps/{sweep}", "/static/app.css", "/static/app.js", "/static/util.js", "/static/sweeps.js",
             "/static/sweep.js", "/static/pcoords.js", "/static/table.js", "/static/trial.js", "/static/compare.js",
             "/static/charts.js",
             f"/api/sweeps/{sweep}", f"/api/sweeps/{sweep}/trials?limit=50", f"/api/sweeps/{sweep}/trials",
             f"/api/sweeps/{sweep}/keys",
             f"/api/sweeps/{sweep}/events?newest=1&limit=100",
             f"/api/sweeps/{sweep}/curves?key=val_loss&trials={curve_trials}&max_points=600",
             f"/api/changes?sweep={sweep}"]
    out = []
    for p in paths:
        dt, _, body = client.get(p)
        out.append((p, dt, len(body)))
    return out


MARKS_JS = """() => Object.fromEntries(performance.getEntriesByType('mark')
    .filter((m) => m.name.startsWith('sweeplab:')).map((m) => [m.name.slice(9), m.startTime]))"""


def _visit(page: Any, url: str) -> dict[str, float]:
    """Open `url` and wait until every chart is drawn; the page's own marks, in ms from navigation start."""
    page.goto(url)
    page.wait_for_selector("body[data-drawn='1']", timeout=300_000)
    return {k: float(v) for k, v in page.evaluate(MARKS_JS).items()}


def _browser_open(base: str, sweep: str) -> dict[str, Any] | None:
    """Time the sweep page in headless Chromium (software rendering, no GPU), from the page's own
    performance marks: `first` (header and the table's first page painted, before every trial's columns
    arrive), `data` (summary and every trial's columns fetched), `parcoords`, `shown` (the first
    screen -- header, parallel coordinates, trials table -- painted) and `drawn` (every chart drawn,
    importance and learning curves included). Cold: a new browser context (empty cache) on the server's
    first visit; warm: the median of three reloads. Floor: the sweeps list (no charts) in the same browser."""
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        print("  (skipped: /usr/bin/chromium is not installed)")
        return None
    from playwright.sync_api import sync_playwright

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(chromium), args=args, headless=True)
        ctx = b.new_context(viewport={"width": 1400, "height": 900})
        page = ctx.new_page()
        page.goto("data:text/html,<p>warming up the browser, not the dashboard</p>")
        cold = _visit(page, f"{base}/sweeps/{sweep}")
        warm_runs = [_visit(page, f"{base}/sweeps/{sweep}") for _ in range(3)]
        warm = {k: statistics.median(r[k] for r in warm_runs) for k in cold}
        lines = page.get_attribute("#parcoords", "data-lines")
        floors = []
        for _ in range(3):
            page.goto(f"{base}/")
            page.wait_for_selector("body[data-ready='1']")
            floors.append(float(page.evaluate(MARKS_JS)["ready"]))
        ctx.close()
        b.close()
    floor = statistics.median(floors)
    cols = ["first", "data", "parcoords", "shown", "plotly", "history", "curves", "importance", "drawn"]
    print(f"  parallel coordinates draw {lines} lines; the page's marks, ms after navigation start:")
    print("  " + " " * 6 + "".join(f"{c:>11}" for c in cols))
    for label, m in (("cold", cold), ("warm", warm)):
        print(f"  {label:<6}" + "".join(f"{m.get(c, float('nan')):11.0f}" for c in cols))
    print(f"  floor: the sweeps list (no charts) is ready after {floor:.0f} ms warm in the same browser; "
          f"warm first screen = {warm['shown'] / floor:.1f}x that floor")
    return {"cold": cold, "warm": warm, "floor_ms": floor, "lines": lines}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="1,000 trials and 100,000 points")
    ap.add_argument("--browser", action="store_true", help="also time a real headless Chromium")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args()
    if args.quick:
        args.trials, args.points = 1_000, 100_000

    with tempfile.TemporaryDirectory(prefix="sweeplab-dash-bench-") as tmp:
        root = Path(tmp) / "store"
        t0 = time.perf_counter()
        make_synthetic_store(root, sweep="big", trials=args.trials, points=args.points, with_logs=True)
        gen_s = time.perf_counter() - t0
        s = Store.open(root, readonly=True)
        n_points = s.conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
        n_trials = s.conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
        best = [r[0] for r in s.conn.execute(
            "SELECT number FROM trials WHERE state='completed' ORDER BY value LIMIT 5")]
        pruned = [r[0] for r in s.conn.execute(
            "SELECT number FROM trials WHERE state='pruned' ORDER BY number DESC LIMIT 5")]
        s.close()
        print(f"store: {n_trials:,} trials, {n_points:,} metric points, "
              f"{(root / 'store.db').stat().st_size / 1e6:.0f} MB (generated in {gen_s:.1f} s)")
        curve_trials = ",".join(map(str, best + pruned))
        many = ",".join(map(str, range(0, 5000, 100)))

        port = _free_port()
        proc = _start_server(root, port)
        try:
            client = Client(port)
            print("\nopening the sweep page (HTML, scripts, data requests, sequentially):")
            cold = _page_load(client, "big", curve_trials)
            cold_ms = sum(dt for _, dt, _ in cold)
            for p, dt, size in cold:
                print(f"  {dt:8.1f} ms {size / 1024:9.1f} KB  {p}")
            print(f"  cold total {cold_ms:.0f} ms (first visit after the server started: caches empty)")
            warm = [sum(dt for _, dt, _ in _page_load(client, "big", curve_trials)) for _ in range(5)]
            warm_ms = statistics.median(warm)
            print(f"  warm total {warm_ms:.0f} ms (median of 5)")
            dt, _, plotly = client.get("/static/plotly.min.js")
            print(f"  Plotly.js: {dt:.0f} ms for {len(plotly) / 1e6:.1f} MB gzipped (cached by the browser after the "
                  "first visit)")
            t_imp = client.get("/api/sweeps/big/importance")[0]
            print(f"  parameter importance (fANOVA, computed once per set of completed trials, loaded "
                  f"asynchronously): {t_imp:.0f} ms cold")

            endpoints = {
                "sweeps list": "/api/sweeps",
                "sweep summary": "/api/sweeps/big",
                "trials (columns, 10k)": "/api/sweeps/big/trials",
                "status (CLI --json)": "/api/sweeps/big/status",
                "best": "/api/sweeps/big/best",
                "metric keys": "/api/sweeps/big/keys",
                "curves 10 trials": f"/api/sweeps/big/curves?key=val_loss&trials={curve_trials}&max_points=600",
                "curves 50 trials": f"/api/sweeps/big/curves?key=val_loss&trials={many}&max_points=600",
                "importance (cached)": "/api/sweeps/big/importance",
                "events (newest 100)": "/api/sweeps/big/events?newest=1&limit=100",
                "trial detail": f"/api/sweeps/big/trials/{best[0]}",
                "trial curves": f"/api/sweeps/big/trials/{best[0]}/curves?max_points=800",
                "trial log": f"/api/sweeps/big/trials/{min(best + [0])}/log",
                "changes": "/api/changes?sweep=big",
            }
            print(f"\nAPI, warm, {args.repeat} requests each:")
            print(f"  {'endpoint':<24} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'KB':>8}")
            results: dict[str, Any] = {}
            worst = 0.0
            for label, path in endpoints.items():
                client.get(path)
                times, size = [], 0
                for _ in range(args.repeat):
                    dt, _, body = client.get(path)
                    times.append(dt)
                    size = len(body)
                p50, p95 = statistics.median(times), _pct(times, 0.95)
                worst = max(worst, p95)
                results[label] = {"p50_ms": round(p50, 2), "p95_ms": round(p95, 2), "max_ms": round(max(times), 2),
                                  "bytes": size}
                print(f"  {label:<24} {p50:8.1f} {p95:8.1f} {max(times):8.1f} {size / 1024:8.1f}")

        finally:
            _stop(proc)
        browser = None
        if args.browser:   # a fresh server, so that the browser's first visit is cold on both sides
            print("\nthe sweep page in headless Chromium (a new server: its caches empty):")
            port = _free_port()
            proc = _start_server(root, port)
            try:
                browser = _browser_open(f"http://127.0.0.1:{port}", "big")
            finally:
                _stop(proc)

    ok_api = worst < API_P95_MS
    ok_open = cold_ms < OPEN_MS
    print(f"\nworst API p95: {worst:.0f} ms (target < {API_P95_MS:.0f}) {'PASS' if ok_api else 'FAIL'}")
    print(f"sweep page open, cold: {cold_ms:.0f} ms, warm: {warm_ms:.0f} ms (target < {OPEN_MS:.0f}) "
          f"{'PASS' if ok_open else 'FAIL'}")
    if browser:
        for label in ("cold", "warm"):
            m = browser[label]
            print(f"browser, {label}: header and first table page {m.get('first', float('nan')):.0f} ms, "
                  f"first screen drawn {m['shown']:.0f} ms "
                  f"({'PASS' if m['shown'] < OPEN_MS else 'FAIL'} < {OPEN_MS:.0f}), "
                  f"every chart drawn {m['drawn']:.0f} ms "
                  f"({'PASS' if m['drawn'] < OPEN_MS else 'FAIL'})")
    if args.json:
        print(json.dumps({"trials": n_trials, "points": n_points, "open_cold_ms": round(cold_ms, 1),
                          "open_warm_ms": round(warm_ms, 1), "importance_cold_ms": round(t_imp, 1),
                          "browser": browser, "endpoints": results}, indent=2))
    return 0 if ok_api and ok_open else 1


if __name__ == "__main__":
    raise SystemExit(main())
