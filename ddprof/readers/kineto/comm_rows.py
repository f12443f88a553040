"""Which rows of a trace communicate, and their collective metadata.

Markers (CPU ops named like a collective) carry metadata of their own; communication kernels take
theirs from their own new-format fields, else from the marker they name by External id, else from the
markers enclosing their launch (:mod:`.link`). Gloo's CPU-side ops are markers too. Only the few rows
that need per-row logic (one derivation per distinct metadata) leave Polars for Python.

Several traces may be built at once (:func:`ddprof.readers.kineto.build.build_events`): ``_trace`` says whose
a row is, and every link between rows (External id, correlation, thread, process group) is within one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from ddprof.readers.kineto.link import FIELDS, enclosing_meta, own_meta, rows
from ddprof.vocabulary.collective_ops import KERNEL_FAMILIES, CommRule, match_kernel, op_from_kernel

_NOT_COMM_KERNEL = ("void at::native", "at::native::")
_ROW_COLS = ["_row", "_trace", "name", "external_id", "correlation", "ts_ns", "dur_ns", "pid", "tid"]


def communication(df: pl.DataFrame, meta: pl.DataFrame, infos: Sequence[dict[str, Any] | None],
                  rules: tuple[CommRule, ...] = KERNEL_FAMILIES) -> pl.DataFrame:
    """``_row`` and :data:`~.link.STORED` of every row with collective metadata: communication kernels,
    and markers that name an op (or are ``record_param_comms``). ``df`` has ``_row``, ``_trace``, the
    decoded columns, ``kind`` and ``_marker``; ``meta`` is the decoded sparse metadata (``_row`` into
    ``df``); ``infos``: each trace's ``distributedInfo``; ``rules`` make kernels communication by name
    (:func:`ddprof.vocabulary.collective_ops.kernel_rules`)."""
    # every row of ``meta`` (markers and rows with new-format fields) with its own metadata, derived once
    own = own_meta(meta.with_columns(name=df.get_column("name").gather(meta.get_column("_row"))))
    markers = (df.lazy().filter(pl.col("_marker")).select(_ROW_COLS)
               .join(own.lazy(), on="_row", how="left", maintain_order="left").collect(engine="in-memory"))
    described = markers.filter(_DESCRIBED)
    comm = pl.concat([_comm_kernels(df, meta, own, markers, described, rules), described.select(_META_COLS)])
    comm = _global_peers(_fill_only_group(comm, infos), infos).with_columns(_PEER)
    comm = _gloo_peers(comm, described.with_columns(_PEER))
    return _gloo_splits(comm, described).drop("global_peer")


# Expressions and frames built once (a trace of a few hundred events is ingested in a few milliseconds;
# building an expression costs microseconds, an empty frame of the metadata's columns ~0.1 ms).
_META_COLS = ["_row", "_trace", *FIELDS]
_PEER = pl.coalesce("global_peer", "peer").alias("peer")  # a global rank the trace names outranks a mapped one
_DESCRIBED = pl.col("coll_op").is_not_null() | (pl.col("name") == "record_param_comms")
_KERNEL = pl.col("cat") == "kernel"
_LAUNCH = (pl.col("kind") == "runtime") & pl.col("correlation").is_not_null()
_BY_EXT = ["_trace", "external_id", *(pl.col(f).alias(f"{f}_e") for f in FIELDS), pl.lit(True).alias("_e")]
_LAUNCHED = ["_trace", "correlation", *(pl.col(f).alias(f"{f}_l") for f in FIELDS), pl.lit(True).alias("_l")]
_NO_LAUNCH = pl.DataFrame(schema={"_trace": pl.UInt32(), "correlation": pl.Int64(), **FIELDS})
_EXT, _CORR = ["_trace", "external_id"], ["_trace", "correlation"]
_HAS_OWN = pl.col("coll_name").is_not_null()
_ANY_META = pl.col("_named") | pl.col("_own") | pl.col("_e") | pl.col("_l")
_MERGED = [pl.coalesce(f, pl.when("_e").then(f"{f}_e").otherwise(f"{f}_l")).alias(f) for f in FIELDS]
_NOT_NAMED_COMM = (pl.col("coll_op").is_not_null() & ~pl.col("name").str.starts_with(_NOT_COMM_KERNEL[0])
                   & ~pl.col("name").str.starts_with(_NOT_COMM_KERNEL[1]))
_UNKNOWN = pl.col("coll_op").is_null() | (pl.col("coll_op") == "unknown")


def _comm_kernels(df: pl.DataFrame, meta: pl.DataFrame, own: pl.DataFrame, markers: pl.DataFrame,
                  described: pl.DataFrame, rules: tuple[CommRule, ...]) -> pl.DataFrame:
    """Communication kernels and their metadata: their own (new-format fields), else that of the
    marker they link to by External id, else that of the markers enclosing their launch. A kernel a
    rule names is communication with or without metadata; its op, where no metadata says, is the
    rule's. ``own``: the own metadata of every row of ``meta``.

    The markers enclosing a launch are looked for only for the kernels no marker claims by External id
    (whose metadata they would otherwise not reach)."""
    kernels = rows(df, _KERNEL, "_row", "_trace", "name", "external_id", "correlation")
    by_ext = (described.lazy().drop_nulls("external_id").unique(_EXT, keep="last", maintain_order=True)
              .select(_BY_EXT))
    launched = _NO_LAUNCH
    if markers.height:
        unlinked = kernels.lazy().join(by_ext.select(_EXT), on=_EXT, how="anti", maintain_order="left")
        runtimes = (df.lazy().filter(_LAUNCH).select("_row", "_trace", "ts_ns", "pid", "tid", "correlation")
                    .join(unlinked.select(_CORR), on=_CORR, how="semi", maintain_order="left")
                    .collect(engine="in-memory"))
        launched = enclosing_meta(markers, runtimes)
    names = kernels["name"].unique().to_list()
    matched = [match_kernel(n, rules) for n in names]
    named = [n for n, m in zip(names, matched) if m is not None]
    op_of_name = pl.col("name").replace_strict(
        names, [m[1] if m is not None else op_from_kernel(n) or "unknown" for n, m in zip(names, matched)],
        return_dtype=pl.String)
    linked = (_reachable(kernels, meta, described, launched, named).lazy()
              .join(own.lazy().join(meta.lazy().filter(_HAS_OWN).select("_row"), on="_row", how="semi")
                    .with_columns(_own=pl.lit(True)), on="_row", how="left", maintain_order="left")
              .join(by_ext, on=_EXT, how="left", maintain_order="left")
              .join(launched.lazy().select(_LAUNCHED), on=_CORR, how="left", maintain_order="left")
              .with_columns(_named=pl.col("name").is_in(named))
              .filter(_ANY_META)
              .with_columns(_MERGED))
    return (linked.filter(pl.col("_named") | _NOT_NAMED_COMM)
            .with_columns(coll_op=pl.when(_UNKNOWN).then(op_of_name).otherwise("coll_op"))
            .select(_META_COLS).collect(engine="in-memory"))


#: From this many kernels up, only those some metadata or rule can reach are joined (:func:`_reachable`).
MANY_KERNELS = 4096


def _reachable(kernels: pl.DataFrame, meta: pl.DataFrame, described: pl.DataFrame, launched: pl.DataFrame,
               named: list[str]) -> pl.DataFrame:
    """The kernels some metadata or kernel rule can reach (their keys matched whatever the trace here,
    exactly by the joins after): a few of thousands on a large trace (a 50k-event trace joined 16.7k
    kernels to link 40). Below :data:`MANY_KERNELS` all of them: the filter's own cost is then the larger."""
    if kernels.height < MANY_KERNELS:
        return kernels
    return kernels.filter(pl.col("_row").is_in(meta.filter(_HAS_OWN).get_column("_row").implode())
                          | pl.col("external_id").is_in(described.get_column("external_id").drop_nulls().implode())
                          | pl.col("correlation").is_in(launched.get_column("correlation").drop_nulls().implode())
                          | pl.col("name").is_in(named))


