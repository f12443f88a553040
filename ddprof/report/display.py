"""How a report section is shown as a table: a :class:`Table` declares its title, its columns (a heading, the
record field it reads and the formatter of :mod:`ddprof.vocabulary.units` that writes it) and the rows to show;
:func:`draw` turns it and a report into the cells every renderer prints (the terminal report,
:mod:`ddprof.render.text`, and the HTML report, :mod:`ddprof.dashboards.html_report`), so both show the same
headings and the same formatted numbers.

The types live here, in the core beside the records they read (:mod:`ddprof.report.schema`), and need nothing
but them; each section's table is declared with the section, in the module that computes it (found by
:mod:`ddprof.analyses.sections`).

Example: ``Table("Bandwidth", (Column("op", "op"), Column("size", "bytes", fmt_bytes)), rows=lambda r:
rows(r["bandwidth"], BandwidthRow))`` draws a row ``["all_reduce", "64 MiB"]`` per bandwidth record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ddprof.vocabulary.units import fmt_plain

#: Where the rows a table does not show are, unless its declaration says (``more``).
IN_JSON = "the JSON report (--format json)"


@dataclass(frozen=True)
class Column:
    """One column: its ``heading``, the record ``field`` it reads (a name, or a function of the record) and
    the ``fmt`` that writes the value (``fmt_us``, ``fmt_bytes``, ``fmt_pct``, ...; plain ``str`` by
    default)."""

    heading: str
    field: str | Callable[[Any], Any]
    fmt: Callable[[Any], str] = fmt_plain

    def cell(self, row: Any) -> str:
        """The formatted value of this column in ``row``."""
        return self.fmt(self.field(row) if callable(self.field) else getattr(row, self.field))


@dataclass(frozen=True)
class Table:
    """A section's table (module doc). ``title``: text, or a function of the report. ``rows``: the records
    to show, from the report (typed: :func:`ddprof.report.schema.rows`). ``left``: the first columns
    left-aligned (names), the others right-aligned (numbers). ``when``: a function of the report, the
    table is drawn only where it is true (two tables of one section for two cases). ``more``: (rows in
    all, where they are) when the rows shown are the first of a longer table kept elsewhere. ``note``: a
    line under the title, written only when the table has rows. ``at``: the table's place among the
    tables (the text report's order; one without comes after those with one)."""

    title: str | Callable[[dict[str, Any]], str]
    columns: tuple[Column, ...]
    rows: Callable[[dict[str, Any]], Sequence[Any]]
    left: int = 0
    when: Callable[[dict[str, Any]], bool] | None = None
    more: Callable[[dict[str, Any]], tuple[int, str]] | None = None
    note: Callable[[dict[str, Any]], str] | None = None
    at: int = 1_000


@dataclass(frozen=True)
class Drawn:
    """A table with its cells written (:func:`draw`): what a renderer lays out."""

    title: str
    headings: list[str]
    cells: list[list[str]]
    left: int
    total: int
    where: str
    note: str | None


def draw(table: Table, report: dict[str, Any]) -> Drawn | None:
    """The table's title, headings and formatted cells for ``report``; None where it does not apply (its
    ``when`` is false) or has no rows."""
    if table.when is not None and not table.when(report):
        return None
    shown = table.rows(report)
    if not shown:
        return None
    total, where = table.more(report) if table.more is not None else (len(shown), IN_JSON)
    return Drawn(title=table.title(report) if callable(table.title) else table.title,
                 headings=[c.heading for c in table.columns],
                 cells=[[c.cell(row) for c in table.columns] for row in shown], left=table.left,
                 total=total, where=where, note=table.note(report) if table.note is not None else None)


def ordered(tables: Sequence[Table]) -> list[Table]:
    """``tables`` in the order they are shown (``at``; declaration order among equals)."""
    return sorted(tables, key=lambda t: t.at)
