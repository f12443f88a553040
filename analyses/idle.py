"""Idle time per GPU stream by cause (HTA's ``get_idle_time_breakdown``), whole trace and per step.

On each stream, kernels (compute, comm, memcpy, memset; not sync, not annotations) sorted by start;
the gap before kernel k is ``start_k − end_{k−1}``. Its category:

* ``host_wait``: the launch of kernel k (the runtime call with the same rank and correlation; the
  earliest one if several) started after kernel k−1 ended: the CPU did not enqueue work fast enough;
* ``kernel_wait``: otherwise, a gap shorter than the threshold (launch overhead between back-to-back
  kernels);
* ``other``: everything else (e.g. a kernel waiting on an event from another stream).

HTA documents its threshold ``consecutive_kernel_delay=30`` as nanoseconds but compares it with
microsecond timestamps, so it is 30 µs in effect; ours is ``kernel_wait_us`` = 30 µs, the same rule.
A negative gap (kernels that overlap on one stream by a rounding error in the trace) counts 0 here;
HTA would subtract it from the stream's idle time. No gap crosses the edge of a profiling window
(:mod:`ddprof.analyses.frames.windows`): the time between two windows was never traced.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean
from typing import Any

import msgspec
import numpy as np
import polars as pl
from ddprof.analyses.dataloading import idle_in_loading
from ddprof.analyses.frames.memo import Events, Prepared, collect, derived, prepare
from ddprof.analyses.frames.sets import kernels
from ddprof.analyses.frames.stepwindows import step_at, step_windows
from ddprof.analyses.frames.windows import several_windows, trace_windows, window_of
from ddprof.analyses.idle_host import FINDINGS, MIN_IDLE_PCT, host_in_idle
from ddprof.analyses.sections import Section

from ddprof.frames.keyjoin import find, first_by_key, pair_keys, sorted_rows
from ddprof.report.display import Column, Table
from ddprof.report.schema import (
    BreakdownRow,
    HealthFinding,
    IdleRow,
    IdleStepRow,
    IdleStepSummary,
    OverlapRow,
    RunSection,
    field_of,
    rows,
)
from ddprof.vocabulary.units import NS_PER_US, fmt_us

CATEGORIES = ("host_wait", "kernel_wait", "other")


@derived
def idle_gaps(p: Prepared, kernel_wait_us: float = 30.0) -> pl.DataFrame:
    """One row per gap between consecutive kernels of a stream: rank, stream, step, gap_ns, category.
    A gap's step is the step window that holds its end, the start of the kernel that ends it
    (:func:`~ddprof.analyses.frames.stepwindows.step_at`: on a GPU rank its device step; null outside
    every step).

    Example, one stream, threshold 30 µs: kernel A [0,10) µs; B launched at 5 µs, starts at 12 µs
    -> gap 2 µs, kernel_wait; C launched at 40 µs (after B ended at 20 µs), starts at 41 µs
    -> gap 21 µs, host_wait.
    """
    rows = kernels(p).select("rank", "stream", "step", "ts_ns",
                             (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"), "correlation")
    rows = rows.with_columns(launch_ns=_launch_ns(p, rows))
    rows = sorted_rows(rows, "rank", "stream", "ts_ns")  # stream by stream in start order
    same_stream = (pl.col("rank") == pl.col("rank").shift(1)) & (pl.col("stream") == pl.col("stream").shift(1))
    if several_windows(p):  # a gap between two windows is untraced time, not idle
        rows = rows.with_columns(window_of(p, rows, "ts_ns"))
        same_stream = same_stream & (pl.col("window") == pl.col("window").shift(1))
    threshold = int(round(kernel_wait_us * NS_PER_US))
    return collect(
        rows.lazy()
        .with_columns(pl.when(same_stream).then(pl.col("end_ns").shift(1)).alias("prev_end"))
        .filter(pl.col("prev_end").is_not_null())
        .with_columns((pl.col("ts_ns") - pl.col("prev_end")).alias("raw_gap"))
        .with_columns(
            pl.when(pl.col("launch_ns") > pl.col("prev_end")).then(pl.lit("host_wait"))
            .when(pl.col("raw_gap") < threshold).then(pl.lit("kernel_wait"))
            .otherwise(pl.lit("other"))
            .alias("category"),
            pl.col("raw_gap").clip(lower_bound=0).alias("gap_ns"),
        )
        .select("rank", "stream", "step", "ts_ns", "gap_ns", "category")
    ).pipe(lambda gaps: gaps.with_columns(step_at(p, gaps, "ts_ns")).drop("ts_ns"))


def _launch_ns(p: Prepared, rows: pl.DataFrame) -> pl.Series:
    """Per kernel row: the start of the earliest runtime call with its rank and correlation (null if none),
    in the kernel's profiling window where a rank has several (two traces of a restarted process reuse
    correlation ids)."""
    calls = collect(p.events.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
                    .select("rank", "correlation", "ts_ns"))
    if calls.height == 0:
        return pl.Series("launch_ns", [None] * rows.height, dtype=pl.Int64)
    linked = rows["correlation"].is_not_null().to_numpy()
    call_owner, kernel_owner = calls["rank"].to_numpy().astype(np.int64), rows["rank"].to_numpy().astype(np.int64)
    if several_windows(p):  # owner = (rank, window) as one non-negative integer
        per = trace_windows(p).height  # above every window index
        call_owner = call_owner * per + window_of(p, calls, "ts_ns").fill_null(0).to_numpy()
        kernel_owner = kernel_owner * per + window_of(p, rows, "ts_ns").fill_null(0).to_numpy()
    launch_key, kernel_key = pair_keys((call_owner, calls["correlation"].to_numpy()),
                                       (kernel_owner, rows["correlation"].fill_null(0).to_numpy()))
    starts = calls["ts_ns"].to_numpy()
    keys, first = first_by_key(launch_key, starts)
    found, at = find(keys, kernel_key)
    return pl.Series("launch_ns", np.ma.masked_array(starts[first[at]], mask=~(found & linked)), dtype=pl.Int64)


@derived
def gap_sums(p: Prepared, kernel_wait_us: float = 30.0) -> pl.DataFrame:
    """Sum of the gaps per (rank, step, stream, category): what both tables below add up."""
    return collect(idle_gaps(p, kernel_wait_us).lazy().group_by("rank", "step", "stream", "category")
                   .agg(pl.col("gap_ns").sum()))


def _categorise(sums: pl.LazyFrame, by: list[str], keys: pl.LazyFrame | None = None) -> pl.DataFrame:
    cats = pl.LazyFrame({"category": list(CATEGORIES)})
    grid = (sums.select(*by) if keys is None else keys).unique().join(cats, how="cross")
    sums = sums.group_by(*by, "category").agg(pl.col("gap_ns").sum())
    return collect(
        grid.join(sums, on=[*by, "category"], how="left")
        .with_columns(pl.col("gap_ns").fill_null(0))
        .with_columns(pl.col("gap_ns").sum().over(by).alias("__total"))
        .with_columns(
            (pl.col("gap_ns") / NS_PER_US).alias("idle_us"),
            pl.when(pl.col("__total") > 0).then(pl.col("gap_ns") / pl.col("__total")).alias("ratio"),
        )
        .select(*by, "category", "idle_us", "ratio")
        .sort(*by, "category")
    )


def idle_breakdown(events: Events, kernel_wait_us: float = 30.0) -> pl.DataFrame:
    """Per (rank, stream, category): ``idle_us`` = sum of the gaps, ``ratio`` = idle_us / stream's idle.

    Example (see :func:`idle_gaps`): host_wait 21 µs (ratio 0.913), kernel_wait 2 µs (0.087), other 0.
    Every stream with a kernel has its three rows (a stream with one kernel: zeros, ratio null).
    """
    p = prepare(events)
    streams = kernels(p).lazy().select("rank", "stream")
    return _categorise(gap_sums(p, kernel_wait_us).lazy(), ["rank", "stream"], streams)


def idle_by_step(events: Events, kernel_wait_us: float = 30.0) -> pl.DataFrame:
    """The same per (rank, step, stream), with the ``basis`` of the rank's steps; a gap belongs to the
    step window that holds its end (:func:`idle_gaps`: on a GPU rank its device step)."""
    p = prepare(events)
    sums = gap_sums(p, kernel_wait_us).lazy().filter(pl.col("step").is_not_null())
    basis = step_windows(p).lazy().select("rank", "basis").unique()
    return collect(_categorise(sums, ["rank", "step", "stream"]).lazy()
                   .join(basis, on="rank", how="left").sort("rank", "step", "stream", "category"))


#: Idle time below this share of the traced time is not worth a verdict.
IDLE_WORTH_MENTIONING_PCT = MIN_IDLE_PCT
#: What each idle category says about the run (:func:`idle_verdicts`).
CAUSES = {
    "host_wait": "the CPU does not launch work fast enough",
    "kernel_wait": "launch gaps between back-to-back kernels",
    "other": "kernels wait for other streams or events (often communication)",
}


def idle_verdicts(report: dict[str, Any]) -> list[str]:
    """The idle time's verdict, from ``breakdown`` and ``idle``: the devices' mean idle share of the traced
    time, from :data:`IDLE_WORTH_MENTIONING_PCT` up, and the cause of most gaps (:data:`CAUSES`); host wait
    that fell mostly (half or more of the idle time) while the host loaded data is said to be that
    (:func:`.dataloading.idle_in_loading`), not a slow launch rate, and so is host wait through which the host
    was mostly inside memory, synchronising or set-up calls (:func:`.idle_host.host_in_idle`)."""
    breakdown = rows(report["breakdown"], BreakdownRow)
    if not breakdown:
        return []
    idle = mean(b.idle_pct or 0.0 for b in breakdown)
    if idle < IDLE_WORTH_MENTIONING_PCT:
        return []
    device = "GPUs" if any(o.device == "gpu" for o in rows(report["overlap"], OverlapRow)) else "CPUs"
    text = f"the {device} are idle {idle:.0f} % of the traced time"
    totals: dict[str, float] = {}
    for row in rows(report["idle"], IdleRow):
        totals[row.category] = totals.get(row.category, 0.0) + row.idle_us
    if sum(totals.values()) > 0:
        top = max(totals, key=lambda c: totals[c])
        share = 100 * totals[top] / sum(totals.values())
        captured, run = _captured(report) if top == "host_wait" else (0, 0)
        if captured and captured >= run:
            text += (f"; {share:.0f} % of the gaps are host wait, but the trace is mostly a graph capture "
                     f"({captured} launches captured into a CUDA/HIP graph, {run} kernels run): captured work "
                     "runs later, through graph launches, so this idle time says nothing about launch speed")
        elif top == "host_wait" and (loading := idle_in_loading(report)) is not None and loading >= 0.5:
            text += (f"; {share:.0f} % of the gaps are host wait, and {100 * loading:.0f} % of the idle time fell "
                     "while the host was loading data: the input pipeline, not the launch rate, keeps the device "
                     "waiting")
        elif top == "host_wait" and (inside := host_in_idle(report)) is not None:
            cls, part, calls = inside
            what, why = FINDINGS[cls]
            text += (f"; {share:.0f} % of the gaps are host wait, and through {100 * part:.0f} % of the idle time "
                     f"the host was {what} ({calls}): {why}")
        else:
            text += f"; {share:.0f} % of the gaps are {top.replace('_', ' ')}: {CAUSES[top]}"
    return [text]


def _captured(report: dict[str, Any]) -> tuple[int, int]:
    """Launches captured into graphs (the health section's ``graph_capture``) and kernels run, over the run."""
    captured = sum(f.count for f in rows(report.get("health") or [], HealthFinding) if f.finding == "graph_capture")
    return captured, sum(p.kernels for p in field_of(report.get("run") or {}, RunSection, "per_rank"))


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

@dataclass(frozen=True)
class IdleStream:
    """The ``idle`` rows of one stream side by side, by cause (None: no gap of that cause)."""

    rank: int
    stream: int
    host_wait: float | None
    kernel_wait: float | None
    other: float | None


def idle_streams(report: dict[str, Any]) -> list[IdleStream]:
    """One row per (rank, stream), its idle time by cause, in rank and stream order."""
    by_stream: dict[tuple[int, int], dict[str, float]] = {}
    for row in rows(report["idle"], IdleRow):
        by_stream.setdefault((row.rank, row.stream), {})[row.category] = row.idle_us
    return [IdleStream(r, s, c.get("host_wait"), c.get("kernel_wait"), c.get("other"))
            for (r, s), c in sorted(by_stream.items())]


IDLE_TABLE = Table(
    "Idle time by stream and cause",
    (Column("rank", "rank"), Column("stream", "stream"), Column("host wait", "host_wait", fmt_us),
     Column("kernel wait", "kernel_wait", fmt_us), Column("other", "other", fmt_us)),
    rows=idle_streams, at=30)

SECTIONS = (
    Section("idle", [], idle_breakdown, "idle", tables=(IDLE_TABLE,), verdict=idle_verdicts, verdict_at=40,
            record=list[IdleRow], order=40),
    Section("idle_by_step", per_rank=idle_by_step, family="idle",
            summary=(("rank", "category"), ("idle_us",), "idle_us"),  # of .summaries.idle_by_cause(rows)
            record=IdleStepSummary,
            when_absent=msgspec.field(default_factory=lambda: IdleStepSummary(per_rank=[], worst=[])),
            detail=IdleStepRow, order=170),
)
