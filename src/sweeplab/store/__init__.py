"""The embedded store: one SQLite file (WAL) plus checkpoints/, artifacts/ and logs/ beside it."""

from sweeplab.store.sqlite import SCHEMA_VERSION, Store, default_store_dir

__all__ = ["SCHEMA_VERSION", "Store", "default_store_dir"]
