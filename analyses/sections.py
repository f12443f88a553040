"""Every section of the report, declared once: :data:`SECTIONS`, in the order the report lists them.

A section's declaration says what a report with no traced run holds for it (``empty``; :data:`ABSENT`:
such a report has no such key), the function that computes its rows from one group of ranks' events
(``per_rank``, on the thread of its ``family``: :func:`.rank_groups.per_rank_frames`; None for a section
computed across ranks, in :func:`.rank_groups.cross_rank_sections`), how its rows per step are summarised
when they are a detail table (``summary``: keys, measures, the measure the run's worst steps are chosen
by: :mod:`.summaries`), and whether :func:`.report.analyse` computes it from the events (``analysed``; the
others come from the run's manifest, its clocks or its Flight Recorder dumps). :data:`EMPTY_SECTIONS`,
:data:`SECTION_ORDER`, :data:`PER_RANK` and :data:`STEP_SECTIONS` are read from it. The section's rows are
typed in :mod:`ddprof.report.schema` (the ``Report`` field of the same name; a detail table's rows in its
``TABLE_ROWS``), and its text table, if it has one, in :mod:`ddprof.render.text`.

A new section: its module (the analysis and its test), one entry here, its record in
:mod:`ddprof.report.schema` (then ``python -m ddprof.report.schema``), and its table in the renderers if it
is to be shown. A per-rank section needs nothing else; a cross-rank one is computed in
:func:`.rank_groups.cross_rank_sections`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl
from ddprof.analyses.breakdown import breakdown_by_step, temporal_breakdown
from ddprof.analyses.clocks import NOT_ESTIMATED
from ddprof.analyses.frames.memo import Prepared
from ddprof.analyses.idle import idle_breakdown, idle_by_step
from ddprof.analyses.overlap import overlap, overlap_by_step
from ddprof.analyses.steptimes import step_times

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


SECTIONS: tuple[Section, ...] = (
    Section("overlap", [], overlap, "intervals"),
    Section("overlap_by_step", {"per_rank": [], "worst": []}, overlap_by_step, "intervals",
            summary=(("rank",), ("exposed_comm_us", "overlap_pct"), "exposed_comm_us")),
    Section("breakdown", [], temporal_breakdown, "intervals"),
    Section("idle", [], idle_breakdown, "idle"),
    Section("bubbles", {"per_rank": [], "worst": []}, summary=(("rank",), ("bubble_us", "bubble_pct"), "bubble_pct")),
    Section("stragglers", {"ranks": [], "per_rank": []}),
    Section("collectives", {"instances": 0, "by_op": [], "worst": []}),
    Section("bandwidth", []),
    Section("hang", {"collectives": []}, analysed=False),
    Section("comm_kernels", [], analysed=False),
    Section("step_times", {"per_rank": [], "worst": []}, step_times, "steps", summary=(("rank",), ("step_us",), "step_us")),
    Section("kernels", []),
    Section("kernels_by_step", {"per_kernel": [], "worst": []}, summary=(("name", "kind"), ("total_us",), "total_us")),
    Section("clocks", NOT_ESTIMATED.section(), analysed=False),
    Section("health", [], analysed=False),
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


def family_frames(p: Prepared, family: str) -> dict[str, pl.DataFrame]:
    """The per-rank sections of ``family``, each computed on the events of ``p``."""
    return {s.name: s.per_rank(p) for s in SECTIONS if s.family == family and s.per_rank is not None}
