"""The Flight Recorder dump reader (:class:`~ddprof.readers.base.DumpReader`): one file -> one rank's
:class:`~.records.FRDump`, and the directory-level finding and loading the hang diagnosis uses (:mod:`.load`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from ddprof.readers.flightrec.load import (
    DumpSet,
    find_dump_files,
    is_flight_recorder_dir,
    load_dump,
    load_dump_dir,
    load_dump_files,
    looks_like_dump,
)

if TYPE_CHECKING:
    from ddprof.readers.flightrec.records import FRDump

#: Names PyTorch and ddprof's collector give dumps: ``fr_trace_rank_3``, ``nccl_trace_rank_3``, ``_dump_3``.
_DUMP_NAME = re.compile(r"(?:^(?:fr|nccl)_trace_rank_|_dump_)\d+$")


class FlightRecorderReader:
    """NCCL Flight Recorder dumps (pickle or JSON), read for the hang diagnosis, never into the event store."""

    name = "flight-recorder"
    describes = "an NCCL Flight Recorder dump"
    names = "fr_trace_rank_N, nccl_trace_rank_N, *_dump_N"

    def claims_name(self, name: str) -> bool:
        return _DUMP_NAME.search(name) is not None

    def recognise(self, name: str, head: bytes) -> bool:
        return looks_like_dump(name, head)

    def load(self, path: Path) -> FRDump:
        return load_dump(path)

    def is_dump_dir(self, path: str | Path) -> bool:
        return is_flight_recorder_dir(path)

    def load_dir(self, path: str | Path) -> DumpSet:
        return load_dump_dir(path)

    def find(self, root: str | Path) -> list[Path]:
        return find_dump_files(root)

    def load_files(self, files: list[Path], *, source: str) -> DumpSet:
        return load_dump_files(files, source=source)
