"""Which events count as compute, communication and device work, per rank; profiler steps (the windows
per-step numbers are measured in: :mod:`.stepwindows`).

A rank is analysed on its GPU when it has GPU rows (``stream`` set), else on its CPU.

GPU rank (the sets HTA uses, classified by ``kind`` instead of kernel-name regexes):
  * compute: ``kind == "compute"`` kernels;
  * comm: ``kind == "comm"`` kernels (NCCL/RCCL or any kernel that collective metadata marks);
  * memory: ``memcpy`` and ``memset``.
  GPU annotations and ``sync`` rows (waits, not work) are in none of the sets.

CPU rank (gloo, no GPU rows):
  * comm: the ``gloo:*`` rows (``kind == "comm"``, no stream) on the gloo worker threads;
  * compute: the time of ``cpu_op`` rows that are not collectives (``coll_op`` null, name not a
    collective marker: :data:`ddprof.vocabulary.collective_ops.MARKER_PATTERN`), minus the time of the gloo rows on
    the same thread (blocking send/recv run on the caller's thread; an op around or inside one is
    waiting, not computing). Nested ops are merged, so a parent op and its children count once.

Each frame is derived once per event table (:mod:`.memo`); the event table is scanned once per kind of
row (GPU work rows, profiler steps, per-rank spans), and everything else derives from these small frames.
Times are integer ns; intervals are ``start``/``end``.
"""

from __future__ import annotations

import polars as pl
from ddprof.analyses.frames import intervals as iv
from ddprof.analyses.frames.memo import Prepared, collect, derived

from ddprof.store.schema import STEP_PREFIX, step_number
from ddprof.vocabulary.collective_ops import MARKER_PATTERN

WORK_KINDS = ("compute", "comm", "memcpy", "memset")


def _span() -> list[pl.Expr]:
    return [pl.col("ts_ns").alias("start"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end")]


@derived
def kernels(p: Prepared) -> pl.DataFrame:
    """The GPU work rows, every column: kind in :data:`WORK_KINDS`, with a stream. Their ranks are the
    GPU ranks."""
    return collect(p.events.filter(pl.col("stream").is_not_null() & pl.col("kind").is_in(WORK_KINDS)))


@derived
def gpu_ranks(p: Prepared) -> pl.DataFrame:
    """The GPU ranks (those with :func:`kernels` rows), one column ``rank``, in no order: from the kernel
    rows where computed already, else from three columns of the events (not every column of the kernel
    rows, for their ranks alone)."""
    known = p.known(kernels)
    rows = known.lazy() if known is not None else p.events.filter(
        pl.col("stream").is_not_null() & pl.col("kind").is_in(WORK_KINDS))
    return collect(rows.select("rank").unique())


@derived
def rank_spans(p: Prepared) -> pl.DataFrame:
    """Per rank of the run (every event counts): rank, first_ns = first start, last_ns = last end."""
    return collect(p.events.group_by("rank").agg(
        pl.col("ts_ns").min().alias("first_ns"), (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("last_ns")))


def _cpu_work(cpu: pl.LazyFrame) -> list[pl.LazyFrame]:
    """The CPU ranks' comm and compute intervals, from their gloo and CPU op rows."""
    comm = cpu.filter(pl.col("kind") == "comm").with_columns(
        pl.lit("comm").alias("role"), pl.lit(False).alias("on_gpu"), *_span())
    ops = cpu.filter((pl.col("kind") == "cpu_op") & pl.col("coll_op").is_null()
                     & ~pl.col("name").str.contains(MARKER_PATTERN))
    keys = ["rank", "tid", "step"]
    compute = iv.subtract(ops.select(*keys, *_span()), comm.select(*keys, "start", "end"), keys).with_columns(
        pl.lit(None, dtype=pl.Int64).alias("stream"), pl.lit("compute").alias("role"), pl.lit(False).alias("on_gpu"))
    return [comm, compute]


@derived
def work(p: Prepared) -> pl.DataFrame:
    """Work intervals per rank with a ``role`` (compute / comm / memory) and ``on_gpu`` (module doc).
    The CPU rows are read only where a rank has no GPU work rows.

    Columns: rank, step, stream, tid, role, start, end, on_gpu.
    """
    gpu = kernels(p)
    parts = [gpu.lazy().with_columns(
        pl.when(pl.col("kind").is_in(["memcpy", "memset"])).then(pl.lit("memory"))
        .otherwise(pl.col("kind").cast(pl.String)).alias("role"), pl.lit(True).alias("on_gpu"), *_span()
    )]
    gpu_ranks = gpu.select(pl.col("rank").unique())
    if not set(rank_spans(p)["rank"].to_list()) <= set(gpu_ranks["rank"].to_list()):
        cpu = p.events.filter(pl.col("stream").is_null() & pl.col("kind").is_in(["comm", "cpu_op"])).join(
            gpu_ranks.lazy(), on="rank", how="anti")
        parts += _cpu_work(cpu)
    cols = ["rank", "step", "stream", "tid", "role", "start", "end", "on_gpu"]
    return collect(pl.concat([f.select(cols) for f in parts]))


@derived
def steps(p: Prepared) -> pl.DataFrame:
    """The ``ProfilerStep#N`` annotations on CPU threads: rank, step, start, end (duplicates merged).

    N is read by :func:`ddprof.store.schema.step_number`, the parser ingest uses: a name that is not exactly
    ``ProfilerStep#<digits>``, or whose number does not fit Int32 (``ProfilerStep#99999999999``), is no step.
    """
    return collect(
        p.events.filter(pl.col("stream").is_null() & pl.col("name").str.starts_with(STEP_PREFIX))
        .with_columns(step_number(pl.col("name")).alias("step"))
        .filter(pl.col("step").is_not_null())  # the regex runs on the few ProfilerStep rows only
        .group_by("rank", "step")
        .agg(pl.col("ts_ns").min().alias("start"), (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("end"))
    )
