"""The rows of an Nsight Systems export in the store's event table (:mod:`ddprof.store.schema`).

==========================================  =======================================================
table (rows)                                event
==========================================  =======================================================
CUPTI_ACTIVITY_KIND_KERNEL                  ``compute``, or ``comm`` when a communication kernel by
                                            name (``ncclDevKernel_*``, ``ncclKernel_*``, the user's
                                            ``--comm-kernel`` rules: :func:`~ddprof.vocabulary.collective_ops.match_kernel`)
CUPTI_ACTIVITY_KIND_MEMCPY / _MEMSET        ``memcpy`` / ``memset`` (``Memcpy HtoD (Pinned -> Device)``)
CUPTI_ACTIVITY_KIND_SYNCHRONIZATION         ``sync``, those on a stream (event and context
                                            synchronisations, on no stream, are not read)
CUPTI_ACTIVITY_KIND_RUNTIME                 ``runtime`` (``cudaLaunchKernel``: the ``_v7000`` version
                                            suffix dropped), linked to what it launched by
                                            ``correlation``
NVTX_EVENTS, push/pop and start/end ranges  PyTorch's ``emit_nvtx`` op ranges (``aten::mul, seq = 4,
                                            op_id = 17``) ``cpu_op`` named by the op; step ranges
                                            (below) ``annotation`` ``ProfilerStep#N``; any other range
                                            an ``annotation`` (NCCL's own ranges, ``ncclAllReduce``,
                                            among them)
==========================================  =======================================================

Collectives. An export records no NCCL metadata (no process group, message size or peer), and each
process's communication kernels run on streams of its own numbering (rank 0's NCCL kernels on stream 7,
rank 1's on stream 15): stream ids do not match the ranks' collectives. Communicators are created in the
same order on every rank and their streams with them, so the k-th communication stream of each process
(its comm streams sorted by id) is taken for the same communicator: its kernels get the process group
``comm stream #k``, and the k-th kernel of that group on each rank is the same collective (DESIGN.md §3,
Collective instance). Where the processes of a file do not all have as many communication streams, the rule
does not hold and each stream stays a group of its own (the collectives' warnings then name the instances
not seen on every rank). Message sizes stay unknown, so no bandwidth is computed.

Names come from ``StringIds`` (a kernel's demangled name where the export has it). GPU rows keep their
CUDA device and stream, the process's pid, and the stream as ``tid`` (as Kineto's kernels do); CPU rows
the thread of their global thread id.

Steps. A range named ``ProfilerStep#N`` (PyTorch's profiler schedule annotates it with
``emit_nvtx``) is step N. A process with none may name its steps itself: a range named ``step 12``,
``step_12``, ``train_step 12``, ``iteration 12`` or ``iter#12`` (any case) is stored as ``ProfilerStep#12``,
the name every analysis finds step windows by. Rows take their step as Kineto's do
(:func:`ddprof.readers.steps.assign_steps`): a CPU row the step window its start falls in, a GPU row the
step of the runtime call that launched it.

The tables are read ``BATCH`` rows at a time (``fetchmany``), each batch a frame.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from ddprof.errors import BadInputError
from ddprof.readers.nsys.export import (
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    PID_SHIFT,
    RUNTIME,
    SYNC,
    Export,
    batches,
    connect,
    kernel_name_column,
)
from ddprof.readers.steps import assign_steps
from ddprof.store.schema import STEP_PREFIX, Kind, conform
from ddprof.vocabulary.collective_ops import CommRule, match_kernel

#: Rows fetched from SQLite at a time.
BATCH = 1 << 16
#: NVTX event types read: push/pop and start/end ranges (``ENUM_NSYS_EVENT_TYPE``).
NVTX_RANGES = (59, 60)
NVTX_DOMAIN_CREATE = 75
#: A stream id CUPTI gives an activity on no stream (an event or context synchronisation).
NO_STREAM = (0xFFFFFFFF, -1)
#: ``aten::mul, seq = 4, op_id = 17[, input_op_ids = ...][, sizes = ...]``: PyTorch's emit_nvtx op range ->
#: ``aten::mul`` (a backward op of older PyTorch: ``MmBackward, stashed seq = 4, op_id = 18``).
OP_RANGE = r"^(.+?), (?:(?:stashed )?seq = \d+, )?op_id = \d+"
#: A step range a user names: ``step 12``, ``train_step_12``, ``iteration 12``, ``iter#12`` (module doc).
USER_STEP = r"(?i)^(?:train(?:ing)?[ _-]?)?(?:step|iteration|iter)[ _#:=-]*(\d+)$"
_VERSION_SUFFIX = r"_v\d+$"
#: CUPTI's memory copy kinds (``ENUM_CUDA_MEMCPY_OPER``) and memory kinds (``ENUM_CUDA_MEM_KIND``), as
#: the PyTorch profiler names copies (``Memcpy HtoD (Pinned -> Device)``).
COPY_KIND = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
             10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device", 6: "Managed"}
SYNC_TYPE = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}

_GPU_SCHEMA = {"ts": pl.Int64, "end": pl.Int64, "device": pl.Int64, "stream": pl.Int64, "correlation": pl.Int64,
               "gpid": pl.Int64, "name": pl.String}
_CPU_SCHEMA = {"ts": pl.Int64, "end": pl.Int64, "gtid": pl.Int64, "correlation": pl.Int64, "name": pl.String,
               "domain": pl.Int64}


class BadValue(Exception):
    """A table holds a value of another type than its column's (text where a time should be)."""


