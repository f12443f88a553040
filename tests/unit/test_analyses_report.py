"""The report end to end: synthetic runs written as Kineto traces, ingested, analysed, rendered."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import polars as pl
import pytest
from ddprof.analyses.breakdown import breakdown_by_step, temporal_breakdown
from ddprof.analyses.bubbles import pipeline_stages
from ddprof.analyses.collectives import bandwidth, collectives
from ddprof.analyses.frames import sets
from ddprof.analyses.frames.memo import Prepared, derived, prepare
from ddprof.analyses.idle import idle_breakdown, idle_by_step
from ddprof.analyses.overlap import overlap, overlap_by_step
from ddprof.analyses.report import COLUMNS, EMPTY_SECTIONS, _rows, analyse, build_report, read_events
from ddprof.analyses.sections import DETAIL
from ddprof.analyses.straggler_cause import cause_clause, straggler_causes
from ddprof.analyses.stragglers import stragglers
from ddprof.analyses.verdicts import Badge, badge

import ddprof
from ddprof.render.text import render_text
from ddprof.synth import DataParallel, Pipeline, ingest_generated, to_kineto, write_kineto, write_traces
from ddprof.vocabulary.units import fmt_bytes, fmt_us
from tests.support.paths import SAMPLES

CONTRACT = {
    "run": {"world_size", "ranks", "backend", "device", "steps", "warnings"},
    "overlap": {"rank", "overlap_pct", "comm_us", "overlapped_us", "exposed_comm_us"},
    "overlap_by_step": {"rank", "step", "overlap_pct", "exposed_comm_us"},
    "breakdown": {"rank", "idle_us", "compute_us", "non_compute_us", "idle_pct", "compute_pct", "non_compute_pct"},
    "idle": {"rank", "stream", "category", "idle_us", "ratio"},
    "bubbles": {"rank", "step", "bubble_us", "bubble_pct"},
    "stragglers": {"ranks", "per_rank"},
    "collectives": {"pg", "op", "index", "bytes", "ranks_seen", "arrival_skew_us", "duration_us", "algbw_gbps",
                    "busbw_gbps"},
    "bandwidth": {"op", "bytes", "count", "algbw_gbps", "busbw_gbps"},
    "hang": {"collectives"},
}


def check_contract(report: dict) -> None:
    for key, fields in CONTRACT.items():
        section = report.table(key).to_dicts() if key in DETAIL else report[key]  # per-step rows: a detail table
        rows = section if isinstance(section, list) else [section]
        for row in rows:
            assert fields <= set(row), (key, fields - set(row))
    per_rank = report["stragglers"]["per_rank"]
    assert all({"rank", "times_last", "wait_caused_us", "step_us"} <= set(p) for p in per_rank)
    json.dumps(report, allow_nan=False)


@pytest.mark.parametrize("sc", [DataParallel(), DataParallel(device="cpu", ranks=3, slow_rank=0, delay=900_000)],
                         ids=["gpu", "cpu-gloo"])
def test_generated_run_through_ingest_recovers_the_truth(sc, tmp_path):
    report = build_report(ingest_generated(sc, tmp_path))
    check_contract(report)
    truth = sc.truth()
    assert report["run"]["device"] == sc.device and report["run"]["steps"] == list(range(sc.steps))
    for row in report["overlap"]:
        assert row["overlap_pct"] == pytest.approx(truth["overlap"][row["rank"]]["overlap_pct"])
        assert row["exposed_comm_us"] == pytest.approx(truth["overlap"][row["rank"]]["exposed_comm_us"])
    for row in report["breakdown"]:
        for key, value in truth["breakdown"][row["rank"]].items():
            assert row[key] == pytest.approx(value), key
    for row in report.table("bubbles").to_dicts():
        assert row["bubble_us"] == pytest.approx(truth["bubble"][row["rank"]][row["step"]])
    instances = report.table("collectives").to_dicts()
    assert [c["arrival_skew_us"] for c in instances] == [c["arrival_skew_us"] for c in truth["collectives"]]
    assert [c["busbw_gbps"] for c in instances] == pytest.approx(
        [c["busbw_gbps"] for c in truth["collectives"]])
    assert report["stragglers"]["ranks"] == [sc.slow_rank]
    if sc.device == "gpu":
        assert {(r["rank"], r["stream"]) for r in report["idle"]} == {(r, s) for r in range(sc.ranks) for s in (7, 20, 22)}
    else:
        assert report["idle"] == []
    others = sc.ranks - 1
    wait = fmt_us(truth["stragglers"]["wait_caused_us"][sc.slow_rank] / others / sc.steps)
    assert wait == fmt_us(sc.delay / 1000)  # each other rank waits the slow rank's delay, once per step
    # the delay lies inside a compute op of the slow rank: its cause is compute (analyses/straggler_cause.py)
    because = cause_clause(report, sc.slow_rank)
    assert because.startswith(" (compute: the same ops take "), because
    assert report["verdicts"][0] == (f"rank {sc.slow_rank} is the straggler{because}: each of the {others} other ranks "
                                     f"spent {wait} per step on average waiting for it at collectives "
                                     f"(wall-clock; last at {sc.steps} of {sc.steps} collectives)")
    exposed = sum(truth["overlap"][r]["exposed_comm_us"] for r in range(sc.ranks)) / sc.ranks
    share = 100 * exposed / sum(truth["window"][0].values())  # the step time: the device steps on a GPU
    word = "device step time" if sc.device == "gpu" else "step time"
    assert any(v.startswith(f"exposed communication is {share:.0f} % of {word}") for v in report["verdicts"])
    assert report["hang"] == {"collectives": []}
    # the text says what was measured: kernels on a GPU run; on a CPU-only run its ops, and no kernels column
    lines = render_text(report).splitlines()
    rank_head = lines[2].split()
    assert rank_head[:2] == ["rank", "events"] or rank_head[:3] == ["rank", "host", "events"]
    if sc.device == "gpu":
        assert "kernels" in rank_head and "Temporal breakdown (first to last kernel)" in lines
    else:
        assert "kernels" not in rank_head and "Temporal breakdown (first to last CPU op)" in lines
        # (the trace's own op names, aten::gemm_bwd_kernel in the critical path's table, are not ddprof's words)
        words = [line for line in lines if "kernel" in re.sub(r"aten::\w+", "", line)]
        assert not words, words


def test_balanced_run_says_so(tmp_path):
    report = build_report(ingest_generated(DataParallel(slow_rank=None), tmp_path))
    assert report["stragglers"]["ranks"] == []
    assert "no straggler: no rank keeps the others waiting at collectives" in report["verdicts"]


def test_the_badge_is_ok_only_where_no_verdict_names_a_problem(tmp_path):
    """Status ok (exit 0) with "rank 2 is the straggler" among the verdicts is not a green OK: the badge is
    ATTENTION and says why, in the verdict's words; a balanced run is OK; a failed input or a hang keep
    their status."""
    balanced = build_report(ingest_generated(DataParallel(slow_rank=None), tmp_path / "ok"))
    assert balanced["status"] == "ok" and badge(balanced) == Badge("ok", "OK", ())
    slow = build_report(ingest_generated(DataParallel(), tmp_path / "slow"))
    assert slow["status"] == "ok" and slow["stragglers"]["ranks"] == [2]
    shown = badge(slow)
    assert (shown.kind, shown.label) == ("attention", "ATTENTION")
    assert shown.why == tuple(v for v in slow["verdicts"] if v.startswith("rank 2 is the straggler"))
    assert len(shown.why) == 1
    assert badge({**slow, "status": "partial"}).label == "PARTIAL"
    assert badge({**balanced, "status": "problem"}) == Badge("problem", "PROBLEM", ())
    lost = {"finding": "events_lost", "rank": 1, "ranks": [1], "count": 3, "example": "WARNING: 3 events lost",
            "affects": "every timeline metric", "headline": True}
    shown = badge({**balanced, "health": [lost]})
    assert shown.kind == "attention" and "lost events" in shown.why[0]


def test_render_text_fits_100_columns_and_starts_with_the_run_then_the_verdicts(tmp_path):
    report = build_report(ingest_generated(DataParallel(ranks=6, jitter=40_000, seed=5), tmp_path))
    text = render_text(report)
    lines = text.splitlines()
    assert lines[0].startswith("run: 6 rank(s) of 6, backend nccl, GPU trace, steps 0-2")
    verdicts = lines.index("Verdicts")
    assert lines[verdicts - 1] == "" and lines[verdicts + 2].startswith("* rank 2 is the straggler")
    assert max(len(line) for line in lines) <= 100
    for title in ("Communication / computation overlap", "Temporal breakdown", "Idle time by stream",
                  "Stragglers: rank 2", "Time without compute per device step", "Collectives", "Bandwidth per op and size"):
        assert any(line.startswith(title) for line in lines), title
    # "bubble" is pipeline vocabulary: a data-parallel run has no pipeline
    assert "bubble" not in text.lower()
    pipeline = render_text(ddprof.analyze(SAMPLES / "gloo-pipeline-4stage", cache=tmp_path / "pp"))
    assert "Pipeline bubbles (mean over steps)" in pipeline and "Time without compute" not in pipeline


def test_render_text_of_an_empty_report():
    report = {"run": {"world_size": None, "ranks": [], "backend": None, "device": "cpu", "steps": [],
                      "warnings": ["no trace could be read"]}, **EMPTY_SECTIONS, "verdicts": []}
    assert render_text(report) == "Warnings\n--------\n! no trace could be read"


def test_render_text_of_a_hang_and_long_tables():
    verdict = "hang started at rank 3 (waited for, waiting for no one); first: pg 0 (default_pg) ..."
    report = {"run": {"warnings": []}, **EMPTY_SECTIONS,
              "hang": {"collectives": [{"pg": "0", "pg_desc": "default_pg", "op": "all_reduce",
                                        "op_name": "nccl:all_reduce", "index": 17, "missing_ranks": [3, 9],
                                        "not_completed_ranks": [0, 1, 2]},
                                       {"pg": "4", "pg_desc": "PP", "kind": "p2p", "op": "send", "index": 5,
                                        "missing_ranks": [3], "waiting_ranks": [1]}],
                       "suspect_ranks": [3], "verdict": verdict},
              "verdicts": [verdict],
              "overlap": [{"rank": r, "device": "gpu", "overlap_pct": None, "comm_us": 0.0, "overlapped_us": 0.0,
                           "exposed_comm_us": 0.0} for r in range(100)]}
    text = render_text(report)
    lines = text.splitlines()
    assert lines[:3] == ["Verdicts", "--------", "* " + verdict]  # the hang verdict first
    assert "suspect ranks (the hang started there): 3" in lines
    assert any(line.split() == ["0", "default_pg", "all_reduce", "17", "3,9", "0,1,2"] for line in lines)
    assert any(line.split() == ["4", "PP", "send", "5", "3", "1"] for line in lines)
    assert "... 60 more row(s) in the JSON report" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_dlrm_report(ingested):
    report = build_report(ingested("dlrm-8xV100-nccl"))
    check_contract(report)
    assert report["verdicts"][0].startswith("rank 7 is the straggler")
    assert len(report["overlap"]) == 8 and report.table("collectives").height == 8
    assert report["collectives"]["instances"] == 8 and len(report["collectives"]["worst"]) == 8
    assert {b["op"] for b in report["bandwidth"]} == {"all_reduce", "all_to_all"}
    assert max(len(line) for line in render_text(report).splitlines()) <= 100


@pytest.mark.parametrize("name", ["dlrm-8xV100-nccl", "hta/a100-16rank-rank0", "hta/sendrecv-2-of-128",
                                  "tracelens/mi300-rocm-resnet-rank0", "tracelens/b200-vllm-rank0"])
def test_report_reads_only_the_rows_it_uses_with_the_same_result(ingested, name):
    """read_events leaves out the CPU ops of GPU ranks and takes rank spans from the manifest: every
    section must be what the whole event table gives."""
    run = ingested(name)
    every_row = run.collect_events(COLUMNS)
    p = read_events(run)
    assert p.events.collect().height < every_row.height  # rows were left out: the test is not vacuous
    assert analyse(p, run.world_size) == analyse(prepare(every_row.lazy()), run.world_size)


@pytest.mark.parametrize("make", [lambda: DataParallel(device="cpu", ranks=3, slow_rank=0).kineto(),
                                  lambda: Pipeline().kineto(), lambda: _mixed_traces()],
                         ids=["cpu-gloo", "pipeline", "mixed"])
def test_report_rows_of_generated_runs_give_the_same_result(make, tmp_path):
    run = ddprof.ingest([write_traces(make(), tmp_path / "traces")], tmp_path / "run")
    events = run.events().collect()  # every row of the store, one part per rank
    assert analyse(read_events(run)) == analyse(events.lazy())
    manifest = tmp_path / "run" / "manifest.json"
    doc = json.loads(manifest.read_text())
    for info in doc["per_rank"].values():  # a manifest without spans: every row is read
        del info["first_ns"]
    manifest.write_text(json.dumps(doc))
    run = ddprof.open_run(tmp_path / "run")
    assert read_events(run).events.collect().height == events.height


def _mixed_traces():
    """:func:`_mixed_events` as traces: the GPU ranks' with NCCL, the CPU-only ranks' with gloo."""
    events = _mixed_events()
    gpu = to_kineto(events.filter(pl.col("rank") < 2), 4)
    return gpu | to_kineto(events.filter(pl.col("rank") >= 2), 4, backend="gloo")


def _mixed_events():
    """Two GPU ranks and two CPU-only (gloo) ranks in one table: the CPU sets are built for ranks 2, 3 only."""
    gpu = DataParallel(ranks=2).events()
    cpu = DataParallel(device="cpu", ranks=2).events().with_columns(pl.col("rank") + 2)
    return pl.concat([gpu, cpu])


@pytest.mark.parametrize("make", [lambda: DataParallel().events(),
                                  lambda: DataParallel(device="cpu", ranks=3, slow_rank=0).events(),
                                  lambda: Pipeline().events(), _mixed_events],
                         ids=["gpu", "cpu-gloo", "pipeline", "mixed"])
def test_sections_from_shared_frames_equal_each_analysis_alone(make):
    """analyse() derives the frames several sections share once (analyses/frames/memo.py); every section must
    be what its analysis gives when called alone on the events."""
    events = make()
    before = events.clone()
    lf = events.lazy()
    sections = analyse(lf, 4)
    alone = {"overlap": overlap, "overlap_by_step": overlap_by_step, "breakdown": temporal_breakdown,
             "breakdown_by_step": breakdown_by_step, "idle": idle_breakdown, "idle_by_step": idle_by_step,
             "pipeline": pipeline_stages}
    for key, fn in alone.items():  # a per-step section's rows are its detail table
        assert (_rows(sections.table(key)) if key in DETAIL else sections[key]) == _rows(fn(lf)), key
    coll = collectives(lf, 4)
    assert _rows(sections.table("collectives")) == _rows(coll.drop("ops_seen"))
    assert sections["bandwidth"] == _rows(bandwidth(coll))
    # the stragglers' causes are read from the per-rank summaries beside them (analyses/straggler_cause.py)
    alone = stragglers(lf)
    assert sections["stragglers"] == {**alone, "causes": straggler_causes(prepare(lf), alone, pipeline_stages(lf)),
                                      "groups": []}  # an event table says nothing of where its ranks ran
    shared = sets.work(lf)
    if make is _mixed_events:
        assert dict(shared.group_by("rank").agg(pl.col("on_gpu").all()).iter_rows()) == {
            0: True, 1: True, 2: False, 3: False}
        assert shared.filter((pl.col("rank") >= 2) & (pl.col("role") == "compute")).height > 0
    assert events.equals(before)


def test_prepared_computes_a_frame_once_when_threads_ask_at_once():
    calls = []

    def slow(p, x):
        calls.append(x)
        time.sleep(0.01)
        return 2 * x

    frame = derived(slow)
    p = Prepared(pl.LazyFrame())
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda _: frame(p, 21), range(16))) == [42] * 16
    assert calls == [21]


def test_a_derived_frame_with_its_default_argument_is_one_frame():
    calls = []

    @derived
    def frame(p, x=3):
        calls.append(x)
        return x

    p = Prepared(pl.LazyFrame())
    assert frame(p) == frame(p, 3) == 3 and calls == [3]
    assert frame(pl.LazyFrame()) == 3 and calls == [3, 3]  # a LazyFrame gets a memo of its own


def test_unreadable_event_part_is_a_schema_error(tmp_path):
    from ddprof.errors import SchemaError

    run = ingest_generated(DataParallel(ranks=2, steps=1), tmp_path)
    part = run.path / run.rank_info(1)["parts"][0]
    part.write_bytes(b"PAR1 not a parquet file PAR1")
    with pytest.raises(SchemaError, match="cannot be read"):
        build_report(ddprof.open_run(run.path))


def test_failed_input_is_warned_once(tmp_path):
    sc = DataParallel(ranks=3, steps=1)
    write_kineto(sc, tmp_path, skip=(1,))
    bad = tmp_path / "rank1.pt.trace.json"
    bad.write_text("{ not json")
    run = ddprof.ingest([tmp_path], tmp_path / "run")
    assert len(run.failed) == 1
    warnings = build_report(run)["run"]["warnings"]
    about_bad = [w for w in warnings if str(bad) in w]
    assert len(about_bad) == 1, warnings
    assert about_bad[0].count(str(bad)) == 1


def test_slow_rank_sample_wait_is_wall_clock_and_within_a_step(tmp_path):
    """sample_traces/gloo-ddp-4rank-slow-rank: rank 2 sleeps 100 ms per step of ~120 ms; DDP's buckets wait
    for it at the same time, so the others wait ~100 ms per step (not the sum over buckets)."""
    sample = SAMPLES / "gloo-ddp-4rank-slow-rank" / "raw"
    report = build_report(ddprof.ingest([sample], tmp_path / "run"))
    assert report["stragglers"]["ranks"] == [2]
    per = {p["rank"]: p for p in report["stragglers"]["per_rank"]}
    nsteps = len(report["run"]["steps"])
    per_step = per[2]["wait_caused_us"] / per[2]["waiting_ranks"] / nsteps
    assert per[2]["waiting_ranks"] == 3
    assert 90_000 < per_step < 105_000
    assert per_step < min(p["step_us"] for p in per.values())
    # a sleep on the host before the forward: input, the host time before the step's first compute
    because = cause_clause(report, 2)
    assert because.startswith(" (input: 10"), because
    assert report["verdicts"][0] == (f"rank 2 is the straggler{because}: each of the 3 other ranks spent {fmt_us(per_step)} "
                                     f"per step on average waiting for it at collectives (wall-clock; last at "
                                     f"{per[2]['times_last']} of {per[2]['instances']} collectives)")


@pytest.mark.parametrize("us,text", [(1234.5, "1.23 ms"), (999.96, "1 ms"), (999.4, "999 µs"), (0.5, "0.5 µs"),
                                     (2.5e6, "2.5 s"), (99_500, "99.5 ms"), (999_999, "1 s"), (1.2e9, "1200 s"),
                                     (7.2e9, "2 h"), (1.28e13, "148 d"), (None, "-")])
def test_durations_read_the_same_everywhere(us, text):
    """One formatter (ddprof.vocabulary.units) for the verdicts and the tables; rounding never gives '1e+03 µs'."""
    assert fmt_us(us) == text


@pytest.mark.parametrize("n,text", [(100, "100 B"), (1536, "1.5 KiB"), (64 << 20, "64 MiB"),
                                    (1023.99 * 1024, "1 MiB"), (None, "-")])
def test_sizes_read_the_same_everywhere(n, text):
    assert fmt_bytes(n) == text


def test_tables_and_verdicts_format_a_wait_alike(tmp_path):
    report = build_report(ingest_generated(DataParallel(), tmp_path))
    per = {p["rank"]: p for p in report["stragglers"]["per_rank"]}
    row = next(line.split() for line in render_text(report).splitlines() if line.split()[:2] == ["2", "3"])
    assert " ".join(row[3:5]) == fmt_us(per[2]["wait_caused_us"])
    assert f"spent {fmt_us(per[2]['wait_caused_us'] / 3 / 3)} per step" in report["verdicts"][0]


def _comm_report(with_steps: tuple[int, ...]) -> dict:
    """Two ranks: 100 µs of comm each, 60 µs exposed over the trace (300 µs), of which 40 µs inside two
    100 µs steps (20 µs each); only the ranks in ``with_steps`` have steps."""
    return {"run": {"steps": [0, 1], "warnings": []}, **EMPTY_SECTIONS,
            "overlap": [{"rank": r, "device": "gpu", "overlap_pct": 40.0, "comm_us": 100.0, "overlapped_us": 40.0,
                         "exposed_comm_us": 60.0} for r in (0, 1)],
            "breakdown": [_breakdown(r, 300.0) for r in (0, 1)],
            "overlap_by_step": {"per_rank": [{"rank": r, "steps": 2, "exposed_comm_us": _dist([20.0, 20.0]),
                                              "overlap_pct": _dist([50.0, 50.0])} for r in with_steps], "worst": []},
            "breakdown_by_step": {"per_rank": [{"rank": r, "steps": 2, "span_us": _dist([100.0, 100.0]),
                                                "idle_pct": _dist([0.0, 0.0])} for r in with_steps], "worst": []}}


def _dist(values: list[float]) -> dict:
    """The summary of ``values`` over steps (analyses/summaries.py); here every value is the same."""
    return {"mean": values[0], "p50": values[0], "p95": values[0], "max": values[0], "total": sum(values)}


def _breakdown(rank: int, span_us: float) -> dict:
    """A breakdown row (every declared field) of ``span_us`` with no idle time."""
    return {"rank": rank, "span_us": span_us, "idle_us": 0.0, "compute_us": span_us, "non_compute_us": 0.0,
            "idle_pct": 0.0, "compute_pct": 100.0, "non_compute_pct": 0.0}


@pytest.mark.parametrize("with_steps,text", [
    ((0, 1), "exposed communication is 20 % of step time (worst: rank 0, 20 %)"),  # in-step comm / step time
    ((0,), "exposed communication is 20 % of the traced time (worst: rank 0, 20 %)"),  # one basis for all
])
def test_exposed_communication_has_one_basis(with_steps, text):
    from ddprof.analyses.verdicts import verdicts

    assert any(v.startswith(text + "; 40 % of communication") for v in verdicts(_comm_report(with_steps)))


def test_rows_turn_nan_and_infinities_into_null_and_keep_every_other_value():
    df = pl.DataFrame({"rank": [0, 1, 2, 3], "gbps": [1.5, float("nan"), float("inf"), None],
                       "pct": [-float("inf"), 0.0, 2.25, 3.0], "op": ["a", None, "c", "d"]})
    assert _rows(df) == [
        {"rank": 0, "gbps": 1.5, "pct": None, "op": "a"},
        {"rank": 1, "gbps": None, "pct": 0.0, "op": None},
        {"rank": 2, "gbps": None, "pct": 2.25, "op": "c"},
        {"rank": 3, "gbps": None, "pct": 3.0, "op": "d"},
    ]
    assert _rows(df.head(0)) == []
