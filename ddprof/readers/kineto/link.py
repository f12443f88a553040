"""Collective metadata of a row, and of the markers enclosing a kernel's launch, as frames.

A communication kernel's metadata lives on CPU "markers" (``record_param_comms``, ``nccl:<op>``,
``c10d::<op>``, ``symm_mem::<op>``...). A kernel finds its marker two ways:

1. by ``External id`` (new traces: the kernel carries the id of the CPU op that launched it);
2. by launch containment: the runtime call with the kernel's ``correlation`` happened inside the
   marker's interval on the same thread (old traces, where External id is not a CPU op id).

Markers nest (``c10d::alltoall_base_`` > ``record_param_comms`` > ``nccl:all_to_all``); the innermost
one names the op and outer ones fill in what it lacks: each field is the first one set, inner to outer.

Every frame here carries :data:`FIELDS`. Per-row Python runs once per distinct metadata, not per row:
a job repeats the same collectives every step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from ddprof.frames.keyjoin import sorted_rows
from ddprof.readers.kineto import comms
from ddprof.vocabulary.collective_ops import normalize_op

#: Collective metadata as the store keeps it, with the store's types.
STORED: dict[str, pl.DataType] = {
    "coll_op": pl.String(), "pg": pl.String(), "group_size": pl.Int32(), "in_bytes": pl.Int64(),
    "out_bytes": pl.Int64(), "dtype": pl.String(), "seq": pl.Int64(), "peer": pl.Int32(),
    "send_splits": pl.List(pl.Int64()), "recv_splits": pl.List(pl.Int64()),
}
#: What travels from markers to kernels: the stored fields, and a send/recv's peer as a global rank where
#: the trace names it so (``Src Rank``/``Dst Rank``, PyTorch 2.5+; ``peer`` is then a rank within the
#: process group, from ``Concrete Inputs``, which only traces recorded with shapes have).
FIELDS: dict[str, pl.DataType] = {**STORED, "global_peer": pl.Int32()}
#: What a row's own metadata is derived from (:data:`events.META_SCHEMA` plus the name).
_KEY = ["name", "coll_name", "dtype", "in_nelems", "out_nelems", "input_dims", "input_type", "concrete_inputs",
        "src_rank", "dst_rank", "in_split", "out_split"]
_DERIVED = {"coll_op": pl.String(), "in_bytes": pl.Int64(), "out_bytes": pl.Int64(), "dtype": pl.String(),
            "peer": pl.Int32(), "global_peer": pl.Int32(), "send_splits": pl.List(pl.Int64()),
            "recv_splits": pl.List(pl.Int64())}


def _rank(value: int | None) -> int | None:
    return value if value is not None and 0 <= value < 2**31 else None


def _derive(name: str, coll_name: str | None, dtype: str | None, in_n: int | None, out_n: int | None,
            dims: bytes | None, types: bytes | None, concrete: bytes | None,
            src: int | None, dst: int | None, in_split: bytes | None, out_split: bytes | None) -> tuple[Any, ...]:
    """(coll_op, in_bytes, out_bytes, dtype, peer, global_peer, send_splits, recv_splits) from new-format
    fields, else old-format Input Dims; an all-to-all-v's splits in bytes (:func:`comms.split_bytes`)."""
    op = normalize_op(coll_name) or normalize_op(name)
    size = comms.dtype_size(dtype)
    in_b = in_n * size if size and in_n is not None and in_n > 0 else None
    out_b = out_n * size if size and out_n is not None and out_n > 0 else None
    if in_b is None and out_b is None:
        in_b, old_dtype = comms.input_bytes(dims, types)
        dtype = dtype or old_dtype
    peer = comms.p2p_peer(name, concrete) if op in ("send", "recv") else None
    global_peer = _rank(dst) if op == "send" else _rank(src) if op == "recv" else None
    send = recv = None
    if op == "all_to_all":
        send, recv = comms.split_bytes(name, in_split, out_split, in_b, out_b, dims, types, concrete)
    return op, in_b, out_b, dtype, peer, global_peer, send, recv


_NO_OWN = pl.DataFrame(schema={"_row": pl.UInt32(), **FIELDS})


#: From this many rows with metadata up, their distinct keys are found by Polars (:func:`own_meta`).
MANY_META = 2048


def own_meta(rows: pl.DataFrame) -> pl.DataFrame:
    """Each row's own metadata: ``rows`` has ``_row`` and the :data:`_KEY` columns, plus
    ``group_size``, ``pg`` and ``seq``; the result has ``_row`` and :data:`FIELDS`, in the order of ``rows``.

    The rows are few (markers and rows with new-format fields), their distinct keys fewer: each distinct
    key is derived once. Up to :data:`MANY_META` rows the keys are read into Python and told apart there (a
    Polars unique and join cost ~0.1 ms each on a trace of a few hundred events); from it up, by Polars
    (8,080 rows of 3 distinct keys: 1.9 against 4.6 ms)."""
    if rows.height == 0:
        return _NO_OWN
    keys = rows.select(_KEY)
    at: list[int] | pl.Series
    if rows.height < MANY_META:
        distinct: dict[tuple[Any, ...], int] = {}
        at = [distinct.setdefault(k, len(distinct)) for k in keys.iter_rows()]
        derive = list(distinct)
    else:
        unique = keys.unique(maintain_order=True)
        at = keys.join(unique.with_row_index("_at"), on=_KEY, how="left", maintain_order="left",
                       nulls_equal=True).get_column("_at")
        derive = list(unique.iter_rows())
    derived = pl.DataFrame([_derive(*k) for k in derive], schema=_DERIVED, orient="row")[at]
    gs = pl.col("group_size")
    own = rows.select("_row", pg=pl.col("pg").cast(pl.String),
                      group_size=pl.when((gs > 0) & (gs < 2**31)).then(gs).cast(pl.Int32),
                      seq=pl.col("seq").cast(pl.Int64))
    columns = {s.name: s for s in (*own.get_columns(), *derived.get_columns())}
    return pl.DataFrame([columns[c] for c in ("_row", *FIELDS)])


