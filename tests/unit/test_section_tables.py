"""A section's table and verdict are part of its declaration (:data:`ddprof.analyses.sections.SECTIONS`): the
text and the HTML report draw every declared table, with the same title, headings and formatted numbers, and
the verdicts are the declared rules in their declared order, so a section declared with its table and its
rule appears in both reports with no other change."""

from __future__ import annotations

import html

import msgspec
import pytest

pytest.importorskip("plotly")

from ddprof.analyses import sections  # noqa: E402
from ddprof.analyses.report import build_report  # noqa: E402
from ddprof.analyses.sections import Section  # noqa: E402
from ddprof.analyses.verdicts import verdicts  # noqa: E402
from ddprof.dashboards.html_report import render_html  # noqa: E402

import ddprof  # noqa: E402
from ddprof.render.text import render_text  # noqa: E402
from ddprof.report.display import Column, Table, draw  # noqa: E402
from ddprof.report.schema import rows  # noqa: E402
from ddprof.vocabulary.units import fmt_pct, fmt_us  # noqa: E402
from tests.support.paths import SAMPLES  # noqa: E402


class WidgetRow(msgspec.Struct):
    rank: int
    wait_us: float
    share_pct: float | None


WIDGETS = Table("Widget waits per rank", (Column("rank", "rank"), Column("widget wait", "wait_us", fmt_us),
                                          Column("widget share", "share_pct", fmt_pct)),
                rows=lambda r: rows(r["widgets"], WidgetRow), at=35)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    run = ddprof.ingest([SAMPLES / "gloo-ddp-4rank-slow-rank"], tmp_path_factory.mktemp("gloo") / "run")
    return build_report(run)


def test_a_declared_section_table_is_drawn_by_the_text_and_the_html_report(report, monkeypatch):
    monkeypatch.setattr(sections, "SECTIONS", (*sections.SECTIONS, Section("widgets", [], analysed=False,
                                                                           tables=(WIDGETS,))))
    monkeypatch.setitem(report, "widgets", [{"rank": 0, "wait_us": 1234.5, "share_pct": 12.345},
                                            {"rank": 1, "wait_us": 2.5e6, "share_pct": None}])
    fake = report  # with its detail tables, which the HTML report's figures read
    text = render_text(fake)
    assert "Widget waits per rank" in text
    lines = text.split("\n")
    head = lines.index("Widget waits per rank")
    assert lines[head + 2].split() == ["rank", "widget", "wait", "widget", "share"]
    assert lines[head + 3].split() == ["0", "1.23", "ms", "12.35", "%"]
    assert lines[head + 4].split() == ["1", "2.5", "s", "-"]
    # in its declared place: after the breakdown (at 20), before the stragglers (at 40)
    assert text.index("Temporal breakdown") < text.index("Widget waits per rank") < text.index("Stragglers")
    page = render_html(fake)
    assert "<h3>Widget waits per rank</h3>" in page
    assert "<th>rank</th><th>widget wait</th><th>widget share</th>" in page
    assert "<td>0</td><td>1.23 ms</td><td>12.35 %</td>" in page
    assert "<td>1</td><td>2.5 s</td><td>-</td>" in page
    # without its rows, the section is shown nowhere
    monkeypatch.setitem(report, "widgets", [])
    assert "Widget waits" not in render_text(report)


def test_the_html_tables_show_the_text_reports_titles_headings_and_numbers(report):
    text = render_text(report)
    page = render_html(report)
    drawn = [d for t in sections.tables() if (d := draw(t, report)) is not None]
    assert len(drawn) >= 4
    for d in drawn:
        assert d.title in text
        assert f"<h3>{html.escape(d.title)}</h3>" in page
        assert "".join(f"<th>{html.escape(h)}</th>" for h in d.headings) in page
        assert "".join(f"<td>{html.escape(c)}</td>" for c in d.cells[0]) in page
    assert "overlap_pct" not in page.split("</script>")[-1]  # no raw JSON key as a heading


def _widget_verdicts(report):
    slow = [r for r in rows(report["widgets"], WidgetRow) if r.wait_us > 1e6]
    return [f"rank {r.rank} waits {fmt_us(r.wait_us)} for widgets" for r in slow]


def test_a_declared_verdict_rule_is_said_in_its_place(report, monkeypatch):
    before = verdicts(report)
    widgets = Section("widgets", [], analysed=False, tables=(WIDGETS,), verdict=_widget_verdicts, verdict_at=25)
    monkeypatch.setattr(sections, "SECTIONS", (*sections.SECTIONS, widgets))
    monkeypatch.setitem(report, "widgets", [{"rank": 1, "wait_us": 2.5e6, "share_pct": None}])
    said = verdicts(report)
    # between the stragglers (at 20) and the communication (at 30)
    at = next(i for i, v in enumerate(before) if v.startswith("exposed communication"))
    assert said == [*before[:at], "rank 1 waits 2.5 s for widgets", *before[at:]]
    monkeypatch.setitem(report, "widgets", [])
    assert verdicts(report) == before
    monkeypatch.setitem(report, "verdicts", said)
    assert "rank 1 waits 2.5 s for widgets" in render_text(report)
