"""The kernels that take the most time: per kernel name, over all ranks, and per step.

Which rows: on a GPU rank its GPU work rows (compute, communication, memcpy and memset kernels:
:func:`~ddprof.analyses.frames.sets.kernels`); on a CPU rank its CPU ops and ``gloo:*`` rows (a CPU op's
time includes the ops nested in it, so nested ops each count their own inclusive time).

``top_kernels`` — per (name, kind), the ``n`` with the largest total time:

* ``count``, ``total_us`` over every rank; ``mean_us`` = total_us / count; ``ranks`` = ranks that ran it;
* ``per_step_us`` and ``per_step_count``: its time and count inside profiler steps divided by the
  number of (rank, step) pairs of the run, i.e. per rank and step (null when the run has no steps);
* ``shapes``: on a CPU op recorded with shapes, one number for the set of input shapes and types it ran on
  (:func:`shapes_signature`): a run of other sizes (a batch, a model) gives another; null otherwise;
  ``shapes_distinct``: how many shapes that set holds (more than its calls per rank and step: shapes that
  change from step to step, as a sequence length does).

Example: gemm runs 3 times per step for 100 µs on each of 2 ranks over 4 steps -> count 24,
total_us 2,400, mean_us 100, per_step_us 2,400 / 8 = 300, per_step_count 3.

``kernels_by_step`` — for the same top kernels, per (name, kind, step): ``count`` and ``total_us`` summed
over ranks (the per-step distribution a regression check compares).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import numpy as np
import polars as pl
from ddprof.analyses.frames.memo import Events, Prepared, collect, derived, prepare
from ddprof.analyses.frames.sets import kernels, steps
from ddprof.analyses.sections import Section
from ddprof.analyses.summaries import json_rows

from ddprof.report.schema import KernelRow, KernelStepRow, KernelStepSummary
from ddprof.vocabulary.units import NS_PER_US

TOP_N = 20


@derived
def kernel_rows(p: Prepared) -> pl.DataFrame:
    """rank, step, name, kind, dur_ns, shapes of every kernel (GPU ranks) or CPU op and gloo row (CPU
    ranks); ``shapes`` (the store's: a CPU op's recorded input shapes) is null on kernels."""
    gpu = kernels(p).lazy()
    cols: list[str | pl.Expr] = ["rank", "step", "name", pl.col("kind").cast(pl.String), "dur_ns"]
    cpu = (p.events.filter(pl.col("stream").is_null() & pl.col("kind").is_in(["cpu_op", "comm"]))
           .join(gpu.select("rank").unique(), on="rank", how="anti"))
    return collect(pl.concat([gpu.select(*cols, pl.lit(None, pl.UInt32).alias("shapes")),
                              cpu.select(*cols, pl.col("shapes").cast(pl.UInt32))]))


@derived
def kernel_shapes(p: Prepared) -> pl.DataFrame:
    """The distinct (name, kind, shapes) of the CPU ops that recorded their input shapes: a group of ranks'
    rows; a run's are its groups' together (their union, duplicates aside)."""
    return collect(kernel_rows(p).lazy().filter(pl.col("shapes").is_not_null())
                   .select("name", "kind", "shapes").unique().sort("name", "kind", "shapes"))


def shapes_signature(values: Iterable[int]) -> int | None:
    """One number for a set of recorded shapes (:func:`kernel_shapes`): the CRC-32 of the distinct values
    sorted, None for none. Two runs whose op ran on the same shapes give the same number."""
    distinct = sorted(set(values))
    return zlib.crc32(np.asarray(distinct, dtype="<u4").tobytes()) if distinct else None


@derived
def kernel_totals(p: Prepared) -> pl.DataFrame:
    """Per (name, kind): count, dur_ns, ranks, in_steps_ns, in_steps_count: sums over the rows of
    :func:`kernel_rows` (``ranks``: the ranks that ran it). Each adds up over disjoint sets of ranks, so
    a run analysed a group of ranks at a time sums its groups' totals (:func:`add_totals`)."""
    in_step = pl.col("step").is_not_null()
    return collect(
        kernel_rows(p).lazy().group_by("name", "kind")
        .agg(pl.len().cast(pl.Int64).alias("count"), pl.col("dur_ns").sum().cast(pl.Int64),
             pl.col("rank").n_unique().cast(pl.Int64).alias("ranks"),
             pl.col("dur_ns").filter(in_step).sum().cast(pl.Int64).alias("in_steps_ns"),
             in_step.sum().cast(pl.Int64).alias("in_steps_count"))
    )