def _frame(con: sqlite3.Connection, sql: str, schema: dict[str, Any]) -> pl.DataFrame:
    """A query's rows as one frame, read :data:`BATCH` rows at a time; :class:`BadValue` naming the table
    when a value is not of its column's type."""
    try:
        parts = [pl.DataFrame(rows, schema=schema, orient="row") for rows in batches(con, sql, size=BATCH)]
    except (pl.exceptions.PolarsError, TypeError, ValueError, OverflowError) as exc:
        table = sql.split(" FROM ", 1)[1].split()[0] if " FROM " in sql else "a table"
        raise BadValue(f"{table}: {str(exc).splitlines()[0].split('; make sure')[0]}") from None
    return pl.concat(parts) if parts else pl.DataFrame(schema=schema)


def _names(con: sqlite3.Connection, table: str, default: dict[int, str]) -> dict[int, str]:
    """An ENUM table's labels (the export's own, where it has one), else ``default``."""
    try:
        rows = con.execute(f'SELECT id, label FROM "{table}"').fetchall()
    except sqlite3.Error:
        return default
    return {**default, **{int(i): str(v) for i, v in rows if i is not None and v is not None}}


def _gpu(con: sqlite3.Connection, export: Export) -> pl.DataFrame:
    """Every kernel, copy, set and synchronisation on a stream of the export (``cat`` says which)."""
    frames = []
    if export.has(KERNEL):
        col = kernel_name_column(export)
        frames.append(_frame(con, f"SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, k.globalPid, "
                                  f"s.value FROM {KERNEL} k LEFT JOIN StringIds s ON s.id = k.{col}", _GPU_SCHEMA)
                      .with_columns(cat=pl.lit("kernel")))
    if export.has(MEMCPY):
        cols = export.tables[MEMCPY]
        src = "srcKind" if "srcKind" in cols else "NULL"
        dst = "dstKind" if "dstKind" in cols else "NULL"
        kinds = _names(con, "ENUM_CUDA_MEM_KIND", MEM_KIND)
        copies = _frame(con, f"SELECT start, end, deviceId, streamId, correlationId, globalPid, "
                             f"copyKind || ',' || coalesce({src}, -1) || ',' || coalesce({dst}, -1) FROM {MEMCPY}",
                        _GPU_SCHEMA)
        copies = copies.with_columns(cat=pl.lit("gpu_memcpy"),
                                     name=pl.Series(_copy_name(copies.get_column("name"), kinds), dtype=pl.String))
        frames.append(copies)
    if export.has(MEMSET):
        kind = "memKind" if "memKind" in export.tables[MEMSET] else "NULL"
        kinds = _names(con, "ENUM_CUDA_MEM_KIND", MEM_KIND)
        sets = _frame(con, f"SELECT start, end, deviceId, streamId, correlationId, globalPid, "
                           f"CAST(coalesce({kind}, 2) AS TEXT) FROM {MEMSET}", _GPU_SCHEMA)
        sets = sets.with_columns(cat=pl.lit("gpu_memset"), name=pl.format(
            "Memset ({})", pl.col("name").cast(pl.Int64, strict=False).replace_strict(kinds, default="Device",
                                                                                      return_dtype=pl.String)))
        frames.append(sets)
    if export.has(SYNC):
        syncs = _frame(con, f"SELECT start, end, deviceId, streamId, correlationId, globalPid, CAST(syncType AS TEXT) "
                            f"FROM {SYNC} "
                            f"WHERE streamId IS NOT NULL AND streamId NOT IN {NO_STREAM}", _GPU_SCHEMA)
        frames.append(syncs.with_columns(cat=pl.lit("cuda_sync"), name=pl.col("name").cast(pl.Int64, strict=False)
                                         .replace_strict(SYNC_TYPE, default="Sync", return_dtype=pl.String)))
    if not frames:
        return pl.DataFrame(schema={**_GPU_SCHEMA, "cat": pl.String})
    return pl.concat(frames).with_columns(pl.col("name").fill_null("<unnamed>"))


