"""Where the host was while its GPU sat idle (analyses/idle_host.py): the runtime call classes
(ddprof/vocabulary/runtime_calls.py), generated traces with a known answer, the real ResNet samples against
an independent computation from their JSON, and the idle verdict that names the class.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from ddprof.analyses.report import build_report

import ddprof
from ddprof.vocabulary.runtime_calls import PRIORITY, RUNTIME_CLASSES, runtime_class
from tests.support.paths import TRACES

RESNET = TRACES / "kineto-tb-resnet50"
MS = 1_000.0  # µs


def test_call_classes_by_name():
    cases = {"cudaFree": "memory", "cudaMallocAsync": "memory", "cuMemAlloc_v2": "memory", "hipHostMalloc": "other",
             "cudaHostAlloc": "memory", "cudaStreamSynchronize": "sync", "cudaMemcpy": "sync",
             "cuMemcpyDtoH_v2": "sync", "hipMemcpyWithStream": "sync", "cudaMemcpyAsync": "launch",
             "cuMemcpyHtoDAsync_v2": "launch", "cudaLaunchKernel_v7000": "launch", "hipLaunchKernel": "launch",
             "cudaGraphLaunch": "launch", "cudaEventRecord": "launch", "cudaEventCreateWithFlags": "setup",
             "cuModuleLoadData": "setup", "cudaGraphInstantiate": "setup", "cudaGetLastError": "other"}
    assert {n: runtime_class(n) for n in cases} == cases
    # the same classes in Polars (the analysis classifies there): the first pattern that matches decides
    names = pl.Series("name", list(cases))
    first = pl.Series([next((c for c, p in RUNTIME_CLASSES.items() if m[c]), "other")
                       for m in pl.DataFrame({c: names.str.contains(p) for c, p in RUNTIME_CLASSES.items()}).iter_rows(named=True)])
    assert first.to_list() == list(cases.values())
    assert set(PRIORITY) == {*RUNTIME_CLASSES, "other"}


def _trace(calls: list[tuple[str, float, float, int]], kernels: list[tuple[float, float, float]],
           t0: float = 1_000_000.0, rank: int = 0, world: int = 1) -> dict[str, Any]:
    """One GPU rank: ``kernels`` (start, end, launch start) in ms from ``t0`` µs on stream 7, each launched by a
    10 µs cudaLaunchKernel at its launch time; ``calls`` (name, start, end, thread) in ms besides."""
    ev: list[dict[str, Any]] = []
    for i, (s, e, launch) in enumerate(kernels):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": t0 + launch * MS, "dur": 10.0, "args": {"correlation": i + 1}})
        ev.append({"ph": "X", "cat": "kernel", "name": f"gemm_{i}", "pid": 0, "tid": 7, "ts": t0 + s * MS,
                   "dur": (e - s) * MS, "args": {"stream": 7, "device": 0, "correlation": i + 1}})
    for name, s, e, tid in calls:
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": t0 + s * MS,
                   "dur": (e - s) * MS, "args": {}})
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": world, "backend": "nccl"},
            "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}], "traceEvents": ev}


def _report(tmp_path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "rank0.pt.trace.json").write_text(json.dumps(doc))
    return build_report(ddprof.ingest([folder], tmp_path / "run"))


def test_the_host_inside_cudafree_while_the_gpu_waits(tmp_path):
    """Truth (the module's example): kernels [0, 10) and [30, 40) ms, the second launched at 28 ms; the host in
    cudaFree over [8, 25) ms. Idle 20 ms: memory 15 ms (10 to 25), launch 10 µs (the launch at 28 ms), no call
    the rest. The gap is host wait, and the verdict says where the host was."""
    rep = _report(tmp_path, _trace([("cudaFree", 8, 25, 1)], [(0, 10, 0), (30, 40, 28)]))
    (row,) = rep["idle_host"]
    assert row["idle_us"] == pytest.approx(20 * MS)
    assert row["memory_us"] == pytest.approx(15 * MS) and row["launch_us"] == pytest.approx(10.0)
    assert row["no_call_us"] == pytest.approx(20 * MS - 15 * MS - 10.0)
    assert row["sync_us"] == row["setup_us"] == row["other_us"] == 0
    assert row["calls"] == "cudaFree 15 ms"
    (b,) = rep["breakdown"]
    assert b["idle_us"] == pytest.approx(row["idle_us"])
    idle = next(v for v in rep["verdicts"] if v.startswith("the GPUs are idle"))
    assert idle == ("the GPUs are idle 50 % of the traced time; 100 % of the gaps are host wait, and through 75 % of "
                    "the idle time the host was allocating and freeing device memory (cudaFree 15 ms): the caching "
                    "allocator gives memory back and takes it again, and cudaFree waits for the device "
                    "(torch.cuda.empty_cache(), fragmentation, shapes that keep changing; a single cudaFree of seconds at the "
                    "start is CUDA creating its context)")


def test_a_moment_counts_once_for_the_first_class(tmp_path):
    """Two threads: a cudaStreamSynchronize [12, 20) ms on thread 2 under an cudaEventCreateWithFlags [10, 16)
    ms on thread 1; idle [10, 30). Sync first (PRIORITY): sync 8 ms, setup 2 ms (10 to 12), and the classes
    with no call add up to the idle time exactly."""
    rep = _report(tmp_path, _trace([("cudaEventCreateWithFlags", 10, 16, 1), ("cudaStreamSynchronize", 12, 20, 2)],
                                   [(0, 10, 0), (30, 40, 29)]))
    (row,) = rep["idle_host"]
    assert row["sync_us"] == pytest.approx(8 * MS) and row["setup_us"] == pytest.approx(2 * MS)
    parts = sum(row[f"{c}_us"] for c in PRIORITY) + row["no_call_us"]
    assert parts == pytest.approx(row["idle_us"]) and row["calls"] == "cudaStreamSynchronize 8 ms"
    idle = next(v for v in rep["verdicts"] if v.startswith("the GPUs are idle"))
    assert ("through 40 % of the idle time the host was blocked in calls that wait for the device "
            "(cudaStreamSynchronize 8 ms): a synchronisation in the step") in idle


def test_ranks_whose_clocks_lie_decades_apart(tmp_path):
    """Three ranks, the same cudaFree in their gap, their clocks at 1 s, ~54 years and ~108 years since the
    epoch: too far apart to share one time axis (ranks × span past 2**62 ns), so each is measured alone, with the
    same answer as the first test's."""
    folder = tmp_path / "traces"
    folder.mkdir()
    for r, t0 in enumerate((1e6, 1.7e15, 3.4e15)):
        doc = _trace([("cudaFree", 8, 25, 1)], [(0, 10, 0), (30, 40, 28)], t0=t0, rank=r, world=3)
        (folder / f"rank{r}.pt.trace.json").write_text(json.dumps(doc))
    rows = build_report(ddprof.ingest([folder], tmp_path / "run"))["idle_host"]
    assert [r["rank"] for r in rows] == [0, 1, 2]
    for row in rows:
        assert row["idle_us"] == pytest.approx(20 * MS) and row["memory_us"] == pytest.approx(15 * MS)
        assert row["calls"] == "cudaFree 15 ms"


def test_long_launches_load_modules_and_long_async_copies_wait(tmp_path):
    """A 4 ms cudaLaunchKernel while the GPU is idle loads its kernel's module (setup); a 6 ms cudaMemcpyAsync
    waited (sync); a 10 µs launch enqueues (launch)."""
    doc = _trace([], [(0, 10, 0), (30, 40, 11), (50, 60, 40.5)])
    for e in doc["traceEvents"]:
        if e["name"] == "cudaLaunchKernel" and e["args"]["correlation"] == 2:
            e["dur"] = 4 * MS  # [11, 15) ms
    doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1,
                               "ts": 1_000_000.0 + 42 * MS, "dur": 6 * MS, "args": {}})
    (row,) = _report(tmp_path, doc)["idle_host"]
    assert row["setup_us"] == pytest.approx(4 * MS) and row["sync_us"] == pytest.approx(6 * MS)
    assert row["launch_us"] == pytest.approx(10.0)  # the launch at 40.5 ms, inside the idle [40, 50)


