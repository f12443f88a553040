"""Old import path of :mod:`ddprof.readers.flightrec.load` (the hang analysis, the report, the dashboard)."""

from ddprof.readers.flightrec.load import DumpSet, find_dump_files, load_dump, load_dump_dir, load_dump_files

__all__ = ["DumpSet", "find_dump_files", "load_dump", "load_dump_dir", "load_dump_files"]