def _copy_name(spec: pl.Series, kinds: dict[int, str]) -> list[str]:
    """``copyKind,srcKind,dstKind`` -> ``Memcpy HtoD (Pinned -> Device)`` (the PyTorch profiler's names)."""
    out = []
    cache: dict[str, str] = {}
    for s in spec.to_list():
        if s not in cache:
            parts = [int(p) if p.lstrip("-").isdigit() else -1 for p in (s or "").split(",")] + [-1, -1, -1]
            copy, src, dst = parts[:3]
            where = f" ({kinds.get(src, 'Unknown')} -> {kinds.get(dst, 'Unknown')})" if src >= 0 and dst >= 0 else ""
            cache[s] = f"Memcpy {COPY_KIND.get(copy, 'Unknown')}{where}"
        out.append(cache[s])
    return out


def _cpu(con: sqlite3.Connection, export: Export) -> pl.DataFrame:
    """Every runtime call and NVTX range of the export (``cat``: ``cuda_runtime``, ``cuda_driver``, ``nvtx``)."""
    frames = []
    if export.has(RUNTIME):
        calls = _frame(con, f"SELECT r.start, r.end, r.globalTid, r.correlationId, s.value, NULL FROM {RUNTIME} r "
                            "LEFT JOIN StringIds s ON s.id = r.nameId", _CPU_SCHEMA)
        name = pl.col("name").fill_null("<unnamed>").str.replace(_VERSION_SUFFIX, "")
        frames.append(calls.with_columns(name=name, cat=pl.when(name.str.starts_with("cu") & ~name.str.starts_with("cuda"))
                                         .then(pl.lit("cuda_driver")).otherwise(pl.lit("cuda_runtime"))))
    if export.has(NVTX):
        text = "coalesce(n.text, s.value)"
        ranges = _frame(con, f"SELECT n.start, n.end, n.globalTid, NULL, {text}, n.domainId FROM {NVTX} n "
                             "LEFT JOIN StringIds s ON s.id = n.textId "
                             f"WHERE n.eventType IN {NVTX_RANGES} AND n.end IS NOT NULL AND n.end >= n.start "
                             "AND n.globalTid IS NOT NULL", _CPU_SCHEMA)
        frames.append(ranges.with_columns(pl.col("name").fill_null("<unnamed>"), cat=pl.lit("nvtx")))
    if not frames:
        return pl.DataFrame(schema={**_CPU_SCHEMA, "cat": pl.String})
    return pl.concat(frames).filter(pl.col("gtid").is_not_null())


