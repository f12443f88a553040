"""A real 2-rank gloo job, profiled with plain torch.profiler (no ddprof collector), ingests as CPU-only."""

from __future__ import annotations

import socket
from pathlib import Path

import polars as pl
import pytest

torch = pytest.importorskip("torch")

STEPS = 3
NUMEL = 4096  # float32 -> 16 KiB per all-reduce


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    x = torch.ones(NUMEL)
    w = torch.randn(256, 256)
    def export(p) -> None:
        p.export_chrome_trace(str(Path(out) / f"gloo_trace_{rank}.json"))

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, on_trace_ready=export,
                 schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1)) as prof:
        for _ in range(STEPS + 1):
            for _ in range(4):
                w = torch.tanh(w @ w) / 256
            dist.all_reduce(x)
            if rank == 0:
                dist.send(torch.full((100,), 2.0), dst=1)
            else:
                buf = torch.empty(100)
                dist.recv(buf, src=0)
            prof.step()
    dist.barrier()  # gloo aborts a rank whose peer tears down while it still talks to it (seen once in CI)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo_traces(tmp_path_factory) -> Path:
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("gloo")
    mp.start_processes(_worker, args=(2, _free_port(), str(out)), nprocs=2, start_method="spawn", join=True)
    return out


def test_plain_torch_profiler_gloo_run_ingests(gloo_traces, tmp_path):
    import ddprof

    run = ddprof.ingest([gloo_traces], tmp_path / "run")
    assert run.ranks == [0, 1] and run.world_size == 2
    assert run.manifest["backend"] == "gloo" and run.device == "cpu"
    assert len(run.steps) == STEPS
    ev = run.events().collect()
    assert ev.filter(pl.col("stream").is_not_null()).height == 0  # CPU-only layout
    comm = ev.filter(pl.col("kind") == "comm")
    assert comm.height > 0 and comm["name"].str.starts_with("gloo:").all()
    allreduce = comm.filter(pl.col("coll_op") == "all_reduce")
    per_rank = allreduce.filter(pl.col("step").is_not_null()).group_by("rank").len().sort("rank")
    assert per_rank["len"].to_list() == [STEPS, STEPS]
    assert allreduce["bytes"].unique().to_list() == [NUMEL * 4]
    # One process group in distributedInfo.pg_config: every collective belongs to it.
    assert comm["pg"].unique().to_list() == ["0"] and comm["group_size"].unique().to_list() == [2]
    p2p = comm.filter(pl.col("coll_op").is_in(["send", "recv"]))
    assert set(zip(p2p["rank"], p2p["coll_op"])) == {(0, "send"), (1, "recv")}
    assert p2p["bytes"].unique().to_list() == [400]
    # The peer comes from c10d::send/recv_'s concrete inputs and reaches the gloo rows by issue order.
    assert set(zip(p2p["rank"], p2p["peer"])) == {(0, 1), (1, 0)}
    # The c10d ops on the main thread carry the collective too, but stay CPU ops.
    c10d = ev.filter(pl.col("name") == "c10d::allreduce_")
    assert c10d.height >= 2 * STEPS and set(c10d["kind"]) == {"cpu_op"} and set(c10d["coll_op"]) == {"all_reduce"}
