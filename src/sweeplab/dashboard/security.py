"""The dashboard's guard rails: read-only methods, request size limits, token auth, Host checks, headers,
and confinement of every served file to a directory.

Everything here is a plain ASGI middleware or a pure function (no Starlette import), so it is cheap to
test and cannot be bypassed by a route that forgets to call it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import parse_qsl, urlencode

__all__ = [
    "LOOPBACK_NAMES",
    "Guard",
    "is_loopback",
    "safe_join",
    "store_file",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
COOKIE = "sweeplab_token"
#: bytes of path + query string: names the store holds (sweeps, metrics) travel in URLs percent-encoded, up to
#: 3 bytes each, so 4 KB refused (414) a 1.4 KB name of non-ASCII letters; 64 KB is what browsers send too
MAX_URL = 64 * 1024
MAX_HEADERS = 16 * 1024   # bytes of all request headers
MAX_IN_FLIGHT = 64        # requests answered at once (more: 503); counts requests, not open connections
ALLOWED_METHODS = ("GET", "HEAD")
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+)(?::[0-9]{1,5})?\Z")   # a Host header: name[:port]

_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; font-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)  # 'unsafe-eval': Plotly's WebGL traces (scattergl in custom charts) compile shaders with Function().
_SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", _CSP.encode()),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def is_loopback(host: str) -> bool:
    """True for names and addresses that only this machine can reach."""
    h = host.strip("[]")
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def safe_join(base: Path, rel: str) -> Path | None:
    """`base / rel` when that names an existing regular file inside `base` after resolving symlinks, else None.

    Rejects absolute paths, drive letters, backslashes, NUL bytes and any `..` component outright, then
    checks the resolved path (so a symlink pointing out of `base` is refused too).
    """
    if not rel or "\x00" in rel or "\\" in rel or rel.startswith("/") or (len(rel) > 1 and rel[1] == ":"):
        return None
    parts = PurePosixPath(rel).parts
    if any(p in ("..", "") for p in parts):
        return None
    try:
        root = base.resolve(strict=True)
        target = (root / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not target.is_relative_to(root) or not target.is_file():
        return None
    return target


def store_file(store_root: Path, rel: str, dirs: Iterable[str]) -> Path | None:
    """The file `rel` names (e.g. `logs/sweep/trial-0.log`) when it is a regular file whose *real* path lies
    inside one of the store's `dirs` (e.g. `logs/`, `artifacts/`), else None.

    The first component picks the directory and the rest is joined with `safe_join` under it, so a
    symlink in `logs/` that resolves to `store.db`, or anywhere else outside `logs/`, is refused. The
    directory must itself be a real directory of the store: a `logs` that is a symlink (to /etc, or to the
    store's root, whose store.db would then lie "inside logs/") serves nothing.
    """
    first, _, rest = (rel or "").partition("/")
    if first not in set(dirs) or not rest:
        return None
    try:
        root = store_root.resolve(strict=True)
        if (root / first).is_symlink() or (root / first).resolve(strict=True) != root / first:
            return None
    except (OSError, RuntimeError):
        return None
    return safe_join(root / first, rest)


def _cookie_name(token: str) -> str:
    """The auth cookie's name, one per token: browsers keep cookies per host, not per port, so two
    dashboards on one host with the same name would replace each other's cookie (and log each other out)."""
    return f"{COOKIE}_{hmac.new(token.encode(), b'sweeplab-dashboard-cookie-name', hashlib.sha256).hexdigest()[:12]}"


def _cookie_value(token: str) -> str:
    """What the auth cookie holds: derived from the token, so the cookie never contains the token itself."""
    return hmac.new(token.encode(), b"sweeplab-dashboard-cookie", hashlib.sha256).hexdigest()


class Guard:
    """ASGI middleware in front of the whole app.

    - only GET and HEAD (anything else: 405, the dashboard never writes);
    - no request bodies (413), bounded URL (414) and header (431) sizes;
    - at most `max_in_flight` requests answered at once (503 beyond): a request counts until its response
      starts, not while a client that stops reading leaves its bytes unsent (the server's write timeout
      cuts those), so such clients cannot take every slot;
    - Host header restricted to `allowed_hosts` when given (blocks DNS-rebinding on a loopback bind);
    - with a token: `Authorization: Bearer <token>`, or `?token=<token>` once (then an HttpOnly cookie);
    - security headers (CSP, nosniff, frame denial) on every response.
    """

    def __init__(self, app: ASGIApp, *, token: str | None, allowed_hosts: Iterable[str] | None,
                 max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.token = token
        self.cookie = _cookie_value(token) if token else None
        self.cookie_name = _cookie_name(token) if token else COOKIE
        self.allowed_hosts = None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no websockets
            return
        if self.in_flight >= self.max_in_flight:
            await _send_error(send, 503, "the dashboard is busy; try again", [(b"retry-after", b"1")])
            return
        self.in_flight += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.in_flight -= 1

        async def counted_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                release()   # the work is done: a client slow to read the bytes holds no request slot
            await send(message)

        try:
            await self._http(scope, receive, counted_send)
        finally:
            release()

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refuse(scope, headers)
        if refusal is not None:
            status, message, extra = refusal
            await _send_error(send, status, message, extra)
            return
        if "range" in headers and not headers["range"].strip().lower().startswith("bytes="):
            # a unit other than bytes (`Range: lines=1-2`) was a 400 from Starlette's FileResponse; RFC 9110
            # (14.2): a server MUST ignore a Range of a unit it does not understand
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"range"]}
        set_cookie = False
        if self.token is not None:
            how = self._authenticated(scope, headers)
            if how is None:
                await _send_error(send, 401, "this dashboard needs its token: open the URL printed by "
                                  "`sweeplab dashboard` (with ?token=...) or send 'Authorization: Bearer <token>'",
                                  [(b"www-authenticate", b"Bearer")])
                return
            if how == "query":
                set_cookie = True
                if not scope["path"].startswith("/api/"):
                    await self._redirect_without_token(scope, send)
                    return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = list(_SECURITY_HEADERS)
                if set_cookie:
                    extra.append((b"set-cookie", self._cookie_header()))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    # ------------------------------------------------------------------------------------------------
    def _refuse(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str, list[Any]] | None:
        if scope["method"] not in ALLOWED_METHODS:
            return 405, "the dashboard is read-only: only GET and HEAD", [(b"allow", b"GET, HEAD")]
        if len(scope.get("raw_path") or scope["path"].encode()) + len(scope.get("query_string", b"")) > MAX_URL:
            return 414, "URL too long", []
        if sum(len(k) + len(v) for k, v in scope["headers"]) > MAX_HEADERS:
            return 431, "request headers too large", []
        if headers.get("content-length", "0").strip() not in ("", "0") or "transfer-encoding" in headers:
            return 413, "request bodies are not accepted", []
        if self.allowed_hosts is not None:
            host = headers.get("host", "")
            m = _HOST.match(host)   # a name and an optional numeric port, nothing else (`127.0.0.1:80@evil`)
            if m is None or m.group(1).lower() not in self.allowed_hosts:
                return 421, f"unexpected Host header {host!r}; open the dashboard via 127.0.0.1 or localhost", []
        return None

    def _authenticated(self, scope: Scope, headers: dict[str, str]) -> str | None:
        if self.token is None or self.cookie is None:
            return None
        auth = headers.get("authorization", "")
        # `headers` holds the bytes as Latin-1 text: back to those bytes, which a client sends as UTF-8
        if auth.lower().startswith("bearer ") and hmac.compare_digest(auth[7:].strip().encode("latin-1"),
                                                                      self.token.encode()):
            return "header"
        # the token in the URL before a cookie: the URL opened again has it removed from the address bar
        for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1")):
            if k == "token" and hmac.compare_digest(v.encode(), self.token.encode()):
                return "query"
        # Split by hand: the standard library's parser stops at the first cookie it finds malformed, and
        # browsers send every cookie of the host (other local apps' too: `prefs={"k":1}`, a bare `flag`).
        for pair in headers.get("cookie", "").split(";"):
            name, _, value = pair.partition("=")
            if name.strip() == self.cookie_name and hmac.compare_digest(value.strip().encode("latin-1"),
                                                                        self.cookie.encode()):
                return "cookie"
        return None

    def _cookie_header(self) -> bytes:
        return f"{self.cookie_name}={self.cookie}; Path=/; HttpOnly; SameSite=Strict".encode()

    async def _redirect_without_token(self, scope: Scope, send: Send) -> None:
        query = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1")) if k != "token"]
        # The path as the client sent it (a sweep name's %2F kept), with one leading '/': `//evil.example/`
        # or `/\evil.example/` (browsers read '\' as '/') would be a redirect to another site.
        path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        location = "/" + path.lstrip("/\\") + (f"?{urlencode(query)}" if query else "")
        await send({"type": "http.response.start", "status": 303, "headers": [
            (b"location", location.encode("latin-1", "replace")), (b"set-cookie", self._cookie_header()),
            (b"content-length", b"0"), *_SECURITY_HEADERS,
        ]})
        await send({"type": "http.response.body", "body": b""})


async def _send_error(send: Send, status: int, message: str, extra: list[Any]) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        *extra, *_SECURITY_HEADERS,
    ]})
    await send({"type": "http.response.body", "body": body})