def _classify_nvtx(cpu: pl.DataFrame) -> pl.DataFrame:
    """NVTX ranges as ops, steps and annotations (module doc), per process (``gpid``)."""
    is_nvtx = pl.col("cat") == "nvtx"
    cpu = cpu.with_columns(  # each pattern matched once (on NVTX rows only)
        _op=pl.when(is_nvtx).then(pl.col("name").str.extract(OP_RANGE, 1)),
        _user_step=pl.when(is_nvtx).then(pl.col("name").str.extract(USER_STEP, 1)),
        _profiler_step=is_nvtx & pl.col("name").str.starts_with(STEP_PREFIX)
        & pl.col("name").str.slice(len(STEP_PREFIX)).str.contains(r"^\d+$"),
    )
    is_op = pl.col("_op").is_not_null()
    rename_step = pl.col("_user_step").is_not_null() & ~pl.col("_profiler_step").any().over("gpid")
    return cpu.with_columns(
        kind=pl.when(is_op).then(pl.lit("cpu_op")).when(is_nvtx).then(pl.lit("annotation")).otherwise(pl.lit("runtime")),
        cat=pl.when(is_op).then(pl.lit("cpu_op")).when(is_nvtx).then(pl.lit("user_annotation")).otherwise("cat"),
        name=pl.when(is_op).then("_op")
        .when(rename_step).then(pl.format(f"{STEP_PREFIX}{{}}", pl.col("_user_step").cast(pl.Int64, strict=False)))
        .otherwise("name"),
    ).drop("_op", "_user_step", "_profiler_step")


