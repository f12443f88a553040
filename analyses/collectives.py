"""Collective instances matched across ranks, with arrival skew and nccl-tests bandwidth.

Which rows: on a GPU rank its communication kernels (``kind == "comm"`` with a stream); on a CPU-only
rank its ``gloo:*`` rows (``kind == "comm"``, no stream): they exist in every gloo trace, carry the
message size, and span the transfer (plus the wait for late peers), unlike ``c10d::*`` ops, which only
enqueue the work.

Matching: the k-th collective of one group on each rank is the same instance. The group is the
process group name (``pg``); where a trace does not name it, the GPU stream (``"stream 84"``) or
``"default"`` on CPU. ``index`` = ``seq`` where every row of the group has one, else the order of
starts. Point-to-point ops with a known ``peer`` are matched per (group, sender, receiver) instead:
NCCL orders p2p per peer pair. Disagreements never raise: see :func:`collective_warnings`.

Clocks: arrivals compare start times on the traces' clocks; the report first takes each host's clock
offset off where the run's collectives establish one (:mod:`analyses.clocks`). Where a collective's
kernels still cannot all have run together (a rank's start after another's end by more than 2 µs), the
clocks disagree, and arrivals are aligned on the latest end instead (``arrival = latest end − duration``; ``clock_aligned``
false). Not for send/recv: a buffered send may finish before its receive starts.
"""

from __future__ import annotations

from typing import Any

import msgspec
import polars as pl
from ddprof.analyses.frames.memo import Events, Prepared, collect, derived
from ddprof.analyses.frames.sets import gpu_ranks
from ddprof.analyses.sections import Section
from ddprof.analyses.summaries import collectives_summary, json_rows

from ddprof.report.display import Column, Table
from ddprof.report.schema import BandwidthRow, CollectiveRow, Collectives, rows
from ddprof.vocabulary.collective_ops import P2P, busbw_factor
from ddprof.vocabulary.units import NS_PER_US, fmt_bytes, fmt_num, fmt_plain, fmt_ranks, fmt_us

_CLOCK_SLACK_NS = 2_000


@derived
def comm_rows(p: Prepared) -> pl.DataFrame:
    """The rows that stand for collectives on each rank, with their group key, p2p pair and index."""
    events = p.events
    gpu = gpu_ranks(p).lazy().with_columns(pl.lit(True).alias("on_gpu"))
    rows = (
        events.filter(pl.col("kind") == "comm")
        .join(gpu, on="rank", how="left")
        .filter(pl.col("on_gpu").is_not_null() == pl.col("stream").is_not_null())
        .with_columns(
            pl.coalesce(
                "pg",
                pl.when(pl.col("stream").is_not_null()).then(pl.format("stream {}", pl.col("stream"))),
                pl.lit("default"),
            ).alias("group"),
            pl.col("coll_op").fill_null("unknown").alias("op"),
        )
    )
    p2p = pl.col("op").is_in(P2P) & pl.col("peer").is_not_null()
    rows = rows.with_columns(
        pl.when(p2p).then(pl.when(pl.col("op") == "send").then(pl.col("rank")).otherwise(pl.col("peer")))
        .alias("src"),
        pl.when(p2p).then(pl.when(pl.col("op") == "send").then(pl.col("peer")).otherwise(pl.col("rank")))
        .alias("dst"),
    )
    key = ["rank", "group", "src", "dst"]
    return collect(rows.sort("ts_ns").with_columns(
        pl.when(pl.col("seq").is_not_null().all().over(key)).then(pl.col("seq"))
        .otherwise(pl.int_range(pl.len()).over(key)).alias("index"),
        pl.when(pl.col("op").is_in(P2P)).then(pl.lit("sendrecv")).otherwise(pl.col("op")).alias("match_op"),
    ))


