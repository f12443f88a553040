"""The report contract (:mod:`ddprof.report.schema`, the report's record assembled from the sections'
declarations in :mod:`ddprof.analyses.sections`): the committed JSON Schema is the one the declarations
generate, and a report that drifts from the declarations is refused naming the field."""

from __future__ import annotations

import json

import msgspec
import pytest
from ddprof.analyses.sections import Report, parse, schema_text

from ddprof.report.schema import REPORT_VERSION, SCHEMA_PATH, version_of
from tests.support.paths import REPO


def test_committed_schema_is_current():
    committed = (REPO / SCHEMA_PATH).read_text()
    assert committed == schema_text(), (
        f"{SCHEMA_PATH} is stale: regenerate it with `python -m ddprof.analyses.sections` and commit it")


def test_schema_names_every_section_with_its_row_docs():
    doc = json.loads(schema_text())
    report = doc["$defs"]["Report"]
    assert {"run", "overlap", "bubbles", "collectives", "report_version", "status"} <= set(report["properties"])
    assert "report_version" in report["required"] and report["additionalProperties"] is False
    overlap = doc["$defs"]["OverlapRow"]["properties"]["overlap_pct"]
    assert "overlapped / comm" in overlap["description"]


def test_version_of_a_report_without_one_is_1():
    assert version_of({"run": {}}) == 1
    assert version_of({"report_version": REPORT_VERSION}) == REPORT_VERSION == 2


def test_a_drifting_report_is_refused_naming_the_field(ingested):
    from ddprof.analyses.report import build_report

    assert hasattr(build_report, "__wrapped__")  # the suite validates every report it builds (conftest)
    report = build_report(ingested("dlrm-8xV100-nccl"))
    typed = parse(report)
    assert isinstance(typed, Report) and typed.overlap[0].rank == report["overlap"][0]["rank"]
    bad = json.loads(json.dumps(report))
    bad["overlap"][3]["rank"] = "3"
    with pytest.raises(msgspec.ValidationError, match=r"\$\.overlap\[3\]\.rank"):
        parse(bad)
    bad = json.loads(json.dumps(report))
    bad["bubbles"]["per_rank"][0]["new_field"] = 1
    with pytest.raises(msgspec.ValidationError, match="new_field"):
        parse(bad)


def test_per_step_rows_are_detail_tables_beside_the_report(tmp_path, capsys):
    """``-o FILE`` writes FILE.tables/NAME.parquet, the run dir keeps report/tables/: the same rows as the
    report's frames; the JSON holds their summaries."""
    import polars as pl
    from ddprof.analyses.sections import DETAIL

    import ddprof
    from ddprof.cli import main
    from ddprof.report.tables import rounded, tables_dir
    from tests.support.paths import SAMPLES

    cache = tmp_path / "cache"
    out = tmp_path / "r.json"
    assert main(["analyze", str(SAMPLES / "gloo-pipeline-4stage"), "--cache", str(cache), "--format", "json",
                 "-o", str(out)]) == 0
    report = ddprof.analyze(SAMPLES / "gloo-pipeline-4stage", cache=cache)
    saved = json.loads(out.read_text())
    assert saved == rounded(json.loads(json.dumps(report)))  # floats to FLOAT_DIGITS significant digits
    run = ddprof.open_run(cache)
    for name in DETAIL:
        frame = report.table(name)
        assert pl.read_parquet(tables_dir(out) / f"{name}.parquet").equals(frame, null_equal=True), name
        assert run.table(name).equals(frame, null_equal=True), name
    bubbles = report.table("bubbles")
    assert bubbles.height == 8 and [b["steps"] for b in saved["bubbles"]["per_rank"]] == [2, 2, 2, 2]
    first = bubbles.filter(pl.col("rank") == 0)["bubble_pct"]
    assert saved["bubbles"]["per_rank"][0]["bubble_pct"]["max"] == rounded(first.max())
    top = bubbles.sort("bubble_pct", descending=True).head(5)
    assert saved["bubbles"]["worst"] == [{"rank": r, "step": s, "value": rounded(v)} for r, s, v in
                                         top.select("rank", "step", "bubble_pct").iter_rows()]
    coll = saved["collectives"]
    assert coll["instances"] == report.table("collectives").height == 48
    assert sum(op["count"] for op in coll["by_op"]) == 48 and len(coll["worst"]) == 40
    skews = [c["arrival_skew_us"] for c in coll["worst"]]
    assert skews == rounded(sorted(report.table("collectives")["arrival_skew_us"].to_list(), reverse=True)[:40])


