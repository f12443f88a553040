"""An Nsight Systems SQLite export opened read-only: its tables, its clock, its processes and which rank each is.

The user's file is opened with SQLite's URI ``mode=ro&immutable=1``: nothing is written to it or beside
it (no journal, no lock file), whatever the directory allows.

Clock. CUPTI and NVTX times in an export are nanoseconds on the session's clock;
``TARGET_INFO_SESSION_START_TIME`` records the UTC time (``utcEpochNs``) of the session's start and that
start on the session's clock (``systemClockNs``: ``ANALYSIS_DETAILS.startTime``). Every time is stored as
``utcEpochNs + (t - systemClockNs)``: nanoseconds since the epoch, so the ranks of one export, and of the
exports of several nodes, share one clock. Without ``systemClockNs`` (older exports) the session's times
are taken to start at 0.

Ranks (:func:`members`). Each process with GPU activity (kernels, copies, sets) is one rank. Its rank is
``RANK`` of the environment Nsight Systems recorded for it (``META_DATA_CAPTURE``:
``PROCESS_<n>:ENVIRONMENT_VARIABLE``) when the export holds one such process launched under torchrun
(``torchrun ... nsys profile python train.py``: one export per rank); else the processes are ranks in the
order of their lowest CUDA device, then their pid (torchrun gives local rank *d* device *d*): an export of
one node whose processes are ranks 0 to n-1. ``--rank FILE=N`` makes them ranks N to N+n-1 (another
node's export); a one-process file named ``rank-3.sqlite`` is rank 3 (the name rules of
:mod:`ddprof.readers.ranks`).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ddprof.errors import BadInputError
from ddprof.readers.source import gzipped
from ddprof.vocabulary.fields import as_int

#: Tables every Nsight Systems SQLite export holds (``nsys export --type sqlite``), whatever was traced.
NSYS_TABLES = frozenset({"StringIds", "TARGET_INFO_SESSION_START_TIME"})
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
#: The GPU activity tables: a process with rows in one of them is a rank.
GPU_TABLES = (KERNEL, MEMCPY, MEMSET)
#: Columns read from each table (a table without one of them cannot be read: the file is refused naming it).
COLUMNS = {
    KERNEL: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid"),
    MEMCPY: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "copyKind"),
    MEMSET: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid"),
    SYNC: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "syncType"),
    RUNTIME: ("start", "end", "globalTid", "correlationId", "nameId"),
    NVTX: ("start", "end", "eventType", "globalTid", "text", "textId", "domainId"),
}
#: Activity tables of an export; one is enough beside :data:`NSYS_TABLES` to tell an export from another database.
ACTIVITY_PREFIXES = ("CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS", "OSRT_API", "CUDA_GPU_MEMORY_USAGE_EVENTS")
#: A serialized global process id keeps the process id in bits 24-47 (Nsight Systems' export documentation,
#: "Serialized process and thread identifiers"); a global thread id is its process's plus the thread id.
PID_SHIFT, ID_MASK = 24, 0xFFFFFF
_ENV = re.compile(r'^(\w+)="?(.*?)"?$')


def uri(path: Path) -> str:
    """The read-only, journal-free SQLite URI of ``path``."""
    return f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"


def connect(path: Path) -> sqlite3.Connection:
    """``path`` opened read-only (module doc); BadInputError naming the file when SQLite cannot open it (a
    gzipped export said so: SQLite reads the plain file only)."""
    if gzipped(path):
        raise BadInputError("a gzipped file: an Nsight Systems export is read as the plain SQLite file "
                            f"(inflate it first: gunzip -k {path.name})", path=path)
    try:
        con = sqlite3.connect(uri(path), uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise BadInputError(f"an SQLite file that cannot be read ({exc})", path=path) from None
    return con


def tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def is_export(names: set[str]) -> bool:
    """Whether a database's tables are those of an Nsight Systems export."""
    return NSYS_TABLES.issubset(names) and any(t.startswith(ACTIVITY_PREFIXES) for t in names)


def not_an_export(names: set[str]) -> str:
    """The refusal of an SQLite database that is not an Nsight Systems export, naming its tables."""
    listed = sorted(names)
    shown = f" (tables: {', '.join(listed[:8])}{', ...' if len(listed) > 8 else ''})" if listed else " (no tables)"
    return f"an SQLite database that is not an Nsight Systems export{shown}: not a format ddprof reads"


@dataclass
class Member:
    """One process of an export: one rank."""

    global_pid: int
    pid: int
    devices: list[int]
    name: str | None = None
    env_rank: int | None = None  # RANK of its recorded environment, where that applies (module doc)
    env_world: int | None = None
    nccl: bool = False  # has NCCL kernels

    @property
    def label(self) -> str:
        devs = ", ".join(map(str, self.devices))
        return f"process {self.pid}{f' ({self.name})' if self.name else ''} on CUDA device{'s' if len(self.devices) > 1 else ''} {devs}"


