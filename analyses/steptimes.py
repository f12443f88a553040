"""Step times and the work in each step, per rank and step: the distributions a regression check compares.

Per (rank, step) with a ``ProfilerStep#N`` annotation (:func:`~ddprof.analyses.frames.sets.steps`):

* ``step_us`` = the annotation's duration (end − start of ``ProfilerStep#N``, duplicates merged), the step
  time the training loop saw;
* ``kernels``: the work rows the step ran: on a GPU rank its compute kernels (``kind == "compute"`` with a
  stream), on a CPU rank its CPU ops that are not collectives (``kind == "cpu_op"``, ``coll_op`` null);
* ``collectives`` and ``comm_bytes``: its communication rows (:func:`~ddprof.analyses.collectives.comm_rows`:
  NCCL kernels, or ``gloo:*`` rows on a CPU rank) and the sum of their message sizes;
* ``loading_us``: the host time in its data loader's spans, their union (:mod:`.dataloading`; 0 without one).

The counts tell a changed workload (more collectives per step, other message sizes) from a slower one.
Example: rank 0, ProfilerStep#3 on [10, 22) ms with 40 compute kernels and 2 all-reduces of 64 MiB ->
``{rank: 0, step: 3, step_us: 12000.0, kernels: 40, collectives: 2, comm_bytes: 134217728, loading_us: 0.0}``.
"""

from __future__ import annotations

import polars as pl
from ddprof.analyses.collectives import comm_rows
from ddprof.analyses.dataloading import loading_intervals
from ddprof.analyses.frames.memo import Events, collect, prepare
from ddprof.analyses.frames.sets import kernels, steps
from ddprof.analyses.sections import Section

from ddprof.report.schema import StepTimeRow, StepTimeSummary
from ddprof.vocabulary.units import NS_PER_US


def step_times(events: Events) -> pl.DataFrame:
    """Per (rank, step): step_us, kernels, collectives, comm_bytes (module doc); sorted by rank, step."""
    st = steps(events).lazy()
    gpu = kernels(events).lazy()
    gpu_ranks = gpu.select("rank").unique()
    gpu_work = gpu.filter(pl.col("kind") == "compute").select("rank", "step")
    cpu_work = (prepare(events).events
                .filter(pl.col("stream").is_null() & (pl.col("kind") == "cpu_op") & pl.col("coll_op").is_null())
                .join(gpu_ranks, on="rank", how="anti").select("rank", "step"))
    work = (pl.concat([gpu_work, cpu_work]).filter(pl.col("step").is_not_null())
            .group_by("rank", "step").agg(pl.len().cast(pl.Int64).alias("kernels")))
    comm = (comm_rows(events).lazy().filter(pl.col("step").is_not_null())
            .group_by("rank", "step")
            .agg(pl.len().cast(pl.Int64).alias("collectives"), pl.col("bytes").sum().cast(pl.Int64).alias("comm_bytes")))
    loading = (loading_intervals(events).lazy().group_by("rank", "step")
               .agg(((pl.col("end") - pl.col("start")).sum() / NS_PER_US).alias("loading_us")))
    return collect(
        st.select("rank", "step", ((pl.col("end") - pl.col("start")) / NS_PER_US).alias("step_us"))
        .join(work, on=["rank", "step"], how="left")
        .join(comm, on=["rank", "step"], how="left")
        .join(loading.with_columns(pl.col("rank").cast(pl.Int32)), on=["rank", "step"], how="left")
        .with_columns(pl.col("kernels", "collectives", "comm_bytes").fill_null(0),
                      pl.col("loading_us").cast(pl.Float64).fill_null(0.0))
        .sort("rank", "step")
    )


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

SECTIONS = (
    Section("step_times", {"per_rank": [], "worst": []}, step_times, "steps", summary=(("rank",), ("step_us",), "step_us"),
            record=StepTimeSummary, detail=StepTimeRow, order=110),
)
