"""Communication/computation overlap per rank, whole trace and per step (DESIGN.md §3).

The sets are those of :mod:`ddprof.analyses.sets` (GPU kernels when the rank has them, else gloo ops
vs CPU compute ops).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
from ddprof.analyses import intervals as iv
from ddprof.analyses.sets import work

_US = 1000.0


def _overlap(w: pl.LazyFrame, by: Sequence[str]) -> pl.DataFrame:
    comm = w.filter(pl.col("role") == "comm")
    comp = w.filter(pl.col("role") == "compute")
    keys = w.select(*by).unique()
    comm_len = iv.union_length(comm, by, name="comm_ns")
    both = iv.intersection_length(comm, comp, by, name="overlapped_ns")
    out = (
        keys.join(comm_len, on=list(by), how="left")
        .join(both, on=list(by), how="left")
        .with_columns(pl.col("comm_ns", "overlapped_ns").fill_null(0))
        .with_columns(
            pl.when(pl.col("comm_ns") > 0)
            .then(100.0 * pl.col("overlapped_ns") / pl.col("comm_ns"))
            .alias("overlap_pct"),
            (pl.col("comm_ns") / _US).alias("comm_us"),
            (pl.col("overlapped_ns") / _US).alias("overlapped_us"),
            ((pl.col("comm_ns") - pl.col("overlapped_ns")) / _US).alias("exposed_comm_us"),
        )
        .select(*by, "overlap_pct", "comm_us", "overlapped_us", "exposed_comm_us")
        .sort(list(by))
    )
    return out.collect()


def overlap(events: pl.LazyFrame) -> pl.DataFrame:
    """Per rank over the whole trace: ``overlap_pct = 100 · |U(comm) ∩ U(compute)| / |U(comm)|``.

    Also ``comm_us = |U(comm)|``, ``overlapped_us = |U(comm) ∩ U(compute)|`` and
    ``exposed_comm_us = |U(comm) − U(compute)|``. Equal to HTA's ``get_comm_comp_overlap`` on the same
    kernels. ``overlap_pct`` is null on a rank without communication.

    Example: comm [0,10) us, compute [4,6) and [8,20) us -> overlapped 2 + 2 = 4 us,
    overlap_pct = 100 · 4 / 10 = 40, exposed_comm_us = 6.
    """
    w = work(events).collect().lazy()
    return _overlap(w, ["rank"]).join(
        w.select("rank", "on_gpu").unique().collect(), on="rank", how="left"
    ).with_columns(pl.when(pl.col("on_gpu")).then(pl.lit("gpu")).otherwise(pl.lit("cpu")).alias("device")).drop(
        "on_gpu"
    )


def overlap_by_step(events: pl.LazyFrame) -> pl.DataFrame:
    """The same per (rank, step), on the events of each step (GPU kernels by their launch's step).

    Example: step 3 with comm [0,10) us and compute [5,12) us -> overlap_pct 50, exposed_comm_us 5.
    """
    w = work(events).filter(pl.col("step").is_not_null()).collect().lazy()
    return _overlap(w, ["rank", "step"])
