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
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from ddprof.ingestion import comms
from ddprof.ingestion.kineto import Decoded
from ddprof.ingestion.link import Meta, launch_meta, row_meta
from ddprof.schema import conform

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation"}
_CAT_KIND = {"kernel": "compute", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync",
             "cpu_op": "cpu_op", "user_annotation": "annotation", "gpu_user_annotation": "annotation",
             "cuda_runtime": "runtime", "cuda_driver": "runtime"}
KNOWN_CATS = set(_CAT_KIND) | {"python_function", "Trace", "overhead", "ac2g", "fwdbwd", "cpu_instant_event",
                               "gpu_memory", "memory"}
_NOT_COMM_KERNEL = ("void at::native", "at::native::")


def build_events(dec: Decoded, rank: int) -> tuple[pl.DataFrame, list[str]]:
    cols = dec.columns
    cats, names = cols["cat"], cols["name"]
    cat_s = pl.Series(cats, dtype=pl.String)
    name_s = pl.Series(names, dtype=pl.String)
    warnings: list[str] = []

    is_gpu = cat_s.is_in(list(GPU_CATS)).fill_null(False).to_numpy()
    kind = cat_s.replace_strict(_CAT_KIND, default="other", return_dtype=pl.String).to_list()
    unknown = cat_s.filter(~cat_s.is_in(list(KNOWN_CATS)).fill_null(False)).fill_null("<none>").value_counts()
    for c, k in unknown.iter_rows():
        warnings.append(f"{k} event(s) of unknown category {c!r} kept as kind 'other'")

    meta: list[Meta | None] = [None] * len(names)
    markers = np.flatnonzero(name_s.str.contains(comms.MARKER_RE.pattern).to_numpy() & ~is_gpu).tolist()
    own: dict[int, Meta] = {}
    for i in markers:
        m = own[i] = row_meta(cols, i, names[i])
        if m.coll_op is not None or names[i] == "record_param_comms":
            meta[i] = m
        if names[i].startswith("gloo:"):
            kind[i] = "comm"
    kernels = np.flatnonzero(cat_s.eq("kernel").fill_null(False).to_numpy())
    for i in kernels:
        if cols["coll_name"][i] is not None:
            meta[i] = row_meta(cols, i, names[i])

    by_ext = {cols["external_id"][i]: meta[i] for i in markers
              if meta[i] is not None and cols["external_id"][i] is not None}
    runtimes = np.flatnonzero(np.array([k == "runtime" for k in kind], dtype=bool)).tolist() if markers else []
    launched = launch_meta(cols, own, runtimes) if markers else {}
    by_corr = {cols["correlation"][i]: m for i, m in launched.items() if cols["correlation"][i] is not None}

    named = name_s.str.contains(comms.COMM_KERNEL_RE.pattern).to_numpy()
    ext, corr = cols["external_id"], cols["correlation"]
    for i in kernels:
        nm = names[i]
        m = meta[i]
        linked = by_ext.get(ext[i]) or by_corr.get(corr[i])
        if m is None and linked is None and not named[i]:
            continue
        if m is not None and linked is not None:
            m = m.fill_from(linked)
        elif m is None:
            m = linked
        if named[i] or (m is not None and m.coll_op is not None and not nm.startswith(_NOT_COMM_KERNEL)):
            kind[i] = "comm"
            m = m or Meta()
            if m.coll_op is None or m.coll_op == "unknown":
                m = Meta(coll_op=comms.op_from_kernel(nm) or "unknown").fill_from(m)
            meta[i] = m
        else:
            meta[i] = None

    df = _frame(cols, rank, kind, is_gpu, meta)
    df = _assign_steps(df)
    return conform(df), warnings


def _frame(cols: dict[str, Any], rank: int, kind: list[str], is_gpu: np.ndarray,
           meta: list[Meta | None]) -> pl.DataFrame:
    def field(name: str) -> list[Any]:
        return [None if m is None else getattr(m, name) for m in meta]

    ops = field("coll_op")
    in_b, out_b, gs = field("in_bytes"), field("out_bytes"), field("group_size")
    size = [comms.message_size(o, a, b, g) if o else None for o, a, b, g in zip(ops, in_b, out_b, gs)]
    df = pl.DataFrame({
        "ts_ns": cols["ts_ns"], "dur_ns": cols["dur_ns"],
        "pid": pl.Series(cols["pid"], dtype=pl.Int64), "tid": pl.Series(cols["tid"], dtype=pl.Int64),
        "cat": pl.Series(cols["cat"], dtype=pl.String), "name": pl.Series(cols["name"], dtype=pl.String),
        "a_stream": pl.Series(cols["a_stream"], dtype=pl.Int64),
        "a_device": pl.Series(cols["a_device"], dtype=pl.Int64),
        "correlation": pl.Series(cols["correlation"], dtype=pl.Int64),
        "external_id": pl.Series(cols["external_id"], dtype=pl.Int64),
        "kind": pl.Series(kind, dtype=pl.String), "is_gpu": is_gpu,
        "coll_op": pl.Series(ops, dtype=pl.String), "pg": pl.Series(field("pg"), dtype=pl.String),
        "group_size": pl.Series(gs, dtype=pl.Int32), "bytes": pl.Series(size, dtype=pl.Int64),
        "in_bytes": pl.Series(in_b, dtype=pl.Int64), "out_bytes": pl.Series(out_b, dtype=pl.Int64),
        "dtype": pl.Series(field("dtype"), dtype=pl.String), "seq": pl.Series(field("seq"), dtype=pl.Int64),
    })
    gpu = pl.col("is_gpu")
    return df.with_columns(
        rank=pl.lit(rank, dtype=pl.Int32),
        stream=pl.when(gpu).then(pl.coalesce("a_stream", "tid")),
        device=pl.when(gpu).then(pl.coalesce("a_device", "pid")),
    )


def _assign_steps(df: pl.DataFrame) -> pl.DataFrame:
    windows = (
        df.lazy()
        .filter(~pl.col("is_gpu") & pl.col("name").str.starts_with("ProfilerStep#"))
        .select(
            w_start=pl.col("ts_ns"), w_end=pl.col("ts_ns") + pl.col("dur_ns"),
            w_step=pl.col("name").str.extract(r"^ProfilerStep#(\d+)$").cast(pl.Int32, strict=False),
        )
        .drop_nulls("w_step")
        .sort("w_start")
        .collect()
    )
    if windows.height == 0:
        return df.with_columns(step=pl.lit(None, dtype=pl.Int32))
    df = df.with_row_index("_row").sort("ts_ns")
    df = df.join_asof(windows, left_on="ts_ns", right_on="w_start", strategy="backward")
    df = df.with_columns(
        step=pl.when(pl.col("ts_ns") < pl.col("w_end")).then(pl.col("w_step"))
    ).drop("w_start", "w_end", "w_step")
    launch_step = (
        df.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null() & pl.col("step").is_not_null())
        .group_by("correlation").agg(pl.col("step").first().alias("_launch_step"))
    )
    df = df.join(launch_step, on="correlation", how="left")
    df = df.with_columns(
        step=pl.when(pl.col("is_gpu")).then(pl.coalesce("_launch_step", "step")).otherwise(pl.col("step"))
    ).drop("_launch_step")
    return df.sort("_row").drop("_row")
