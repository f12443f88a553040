"""Profiling windows: time between two traces of a rank, or inside one trace where nothing at all was
recorded, is never traced, so never idle. Answers come from ddprof.synth.scenarios' hand-derived truth: a run
traced in two identical windows has twice the single window's compute, idle and communication, and the
same shares."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ddprof.analyses.frames.windows import trace_windows, window_of
from ddprof.analyses.report import analyse, build_report
from hypothesis import given, settings
from hypothesis import strategies as st

import ddprof
from ddprof.store.windows import GAP_STEPS, MIN_GAP_NS, gap_threshold_ns, split_windows
from ddprof.synth import US, DataParallel

SC = DataParallel(ranks=2, steps=3, slow_rank=1)
MINUTES = 180 * 10**6  # µs between the two windows: 3 minutes
APPROX = dict(rel=1e-9, abs=1e-6)


def later(trace: dict[str, Any], dt_us: int, step_offset: int, corr_offset: int) -> dict[str, Any]:
    """The same trace ``dt_us`` later, its steps renumbered by ``step_offset`` and its correlation ids
    moved by ``corr_offset`` (0: the same ids again, as in a trace of a restarted process)."""
    out = copy.deepcopy(trace)
    for e in out["traceEvents"]:
        e["ts"] += dt_us
        if e["name"].startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + step_offset}"
        for key in ("correlation", "External id"):
            if key in e["args"]:
                e["args"][key] += corr_offset
    return out


def write(folder: Path, traces: dict[str, dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, trace in traces.items():
        (folder / name).write_text(json.dumps(trace))
    return folder


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    folder = write(tmp_path_factory.mktemp("one"), {f"rank{r}.pt.trace.json": t for r, t in SC.kineto().items()})
    return build_report(ddprof.ingest([folder], folder / "run"))


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    """Each rank traced twice, 3 minutes apart, in two files (the same correlation ids in both)."""
    traces = {}
    for r, t in SC.kineto().items():
        traces[f"rank{r}.a.pt.trace.json"] = t
        traces[f"rank{r}.b.pt.trace.json"] = later(t, MINUTES, 10, 0)
    folder = write(tmp_path_factory.mktemp("two"), traces)
    return build_report(ddprof.ingest([folder], folder / "run"))


@pytest.fixture(scope="module")
def one_file_gap(tmp_path_factory):
    """Each rank in one file whose second half starts 3 minutes after the first ends."""
    traces = {}
    for r, t in SC.kineto().items():
        both = copy.deepcopy(t)
        both["traceEvents"] += later(t, MINUTES, 10, 10**6)["traceEvents"]
        traces[f"rank{r}.pt.trace.json"] = both
    folder = write(tmp_path_factory.mktemp("gap"), traces)
    return build_report(ddprof.ingest([folder], folder / "run"))


def test_rule_cuts_only_where_nothing_was_recorded():
    t = MIN_GAP_NS
    s, e = np.array([0, 10, 11 + t, 3 * t]), np.array([10, 11, 2 * t, 3 * t + 5])
    # [0,10) [10,11), then [11, 11+t) uncovered, [11+t, 2t), then [2t, 3t) uncovered: both gaps are
    # exactly the threshold, not longer -> one window; a threshold 1 ns shorter cuts at both
    assert split_windows(s, e, t) == [[0, 3 * t + 5]]
    assert split_windows(s, e, t - 1) == [[0, 11], [11 + t, 2 * t], [3 * t, 3 * t + 5]]
    # an event covering the gap keeps the window whole
    s2, e2 = np.append(s, 0), np.append(e, 4 * t)
    assert split_windows(s2, e2, t - 1) == [[0, 4 * t]]
    assert split_windows(np.array([], dtype=np.int64), np.array([], dtype=np.int64), t) == []


def _windows_by_sorting(start: np.ndarray, end: np.ndarray, threshold: int) -> list[list[int]]:
    """The module doc's rule as written: sorted by start, an event opens a window when it starts more than
    the threshold after every earlier event ended."""
    out: list[list[int]] = []
    for s, e in sorted(zip(start.tolist(), np.maximum(end, start).tolist())):
        if out and s - out[-1][1] <= threshold:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


@given(st.lists(st.tuples(st.integers(-10**6, 10**6), st.integers(-5, 3000)), min_size=1, max_size=40),
       st.sampled_from([1, 2, 7, 100, 999, 1000, 1001, 50_000]))
@settings(max_examples=400, deadline=None)
def test_windows_match_the_rule_whether_or_not_a_gap_is_found_without_sorting(events, threshold):
    """The no-gap shortcut (every bucket of half the threshold touched) gives what sorting gives, on
    events in any order, gaps just under, at and over the threshold, and negative durations."""
    start = np.array([s for s, _ in events], dtype=np.int64)
    end = start + np.array([d for _, d in events], dtype=np.int64)
    assert split_windows(start, end, threshold) == _windows_by_sorting(start, end, threshold)
    spread = start * 1000  # buckets past the shortcut's limit: sorted the ordinary way
    assert split_windows(spread, spread + 1, 1) == _windows_by_sorting(spread, spread + 1, 1)


def test_threshold():
    assert gap_threshold_ns(np.array([])) == MIN_GAP_NS
    assert gap_threshold_ns(np.array([50_000_000, 60_000_000])) == MIN_GAP_NS  # 5 x 55 ms < 1 s
    assert gap_threshold_ns(np.array([300_000_000] * 3)) == GAP_STEPS * 300_000_000  # 1.5 s


def by_rank(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {row["rank"]: row for row in rows}


@pytest.mark.parametrize("shape", ["two_files", "one_file_gap"])
def test_two_windows_add_up(shape, request, single):
    rep = request.getfixturevalue(shape)
    truth = SC.truth()
    assert [p["windows"] for p in rep["run"]["per_rank"]] == [2, 2]
    assert [p["windows"] for p in single["run"]["per_rank"]] == [1, 1]
    got = by_rank(rep["breakdown"])
    for r, want in truth["breakdown"].items():
        for key in ("span_us", "idle_us", "compute_us", "non_compute_us"):
            assert got[r][key] == pytest.approx(2 * want[key], **APPROX), (r, key)
        assert got[r]["idle_pct"] == pytest.approx(by_rank(single["breakdown"])[r]["idle_pct"], **APPROX)
    idle = {(row["rank"], row["stream"], row["category"]): row["idle_us"] for row in rep["idle"]}
    for r, per_stream in truth["idle"].items():
        for (stream, category), want in per_stream.items():
            assert idle[(r, stream, category)] == pytest.approx(2 * want, **APPROX), (r, stream, category)
    for r, want in truth["overlap"].items():
        row = by_rank(rep["overlap"])[r]
        assert row["comm_us"] == pytest.approx(2 * want["comm_us"], **APPROX)
        assert row["overlap_pct"] == pytest.approx(want["overlap_pct"], **APPROX)
    assert rep.table("breakdown_by_step").height == 2 * SC.ranks * SC.steps
    idle_verdicts = [v for v in rep["verdicts"] if "idle" in v and "% of the traced time" in v]
    assert idle_verdicts == [v for v in single["verdicts"] if "idle" in v and "% of the traced time" in v]


@pytest.mark.parametrize("shape", ["two_files", "one_file_gap"])
def test_device_steps_do_not_stretch_across_an_untraced_gap(shape, request):
    """Steps 0-2 in the first window, 10-12 three minutes later: step 2, the last of its window, ends with
    its last kernel as a run's last step does, not at step 10's first kernel; each window's steps are the
    single window's, and the steps add up to the traced span."""
    rep = request.getfixturevalue(shape)
    truth = SC.truth()
    rows = rep.table("bubbles").to_dicts()
    assert [(b["rank"], b["step"]) for b in rows] == [(r, s) for r in range(SC.ranks) for s in (0, 1, 2, 10, 11, 12)]
    for b in rows:
        assert b["basis"] == "device"
        assert b["window_us"] == pytest.approx(truth["window"][b["rank"]][b["step"] % 10], **APPROX)
        assert b["bubble_us"] == pytest.approx(truth["bubble"][b["rank"]][b["step"] % 10], **APPROX)
    for r in range(SC.ranks):
        mine = sum(b["window_us"] for b in rows if b["rank"] == r)
        assert mine == pytest.approx(by_rank(rep["breakdown"])[r]["span_us"], **APPROX)


