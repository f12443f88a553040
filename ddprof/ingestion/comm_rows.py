"""Which rows of a trace communicate, and their collective metadata.

Markers (CPU ops named like a collective) carry metadata of their own; communication kernels take
theirs from their own new-format fields, else from the marker they name by External id, else from the
markers enclosing their launch (:mod:`.link`). Gloo's CPU-side ops are markers too. Only the few rows
that need per-row logic (one derivation per distinct metadata) leave Polars for Python.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ddprof.collective_ops import KERNEL_FAMILIES, CommRule, match_kernel, op_from_kernel
from ddprof.ingestion.link import FIELDS, enclosing_meta, own_meta, rows

_NOT_COMM_KERNEL = ("void at::native", "at::native::")
_ROW_COLS = ["_row", "name", "external_id", "correlation", "ts_ns", "dur_ns", "pid", "tid"]


def communication(df: pl.DataFrame, meta: pl.DataFrame, info: dict[str, Any] | None,
                  rules: tuple[CommRule, ...] = KERNEL_FAMILIES) -> pl.DataFrame:
    """``_row`` and :data:`~.link.STORED` of every row with collective metadata: communication kernels,
    and markers that name an op (or are ``record_param_comms``). ``df`` has ``_row``, the decoded
    columns, ``kind`` and ``_marker``; ``meta`` is the decoded sparse metadata; ``rules`` make
    kernels communication by name (:func:`ddprof.collective_ops.kernel_rules`)."""
    # every row of ``meta`` (markers and rows with new-format fields) with its own metadata, derived once
    own = own_meta(meta.with_columns(name=df.get_column("name").gather(meta.get_column("_row"))))
    markers = (df.lazy().filter(pl.col("_marker")).select(_ROW_COLS)
               .join(own.lazy(), on="_row", how="left", maintain_order="left").collect(engine="in-memory"))
    described = markers.filter(_DESCRIBED)
    comm = pl.concat([_comm_kernels(df, meta, own, markers, described, rules), described.select(_META_COLS)])
    comm = _global_peers(_fill_only_group(comm, info), info).with_columns(_PEER)
    return _gloo_peers(comm, described.with_columns(_PEER)).drop("global_peer")


# Expressions and frames built once (a trace of a few hundred events is ingested in a few milliseconds;
# building an expression costs microseconds, an empty frame of the metadata's columns ~0.1 ms).
_META_COLS = ["_row", *FIELDS]
_PEER = pl.coalesce("global_peer", "peer").alias("peer")  # a global rank the trace names outranks a mapped one
_DESCRIBED = pl.col("coll_op").is_not_null() | (pl.col("name") == "record_param_comms")
_KERNEL = pl.col("cat") == "kernel"
_LAUNCH = (pl.col("kind") == "runtime") & pl.col("correlation").is_not_null()
_BY_EXT = ["external_id", *(pl.col(f).alias(f"{f}_e") for f in FIELDS), pl.lit(True).alias("_e")]
_LAUNCHED = ["correlation", *(pl.col(f).alias(f"{f}_l") for f in FIELDS), pl.lit(True).alias("_l")]
_NO_LAUNCH = pl.DataFrame(schema={"correlation": pl.Int64(), **FIELDS})
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
    kernels = rows(df, _KERNEL, "_row", "name", "external_id", "correlation")
    by_ext = (described.lazy().drop_nulls("external_id").unique("external_id", keep="last", maintain_order=True)
              .select(_BY_EXT))
    launched = _NO_LAUNCH
    if markers.height:
        unlinked = kernels.lazy().filter(
            ~pl.col("external_id").is_in(described.get_column("external_id").drop_nulls().implode()).fill_null(False))
        runtimes = (df.lazy().filter(_LAUNCH).select("_row", "ts_ns", "pid", "tid", "correlation")
                    .join(unlinked.select("correlation"), on="correlation", how="semi", maintain_order="left")
                    .collect(engine="in-memory"))
        launched = enclosing_meta(markers, runtimes)
    names = kernels["name"].unique().to_list()
    matched = [match_kernel(n, rules) for n in names]
    named = [n for n, m in zip(names, matched) if m is not None]
    op_of_name = pl.col("name").replace_strict(
        names, [m[1] if m is not None else op_from_kernel(n) or "unknown" for n, m in zip(names, matched)],
        return_dtype=pl.String)
    linked = (kernels.lazy()
              .join(own.lazy().join(meta.lazy().filter(_HAS_OWN).select("_row"), on="_row", how="semi")
                    .with_columns(_own=pl.lit(True)), on="_row", how="left", maintain_order="left")
              .join(by_ext, on="external_id", how="left", maintain_order="left")
              .join(launched.lazy().select(_LAUNCHED), on="correlation", how="left", maintain_order="left")
              .with_columns(_named=pl.col("name").is_in(named))
              .filter(_ANY_META)
              .with_columns(_MERGED))
    return (linked.filter(pl.col("_named") | _NOT_NAMED_COMM)
            .with_columns(coll_op=pl.when(_UNKNOWN).then(op_of_name).otherwise("coll_op"))
            .select(_META_COLS).collect(engine="in-memory"))


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
    return comm.with_columns(pg=pl.col("pg") if name is None else pl.col("pg").fill_null(str(name)),
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
