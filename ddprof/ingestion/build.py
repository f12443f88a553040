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
from ddprof.ingestion.link import FIELDS, enclosing_meta, own_meta
from ddprof.schema import STEP_PREFIX, Kind, conform, step_number

GPU_CATS = ["kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation"]
_CAT_KIND = {"kernel": "compute", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync",
             "cpu_op": "cpu_op", "user_annotation": "annotation", "gpu_user_annotation": "annotation",
             "cuda_runtime": "runtime", "cuda_driver": "runtime"}
KNOWN_CATS = [*_CAT_KIND, "python_function", "Trace", "overhead", "ac2g", "fwdbwd", "cpu_instant_event",
              "gpu_memory", "memory"]
_NOT_COMM_KERNEL = ("void at::native", "at::native::")
_ROW_COLS = ["_row", "name", "external_id", "correlation", "ts_ns", "dur_ns", "pid", "tid"]


def build_events(dec: Decoded, rank: int) -> tuple[pl.DataFrame, list[str]]:
    df = dec.frame.with_row_index("_row").with_columns(
        is_gpu=pl.col("cat").is_in(GPU_CATS).fill_null(False),
        kind=pl.col("cat").replace_strict(_CAT_KIND, default="other", return_dtype=Kind),  # Enum: 1 byte a row
    )
    df = df.with_columns(_marker=pl.col("is_marker") & ~pl.col("is_gpu"))
    warnings = [f"{n} event(s) of unknown category {c!r} kept as kind 'other'" for c, n in
                _rows(df, ~pl.col("cat").is_in(KNOWN_CATS).fill_null(False), pl.col("cat").fill_null("<none>"))
                .to_series().value_counts().iter_rows()]

    markers = _rows(df, pl.col("_marker"), *_ROW_COLS)
    markers = pl.concat([markers, own_meta(markers.join(dec.meta, on="_row", how="left", maintain_order="left"))
                         .drop("_row")], how="horizontal")
    described = markers.filter(pl.col("coll_op").is_not_null() | (pl.col("name") == "record_param_comms"))
    comm = pl.concat([_comm_kernels(df, dec.meta, markers, described), described.select("_row", *FIELDS)])
    comm = _global_peers(_fill_only_group(comm, dec.distributed_info), dec.distributed_info)
    comm = _gloo_peers(comm, described)

    df = _apply_meta(df, comm)
    df = _assign_steps(df)
    df = df.with_columns(
        rank=pl.lit(rank, dtype=pl.Int32),
        stream=pl.when("is_gpu").then(pl.coalesce("a_stream", "tid")),
        device=pl.when("is_gpu").then(pl.coalesce("a_device", "pid")),
    )
    return conform(df), warnings


def _rows(df: pl.DataFrame, where: pl.Expr, *cols: str | pl.Expr, **named: pl.Expr) -> pl.DataFrame:
    """Some columns of some rows; only those columns are copied (an eager filter copies them all)."""
    return df.lazy().filter(where).select(*cols, **named).collect(engine="in-memory")


