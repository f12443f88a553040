"""A real 2-rank DDP job (gloo, CPU) captured with ddprof.profile, checked down to the bucket bytes."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("torch", reason="capture tests need torch (pip install 'ddprof[torch]')")

import ddprof  # noqa: E402
from tests.support.distributed_util import (  # noqa: E402
    comm_events,
    cpu_collective_ops,
    ddp_buckets,
    read_flight_recorder,
    read_meta,
    run_example,
)
from tests.support.jobs import JOBS  # noqa: E402

STEPS, WAIT, WARMUP, ACTIVE = 5, 1, 1, 2
CAP_MB = 0.5


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ddp") / "run"
    job = run_example("ddp", run_dir, 2, "--steps", str(STEPS), "--wait", str(WAIT), "--warmup", str(WARMUP),
                      "--active", str(ACTIVE), "--bucket-cap-mb", str(CAP_MB), "--wait-ingest")
    return run_dir, job


def test_run_dir_has_every_rank_and_the_profiled_steps(ddp_run):
    run_dir, _ = ddp_run
    run = ddprof.open_run(run_dir)
    assert run.ranks == [0, 1]
    assert run.world_size == 2
    assert run.manifest["backend"] == "gloo"
    assert run.device == "cpu"
    # schedule wait=1, warmup=1, active=2: ProfilerStep#2 and #3 are recorded, nothing else
    assert run.steps == [2, 3]
    for rank in (0, 1):
        assert run.rank_info(rank)["steps"] == [2, 3]
        assert run.rank_info(rank)["sources"] == [
            str(run_dir / "raw" / f"rank-{rank:05d}" / f"rank-{rank:05d}.cycle-000.pt.trace.json.gz")]
    events = run.events().collect()
    ddprof.validate(events)
    steps = events.filter(pl.col("name").str.starts_with("ProfilerStep#")).sort("rank", "step")
    assert steps.select("rank", "step").rows() == [(0, 2), (0, 3), (1, 2), (1, 3)]
    assert steps["dur_ns"].min() > 0


def test_allreduce_bytes_are_the_gradient_buckets(ddp_run):
    run_dir, job = ddp_run
    param_bytes = job.facts[0]["param_bytes"]
    assert param_bytes == [256 * 512 * 4, 512 * 4, 512 * 512 * 4, 512 * 4, 512 * 10 * 4, 10 * 4]
    buckets = ddp_buckets(param_bytes, int(CAP_MB * 1024 * 1024))
    assert buckets == [1071144, 526336]
    # DDP's own bookkeeping agrees with the independent computation
    assert job.facts[0]["bucket_sizes"] == ", ".join(map(str, buckets))

    events = ddprof.open_run(run_dir).events().collect()
    comms = comm_events(events, "all_reduce")
    for rank in (0, 1):
        mine = comms.filter(pl.col("rank") == rank)
        assert mine.filter(pl.col("name") != "gloo:all_reduce").height == 0
        for step in (2, 3):
            in_step = mine.filter(pl.col("step") == step)
            # the buckets run on two gloo threads at once: either may start first
            assert sorted(in_step["bytes"].to_list()) == sorted(buckets), f"rank {rank} step {step}"
            assert in_step["dtype"].to_list() == ["float", "float"]
            assert (in_step["dur_ns"] > 0).all()
        # one launch per bucket on the main thread; the transfer runs on gloo's own threads
        launches = cpu_collective_ops(events, "c10d::allreduce_").filter(pl.col("rank") == rank)
        assert launches.height == 2 * ACTIVE
        assert set(mine["tid"].to_list()).isdisjoint(launches["tid"].to_list())


def test_meta_files_describe_each_rank(ddp_run):
    import torch

    run_dir, job = ddp_run
    for rank in (0, 1):
        meta = read_meta(run_dir, rank)
        assert meta["status"] == "complete"
        assert (meta["rank"], meta["local_rank"], meta["world_size"]) == (rank, rank, 2)
        assert meta["rank_source"] == "torch.distributed"
        assert meta["backend"] == "gloo"
        assert meta["pid"] == job.facts[rank]["pid"]
        assert meta["versions"]["torch"] == torch.__version__
        assert meta["versions"]["gpus"] == []
        assert meta["enabled"]["schedule"] == {"skip_first": 0, "wait": WAIT, "warmup": WARMUP,
                                               "active": ACTIVE, "repeat": 1}
        assert meta["enabled"]["activities"] == ["cpu"]
        assert meta["enabled"]["record_shapes"] is True
        assert meta["process_groups"][0]["ranks"] == [0, 1]
        assert meta["process_groups"][0]["pg_size"] == 2
        assert meta["job"]["MASTER_ADDR"] == "127.0.0.1"
        assert meta["start"]["wall_ns"] < meta["end"]["wall_ns"]
        assert meta["start"]["monotonic_ns"] < meta["end"]["monotonic_ns"]
        assert meta["traces"] == [f"rank-{rank:05d}.cycle-000.pt.trace.json.gz"]
        assert meta["failures"] == []
        assert meta["argv"][0] == str(JOBS) and meta["argv"][1:4] == ["ddp", "-o", str(run_dir)]


def test_manifest_collector_section(ddp_run):
    run_dir, _ = ddp_run
    collector = ddprof.open_run(run_dir).manifest["collector"]
    assert collector["name"] == "ddprof.collectors"
    assert collector["world_size"] == 2
    assert collector["backend"] == "gloo"
    assert collector["ranks_complete"] == [0, 1]
    assert collector["ranks_missing"] == collector["ranks_incomplete"] == collector["ranks_failed"] == []
    assert collector["warnings"] == []
    assert collector["enabled"]["ingest"] == "sync"
    assert 0 <= collector["waited_s"] < collector["timeout_s"]
    assert set(collector["per_rank"]) == {"0", "1"}
    assert collector["per_rank"]["1"]["flight_recorder"][0]["file"] == "fr_trace_rank_1"


def test_flight_recorder_dump_holds_every_collective(ddp_run):
    run_dir, _ = ddp_run
    buckets = ddp_buckets([256 * 512 * 4, 512 * 4, 512 * 512 * 4, 512 * 4, 512 * 10 * 4, 10 * 4],
                          int(CAP_MB * 1024 * 1024))
    for rank in (0, 1):
        path = run_dir / "raw" / f"rank-{rank:05d}" / f"fr_trace_rank_{rank}"
        assert read_meta(run_dir, rank)["flight_recorder"][0]["reason"] == "exit"
        dump = read_flight_recorder(Path(path))
        reduces = [e for e in dump["entries"] if e["profiling_name"] == "gloo:all_reduce"]
        # step 0 reduces one bucket with every gradient, then DDP rebuilds its buckets in gradient order
        elems = [e["input_sizes"][0][0] for e in reduces]
        assert elems == [sum(buckets) // 4] + [b // 4 for b in buckets] * (STEPS - 1)
        seqs = [e["collective_seq_id"] for e in dump["entries"]]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert {e["process_group"][1] for e in dump["entries"]} == {"default_pg"}
