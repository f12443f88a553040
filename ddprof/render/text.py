"""The report (docs/DESIGN.md §4) as plain text for a terminal: verdicts first, then compact tables.

Every line fits in 100 columns. Long tables show their first rows and say how many more the JSON report
holds. The tables are the sections' declared ones (:data:`ddprof.analyses.sections.SECTIONS`, drawn by
:func:`ddprof.report.display.draw`), in their declared order, the HTML report draws the same; the run,
the trace's health and the verdicts are written here. Each section is read as its declared records
(:mod:`ddprof.report.schema`), its fields as attributes.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from ddprof.analyses.sections import tables
from ddprof.render.run import WIDTH, item, render_run
from ddprof.report.display import Drawn, draw
from ddprof.report.schema import HealthFinding, rows
from ddprof.vocabulary.units import fmt_ranges

MAX_ROWS = 40
HEALTH_TITLE = "Trace health: what this trace cannot tell (read before the numbers)"


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 0,
          more: tuple[int, str] | None = None) -> str:
    """A titled table; the first ``left`` columns are left-aligned, the others right-aligned. ``more``:
    (rows in all, where they are) when ``rows`` are the first of a longer table kept elsewhere."""
    if not rows:
        return ""
    shown = [[str(c)[:40] for c in r] for r in rows[:MAX_ROWS]]
    widths = [max(len(h), *(len(r[i]) for r in shown)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()[:WIDTH]

    out = [title, "-" * min(WIDTH, max(len(title), len(line(headers)))), line(headers)]
    out += [line(r) for r in shown]
    total, where = more or (len(rows), "the JSON report (--format json)")
    if total > len(shown):
        out.append(f"... {total - len(shown)} more row(s) in {where}")
    return "\n".join(out)


def drawn_table(d: Drawn) -> str:
    """A declared table, drawn (:func:`ddprof.report.display.draw`), as text; its note under the title rule."""
    text = table(d.title, d.headings, d.cells, left=d.left, more=(d.total, d.where))
    if not text or d.note is None:
        return text
    lines = text.split("\n")
    return "\n".join([*lines[:2], d.note[:WIDTH], "", *lines[2:]])


def health_findings(findings: list[HealthFinding]) -> list[str]:
    """The ``health`` findings as sentences, one per finding over all its ranks (the text and the HTML
    report list them)."""
    by: dict[str, list[HealthFinding]] = {}
    for row in findings:
        by.setdefault(row.finding, []).append(row)
    out = []
    for finding, group in by.items():
        ranks = sorted({r for row in group for r in row.ranks})
        where = ("rank " if len(ranks) == 1 else "ranks ") + (fmt_ranges(ranks) or "-")
        example = f"; e.g. {group[0].example}" if group[0].example else ""
        out.append(f"{finding} ({where}, {sum(r.count for r in group)}){example}. Affects {group[0].affects}")
    return out


def _health_section(findings: list[HealthFinding]) -> str:
    """The ``health`` findings, one bullet per finding over all its ranks: what the trace cannot tell,
    printed before the numbers."""
    sentences = health_findings(findings)
    if not sentences:
        return ""
    lines = [HEALTH_TITLE, "-" * len(HEALTH_TITLE)]
    return "\n".join(lines + [item(s) for s in sentences])


def render_text(report: dict[str, Any]) -> str:
    """The whole report (the dict :func:`ddprof.analyses.report.build_report` returns) as text: the run,
    the trace's health (what it cannot tell), the verdicts, one table per non-empty section, then the
    warnings."""
    run = report.get("run") or {}
    parts: list[str] = [render_run(run, run_warnings=False) if run.get("per_rank") else "",
                        _health_section(rows(report.get("health") or [], HealthFinding))]
    verdicts = report.get("verdicts") or []
    if verdicts:
        lines = ["Verdicts", "--------"]
        for v in verdicts:
            lines += textwrap.wrap(v, WIDTH, initial_indent="* ", subsequent_indent="  ")
        parts.append("\n".join(lines))
    for declared in tables():
        drawn = draw(declared, report)
        if drawn is not None:
            parts.append(drawn_table(drawn))
    warnings = run.get("warnings") or []
    if warnings:
        lines = ["Warnings", "--------"]
        for w in warnings:
            lines += textwrap.wrap(str(w), WIDTH, initial_indent="! ", subsequent_indent="  ")
        parts.append("\n".join(lines))
    return "\n\n".join(p for p in parts if p)