def _comm_kernels(df: pl.DataFrame, meta: pl.DataFrame, markers: pl.DataFrame,
                  described: pl.DataFrame) -> pl.DataFrame:
    """Communication kernels and their metadata: their own (new-format fields), else that of the
    marker they link to by External id, else that of the markers enclosing their launch."""
    kernels = _rows(df, pl.col("cat") == "kernel", "_row", "name", "external_id", "correlation")
    by_ext = (described.drop_nulls("external_id").unique("external_id", keep="last", maintain_order=True)
              .select("external_id", *(pl.col(f).alias(f"{f}_e") for f in FIELDS), _e=pl.lit(True)))
    launched = pl.DataFrame(schema={"correlation": pl.Int64(), **FIELDS})
    if markers.height:
        runtimes = _rows(df, (pl.col("kind") == "runtime") & pl.col("correlation").is_not_null()
                         & pl.col("correlation").is_in(kernels["correlation"].drop_nulls().implode()),
                         "_row", "ts_ns", "pid", "tid", "correlation")
        launched = enclosing_meta(markers, runtimes)
    own = own_meta(kernels.join(meta.filter(pl.col("coll_name").is_not_null()), on="_row"))
    names = kernels["name"].unique().to_list()
    named = [n for n in names if comms.COMM_KERNEL_RE.search(n)]
    op_of_name = pl.col("name").replace_strict(names, [comms.op_from_kernel(n) or "unknown" for n in names],
                                               return_dtype=pl.String)
    linked = (kernels.lazy()
              .join(own.lazy().with_columns(_own=pl.lit(True)), on="_row", how="left", maintain_order="left")
              .join(by_ext.lazy(), on="external_id", how="left", maintain_order="left")
              .join(launched.lazy().rename({f: f"{f}_l" for f in FIELDS}).with_columns(_l=pl.lit(True)),
                    on="correlation", how="left", maintain_order="left")
              .with_columns(_named=pl.col("name").is_in(named))
              .filter(pl.col("_named") | pl.col("_own") | pl.col("_e") | pl.col("_l"))
              .with_columns(pl.coalesce(f, pl.when("_e").then(f"{f}_e").otherwise(f"{f}_l")).alias(f) for f in FIELDS))
    is_comm = pl.col("_named") | (pl.col("coll_op").is_not_null()
                                  & ~pl.col("name").str.starts_with(_NOT_COMM_KERNEL[0])
                                  & ~pl.col("name").str.starts_with(_NOT_COMM_KERNEL[1]))
    unknown = pl.col("coll_op").is_null() | (pl.col("coll_op") == "unknown")
    return (linked.filter(is_comm).with_columns(coll_op=pl.when(unknown).then(op_of_name).otherwise("coll_op"))
            .select("_row", *FIELDS).collect(engine="in-memory"))


def _fill_only_group(comm: pl.DataFrame, info: dict[str, Any] | None) -> pl.DataFrame:
    """The process group every collective must belong to when the trace lists exactly one.

    Gloo traces (and old NCCL ones) do not say which group a collective ran in; with a single group in
    ``distributedInfo.pg_config`` there is no doubt, so its name and size fill the gaps.
    """
    groups = (info or {}).get("pg_config")
    if not isinstance(groups, list) or len(groups) != 1 or not isinstance(groups[0], dict):
        return comm
    size = groups[0].get("pg_size")
    name = groups[0].get("pg_name")
    size = size if isinstance(size, int) and not isinstance(size, bool) and 0 < size < 2**31 else None
    return comm.with_columns(pg=pl.col("pg").fill_null(None if name is None else str(name)),
                             group_size=pl.col("group_size").fill_null(pl.lit(size, dtype=pl.Int32)))


def _global_peers(comm: pl.DataFrame, info: dict[str, Any] | None) -> pl.DataFrame:
    """Send/recv name their peer by its rank within the process group; where ``pg_config`` lists the
    group's ranks, translate it to the global rank (pipeline groups are rarely the world group)."""
    rows = []
    for g in (info or {}).get("pg_config") or []:
        if isinstance(g, dict) and isinstance(g.get("ranks"), list):
            rows += [(str(g.get("pg_name")), i, r) for i, r in enumerate(g["ranks"])
                     if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 2**31]
    if not rows or comm["peer"].null_count() == comm.height:
        return comm
    table = pl.DataFrame(rows, schema={"pg": pl.String(), "peer": pl.Int32(), "_global": pl.Int32()},
                         orient="row").unique(["pg", "peer"], keep="last")
    return (comm.join(table, on=["pg", "peer"], how="left", maintain_order="left")
            .with_columns(peer=pl.coalesce("_global", "peer")).drop("_global"))


