"""Helpers for tests that run real multi-process gloo jobs on 127.0.0.1.

Ranks are separate processes started the way torchrun starts them (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), running the test jobs of ``tests/support/jobs.py``
(see :func:`jobs.spawn_local`). Only :func:`run_example` needs torch.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl


@dataclass
class JobResult:
    returncodes: dict[int, int]
    facts: dict[int, dict[str, Any]]
    logs: dict[int, str]
    seconds: float


def run_example(job: str, run_dir: Path, world_size: int, *args: str, timeout: float = 120.0,
                expect_rc: dict[int, int] | None = None) -> JobResult:
    """Run ``python tests/support/jobs.py JOB -o RUN_DIR ARGS`` on ``world_size`` local ranks.

    Fails the test (with every rank's output) when a rank's exit status differs from ``expect_rc``
    (default: 0 for all) or the job outlives ``timeout``.
    """
    from tests.support.jobs import spawn_local  # needs torch

    expect = {r: 0 for r in range(world_size)} | (expect_rc or {})
    facts_dir = run_dir.parent / f"{run_dir.name}-facts"
    logs_dir = run_dir.parent / f"{run_dir.name}-logs"
    start = time.monotonic()
    argv = [job, "-o", str(run_dir), "--facts", str(facts_dir / "{rank}.json"), *args]
    codes = spawn_local(argv, world_size, logs_dir, timeout=timeout)
    seconds = time.monotonic() - start
    logs = {r: (logs_dir / f"rank-{r}.log").read_text(errors="replace") for r in range(world_size)}
    if codes != expect:
        dump = "\n".join(f"--- rank {r} (exit {codes[r]}) ---\n{logs[r][-3000:]}" for r in codes)
        raise AssertionError(f"{job} job: exit codes {codes}, expected {expect}\n{dump}")
    facts = {}
    for rank in range(world_size):
        path = facts_dir / f"{rank}.json"
        if path.exists():
            facts[rank] = json.loads(path.read_text())
    return JobResult(codes, facts, logs, seconds)


def open_complete_run(run_dir: Path, world_size: int, steps: list[int]) -> Any:
    """The captured run dir, checked whole: every rank ingested and complete, the expected steps."""
    import ddprof

    run = ddprof.open_run(run_dir)
    assert run.ranks == list(range(world_size))
    assert run.world_size == world_size
    assert run.steps == steps
    assert run.manifest["collector"]["ranks_complete"] == list(range(world_size))
    return run


def read_meta(run_dir: Path, rank: int) -> dict[str, Any]:
    return json.loads((run_dir / "raw" / f"rank-{rank:05d}" / f"rank-{rank:05d}.meta.json").read_text())


def read_flight_recorder(path: Path) -> dict[str, Any]:
    """A Flight Recorder dump as plain objects, read with the product's import-nothing unpickler."""
    from ddprof.readers.flightrec.unpickle import read_dump_object

    dump = read_dump_object(path)
    assert isinstance(dump, dict), f"{path}: not a Flight Recorder dump"
    return dump


def ddp_buckets(param_bytes: list[int], cap_bytes: int) -> list[int]:
    """DDP's gradient buckets after the first iteration: parameters in reverse (gradient-ready) order,
    a bucket closes once it reaches ``cap_bytes``. [4, 8, 16, 32] with cap 40 -> [48, 12]."""
    buckets, size = [], 0
    for b in reversed(param_bytes):
        size += b
        if size >= cap_bytes:
            buckets.append(size)
            size = 0
    if size:
        buckets.append(size)
    return buckets


def gpipe_p2p(rank: int, stages: int, micro: int, batch: int, widths: tuple[int, ...]) -> list[tuple[str, int, int]]:
    """GPipe on one stage, as (op, bytes, peer): M x (recv input, send output), then M x (recv output
    grad, send input grad); float32 activations of ``batch x widths[stage]``. Stage 1 of 4 with widths
    (64, 96, 128, ...) and batch 8: recv 3072 bytes from 0, send 4096 to 2, ... then recv 4096 from 2,
    send 3072 to 0, ..."""
    first, last = rank == 0, rank == stages - 1
    act_in, act_out = batch * widths[rank] * 4, batch * widths[rank + 1] * 4
    fwd = [("recv", act_in, rank - 1)] * (not first) + [("send", act_out, rank + 1)] * (not last)
    bwd = [("recv", act_out, rank + 1)] * (not last) + [("send", act_in, rank - 1)] * (not first)
    return fwd * micro + bwd * micro


def comm_events(events: pl.DataFrame, op: str) -> pl.DataFrame:
    """The ``kind == comm`` rows of one collective op (gloo annotations on the gloo threads), in time order."""
    return events.filter((pl.col("kind") == "comm") & (pl.col("coll_op") == op)).sort("rank", "ts_ns")


def cpu_collective_ops(events: pl.DataFrame, name: str) -> pl.DataFrame:
    """The CPU ops that launch a collective (``c10d::allreduce_``...) on the main thread, in time order."""
    return events.filter((pl.col("kind") == "cpu_op") & (pl.col("name") == name)).sort("rank", "ts_ns")
