"""Ray token authentication, checked before `ray.init` so that a missing or wrong token is one clear error.

Recent Ray clusters may require a token (`RAY_AUTH_MODE=token` on the nodes, or `ray start` finding a
token in ~/.ray/auth_token). A client that connects to such a cluster at an explicit address sends the
token only when its own `RAY_AUTH_MODE` is `token`; without it, `ray.init` logs `InvalidAuthToken` warnings
for about 20 s and then reports a generic connection failure. `check_token` asks the cluster's GCS one
cheap question (its cluster id) with exactly the credentials `ray.init` would send, and turns a refusal into
a `BackendError` that names the cause and the fix. Any other outcome (no such RPC, TLS, a timeout) is left
to `ray.init` to report.
"""

from __future__ import annotations

import os
from pathlib import Path

from sweeplab.errors import BackendError

__all__ = ["check_token", "token_help"]

_PROBE = "/ray.rpc.NodeInfoGcsService/GetClusterId"
_TIMEOUT = 10.0


def token_help() -> str:
    """How to give this process the cluster's token (the same text in errors and docs)."""
    return ("export RAY_AUTH_MODE=token and the cluster's token as RAY_AUTH_TOKEN=<token>, or "
            "RAY_AUTH_TOKEN_PATH=<file holding it> (default ~/.ray/auth_token); `ray get-auth-token` on the "
            "head node prints it; see docs/scale-out.md#authentication")


def _token_source() -> str:
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return f"RAY_AUTH_TOKEN_PATH ({os.environ['RAY_AUTH_TOKEN_PATH']})"
    return str(Path("~/.ray/auth_token"))


def _metadata(where: str) -> tuple[tuple[str, str], ...] | None:
    """The gRPC metadata `ray.init` would send; None when this Ray has no token authentication."""
    try:
        # ray ships _raylet.pyi without this class, though the compiled module has it
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]
        from ray.exceptions import AuthenticationError
    except ImportError:   # a Ray before token authentication: nothing to check
        return None
    loader = AuthenticationTokenLoader.instance()
    try:
        if not loader.has_token():
            return ()
        return tuple((str(k), str(v)) for k, v in loader.get_token_for_http_header().items())
    except AuthenticationError:
        raise BackendError(f"{where}: RAY_AUTH_MODE=token but no Ray authentication token was found; "
                           f"{token_help()}") from None


def check_token(address: str) -> None:
    """Raise BackendError when the Ray cluster at host:port (an explicit address) refuses our credentials."""
    where = f"--address {address}"
    metadata = _metadata(where)
    if metadata is None:
        return
    import grpc

    channel = grpc.insecure_channel(address)
    try:
        call = channel.unary_unary(_PROBE, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        call(b"", timeout=_TIMEOUT, metadata=metadata)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.UNAUTHENTICATED:
            return
        if metadata:
            raise BackendError(
                f"{where}: the Ray cluster rejected this process's authentication token (from "
                f"{_token_source()}): it is not that cluster's token; give it the right one: {token_help()}"
            ) from None
        local = ""
        if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or \
                (Path.home() / ".ray" / "auth_token").exists():
            local = (f" (a token is set here, in {_token_source()}, but Ray sends it to an explicit address "
                     "only when RAY_AUTH_MODE=token)")
        raise BackendError(
            f"{where}: the Ray cluster requires token authentication and this process sent no token{local}; "
            f"{token_help()}"
        ) from None
    finally:
        channel.close()
