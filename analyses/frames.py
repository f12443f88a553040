"""The frames several analyses read, each collected once per :class:`~prepared.Prepared`.

The event table is scanned once per kind of row the analyses need (GPU work rows, profiler steps,
per-rank spans; communication and runtime rows in their own modules), and everything else derives
from these small frames. Definitions are those of :mod:`ddprof.analyses.sets`.
"""

from __future__ import annotations

import polars as pl
from ddprof.analyses.prepared import Prepared, collect
from ddprof.analyses.sets import cpu_rows, gpu_rows, profiler_steps, windows_of, work_of


def kernel_rows(p: Prepared) -> pl.DataFrame:
    """:func:`sets.gpu_rows`: every column of the GPU work rows."""
    return collect(gpu_rows(p.events))


def rank_spans(p: Prepared) -> pl.DataFrame:
    """Per rank of the run (every event counts): rank, first_ns = first start, last_ns = last end."""
    return collect(p.events.group_by("rank").agg(
        pl.col("ts_ns").min().alias("first_ns"), (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("last_ns")))


def work_frame(p: Prepared) -> pl.DataFrame:
    """:func:`sets.work`; the CPU rows are read only where a rank has no GPU work rows."""
    gpu = p.get(kernel_rows)
    gpu_ranks = gpu.select(pl.col("rank").unique())
    all_gpu = set(p.get(rank_spans)["rank"].to_list()) <= set(gpu_ranks["rank"].to_list())
    return collect(work_of(gpu.lazy(), None if all_gpu else cpu_rows(p.events, gpu_ranks.lazy())))


def steps_frame(p: Prepared) -> pl.DataFrame:
    """:func:`sets.profiler_steps`."""
    return collect(profiler_steps(p.events))


def windows_frame(p: Prepared) -> pl.DataFrame:
    """:func:`sets.step_windows`."""
    return collect(windows_of(p.get(steps_frame).lazy(), p.get(work_frame).lazy()))