def test_frames_without_a_manifest_find_the_gap():
    """An event table alone (no run dir): the windows are derived from its rows by the same rule."""
    import polars as pl

    from ddprof.store.schema import conform

    first = SC.events()
    second = first.with_columns(pl.col("ts_ns") + MINUTES * US, pl.col("step") + 10,
                                pl.col("correlation") + 10**6, pl.col("external_id") + 10**6,
                                pl.col("name").str.replace(r"^ProfilerStep#(\d)$", "ProfilerStep#1$1"))
    events = conform(pl.concat([first, second]))
    sections = analyse(events.lazy())
    spans = {row["rank"]: row["span_us"] for row in sections["breakdown"]}
    assert spans == pytest.approx({r: 2 * w["span_us"] for r, w in SC.truth()["breakdown"].items()})
    from ddprof.analyses.frames.memo import prepare

    p = prepare(events.lazy())
    w = trace_windows(p)
    assert w.group_by("rank").len()["len"].to_list() == [2, 2]
    probe = pl.DataFrame({"rank": [0, 0, 1], "t": [0, w["t_start"][1], w["t_end"].max() + 1]})
    assert window_of(p, probe, "t").to_list() == [0, 1, 1]


def test_a_short_pause_stays_idle(tmp_path):
    """A pause shorter than the threshold, inside one trace, is idle time of its one window."""
    pause_us = 400_000  # 0.4 s with no event at all
    traces, shift = {}, {}
    for r, t in SC.kineto().items():
        both = copy.deepcopy(t)
        last_end = max(e["ts"] + e["dur"] for e in t["traceEvents"])
        shift[r] = last_end - min(e["ts"] for e in t["traceEvents"]) + pause_us  # µs the copy starts later
        both["traceEvents"] += later(t, shift[r], 10, 10**6)["traceEvents"]
        traces[f"rank{r}.pt.trace.json"] = both
    folder = write(tmp_path, traces)
    rep = build_report(ddprof.ingest([folder], folder / "run"))
    assert [p["windows"] for p in rep["run"]["per_rank"]] == [1, 1]
    truth = SC.truth()["breakdown"]
    for r, row in by_rank(rep["breakdown"]).items():
        busy = truth[r]["span_us"] - truth[r]["idle_us"]  # work time of one copy
        assert row["span_us"] == pytest.approx(shift[r] + truth[r]["span_us"], **APPROX)
        assert row["idle_us"] == pytest.approx(shift[r] + truth[r]["span_us"] - 2 * busy, **APPROX)


