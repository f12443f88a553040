"""Turn one decoded Kineto trace into the canonical event table (:mod:`ddprof.schema`).

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

Which rows communicate, with their collective metadata: :mod:`.comm_rows`. Steps: :mod:`.steps`.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ddprof.collective_ops import KERNEL_FAMILIES, CommRule, message_size
from ddprof.ingestion.categories import CAT_KIND, GPU_CATS, KNOWN_CATS
from ddprof.ingestion.comm_rows import communication
from ddprof.ingestion.kineto import Decoded
from ddprof.ingestion.link import STORED, rows
from ddprof.ingestion.steps import assign_steps
from ddprof.schema import Kind, conform

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
_COLUMNS = {
    "bytes": message_size(pl.col("coll_op"), pl.col("in_bytes"), pl.col("out_bytes"), pl.col("group_size")),
    "stream": pl.when("is_gpu").then(pl.coalesce("a_stream", "tid")),
    "device": pl.when("is_gpu").then(pl.coalesce(*(pl.when(pl.col(c).is_between(-(2**15), 2**15 - 1))
                                                  .then(pl.col(c)) for c in ("a_device", "pid")))),
}


def build_events(dec: Decoded, rank: int,
                 rules: tuple[CommRule, ...] = KERNEL_FAMILIES) -> tuple[pl.DataFrame, list[str]]:
    """The event table of one trace and its warnings; ``rules`` name communication kernels
    (:func:`ddprof.collective_ops.kernel_rules`)."""
    df = dec.frame.with_row_index("_row").with_columns(**_CLASSIFY)
    warnings = [] if dec.categories <= _KNOWN else [
        f"{n} event(s) of unknown category {c!r} kept as kind 'other'" for c, n in
        rows(df, _UNKNOWN_CAT, pl.col("cat").fill_null("<none>")).to_series().value_counts().iter_rows()]

    df = _apply_meta(df, communication(df, dec.meta, dec.distributed_info, rules))
    return conform(df, {**_COLUMNS, "step": assign_steps(df), "rank": pl.lit(rank, dtype=pl.Int32)}), warnings


def _apply_meta(df: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Spread the per-row collective metadata into full-length columns (each row takes its ``_row``'s
    metadata, nulls where it has none; only the metadata columns are copied); GPU rows among them become
    ``comm``, gloo:* annotations too. The message size (``bytes``) is computed from these columns with the
    rest of the table (:func:`build_events`)."""
    at = np.full(df.height, comm.height, dtype=np.int64)  # comm.height: the row of nulls below
    at[comm.get_column("_row").to_numpy()] = np.arange(comm.height)
    spread = pl.concat([pl.DataFrame([comm.get_column(f) for f in STORED]), _NO_META])[at]
    return df.hstack(spread).with_columns(kind=_COMM_KIND)
