"""The health section: each finding fires on a trace of exactly its shape, with the count written beside
it, and stays silent on clean traces (generated and real)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from ddprof.analyses.health import AFFECTS, HEADLINE, ORDER, health
from ddprof.analyses.report import build_report

import ddprof
from ddprof.render.text import render_text
from ddprof.synth import DataParallel
from tests.support.paths import SAMPLES, trace_set

SC = DataParallel(ranks=2, steps=3, slow_rank=1)
LAUNCHES_PER_STEP = 5  # 3 compute kernels, 1 NCCL kernel, 1 memcpy: each with its runtime call


def clean() -> dict[int, dict[str, Any]]:
    """The scenario's traces with Kineto's fractional microseconds (every ts half a µs later)."""
    traces = copy.deepcopy(SC.kineto())
    for t in traces.values():
        for e in t["traceEvents"]:
            e["ts"] += 0.5
    return traces


def report(folder: Path, traces: dict[int, dict[str, Any]]) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    for r, t in traces.items():
        (folder / f"rank{r}.pt.trace.json").write_text(json.dumps(t))
    return build_report(ddprof.ingest([folder], folder / "run"))


def found(rep: dict[str, Any], finding: str) -> dict[int | None, dict[str, Any]]:
    return {row["rank"]: row for row in rep["health"] if row["finding"] == finding}


def event(name: str, ts: float, dur: float, cat: str = "cuda_runtime", tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": args}


def first_step(t: dict[str, Any]) -> float:
    return min(e["ts"] for e in t["traceEvents"] if e["name"].startswith("ProfilerStep#"))


def test_clean_generated_trace_has_no_finding(tmp_path):
    rep = report(tmp_path, clean())
    assert rep["health"] == []
    assert "Trace health" not in render_text(rep)


@pytest.mark.parametrize("name", ["gloo-ddp-4rank-slow-rank/raw", "gloo-pipeline-4stage/raw"])
def test_clean_real_traces_have_no_finding(tmp_path, name):
    root = SAMPLES / name
    assert ddprof.analyze(root, cache=tmp_path / "run")["health"] == []


def test_gpu_side_not_captured(tmp_path):
    traces = clean()
    for t in traces.values():
        t["traceEvents"] = [e for e in t["traceEvents"] if e["cat"] not in ("kernel", "gpu_memcpy")]
    rep = report(tmp_path, traces)
    rows = found(rep, "gpu_not_captured")
    assert sorted(rows) == [0, 1]
    assert {r["count"] for r in rows.values()} == {LAUNCHES_PER_STEP * SC.steps}
    assert rows[0]["example"] == "cudaLaunchKernel" and rows[0]["headline"]
    assert rep["verdicts"][0].startswith("ranks 0, 1: 30 GPU launches recorded but no GPU activity")
    text = render_text(rep)
    assert text.index("Trace health") < text.index("Verdicts")


def test_an_accelerator_whose_activity_is_not_analysed_is_said_and_draws_no_verdict(tmp_path):
    """A real Meta MTIA trace (HTA's test data): its device work is in mtia_ccp_events, its runtime in
    mtia_runtime. The health section says the accelerator was not analysed, as a headline, and no overlap,
    idle or step verdict is drawn from the host's operators as if they were the device."""
    rep = ddprof.analyze(trace_set("hta/mtia-inference"), cache=tmp_path / "run")
    [row] = found(rep, "accelerator_not_analysed").values()
    assert (row["rank"], row["count"], row["headline"]) == (0, 1313 + 823, True)
    assert row["example"] == "MTIA events: 1313 mtia_ccp_events, 823 mtia_runtime"
    assert rep["verdicts"][0] == ("rank 0: 2136 events of the MTIA accelerator's own activity were not analysed "
                                  "(ddprof reads no MTIA device work): the numbers describe the host's operators, "
                                  "not the accelerator, and no overlap, idle or step verdict is drawn from them")
    assert not any("idle" in v or "compute fills" in v or "exposed communication" in v for v in rep["verdicts"][1:])


def test_generated_accelerator_events_beside_a_gpu_rank(tmp_path):
    """Generated: rank 1 also records MTIA device events. The finding names rank 1 alone; rank 0's GPU is
    analysed, so the run's verdicts stay."""
    traces = clean()
    t0 = first_step(traces[1])
    traces[1]["traceEvents"] += [event("pe_exe", t0 + 10 * i, 5, cat="mtia_ccp_events", stream=112) for i in range(7)]
    rep = report(tmp_path, traces)
    rows = found(rep, "accelerator_not_analysed")
    assert sorted(rows) == [1] and rows[1]["count"] == 7 and rows[1]["example"] == "MTIA events: 7 mtia_ccp_events"
    assert any(v.startswith("exposed communication") for v in rep["verdicts"])


def test_graph_capture_and_graph_kernels(tmp_path):
    traces = clean()
    t = traces[0]
    t0 = first_step(t) + 9000  # inside step 0, after its kernels
    t["traceEvents"] += [
        event("cudaStreamBeginCapture", t0, 2),
        *[event("cudaLaunchKernel", t0 + 10 + i, 1, correlation=90000 + i) for i in range(3)],  # captured: no kernel
        event("cudaStreamEndCapture", t0 + 20, 2),
        event("cudaGraphLaunch", t0 + 30, 5, correlation=90100),
        *[event(f"graph_kernel_{i}", t0 + 40 + 10 * i, 5, cat="kernel", tid=7, stream=7, device=0,
                correlation=90100) for i in range(4)],
        event("cudaLaunchKernel", t0 + 100, 1, correlation=90200),  # after the capture: not captured
    ]
    rep = report(tmp_path, traces)
    assert {r: row["count"] for r, row in found(rep, "graph_capture").items()} == {0: 3}
    graph = found(rep, "graph_kernels")
    assert {r: row["count"] for r, row in graph.items()} == {0: 4}
    assert graph[0]["example"] == "graph_kernel_0"
    assert not any(row["headline"] for row in rep["health"])


@pytest.mark.parametrize("captured", [True, False])
def test_a_trace_that_is_mostly_a_graph_capture_is_not_called_slow_to_launch(tmp_path, captured):
    # 40 launches and 2 kernels run 4.5 ms apart: the GPU idles ~100 %. Captured into a graph, those launches
    # ran nothing while traced; launched for real they would have (their kernels would be in the trace)
    launches = [event("cudaLaunchKernel", 10 + 5 * i, 1, correlation=1000 + i) for i in range(40)]
    region = [event("cudaStreamBeginCapture", 0, 2), *launches, event("cudaStreamEndCapture", 400, 2)]
    run = [event("cudaLaunchKernel", 500, 2, correlation=1),
           event("k0", 505, 5, cat="kernel", tid=7, stream=7, device=0, correlation=1),
           event("cudaLaunchKernel", 5000, 2, correlation=2),
           event("k1", 5005, 5, cat="kernel", tid=7, stream=7, device=0, correlation=2)]
    trace = {"distributedInfo": {"rank": 0, "world_size": 1},
             "traceEvents": (region if captured else launches) + run}
    rep = report(tmp_path, {0: trace})
    idle = next(v for v in rep["verdicts"] if v.startswith("the GPUs are idle"))
    if captured:
        assert found(rep, "graph_capture")[0]["count"] == 40
        assert "the trace is mostly a graph capture (40 launches captured into a CUDA/HIP graph, 2 kernels run)" in idle
        assert "does not launch work fast enough" not in idle
    else:
        assert "graph capture" not in idle and idle.endswith("the CPU does not launch work fast enough")


def test_kernels_overlapping_on_one_stream(tmp_path):
    traces = clean()
    kernels = sorted((e for e in traces[1]["traceEvents"] if e["cat"] == "kernel" and e["args"]["stream"] == 7),
                     key=lambda e: e["ts"])
    kernels[1]["ts"] = kernels[0]["ts"] + kernels[0]["dur"] - 3  # starts 3 µs before the first ends
    rep = report(tmp_path, traces)
    rows = found(rep, "stream_overlap")
    assert {r: row["count"] for r, row in rows.items()} == {1: 1}
    assert rows[1]["example"] == f"{kernels[1]['name']} on stream 7 starts 3 µs before the previous kernel ends"


def test_negative_and_absurd_durations(tmp_path):
    traces = clean()
    t0 = first_step(traces[0])
    traces[0]["traceEvents"] += [event("cudaLaunchKernel", t0 + 1, -4), event("aten::mm", t0 + 2, 3 * 86400e6,
                                                                              cat="cpu_op"),
                                 event("aten::add", t0 + 3, -1, cat="cpu_op")]
    rep = report(tmp_path, traces)
    rows = found(rep, "dropped_events")
    assert {r: row["count"] for r, row in rows.items()} == {0: 3}
    assert rows[0]["example"] == "2 negative duration; 1 duration over 24 h (CUPTI timestamp overflow)"


def test_timestamps_rounded_to_whole_microseconds(tmp_path):
    rep = report(tmp_path, SC.kineto())  # ddprof.synth.to_kineto writes whole µs
    rows = found(rep, "rounded_timestamps")
    assert sorted(rows) == [0, 1]
    # the rows checked: on a GPU rank its kernels, launches and steps (its CPU ops are not read)
    assert rows[0]["count"] == len([e for e in SC.kineto()[0]["traceEvents"] if e["cat"] != "cpu_op"])


def test_events_outside_every_step(tmp_path):
    traces = clean()
    t = traces[0]
    end = max(e["ts"] + e["dur"] for e in t["traceEvents"])
    t["traceEvents"] += [event("cudaLaunchKernel", end + 100, 4, correlation=80000),
                         event("late_kernel", end + 110, 50, cat="kernel", tid=7, stream=7, device=0, correlation=80000)]
    rep = report(tmp_path, traces)
    rows = found(rep, "outside_steps")
    assert {r: (row["count"], row["example"]) for r, row in rows.items()} == {0: (1, "late_kernel")}


def test_missing_ranks(tmp_path):
    traces = clean()
    for t in traces.values():
        t["distributedInfo"]["world_size"] = 4
    rep = report(tmp_path, traces)
    rows = found(rep, "missing_ranks")
    assert rows[None]["ranks"] == [2, 3] and rows[None]["count"] == 2
    assert rows[None]["example"] == "2 of 4 ranks traced; missing 2-3"
    assert any(v.startswith("2 of 4 ranks traced; missing 2-3") for v in rep["verdicts"])


def test_profiler_notices_of_lost_events(tmp_path):
    traces = clean()
    traces[1]["WARNING"] = ["Exceeded max GPU buffer count (33 >= 33) - terminating tracing",
                            "Dropped 1200 activity records", "Some other warning"]
    traces[1]["ERROR"] = ["CUPTI initialization failed"]
    rep = report(tmp_path, traces)
    lost = found(rep, "events_lost")
    assert {r: row["count"] for r, row in lost.items()} == {1: 2}
    assert lost[1]["example"] == "WARNING: Exceeded max GPU buffer count (33 >= 33) - terminating tracing"
    notices = found(rep, "profiler_notices")
    assert {r: row["count"] for r, row in notices.items()} == {1: 2}
    assert notices[1]["example"] == "ERROR: CUPTI initialization failed"
    assert any("the profiler reports lost events" in v for v in rep["verdicts"])


def test_untraced_gap_between_two_windows(tmp_path):
    traces = clean()
    for t in traces.values():
        later = copy.deepcopy(t["traceEvents"])
        for e in later:
            e["ts"] += 120e6  # two minutes on
            if e["name"].startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + 10}"
            for key in ("correlation", "External id"):
                if key in e["args"]:
                    e["args"][key] += 10**6
        t["traceEvents"] += later
    rep = report(tmp_path, traces)
    rows = found(rep, "untraced_gaps")
    assert {r: row["count"] for r, row in rows.items()} == {0: 1, 1: 1}
    assert rows[0]["example"].startswith("120 s with no event after window 0 (2 windows")


