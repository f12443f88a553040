"""Every section of the report, declared once: :data:`SECTIONS`, in the order the report lists them.

A section's declaration says what a report with no traced run holds for it (``empty``; :data:`ABSENT`:
such a report has no such key), the function that computes its rows from one group of ranks' events
(``per_rank``, on the thread of its ``family``: :func:`.rank_groups.per_rank_frames`; None for a section
computed across ranks, in :func:`.rank_groups.cross_rank_sections`), how its rows per step are summarised
when they are a detail table (``summary``: keys, measures, the measure the run's worst steps are chosen
by: :mod:`.summaries`), whether :func:`.report.analyse` computes it from the events (``analysed``; the
others come from the run's manifest, its clocks or its Flight Recorder dumps), how it is shown
(``tables``: :class:`ddprof.report.display.Table`, its title, columns with their formatters, rows and
place; the text report and the HTML report draw every declared table, :func:`tables`) and what it says
(``verdict``: its rule, a function of the report returning sentences, said at its place ``verdict_at``
by :func:`.verdicts.verdicts`; the rule lives beside the section's analysis). :data:`EMPTY_SECTIONS`,
:data:`SECTION_ORDER`, :data:`PER_RANK` and :data:`STEP_SECTIONS` are read from it. The section's rows
are typed in :mod:`ddprof.report.schema` (the ``Report`` field of the same name; a detail table's rows in
its ``TABLE_ROWS``).

Why the tables are declared here and not in the core beside the records: a section is declared once,
here, with its verdict rule (an analysis, which the core may not import); the types they are written in
(:mod:`ddprof.report.display`) and the formatters (:mod:`ddprof.vocabulary.units`) are core, so a
renderer needs nothing but a report and these declarations.

A new section: its module (the analysis, its verdict rule if it has one, and its test), one entry here
(with its table and rule), its record in :mod:`ddprof.report.schema` (then ``python -m
ddprof.report.schema``). A per-rank section needs nothing else; a cross-rank one is computed in
:func:`.rank_groups.cross_rank_sections`. The renderers and :mod:`.verdicts` are not touched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import polars as pl
from ddprof.analyses.breakdown import breakdown_by_step, temporal_breakdown
from ddprof.analyses.bubbles import bubble_verdicts
from ddprof.analyses.clocks import NOT_ESTIMATED
from ddprof.analyses.collectives import bandwidth_verdicts
from ddprof.analyses.frames.memo import Prepared
from ddprof.analyses.health import health_verdicts
from ddprof.analyses.idle import idle_breakdown, idle_by_step, idle_verdicts
from ddprof.analyses.overlap import communication_verdicts, overlap, overlap_by_step
from ddprof.analyses.steptimes import step_times
from ddprof.analyses.stragglers import straggler_verdicts

from ddprof.report.display import Column, Table, ordered
from ddprof.report.schema import (
    BandwidthRow,
    BreakdownRow,
    BubbleStepSummary,
    Collectives,
    CommKernelRow,
    Hang,
    IdleRow,
    OverlapRow,
    PipelineRow,
    Stragglers,
    rows,
)
from ddprof.vocabulary.units import fmt_bytes, fmt_num, fmt_pct, fmt_plain, fmt_ranks, fmt_us

#: ``empty`` of a section that a report with no traced run does not hold.
ABSENT: Any = object()


@dataclass(frozen=True)
class Section:
    """One section (module doc)."""

    name: str
    empty: Any = ABSENT
    per_rank: Callable[[Prepared], pl.DataFrame] | None = None
    family: str | None = None
    summary: tuple[tuple[str, ...], tuple[str, ...], str] | None = None
    analysed: bool = True
    tables: tuple[Table, ...] = ()
    verdict: Callable[[dict[str, Any]], list[str]] | None = None
    verdict_at: int = 1_000


# --- the tables (how each shown section is drawn; the text report's headings and formatting) -------------


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


@dataclass(frozen=True)
class RankBubble:
    """A rank's mean time without compute in a step, and its pipeline stage where pipelines were found."""

    rank: int
    steps: int
    bubble_us: float | None
    bubble_pct: float | None
    stage: int | None
    theoretical_pct: float | None


def rank_bubbles(report: dict[str, Any]) -> list[RankBubble]:
    """One row per rank of ``bubbles``' summary, joined with its ``pipeline`` row, in rank order."""
    stage = {p.rank: p for p in rows(report.get("pipeline", []), PipelineRow)}
    out = []
    for b in sorted(msgspec.convert(report["bubbles"], BubbleStepSummary).per_rank, key=lambda b: b.rank):
        p = stage.get(b.rank)
        out.append(RankBubble(b.rank, b.steps, b.bubble_us.mean, b.bubble_pct.mean, p.stage if p else None,
                              p.theoretical_pct if p else None))
    return out


