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

import polars as pl

from ddprof.collective_ops import KERNEL_FAMILIES, CommRule, message_size
from ddprof.ingestion.categories import CAT_KIND, GPU_CATS, KNOWN_CATS
from ddprof.ingestion.comm_rows import communication
from ddprof.ingestion.kineto import Decoded
from ddprof.ingestion.link import rows
from ddprof.ingestion.steps import assign_steps
from ddprof.schema import Kind, conform


def build_events(dec: Decoded, rank: int,
                 rules: tuple[CommRule, ...] = KERNEL_FAMILIES) -> tuple[pl.DataFrame, list[str]]:
    """The event table of one trace and its warnings; ``rules`` name communication kernels
    (:func:`ddprof.collective_ops.kernel_rules`)."""
    df = dec.frame.with_row_index("_row").with_columns(
        is_gpu=pl.col("cat").is_in(GPU_CATS).fill_null(False),
        kind=pl.col("cat").replace_strict(CAT_KIND, default="other", return_dtype=Kind),  # Enum: 1 byte a row
    )
    df = df.with_columns(_marker=pl.col("is_marker") & ~pl.col("is_gpu"))
    warnings = [f"{n} event(s) of unknown category {c!r} kept as kind 'other'" for c, n in
                rows(df, ~pl.col("cat").is_in(KNOWN_CATS).fill_null(False), pl.col("cat").fill_null("<none>"))
                .to_series().value_counts().iter_rows()]

    df = _apply_meta(df, communication(df, dec.meta, dec.distributed_info, rules))
    df = assign_steps(df)
    df = df.with_columns(
        rank=pl.lit(rank, dtype=pl.Int32),
        stream=pl.when("is_gpu").then(pl.coalesce("a_stream", "tid")),
        device=pl.when("is_gpu").then(pl.coalesce("a_device", "pid")),
    )
    return conform(df), warnings


def _apply_meta(df: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Spread the per-row collective metadata into full-length columns (only the row index is joined:
    the other columns are not copied); GPU rows among them become ``comm``, gloo:* annotations too."""
    comm = comm.with_columns(
        bytes=message_size(pl.col("coll_op"), pl.col("in_bytes"), pl.col("out_bytes"), pl.col("group_size")))
    spread = (df.select("_row").join(comm, on="_row", how="left", maintain_order="left")
              .drop("_row"))
    df = df.hstack(spread)
    gloo = pl.col("_marker") & pl.col("name").str.starts_with("gloo:")
    is_comm = (pl.col("coll_op").is_not_null() & (pl.col("cat") == "kernel")) | gloo
    return df.with_columns(kind=pl.when(is_comm).then(pl.lit("comm", dtype=Kind)).otherwise("kind"))