def test_clock_offset_from_the_clocks_section():
    clocks = {"applied": True, "reason": "", "reference": "a",
              "hosts": [{"host": "b", "ranks": [2, 3], "offset_ns": 5_000_000, "drift_ppm": 0.0, "t0_ns": 0,
                         "bound_ns": 800_000, "instances": 12, "applied": True, "reason": ""},
                        {"host": "c", "ranks": [4], "offset_ns": 1000, "drift_ppm": 0.0, "t0_ns": 0,
                         "bound_ns": 800_000, "instances": 12, "applied": False, "reason": "within bound"}]}
    rows = health(clean_events(), clocks=clocks)
    offsets = [r for r in rows if r["finding"] == "clock_offset"]
    assert len(offsets) == 1 and offsets[0]["ranks"] == [2, 3] and offsets[0]["count"] == 12
    assert offsets[0]["example"] == "host b's clock runs 5 ms ahead of host a's (± 800 µs, 12 collectives)"


def clean_events():
    return SC.events().with_columns(pl.col("ts_ns") + 500).lazy()


def test_every_finding_is_documented():
    assert set(ORDER) == set(AFFECTS) and set(ORDER) >= HEADLINE


def test_real_traces_findings(ingested):
    """Known facts of the real traces: DLRM's Kineto rounded to whole µs; the A100 trace ran kernels
    through CUDA graphs; the HTA A100 rank is 1 of 16."""
    dlrm = build_report(ingested("dlrm-8xV100-nccl"))
    assert sorted(found(dlrm, "rounded_timestamps")) == list(range(8))
    assert {row["finding"] for row in dlrm["health"]} == {"rounded_timestamps"}
    a100_run = ingested("hta/a100-16rank-rank0")
    a100 = build_report(a100_run)
    assert found(a100, "graph_kernels")[0]["count"] == 345
    # attributed to their launch: each takes the step of the cudaGraphLaunch that ran it
    ev = a100_run.collect_events(["kind", "name", "stream", "step", "correlation"])
    graphs = ev.filter((pl.col("kind") == "runtime") & (pl.col("name") == "cudaGraphLaunch"))
    ran = ev.filter(pl.col("stream").is_not_null()).join(graphs.select("correlation", launch_step="step"),
                                                          on="correlation")
    assert ran.height == 345 and ran.filter(pl.col("step") != pl.col("launch_step")).height == 0
    assert found(a100, "missing_ranks")[None]["ranks"] == list(range(1, 16))
