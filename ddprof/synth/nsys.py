"""A generated run as one Nsight Systems SQLite export (what ``nsys export --type sqlite`` writes of a
``torchrun`` job profiled whole): every rank a process on its own CUDA device, in one file.

The events are the Kineto writer's (:func:`ddprof.synth.kineto.events`), the same run spelled in the
export's tables, with the columns the Nsight Systems reader reads: ``ProfilerStep#N`` and each CPU op an
NVTX push/pop range (the op as PyTorch's ``emit_nvtx`` names it: ``aten::mm, op_id = 12``), each launch a
``CUPTI_ACTIVITY_KIND_RUNTIME`` row (``cudaLaunchKernel_v7000``), each kernel a
``CUPTI_ACTIVITY_KIND_KERNEL`` row on the rank's device, names in ``StringIds``. Rank r runs on CUDA device
r, process ``PID_BASE + r``: the reader's rule (ranks in the order of their devices) gives each its rank.
Times: the session's clock starts at :data:`SESSION_CLOCK_NS`, recorded at UTC :data:`UTC_START_NS`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ddprof.store.atomic import write_atomic

PID_BASE = 4000
UTC_START_NS = 1_700_000_000_000_000_000
SESSION_CLOCK_NS = 5_000_000_000
#: Nsight Systems' ``ENUM_NSYS_EVENT_TYPE`` of an NVTX push/pop range.
NVTX_PUSH_POP = 59
#: The tables of an export, with the columns the Nsight Systems reader reads (and a few it does not).
SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT, systemClockNs INTEGER);
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
    shortName INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER,
    copyKind INTEGER, srcKind INTEGER, dstKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, value INTEGER,
    bytes INTEGER, memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
    globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
    category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
    domainId INTEGER);
"""


def global_pid(pid: int) -> int:
    """Nsight Systems' serialized process id (hardware id 1, ``pid`` in bits 24-47)."""
    return (1 << 48) | (pid << 24)


def write_export(path: Path, ranks: dict[int, Iterable[str]]) -> int:
    """The ranks' Kineto events (rank -> JSON strings, :func:`ddprof.synth.kineto.events`) as one export at
    ``path`` (atomically); returns the number of rows written."""
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings) + 1)

    kernels: list[tuple[Any, ...]] = []
    runtime: list[tuple[Any, ...]] = []
    nvtx: list[tuple[Any, ...]] = []
    processes = []
    session = SESSION_CLOCK_NS
    for rank, lines in ranks.items():
        pid = PID_BASE + rank
        gpid = global_pid(pid)
        gtid = gpid | pid  # the main thread: tid = pid
        processes.append((gpid, pid, "python3"))
        op_id = 0
        for line in lines:
            e = json.loads(line)
            start = round(float(e["ts"]) * 1000) + session
            end = start + round(float(e["dur"]) * 1000)
            args, cat = e.get("args", {}), e["cat"]
            if cat == "kernel":
                kernels.append((start, end, rank, 1, args["stream"], args["correlation"], gpid,
                                sid(e["name"]), sid(e["name"].split("(")[0].split("<")[0].split()[-1])))
            elif cat == "cuda_runtime":
                runtime.append((start, end, 1, gtid, args["correlation"], sid(f"{e['name']}_v7000"), 0))
            elif cat == "cpu_op":
                op_id += 1
                nvtx.append((start, end, NVTX_PUSH_POP, None, None, None, f"{e['name']}, op_id = {op_id}", gtid,
                             None, None, 0))
            else:  # user_annotation: ProfilerStep#N
                nvtx.append((start, end, NVTX_PUSH_POP, None, None, None, e["name"], gtid, None, None, 0))

    def body(tmp: Path) -> None:
        con = sqlite3.connect(tmp)
        try:
            con.executescript(SCHEMA)
            con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?, ?)",
                        (UTC_START_NS, "2023-11-14T22:13:20", "2023-11-14T22:13:20", SESSION_CLOCK_NS))
            con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
                            [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("DERIVED_BY", "ddprof synth")])
            con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
            con.executemany("INSERT INTO PROCESSES VALUES (?, ?, ?)", processes)
            con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", kernels)
            con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?)", runtime)
            con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", nvtx)
            con.commit()
        finally:
            con.close()

    write_atomic(path, body)
    return len(kernels) + len(runtime) + len(nvtx)