def rows(df: pl.DataFrame, where: pl.Expr, *cols: str | pl.Expr, **named: pl.Expr) -> pl.DataFrame:
    """Some columns of some rows; only those columns are copied (an eager filter copies them all)."""
    return df.lazy().filter(where).select(*cols, **named).collect(engine="in-memory")


def first_set(frame: pl.DataFrame, by: str, keep: list[str]) -> pl.DataFrame:
    """Per ``by`` group, in frame order: ``keep`` columns of the first row, and each field's first
    non-null value (inner metadata first, outer fills the gaps)."""
    return frame.group_by(by, maintain_order=True).agg(
        *(pl.col(c).first() for c in keep), *(pl.col(f).drop_nulls().first() for f in FIELDS))


_NO_MERGED = pl.DataFrame(schema={"_trace": pl.UInt32(), "correlation": pl.Int64(), **FIELDS})


def _on_threads(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows with a pid and a tid (the frame itself when all have: a filter costs ~0.1 ms)."""
    if frame.get_column("pid").null_count() or frame.get_column("tid").null_count():
        return frame.drop_nulls(["pid", "tid"])
    return frame


def _runs(*keys: np.ndarray) -> np.ndarray:
    """Where each run of rows with equal ``keys`` (sorted arrays of one length) begins, then their length."""
    n = len(keys[0])
    changed = np.zeros(max(n - 1, 0), dtype=bool)
    for k in keys:
        changed |= np.diff(k) != 0
    return np.flatnonzero(np.r_[True, changed, True]) if n else np.zeros(1, dtype=np.intp)


def _by_thread(trace: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> dict[tuple[int, int, int], np.ndarray]:
    """The rows of each (trace, pid, tid), in row order (one sort: a batch of traces has many threads)."""
    order = np.lexsort((tid, pid, trace))
    t, p, d = trace[order], pid[order], tid[order]
    cut = _runs(t, p, d)
    return {(int(t[a]), int(p[a]), int(d[a])): order[a:b] for a, b in zip(cut[:-1], cut[1:])}


def enclosing_meta(markers: pl.DataFrame, runtimes: pl.DataFrame) -> pl.DataFrame:
    """Merged metadata of the markers enclosing each runtime call on its thread.

    ``markers``: ``_row, _trace, ts_ns, dur_ns, pid, tid`` and :data:`FIELDS`; ``runtimes``: ``_row,
    _trace, ts_ns, pid, tid, correlation``. Returns ``_trace, correlation`` and :data:`FIELDS`, one row
    per runtime call inside at least one marker of its trace (a call at a marker's first or last
    nanosecond is inside it).
    """
    none = _NO_MERGED
    markers, runtimes = _on_threads(markers), _on_threads(runtimes)
    if markers.height == 0 or runtimes.height == 0:
        return none
    runtimes = sorted_rows(runtimes, "_trace", "pid", "tid", "ts_ns")
    r_trace, r_pid, r_tid, r_ts = (runtimes[c].to_numpy() for c in ("_trace", "pid", "tid", "ts_ns"))
    m_trace, m_pid, m_tid, m_start = (markers[c].to_numpy() for c in ("_trace", "pid", "tid", "ts_ns"))
    m_end = m_start + markers["dur_ns"].to_numpy()
    cut = _runs(r_trace, r_pid, r_tid)
    on_thread = _by_thread(m_trace, m_pid, m_tid)
    none_here = np.zeros(0, dtype=np.int64)
    m_parts, r_parts = [], []
    for a, b in zip(cut[:-1], cut[1:]):  # threads: few, numpy within each
        mine = on_thread.get((int(r_trace[a]), int(r_pid[a]), int(r_tid[a])), none_here)
        lo = a + np.searchsorted(r_ts[a:b], m_start[mine], side="left")
        hi = a + np.searchsorted(r_ts[a:b], m_end[mine], side="right")
        counts = hi - lo
        m_parts.append(np.repeat(mine, counts))
        r_parts.append(np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts))
    m_idx, r_idx = np.concatenate(m_parts), np.concatenate(r_parts)
    if len(m_idx) == 0:
        return none
    inner_first = (pl.concat([runtimes[r_idx].select("_row", "_trace", "correlation", rt_ts="ts_ns"),
                              markers[m_idx].select("ts_ns", "dur_ns", *FIELDS)], how="horizontal")
                   .sort(["_row", "ts_ns", "dur_ns"], descending=[False, True, False]))
    merged = first_set(inner_first, "_row", ["_trace", "correlation", "rt_ts"])
    return (merged.drop_nulls("correlation").sort("rt_ts", maintain_order=True)
            .unique(["_trace", "correlation"], keep="last", maintain_order=True)
            .select("_trace", "correlation", *FIELDS))