def _fill_only_group(comm: pl.DataFrame, infos: Sequence[dict[str, Any] | None]) -> pl.DataFrame:
    """The process group every collective must belong to when the trace lists exactly one.

    Gloo traces (and old NCCL ones) do not say which group a collective ran in; with a single group in
    ``distributedInfo.pg_config`` there is no doubt, so its name and size fill the gaps.
    """
    fills = []
    for t, info in enumerate(infos):
        groups = (info or {}).get("pg_config")
        if not isinstance(groups, list) or len(groups) != 1 or not isinstance(groups[0], dict):
            continue
        size, name = groups[0].get("pg_size"), groups[0].get("pg_name")
        size = size if isinstance(size, int) and not isinstance(size, bool) and 0 < size < 2**31 else None
        fills.append((t, None if name is None else str(name), size))
    if not fills:
        return comm
    table = pl.DataFrame(fills, schema={"_trace": pl.UInt32(), "_pg": pl.String(), "_size": pl.Int32()},
                         orient="row")
    return (comm.join(table, on="_trace", how="left", maintain_order="left")
            .with_columns(pg=pl.coalesce("pg", "_pg"), group_size=pl.coalesce("group_size", "_size"))
            .drop("_pg", "_size"))


def _global_peers(comm: pl.DataFrame, infos: Sequence[dict[str, Any] | None]) -> pl.DataFrame:
    """Send/recv name their peer by its rank within the process group; where ``pg_config`` lists the
    group's ranks, translate it to the global rank (pipeline groups are rarely the world group)."""
    if comm["peer"].null_count() == comm.height:
        return comm
    wanted = set(comm.filter(pl.col("peer").is_not_null()).select("_trace", "pg").unique().iter_rows())
    rows = []  # the groups' ranks: only those of groups a peer is named in (a world group lists every rank)
    for t, info in enumerate(infos):
        for g in (info or {}).get("pg_config") or []:
            if not isinstance(g, dict) or not isinstance(g.get("ranks"), list):
                continue
            name = str(g.get("pg_name"))
            if (t, name) in wanted:
                rows += [(t, name, i, r) for i, r in enumerate(g["ranks"])
                         if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 2**31]
    if not rows:
        return comm
    keys = ["_trace", "pg", "peer"]
    table = pl.DataFrame(rows, schema={"_trace": pl.UInt32(), "pg": pl.String(), "peer": pl.Int32(),
                                       "_global": pl.Int32()}, orient="row").unique(keys, keep="last")
    return (comm.join(table, on=keys, how="left", maintain_order="left")
            .with_columns(peer=pl.coalesce("_global", "peer")).drop("_global"))


