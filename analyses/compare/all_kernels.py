"""Every kernel of a run, read from its store: what ``ddprof diff`` compares when it is given a run dir or
traces rather than a saved report (whose ``kernels`` section keeps only the top N).

Per (name, kind), over the rows of :func:`~ddprof.analyses.kernels.kernel_rows` (GPU kernels on GPU ranks,
CPU ops and gloo rows on CPU ranks), read a group of ranks at a time (:func:`.rank_groups.rank_groups`) and
added up (:func:`~ddprof.analyses.kernels.add_totals`): ``count``, ``total_us``, ``mean_us`` = total_us /
count, ``ranks``, and per rank and step ``per_step_us`` = (its time inside profiler steps) / (rank, step)
pairs and ``per_step_count`` likewise, and ``shapes`` (recorded input shapes, CPU ops): the same definitions as
the report's ``kernels`` section, for every name. Example: gemm 3 times per step for 100 µs on each of 2 ranks over 4 steps -> count 24, total_us
2,400, per_step_us 2,400 / 8 = 300.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from ddprof.analyses.frames.sets import steps
from ddprof.analyses.kernels import add_totals, kernel_shapes, kernel_totals, with_shapes
from ddprof.analyses.rank_groups import rank_groups, read_ranks

from ddprof.store.rundir import Run
from ddprof.vocabulary.units import NS_PER_US


def every_kernel(run: Run) -> list[dict[str, Any]]:
    """One row per (name, kind) of the whole run (module doc), largest total time first."""
    parts: list[pl.DataFrame] = []
    shapes: list[pl.DataFrame] = []
    rank_steps = 0
    for group in rank_groups(run):
        p = read_ranks(run, group)
        parts.append(kernel_totals(p))
        shapes.append(kernel_shapes(p))
        rank_steps += steps(p).height
    if not parts:
        return []
    totals = add_totals(parts, ["name", "kind"])
    per = (lambda c: pl.col(c) / rank_steps) if rank_steps else (lambda c: pl.lit(None, pl.Float64))
    return (totals.with_columns((pl.col("dur_ns") / NS_PER_US).alias("total_us"),
                                (pl.col("in_steps_ns") / NS_PER_US).alias("in_steps_us"))
            .with_columns((pl.col("total_us") / pl.col("count")).alias("mean_us"),
                          per("in_steps_us").alias("per_step_us"), per("in_steps_count").alias("per_step_count"))
            .sort(["total_us", "name"], descending=[True, False])
            .select("name", "kind", "count", "total_us", "mean_us", "ranks", "per_step_us", "per_step_count")
            .pipe(with_shapes, pl.concat(shapes).unique())
            .to_dicts())