def _hang_note(report: dict[str, Any]) -> str:
    hang = msgspec.convert(report.get("hang") or {}, Hang)
    suspects = f"suspect ranks (the hang started there): {fmt_ranks(hang.suspect_ranks)}"
    if hang.unaccounted_ranks:
        suspects += f"; waited for, no usable dump: {fmt_ranks(hang.unaccounted_ranks)}"
    return suspects


def _stragglers(report: dict[str, Any]) -> Stragglers:
    return msgspec.convert(report["stragglers"], Stragglers)


def _collectives(report: dict[str, Any]) -> Collectives:
    return msgspec.convert(report["collectives"], Collectives)


OVERLAP_TABLE = Table(
    "Communication / computation overlap (whole trace)",
    (Column("rank", "rank"), Column("device", "device"), Column("overlap", "overlap_pct", fmt_pct),
     Column("comm", "comm_us", fmt_us), Column("overlapped", "overlapped_us", fmt_us),
     Column("exposed comm", "exposed_comm_us", fmt_us)),
    rows=lambda r: rows(r["overlap"], OverlapRow), at=10)


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
IDLE_TABLE = Table(
    "Idle time by stream and cause",
    (Column("rank", "rank"), Column("stream", "stream"), Column("host wait", "host_wait", fmt_us),
     Column("kernel wait", "kernel_wait", fmt_us), Column("other", "other", fmt_us)),
    rows=idle_streams, at=30)
STRAGGLERS_TABLE = Table(
    lambda r: f"Stragglers: {fmt_ranks(st.ranks) if (st := _stragglers(r)).ranks else 'none'}",
    (Column("rank", "rank"), Column("times last", "times_last"), Column("collectives", "instances"),
     Column("wait caused", "wait_caused_us", fmt_us), Column("mean step", "step_us", fmt_us)),
    rows=lambda r: [p for p in _stragglers(r).per_rank if p.instances], at=40)
_BUBBLE_COLUMNS = (Column("rank", "rank"), Column("steps", "steps"))
#: "bubble" is pipeline vocabulary: said only where pipeline stages were found.
PIPELINE_BUBBLES_TABLE = Table(
    "Pipeline bubbles (mean over steps)",
    (*_BUBBLE_COLUMNS, Column("bubble", "bubble_us", fmt_us), Column("bubble %", "bubble_pct", fmt_pct),
     Column("stage", "stage", fmt_plain), Column("theory", "theoretical_pct", fmt_pct)),
    rows=rank_bubbles, when=lambda r: bool(r.get("pipeline")), at=50)
NO_COMPUTE_TABLE = Table(
    "Time without compute in a step (mean over steps)",
    (*_BUBBLE_COLUMNS, Column("no compute", "bubble_us", fmt_us), Column("no compute %", "bubble_pct", fmt_pct)),
    rows=rank_bubbles, when=lambda r: not r.get("pipeline"), at=50)
COLLECTIVES_TABLE = Table(
    "Collectives, largest arrival skew first",
    (Column("pg", "pg"), Column("#", "index"), Column("op", "op"), Column("size", "bytes", fmt_bytes),
     Column("ranks", "ranks_seen", fmt_ranks), Column("skew", "arrival_skew_us", fmt_us),
     Column("duration", "duration_us", fmt_us), Column("busbw GB/s", "busbw_gbps", fmt_num),
     Column("last", "last_rank", fmt_plain)),
    rows=lambda r: _collectives(r).worst, left=3,
    more=lambda r: (_collectives(r).instances, "the detail table collectives.parquet"), at=60)
BANDWIDTH_TABLE = Table(
    "Bandwidth per op and size (nccl-tests definitions)",
    (Column("op", "op"), Column("size", "bytes", fmt_bytes), Column("ranks", "n", fmt_plain),
     Column("count", "count"), Column("mean time", "duration_us", fmt_us), Column("algbw GB/s", "algbw_gbps", fmt_num),
     Column("busbw GB/s", "busbw_gbps", fmt_num)),
    rows=lambda r: rows(r["bandwidth"], BandwidthRow), left=1, at=70)
#: Which kernel names each rule (built-in family, user rule, or collective metadata) made communication,
#: so a user can check the classification and correct it with ``--comm-kernel``.
COMM_KERNELS_TABLE = Table(
    "Communication kernels, by the rule that classified them (--comm-kernel REGEX[=op] to correct)",
    (Column("rule", "rule"), Column("source", "source"), Column("op", "op", lambda v: v or "-"),
     Column("kernel", "name", lambda v: v or "(matched no kernel)"), Column("count", "count"),
     Column("ranks", "ranks")),
    rows=lambda r: rows(r.get("comm_kernels") or [], CommKernelRow), left=4, at=80)
