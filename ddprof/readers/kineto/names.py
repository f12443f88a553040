"""Which file names are Kineto traces (no import beyond the standard library: :mod:`ddprof.readers.read_ahead`
asks before the program has loaded)."""

from __future__ import annotations

#: Names of Kineto trace files; in a directory tree, the collector's and ddprof's own JSON are not traces.
TRACE_SUFFIXES = (".json", ".json.gz")
_SKIP_NAMES = {"manifest.json"}


def is_trace_name(name: str) -> bool:
    """``*.json`` and ``*.json.gz``, except a run dir's ``manifest.json`` and the collector's ``*.meta.json``."""
    low = name.lower()
    return low.endswith(TRACE_SUFFIXES) and name not in _SKIP_NAMES and not low.endswith(".meta.json")
