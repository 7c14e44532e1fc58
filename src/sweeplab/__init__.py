"""sweeplab: run many ML experiments at once, from a laptop to a Ray cluster, without code changes."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
