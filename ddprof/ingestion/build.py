"""Turn one decoded Kineto trace into the canonical event table (:mod:`ddprof.schema`).

Classification (``kind``), once, here:

============================  =====================================================
Kineto ``cat``                kind
============================  =====================================================
kernel                        ``comm`` if a communication kernel (name or metadata), else ``compute``
gpu_memcpy / gpu_memset       ``memcpy`` / ``memset``
cuda_sync                     ``sync``
cpu_op                        ``cpu_op`` (``comm`` for ``gloo:*``)
user_annotation               ``annotation`` (``comm`` for ``gloo:*``)
gpu_user_annotation           ``annotation`` on the GPU track
cuda_runtime / cuda_driver    ``runtime``
anything else                 ``other`` (unknown categories are counted in the warnings)
============================  =====================================================

``step``: CPU rows take the ``ProfilerStep#N`` window (on a CPU thread) that contains their start;
GPU rows take the step of the runtime call that launched them (matched on ``correlation``), and their
own start's window when no launch is in the trace.

Only the few rows that need per-row logic (collective markers, runtime calls inside them, candidate
communication kernels) leave Polars for Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from ddprof.ingestion import comms
from ddprof.ingestion.kineto import Decoded
from ddprof.ingestion.link import Meta, launch_meta, row_meta
from ddprof.schema import STEP_PREFIX, conform, step_number

GPU_CATS = ["kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation"]
_CAT_KIND = {"kernel": "compute", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync",
             "cpu_op": "cpu_op", "user_annotation": "annotation", "gpu_user_annotation": "annotation",
             "cuda_runtime": "runtime", "cuda_driver": "runtime"}
KNOWN_CATS = [*_CAT_KIND, "python_function", "Trace", "overhead", "ac2g", "fwdbwd", "cpu_instant_event",
              "gpu_memory", "memory"]
_NOT_COMM_KERNEL = ("void at::native", "at::native::")
_META_COLS = ["_row", "name", "coll_name", "dtype", "in_nelems", "out_nelems", "input_dims", "input_type",
              "concrete_inputs",
              "group_size", "pg", "seq", "external_id", "correlation", "ts_ns", "dur_ns", "pid", "tid"]
META_FIELDS = ["coll_op", "pg", "group_size", "in_bytes", "out_bytes", "dtype", "seq", "peer"]


def build_events(dec: Decoded, rank: int) -> tuple[pl.DataFrame, list[str]]:
    df = dec.frame.with_row_index("_row").with_columns(
        is_gpu=pl.col("cat").is_in(GPU_CATS).fill_null(False),
        kind=pl.col("cat").replace_strict(_CAT_KIND, default="other", return_dtype=pl.String),
    )
    df = df.with_columns(_marker=pl.col("is_marker") & ~pl.col("is_gpu"))
    warnings = [f"{n} event(s) of unknown category {c!r} kept as kind 'other'" for c, n in
                df.filter(~pl.col("cat").is_in(KNOWN_CATS).fill_null(False))
                .select(pl.col("cat").fill_null("<none>")).to_series().value_counts().iter_rows()]

    markers = df.filter("_marker").select(_META_COLS).to_dicts()
    own = {m["_row"]: row_meta(m) for m in markers}
    marker_meta = {r: m for r, m in own.items() if m.coll_op is not None}
    marker_meta.update({m["_row"]: own[m["_row"]] for m in markers if m["name"] == "record_param_comms"})
    by_ext = {m["external_id"]: marker_meta[m["_row"]] for m in markers
              if m["_row"] in marker_meta and m["external_id"] is not None}
    launched: dict[int, Meta] = {}
    if markers:
        runtimes = _runtimes_inside_markers(df).to_dicts()
        rt_corr = {r["_row"]: r["correlation"] for r in runtimes}
        launched = {rt_corr[r]: m for r, m in launch_meta(markers, own, runtimes).items()
                    if rt_corr[r] is not None}

    kernels = df.filter(pl.col("cat") == "kernel").with_columns(
        _named=pl.col("name").str.contains(comms.COMM_KERNEL_RE.pattern))
    candidates = kernels.filter(
        pl.col("_named") | pl.col("coll_name").is_not_null()
        | pl.col("external_id").is_in(list(by_ext)) | pl.col("correlation").is_in(list(launched))
    ).select([*_META_COLS, "_named"]).to_dicts()
    comm_rows: dict[int, Meta] = {}
    for k in candidates:
        m = row_meta(k) if k["coll_name"] is not None else None
        linked = by_ext.get(k["external_id"]) or launched.get(k["correlation"])
        if m is not None and linked is not None:
            m = m.fill_from(linked)
        elif m is None:
            m = linked
        if k["_named"] or (m is not None and m.coll_op is not None and not k["name"].startswith(_NOT_COMM_KERNEL)):
            m = m or Meta()
            if m.coll_op is None or m.coll_op == "unknown":
                m = Meta(coll_op=comms.op_from_kernel(k["name"]) or "unknown").fill_from(m)
            comm_rows[k["_row"]] = m
    for row in markers:
        if row["_row"] in marker_meta:
            comm_rows.setdefault(row["_row"], marker_meta[row["_row"]])
    only = _only_group(dec.distributed_info)
    if only is not None:
        comm_rows = {r: m.fill_from(only) for r, m in comm_rows.items()}
    comm_rows = _global_peers(comm_rows, dec.distributed_info)

    df = _apply_meta(df, comm_rows)
    df = _assign_steps(df)
    df = df.with_columns(
        rank=pl.lit(rank, dtype=pl.Int32),
        stream=pl.when("is_gpu").then(pl.coalesce("a_stream", "tid")),
        device=pl.when("is_gpu").then(pl.coalesce("a_device", "pid")),
    )
    return conform(df), warnings


def _only_group(info: dict[str, Any] | None) -> Meta | None:
    """The process group every collective must belong to when the trace lists exactly one.

    Gloo traces (and old NCCL ones) do not say which group a collective ran in; with a single group in
    ``distributedInfo.pg_config`` there is no doubt, so its name and size fill the gaps.
    """
    groups = (info or {}).get("pg_config")
    if not isinstance(groups, list) or len(groups) != 1 or not isinstance(groups[0], dict):
        return None
    size = groups[0].get("pg_size")
    name = groups[0].get("pg_name")
    return Meta(pg=None if name is None else str(name),
                group_size=size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None)


def _global_peers(rows: dict[int, Meta], info: dict[str, Any] | None) -> dict[int, Meta]:
    """Send/recv name their peer by its rank within the process group; where ``pg_config`` lists the
    group's ranks, translate it to the global rank (pipeline groups are rarely the world group)."""
    members: dict[str, list[int]] = {}
    for g in (info or {}).get("pg_config") or []:
        if isinstance(g, dict) and isinstance(g.get("ranks"), list):
            members[str(g.get("pg_name"))] = g["ranks"]
    if not members:
        return rows
    out = {}
    for r, m in rows.items():
        peer, ranks = m.peer, members.get(m.pg or "")
        if peer is not None and ranks is not None and 0 <= peer < len(ranks) and isinstance(ranks[peer], int):
            m = m._replace(peer=ranks[peer])
        out[r] = m
    return out


