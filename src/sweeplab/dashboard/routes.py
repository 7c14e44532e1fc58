"""The Starlette routes: the JSON API (docs/api.md), the single-page app's HTML and its static files.

Imported only by `app.create_app`, after the `dashboard` extra has been checked.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from sweeplab._values import decimal, shown_digits
from sweeplab.dashboard.importance import param_importance
from sweeplab.dashboard.reader import Reader
from sweeplab.dashboard.security import safe_join, store_file
from sweeplab.errors import StoreError, UserError
from sweeplab.store import queries

__all__ = ["SweepNamePaths", "build_routes"]

STATIC_DIR = Path(__file__).parent / "static"
MAX_LOG_TAIL = 1 << 20
MAX_TRIAL_CURVES = 50   # a trial page draws the curves of its first 50 metrics
SERVED_DIRS = ("logs", "artifacts")  # the only parts of the store /files/ may serve
_TEXT_SUFFIXES = {".log", ".txt", ".json", ".yaml", ".yml", ".csv", ".md", ".out", ".err"}


class BadRequest(ValueError):
    pass


# ------------------------------------------------------------------------------- sweep names in paths
_NAMED = ("/api/sweeps/", "/sweeps/")   # the paths whose next segment is a sweep's name


class _SweepName(Convertor[str]):
    """`{name:sweep}`: one path segment, still percent-encoded by `SweepNamePaths`, decoded here."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("sweep", _SweepName())


class _TrialNumber(Convertor[int | str]):
    """`{number:trial}`: a trial's number, as Starlette's `int` convertor reads it, except that one of more
    digits than `int()` reads (4,300) stays text, which the API answers as a trial the store does not hold
    (`int()` raised ValueError: a 500, and a traceback in the server's log)."""

    regex = "[0-9]+"

    def convert(self, value: str) -> int | str:
        number = decimal(value)
        return value if number is None else number

    def to_string(self, value: int | str) -> str:
        return str(value)


register_url_convertor("trial", _TrialNumber())