def test_each_detail_table_is_summarised():
    """Every detail table has its summary in the JSON: the per-step ones by analyses/summaries.py, the
    collective instances by collectives_summary, the all-to-all instances by alltoall_summary."""
    from ddprof.analyses.sections import DETAIL, STEP_SECTIONS, TABLE_ROWS

    assert set(STEP_SECTIONS) | {"collectives", "alltoall"} == set(DETAIL) == set(TABLE_ROWS)
    assert set(DETAIL) <= set(Report.__struct_fields__)


def test_the_registry_and_the_records_name_the_same_sections():
    """analyses/sections.py declares each section once; its record in the contract has the same name, and
    a section absent from a report with no traced run is one the schema does not require."""
    from ddprof.analyses.sections import ABSENT, EMPTY_SECTIONS, SECTIONS

    declared = [s.name for s in SECTIONS]
    assert sorted(declared) == sorted(set(Report.__struct_fields__) - {"run", "report_version", "verdicts", "status"})
    required = set(json.loads(schema_text())["$defs"]["Report"]["required"])
    assert {s.name for s in SECTIONS if s.empty is ABSENT} == set(declared) - required
    assert list(EMPTY_SECTIONS) == [s.name for s in SECTIONS if s.empty is not ABSENT]


def test_report_json_puts_arrays_of_scalars_on_one_line_and_nothing_else_changes():
    """The JSON ddprof analyze writes: json_text's text, with each array of scalars on one line."""
    import msgspec

    from ddprof.report.tables import report_json
    from ddprof.store.atomic import json_text

    report = {"run": {"ranks": [0, 1, 2], "warnings": ["a, b", "c"], "steps": [], "per_rank": [
        {"rank": 0, "step_ranges": [[0, 2], [5, 5]], "span_us": float("nan")}]}, "hang": {}, "status": "ok"}
    text = report_json(report)
    assert '"ranks": [0, 1, 2],' in text and '"warnings": ["a, b", "c"],' in text and '[0, 2],' in text
    assert json.loads(text) == json.loads(json_text(report))
    assert msgspec.json.format(text.encode(), indent=2).decode() == json_text(report)


def test_a_missing_detail_table_is_named(tmp_path):
    """A run dir no ``ddprof analyze`` wrote tables into: the error names the file and says what writes it.
    Once they are written, a name that is not one of them is a KeyError naming those there (the store reads
    them without the report's modules, which are no part of what ingest runs)."""
    from ddprof.analyses.report import build_report

    import ddprof
    from ddprof.errors import BadInputError
    from ddprof.report.tables import run_tables_dir
    from ddprof.synth import Spec, generate

    generate(Spec(ranks=2, steps=1), tmp_path / "gen", with_truth=False)
    run = ddprof.ingest([tmp_path / "gen" / "traces"], tmp_path / "run")
    with pytest.raises(BadInputError, match=r"report/tables: the report's detail table bubbles\.parquet is missing: "
                                            r"`ddprof analyze` writes it"):
        run.table("bubbles")
    build_report(run).write_tables(run_tables_dir(run.path))
    assert run.table("bubbles").height == 2
    with pytest.raises(KeyError, match="not a detail table"):
        run.table("overlap")


def test_reports_with_the_same_summaries_but_other_rows_differ():
    """Two reports are equal when their JSON and their detail tables are (analyse() == analyse() compares rows)."""
    import polars as pl

    from ddprof.report.tables import AnalysisReport

    a = AnalysisReport({"x": 1}, {"bubbles": pl.DataFrame({"rank": [0], "bubble_pct": [1.0]})})
    b = AnalysisReport({"x": 1}, {"bubbles": pl.DataFrame({"rank": [0], "bubble_pct": [2.0]})})
    assert a != b and (a == b) is False and a == AnalysisReport({"x": 1}, {"bubbles": a.table("bubbles").clone()})
    assert a == {"x": 1}  # against a plain dict (a decoded JSON): the JSON alone