def test_text_report_shows_the_windows(two_files, single):
    from ddprof.render.text import render_text

    text = render_text(two_files)
    assert "windows" in text.splitlines()[2]
    assert [line.split()[5] for line in text.splitlines()[3:5]] == ["2", "2"]
    assert "untraced_gaps (ranks 0-1, 2)" in text
    assert "windows" not in render_text(single).splitlines()[2]
    assert "span: the traced time, each rank's windows added up (the time between two windows was not traced)" in text
    assert "windows added up" not in render_text(single)
    assert max(len(line) for line in text.splitlines()) <= 100


def test_the_rank_table_spans_the_traced_time_and_windows_are_no_warning(two_files, single):
    """A rank traced in two windows 3 minutes apart: its span in the run's rank table is the two windows'
    traced time (twice the single window's), not the 3 minutes between them; and two traces of a rank one
    after the other (a triggered run's windows) are what was asked for, noted in the health findings, not a
    warning about the input."""
    one = {p["rank"]: p["span_us"] for p in single["run"]["per_rank"]}
    two = {p["rank"]: p["span_us"] for p in two_files["run"]["per_rank"]}
    for r in one:
        assert two[r] == pytest.approx(2 * one[r], abs=0.002)
        assert two[r] < MINUTES / 100
    assert two_files["run"]["warnings"] == []
    assert not any("warning" in v for v in two_files["verdicts"]), two_files["verdicts"]
    assert {f["rank"] for f in two_files["health"] if f["finding"] == "untraced_gaps"} == {0, 1}