@dataclass
class Export:
    """What opening an export found: the tables it holds (with their columns), the clock offset, its processes."""

    path: Path
    tables: dict[str, set[str]]
    offset_ns: int  # added to every session time (module doc)
    members: list[Member] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def has(self, table: str) -> bool:
        return table in self.tables


def open_export(path: Path) -> Export:
    """Open ``path`` and say what it holds (module doc); BadInputError naming the file when it is not an
    Nsight Systems export, is damaged, or lacks a column ddprof reads."""
    con = connect(path)
    try:
        try:
            names = tables(con)
            if not is_export(names):
                raise BadInputError(not_an_export(names), path=path)
            found = {t: columns(con, t) for t in COLUMNS if t in names}
            for t, cols in found.items():
                missing = [c for c in COLUMNS[t] if c not in cols]
                if missing:
                    raise BadInputError(f"an Nsight Systems export whose {t} table lacks column(s) "
                                        f"{', '.join(missing)}: not an export ddprof can read", path=path)
            if KERNEL in found and not found[KERNEL] & {"demangledName", "shortName", "mangledName"}:
                raise BadInputError(f"an Nsight Systems export whose {KERNEL} table names no kernel (no "
                                    "demangledName, shortName or mangledName column): not an export ddprof can "
                                    "read", path=path)
            export = Export(path, found, 0)
            export.offset_ns = _clock(con, export)
            export.members = _members(con, export)
        except sqlite3.DatabaseError as exc:
            raise BadInputError(f"a damaged SQLite file ({exc})", path=path) from None
    finally:
        con.close()
    return export


def _clock(con: sqlite3.Connection, export: Export) -> int:
    """What turns a session time into nanoseconds since the epoch (module doc)."""
    cols = columns(con, "TARGET_INFO_SESSION_START_TIME")
    if "utcEpochNs" not in cols:
        export.warnings.append("TARGET_INFO_SESSION_START_TIME has no utcEpochNs: times kept on the session's clock")
        return 0
    pick = "utcEpochNs, systemClockNs" if "systemClockNs" in cols else "utcEpochNs, 0"
    row = con.execute(f"SELECT {pick} FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
    if row is None or as_int(row[0]) is None:
        export.warnings.append("no recorded session start time: times kept on the session's clock")
        return 0
    return int(row[0]) - (as_int(row[1]) or 0)


def _members(con: sqlite3.Connection, export: Export) -> list[Member]:
    """The processes with GPU activity, in rank order (module doc)."""
    devices: dict[int, set[int]] = {}
    for t in GPU_TABLES:
        if export.has(t):
            for gpid, dev in con.execute(f'SELECT DISTINCT globalPid, deviceId FROM "{t}"'):
                if gpid is not None:
                    devices.setdefault(int(gpid), set()).update([int(dev)] if dev is not None else [])
    names: dict[int, str] = {}
    if "PROCESSES" in tables(con):
        names = {int(g): str(n) for g, n in con.execute("SELECT globalPid, name FROM PROCESSES")
                 if g is not None and n is not None}
    nccl: set[int] = set()
    if export.has(KERNEL):
        nccl = {int(g) for (g,) in con.execute(
            f"SELECT DISTINCT k.globalPid FROM {KERNEL} k JOIN StringIds s ON s.id = k.{kernel_name_column(export)} "
            "WHERE s.value LIKE '%nccl%' OR s.value LIKE '%rccl%'")}
    members = [Member(g, (g >> PID_SHIFT) & ID_MASK, sorted(d), names.get(g), nccl=g in nccl)
               for g, d in devices.items()]
    members.sort(key=lambda m: (min(m.devices, default=1 << 30), m.pid))
    env = _recorded_env(con)
    if len(members) == 1 and "RANK" in env:
        members[0].env_rank, members[0].env_world = as_int(env.get("RANK")), as_int(env.get("WORLD_SIZE"))
    return members


def kernel_name_column(export: Export) -> str:
    """The kernel table's column naming a kernel: the demangled name where the export has it."""
    cols = export.tables.get(KERNEL, set())
    return next((c for c in ("demangledName", "shortName", "mangledName") if c in cols), "demangledName")


def _recorded_env(con: sqlite3.Connection) -> dict[str, str]:
    """The environment Nsight Systems recorded for the process it launched (``META_DATA_CAPTURE``), when
    it launched one."""
    if "META_DATA_CAPTURE" not in tables(con):
        return {}
    rows = con.execute("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'")
    launched = {str(n).split(":", 1)[0] for n, _ in rows}
    if len(launched) != 1:
        return {}
    env: dict[str, str] = {}
    for (value,) in con.execute("SELECT value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'"):
        m = _ENV.match(str(value))
        if m:
            env[m.group(1)] = m.group(2)
    return env


def batches(con: sqlite3.Connection, sql: str, params: tuple[Any, ...] = (), size: int = 1 << 16) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of a query, ``size`` at a time."""
    cur = con.execute(sql, params)
    while rows := cur.fetchmany(size):
        yield rows
