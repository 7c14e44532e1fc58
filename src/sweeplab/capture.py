"""Failure capture: objects a trial registered with `run.capture(name, obj)`, saved when it fails.

Saved with pickle beside a manifest holding their SHA-256; `load_captures` unpickles only a file whose
checksum matches the manifest sweeplab wrote, inside the store (nothing unpickles data it did not write).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["capture_manifest", "environment_facts", "failure_reason", "load_captures", "save_captures"]


def failure_reason(exc: BaseException, loading: Mapping[str, Any] | None = None) -> str:
    """One line saying why a trial failed: `Type: message`, at most 500 characters.

    An error re-raised from a DataLoader worker process carries the worker's whole traceback in its message
    ("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback ..."): the reason is the
    original error line, with where it happened. `loading` (`Run.loading_failure`) adds which batch of
    which `run.track` loop was being fetched."""
    message = str(exc).strip()
    where: list[str] = []
    head, _, rest = message.partition("\n")
    if head.startswith("Caught ") and "Original Traceback" in rest:
        last = [line for line in rest.splitlines() if line.strip()]
        reason = last[-1].strip() if last else f"{type(exc).__name__}: {head}"
        place = head.split(" ", 2)[-1].rstrip(".")          # "in DataLoader worker process 0"
        if place.startswith("in "):
            where.append(place)
    else:
        reason = f"{type(exc).__name__}: {message}".strip()
    if loading:
        where.append(f"while loading batch {loading['batch']} of run.track loop {loading['loop']}")
    if where:
        reason += f" ({'; '.join(where)})"
    return reason[:500]


def save_captures(objects: Mapping[str, Any], directory: str, *, stale: Sequence[str] = (),
                  loading: Mapping[str, Any] | None = None) -> str:
    """Pickle `objects` into `directory`/<uuid>.pkl with a manifest; returns the payload path.

    `stale`: names registered in an earlier step than the one that failed (the failure was in fetching the
    next batch); the manifest lists them, with `loading` ({"loop", "batch"}), so that repro does not replay
    them as the failing input."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    saved: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for name, obj in objects.items():
        try:
            pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            saved[name] = obj
        except Exception as exc:
            skipped[name] = f"{type(exc).__name__}: {exc}"
    payload = pickle.dumps(saved, protocol=pickle.HIGHEST_PROTOCOL)
    path = root / f"capture-{uuid.uuid4().hex[:12]}.pkl"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(payload)
    os.replace(tmp, path)
    manifest = {"sha256": hashlib.sha256(payload).hexdigest(), "names": sorted(saved),
                "skipped": skipped, "time": time.time(), "stale": sorted(set(stale) & set(saved))}
    if loading:
        manifest["failed_loading"] = {"loop": loading["loop"], "batch": loading["batch"]}
    path.with_suffix(".json").write_text(json.dumps(manifest))
    return str(path)


def capture_manifest(path: str) -> dict[str, Any]:
    """The manifest written beside a capture (names, skipped, stale, failed_loading, sha256)."""
    data = json.loads(Path(path).with_suffix(".json").read_text())
    return data if isinstance(data, dict) else {}


def load_captures(path: str) -> dict[str, Any]:
    p = Path(path)
    manifest = json.loads(p.with_suffix(".json").read_text())
    payload = p.read_bytes()
    if hashlib.sha256(payload).hexdigest() != manifest.get("sha256"):
        raise ValueError(f"capture {p} does not match its manifest; refusing to load it")
    return pickle.loads(payload)


def environment_facts(cwd: str | None = None) -> dict[str, Any]:
    """Git commit and dirty flag, Python, host, versions of the imported ML frameworks."""
    facts: dict[str, Any] = {"python": sys.version.split()[0], "host": platform.node(),
                             "platform": platform.platform()}
    for mod in ("numpy", "torch", "xgboost", "sklearn", "jax", "lightning", "transformers"):
        m = sys.modules.get(mod)
        if m is not None:
            facts[mod] = getattr(m, "__version__", "?")
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                                timeout=5)
        if commit.returncode == 0:
            facts["git_commit"] = commit.stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain"], cwd=cwd, capture_output=True,
                                   text=True, timeout=5)
            facts["git_dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        pass
    return facts