@derived
def arrivals(p: Prepared) -> pl.DataFrame:
    """One row per (instance, rank): arrival_ns, end_ns, dur_ns, wait_ns = latest arrival − arrival.

    Example: all-reduce #0 entered by rank 0 at 10 ms and rank 1 at 14 ms, both ending at 15 ms ->
    rank 0 waited 4 ms, rank 1 0 ms.
    """
    inst = ["group", "src", "dst", "index"]
    rows = comm_rows(p).lazy().select(*inst, "rank", "op", "match_op", "ts_ns", "dur_ns", "bytes", "group_size")
    return collect(
        rows.with_columns((pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"))
        .with_columns(
            ((pl.col("match_op") == "sendrecv")
             | ((pl.col("ts_ns").max() - pl.col("end_ns").min()).over(inst) <= _CLOCK_SLACK_NS)).alias("clock_aligned")
        )
        .with_columns(
            pl.when(pl.col("clock_aligned")).then(pl.col("ts_ns"))
            .otherwise(pl.col("end_ns").max().over(inst) - pl.col("dur_ns")).alias("arrival_ns")
        )
        .with_columns((pl.col("arrival_ns").max().over(inst) - pl.col("arrival_ns")).alias("wait_ns"))
        .drop("ts_ns")
        .sort(*inst, "rank", nulls_last=True)
    )


@derived
def collectives(events: Events, world_size: int | None = None) -> pl.DataFrame:
    """One row per collective instance (docs/DESIGN.md §3).

    arrival_skew_us = latest − earliest arrival; duration_us = the shortest duration across ranks (the
    transfer without the wait for late ranks); algbw_gbps = bytes / duration (1 GB/s = 1 B/ns);
    busbw_gbps = algbw · nccl-tests factor for n = the group size (else the world size, else the number of
    ranks that use the group).
    Example: all-reduce of 1 GB over 8 ranks, shortest duration 10 ms -> algbw 100 GB/s,
    busbw 100 · 2 · 7/8 = 175 GB/s.
    """
    arr = arrivals(events).lazy()
    inst = ["group", "src", "dst", "index"]
    members = arr.group_by("group").agg(pl.col("rank").unique().sort().alias("members"))
    # op: the most frequent, the first by name on a tie; counted only where ranks disagree (rare)
    mixed = (
        arr.group_by(inst).agg(pl.col("match_op").min().alias("__lo"), pl.col("match_op").max().alias("__hi"))
        .filter(pl.col("__lo") != pl.col("__hi")).select(inst)
        .join(arr, on=inst, nulls_equal=True)
        .group_by(inst)
        .agg(pl.col("match_op").mode().sort().first().alias("__mode"),
             pl.col("match_op").unique().sort().alias("__seen"))
    )
    return collect(
        arr.sort("rank")
        .with_columns(((pl.col("arrival_ns") - pl.col("arrival_ns").min().over(inst)) / NS_PER_US).alias("arrival_us"))
        .group_by(inst, maintain_order=True)
        .agg(
            pl.col("match_op").first().alias("op"),
            pl.col("match_op").first().alias("ops_seen"),  # a placeholder here: its place among the columns
            pl.col("bytes").max(),
            pl.col("group_size").max(),
            pl.col("rank").alias("ranks_seen"),
            pl.col("arrival_us"),
            (pl.col("arrival_ns").min() / NS_PER_US).alias("start_us"),
            ((pl.col("arrival_ns").max() - pl.col("arrival_ns").min()) / NS_PER_US).alias("arrival_skew_us"),
            (pl.col("dur_ns").min() / NS_PER_US).alias("duration_us"),
            pl.col("rank").filter(pl.col("wait_ns") == 0).alias("__last"),
            pl.col("clock_aligned").all(),
        )
        .join(members, on="group", how="left")
        .join(mixed, on=inst, how="left", nulls_equal=True, maintain_order="left")
        .with_columns(pl.coalesce("__mode", "op").alias("op"),
                      pl.coalesce("__seen", pl.concat_list("ops_seen")).alias("ops_seen"))
        .with_columns(
            pl.when(pl.col("__last").list.len() == 1).then(pl.col("__last").list.first()).alias("last_rank"),
            pl.coalesce("group_size", pl.lit(world_size), pl.col("members").list.len()).cast(pl.Int32).alias("n"),
            pl.when(pl.col("src").is_not_null()).then(pl.concat_list("src", "dst").list.unique())
            .otherwise(pl.col("members")).list.set_difference("ranks_seen").list.sort().alias("missing_ranks"),
        )
        .with_columns(
            pl.when(pl.col("duration_us") > 0).then(pl.col("bytes") / (pl.col("duration_us") * NS_PER_US)).alias("algbw_gbps")
        )
        .with_columns((pl.col("algbw_gbps") * busbw_factor(pl.col("op"), pl.col("n"))).alias("busbw_gbps"))
        .rename({"group": "pg"})
        .drop("__last", "members", "__mode", "__seen")
        .sort("pg", "src", "dst", "index", nulls_last=True)
    )


def bandwidth(coll: pl.DataFrame) -> pl.DataFrame:
    """Per (op, bytes): count, mean duration, algbw = bytes / mean duration and busbw, as nccl-tests
    reports one size. Example: two 1 MB all-reduces of 10 and 30 µs on 2 ranks -> algbw
    1e6 / 20e3 = 50 GB/s, busbw 50 · 2 · 1/2 = 50 GB/s."""
    ok = coll.lazy().filter(pl.col("bytes").is_not_null() & (pl.col("duration_us") > 0))
    return collect(
        ok.group_by("op", "bytes", "n")
        .agg(pl.len().alias("count"), pl.col("duration_us").mean())
        .with_columns((pl.col("bytes") / (pl.col("duration_us") * NS_PER_US)).alias("algbw_gbps"))
        .with_columns((pl.col("algbw_gbps") * busbw_factor(pl.col("op"), pl.col("n"))).alias("busbw_gbps"))
        .sort("op", "bytes", "n")
    )


def collective_warnings(coll: pl.DataFrame) -> list[str]:
    """Plain sentences, one per group and problem: ranks missing from instances, ranks that disagree on
    an instance's op (they issue the group's collectives in different orders), unaligned clocks."""
    missing = pl.col("missing_ranks").list.len() > 0
    mixed = pl.col("ops_seen").list.len() > 1
    per_group = collect(coll.lazy().group_by("pg", maintain_order=True).agg(  # one query, whatever the groups
        missing.sum().alias("missing"),
        pl.col("index").filter(missing).first().alias("missing_index"),
        pl.col("op").filter(missing).first().alias("missing_op"),
        pl.col("missing_ranks").filter(missing).first().alias("missing_ranks"),
        mixed.sum().alias("mixed"),
        pl.col("index").filter(mixed).first().alias("mixed_index"),
        pl.col("ops_seen").filter(mixed).first().alias("mixed_ops"),
        ((pl.col("op") == "sendrecv") & pl.col("src").is_null()).sum().alias("blind"),
        (~pl.col("clock_aligned")).sum().alias("skewed"),
    ))
    out: list[str] = []
    for g in per_group.iter_rows(named=True):
        pg = g["pg"]
        if g["missing"]:
            out.append(f"process group {pg}: {g['missing']} collective(s) not seen on every rank "
                       f"(first: #{g['missing_index']} {g['missing_op']}, missing rank(s) {g['missing_ranks']})")
        if g["mixed"]:
            out.append(f"process group {pg}: ranks disagree on the op of {g['mixed']} collective(s) "
                       f"(first: #{g['mixed_index']}: {', '.join(g['mixed_ops'])}); they may issue this "
                       "group's collectives in different orders, so its matching is unreliable")
        if g["blind"]:
            out.append(f"process group {pg}: {g['blind']} send/recv transfer(s) without a known peer are "
                       "matched by their order in the group only; their skew and bandwidth are unreliable")
        if g["skewed"]:
            out.append(f"process group {pg}: rank clocks disagree on {g['skewed']} collective(s); "
                       "arrivals there are aligned on the collective's end")
    return out


def bandwidth_verdicts(report: dict[str, Any]) -> list[str]:
    """The ``bandwidth`` section's verdicts: per op, the bus bandwidth its largest message reaches, the
    three largest ops' first. Example: "largest all_reduce (64 MiB) reaches 11.2 GB/s bus bandwidth"."""
    best: dict[str, BandwidthRow] = {}
    for row in rows(report["bandwidth"], BandwidthRow):
        if row.busbw_gbps is not None and (row.op not in best or row.bytes >= best[row.op].bytes):
            best[row.op] = row
    top = sorted(best.values(), key=lambda r: -r.bytes)[:3]
    return [f"largest {r.op} ({fmt_bytes(r.bytes)}) reaches {r.busbw_gbps:.3g} GB/s bus bandwidth" for r in top]


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

def _collectives(report: dict[str, Any]) -> Collectives:
    return msgspec.convert(report["collectives"], Collectives)


COLLECTIVES_TABLE = Table(
    "Collectives, largest arrival skew first",
    (Column("pg", "pg"), Column("#", "index"), Column("op", "op"), Column("size", "bytes", fmt_bytes),
     Column("ranks", "ranks_seen", fmt_ranks), Column("skew", "arrival_skew_us", fmt_us),
     Column("duration", "duration_us", fmt_us), Column("busbw GB/s", "busbw_gbps", fmt_num),
     Column("last", "last_rank", fmt_plain)),
    rows=lambda r: _collectives(r).worst, left=3,
    more=lambda r: (_collectives(r).instances, "the detail table collectives.parquet"), at=60)
BANDWIDTH_TABLE = Table(
    "Bandwidth per op and size (nccl-tests definitions)",
    (Column("op", "op"), Column("size", "bytes", fmt_bytes), Column("ranks", "n", fmt_plain),
     Column("count", "count"), Column("mean time", "duration_us", fmt_us), Column("algbw GB/s", "algbw_gbps", fmt_num),
     Column("busbw GB/s", "busbw_gbps", fmt_num)),
    rows=lambda r: rows(r["bandwidth"], BandwidthRow), left=1, at=70)

SECTIONS = (
    Section("collectives", {"instances": 0, "by_op": [], "worst": []}, tables=(COLLECTIVES_TABLE,),
            record=Collectives, detail=CollectiveRow, order=70,
            cross_table=lambda cross: collectives(cross.p, cross.world_size).drop("ops_seen"),
            cross=lambda cross: collectives_summary(cross.tables["collectives"])),
    Section("bandwidth", [], tables=(BANDWIDTH_TABLE,), verdict=bandwidth_verdicts, verdict_at=60,
            record=list[BandwidthRow], order=80,
            cross=lambda cross: json_rows(bandwidth(collectives(cross.p, cross.world_size)))),
)
