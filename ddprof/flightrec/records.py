"""Old import path of the dump records of :mod:`ddprof.readers.flightrec.records` (the hang analysis)."""

from ddprof.readers.flightrec.records import FRDump, FREntry

__all__ = ["FRDump", "FREntry"]
