"""Checkpoints: atomic saves with checksums, retention of the last K, any fsspec location, and a write policy.

Layout under `root` (a local path or an fsspec URL)::

    root/step-0000000042/payload.pt       the serialized object (or payload/ for a copied directory)
    root/step-0000000042/manifest.json    {"step", "format", "checksum", "bytes", "time", "seq", ...}

A checkpoint exists once its manifest does. Locally the whole directory is written under a temporary name,
fsynced and renamed into place, so a crash at any moment leaves either the complete checkpoint or none. On
object stores (no atomic rename) the payload is written first and the manifest last. Either way, loading
verifies the sha256 in the manifest first: a truncated or bit-flipped checkpoint is skipped, reported in
`CheckpointManager.corrupt`, and the previous one used. Pickle payloads are only unpickled after that check;
the checksum proves integrity, not origin, so point `root` only at storage sweeplab itself writes.

`CheckpointPolicy` decides how often `run.checkpoint` really writes (`trial.checkpoint_every`): every N steps,
every T seconds, always, or "auto", the Young/Daly interval sqrt(2 x cost x MTBF) within bounds.

One concern a file: `_manager.py` (save, retention, verified restore), `_serializers.py` (formats and the
"auto" choice), `_locations.py` (local directory or fsspec URL), `_hashing.py` (checksum while writing),
`_fencing.py` (dead attempts), `_policy.py` (when to write), `_trust.py` (what the store vouches for),
`_common.py` (names, errors, `CheckpointInfo`).
"""

from __future__ import annotations

from sweeplab.checkpoint._common import CheckpointCorruptError, CheckpointInfo, StaleAttemptError
from sweeplab.checkpoint._fencing import fence
from sweeplab.checkpoint._locations import discard, entries
from sweeplab.checkpoint._manager import CheckpointManager
from sweeplab.checkpoint._policy import CheckpointPolicy, young_daly_interval
from sweeplab.checkpoint._serializers import SERIALIZERS, Serializer, register_serializer
from sweeplab.checkpoint._trust import recorded_checksums, set_aside, untrusted

__all__ = [
    "SERIALIZERS",
    "CheckpointCorruptError",
    "CheckpointInfo",
    "CheckpointManager",
    "CheckpointPolicy",
    "Serializer",
    "StaleAttemptError",
    "discard",
    "entries",
    "fence",
    "recorded_checksums",
    "register_serializer",
    "set_aside",
    "untrusted",
    "young_daly_interval",
]
