"""Older trace generations and other Chrome-format exporters read as the modern Kineto trace they stand for.

Each shape is the generated data-parallel job of :mod:`gen` (its answers written by hand in
``DataParallel.truth``), written the way an older profiler or another exporter writes it:
PyTorch 1.8-1.10's capitalised categories, a bare JSON array document, durations as ``B``/``E``
pairs, instants and counters beside the events. The answer must not move.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import ddprof
from ddprof.inputs.analyze import analyze
from ddprof.readers.kineto.categories import canonical
from ddprof.readers.kineto.decode import decode
from ddprof.synth import DataParallel
from tests.support.paths import TRACES

SC = DataParallel()
#: PyTorch 1.8's spelling of the modern categories (the trace of tests/data/traces/kineto-1.8-era shows them).
OLD_SPELLING = {"kernel": "Kernel", "cuda_runtime": "Runtime", "cpu_op": "Operator", "gpu_memcpy": "Memcpy",
                "gpu_memset": "Memset", "user_annotation": "User Annotation", "python_function": "Python"}
SECTIONS = ("overlap", "overlap_by_step", "breakdown", "idle", "collectives")


def _write(traces: dict[int, Any], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, trace in traces.items():
        (folder / f"rank{rank}.pt.trace.json").write_text(json.dumps(trace))
    return folder


def _report(traces: dict[int, Any], tmp: Path) -> dict[str, Any]:
    return analyze(_write(traces, tmp / "traces"), cache=tmp / "cache")


@pytest.fixture(scope="module")
def modern(tmp_path_factory) -> dict[str, Any]:
    return _report(SC.kineto(), tmp_path_factory.mktemp("modern"))


def _same(report: dict[str, Any], modern: dict[str, Any]) -> None:
    for key in SECTIONS:
        assert report[key] == modern[key], key


def _check_truth(report: dict[str, Any]) -> None:
    truth = SC.truth()
    for row in report["overlap"]:
        want = truth["overlap"][row["rank"]]
        assert row["overlap_pct"] == pytest.approx(want["overlap_pct"])
        assert row["exposed_comm_us"] == pytest.approx(want["exposed_comm_us"])
    for row in report["breakdown"]:
        want = truth["breakdown"][row["rank"]]
        assert row["compute_us"] == pytest.approx(want["compute_us"])
        assert row["idle_us"] == pytest.approx(want["idle_us"])


def test_historical_category_names_map_to_the_modern_ones():
    assert [canonical(c) for c in ("Kernel", "Runtime", "Operator", "Memcpy", "Memset", "Python", "Trace",
                                   "User Annotation", "user_annotation", "gpu_user_annotation", "cuda_runtime",
                                   "CUDA_DRIVER", "gpu_memcpy", "gpu_memset", "Python function", "a new one")] == [
        "kernel", "cuda_runtime", "cpu_op", "gpu_memcpy", "gpu_memset", "python_function", "Trace",
        "user_annotation", "user_annotation", "gpu_user_annotation", "cuda_runtime", "cuda_driver", "gpu_memcpy",
        "gpu_memset", "python_function", "a new one"]


def test_capitalised_categories_give_the_modern_report(tmp_path, modern):
    traces = SC.kineto()
    for trace in traces.values():
        for e in trace["traceEvents"]:
            e["cat"] = OLD_SPELLING.get(e["cat"], e["cat"])
    report = _report(traces, tmp_path)
    assert report["run"]["device"] == "gpu"
    assert not any("unknown category" in w for w in report["run"]["warnings"])
    _same(report, modern)
    _check_truth(report)


def test_a_bare_json_array_document_is_a_trace(tmp_path, modern):
    """No ``traceEvents`` object, no header: the rank comes from the file name."""
    traces = {rank: t["traceEvents"] for rank, t in SC.kineto().items()}
    report = _report(traces, tmp_path)
    _check_truth(report)
    assert report["overlap"] == modern["overlap"] and report["breakdown"] == modern["breakdown"]


def test_a_bare_array_cut_short_still_reads(tmp_path):
    """Chrome's array format lets the closing ``]`` go (a trace cut by a crash); a trailing comma too."""
    events = SC.kineto()[0]["traceEvents"]
    whole, short = tmp_path / "whole.json", tmp_path / "short.json"
    whole.write_text(json.dumps(events))
    short.write_text(json.dumps(events)[:-1] + ",\n")
    a, b = decode(whole), decode(short)
    assert a.frame.height == b.frame.height == len(events)
    assert a.frame.equals(b.frame)


