"""Old import path of :mod:`ddprof.readers.flightrec.records` (the hang analysis)."""

from ddprof.readers.flightrec.records import FRDump, FREntry, PGStatus

__all__ = ["FRDump", "FREntry", "PGStatus"]
