"""The canonical per-rank event table: one row per complete event, whatever produced the trace.

The schema is versioned. A run dir written with another major version is refused with a plain
sentence (see :func:`check_version`), never half-read.

Conventions
-----------
* ``ts_ns``/``dur_ns`` are integer nanoseconds on the trace's own clock. The wall-clock base that maps
  them to epoch time (``baseTimeNanoseconds``) is kept per rank in the manifest.
* GPU rows have ``device`` and ``stream`` set; CPU rows have ``stream`` null and ``tid`` = thread.
* ``kind`` is classified once, at ingest (see :mod:`ddprof.readers.kineto.build`).
* Collective metadata (``coll_op`` ... ``seq``) is null where unknown, never -1; ``coll_op`` is one of
  :data:`ddprof.vocabulary.collective_ops.OPS`.
* ``coll_op`` is ``sendrecv`` for an NCCL SendRecv kernel whose metadata does not say more: NCCL runs
  point-to-point transfers (and all-to-all, grouped) with that kernel, so its name alone proves neither.
* ``peer`` is the global rank at the other end of a send/recv: as the trace names it (``Src Rank`` /
  ``Dst Rank``, PyTorch 2.5+), else the rank within the group (``Concrete Inputs``, traces recorded with
  shapes) translated where the process group's ranks are known, else that rank within the group.
* ``bytes`` is the nccl-tests message size S of the collective: all-reduce/broadcast/reduce: count x
  element size; all-gather: output bytes; reduce-scatter: input bytes; all-to-all: total bytes sent;
  send/recv: bytes sent or received.
* ``send_splits``/``recv_splits`` (all-to-all-v): bytes this rank sends to / receives from each rank of the
  collective's process group, in the group's rank order, where the trace says (``In split size``/``Out
  split size`` on ``record_param_comms``; a gloo ``c10d::alltoall_base_``'s split arguments recorded with
  shapes); null for even splits and every other op: ``bytes`` / group size each.
* ``shapes`` is a CRC-32 of a CPU op's recorded input shapes and types (Kineto's ``Input Dims`` and ``Input
  type``, as written), null where the trace holds none (recorded without ``record_shapes``, other readers):
  two calls of one op name with equal ``shapes`` did the same work. Minor version 2.1 added it; a 2.0 store
  reads with it null.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ddprof.errors import SchemaError

SCHEMA_VERSION = "2.1"

KINDS = ("compute", "comm", "memcpy", "memset", "sync", "cpu_op", "runtime", "annotation", "other")
Kind = pl.Enum(list(KINDS))

#: Kinds that run on a GPU stream (rows with ``stream`` set).
GPU_KINDS = ("compute", "comm", "memcpy", "memset", "sync")

EVENT_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "ts_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "device": pl.Int16(),
    "stream": pl.Int64(),
    "kind": Kind,
    "cat": pl.String(),
    "name": pl.String(),
    "step": pl.Int32(),
    "correlation": pl.Int64(),
    "external_id": pl.Int64(),
    "coll_op": pl.String(),
    "pg": pl.String(),
    "group_size": pl.Int32(),
    "bytes": pl.Int64(),
    "in_bytes": pl.Int64(),
    "out_bytes": pl.Int64(),
    "dtype": pl.String(),
    "peer": pl.Int32(),
    "seq": pl.Int64(),
    "send_splits": pl.List(pl.Int64()),
    "recv_splits": pl.List(pl.Int64()),
    "shapes": pl.UInt32(),
}

NOT_NULL = ("rank", "ts_ns", "dur_ns", "kind", "name")

STEP_PREFIX = "ProfilerStep#"


def step_number(name: pl.Expr) -> pl.Expr:
    """``ProfilerStep#N`` -> N (Int32); any other name, or an N that does not fit, -> null.

    The one parser of step names: ingest assigns steps with it and analyses find step windows with it.
    """
    return name.str.extract(r"^ProfilerStep#(\d+)$").cast(pl.Int32, strict=False)


def empty_events() -> pl.DataFrame:
    """An event table with no rows and the canonical schema."""
    return pl.DataFrame(schema=EVENT_SCHEMA)


_CAST = {col: pl.col(col).cast(dtype) for col, dtype in EVENT_SCHEMA.items()}
_NULL = {col: pl.lit(None, dtype=dtype).alias(col) for col, dtype in EVENT_SCHEMA.items()}


def conform(df: pl.DataFrame, columns: dict[str, pl.Expr] | None = None) -> pl.DataFrame:
    """Add missing nullable columns, cast to canonical types and order columns as the schema does;
    ``columns``: columns computed in the same frame operation (they replace any of the same name)."""
    columns = columns or {}
    have = set(df.columns)
    return df.select([columns[col].cast(dtype).alias(col) if col in columns else _CAST[col] if col in have
                      else _NULL[col] for col, dtype in EVENT_SCHEMA.items()])


def validate(df: Any, *, where: str = "event table") -> None:
    """Check the invariants of the event table (a DataFrame, a LazyFrame, or a run: ``ddprof.validate(run)``
    checks its events, naming the run dir); raise :class:`SchemaError` naming the first broken one.

    Invariants: exact column names and types; no nulls in ``rank, ts_ns, dur_ns, kind, name``;
    ``dur_ns >= 0``; GPU kinds carry a stream and CPU kinds other than ``comm`` do not;
    ``bytes``/``group_size`` are positive where set.
    """
    if not isinstance(df, (pl.DataFrame, pl.LazyFrame)):
        events = getattr(df, "events", None)
        if not callable(events):
            raise TypeError(f"validate() takes an event table or a run, not {type(df).__name__}")
        where = f"{getattr(df, 'path', where)}: event table" if where == "event table" else where
        df = events()
    if isinstance(df, pl.LazyFrame):
        df = df.collect()
    got = dict(df.schema)
    if list(got) != list(EVENT_SCHEMA):
        missing = [c for c in EVENT_SCHEMA if c not in got]
        extra = [c for c in got if c not in EVENT_SCHEMA]
        raise SchemaError(f"{where}: columns differ from schema {SCHEMA_VERSION} (missing {missing}, extra {extra})")
    for col, dtype in EVENT_SCHEMA.items():
        if got[col] != dtype:
            raise SchemaError(f"{where}: column {col!r} is {got[col]}, expected {dtype}")
    if df.height == 0:
        return
    bad = df.select(_CHECKS).row(0, named=True)
    for msg, count in bad.items():
        if count:
            raise SchemaError(f"{where}: {count} row(s) with {msg}")


_CHECKS = [expr.fill_null(False).sum().alias(msg) for msg, expr in {
    "null in a required column": pl.any_horizontal([pl.col(c).is_null() for c in NOT_NULL]),
    "negative duration": pl.col("dur_ns") < 0,
    "GPU event without a stream": pl.col("kind").is_in(["compute", "memcpy", "memset", "sync"])
    & pl.col("stream").is_null(),
    "CPU event with a stream": pl.col("kind").is_in(["cpu_op", "runtime"]) & pl.col("stream").is_not_null(),
    "non-positive bytes": pl.col("bytes") <= 0,
    "non-positive group size": pl.col("group_size") <= 0,
}.items()]


def check_version(found: str, *, where: str) -> None:
    """Refuse a store written with another major schema version."""
    if str(found).split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise SchemaError(
            f"{where} was written with event schema {found}; this ddprof reads schema {SCHEMA_VERSION}. "
            "Re-ingest the raw traces with `ddprof ingest`."
        )