def _runtimes_inside_markers(df: pl.DataFrame) -> pl.DataFrame:
    """Runtime calls whose start lies inside some collective marker on the same thread (vectorised)."""
    spans = (df.filter("_marker").select("pid", "tid", start="ts_ns", end=pl.col("ts_ns") + pl.col("dur_ns"))
             .sort("pid", "tid", "start")
             .with_columns(end=pl.col("end").cum_max().over("pid", "tid")))
    rt = (df.filter(pl.col("kind") == "runtime").select("_row", "ts_ns", "dur_ns", "pid", "tid", "correlation")
          .drop_nulls(["pid", "tid"]).sort("pid", "tid", "ts_ns"))
    hit = rt.join_asof(spans.drop_nulls(["pid", "tid"]), left_on="ts_ns", right_on="start", by=["pid", "tid"],
                       strategy="backward", check_sortedness=False)
    return hit.filter(pl.col("ts_ns") <= pl.col("end")).drop("start", "end")


def _apply_meta(df: pl.DataFrame, rows: dict[int, Meta]) -> pl.DataFrame:
    """Scatter the per-row collective metadata into full-length columns (no join: nothing else is
    copied); GPU rows among them become ``comm``, gloo:* annotations too."""
    idx = pl.Series(list(rows), dtype=pl.UInt32)
    values = {f: [getattr(m, f) for m in rows.values()] for f in META_FIELDS}
    values["bytes"] = [comms.message_size(m.coll_op, m.in_bytes, m.out_bytes, m.group_size) for m in rows.values()]
    dtypes = {"coll_op": pl.String(), "pg": pl.String(), "group_size": pl.Int32(), "in_bytes": pl.Int64(),
              "out_bytes": pl.Int64(), "dtype": pl.String(), "seq": pl.Int64(), "peer": pl.Int32(),
              "bytes": pl.Int64()}
    cols = [_scatter(name, df.height, idx, values[name], dtype) for name, dtype in dtypes.items()]
    df = df.with_columns(cols)
    gloo = pl.col("_marker") & pl.col("name").str.starts_with("gloo:")
    comm = (pl.col("coll_op").is_not_null() & (pl.col("cat") == "kernel")) | gloo
    df = df.with_columns(kind=pl.when(comm).then(pl.lit("comm")).otherwise("kind"))
    return _gloo_peers(df)


