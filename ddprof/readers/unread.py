"""Formats ddprof recognises but does not read: each is refused naming what the file is.

Recognition looks at the name and the first bytes only; for an SQLite file it also lists the database's
tables (read-only, the file never changed): Nsight Systems' export is told apart from any other database
by its tables. When a reader for one of them arrives (:mod:`ddprof.readers.registry`), its entry here goes.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

SQLITE_MAGIC = b"SQLite format 3\x00"
#: Tables every Nsight Systems SQLite export holds (``nsys export --type sqlite``), whatever was traced.
NSYS_TABLES = frozenset({"StringIds", "TARGET_INFO_SESSION_START_TIME"})
#: Tables of the activity kinds Nsight Systems exports; one is enough beside :data:`NSYS_TABLES`.
NSYS_ACTIVITY_PREFIXES = ("CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS", "OSRT_API", "CUDA_GPU_MEMORY_USAGE_EVENTS")
PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".perfetto")
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


@dataclass(frozen=True)
class Refusal:
    """What a file recognised but not read is, and why it is not read (both end up in the message)."""

    what: str
    why: str = "not supported yet"

    def message(self) -> str:
        return f"{self.what}: {self.why}"


def refusal(path: Path, head: bytes) -> Refusal | None:
    """What ``path`` is when it is a format ddprof knows but does not read (module doc), else None."""
    name = path.name.lower()
    if head.startswith(SQLITE_MAGIC):
        tables = sorted(_tables(path) or ())
        if NSYS_TABLES.issubset(tables) and any(t.startswith(NSYS_ACTIVITY_PREFIXES) for t in tables):
            return Refusal("an Nsight Systems SQLite export")
        listed = f" (tables: {', '.join(tables[:8])}{', ...' if len(tables) > 8 else ''})" if tables else ""
        return Refusal(f"an SQLite database that is not an Nsight Systems export{listed}", "not a format ddprof reads")
    if name.endswith(NSYS_REPORT_SUFFIXES):
        return Refusal("an Nsight Systems report", "not supported yet (a reader would take its SQLite export, "
                                                   "nsys export --type sqlite, not the report)")
    if name.endswith(PERFETTO_SUFFIXES) or _perfetto_packet(head):
        return Refusal("a Perfetto protobuf trace")
    return None


def _tables(path: Path) -> set[str] | None:
    """The names of an SQLite file's tables, read-only; None when it cannot be opened as a database."""
    try:
        con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return None
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except sqlite3.Error:
        return None
    finally:
        con.close()


def _perfetto_packet(head: bytes) -> bool:
    """Whether the bytes start like a Perfetto trace: a ``TracePacket`` (field 1, length-delimited: byte
    0x0a, then a varint length) that is binary, not text (a text file may start with a newline, 0x0a)."""
    if len(head) < 4 or head[0] != 0x0A:
        return False
    length, shift, i = 0, 0, 1
    while i < min(len(head), 6):
        b = head[i]
        length |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            break
        shift += 7
    else:
        return False
    body = head[i:i + min(length, 64)]
    return length > 0 and any(c < 0x09 or 0x0D < c < 0x20 for c in body)
