"""Temporal breakdown per rank (HTA's ``get_temporal_breakdown``), whole trace and per step.

Sets from :mod:`ddprof.analyses.sets`: on a GPU rank all work = compute + comm + memcpy/memset kernels
on every stream (HTA takes every row with a stream); on a CPU-only rank the same definitions apply to
the CPU compute ops and gloo ops (HTA cannot analyse such traces).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
from ddprof.analyses import intervals as iv
from ddprof.analyses.sets import step_windows, work

_US = 1000.0


def _breakdown(w: pl.LazyFrame, spans: pl.LazyFrame, by: Sequence[str]) -> pl.DataFrame:
    """``spans`` gives ``span_ns`` per group; ``w`` the work intervals already inside the spans."""
    keys = list(by)
    busy = iv.union_length(w, keys, name="busy_ns")
    comp = iv.union_length(w.filter(pl.col("role") == "compute"), keys, name="compute_ns")
    out = (
        spans.join(busy, on=keys, how="left")
        .join(comp, on=keys, how="left")
        .with_columns(pl.col("busy_ns", "compute_ns").fill_null(0))
        .with_columns(
            (pl.col("span_ns") - pl.col("busy_ns")).alias("idle_ns"),
            (pl.col("busy_ns") - pl.col("compute_ns")).alias("non_compute_ns"),
        )
    )
    pct = {f"{k}_pct": pl.when(pl.col("span_ns") > 0).then(100.0 * pl.col(f"{k}_ns") / pl.col("span_ns"))
           for k in ("idle", "compute", "non_compute")}
    return (
        out.with_columns(
            *[(pl.col(f"{k}_ns") / _US).alias(f"{k}_us") for k in ("idle", "compute", "non_compute", "span")],
            **pct,
        )
        .select(*keys, "idle_us", "compute_us", "non_compute_us", "span_us",
                "idle_pct", "compute_pct", "non_compute_pct")
        .sort(keys)
        .collect()
    )


def temporal_breakdown(events: pl.LazyFrame) -> pl.DataFrame:
    """Per rank: span = last work end − first work start; idle = span − |U(all work)|;
    compute = |U(compute)|; non-compute = |U(all work)| − |U(compute)|; each also as % of span.

    Example: compute [0,4) us, comm [3,6) us, memcpy [8,10) us -> span 10, all 8, compute 4:
    idle 2 us (20 %), compute 4 us (40 %), non-compute 4 us (40 %).
    """
    w = work(events).collect().lazy()
    spans = w.group_by("rank").agg((pl.col("end").max() - pl.col("start").min()).alias("span_ns"))
    return _breakdown(w, spans, ["rank"])


def breakdown_by_step(events: pl.LazyFrame) -> pl.DataFrame:
    """The same per (rank, step) over the step window (:func:`sets.step_windows`) instead of the span.

    Example: window [0,10) us with compute [2,4) us only -> idle 8 us (80 %), compute 2 us (20 %).
    """
    w = work(events).collect().lazy()
    windows = step_windows(events, w)
    inside = iv.clip(w.filter(pl.col("step").is_not_null()), windows, ["rank", "step"])
    spans = windows.select("rank", "step", (pl.col("w_end") - pl.col("w_start")).alias("span_ns"))
    return _breakdown(inside, spans, ["rank", "step"])
