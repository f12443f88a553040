"""Old import path of :class:`ddprof.readers.flightrec.load.DumpSet` (the hang analysis, the report, the dashboard)."""

from ddprof.readers.flightrec.load import DumpSet

__all__ = ["DumpSet"]