#: Flight Recorder findings: per group the first collective (or send/recv) some members never entered
#: (missing) or entered and never completed (for send/recv: the ranks waiting); the suspect ranks above.
HANG_TABLE = Table(
    "Hang: per process group, the first collective not entered or not completed by all",
    (Column("pg", "pg"), Column("group", "pg_desc", lambda v: v or "-"), Column("op", "op"),
     Column("#", "index"), Column("missing", "missing_ranks", fmt_ranks),
     Column("not completed", lambda h: h.not_completed_ranks if h.kind == "collective" else h.waiting_ranks,
            fmt_ranks)),
    rows=lambda r: msgspec.convert(r.get("hang") or {}, Hang).collectives, left=3, note=_hang_note, at=90)


SECTIONS: tuple[Section, ...] = (
    Section("overlap", [], overlap, "intervals", tables=(OVERLAP_TABLE,), verdict=communication_verdicts, verdict_at=30),
    Section("overlap_by_step", {"per_rank": [], "worst": []}, overlap_by_step, "intervals",
            summary=(("rank",), ("exposed_comm_us", "overlap_pct"), "exposed_comm_us")),
    Section("breakdown", [], temporal_breakdown, "intervals", tables=(BREAKDOWN_TABLE,)),
    Section("idle", [], idle_breakdown, "idle", tables=(IDLE_TABLE,), verdict=idle_verdicts, verdict_at=40),
    Section("bubbles", {"per_rank": [], "worst": []}, summary=(("rank",), ("bubble_us", "bubble_pct"), "bubble_pct"),
            tables=(PIPELINE_BUBBLES_TABLE, NO_COMPUTE_TABLE), verdict=bubble_verdicts, verdict_at=50),
    Section("stragglers", {"ranks": [], "per_rank": []}, tables=(STRAGGLERS_TABLE,), verdict=straggler_verdicts,
            verdict_at=20),
    Section("collectives", {"instances": 0, "by_op": [], "worst": []}, tables=(COLLECTIVES_TABLE,)),
    Section("bandwidth", [], tables=(BANDWIDTH_TABLE,), verdict=bandwidth_verdicts, verdict_at=60),
    Section("hang", {"collectives": []}, analysed=False, tables=(HANG_TABLE,)),
    Section("comm_kernels", [], analysed=False, tables=(COMM_KERNELS_TABLE,)),
    Section("step_times", {"per_rank": [], "worst": []}, step_times, "steps", summary=(("rank",), ("step_us",), "step_us")),
    Section("kernels", []),
    Section("kernels_by_step", {"per_kernel": [], "worst": []}, summary=(("name", "kind"), ("total_us",), "total_us")),
    Section("clocks", NOT_ESTIMATED.section(), analysed=False),
    Section("health", [], analysed=False, verdict=health_verdicts, verdict_at=10),
    Section("breakdown_by_step", per_rank=breakdown_by_step, family="steps",
            summary=(("rank",), ("span_us", "idle_pct"), "idle_pct")),
    Section("idle_by_step", per_rank=idle_by_step, family="idle",
            summary=(("rank", "category"), ("idle_us",), "idle_us")),  # of .summaries.idle_by_cause(rows)
    Section("pipeline"),
)

#: What a report with no traced run holds (a fresh copy for each report: ``copy.deepcopy``).
EMPTY_SECTIONS: dict[str, Any] = {s.name: s.empty for s in SECTIONS if s.empty is not ABSENT}
#: What :func:`.report.analyse` returns: the sections computed from events, and the collectives' warnings
#: (sentences for the run's warnings).
SECTION_ORDER: tuple[str, ...] = (*(s.name for s in SECTIONS if s.analysed), "collective_warnings")
#: Sections computed per rank: a group's rows are the run's rows of its ranks, in the run's order.
PER_RANK: tuple[str, ...] = tuple(s.name for s in SECTIONS if s.per_rank is not None)
#: Sections whose rows per step are a detail table summarised by :func:`.summaries.per_step`.
STEP_SECTIONS = {s.name: s.summary for s in SECTIONS if s.summary is not None}


def tables(sections: tuple[Section, ...] | None = None) -> list[Table]:
    """Every declared table of ``sections`` (all of :data:`SECTIONS` by default), in the order they are shown
    (``Table.at``): what the text and the HTML report draw."""
    return ordered([t for s in (SECTIONS if sections is None else sections) for t in s.tables])


def family_frames(p: Prepared, family: str) -> dict[str, pl.DataFrame]:
    """The per-rank sections of ``family``, each computed on the events of ``p``."""
    return {s.name: s.per_rank(p) for s in SECTIONS if s.family == family and s.per_rank is not None}
