"""The timeline summary ingest writes beside each Parquet part (:mod:`ddprof.store.timeline_summary`): the
dashboard's grid assembled from it equals the grid built from the store's events, on a generated run
whose busy times are known; a store without summaries (an older ingest) or with stale ones still opens."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from ddprof.dashboards.timeline.data import CLASSES, GRID_DIR, STARTS, load
from ddprof.dashboards.timeline.lod import view

import ddprof
from ddprof.store import timeline_summary as ts
from ddprof.synth import Spec, generate

SPEC = Spec(ranks=4, steps=2, kernels=40, slow={2: 1.5})


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("synth")
    truth = generate(SPEC, out)
    ddprof.ingest([out / "traces"], out / "run", jobs=1)
    return out / "run", truth


def _copy(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to, copy_function=shutil.copy2)  # parts keep their mtime: summaries stay valid
    shutil.rmtree(to / GRID_DIR, ignore_errors=True)
    return to


def _summaries(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob(f"events/*/*{ts.SUFFIX}"))


def test_grid_from_ingest_summaries_equals_grid_from_the_store(ingested, tmp_path):
    run_dir, truth = ingested
    with_summaries = _copy(run_dir, tmp_path / "a")
    assert len(_summaries(with_summaries)) == SPEC.ranks  # one beside each part
    a = load(ddprof.open_run(with_summaries))
    assert a.built and a.from_store == []  # every rank from its summary: no event read back
    without = _copy(run_dir, tmp_path / "b")
    for p in _summaries(without):
        p.unlink()
    b = load(ddprof.open_run(without))
    assert b.built and b.from_store == list(range(SPEC.ranks))
    assert (a.fine_bins, a.cell_ns, a.origin_ns, a.span_ns) == (b.fine_bins, b.cell_ns, b.origin_ns, b.span_ns)
    assert np.array_equal(np.asarray(a.grid), np.asarray(b.grid))
    assert a.steps.equals(b.steps) and a.long.equals(b.long)
    assert a.lanes == b.lanes and a.row_lanes == b.row_lanes
    # the known answer: each rank's row (its streams) is busy computing and communicating as generated
    for i, want in enumerate(truth["per_rank"]):
        busy = np.asarray(a.grid[i, :STARTS], dtype=np.float64).sum(axis=1)
        assert busy[CLASSES.index("compute")] == pytest.approx(want["compute_us"] * 1e3, rel=1e-5)
        assert busy[CLASSES.index("comm")] == pytest.approx(want["comm_us"] * 1e3, rel=1e-5)
    assert a.steps.group_by("rank").len().get_column("len").to_list() == [SPEC.steps] * SPEC.ranks


def test_store_without_summaries_still_opens_and_draws(ingested, tmp_path):
    """A run ingested before summaries existed: no summary files at all; the dashboard builds from the store."""
    old = _copy(ingested[0], tmp_path / "old")
    for p in _summaries(old):
        p.unlink()
    data = load(ddprof.open_run(old))
    assert data.from_store == list(range(SPEC.ranks))
    v = view(data, bins=200)
    assert v.rows and len(v.rows) == SPEC.ranks
    assert not load(ddprof.open_run(old)).built  # kept like any grid


def test_a_summary_not_of_its_part_is_not_used(ingested, tmp_path):
    run_dir = _copy(ingested[0], tmp_path / "stale")
    run = ddprof.open_run(run_dir)
    part = run_dir / run.rank_info(1)["parts"][0]
    st = part.stat()
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # the part is not the one summarised
    (run_dir / run.rank_info(3)["parts"][0]).with_name("x").write_bytes(b"")  # unrelated file: no effect
    ts.summary_path(run_dir / run.rank_info(2)["parts"][0]).write_bytes(b"not a summary")
    data = load(run)
    assert data.from_store == [1, 2]
    fresh = _copy(ingested[0], tmp_path / "fresh")
    assert np.array_equal(np.asarray(data.grid), np.asarray(load(ddprof.open_run(fresh)).grid))


def test_aligned_cells_and_rebin_are_exact():
    """The module's example: events in [1,000, 70,000) ns -> 34,500 cells of 2 ns from cell 500."""
    k = ts.level_for(1_000, 70_000, ts.FINE)
    assert k == 1 and ts.cells_at(1_000, 70_000, k) == (500, 34_500)
    fine = np.arange(1, 11, dtype=np.float64)[None, :]  # cells 3..12 of 1 ns
    # into cells of 4 ns from cell 0: [0,4) holds cells 3; [4,8) 4..7; [8,12) 8..11; [12,16) 12
    assert ts.rebin(fine, 3, 0, 2, 0, 4).tolist() == [[1, 2 + 3 + 4 + 5, 6 + 7 + 8 + 9, 10]]
    assert ts.rebin(fine, 3, 0, 2, 1, 2).tolist() == [[2 + 3 + 4 + 5, 6 + 7 + 8 + 9]]  # outside dropped


def test_summary_of_nested_events_and_lanes():
    """Two streams and a thread; a kernel nested in another on stream 7 is not drawn twice; a cpu_op and
    its child at the same start count once (the outer one)."""
    df = pl.DataFrame({
        "ts_ns": [0, 10, 20, 0, 0, 5], "dur_ns": [100, 20, 50, 40, 30, 10],
        "stream": [7, 7, 9, None, None, None], "tid": [7, 7, 9, 1, 1, None],
        "kind": ["compute", "compute", "comm", "cpu_op", "cpu_op", "runtime"],
        "name": ["a", "b", "c", "d", "e", "f"], "step": [0, 0, 0, None, None, None],
        "coll_op": [None, None, "all_reduce", None, None, None], "bytes": [None, None, 4, None, None, None],
        "pg": [None] * 6, "peer": [None] * 6}, schema_overrides={"peer": pl.Int32, "step": pl.Int32,
                                                                "pg": pl.String, "bytes": pl.Int64})
    s = ts.summarise(df)
    assert (s.streams, s.tids) == ([7, 9], [1])  # the runtime call without a thread is on no lane
    busy = s.cells.astype(np.float64).sum(axis=1).reshape(len(ts.GROUPS), ts.CHANNELS)
    assert busy[0].tolist() == [100, 50, 0, 0, 2]  # streams: a (b nested), c; two starts
    assert busy[1].tolist() == [40, 0, 0, 0, 1]  # thread 1: d (e nested)
    assert {c: v.tolist() for c, v in s.steps.items()} == {"group": [0], "step": [0], "start": [0], "end": [100]}


def test_packed_sort_equals_the_three_key_lexsort():
    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(0, 200))
        lane, start = rng.integers(0, 5, n), rng.integers(0, 40, n) + 1_700_000_000_000_000_000
        end = start + rng.integers(0, 30, n)
        got, want = ts._by_lane_start(lane, start, end), np.lexsort((-end, start, lane))
        assert np.array_equal(np.c_[lane, start, end][got], np.c_[lane, start, end][want])


def test_a_part_dropped_by_a_later_ingest_takes_its_summary_along(tmp_path):
    generate(Spec(ranks=2, steps=1, kernels=24), tmp_path)
    traces = sorted((tmp_path / "traces").glob("*.trace.json"))
    ddprof.ingest(traces, tmp_path / "run", jobs=1)
    assert len(_summaries(tmp_path / "run")) == 2
    ddprof.ingest(traces[:1], tmp_path / "run", jobs=1)  # the second trace is no longer part of the run
    left = [p.name for p in (tmp_path / "run" / "events").rglob("*") if p.is_file()]
    assert len(left) == 2 and sum(n.endswith(ts.SUFFIX) for n in left) == 1
