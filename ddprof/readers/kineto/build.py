"""Turn one decoded Kineto trace into the canonical event table (:mod:`ddprof.store.schema`).

Classification (``kind``), once, here:

============================  =====================================================
Kineto ``cat``                kind
============================  =====================================================
kernel                        ``comm`` if a communication kernel (name or metadata), else ``compute``
gpu_memcpy / gpu_memset       ``memcpy`` / ``memset``
cuda_sync                     ``sync``
cpu_op                        ``cpu_op`` (``comm`` for ``gloo:*``)
user_annotation               ``annotation`` (``comm`` for ``gloo:*``)
gpu_user_annotation           ``annotation`` on the GPU track
cuda_runtime / cuda_driver    ``runtime``
anything else                 ``other`` (unknown categories are counted in the warnings)
============================  =====================================================

Categories arrive in their modern spelling whatever the trace's generation (:mod:`.categories`).

Which rows communicate, with their collective metadata: :mod:`.comm_rows`. Steps: :mod:`ddprof.readers.steps`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from ddprof.readers.kineto.categories import CAT_KIND, GPU_CATS, KNOWN_CATS
from ddprof.readers.kineto.comm_rows import communication
from ddprof.readers.kineto.decode import Decoded
from ddprof.readers.kineto.events import MetaRows
from ddprof.readers.kineto.link import STORED, rows
from ddprof.readers.steps import assign_steps
from ddprof.store.schema import Kind, conform
from ddprof.vocabulary.collective_ops import KERNEL_FAMILIES, CommRule, message_size

#: Expressions built once: building one costs a few microseconds, and a trace of a few hundred events is
#: ingested in a few milliseconds.
_IS_GPU = pl.col("cat").is_in(GPU_CATS).fill_null(False)
_CLASSIFY = {
    "is_gpu": _IS_GPU,
    "kind": pl.col("cat").replace_strict(CAT_KIND, default="other", return_dtype=Kind),  # Enum: 1 byte a row
    "_marker": pl.col("is_marker") & ~_IS_GPU,
}
_UNKNOWN_CAT = ~pl.col("cat").is_in(KNOWN_CATS).fill_null(False)
_KNOWN = frozenset(KNOWN_CATS)
_IS_COMM = ((pl.col("coll_op").is_not_null() & (pl.col("cat") == "kernel"))
            | (pl.col("_marker") & pl.col("name").str.starts_with("gloo:")))
_COMM_KIND = pl.when(_IS_COMM).then(pl.lit("comm", dtype=Kind)).otherwise("kind")
#: One row of nulls, the metadata of a row that has none (``DataFrame.clear(1)`` costs ~1 ms).
_NO_META = pl.DataFrame([pl.Series(f, [None], dtype=t) for f, t in STORED.items()])
_NULL_META = [pl.lit(None, dtype=t).alias(f) for f, t in STORED.items()]
_COLUMNS = {
    "bytes": message_size(pl.col("coll_op"), pl.col("in_bytes"), pl.col("out_bytes"), pl.col("group_size")),
    "stream": pl.when("is_gpu").then(pl.coalesce("a_stream", "tid")),
    "device": pl.when("is_gpu").then(pl.coalesce(*(pl.when(pl.col(c).is_between(-(2**15), 2**15 - 1))
                                                  .then(pl.col(c)) for c in ("a_device", "pid")))),
}


def build_events(decs: Sequence[Decoded], ranks: Sequence[int],
                 rules: tuple[CommRule, ...] = KERNEL_FAMILIES) -> tuple[pl.DataFrame, list[list[str]]]:
    """The event table of several traces as one frame, and each trace's warnings; ``ranks``: each trace's
    rank; ``rules`` name communication kernels (:func:`ddprof.vocabulary.collective_ops.kernel_rules`).

    The traces' rows follow each other in the order given, each trace's in its own order, with a
    ``_trace`` column (its index in ``decs``) after the store's columns: every join and grouping that
    links rows keys on it, so a trace's rows come out as they would built alone. Many small traces are
    built at once (:mod:`ddprof.ingestion.job`): each frame operation costs ~0.1 ms whatever its size.
    """
    heights = [d.frame.height for d in decs]
    offsets = np.cumsum([0, *heights[:-1]], dtype=np.int64)
    trace = pl.Series("_trace", np.repeat(np.arange(len(decs), dtype=np.uint32), heights))
    frame = decs[0].frame if len(decs) == 1 else pl.concat([d.frame for d in decs], rechunk=False)
    df = frame.with_row_index("_row").with_columns(trace, **_CLASSIFY)
    warnings = [[] if d.categories <= _KNOWN else _unknown_categories(df.slice(int(o), h))
                for d, o, h in zip(decs, offsets, heights)]
    meta = decs[0].meta_rows
    if len(decs) > 1:
        meta = MetaRows()
        for d, o in zip(decs, offsets):
            meta.extend(d.meta_rows, int(o))
    df = _apply_meta(df, communication(df, meta.frame(), [d.distributed_info for d in decs], rules))
    rank = pl.lit(pl.Series("rank", np.repeat(np.asarray(ranks, dtype=np.int32), heights)))
    return conform(df, {**_COLUMNS, "step": assign_steps(df), "rank": rank}).hstack([trace]), warnings


def _unknown_categories(df: pl.DataFrame) -> list[str]:
    """One trace's warnings for the events whose category ddprof does not know, by category name (the same
    sentences in the same order however the file was batched)."""
    counts = rows(df, _UNKNOWN_CAT, pl.col("cat").fill_null("<none>")).to_series().value_counts()
    return [f"{n} event(s) of unknown category {c!r} kept as kind 'other'" for c, n in sorted(counts.iter_rows())]


def _apply_meta(df: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Spread the per-row collective metadata into full-length columns (each row takes its ``_row``'s
    metadata, nulls where it has none; only the metadata columns are copied); GPU rows among them become
    ``comm``, gloo:* annotations too. The message size (``bytes``) is computed from these columns with the
    rest of the table (:func:`build_events`).

    A column is made null and its few values written into it (a tenth of the cost of gathering every row
    from the metadata); a column no row has a value in stays null; list columns (split sizes), which
    cannot be written into, are gathered."""
    if comm.height == 0:  # no communication (a single-GPU trace): null columns, nothing to gather
        return df.with_columns(_NULL_META).with_columns(kind=_COMM_KIND)
    if comm.get_column("_row").n_unique() < comm.height:  # a row's metadata twice: the last one counts
        comm = comm.unique("_row", keep="last", maintain_order=True)
    at_rows = comm.get_column("_row")
    at: pl.Series | None = None  # each row's metadata row (comm.height: none), made for a list column
    spread = []
    for f, dtype in STORED.items():
        values, col = comm.get_column(f), _NO_META.get_column(f).new_from_index(0, df.height)
        if values.null_count() == values.len():
            spread.append(col)
        elif not isinstance(dtype, pl.List):
            spread.append(col.scatter(at_rows, values))
        else:
            if at is None:
                index = np.full(df.height, comm.height, dtype=np.int64)
                index[at_rows.to_numpy()] = np.arange(comm.height)
                at = pl.Series(index)
            spread.append(values.append(_NO_META.get_column(f)).gather(at))
    return df.hstack(spread).with_columns(kind=_COMM_KIND)