def read_exports(opened: Sequence[tuple[Export, int]], ranks: Sequence[int],
                 rules: tuple[CommRule, ...]) -> pl.DataFrame:
    """The event table of several processes (each an export and its member's index), one after the other
    with ``_trace`` (the index in ``opened``); each export's tables read once for all of its processes."""
    by_file: dict[str, tuple[Export, list[int]]] = {}
    for i, (export, _) in enumerate(opened):
        by_file.setdefault(str(export.path), (export, []))[1].append(i)
    parts: list[pl.DataFrame | None] = [None] * len(opened)
    for export, idx in by_file.values():
        con = connect(export.path)
        try:
            gpu, cpu = _gpu(con, export), _cpu(con, export)
        except sqlite3.DatabaseError as exc:  # a page past the ones opening read is damaged
            raise BadInputError(f"a damaged SQLite file ({exc})", path=export.path) from None
        except BadValue as exc:
            raise BadInputError(f"an Nsight Systems export with a value of the wrong type in {exc}",
                                path=export.path) from None
        finally:
            con.close()
        cpu = _classify_nvtx(cpu.with_columns(gpid=(pl.col("gtid") // (1 << PID_SHIFT)) * (1 << PID_SHIFT)))
        gpu = _comm_stream_groups(_classify_kernels(gpu, rules))
        for i in idx:
            member = export.members[opened[i][1]]
            parts[i] = _member_rows(gpu, cpu, member.global_pid, member.pid, export.offset_ns)
    frames = [p for p in parts if p is not None]
    heights = [f.height for f in frames]
    df = pl.concat(frames, how="vertical").with_columns(
        _trace=pl.Series(np.repeat(np.arange(len(frames), dtype=np.uint32), heights)))
    df = df.with_columns(is_gpu=pl.col("stream").is_not_null())
    rank = pl.Series("rank", np.repeat(np.asarray(ranks, dtype=np.int32), heights))
    return conform(df, {"step": assign_steps(df), "rank": pl.lit(rank)}).hstack([df.get_column("_trace")])


def _classify_kernels(gpu: pl.DataFrame, rules: tuple[CommRule, ...]) -> pl.DataFrame:
    """Kernels that communicate by name become ``comm`` with their collective (``coll_op``)."""
    names = gpu.filter(pl.col("cat") == "kernel").get_column("name").unique().to_list()
    ops = {n: m[1] for n in names for m in (match_kernel(n, rules),) if m is not None}
    op = pl.when(pl.col("cat") == "kernel").then(pl.col("name").replace_strict(ops, default=None,
                                                                               return_dtype=pl.String))
    kind = (pl.when(op.is_not_null()).then(pl.lit("comm"))
            .when(pl.col("cat") == "kernel").then(pl.lit("compute"))
            .when(pl.col("cat") == "gpu_memcpy").then(pl.lit("memcpy"))
            .when(pl.col("cat") == "gpu_memset").then(pl.lit("memset"))
            .otherwise(pl.lit("sync")))
    return gpu.with_columns(coll_op=op, kind=kind)


def _comm_stream_groups(gpu: pl.DataFrame) -> pl.DataFrame:
    """The process group (``pg``) of the communication kernels: the position of their stream among their
    process's communication streams, ``comm stream #k`` (module doc, Collectives); null where the processes
    of the file do not all have as many communication streams (then each stream is its own group).

    Example: process A's NCCL kernels on streams 7 and 20, process B's on 15 and 31 -> A's 7 and B's 15 are
    ``comm stream #0``, A's 20 and B's 31 ``comm stream #1``."""
    comm = gpu.filter(pl.col("kind") == "comm").select("gpid", "stream").unique()
    per = comm.group_by("gpid").agg(pl.col("stream").sort().alias("streams"))
    if per.height == 0 or per.get_column("streams").list.len().n_unique() != 1:
        return gpu.with_columns(pg=pl.lit(None, pl.String))
    pos = per.explode("streams").rename({"streams": "stream"}).with_columns(
        pg=pl.format("comm stream #{}", pl.int_range(pl.len()).over("gpid")))
    return gpu.join(pos, on=["gpid", "stream"], how="left").with_columns(
        pg=pl.when(pl.col("kind") == "comm").then(pl.col("pg")))


def _member_rows(gpu: pl.DataFrame, cpu: pl.DataFrame, global_pid: int, pid: int, offset: int) -> pl.DataFrame:
    """One process's rows, on the epoch clock (``offset``), in time order."""
    g = gpu.filter(pl.col("gpid") == global_pid).select(
        ts_ns=pl.col("ts") + offset, dur_ns=(pl.col("end") - pl.col("ts")).clip(lower_bound=0),
        pid=pl.lit(pid, pl.Int64), tid=pl.col("stream"), device=pl.col("device"), stream=pl.col("stream"),
        kind=pl.col("kind").cast(Kind), cat="cat", name="name", correlation="correlation", coll_op="coll_op", pg="pg")
    c = cpu.filter(pl.col("gpid") == global_pid).select(
        ts_ns=pl.col("ts") + offset, dur_ns=(pl.col("end") - pl.col("ts")).clip(lower_bound=0),
        pid=pl.lit(pid, pl.Int64), tid=pl.col("gtid") % (1 << PID_SHIFT),
        device=pl.lit(None, pl.Int64), stream=pl.lit(None, pl.Int64), kind=pl.col("kind").cast(Kind), cat="cat",
        name="name", correlation="correlation", coll_op=pl.lit(None, pl.String), pg=pl.lit(None, pl.String))
    return pl.concat([g, c]).sort("ts_ns", maintain_order=True)


def member_counts(con: sqlite3.Connection, export: Export) -> dict[int, int]:
    """Events of each process (by global pid) the tables hold, as :func:`read_exports` reads them."""
    counts: dict[int, int] = {}
    shift = 1 << PID_SHIFT
    queries = []
    for t in (KERNEL, MEMCPY, MEMSET):
        if export.has(t):
            queries.append(f"SELECT globalPid, count(*) FROM {t} GROUP BY 1")
    if export.has(SYNC):
        queries.append(f"SELECT globalPid, count(*) FROM {SYNC} WHERE streamId IS NOT NULL AND streamId NOT IN "
                       f"{NO_STREAM} GROUP BY 1")
    if export.has(RUNTIME):
        queries.append(f"SELECT (globalTid / {shift}) * {shift}, count(*) FROM {RUNTIME} GROUP BY 1")
    if export.has(NVTX):
        queries.append(f"SELECT (globalTid / {shift}) * {shift}, count(*) FROM {NVTX} WHERE eventType IN "
                       f"{NVTX_RANGES} AND end IS NOT NULL AND end >= start AND globalTid IS NOT NULL GROUP BY 1")
    for q in queries:
        for g, n in con.execute(q):
            if g is not None:
                counts[int(g)] = counts.get(int(g), 0) + int(n)
    return counts

