"""Temporal breakdown per rank (HTA's ``get_temporal_breakdown``), whole trace and per step.

Sets from :mod:`ddprof.analyses.frames.sets`: on a GPU rank all work = compute + comm + memcpy/memset kernels
on every stream (HTA takes every row with a stream, a ``cuda_sync`` row too: a stream waiting for an event,
which is idle here and non-compute there); on a CPU-only rank the same definitions apply to
the CPU compute ops and gloo ops (HTA cannot analyse such traces). Union lengths from
:mod:`ddprof.analyses.frames.lengths`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import polars as pl
from ddprof.analyses.frames.lengths import rank_lengths, window_lengths
from ddprof.analyses.frames.memo import Events, collect
from ddprof.analyses.sections import Section

from ddprof.report.display import Column, Table
from ddprof.report.schema import BreakdownRow, BreakdownStepRow, BreakdownStepSummary, OverlapRow, rows
from ddprof.vocabulary.units import NS_PER_US, fmt_pct, fmt_us


def _breakdown(t: pl.DataFrame, by: Sequence[str], *extra: str) -> pl.DataFrame:
    """From span_ns, busy_ns (all work inside the span) and compute_ns per group."""
    keys = list(by)
    out = t.lazy().with_columns(
        (pl.col("span_ns") - pl.col("busy_ns")).alias("idle_ns"),
        (pl.col("busy_ns") - pl.col("compute_ns")).alias("non_compute_ns"),
    )
    pct = {f"{k}_pct": pl.when(pl.col("span_ns") > 0).then(100.0 * pl.col(f"{k}_ns") / pl.col("span_ns"))
           for k in ("idle", "compute", "non_compute")}
    return collect(
        out.with_columns(
            *[(pl.col(f"{k}_ns") / NS_PER_US).alias(f"{k}_us") for k in ("idle", "compute", "non_compute", "span")],
            **pct,
        )
        .select(*keys, "idle_us", "compute_us", "non_compute_us", "span_us",
                "idle_pct", "compute_pct", "non_compute_pct", *extra)
        .sort(keys)
    )


def temporal_breakdown(events: Events) -> pl.DataFrame:
    """Per rank: span = last work end − first work start; idle = span − |U(all work)|;
    compute = |U(compute)|; non-compute = |U(all work)| − |U(compute)|; each also as % of span.

    Example: compute [0,4) us, comm [3,6) us, memcpy [8,10) us -> span 10, all 8, compute 4:
    idle 2 us (20 %), compute 4 us (40 %), non-compute 4 us (40 %).
    """
    return _breakdown(rank_lengths(events), ["rank"])


def breakdown_by_step(events: Events) -> pl.DataFrame:
    """The same per (rank, step) over the step window instead of the span
    (:func:`~ddprof.analyses.frames.stepwindows.step_windows`: on a GPU rank its device step, every kernel
    inside it counting whichever step launched it; on a CPU-only rank its host step); ``basis`` says which.

    Example: window [0,10) us with compute [2,4) us only -> idle 8 us (80 %), compute 2 us (20 %).
    """
    t = window_lengths(events).rename({"window_ns": "span_ns"})
    return _breakdown(t, ["rank", "step"], "basis")


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

def _breakdown_title(report: dict[str, Any]) -> str:
    """What the breakdown's span runs between: kernels on a GPU rank, CPU ops (gloo ops and CPU compute) on a
    CPU-only one, said for the ranks the table shows."""
    devices: set[str | None] = {row.device for row in rows(report.get("overlap") or [], OverlapRow)}
    devices = devices or {(report.get("run") or {}).get("device")}
    if devices == {"cpu"}:
        return "Temporal breakdown (first to last CPU op)"
    if "cpu" in devices:
        return "Temporal breakdown (first to last kernel; CPU op on CPU-only ranks)"
    return "Temporal breakdown (first to last kernel)"


BREAKDOWN_TABLE = Table(
    _breakdown_title,
    (Column("rank", "rank"), Column("span", "span_us", fmt_us), Column("idle", "idle_us", fmt_us),
     Column("compute", "compute_us", fmt_us), Column("non-compute", "non_compute_us", fmt_us),
     Column("idle %", "idle_pct", fmt_pct), Column("compute %", "compute_pct", fmt_pct),
     Column("non-comp %", "non_compute_pct", fmt_pct)),
    rows=lambda r: rows(r["breakdown"], BreakdownRow), at=20)

SECTIONS = (
    Section("breakdown", [], temporal_breakdown, "intervals", tables=(BREAKDOWN_TABLE,), record=list[BreakdownRow],
            order=30),
    Section("breakdown_by_step", per_rank=breakdown_by_step, family="steps",
            summary=(("rank",), ("span_us", "idle_pct"), "idle_pct"), record=BreakdownStepSummary,
            when_absent=msgspec.field(default_factory=lambda: BreakdownStepSummary(per_rank=[], worst=[])),
            detail=BreakdownStepRow, order=160),
)