def _gloo_peers(comm: pl.DataFrame, markers: pl.DataFrame) -> pl.DataFrame:
    """gloo:send/gloo:recv (on gloo threads) take the peer of the c10d::send/recv_ that issued them.

    Gloo runs a rank's point-to-point ops in the order they were issued, so the k-th gloo:send pairs
    with the k-th c10d::send. When the counts differ (the trace window cut a pair) nothing is guessed.
    ``comm``: the communication rows' metadata; ``markers``: their ``_row, name, ts_ns``.
    """
    if not markers["name"].str.starts_with("gloo:").any():
        return comm
    p2p = (comm.filter(pl.col("coll_op").is_in(["send", "recv"])).select("_row", "_trace", "coll_op", "peer")
           .join(markers.select("_row", "name", "ts_ns"), on="_row").sort("_trace", "ts_ns", "_row"))
    ops = ["_trace", "coll_op"]

    def ordered(prefix: str) -> pl.DataFrame:
        return (p2p.filter(pl.col("name").str.starts_with(prefix))
                .select("_row", *ops, "peer", k=pl.int_range(pl.len()).over(ops)))

    issued, run = ordered("c10d::"), ordered("gloo:")
    if run.height == 0 or issued["peer"].null_count() == issued.height:
        return comm
    counts_i = issued.group_by(ops).len()
    same = run.group_by(ops).len().join(counts_i, on=[*ops, "len"], how="semi")  # a trace's op counted alike
    if same.height == 0:
        return comm
    pairs = (run.join(same, on=ops, how="semi").select("_row", *ops, "k")
             .join(issued.select(*ops, "k", _peer="peer"), on=[*ops, "k"]).drop_nulls("_peer"))
    return (comm.join(pairs.select("_row", "_peer"), on="_row", how="left", maintain_order="left")
            .with_columns(peer=pl.coalesce("_peer", "peer")).drop("_peer"))


_SPLITS = ["send_splits", "recv_splits"]


def _gloo_splits(comm: pl.DataFrame, markers: pl.DataFrame) -> pl.DataFrame:
    """gloo:all_to_all (on a gloo thread) takes the splits of the c10d::alltoall_base_ that issued it.

    Only the issuing op records the split arguments (with shapes); gloo runs a rank's collectives in the
    order they were issued, so the k-th gloo:all_to_all of a trace pairs with its k-th
    c10d::alltoall_base_. When the counts differ (the trace window cut one) nothing is guessed.
    """
    if not markers["name"].str.starts_with("gloo:all_to_all").any():
        return comm
    a2a = (comm.filter(pl.col("coll_op") == "all_to_all").select("_row", "_trace", *_SPLITS)
           .join(markers.select("_row", "name", "ts_ns"), on="_row").sort("_trace", "ts_ns", "_row"))

    def ordered(prefix: str) -> pl.DataFrame:
        return (a2a.filter(pl.col("name").str.starts_with(prefix))
                .select("_row", "_trace", *_SPLITS, k=pl.int_range(pl.len()).over("_trace")))

    issued, run = ordered("c10d::alltoall_base"), ordered("gloo:all_to_all")
    if run.height == 0 or issued.height == 0:
        return comm
    same = run.group_by("_trace").len().join(issued.group_by("_trace").len(), on=["_trace", "len"], how="semi")
    pairs = (run.join(same, on="_trace", how="semi").select("_row", "_trace", "k")
             .join(issued.select("_trace", "k", _send="send_splits", _recv="recv_splits"), on=["_trace", "k"]))
    return (comm.join(pairs.select("_row", "_send", "_recv"), on="_row", how="left", maintain_order="left")
            .with_columns(send_splits=pl.coalesce("send_splits", "_send"),
                          recv_splits=pl.coalesce("recv_splits", "_recv")).drop("_send", "_recv"))