class SweepNamePaths:
    """ASGI wrapper: the sweep name's segment of the path is kept percent-encoded for routing.

    A sweep's name may hold '/' (`--name team/lr-sweep`, sent by the page as `team%2Flr-sweep`); the server
    decodes the path before routing, which would make it two segments and no route would match. Here the
    name's segment is taken from the raw path and re-encoded whole, and `{name:sweep}` decodes it again.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:   # `state`, `routes`... of the wrapped Starlette app
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw:
            text = raw.decode("utf-8", "replace")
            for prefix in _NAMED:
                if text.startswith(prefix):
                    segment, sep, rest = text[len(prefix):].partition("/")
                    scope = {**scope, "path": prefix + quote(unquote(segment), safe="") + sep + unquote(rest)}
                    break
        await self.app(scope, receive, send)


class FileSnapshot:
    """A store file as it is when its response starts: exactly the bytes its `Content-Length` declares.

    Starlette's `FileResponse` declares the size it found and then reads to the end of the file, so a log
    that a running trial appends to while it is sent overflowed its own `Content-Length` (h11 refused the
    chunk: the client lost the file's last bytes and the server logged a traceback). Here the size is taken
    from the open file and never exceeded; a file cut shorter meanwhile ends the connection early.
    """

    chunk_size = 64 * 1024

    def __init__(self, path: Path, media_type: str, filename: str | None = None) -> None:
        self.path = path
        self.headers = [(b"content-type", media_type.encode()), (b"cache-control", b"no-cache")]
        if filename is not None:
            disposition = "attachment; filename*=utf-8''" + quote(filename, safe="")
            self.headers.append((b"content-disposition", disposition.encode()))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        import anyio

        try:
            fh = await anyio.to_thread.run_sync(self.path.open, "rb")
        except OSError:
            body = _json_bytes({"error": "not found"})
            await send({"type": "http.response.start", "status": 404, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        try:
            size = os.fstat(fh.fileno()).st_size
            await send({"type": "http.response.start", "status": 200,
                        "headers": [*self.headers, (b"content-length", str(size).encode())]})
            if scope["method"] == "HEAD" or size == 0:
                await send({"type": "http.response.body", "body": b""})
                return
            async with anyio.create_task_group() as tg:
                async def stream() -> None:
                    left = size
                    while left > 0:
                        chunk = await anyio.to_thread.run_sync(fh.read, min(self.chunk_size, left))
                        if not chunk:
                            break   # cut shorter since: too few bytes, the server closes the connection
                        left -= len(chunk)
                        await send({"type": "http.response.body", "body": chunk, "more_body": left > 0})
                    tg.cancel_scope.cancel()

                tg.start_soon(stream)
                while (await receive())["type"] != "http.disconnect":   # stop reading for a gone client
                    pass
                tg.cancel_scope.cancel()
        finally:
            fh.close()


def _json_bytes(obj: Any) -> bytes:
    try:
        return json.dumps(obj, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:  # a NaN slipped through: clean it rather than emit invalid JSON
        return json.dumps(queries.json_safe(obj), allow_nan=False, separators=(",", ":")).encode()


def _json(obj: Any, status: int = 200, etag: str | None = None) -> Response:
    headers = {"cache-control": "no-cache"}
    if etag:
        headers["etag"] = etag
    return Response(_json_bytes(obj), status_code=status, media_type="application/json", headers=headers)


def _integer(name: str, raw: str) -> int:
    """`raw` as an int; one of more digits than `int()` reads is 2**64 (or -2**64): beyond any trial, event
    id or size, as a number of 20 digits is."""
    try:
        value = decimal(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name!r} must be an integer, got {shown_digits(raw)!r}") from None
    return value if value is not None else -(1 << 64) if raw.strip().startswith("-") else 1 << 64


def _int(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    return max(lo, min(hi, _integer(name, raw)))


def _number(request: Request, name: str, lo: int) -> int:
    """A query parameter that names one thing (`trial`, `attempt`): an integer from `lo` on. Unlike a size
    (`limit`, `tail`), it is never clamped: `?trial=-1` clamped to 0 answered with trial 0's events, and
    `?attempt=0` with attempt 1's log; and `?trial=99999999999999999999999` clamped to 2**62 was answered
    "has no trial 4611686018427387904". One past SQLite's integers names nothing, as any other absent one;
    one of more digits than `int()` reads is not found by name."""
    raw = request.query_params.get(name, "")
    value = _integer(name, raw)
    if value < lo:
        raise BadRequest(f"query parameter {name!r} must be a number {lo} or more, got {shown_digits(raw)!r}")
    if decimal(raw) is None:
        owner = f"trial {request.path_params['number']}" if name == "attempt" \
            else f"sweep {request.path_params['name']!r}"
        raise UserError(f"{owner} has no {name} {shown_digits(raw)}")
    return value


def _int_list(request: Request, name: str, limit: int) -> list[int]:
    raw = request.query_params.get(name, "")
    try:
        out = [_integer(name, x) for x in raw.split(",") if x.strip()]
    except BadRequest:
        raise BadRequest(f"query parameter {name!r} must be comma-separated integers") from None
    if len(out) > limit:
        raise BadRequest(f"at most {limit} values in {name!r}")
    return out


def _guarded(fn: Callable[[Request], Response]) -> Callable[[Request], Response]:
    """Map our errors to HTTP: unknown sweep/trial -> 404, bad query -> 400, store unreadable -> 503."""

    def endpoint(request: Request) -> Response:
        try:
            return fn(request)
        except BadRequest as exc:
            return _json({"error": str(exc)}, 400)
        except UserError as exc:
            status = 503 if "no sweeplab store" in str(exc) or isinstance(exc, StoreError) else 404
            return _json({"error": str(exc)}, status)
        except StoreError as exc:
            return _json({"error": str(exc)}, 503)

    endpoint.__name__ = fn.__name__
    return endpoint


def _not_modified(request: Request, etag: str) -> bool:
    """Whether `If-None-Match` matches `etag` as RFC 9110 13.1.2 reads it: `*` (the resource exists: it is
    answered), or a comma-separated list of entity tags compared weakly (`W/"x"` matches `"x"`)."""
    header = request.headers.get("if-none-match")
    if header is None:
        return False
    if header.strip() == "*":
        return True
    strong = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == strong for tag in header.split(","))


class _Plotly:
    """The Plotly.js bundle shipped inside the `plotly` Python package, gzipped once in memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gz: bytes | None = None
        self.path: Path | None = None

    def locate(self) -> Path:
        if self.path is None:
            import plotly  # type: ignore[import-untyped]

            self.path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
        return self.path

    def gzipped(self) -> bytes:
        with self._lock:
            if self._gz is None:
                self._gz = gzip.compress(self.locate().read_bytes(), compresslevel=6, mtime=0)
            return self._gz


def build_routes(reader: Reader) -> list[Route]:
    plotly = _Plotly()
    etag_plotly: list[str] = []

    def sweep_id(name: str) -> int:
        return queries.sweep_id(reader.store(), name)  # a helpful UserError when there is none

    def trial_number(request: Request) -> tuple[str, int]:
        """The sweep's name and the trial's number in the path (a number of more digits than `int()` reads
        is no trial of the sweep)."""
        name, number = request.path_params["name"], request.path_params["number"]
        if isinstance(number, str):
            sweep_id(name)
            raise UserError(f"sweep {name!r} has no trial {shown_digits(number)}")
        return name, number

    # ------------------------------------------------------------------------------------------- pages
    def page(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html",
                            headers={"cache-control": "no-cache"})

    def static(request: Request) -> Response:
        rel = request.path_params["path"]
        if rel == "plotly.min.js":
            path = plotly.locate()
            if not etag_plotly:
                st = path.stat()
                etag_plotly.append('"' + hashlib.sha1(f"{path}:{st.st_size}:{st.st_mtime}".encode())
                                   .hexdigest()[:16] + '"')
            headers = {"cache-control": "public, max-age=3600", "etag": etag_plotly[0],
                       "vary": "accept-encoding"}
            if _not_modified(request, etag_plotly[0]):
                return Response(status_code=304, headers=headers)
            if "gzip" in request.headers.get("accept-encoding", ""):
                return Response(plotly.gzipped(), media_type="text/javascript",
                                headers={**headers, "content-encoding": "gzip"})
            return FileResponse(path, media_type="text/javascript", headers=headers)
        target = safe_join(STATIC_DIR, rel)
        if target is None:
            return _json({"error": "not found"}, 404)
        media = {".js": "text/javascript", ".css": "text/css", ".html": "text/html",
                 ".svg": "image/svg+xml", ".png": "image/png"}.get(target.suffix, "application/octet-stream")
        return FileResponse(target, media_type=media, headers={"cache-control": "no-cache"})

    def files(request: Request) -> Response:
        target = store_file(reader.root, request.path_params["path"], SERVED_DIRS)
        if target is None:
            return _json({"error": "not found"}, 404)
        if target.suffix.lower() in _TEXT_SUFFIXES:
            return FileSnapshot(target, media_type="text/plain; charset=utf-8")  # type: ignore[return-value]
        return FileSnapshot(target, media_type="application/octet-stream",  # type: ignore[return-value]
                            filename=target.name)

    # --------------------------------------------------------------------------------------------- api
    def front_size(sweep: dict[str, Any]) -> dict[str, Any]:
        """A sweep with several objectives gets "front": how many trials its feasible Pareto front holds
        (what `sweeplab best` lists), cached until the store changes."""
        if len(sweep.get("objectives") or []) < 2:
            return sweep
        name = sweep["name"]
        size = reader.cached("front", name, reader.version(name),
                             lambda: len(queries.pareto_front(reader.store(), name)))
        return {**sweep, "front": size}

    def api_sweeps(request: Request) -> Response:
        return _json({"sweeps": [front_size(s) for s in queries.list_sweeps(reader.store())]})

    def api_sweep(request: Request) -> Response:
        summary = queries.sweep_summary(reader.store(), request.path_params["name"])
        return _json({**summary, "sweep": front_size(summary["sweep"])})

    def api_hypervolume(request: Request) -> Response:
        name = request.path_params["name"]
        return _json({"sweep": name, **queries.hypervolume_series(reader.store(), name)})

    def api_status(request: Request) -> Response:
        name = request.path_params["name"]
        body = reader.cached("status", name, reader.version(name),
                             lambda: _json_bytes(queries.sweep_status(reader.store(), name)))
        return Response(body, media_type="application/json", headers={"cache-control": "no-cache"})

    def api_best(request: Request) -> Response:
        return _json({"best": queries.best_trial(reader.store(), request.path_params["name"])})

    def api_trials(request: Request) -> Response:
        name = request.path_params["name"]
        version = reader.version(name)
        if request.query_params.get("since") not in (None, ""):   # a live page: the trials changed since
            since = _int(request, "since", 0, 0, 1 << 62)
            return _json({"version": version, **queries.trial_columns(reader.store(), name, since=since)})
        if request.query_params.get("limit") not in (None, ""):   # the table's first page, before the rest
            limit = _int(request, "limit", 50, 1, 1000)
            return _json({"version": version, **queries.trial_columns(reader.store(), name, limit=limit)})
        etag = '"t-' + hashlib.sha1(version.encode()).hexdigest()[:20] + '"'
        if _not_modified(request, etag):
            return Response(status_code=304, headers={"etag": etag, "cache-control": "no-cache"})
        body = reader.cached("trials", name, version,
                             lambda: _json_bytes({"version": version,
                                                  **queries.trial_columns(reader.store(), name)}))
        return Response(body, media_type="application/json", headers={"etag": etag, "cache-control": "no-cache"})

    def api_keys(request: Request) -> Response:
        name = request.path_params["name"]
        sid = sweep_id(name)
        keys = reader.cached("keys", name, reader.version(name), lambda: reader.sweep_metric_keys(sid))
        return _json({"sweep": name, "keys": keys})

    def api_curves(request: Request) -> Response:
        name = request.path_params["name"]
        key = request.query_params.get("key")
        if key is None:   # absent; `?key=` is the metric named "" (a store holds it: it is plotted too)
            raise BadRequest("query parameter 'key' (a metric name) is required")
        numbers = _int_list(request, "trials", queries.MAX_CURVE_TRIALS)
        max_points = _int(request, "max_points", 1000, 4, 10_000)
        return _json(queries.curves(reader.store(), name, numbers, key, max_points))

    def api_importance(request: Request) -> Response:
        name = request.path_params["name"]
        basis = request.query_params.get("basis") or "auto"
        if basis not in ("auto", "final", "rung"):
            raise BadRequest("query parameter 'basis' must be one of auto, final, rung")
        sid = sweep_id(name)
        version = reader.settled_version(f"importance:{basis}", name, reader.finished_version(name))

        def compute() -> dict[str, Any]:
            store = reader.store()
            cols = queries.trial_columns(store, name, with_metrics=False)   # final metrics: not needed
            metric = cols["sweep"].get("metric")
            keys = reader.sweep_metric_keys(sid)
            rung = queries.rung_values(store, name, metric) if metric and metric in keys else None
            return param_importance(cols, rung=rung, basis=basis)

        return _json({"sweep": name, **reader.cached(f"importance:{basis}", name, version, compute)})

    def api_events(request: Request) -> Response:
        name = request.path_params["name"]
        trial = request.query_params.get("trial")
        evs = queries.events(
            reader.store(), name,
            trial=None if trial in (None, "") else _number(request, "trial", 0),
            after_id=_int(request, "after_id", 0, 0, 1 << 62),
            limit=_int(request, "limit", 500, 1, 5000),
            newest=request.query_params.get("newest") in ("1", "true"),
        )
        return _json({"sweep": name, "events": evs})

    def api_trial(request: Request) -> Response:
        """One trial's details, cached until the store changes: a trial of 100,000 metrics is 2 MB of JSON that
        took seconds to read and encode on every refresh of its page."""
        name, number = trial_number(request)
        body = reader.cached("trial", name, (number, reader.version(name)),
                             lambda: _json_bytes(queries.trial_detail(reader.store(), name, number)))
        return Response(body, media_type="application/json", headers={"cache-control": "no-cache"})

    def api_trial_curves(request: Request) -> Response:
        """The trial's first 50 metrics' curves, each downsampled server-side (`queries.downsample`: min and max
        of each bucket, the first and last points, a marker where values were not finite), cached until the
        store changes. Only the keys are read, not the whole trial (`trial_detail`: every final metric)."""
        name, number = trial_number(request)
        max_points = _int(request, "max_points", 1000, 4, 10_000)

        def compute() -> bytes:
            store = reader.store()
            state, keys = queries.trial_state_and_keys(store, name, number, limit=MAX_TRIAL_CURVES)
            out = {}
            for key in keys:
                c = queries.curves(store, name, [number], key, max_points)["trials"]
                if c:
                    out[key] = {"n": c[0]["n"], "step": c[0]["step"], "values": c[0]["values"]}
            return _json_bytes({"sweep": name, "number": number, "state": state, "curves": out})

        body = reader.cached("trial-curves", name, (number, max_points, reader.version(name)), compute)
        return Response(body, media_type="application/json", headers={"cache-control": "no-cache"})

    def api_log(request: Request) -> Response:
        name, number = trial_number(request)
        detail = queries.trial_detail(reader.store(), name, number)
        attempt = request.query_params.get("attempt")
        rel = detail["log_path"]
        if attempt not in (None, ""):
            n = _number(request, "attempt", 1)
            found = [a for a in detail["attempts"] if a["number"] == n]
            if not found:
                had = [int(a["number"]) for a in detail["attempts"]]
                which = "no attempts" if not had else f"attempt {had[0]}" if len(had) == 1 else \
                    f"attempts {min(had)} to {max(had)}"
                return _json({"error": f"trial {number} has no attempt {n} (it has {which})"}, 404)
            rel = found[0]["log_path"]
        target = store_file(reader.root, rel, SERVED_DIRS) if rel else None
        if target is None:
            return _json({"error": f"trial {number} has no log file in the store", "path": rel}, 404)
        tail = _int(request, "tail", 64 * 1024, 1, MAX_LOG_TAIL)
        with target.open("rb") as fh:
            for _ in range(3):   # a capped log (trial.log_max) cut between its size and the read: look again
                size = os.fstat(fh.fileno()).st_size
                fh.seek(max(0, size - tail))
                data = fh.read(tail)
                if data or not size:
                    break
        text = data.decode("utf-8", errors="replace")
        if size > tail and "\n" in text:
            text = text.split("\n", 1)[1]  # drop the partial first line
        return _json({"sweep": name, "number": number, "path": rel, "size": size,
                      "truncated": size > tail, "text": text})

    def api_changes(request: Request) -> Response:
        sweep = request.query_params.get("sweep") or None
        return _json(queries.changed_since(reader.store(), sweep, request.query_params.get("token")))

    def api_missing(request: Request) -> Response:
        return _json({"error": "no such API endpoint; see docs/api.md"}, 404)

    def g(fn: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """An API endpoint: HTTP errors for ours, and every read of one call from one snapshot."""

        def in_snapshot(request: Request) -> Response:
            with reader.snapshot():
                return fn(request)

        in_snapshot.__name__ = fn.__name__
        return _guarded(in_snapshot)

    return [
        Route("/", page),
        Route("/sweeps/{name:sweep}", page),
        Route("/sweeps/{name:sweep}/compare", page),
        Route("/sweeps/{name:sweep}/trials/{number:trial}", page),
        Route("/static/{path:path}", static),
        Route("/files/{path:path}", files),
        Route("/api/sweeps", g(api_sweeps)),
        Route("/api/sweeps/{name:sweep}", g(api_sweep)),
        Route("/api/sweeps/{name:sweep}/status", g(api_status)),
        Route("/api/sweeps/{name:sweep}/best", g(api_best)),
        Route("/api/sweeps/{name:sweep}/trials", g(api_trials)),
        Route("/api/sweeps/{name:sweep}/keys", g(api_keys)),
        Route("/api/sweeps/{name:sweep}/hypervolume", g(api_hypervolume)),
        Route("/api/sweeps/{name:sweep}/curves", g(api_curves)),
        Route("/api/sweeps/{name:sweep}/importance", g(api_importance)),
        Route("/api/sweeps/{name:sweep}/events", g(api_events)),
        Route("/api/sweeps/{name:sweep}/trials/{number:trial}", g(api_trial)),
        Route("/api/sweeps/{name:sweep}/trials/{number:trial}/curves", g(api_trial_curves)),
        Route("/api/sweeps/{name:sweep}/trials/{number:trial}/log", g(api_log)),
        Route("/api/changes", g(api_changes)),
        Route("/api/{rest:path}", api_missing),
    ]
