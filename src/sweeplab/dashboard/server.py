"""The dashboard's HTTP server: uvicorn's h11 protocol, made safe against slow clients.

uvicorn has no deadline for a request's headers (its keep-alive timer starts only after a response), and
its `limit_concurrency` counts open connections, so a few dozen clients that send their headers one byte
at a time (slowloris) would hold every slot and deny the dashboard to everyone, before any token is
checked. Here instead:

- a connection must deliver complete request headers within `header_timeout` seconds of connecting (or
  of the first byte of its next request), measured from the start, not reset by each byte; otherwise it
  is closed;
- open connections are capped only to stay clear of the file-descriptor limit, and when the cap is
  reached the connection that has waited longest for its headers makes room for the new one, so slow
  clients can never lock out a client that sends its request at once;
- a client that stops reading a response (its unsent part above uvicorn's 64 KB high-water mark) for
  `write_timeout` seconds is disconnected, so it cannot hold one of the request slots below forever;
- the number of requests being answered at once is limited by `security.Guard` (503 beyond), which
  counts requests, not connections.

Imported only by `app.serve` and tests, after the `dashboard` extra has been checked (uvicorn, h11).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from sweeplab.dashboard.security import _SECURITY_HEADERS, MAX_HEADERS, MAX_URL

__all__ = ["HEADER_TIMEOUT", "REQUEST_HEAD_LIMIT", "WRITE_TIMEOUT", "SlowClientSafeH11", "connection_cap",
           "protocol_class"]

HEADER_TIMEOUT = 10.0   # seconds a client has to send a request's headers
WRITE_TIMEOUT = 30.0    # seconds a client may leave a response's buffered bytes unread
MAX_CONNECTIONS = 1024  # open connections at most (fewer when the file-descriptor limit is low)
#: bytes of a request's head (request line and headers) h11 buffers; `security.Guard` answers 414 / 431 for
#: a URL or headers over its own limits below this, `send_400_response` for a head beyond it
REQUEST_HEAD_LIMIT = MAX_URL + MAX_HEADERS + 1024


def connection_cap() -> int:
    """`MAX_CONNECTIONS`, or fewer so that accepting never runs out of file descriptors."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return MAX_CONNECTIONS
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(16, min(MAX_CONNECTIONS, soft - 64))


class SlowClientSafeH11(H11Protocol):
    """uvicorn's H11Protocol with a header deadline per request, eviction of the slowest connection, and a
    deadline for reading a response."""

    header_timeout: float = HEADER_TIMEOUT
    write_timeout: float = WRITE_TIMEOUT
    max_connections: int = MAX_CONNECTIONS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self.waiting_since: float | None = None
        super().connection_made(transport)
        if len(self.connections) > self.max_connections and not self._make_room():
            self.transport.close()  # every connection is busy with a real request: refuse this one
            return
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            self._await_headers()  # the first bytes of the next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._headers_arrived()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        self._reading_again()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.write_timeout, self._reader_too_slow)

    def resume_writing(self) -> None:
        self._reading_again()
        super().resume_writing()

    def send_400_response(self, msg: str) -> None:
        """h11 refuses a request head longer than its buffer with uvicorn's plain 400 "Invalid HTTP request":
        say which part was too long instead, as `security.Guard` does below the limit (414 or 431)."""
        head = self.conn.trailing_data[0]
        if len(head) <= REQUEST_HEAD_LIMIT:
            super().send_400_response(msg)
            return
        status, text = (431, "request headers too large") if b"\n" in head[:MAX_URL + 64] else (414, "URL too long")
        body = json.dumps({"error": text}).encode()
        self.transport.write(b"".join([
            f"HTTP/1.1 {status} {'URI Too Long' if status == 414 else 'Request Header Fields Too Large'}\r\n".encode(),
            *(k + b": " + v + b"\r\n" for k, v in [(b"content-type", b"application/json"), (b"connection", b"close"),
                                                   (b"content-length", str(len(body)).encode()), *_SECURITY_HEADERS]),
            b"\r\n", body]))
        self.transport.close()

    # ------------------------------------------------------------------------------------------------
    def _await_headers(self) -> None:
        self.waiting_since = time.monotonic()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _headers_arrived(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self.waiting_since = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        self.waiting_since = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()

    def _reading_again(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _reader_too_slow(self) -> None:
        self._write_timer = None
        if not self.transport.is_closing():
            self.transport.abort()  # close() would wait for the unread bytes to be sent first

    def _make_room(self) -> bool:
        """Close the connection that has waited longest for its headers; False if none is waiting."""
        waiting: list[Any] = [c for c in self.connections
                              if c is not self and getattr(c, "waiting_since", None) is not None]
        if not waiting:
            return False
        oldest: Any = min(waiting, key=lambda c: c.waiting_since)
        oldest._headers_arrived()
        oldest.transport.close()
        return True


def protocol_class(header_timeout: float = HEADER_TIMEOUT, max_connections: int | None = None,
                   write_timeout: float = WRITE_TIMEOUT) -> type:
    """A `SlowClientSafeH11` subclass with these limits, to pass as uvicorn's `http=`."""
    for name, value in (("header_timeout", header_timeout), ("write_timeout", write_timeout)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    limits = {"header_timeout": float(header_timeout), "write_timeout": float(write_timeout),
              "max_connections": connection_cap() if max_connections is None else int(max_connections)}
    return type("DashboardH11Protocol", (SlowClientSafeH11,), limits)
