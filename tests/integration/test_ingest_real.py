"""Every real trace set ingests; counts, ranks, steps and communication kernels match the raw JSON."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from ddprof.store.schema import validate
from tests.support.paths import DLRM, trace_set

SETS = [
    "dlrm-8xV100-nccl",
    "hta/nccl-metadata-a100",
    "hta/sendrecv-2-of-128",
    "hta/a100-16rank-rank0",
    "tracelens/b200-vllm-rank0",
    "tracelens/mi300-rocm-resnet-rank0",
    pytest.param("hta/v100-2rank-rank1-large", marks=pytest.mark.slow),
]


def raw_events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def raw_by_rank(folder: Path) -> dict[int, list[dict]]:
    out = {}
    for f in sorted(folder.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        rank = (doc.get("distributedInfo") or {}).get("rank", 0)
        out[rank] = doc["traceEvents"]
    return out


@pytest.mark.parametrize("name", SETS)
def test_complete_event_counts_match_raw_json(name, traces, ingested):
    run = ingested(name)
    raw = raw_by_rank(trace_set(name))
    assert run.ranks == sorted(raw)
    events = run.events().collect()
    validate(events)
    got = dict(events.group_by("rank").len().iter_rows())
    want = {r: sum(1 for e in evs if e.get("ph") == "X") for r, evs in raw.items()}
    assert got == want
    kernels = {r: sum(1 for e in evs if e.get("ph") == "X" and e.get("cat") == "kernel") for r, evs in raw.items()}
    got_k = dict(events.filter(pl.col("kind").is_in(["compute", "comm"]) & pl.col("stream").is_not_null())
                 .group_by("rank").len().iter_rows())
    assert got_k == {r: k for r, k in kernels.items() if k}
    assert run.manifest["sources"] and all(s["status"] == "ok" for s in run.manifest["sources"].values())


def test_dlrm_ranks_steps_and_collectives(ingested):
    run = ingested("dlrm-8xV100-nccl")
    assert run.world_size == 8 and run.ranks == list(range(8)) and run.steps == [10]
    ev = run.events().collect()
    comm = ev.filter(pl.col("kind") == "comm")
    per_rank = comm.group_by("rank", "coll_op").len().sort("rank", "coll_op")
    assert per_rank.filter(pl.col("coll_op") == "all_to_all")["len"].to_list() == [5] * 8
    assert per_rank.filter(pl.col("coll_op") == "all_reduce")["len"].to_list() == [3] * 8
    assert comm["stream"].unique().to_list() == [84]
    assert comm["name"].str.starts_with("ncclKernel_").all()
    # Old-format metadata: bytes from the nccl:* annotation's Input Dims x dtype size.
    r0 = comm.filter(pl.col("rank") == 0).sort("ts_ns")
    assert r0.filter(pl.col("coll_op") == "all_reduce")["bytes"].sort().to_list() == [448, 907840, 1576964]
    assert r0.filter(pl.col("coll_op") == "all_reduce")["dtype"].unique().to_list() == ["float"]
    # GPU rows inherit the step through their launch; no compute kernel is left without a step.
    gpu = ev.filter(pl.col("stream").is_not_null() & (pl.col("kind") != "annotation"))
    assert gpu["step"].null_count() == 0 and gpu["step"].unique().to_list() == [10]


def test_new_format_metadata_on_kernels(ingested, traces):
    run = ingested("hta/nccl-metadata-a100")
    comm = run.events().collect().filter(pl.col("kind") == "comm")
    assert Counter(comm["coll_op"].to_list()) == {"all_reduce": 15, "broadcast": 6}
    assert comm["pg"].unique().to_list() == ["0"] and comm["group_size"].unique().to_list() == [2]
    raw = [e for e in raw_events(traces / "hta/nccl-metadata-a100/nccl_data.json.gz")
           if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})]
    size = {"Float": 4, "Long": 8}
    want = sorted(e["args"]["In msg nelems"] * size[e["args"]["dtype"]] for e in raw)
    assert sorted(comm["bytes"].to_list()) == want
    assert run.steps == [4, 5, 6]
    assert run.manifest["process_groups"][0]["pg_name"] == "0"


def test_a100_16rank_three_nccl_streams(ingested):
    comm = ingested("hta/a100-16rank-rank0").events().collect().filter(pl.col("kind") == "comm")
    assert comm.height == 80
    assert comm["stream"].n_unique() == 3
    ops = dict(comm.group_by("coll_op").len().iter_rows())
    # 5 SendRecv kernels have no launch in the trace: their name alone does not say all_to_all.
    assert ops == {"all_to_all": 45, "reduce_scatter": 10, "all_gather": 10, "all_reduce": 10, "sendrecv": 5}


def test_comm_kernel_without_nccl_in_its_name(ingested):
    """B200: all-reduce runs as multimem_all_reduce_kernel, linked by External id to symm_mem::*."""
    comm = ingested("tracelens/b200-vllm-rank0").events().collect().filter(pl.col("kind") == "comm")
    multimem = comm.filter(pl.col("name").str.contains("multimem_all_reduce_kernel"))
    assert multimem.height == 73 and set(multimem["coll_op"]) == {"all_reduce"}
    assert multimem["bytes"].min() > 0 and multimem["dtype"].unique().to_list() == ["c10::BFloat16"]
    gather = comm.filter(pl.col("coll_op") == "all_gather")
    assert gather.height == 1 and gather["pg"].to_list() == ["3"] and gather["bytes"].to_list() == [25136 * 8 * 2]


def test_rccl_generic_kernels(ingested):
    run = ingested("tracelens/mi300-rocm-resnet-rank0")
    ev = run.events().collect()
    comm = ev.filter(pl.col("kind") == "comm")
    assert comm.height == 17 and comm["name"].str.starts_with("ncclDevKernel_Generic").all()
    assert comm["device"].unique().to_list() == [2]
    known = comm.filter(pl.col("coll_op") != "unknown")
    assert Counter(known["coll_op"].to_list()) == {"all_reduce": 6, "broadcast": 6}
    # ProfilerStep#N appears twice (CPU and GPU track): steps come from the CPU copy only.
    assert run.steps == [15, 16, 17]


def test_rocm_mi250_without_distributed_info_takes_no_silent_rank(traces, tmp_path):
    import ddprof
    from ddprof.errors import BadInputError

    name = "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    alone = ddprof.ingest([traces / "hta/amd-mi250"], tmp_path / "a")  # the only trace: rank 0, said
    assert alone.ranks == [0]
    assert any("no distributedInfo.rank in the trace" in w and f"--rank {name}=N" in w
               for w in alone.manifest["per_rank"]["0"]["warnings"])
    pair = tmp_path / "pair"  # two traces with no rank: which is which cannot be guessed
    pair.mkdir()
    for i in (1, 2):
        (pair / f"copy{'ab'[i - 1]}_{name}").write_bytes((traces / "hta/amd-mi250" / name).read_bytes())
    with pytest.raises(BadInputError, match=f"--rank copya_{name}=N"):
        ddprof.ingest([pair], tmp_path / "p")
    run = ddprof.ingest([traces / "hta/amd-mi250"], tmp_path / "b", rank_map={name: 3})
    assert run.ranks == [3] and run.device == "gpu"
    raw = raw_events(traces / "hta/amd-mi250" / name)
    ev = run.events().collect()
    assert ev.height == sum(1 for e in raw if e.get("ph") == "X")
    assert ev.filter(pl.col("kind") == "compute").height == 14 and ev.filter(pl.col("kind") == "comm").height == 0


def test_sendrecv_two_ranks_of_128(ingested):
    run = ingested("hta/sendrecv-2-of-128")
    assert run.ranks == [0, 1] and run.world_size == 128
    assert any("2 of 128 ranks present" in w for w in run.manifest["warnings"])


@pytest.mark.slow
def test_large_trace_every_allreduce_is_comm(ingested):
    ev = ingested("hta/v100-2rank-rank1-large").events().collect()
    comm = ev.filter(pl.col("kind") == "comm")
    assert comm.height == 2020 and set(comm["coll_op"]) == {"all_reduce"}
    assert ev["rank"].unique().to_list() == [1]


def test_parallel_ingest_gives_the_same_store(traces, tmp_path, monkeypatch, ingested):
    """Ranks parse in worker processes; the store is the same as the one parsed in-process."""
    import ddprof
    from ddprof.ingestion import pipeline

    monkeypatch.setattr(pipeline, "PARALLEL_MIN_BYTES", 0)
    run = ddprof.ingest([DLRM], tmp_path / "par", jobs=2)
    serial = ingested("dlrm-8xV100-nccl")
    got = run.events().collect().sort("rank", "ts_ns", "name", "dur_ns")
    want = serial.events().collect().sort("rank", "ts_ns", "name", "dur_ns")
    assert got.equals(want)
