"""The Nsight Systems reader: an SQLite export (``nsys export --type sqlite``), one rank per process.

The report itself (``.nsys-rep``, ``.qdrep``) is Nsight Systems' own format: ddprof reads the SQLite file
the user's ``nsys export --type sqlite REPORT.nsys-rep`` writes, and refuses the report saying so
(:mod:`ddprof.readers.unread`).

An export is recognised by its first bytes (an SQLite database) and told apart from any other database
when opened, by its tables (:func:`.export.is_export`): another database is refused naming its tables.
Opening reads the export's clock and processes (:mod:`.export`: which rank each process is); reading
builds their rows (:mod:`.events`). An export is opened as one :class:`Opened` per process (``members``,
one or several), which the ingest pipeline stores as separate ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddprof.errors import BadInputError
from ddprof.readers.base import Identity, Opened
from ddprof.readers.source import file_sha1

if TYPE_CHECKING:  # SQLite and what reads an export are loaded when one is opened, not to recognise a file
    import polars as pl

    from ddprof.vocabulary.collective_ops import CommRule

#: The first bytes of an SQLite database.
SQLITE_MAGIC = b"SQLite format 3\x00"
#: Names of exports in a directory tree (what ``nsys export --type sqlite`` writes).
SUFFIXES = (".sqlite", ".sqlite3")
#: Where an export records a rank (torchrun's ``RANK``, ``WORLD_SIZE`` in the launched process's environment).
CLAIMS_IN = "META_DATA_CAPTURE"


class NsysReader:
    """Nsight Systems SQLite exports (:class:`~ddprof.readers.base.EventReader`)."""

    name = "nsys"
    describes = "an Nsight Systems SQLite export"
    names = "*.sqlite"

    def claims_name(self, name: str) -> bool:
        return name.lower().endswith(SUFFIXES)

    def recognise(self, name: str, head: bytes) -> bool:
        """Any SQLite database: :meth:`open` tells an export from another database by its tables."""
        return head.startswith(SQLITE_MAGIC)

    def open(self, path: Path) -> Opened:
        import sqlite3

        from ddprof.readers.nsys.events import member_counts
        from ddprof.readers.nsys.export import connect, open_export

        export = open_export(path)
        if not export.members:
            raise BadInputError("an Nsight Systems export with no GPU activity (no CUDA kernel, copy or set "
                                "traced: was it profiled with --trace=cuda?)", path=path)
        con = connect(path)
        try:
            counts = member_counts(con, export)
        except sqlite3.DatabaseError as exc:
            raise BadInputError(f"a damaged SQLite file ({exc})", path=path) from None
        finally:
            con.close()
        try:
            sha1 = file_sha1(path)
        except OSError as exc:
            raise BadInputError(f"cannot read file ({exc.strerror or exc})", path=path) from None
        members = []
        for i, m in enumerate(export.members):
            identity = Identity(rank=m.env_rank, world_size=m.env_world, backend="nccl" if m.nccl else None,
                                claims_in=CLAIMS_IN)
            members.append(Opened(identity=identity, sha1=sha1, raw_complete=counts.get(m.global_pid, 0),
                                  warnings=list(export.warnings) if i == 0 else [], state=(export, i),
                                  member=m.label))
        return Opened(identity=members[0].identity, sha1=sha1, raw_complete=sum(o.raw_complete for o in members),
                      warnings=list(export.warnings), state=export, members=members)

    def read(self, opened: Sequence[Opened], ranks: Sequence[int],
             rules: tuple[CommRule, ...]) -> tuple[pl.DataFrame, list[list[str]]]:
        from ddprof.readers.nsys.events import read_exports

        return read_exports([o.state for o in opened], ranks, rules), [[] for _ in opened]
