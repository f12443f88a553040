"""Profiling windows per rank (:mod:`ddprof.store.windows`), and the window each row falls in.

A run's windows come from its manifest (ingest cuts every trace file, which saw every row; the report
provides them); an event table without one has them derived here from its own rows by the same rule,
one trace per rank. Time between two windows of a rank was never traced: the span, the idle time and
the idle gaps of a rank are measured window by window and added up (:mod:`.lengths`,
:mod:`ddprof.analyses.idle`).

A run whose every rank has one window is measured exactly as before windows existed: nothing here
is consulted beyond :func:`several_windows`.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from ddprof.analyses.frames.memo import Prepared, collect, derived
from ddprof.analyses.frames.sets import steps

from ddprof.store.windows import gap_threshold_ns, split_windows

SCHEMA = {"rank": pl.Int32(), "window": pl.Int32(), "t_start": pl.Int64(), "t_end": pl.Int64()}


def windows_frame(per_rank: dict[int, list[list[int]]]) -> pl.DataFrame:
    """rank, window (0, 1, ... in time order per rank), t_start, t_end from ``{rank: [[start, end], ...]}``."""
    rows = [(r, i, s, e) for r, ws in per_rank.items() for i, (s, e) in enumerate(sorted(ws))]
    return pl.DataFrame(rows, schema=SCHEMA, orient="row").sort("rank", "window")


@derived
def trace_windows(p: Prepared) -> pl.DataFrame:
    """rank, window, t_start, t_end: each rank's profiling windows, derived from its rows (module doc).

    Example, no steps (threshold 1 s): rank 0 with events [0, 2) s and [200, 201) s -> windows 0: [0, 2) s
    and 1: [200, 201) s.
    """
    ev = collect(p.events.select("rank", pl.col("ts_ns").alias("start"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end")))
    durations = steps(p).with_columns((pl.col("end") - pl.col("start")).alias("dur"))
    per_rank: dict[int, list[list[int]]] = {}
    for (rank,), part in ev.partition_by("rank", as_dict=True).items():
        dur = durations.filter(pl.col("rank") == rank)["dur"].to_numpy()
        per_rank[int(rank)] = split_windows(part["start"].to_numpy(), part["end"].to_numpy(), gap_threshold_ns(dur))
    return windows_frame(per_rank)


def several_windows(p: Prepared) -> bool:
    """Whether some rank has more than one window."""
    return bool(trace_windows(p)["rank"].is_duplicated().any())


def window_of(p: Prepared, rows: pl.DataFrame, at: str) -> pl.Series:
    """The window (Int32) of each row of ``rows`` (columns ``rank`` and ``at``, a time in ns), in row
    order. Windows are told apart at the middle of the untraced gap between them (window k > 0 begins at
    ``(t_end[k−1] + t_start[k]) / 2``), so times moved by a clock correction far smaller than the gap
    (:mod:`ddprof.analyses.clocks`) keep their window. Example: windows [0, 3) s and [200, 201) s -> a row
    at 101.5 s or later is in window 1, any earlier one in window 0."""
    first = pl.lit(np.iinfo(np.int64).min, dtype=pl.Int64)  # window 0 takes everything before window 1
    w = trace_windows(p).with_columns(
        pl.when(pl.col("window") == 0).then(first)
        .otherwise((pl.col("t_end").shift(1).over("rank") + pl.col("t_start")) // 2).alias("__cut"))
    keyed = rows.select(pl.col("rank").cast(pl.Int32), pl.col(at).alias("__at")).with_row_index("__i")
    found = (keyed.sort("__at").join_asof(w.select("rank", "window", "__cut").sort("__cut"), left_on="__at",
                                          right_on="__cut", by="rank", strategy="backward", check_sortedness=False)
             .sort("__i"))
    return found["window"].alias("window")


def window_counts(p: Prepared) -> dict[int, int]:
    """Number of profiling windows per rank."""
    counts = trace_windows(p).group_by("rank").len()
    return {int(r): int(n) for r, n in counts.iter_rows()}


def traced_ns(p: Prepared) -> pl.DataFrame:
    """rank, traced_ns = Σ (t_end − t_start) over the rank's windows: the time it was traced."""
    return trace_windows(p).group_by("rank").agg((pl.col("t_end") - pl.col("t_start")).sum().alias("traced_ns"))
