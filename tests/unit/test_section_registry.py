"""A new report section is one module plus its test (docs/DESIGN.md §5): the registry
(:mod:`ddprof.analyses.sections`) finds a module's ``SECTIONS`` on the analyses package's path, and the section
is then computed per group of ranks, kept in the report, typed in the report's record and the JSON Schema, its
per-step rows written as a detail table with their summary in the JSON, a section computed across ranks from
a frame each group keeps, its table drawn in the text report and its verdict said in its place: here, with one module written into a folder added to the package's path
and no other file changed."""

from __future__ import annotations

import json
import sys
import textwrap

import msgspec
import polars as pl
import pytest
from ddprof.analyses import sections
from ddprof.analyses.report import build_report

import ddprof
from ddprof.render.text import render_text
from ddprof.report.tables import report_json
from ddprof.synth import Spec, generate

#: The whole of a new section: its records (with their field docs), its analyses, its table, its verdict
#: rule and its declaration. Written as a module of the analyses package, ``ddprof.analyses.widgets``.
WIDGETS = textwrap.dedent('''
    """Widgets: the events each rank traced, in all and per step."""

    from __future__ import annotations

    from typing import Annotated, Any

    import polars as pl
    from msgspec import Meta

    from ddprof.analyses.frames.memo import Events, Prepared, collect, derived, prepare
    from ddprof.analyses.sections import CrossRank, Section
    from ddprof.report.display import Column, Table
    from ddprof.report.schema import Distribution, Rank, Row, Step, WorstStep, rows


    class WidgetRow(Row):
        """The events one rank traced."""

        rank: Rank
        events: Annotated[int, Meta(description="events the rank traced, widget-counted")]


    class WidgetStepRow(Row):
        """The events one rank traced in one step."""

        rank: Rank
        step: Step
        events: Annotated[int, Meta(description="events in the step")]


    class WidgetSteps(Row):
        """A rank's ``widgets_by_step`` rows (detail table), summarised."""

        rank: Rank
        steps: int
        events: Distribution


    class WidgetStepSummary(Row):
        """``widgets_by_step``: per rank, its steps' distribution; the steps with the most events."""

        per_rank: list[WidgetSteps]
        worst: list[WorstStep]


    def widgets(events: Events) -> pl.DataFrame:
        """Per rank, its events."""
        lf = prepare(events).events
        return collect(lf.group_by("rank").agg(pl.len().cast(pl.Int64).alias("events")).sort("rank"))


    def widgets_by_step(events: Events) -> pl.DataFrame:
        """Per rank and step, its events."""
        lf = prepare(events).events.filter(pl.col("step").is_not_null())
        return collect(lf.group_by("rank", "step").agg(pl.len().cast(pl.Int64).alias("events")).sort("rank", "step"))


    def widget_verdicts(report: dict[str, Any]) -> list[str]:
        """The rank with the most events, when one has more than the others."""
        counts = rows(report["widgets"], WidgetRow)
        top = max(counts, key=lambda w: w.events, default=None)
        if top is None or all(w.events == top.events for w in counts):
            return []
        return [f"rank {top.rank} traced the most widgets ({top.events} events)"]


    @derived
    def widget_counts(p: Prepared) -> pl.DataFrame:
        """Per rank, its events: the summary every group keeps for the section computed across ranks."""
        return widgets(p)


    class WidgetSpread(Row):
        """Across ranks: who traced the most events, and by how much the ranks differ."""

        most: Annotated[int | None, Meta(description="the rank with the most events (the lowest on a tie)")]
        spread: Annotated[int, Meta(description="most events minus fewest, over the ranks")]


    def widget_spread(cross: CrossRank) -> dict[str, Any]:
        """The spread of the groups' kept counts, computed across ranks (no event is read here)."""
        counts = widget_counts(cross.p).sort(["events", "rank"], descending=[True, False])
        if not counts.height:
            return {"most": None, "spread": 0}
        return {"most": counts["rank"][0], "spread": int(counts["events"].max() - counts["events"].min())}


    WIDGETS_TABLE = Table("Widgets per rank", (Column("rank", "rank"), Column("widgets", "events")),
                          rows=lambda r: rows(r["widgets"], WidgetRow), at=35)

    SECTIONS = (
        Section("widgets", [], widgets, "intervals", tables=(WIDGETS_TABLE,), verdict=widget_verdicts, verdict_at=25,
                record=list[WidgetRow], order=155),
        Section("widgets_by_step", {"per_rank": [], "worst": []}, widgets_by_step, "steps",
                summary=(("rank",), ("events",), "events"), record=WidgetStepSummary, detail=WidgetStepRow,
                order=156),
        Section("widget_spread", {"most": None, "spread": 0}, record=WidgetSpread, order=157, cross=widget_spread,
                keeps=(widget_counts,)),
    )
''')


@pytest.fixture
def with_widgets(tmp_path, monkeypatch):
    """The analyses package with ``widgets.py`` on its path (nothing else changed); forgotten afterwards."""
    import ddprof.analyses

    folder = tmp_path / "extra"
    folder.mkdir()
    (folder / "widgets.py").write_text(WIDGETS)
    monkeypatch.setattr(ddprof.analyses, "__path__", [*ddprof.analyses.__path__, str(folder)])
    sections.rediscover()
    yield
    monkeypatch.undo()
    sys.modules.pop("ddprof.analyses.widgets", None)
    sections.rediscover()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Four ranks of three steps, one rank slower (more events is not the point: the counts are read back)."""
    out = tmp_path_factory.mktemp("widgets")
    generate(Spec(ranks=4, steps=3, kernels=12), out / "gen", with_truth=False)
    return ddprof.ingest([out / "gen" / "traces"], out / "run")


def _events(run) -> pl.DataFrame:
    """The run's events as the analyses read them (:func:`ddprof.analyses.report.read_events`)."""
    from ddprof.analyses.report import read_events

    return read_events(run).events.select("rank", "step").collect()


