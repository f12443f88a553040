"""Generated runs whose hosts' clocks disagree: each rank's host named in a collector sidecar, each host's
clock shifted by a known offset (:func:`hosts_run`); used by the clock and export tests."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import polars as pl

import ddprof
from ddprof.store.rundir import Run
from ddprof.synth import US, CollectiveBench, DataParallel, to_kineto, write_meta, write_traces

HOSTS8 = {r: "node-a" if r < 4 else "node-b" for r in range(8)}

Offset = Callable[[str, int], int]  # (host, ts_ns) -> ns to add (whole µs)


def hosts_run(sc: DataParallel | CollectiveBench, folder: Path, hosts: dict[int, str] | None, offset: Offset | None = None,
              end_noise_us: int = 0, sidecars: bool = True) -> Run:
    """``sc`` as traces whose ranks' clocks read ``ts + offset(host, ts)``, with a collector sidecar naming
    each rank's host (unless ``sidecars`` is false), ingested into ``folder/run``. ``end_noise_us``: each
    comm kernel ends up to that many µs later (seeded), so ranks do not finish at exactly one instant."""
    frame = sc.events()
    rng = random.Random(7)
    if end_noise_us:
        noise = [rng.randint(0, end_noise_us) * US if k == "comm" else 0 for k in frame["kind"].to_list()]
        frame = frame.with_columns(pl.col("dur_ns") + pl.Series(noise, dtype=pl.Int64))
    if offset is not None and hosts is not None:
        shifted = [ts + offset(hosts.get(r, "?"), ts) for r, ts in zip(frame["rank"].to_list(), frame["ts_ns"].to_list())]
        frame = frame.with_columns(pl.Series("ts_ns", shifted, dtype=pl.Int64))
    per_rank = to_kineto(frame, sc.ranks)
    traces = write_traces(per_rank, folder / "traces")
    for rank in per_rank:
        if sidecars and hosts is not None and rank in hosts:
            write_meta(traces, rank, hosts[rank])
    return ddprof.ingest([traces], folder / "run")


def constant(offsets: dict[str, int]) -> Offset:
    return lambda host, ts: offsets.get(host, 0)
