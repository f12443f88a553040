"""The two captures in sample_traces/ (made by the collector) ingest to their known answers. No torch."""

from __future__ import annotations

import polars as pl
import pytest

import ddprof
from tests.support.distributed_util import comm_events, cpu_collective_ops, gpipe_p2p, read_flight_recorder
from tests.support.paths import SAMPLES

WIDTHS = (64, 96, 128, 80, 32)  # the pipeline's layer widths when the sample was made (see its README)


@pytest.fixture(scope="module")
def slow_ddp(tmp_path_factory):
    return ddprof.ingest([SAMPLES / "gloo-ddp-4rank-slow-rank" / "raw"], tmp_path_factory.mktemp("s") / "run")


@pytest.fixture(scope="module")
def gpipe(tmp_path_factory):
    return ddprof.ingest([SAMPLES / "gloo-pipeline-4stage" / "raw"], tmp_path_factory.mktemp("p") / "run")


@pytest.mark.parametrize("name", ["gloo-ddp-4rank-slow-rank", "gloo-pipeline-4stage"])
def test_samples_are_small_raw_captures(name):
    root = SAMPLES / name
    # what the sample holds; a hidden folder is a cache some command left there (git ignores it)
    files = [f for f in root.rglob("*") if f.is_file() and not any(
        part.startswith(".") for part in f.relative_to(root).parts)]
    assert sum(f.stat().st_size for f in files) < 1_000_000
    assert {f.name for f in files} >= {"README.md", "make.py"}
    assert not [f for f in files if f.suffix == ".parquet" or f.name == "manifest.json"]
    for rank in range(4):
        names = {f.name for f in (SAMPLES / name / "raw" / f"rank-{rank:05d}").iterdir()}
        assert names == {f"rank-{rank:05d}.cycle-000.pt.trace.json.gz", f"rank-{rank:05d}.meta.json",
                         f"fr_trace_rank_{rank}"}


def test_slow_rank_sample(slow_ddp):
    run = slow_ddp
    assert (run.ranks, run.world_size, run.steps, run.manifest["backend"]) == ([0, 1, 2, 3], 4, [2, 3], "gloo")
    events = run.events().collect()
    reduces = comm_events(events, "all_reduce")
    for (rank, step), group in reduces.group_by(["rank", "step"]):
        assert sorted(group["bytes"].to_list()) == [526336, 1071144], (rank, step)
    launches = cpu_collective_ops(events, "c10d::allreduce_").with_columns(
        k=pl.int_range(pl.len()).over("rank", "step"))
    for _, inst in launches.group_by(["step", "k"]):
        assert inst.sort("ts_ns")["rank"].to_list()[-1] == 2
    longest = reduces.group_by("rank").agg(pl.col("dur_ns").max()).sort("rank")["dur_ns"].to_list()
    assert longest[2] < 50e6 < min(longest[:2] + longest[3:])
    fr = read_flight_recorder(SAMPLES / "gloo-ddp-4rank-slow-rank" / "raw" / "rank-00002" / "fr_trace_rank_2")
    elems = [e["input_sizes"][0][0] for e in fr["entries"] if e["profiling_name"] == "gloo:all_reduce"]
    assert elems == [399370] + [267786, 131584] * 4


def test_pipeline_sample(gpipe):
    run = gpipe
    assert (run.ranks, run.world_size, run.steps) == ([0, 1, 2, 3], 4, [2, 3])
    p2p = run.events().collect().filter((pl.col("kind") == "comm") & pl.col("coll_op").is_in(["send", "recv"]))
    for rank in range(4):
        for step in (2, 3):
            mine = p2p.filter((pl.col("rank") == rank) & (pl.col("step") == step)).sort("ts_ns")
            assert mine.select("coll_op", "bytes", "peer").rows() == gpipe_p2p(rank, 4, 4, 8, WIDTHS)
