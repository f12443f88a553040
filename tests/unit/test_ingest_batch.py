"""Small traces are ingested several at once (one frame for all of them, a trace key in every link): each
trace must come out exactly as it does alone, its part byte for byte, and its bad input must fail it alone."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ddprof.ingestion import job, pipeline
from ddprof.ingestion.discover import discover
from ddprof.readers.kineto import reader as kineto
from ddprof.store import timeline_summary as ts
from ddprof.synth import Spec, generate
from tests.support.paths import DLRM, SAMPLES

_IDENTITY = ("dev", "ino", "ctime_ns", "mtime_ns")


def _results(results: list[job.FileResult]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.to_dict().items() if k not in _IDENTITY} for r in results]


def _store(out: Path) -> dict[str, Any]:
    """Every file of a store: a part's bytes; a timeline summary's content (its header records the part's
    modification time, which differs between two stores)."""
    files: dict[str, Any] = {}
    for p in sorted(out.rglob("*")):
        if p.suffix == ".parquet":
            files[str(p.relative_to(out))] = p.read_bytes()
        elif p.suffix == ts.SUFFIX:
            s = ts.read_summary(p.with_name(p.name.removesuffix(ts.SUFFIX) + ".parquet"))
            assert s is not None, p
            files[str(p.relative_to(out))] = (s.k, s.first_cell, s.cells.tobytes(), s.coarse_first, s.coarse.tobytes(),
                                              s.streams, s.tids, {k: v.tobytes() for k, v in s.steps.items()},
                                              s.long.rows())
        elif p.is_file():
            files[str(p.relative_to(out))] = "unexpected"
    return files


def assert_batch_is_alone(files: list[Path], tmp_path: Path, rank_map: dict[str, int] | None = None) -> list[job.FileResult]:
    alone = [job.ingest_file(str(f), str(tmp_path / "alone"), rank_map) for f in files]
    batch = job.ingest_files([str(f) for f in files], str(tmp_path / "batch"), rank_map)
    assert _results(batch) == _results(alone)
    assert _store(tmp_path / "batch") == _store(tmp_path / "alone")
    return batch


def test_every_real_trace_in_one_batch_comes_out_as_alone(traces, tmp_path):
    """The real traces of every generation and library (CUDA, ROCm, CPU-only gloo, old and new PyTorch,
    send/recv pipelines, a 54 MB trace, traces that fail for want of a rank) as one batch; the DLRM traces
    twice (a copy under another name), as identical files of two jobs can be."""
    shutil.copytree(DLRM, tmp_path / "dlrm-copy")
    files = discover([traces, SAMPLES, tmp_path / "dlrm-copy"])
    results = assert_batch_is_alone(files, tmp_path)
    ok = [r for r in results if r.status == "ok"]
    assert len(ok) >= 25 and len({r.sha1 for r in ok}) >= 20
    assert any(r.status == "failed" and "rank" in (r.error or "") for r in results)


@pytest.mark.parametrize("spec", [
    Spec(ranks=8, steps=2, kernels=10, tp=2, pp=2, micro_batches=4),
    Spec(ranks=8, steps=2, kernels=12, pp=4, micro_batches=3, schedule="gpipe"),
    Spec(ranks=16, steps=2, kernels=12, gpus_per_host=4, slow={3: 1.5}, clock_offset_us={1: 300.0}),
], ids=["tp2-pp2", "gpipe-pp4", "dp16-slow-skewed"])
def test_generated_runs_in_one_batch_come_out_as_alone(tmp_path, spec):
    generate(spec, tmp_path / "run", with_truth=False)
    files = discover([tmp_path / "run" / "traces"])
    results = assert_batch_is_alone(files, tmp_path)
    assert all(r.status == "ok" for r in results) and len(results) == spec.ranks
    assert sum(r.comm_kernels for r in results) > 0


def _doc(rank: int | None, events: list[dict], **extra: Any) -> dict:
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events, **extra}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 8,
                                  "pg_config": [{"pg_name": "0", "pg_size": 8, "ranks": list(range(8))}]}
    return doc


def _ops(rank: int, n: int = 4) -> list[dict]:
    """A step with a launch, a kernel, an all-reduce marker and its kernel (linked by correlation and
    External id: the ids are the same in every trace, as in real runs)."""
    t = 1000.0 * (rank + 1)
    return [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": t, "dur": 500},
        *({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": t + 10 * i, "dur": 5,
           "args": {"External id": 10 + i}} for i in range(n)),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 50, "dur": 4,
         "args": {"correlation": 7, "External id": 11}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 60, "dur": 40,
         "args": {"correlation": 7, "External id": 11, "stream": 7, "device": 0}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": t + 100, "dur": 20,
         "args": {"External id": 30, "Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024 * (rank + 1),
                  "Out msg nelems": 1024 * (rank + 1), "Group size": 8, "Process Group Name": "0"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 105, "dur": 4,
         "args": {"correlation": 9, "External id": 30}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "pid": 0,
         "tid": 13, "ts": t + 130, "dur": 80, "args": {"correlation": 9, "External id": 30, "stream": 13, "device": 0}},
    ]


def _write(path: Path, doc: dict | bytes, gz: bool = False) -> Path:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_bad_traces_in_a_batch_fail_alone_with_the_error_they_get_alone(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    ops = _ops(0)
    files = [
        _write(src / "r0.json", _doc(0, _ops(0))),
        _write(src / "r1-not-json.json", b"this is not json"),
        _write(src / "r2-empty.json", _doc(2, [])),
        _write(src / "r3.json.gz", _doc(3, _ops(3)), gz=True),
        _write(src / "r4-no-stream.json", _doc(4, [*_ops(4), {"ph": "X", "cat": "kernel", "name": "lost", "pid": 0,
                                                               "ts": 9000.0, "dur": 3}])),
        _write(src / "r5-duplicates.json", _doc(5, _ops(5) + _ops(5)[1:3])),
        _write(src / "r6-rank-too-big.json", _doc(9, _ops(6))),
        _write(src / "r7-unknown-category.json", _doc(7, [*_ops(7), {**ops[1], "cat": "mystery", "ts": 8000.0}])),
        _write(src / "r8-same-as-r0.json", _doc(0, _ops(0))),
    ]
    results = {Path(r.path).name: r for r in assert_batch_is_alone(files, tmp_path)}
    assert {n for n, r in results.items() if r.status == "ok"} == {
        "r0.json", "r3.json.gz", "r5-duplicates.json", "r7-unknown-category.json", "r8-same-as-r0.json"}
    assert "not valid JSON" in (results["r1-not-json.json"].error or "")
    assert "no complete events" in (results["r2-empty.json"].error or "")
    assert "GPU event without a stream" in (results["r4-no-stream.json"].error or "")
    assert "r4-no-stream.json (rank 4)" in (results["r4-no-stream.json"].error or "")
    assert "not below world_size" in (results["r6-rank-too-big.json"].error or "")
    assert any("2 exact duplicate" in w for w in results["r5-duplicates.json"].warnings)
    assert any("unknown category 'mystery'" in w for w in results["r7-unknown-category.json"].warnings)
    r0 = results["r0.json"]
    assert r0.comm_kernels == 1 and r0.steps == [3] and r0.kernels == 2


def test_a_bug_met_building_a_batch_is_pinned_on_its_trace(tmp_path, monkeypatch):
    """The batch is built again trace by trace: the trace that trips the bug fails as an internal error
    naming it; the others are stored as they are alone."""
    src = tmp_path / "src"
    src.mkdir()
    files = [_write(src / f"r{r}.json", _doc(r, _ops(r))) for r in range(4)]
    real = kineto.build_events

    def broken(decs, ranks, *rest):
        if 2 in ranks:
            raise ZeroDivisionError("boom")
        return real(decs, ranks, *rest)

    monkeypatch.setattr(kineto, "build_events", broken)
    results = job.ingest_files([str(f) for f in files], str(tmp_path / "run"), None)
    assert [r.status for r in results] == ["ok", "ok", "failed", "ok"]
    assert results[2].internal and "ZeroDivisionError" in (results[2].error or "") and "r2.json" in results[2].error
    monkeypatch.setattr(kineto, "build_events", real)
    alone = [job.ingest_file(str(f), str(tmp_path / "alone"), None) for f in files]
    assert _results([results[i] for i in (0, 1, 3)]) == _results([alone[i] for i in (0, 1, 3)])


def test_a_bug_met_after_building_a_batch_still_stores_every_trace(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    files = [_write(src / f"r{r}.json", _doc(r, _ops(r))) for r in range(3)]
    real = job._facts

    def broken(df, traces):
        if traces > 1:
            raise KeyError("boom")
        return real(df, traces)

    monkeypatch.setattr(job, "_facts", broken)
    results = job.ingest_files([str(f) for f in files], str(tmp_path / "run"), None)
    assert [r.status for r in results] == ["ok"] * 3 and all((tmp_path / "run" / str(r.part)).is_file() for r in results)


def test_outputs_of_a_batch_are_readable_by_others_like_plain_files(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    files = [_write(src / f"r{r}.json", _doc(r, _ops(r))) for r in range(3)]
    old = os.umask(0o027)
    try:
        job.ingest_files([str(f) for f in files], str(tmp_path / "run"), None)
    finally:
        os.umask(old)
    written = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert len(written) == 6 and all(p.stat().st_mode & 0o777 == 0o640 for p in written)
    assert not [p for p in (tmp_path / "run").rglob(".*")]


def test_a_timeline_summary_cut_or_altered_is_refused(tmp_path):
    """Summaries are written without fsync (a cache): one a crash cut short or left with other bytes is
    refused by its checksum, and the dashboard summarises the part again."""
    src = tmp_path / "src"
    src.mkdir()
    res = job.ingest_file(str(_write(src / "r0.json", _doc(0, _ops(0)))), str(tmp_path / "run"), None)
    part = tmp_path / "run" / str(res.part)
    path = ts.summary_path(part)
    good = path.read_bytes()
    assert ts.read_summary(part) is not None
    head = len(ts.MAGIC) + 4 + int.from_bytes(good[len(ts.MAGIC):len(ts.MAGIC) + 4], "little")
    st = part.stat()
    for bad in (good[:head + 3], good[:head] + bytes([good[head] ^ 0xFF]) + good[head + 1:], good[:-5]):
        path.write_bytes(bad)
        os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert ts.read_summary(part) is None


def _sizes(names_sizes: list[tuple[str, int]], tmp_path: Path) -> tuple[list[Path], dict[Path, int]]:
    files = [tmp_path / n for n, _ in names_sizes]
    return files, {f: s for f, (_, s) in zip(files, names_sizes)}


def test_batches_keep_order_cover_every_trace_once_and_respect_their_caps(tmp_path):
    rng = np.random.default_rng(0)
    sizes = [int(x) for x in rng.integers(1_000, 2 * pipeline.SMALL_TRACE_BYTES, 700)]
    names = [f"r{i:04d}.json" + (".gz" if i % 5 == 0 else "") for i in range(len(sizes))]
    files, by = _sizes(list(zip(names, sizes)), tmp_path)
    for workers in (1, 2, 16):
        units = pipeline._batches(files, by, workers)
        flat = [f for u in units for f in u]
        assert sorted(flat) == sorted(files) and len(flat) == len(set(flat))

        def weight(f: Path) -> int:
            return by[f] * (pipeline.GZIP_RATIO if f.name.endswith(".gz") else 1)

        for u in units:
            if len(u) > 1:
                assert all(weight(f) < pipeline.SMALL_TRACE_BYTES for f in u)
                assert len(u) <= pipeline.BATCH_FILES and sum(map(weight, u)) <= pipeline.BATCH_BYTES
                assert u == sorted(u)  # the traces' own order
            else:
                assert len(u) == 1
    big = [f for f in files if by[f] * (pipeline.GZIP_RATIO if f.name.endswith(".gz") else 1)
           >= pipeline.SMALL_TRACE_BYTES]
    assert all([f] in pipeline._batches(files, by, 2) for f in big)


def test_small_traces_spread_over_every_worker(tmp_path):
    files, by = _sizes([(f"r{i}.json", 40_000) for i in range(10)], tmp_path)
    assert [len(u) for u in pipeline._batches(files, by, 1)] == [10]
    assert [len(u) for u in pipeline._batches(files, by, 4)] == [3, 3, 3, 1]
    files, by = _sizes([(f"r{i}.json", 40_000) for i in range(3)], tmp_path)
    assert [len(u) for u in pipeline._batches(files, by, 8)] == [1, 1, 1]
    files, by = _sizes([(f"r{i}.json", 40_000) for i in range(200)], tmp_path)
    assert [len(u) for u in pipeline._batches(files, by, 1)] == [50, 50, 50, 50]  # 64 at most, evened out


def test_a_trace_alone_is_not_held_decoded_while_its_part_is_written(tmp_path, monkeypatch):
    """Memory: a large trace is a unit of its own, and its decoded frame (as large as its events) must be
    gone when its part is encoded."""
    import gc
    import weakref

    src = tmp_path / "src"
    src.mkdir()
    alive: list[weakref.ref] = []
    real_decode, real_write = kineto.decode, job._write_parquet

    def decode(path):
        dec = real_decode(path)
        alive.append(weakref.ref(dec))
        return dec

    def write(df, target):
        gc.collect()
        assert [r for r in alive if r() is not None] == []
        return real_write(df, target)

    monkeypatch.setattr(kineto, "decode", decode)
    monkeypatch.setattr(job, "_write_parquet", write)
    res = job.ingest_file(str(_write(src / "r0.json", _doc(0, _ops(0)))), str(tmp_path / "run"), None)
    assert res.status == "ok" and len(alive) == 1


def test_the_parts_of_a_batch_are_encoded_by_one_write(tmp_path, monkeypatch):
    """A batch's parts come from one partitioned write into memory (its fixed cost paid once), the same bytes
    as each trace's alone; a Polars whose writer could not would fall back to a write per trace, unseen but
    for the time."""
    generate(Spec(ranks=4, steps=2, kernels=12), tmp_path / "run", with_truth=False)
    files = discover([tmp_path / "run" / "traces"])
    real, alone = job._encode, []
    monkeypatch.setattr(job, "_encode", lambda df: alone.append(df.height) or real(df))
    assert_batch_is_alone(files, tmp_path)
    assert len(alone) == len(files)  # the traces ingested alone, one each; the batch, none