def test_a_section_module_is_found_and_its_section_computed(with_widgets, run):
    declared = [s.name for s in sections.SECTIONS]
    at = declared.index("health")  # placed by its order: after health (150), before breakdown_by_step (160)
    assert declared[at:at + 5] == ["health", "widgets", "widgets_by_step", "widget_spread", "breakdown_by_step"]
    assert "widgets" in sections.PER_RANK and "widgets_by_step" in sections.STEP_SECTIONS
    assert sections.EMPTY_SECTIONS["widgets"] == [] and "widgets_by_step" in sections.DETAIL

    report = build_report(run)  # the suite's conftest validates it against the assembled record
    events = _events(run)
    per_rank = events.group_by("rank").len().sort("rank")
    assert report["widgets"] == [{"rank": r, "events": n} for r, n in per_rank.iter_rows()]

    # the per-step rows: a detail table beside the JSON, their summary in it
    by_step = events.filter(pl.col("step").is_not_null()).group_by("rank", "step").len()
    table = report.table("widgets_by_step")
    assert table.sort("rank", "step").rows() == by_step.sort("rank", "step").rows()
    summary = report["widgets_by_step"]
    assert [p["rank"] for p in summary["per_rank"]] == run.ranks
    assert [p["steps"] for p in summary["per_rank"]] == [3] * 4
    assert summary["per_rank"][0]["events"]["total"] == by_step.filter(pl.col("rank") == 0)["len"].sum()
    assert summary["worst"][0]["value"] == by_step["len"].max()
    assert '"widgets_by_step": {' in report_json(report)

    # computed across ranks, from the frame each group kept for it
    most = per_rank.sort(["len", "rank"], descending=[True, False]).row(0)
    assert report["widget_spread"] == {"most": most[0], "spread": per_rank["len"].max() - per_rank["len"].min()}

    # typed: the report's record is assembled with the new fields, and refuses a drifting row
    typed = sections.parse(report)
    assert typed.widgets[0].rank == 0 and typed.widgets_by_step.per_rank[0].events.total is not None
    assert typed.widget_spread.spread == report["widget_spread"]["spread"]
    bad = json.loads(json.dumps(report))
    bad["widgets"][1]["events"] = "many"
    with pytest.raises(msgspec.ValidationError, match=r"\$\.widgets\[1\]\.events"):
        sections.parse(bad)


def test_a_section_module_is_in_the_schema_the_text_report_and_the_verdicts(with_widgets, run):
    schema = sections.schema()
    record = schema["$defs"]["Report"]
    assert {"widgets", "widgets_by_step"} <= set(record["required"])
    assert record["properties"]["widgets"] == {"items": {"$ref": "#/$defs/WidgetRow"}, "type": "array"}
    assert schema["$defs"]["WidgetRow"]["properties"]["events"]["description"] == "events the rank traced, widget-counted"
    assert "WidgetStepRow" in schema["$defs"] and "widgets_by_step (WidgetStepRow)" in schema["description"]

    report = build_report(run)
    text = render_text(report)
    lines = text.split("\n")
    head = lines.index("Widgets per rank")
    assert lines[head + 2].split() == ["rank", "widgets"]
    assert lines[head + 3].split() == ["0", str(report["widgets"][0]["events"])]
    # its table in its declared place: after the idle time (at 30), before the stragglers (at 40)
    assert text.index("Idle time by stream and cause") < text.index("Widgets per rank") < text.index("Stragglers")

    # its rule: silent where every rank traced as many events (the generated ranks are alike) ...
    assert len({w["events"] for w in report["widgets"]}) == 1
    assert not any("widgets" in v for v in report["verdicts"])
    # ... and said in its place, 25: after the stragglers' (20), before the communication's (30)
    from ddprof.analyses.verdicts import verdicts

    report["widgets"] = [{"rank": 0, "events": 1}, {"rank": 1, "events": 9}]
    said = verdicts(report)
    at = said.index("rank 1 traced the most widgets (9 events)")
    assert said[at - 1].startswith("no straggler") and said[at + 1].startswith("exposed communication")


def test_without_the_module_the_registry_is_as_before(run):
    """The fixture leaves nothing behind: the registry walks the package again, and finds ddprof's sections."""
    assert "widgets" not in [s.name for s in sections.SECTIONS]
    assert "widgets" not in sections.Report.__struct_fields__
    assert "widgets" not in build_report(run)


def test_threads_that_ask_the_registry_first_together_all_get_it():
    """The families' frames are computed on threads, which may be the first to read the registry: it is
    derived once, and every thread reads the same declarations."""
    from concurrent.futures import ThreadPoolExecutor

    expected = [s.name for s in sections.SECTIONS]
    sections.rediscover()
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda name: getattr(sections, name), ["SECTIONS", "PER_RANK", "DETAIL", "Report"] * 8))
    assert all([s.name for s in g] == expected for g in got[::4])
    assert len({id(g) for g in got[::4]}) == 1 and len({id(r) for r in got[3::4]}) == 1