def _as_pairs(trace: dict[str, Any]) -> dict[str, Any]:
    """Every complete event written as a B/E pair (the E carries no name, as the format allows), in the
    order an exporter records them: by time, an end before a begin at the same instant, threads
    interleaved."""
    out = copy.deepcopy(trace)
    events = []
    for e in out["traceEvents"]:
        begin = {k: v for k, v in e.items() if k != "dur"}
        events += [{**begin, "ph": "B"}, {"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] + e["dur"]}]
    out["traceEvents"] = sorted(events, key=lambda e: (e["ts"], e["ph"] == "B"))
    return out


def test_begin_end_pairs_become_complete_events(tmp_path, modern):
    traces = {rank: _as_pairs(t) for rank, t in SC.kineto().items()}
    report = _report(traces, tmp_path)
    _same(report, modern)
    _check_truth(report)
    assert not any("'B'" in w or "'E'" in w for w in report["run"]["warnings"])


def test_nested_pairs_match_as_a_stack_and_unmatched_ones_are_named(tmp_path):
    """``B fwd@10, B mm@11, E@14, E@19`` is mm [11, 14] inside fwd [10, 19]; a stray E and a B never
    closed are dropped, each named with its thread in a warning."""
    events = [{"ph": "B", "cat": "cpu_op", "name": "fwd", "pid": 1, "tid": 1, "ts": 10},
              {"ph": "B", "cat": "cpu_op", "name": "mm", "pid": 1, "tid": 1, "ts": 11},
              {"ph": "E", "pid": 1, "tid": 1, "ts": 14},
              {"ph": "E", "pid": 1, "tid": 1, "ts": 19},
              {"ph": "E", "name": "stray", "pid": 1, "tid": 2, "ts": 5},
              {"ph": "B", "cat": "cpu_op", "name": "never closed", "pid": 1, "tid": 3, "ts": 7}]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    dec = decode(path)
    rows = {r["name"]: (r["ts_ns"], r["dur_ns"]) for r in dec.frame.iter_rows(named=True)}
    assert rows == {"fwd": (10_000, 9_000), "mm": (11_000, 3_000)}
    assert dec.raw_complete == 4
    run = ddprof.ingest([path], tmp_path / "run")
    warnings = " ".join(run.rank_info(0)["warnings"])
    assert "'stray' (pid 1, tid 2" in warnings and "'never closed' (pid 1, tid 3" in warnings


def test_instants_are_kept_where_a_kind_fits_and_counters_never_crash(tmp_path, modern):
    traces = SC.kineto()
    for trace in traces.values():
        t0 = trace["traceEvents"][0]["ts"]
        trace["traceEvents"] += [
            {"ph": "i", "cat": "cpu_op", "name": "mark", "pid": 100, "tid": 1, "ts": t0 + 1, "s": "t"},
            {"ph": "I", "cat": "cpu_instant_event", "name": "Iteration Start", "pid": 100, "tid": 1, "ts": t0},
            {"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": t0 + 5, "s": "g"},
            {"ph": "C", "name": "memory", "pid": 100, "ts": t0 + 2, "args": {"allocated": 1024}},
            {"ph": "C", "name": "odd counter", "ts": "later", "args": [1, 2]},
        ]
    path = _write(traces, tmp_path / "traces")
    dec = decode(path / "rank0.pt.trace.json")
    kept = dec.frame.filter(dec.frame["dur_ns"] == 0)["name"].to_list()
    assert kept == ["mark"]  # the cpu_op instant, as a zero-length op; the rest hold no interval
    _same(analyze(path, cache=tmp_path / "cache"), modern)


DATA = TRACES / "kineto-1.8-era"


def test_a_real_pytorch_1_8_era_trace(tmp_path):
    """A real trace of that generation (Kineto's own test data, V100, May 2021; tests/data/traces/kineto-1.8-era):
    ``Kernel``/``Runtime``/``Operator``/``Memcpy`` categories, thread ids such as ``"stream 7"``. It reads
    as a GPU trace, with HTA 0.5.0's numbers on the same file: idle 11,896 us, compute 48 us (the 30
    kernels), non-compute 2 us (two 1 us memcpys), idle on stream 7 all host wait."""
    report = analyze(DATA / "gpu_metrics_input.json", cache=tmp_path / "cache", rank_map={"gpu_metrics_input.json": 0})
    assert report["run"]["device"] == "gpu"
    assert not any("unknown category" in w for w in report["run"]["warnings"])
    [row] = report["breakdown"]
    assert (row["idle_us"], row["compute_us"], row["non_compute_us"]) == (11_896.0, 48.0, 2.0)
    idle = {(r["stream"], r["category"]): r["idle_us"] for r in report["idle"]}
    assert idle[(7, "host_wait")] == 11_896.0 and idle[(7, "other")] == 0.0
    assert report["run"]["per_rank"][0]["step_ranges"] == [[2, 2]]  # steps [2]
