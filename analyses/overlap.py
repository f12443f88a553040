"""Communication/computation overlap per rank, whole trace and per step (docs/DESIGN.md §3).

The sets are those of :mod:`ddprof.analyses.frames.sets` (GPU kernels when the rank has them, else gloo ops
vs CPU compute ops); their union lengths come from :mod:`ddprof.analyses.frames.lengths`.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean
from typing import Any

import msgspec
import polars as pl
from ddprof.analyses.frames.lengths import rank_lengths, window_lengths
from ddprof.analyses.frames.memo import Events, collect
from ddprof.analyses.frames.stepwindows import step_word
from ddprof.analyses.sections import Section

from ddprof.report.display import Column, Table
from ddprof.report.schema import (
    BreakdownRow,
    BreakdownStepSummary,
    OverlapRow,
    OverlapStepRow,
    OverlapStepSummary,
    rows,
)
from ddprof.vocabulary.units import NS_PER_US, fmt_pct, fmt_us


def _overlap(t: pl.DataFrame, by: Sequence[str], *extra: pl.Expr) -> pl.DataFrame:
    """From comm_ns, compute_ns and comm_compute_ns: overlapped_ns = |U(comm) ∩ U(compute)|
    = comm_ns + compute_ns − comm_compute_ns."""
    return collect(
        t.lazy().with_columns((pl.col("comm_ns") + pl.col("compute_ns") - pl.col("comm_compute_ns")).alias("overlapped_ns"))
        .with_columns(
            pl.when(pl.col("comm_ns") > 0)
            .then(100.0 * pl.col("overlapped_ns") / pl.col("comm_ns"))
            .alias("overlap_pct"),
            (pl.col("comm_ns") / NS_PER_US).alias("comm_us"),
            (pl.col("overlapped_ns") / NS_PER_US).alias("overlapped_us"),
            ((pl.col("comm_ns") - pl.col("overlapped_ns")) / NS_PER_US).alias("exposed_comm_us"),
        )
        .select(*by, "overlap_pct", "comm_us", "overlapped_us", "exposed_comm_us", *extra)
        .sort(list(by))
    )


def overlap(events: Events) -> pl.DataFrame:
    """Per rank over the whole trace: ``overlap_pct = 100 · |U(comm) ∩ U(compute)| / |U(comm)|``.

    Also ``comm_us = |U(comm)|``, ``overlapped_us = |U(comm) ∩ U(compute)|`` and
    ``exposed_comm_us = |U(comm) − U(compute)|``. Equal to HTA's ``get_comm_comp_overlap`` on the same
    kernels. ``overlap_pct`` is null on a rank without communication.

    Example: comm [0,10) us, compute [4,6) and [8,20) us -> overlapped 2 + 2 = 4 us,
    overlap_pct = 100 · 4 / 10 = 40, exposed_comm_us = 6.
    """
    device = pl.when(pl.col("on_gpu")).then(pl.lit("gpu")).otherwise(pl.lit("cpu")).alias("device")
    return _overlap(rank_lengths(events), ["rank"], device)


def overlap_by_step(events: Events) -> pl.DataFrame:
    """The same per (rank, step), in each step window that holds work (:func:`~ddprof.analyses.frames.stepwindows.step_windows`:
    on a GPU rank its device step, every kernel inside it counting whichever step launched it; on a
    CPU-only rank its host step); ``basis`` says which.

    Example: step 3 with comm [0,10) us and compute [5,12) us -> overlap_pct 50, exposed_comm_us 5.
    """
    t = window_lengths(events).filter(pl.col("busy_ns") > 0)
    return _overlap(t, ["rank", "step"], pl.col("basis"))


def communication_verdicts(report: dict[str, Any]) -> list[str]:
    """Exposed communication as a share of time, one basis for every rank: when every rank with
    communication has steps, the exposed communication inside its steps (``overlap_by_step``'s total) over
    its step time (``breakdown_by_step``'s total span: the device steps on GPU ranks), labelled "device
    step time" where every rank's steps are device steps, else "step time"; else the whole trace's
    (``overlap``) over the traced span (``breakdown``), labelled "the traced time".
    Example: 40 µs exposed in two 100 µs steps -> "20 % of step time", even if 20 µs more lie
    outside the steps."""
    ov = [o for o in rows(report["overlap"], OverlapRow) if o.comm_us > 0]
    if not ov:
        return []
    step_span: dict[int, float] = {}
    bases = []
    if "breakdown_by_step" in report:
        for b in msgspec.convert(report["breakdown_by_step"], BreakdownStepSummary).per_rank:
            step_span[b.rank] = b.span_us.total or 0.0
            bases.append(b.basis)
    if all(step_span.get(o.rank) for o in ov):
        word, basis = f"{step_word(bases)} time", step_span
        exposed = {row.rank: row.exposed_comm_us.total or 0.0
                   for row in msgspec.convert(report["overlap_by_step"], OverlapStepSummary).per_rank}
    else:
        word = "the traced time"
        basis = {b.rank: b.span_us for b in rows(report["breakdown"], BreakdownRow)}
        exposed = {o.rank: o.exposed_comm_us for o in ov}
    shares = {o.rank: 100 * exposed.get(o.rank, 0.0) / basis[o.rank] for o in ov if basis.get(o.rank)}
    if not shares:
        return []
    worst = max(shares, key=lambda r: shares[r])
    text = f"exposed communication is {mean(shares.values()):.0f} % of {word}"
    if len(shares) > 1:
        text += f" (worst: rank {worst}, {shares[worst]:.0f} %)"
    return [text + f"; {mean(o.overlap_pct or 0.0 for o in ov):.0f} % of communication overlaps compute"]


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

OVERLAP_TABLE = Table(
    "Communication / computation overlap (whole trace)",
    (Column("rank", "rank"), Column("device", "device"), Column("overlap", "overlap_pct", fmt_pct),
     Column("comm", "comm_us", fmt_us), Column("overlapped", "overlapped_us", fmt_us),
     Column("exposed comm", "exposed_comm_us", fmt_us)),
    rows=lambda r: rows(r["overlap"], OverlapRow), at=10)

SECTIONS = (
    Section("overlap", [], overlap, "intervals", tables=(OVERLAP_TABLE,), verdict=communication_verdicts, verdict_at=30,
            record=list[OverlapRow], order=10),
    Section("overlap_by_step", {"per_rank": [], "worst": []}, overlap_by_step, "intervals",
            summary=(("rank",), ("exposed_comm_us", "overlap_pct"), "exposed_comm_us"),
            record=OverlapStepSummary, detail=OverlapStepRow, order=20),
)
