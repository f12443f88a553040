"""Which events count as compute, communication and device work, per rank; and step windows.

A rank is analysed on its GPU when it has GPU rows (``stream`` set), else on its CPU.

GPU rank (the sets HTA uses, classified by ``kind`` instead of kernel-name regexes):
  * compute: ``kind == "compute"`` kernels;
  * comm: ``kind == "comm"`` kernels (NCCL/RCCL or any kernel that collective metadata marks);
  * memory: ``memcpy`` and ``memset``.
  GPU annotations and ``sync`` rows (waits, not work) are in none of the sets.

CPU rank (gloo, no GPU rows):
  * comm: the ``gloo:*`` rows (``kind == "comm"``, no stream) on the gloo worker threads;
  * compute: the time of ``cpu_op`` rows that are not collectives (``coll_op`` null, name not
    ``c10d::``/``gloo:``/``nccl:``/``record_param_comms``), minus the time of the gloo rows on the same
    thread (blocking send/recv run on the caller's thread; an op around or inside one is waiting, not
    computing). Nested ops are merged, so a parent op and its children count once.

Every function returns a LazyFrame with ``start``/``end`` in integer ns.
"""

from __future__ import annotations

import polars as pl
from ddprof.analyses import intervals as iv

from ddprof.schema import STEP_PREFIX, step_number

WORK_KINDS = ("compute", "comm", "memcpy", "memset")
COLLECTIVE_OP_RE = r"^(c10d::|c10d_functional::|_c10d_functional::|gloo:|nccl:|record_param_comms$)"


def _span() -> list[pl.Expr]:
    return [pl.col("ts_ns").alias("start"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end")]


def gpu_rows(events: pl.LazyFrame) -> pl.LazyFrame:
    """The GPU work rows: kind in :data:`WORK_KINDS`, with a stream. Their ranks are the GPU ranks."""
    return events.filter(pl.col("stream").is_not_null() & pl.col("kind").is_in(WORK_KINDS))


def gpu_ranks(events: pl.LazyFrame) -> pl.LazyFrame:
    """Ranks with at least one GPU work row: ``[rank]``."""
    return gpu_rows(events).select("rank").unique()


def cpu_rows(events: pl.LazyFrame, gpu: pl.LazyFrame) -> pl.LazyFrame:
    """The rows the CPU sets come from: gloo and CPU op rows of the ranks not in ``gpu`` (the GPU ranks)."""
    return events.filter(pl.col("stream").is_null() & pl.col("kind").is_in(["comm", "cpu_op"])).join(
        gpu, on="rank", how="anti")


def work_of(gpu: pl.LazyFrame, cpu: pl.LazyFrame | None) -> pl.LazyFrame:
    """:func:`work` from the GPU work rows (:func:`gpu_rows`) and the CPU rows (:func:`cpu_rows`; None
    where there are none)."""
    parts = [gpu.with_columns(
        pl.when(pl.col("kind").is_in(["memcpy", "memset"])).then(pl.lit("memory"))
        .otherwise(pl.col("kind").cast(pl.String)).alias("role"), pl.lit(True).alias("on_gpu"), *_span()
    )]
    if cpu is not None:
        cpu_comm = cpu.filter(pl.col("kind") == "comm").with_columns(
            pl.lit("comm").alias("role"), pl.lit(False).alias("on_gpu"), *_span())
        ops = cpu.filter(
            (pl.col("kind") == "cpu_op") & pl.col("coll_op").is_null()
            & ~pl.col("name").str.contains(COLLECTIVE_OP_RE)
        )
        keys = ["rank", "tid", "step"]
        parts += [cpu_comm, iv.subtract(ops.select(*keys, *_span()), cpu_comm.select(*keys, "start", "end"), keys)
                  .with_columns(pl.lit(None, dtype=pl.Int64).alias("stream"), pl.lit("compute").alias("role"),
                                pl.lit(False).alias("on_gpu"))]
    cols = ["rank", "step", "stream", "tid", "role", "start", "end", "on_gpu"]
    return pl.concat([f.select(cols) for f in parts])


def work(events: pl.LazyFrame) -> pl.LazyFrame:
    """Work intervals per rank with a ``role`` (compute / comm / memory) and ``on_gpu``.

    Columns: rank, step, stream, tid, role, start, end, on_gpu.
    """
    return work_of(gpu_rows(events), cpu_rows(events, gpu_ranks(events)))


def profiler_steps(events: pl.LazyFrame) -> pl.LazyFrame:
    """The ``ProfilerStep#N`` annotations on CPU threads: rank, step, start, end (duplicates merged).

    N is read by :func:`ddprof.schema.step_number`, the parser ingest uses: a name that is not exactly
    ``ProfilerStep#<digits>``, or whose number does not fit Int32 (``ProfilerStep#99999999999``), is no step.
    """
    return (
        events.filter(pl.col("stream").is_null() & pl.col("name").str.starts_with(STEP_PREFIX))
        .with_columns(step_number(pl.col("name")).alias("step"))
        .filter(pl.col("step").is_not_null())  # the regex runs on the few ProfilerStep rows only
        .group_by("rank", "step")
        .agg(pl.col("ts_ns").min().alias("start"), (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("end"))
    )


def windows_of(steps: pl.LazyFrame, w: pl.LazyFrame) -> pl.LazyFrame:
    """:func:`step_windows` from the profiler steps (:func:`profiler_steps`) and the work intervals."""
    parts = [
        steps.select("rank", "step", "start", "end"),
        w.filter(pl.col("step").is_not_null()).select("rank", "step", "start", "end"),
    ]
    return (
        pl.concat(parts)
        .group_by("rank", "step")
        .agg(pl.col("start").min().alias("w_start"), pl.col("end").max().alias("w_end"))
        .sort("rank", "step")
    )


def step_windows(events: pl.LazyFrame, work_lf: pl.LazyFrame | None = None) -> pl.LazyFrame:
    """Window of each (rank, step): the hull of its ``ProfilerStep#N`` span and the work rows of step N.

    GPU kernels run after their launch, so on a GPU rank the window stretches to the last kernel the
    step launched. Example: ProfilerStep#3 on [0, 100) ms whose last kernel ends at 104 ms -> [0, 104).
    Columns: rank, step, w_start, w_end.
    """
    return windows_of(profiler_steps(events), work(events) if work_lf is None else work_lf)
