"""Internals of `sweeplab.torch` (the [torch] extra): environment parsing and data helpers."""