def _scatter(name: str, n: int, idx: pl.Series, values: list[object], dtype: pl.DataType) -> pl.Series:
    col = pl.Series(name, [None] * n, dtype=dtype)
    return col.scatter(idx, pl.Series(values, dtype=dtype)) if len(idx) else col


def _gloo_peers(df: pl.DataFrame) -> pl.DataFrame:
    """gloo:send/gloo:recv (on gloo threads) take the peer of the c10d::send/recv_ that issued them.

    Gloo runs a rank's point-to-point ops in the order they were issued, so the k-th gloo:send pairs
    with the k-th c10d::send. When the counts differ (the trace window cut a pair) nothing is guessed.
    """
    def ordered(name_expr: pl.Expr) -> pl.DataFrame:
        return (df.filter(name_expr & pl.col("coll_op").is_in(["send", "recv"])).sort("ts_ns")
                .select("_row", "coll_op", "peer", k=pl.int_range(pl.len()).over("coll_op")))

    issued = ordered(pl.col("name").str.starts_with("c10d::"))
    run = ordered(pl.col("_marker") & pl.col("name").str.starts_with("gloo:"))
    counts_i = dict(issued.group_by("coll_op").len().iter_rows())
    counts_r = dict(run.group_by("coll_op").len().iter_rows())
    same = [op for op, n in counts_r.items() if counts_i.get(op) == n]
    if not same or issued["peer"].null_count() == issued.height:
        return df
    pairs = (run.filter(pl.col("coll_op").is_in(same)).drop("peer")
             .join(issued.select("coll_op", "k", "peer"), on=["coll_op", "k"]).drop_nulls("peer"))
    return df.with_columns(df["peer"].scatter(pairs["_row"], pairs["peer"]))


def _assign_steps(df: pl.DataFrame) -> pl.DataFrame:
    windows = (
        df.filter(~pl.col("is_gpu") & pl.col("name").str.starts_with(STEP_PREFIX))
        .select(start=pl.col("ts_ns"), end=pl.col("ts_ns") + pl.col("dur_ns"), step=step_number(pl.col("name")))
        .drop_nulls("step").sort("start")
    )
    if windows.height == 0:
        return df.with_columns(step=pl.lit(None, dtype=pl.Int32))
    starts, ends = windows["start"].to_numpy(), windows["end"].to_numpy()
    steps = windows["step"].to_numpy()
    ts = df["ts_ns"].to_numpy()
    pos = np.searchsorted(starts, ts, side="right") - 1
    inside = (pos >= 0) & (ts < ends[np.maximum(pos, 0)])
    own = pl.Series("step", np.where(inside, steps[np.maximum(pos, 0)], -1), dtype=pl.Int32)
    df = df.with_columns(step=pl.when(own >= 0).then(own))
    launch = (df.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null()
                        & pl.col("step").is_not_null())
              .group_by("correlation").agg(pl.col("step").first()))
    launch_step = pl.col("correlation").replace_strict(launch["correlation"], launch["step"], default=None,
                                                       return_dtype=pl.Int32)
    return df.with_columns(step=pl.when("is_gpu").then(pl.coalesce(launch_step, "step")).otherwise("step"))