def _oracle(doc: dict[str, Any]) -> dict[str, float]:
    """The idle time by class straight from a one-rank trace's JSON: the gaps of the device rows' union, and
    for each moment of them the first class (PRIORITY) of the runtime calls around it, long launches
    reclassified; a plain sweep over the sorted boundaries."""
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    dev = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("Kernel", "Memcpy", "Memset", "kernel",
                                                                                  "gpu_memcpy", "gpu_memset"))
    merged: list[list[float]] = []
    for s, e in dev:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    gaps = [(a[1], b[0]) for a, b in zip(merged, merged[1:]) if b[0] > a[1]]
    calls = []
    for e in ev:
        if e.get("cat") not in ("Runtime", "cuda_runtime", "cuda_driver"):
            continue
        cls = runtime_class(e["name"])
        if cls == "launch" and e["dur"] >= 1_000:
            cls = "setup" if "LaunchKernel" in e["name"] else "sync" if "Async" in e["name"] else cls
        calls.append((e["ts"], e["ts"] + e["dur"], cls))
    points = sorted({t for g in gaps for t in g} | {t for s, e, _ in calls for t in (s, e)})
    out = dict.fromkeys([*PRIORITY, "no_call"], 0.0)
    import bisect
    starts = [g[0] for g in gaps]
    for a, b in zip(points, points[1:]):
        i = bisect.bisect_right(starts, a) - 1
        if i < 0 or not gaps[i][0] <= a < gaps[i][1]:
            continue
        inside = {c for s, e, c in calls if s <= a and e >= b}
        out[next((c for c in PRIORITY if c in inside), "no_call")] += b - a
    return out


@pytest.mark.parametrize("name", ["num-workers-0", "num-workers-4"])
def test_the_real_samples_against_their_json(name, tmp_path):
    """The PyTorch profiler's ResNet-50 samples: every class as the oracle computes it from the JSON (µs,
    rounded timestamps: within 0.01 %); the idle time equal to the breakdown's. The idle verdict keeps naming
    the loader (num_workers=0) or the launch rate (num_workers=4): no class reaches 30 % of the idle time."""
    (src,) = (RESNET / name).glob("*.json.gz")
    with gzip.open(src) as fh:
        doc = json.load(fh)
    want = _oracle(doc)
    rep = build_report(ddprof.ingest([RESNET / name], tmp_path / "run"))
    (row,) = rep["idle_host"]
    (b,) = rep["breakdown"]
    assert row["idle_us"] == pytest.approx(b["idle_us"], rel=1e-9)
    assert row["idle_us"] == pytest.approx(sum(want.values()), rel=1e-4)
    for c in (*PRIORITY, "no_call"):
        assert row[f"{c}_us"] == pytest.approx(want[c], rel=1e-3, abs=1.0), c
    idle = next(v for v in rep["verdicts"] if v.startswith("the GPUs are idle"))
    assert "of the idle time the host was" not in idle
    assert ("while the host was loading data" in idle) == (name == "num-workers-0")