@derived
def kernel_step_totals(p: Prepared) -> pl.DataFrame:
    """Per (name, kind, step) inside profiler steps: count and dur_ns summed over ranks (additive, like
    :func:`kernel_totals`)."""
    return collect(
        kernel_rows(p).lazy().filter(pl.col("step").is_not_null())
        .group_by("name", "kind", "step")
        .agg(pl.len().cast(pl.Int64).alias("count"), pl.col("dur_ns").sum().cast(pl.Int64))
    )


def add_totals(parts: list[pl.DataFrame], keys: list[str]) -> pl.DataFrame:
    """The sum of several groups' :func:`kernel_totals` (keys name, kind) or :func:`kernel_step_totals`
    (keys name, kind, step): every other column added up."""
    frame = pl.concat(parts)
    return frame.group_by(keys).agg(pl.exclude(keys).sum())


def top_kernels(events: Events, n: int = TOP_N) -> pl.DataFrame:
    """Per (name, kind), the ``n`` kernels with the largest total time (module doc), largest first."""
    p = prepare(events)
    rank_steps = steps(p).height
    return collect(
        kernel_totals(p).lazy()
        .with_columns((pl.col("dur_ns") / NS_PER_US).alias("total_us"))
        .with_columns((pl.col("total_us") / pl.col("count")).alias("mean_us"),
                      ((pl.col("in_steps_ns") / NS_PER_US) / rank_steps if rank_steps else pl.lit(None, pl.Float64))
                      .alias("per_step_us"),
                      (pl.col("in_steps_count") / rank_steps if rank_steps else pl.lit(None, pl.Float64))
                      .alias("per_step_count"))
        .sort(["total_us", "name"], descending=[True, False])
        .head(n)
        .select("name", "kind", "count", "total_us", "mean_us", "ranks", "per_step_us", "per_step_count")
    ).pipe(with_shapes, kernel_shapes(p))


def with_shapes(top: pl.DataFrame, shapes: pl.DataFrame) -> pl.DataFrame:
    """``top`` with ``shapes``, each op's :func:`shapes_signature` over its distinct recorded shapes, and
    ``shapes_distinct``, how many there are (null without)."""
    seen: dict[tuple[str, str], set[int]] = {}
    for name, kind, value in shapes.iter_rows():
        seen.setdefault((name, kind), set()).add(value)
    keys = list(top.select("name", "kind").iter_rows())
    return top.with_columns(
        pl.Series("shapes", [shapes_signature(seen.get(k, ())) for k in keys], dtype=pl.Int64),
        pl.Series("shapes_distinct", [len(seen[k]) if k in seen else None for k in keys], dtype=pl.Int64))


def kernels_by_step(events: Events, n: int = TOP_N) -> pl.DataFrame:
    """Per (name, kind, step) of the top ``n`` kernels: count and total_us summed over ranks (module doc)."""
    p = prepare(events)
    top = top_kernels(p, n).lazy().select("name", "kind")
    return collect(
        kernel_step_totals(p).lazy()
        .join(top, on=["name", "kind"], how="semi")
        .select("name", "kind", "step", "count", (pl.col("dur_ns") / NS_PER_US).alias("total_us"))
        .sort("name", "kind", "step")
    )


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

SECTIONS = (
    Section("kernels", [], record=list[KernelRow], order=120, cross=lambda cross: json_rows(top_kernels(cross.p)),
            keeps=(kernel_shapes,)),
    Section("kernels_by_step", {"per_kernel": [], "worst": []}, summary=(("name", "kind"), ("total_us",), "total_us"),
            record=KernelStepSummary, detail=KernelStepRow, order=130,
            cross_table=lambda cross: kernels_by_step(cross.p)),
)
