"""Small functions of the Ray backend's driver side: the address `ray.init` gets and probing it,
the probe task of a shared checkpoint directory, and the text of Ray errors."""

from __future__ import annotations

import os
import re
import socket

from ray.exceptions import GetTimeoutError, RayActorError, RayError, RuntimeEnvSetupError

from sweeplab.errors import UserError


def _path_exists(path: str) -> bool:
    return os.path.exists(path)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _start_error(exc: BaseException) -> str | None:
    """Why an actor could not start when the fault is its own, not its node's loss: its constructor raised
    (sweeplab missing or broken on the node: the import error's last line), its runtime_env could not be set
    up, its process died while starting. None when its node was lost (a preemption: no fault of the slot's).
    Names the node's address when Ray says it."""
    if not isinstance(exc, RayError) or isinstance(exc, GetTimeoutError) or _lost_reason(exc).startswith("Ray node"):
        return None   # not an error of the actor's (a timeout: it may still be waiting for a node)
    text = _ANSI.sub("", str(exc)).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    why = lines[-1] if lines else type(exc).__name__
    if not getattr(exc, "actor_init_failed", False) and not isinstance(exc, RuntimeEnvSetupError):
        why = _lost_reason(exc) if isinstance(exc, RayActorError) else _first_line(exc)
    ip = re.search(r"\bip(?:=|: )([0-9A-Fa-f.:]+)", text)
    return f"{why} (node {ip.group(1)})" if ip and ip.group(1) not in why else why


def _lost_reason(exc: BaseException) -> str:
    """What a dead actor's error says died: its node, or only its process (killed, OOM-killed, crashed).
    Ray's text for a dead process also advises about "node deaths": the node is judged by Ray's own
    phrases, not by the words "node" and "died" anywhere."""
    text = str(exc)
    low = text.lower()
    if getattr(exc, "actor_init_failed", False):   # its constructor raised (the text may say "node" anyway)
        return f"Ray actor could not start: {_first_line(exc)}"
    if getattr(exc, "preempted", False):
        return "Ray node preempted (spot instance reclaimed)"
    if "worker process has died" in low:
        kind = re.search(r"Worker exit type: (\w+)", text)
        return "Ray actor's process died" + (f" ({kind.group(1)})" if kind else "")
    if "its node has died" in low or "node is dead" in low or ("node" in low and ("died" in low or "dead" in low)):
        return "Ray node lost"
    return f"Ray actor died: {_first_line(exc)}"


def _init_address(address: str | None) -> str | None:
    """The address given to `ray.init`. No address means RAY_ADDRESS if set, else a NEW local cluster:
    `ray.init(address=None)` would instead join a Ray cluster it finds on this machine (the one last
    started, e.g. another user's or another sweep's), whose nodes, environment and lifetime are not ours."""
    if address is None and not os.environ.get("RAY_ADDRESS"):
        return "local"
    return address


def _probe_address(address: str) -> None:
    """Fail fast, with a clear message, when nothing listens at host:port."""
    rest = address.partition("://")[2] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"--address {address!r}: expected host:port (or ray://host:port, or auto)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=3.0):
            pass
    except OSError as exc:
        raise UserError(f"--address {address}: nothing answers there ({exc.strerror or exc}); is the Ray "
                        "head running (`ray start --head`) and the port open?") from None
