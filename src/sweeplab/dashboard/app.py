"""The dashboard web app: `create_app` (an ASGI app over a store directory) and `serve` (run it).

Read-only by construction: the store is opened with a read-only SQLite connection, only GET/HEAD reach
the routes, and every served file is confined to the store (logs/, artifacts/) or the bundled static
files. Starlette, uvicorn and plotly are the `dashboard` extra and are imported only here, lazily.
"""

from __future__ import annotations

import errno
import socket
import sys
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sweeplab._imports import optional_import
from sweeplab.dashboard.security import LOOPBACK_NAMES, Guard, is_loopback
from sweeplab.errors import UserError

__all__ = ["bind", "create_app", "loopback_hosts", "serve", "server_config"]

_PURPOSE = "the dashboard"
SHUTDOWN_GRACE = 2   # seconds Ctrl-C waits for answers still being sent (a stalled download) before it cuts them


def create_app(store_root: Path, *, token: str | None = None,
               allowed_hosts: Iterable[str] | None = LOOPBACK_NAMES) -> Any:
    """The dashboard as an ASGI app (a Starlette app wrapped in the security `Guard`).

    `token`: when set, every request must carry it (Bearer header, or `?token=` once, then a cookie).
    `allowed_hosts`: accepted Host header names (DNS-rebinding protection); None accepts any.
    """
    optional_import("starlette", "dashboard", _PURPOSE)
    optional_import("plotly", "dashboard", _PURPOSE)
    from starlette.applications import Starlette

    from sweeplab.dashboard.reader import Reader
    from sweeplab.dashboard.routes import SweepNamePaths, build_routes

    reader = Reader(Path(store_root))

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        reader.close()

    app = Starlette(routes=build_routes(reader), lifespan=lifespan)
    app.state.reader = reader
    return Guard(SweepNamePaths(app), token=token, allowed_hosts=allowed_hosts)


def server_config(app: Any, *, host: str = "127.0.0.1", port: int = 8765, header_timeout: float | None = None,
                  max_connections: int | None = None, write_timeout: float | None = None) -> Any:
    """The uvicorn `Config` the dashboard runs under: h11 with a request-header deadline and a connection
    cap that slow clients cannot fill (see `server.py`), short keep-alive, bounded headers, no websockets.

    `header_timeout`: seconds a client has to send its request headers (default `server.HEADER_TIMEOUT`);
    `write_timeout`: seconds it may leave a response unread (default `server.WRITE_TIMEOUT`).
    """
    uvicorn = optional_import("uvicorn", "dashboard", _PURPOSE)
    from sweeplab.dashboard.server import HEADER_TIMEOUT, REQUEST_HEAD_LIMIT, WRITE_TIMEOUT, protocol_class

    protocol = protocol_class(HEADER_TIMEOUT if header_timeout is None else header_timeout, max_connections,
                              WRITE_TIMEOUT if write_timeout is None else write_timeout)
    return uvicorn.Config(app, host=host, port=port, http=protocol, ws="none", lifespan="on",
                          log_level="warning", access_log=False, server_header=False, timeout_keep_alive=5,
                          h11_max_incomplete_event_size=REQUEST_HEAD_LIMIT,
                          timeout_graceful_shutdown=SHUTDOWN_GRACE)


def loopback_hosts(host: str) -> frozenset[str]:
    """The Host header names a loopback dashboard answers to: localhost and its usual addresses, and the
    address it was bound to (`--host 127.0.0.2`, whose printed URL names it), in brackets too for IPv6."""
    bare = host.strip("[]")
    return LOOPBACK_NAMES | {bare, f"[{bare}]"}


def serve(store_root: Path, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
          insecure: bool = False, header_timeout: float | None = None) -> None:
    """Serve the dashboard until interrupted. Binding beyond loopback needs a token (or `insecure`).

    `header_timeout`: seconds a client has to send its request headers before it is disconnected.
    """
    if token is not None and not token.strip():   # `--token "$TOKEN"` with TOKEN unset
        raise UserError("--token is empty: pass a secret (e.g. --token \"$(openssl rand -hex 16)\"), or leave "
                        "--token out on the default --host 127.0.0.1")
    loopback = is_loopback(host)
    if not loopback and not token and not insecure:
        raise UserError(
            f"refusing to serve the dashboard on {host!r} without a token: anyone who can reach this "
            "machine could read your sweeps. Pass --token SECRET (then open the printed URL), or "
            "--insecure to serve without authentication anyway, or keep the default --host 127.0.0.1 "
            "(and use an SSH tunnel from elsewhere)"
        )
    if not loopback and insecure and not token:
        print(f"WARNING: serving the dashboard on {host}:{port} WITHOUT authentication (--insecure): "
              "anyone who can reach this port can read every sweep in the store.", file=sys.stderr)
    uvicorn = optional_import("uvicorn", "dashboard", _PURPOSE)
    from sweeplab.store.sqlite import Store

    Store.open(store_root, readonly=True).close()  # fail now, with a helpful message, if there is no store
    sock = bind(host, port)   # before the URL is printed: a port in use is one error line, --port 0 a real port
    port = sock.getsockname()[1]
    app = create_app(store_root, token=token, allowed_hosts=loopback_hosts(host) if loopback else None)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={quote(token, safe='')}" if token else "")
    print(f"sweeplab dashboard (read-only) for {store_root}: {url}  (Ctrl-C to stop)", file=sys.stderr)
    server = uvicorn.Server(server_config(app, host=host, port=port, header_timeout=header_timeout))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port, for uvicorn to listen on; a UserError (one line, exit 2) for a port out
    of range, a port in use or a host this machine does not have (uvicorn would log those and exit 3)."""
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be from 0 to 65535 (0: any free port); got {port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as exc:
        raise UserError(f"cannot serve the dashboard on {host!r}: {getattr(exc, 'strerror', None) or exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as uvicorn does: restart at once
        sock.bind(address)
        sock.listen(2048)   # listening when the URL is printed: an early request waits, is not refused
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}"
                        + (" (pass --port N, or --port 0 for any free port)" if exc.errno == errno.EADDRINUSE
                           else "")) from None
    return sock
