"""A real 4-stage GPipe pipeline (gloo send/recv of micro-batches) captured with ddprof.profile."""

from __future__ import annotations

import polars as pl
import pytest

pytest.importorskip("torch", reason="capture tests need torch (pip install 'ddprof[torch]')")

import ddprof  # noqa: E402
from tests.support.distributed_util import (  # noqa: E402
    cpu_collective_ops,
    gpipe_p2p,
    open_complete_run,
    read_meta,
    run_example,
)
from tests.support.jobs import PIPE_WIDTHS  # noqa: E402

STAGES, MICRO, BATCH, STEPS = 4, 4, 8, 4


@pytest.fixture(scope="module")
def pipe_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("pipe") / "run"
    job = run_example("pipeline", run_dir, STAGES, "--steps", str(STEPS), "--microbatches", str(MICRO),
                      "--batch", str(BATCH), "--wait", "1", "--warmup", "1", "--active", "2", "--wait-ingest")
    return run_dir, job


def expected_p2p(rank: int) -> list[tuple[str, int, int]]:
    return gpipe_p2p(rank, STAGES, MICRO, BATCH, PIPE_WIDTHS)


def test_pipeline_run_dir(pipe_run):
    run_dir, job = pipe_run
    run = open_complete_run(run_dir, STAGES, [2, 3])
    assert run.manifest["process_groups"][0]["ranks"] == [0, 1, 2, 3]
    ddprof.validate(run.events())
    for rank in range(STAGES):
        meta = read_meta(run_dir, rank)
        assert (meta["rank"], meta["world_size"], meta["backend"], meta["status"]) == (rank, 4, "gloo", "complete")
        assert job.facts[rank]["stage_widths"] == [PIPE_WIDTHS[rank], PIPE_WIDTHS[rank + 1]]


def test_send_recv_sequence_and_bytes_follow_gpipe(pipe_run):
    run_dir, _ = pipe_run
    events = ddprof.open_run(run_dir).events().collect()
    p2p = events.filter((pl.col("kind") == "comm") & pl.col("coll_op").is_in(["send", "recv"])).sort("ts_ns")
    for rank in range(STAGES):
        for step in (2, 3):
            mine = p2p.filter((pl.col("rank") == rank) & (pl.col("step") == step))
            got = mine.select("coll_op", "bytes").rows()
            assert got == [(op, nbytes) for op, nbytes, _ in expected_p2p(rank)], f"rank {rank} step {step}"
            assert set(mine["name"].to_list()) <= {"gloo:send", "gloo:recv"}
            assert set(mine["dtype"].to_list()) == {"float"}
        # every gloo transfer has its c10d launch op on the same rank
        launches = cpu_collective_ops(events, "c10d::send").filter(pl.col("rank") == rank).height
        launches += cpu_collective_ops(events, "c10d::recv_").filter(pl.col("rank") == rank).height
        assert launches == 2 * len(expected_p2p(rank))


def test_bytes_sent_match_what_each_stage_sent(pipe_run):
    run_dir, job = pipe_run
    events = ddprof.open_run(run_dir).events().collect()
    sends = events.filter((pl.col("kind") == "comm") & (pl.col("coll_op") == "send"))
    for rank in range(STAGES):
        sent = job.facts[rank]["sent_bytes"]  # every step, as the stage counted them
        per_step = sorted(b for peer_bytes in sent.values() for b in peer_bytes[: len(peer_bytes) // STEPS])
        for step in (2, 3):
            traced = sends.filter((pl.col("rank") == rank) & (pl.col("step") == step))["bytes"].sort().to_list()
            assert traced == per_step


def test_peer_of_each_transfer(pipe_run):
    run_dir, _ = pipe_run
    events = ddprof.open_run(run_dir).events().collect()
    p2p = events.filter((pl.col("kind") == "comm") & pl.col("coll_op").is_in(["send", "recv"]))
    p2p = p2p.sort("ts_ns")
    for rank in range(STAGES):
        for step in (2, 3):
            mine = p2p.filter((pl.col("rank") == rank) & (pl.col("step") == step))
            assert mine.select("coll_op", "bytes", "peer").rows() == expected_p2p(rank)