def _apply_meta(df: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Spread the per-row collective metadata into full-length columns (only the row index is joined:
    the other columns are not copied); GPU rows among them become ``comm``, gloo:* annotations too."""
    comm = comm.with_columns(
        bytes=comms.message_size(pl.col("coll_op"), pl.col("in_bytes"), pl.col("out_bytes"), pl.col("group_size")))
    spread = (df.select("_row").join(comm, on="_row", how="left", maintain_order="left")
              .drop("_row"))
    df = df.hstack(spread)
    gloo = pl.col("_marker") & pl.col("name").str.starts_with("gloo:")
    is_comm = (pl.col("coll_op").is_not_null() & (pl.col("cat") == "kernel")) | gloo
    return df.with_columns(kind=pl.when(is_comm).then(pl.lit("comm", dtype=Kind)).otherwise("kind"))


def _gloo_peers(comm: pl.DataFrame, markers: pl.DataFrame) -> pl.DataFrame:
    """gloo:send/gloo:recv (on gloo threads) take the peer of the c10d::send/recv_ that issued them.

    Gloo runs a rank's point-to-point ops in the order they were issued, so the k-th gloo:send pairs
    with the k-th c10d::send. When the counts differ (the trace window cut a pair) nothing is guessed.
    ``comm``: the communication rows' metadata; ``markers``: their ``_row, name, ts_ns``.
    """
    if not markers["name"].str.starts_with("gloo:").any():
        return comm
    p2p = (comm.filter(pl.col("coll_op").is_in(["send", "recv"])).select("_row", "coll_op", "peer")
           .join(markers.select("_row", "name", "ts_ns"), on="_row").sort("ts_ns", "_row"))

    def ordered(prefix: str) -> pl.DataFrame:
        return (p2p.filter(pl.col("name").str.starts_with(prefix))
                .select("_row", "coll_op", "peer", k=pl.int_range(pl.len()).over("coll_op")))

    issued, run = ordered("c10d::"), ordered("gloo:")
    if run.height == 0:
        return comm
    counts_i = dict(issued.group_by("coll_op").len().iter_rows())
    counts_r = dict(run.group_by("coll_op").len().iter_rows())
    same = [op for op, n in counts_r.items() if counts_i.get(op) == n]
    if not same or issued["peer"].null_count() == issued.height:
        return comm
    pairs = (run.filter(pl.col("coll_op").is_in(same)).select("_row", "coll_op", "k")
             .join(issued.select("coll_op", "k", _peer="peer"), on=["coll_op", "k"]).drop_nulls("_peer"))
    return (comm.join(pairs.select("_row", "_peer"), on="_row", how="left", maintain_order="left")
            .with_columns(peer=pl.coalesce("_peer", "peer")).drop("_peer"))


def _assign_steps(df: pl.DataFrame) -> pl.DataFrame:
    windows = (
        _rows(df, ~pl.col("is_gpu") & pl.col("name").str.starts_with(STEP_PREFIX),
              start=pl.col("ts_ns"), end=pl.col("ts_ns") + pl.col("dur_ns"), step=step_number(pl.col("name")))
        .drop_nulls("step").sort("start")
    )
    if windows.height == 0:
        return df.with_columns(step=pl.lit(None, dtype=pl.Int32))
    starts, ends = windows["start"].to_numpy(), windows["end"].to_numpy()
    steps = windows["step"].to_numpy()
    ts = df["ts_ns"].to_numpy()
    pos = np.searchsorted(starts, ts, side="right") - 1
    inside = (pos >= 0) & (ts < ends[np.maximum(pos, 0)])
    step = np.where(inside, steps[np.maximum(pos, 0)], -1).astype(np.int32)
    # GPU rows take the step of the runtime call that launched them (same correlation), when it has one
    corr = df["correlation"].fill_null(-1).to_numpy()
    launch = np.flatnonzero((df["kind"] == "runtime").to_numpy() & (corr >= 0) & (step >= 0))
    order = np.argsort(corr[launch], kind="stable")  # the first launch of a correlation wins
    keys, first = np.unique(corr[launch][order], return_index=True)
    launch_step = step[launch][order][first]
    gpu = np.flatnonzero(df["is_gpu"].to_numpy() & (corr >= 0))
    at = np.minimum(np.searchsorted(keys, corr[gpu]), max(len(keys) - 1, 0))
    found = keys[at] == corr[gpu] if len(keys) else np.zeros(len(gpu), dtype=bool)
    step[gpu[found]] = launch_step[at[found]]
    stepped = pl.Series("step", step)
    return df.with_columns(step=pl.when(stepped >= 0).then(stepped))
