"""The event window Holistic Trace Analysis (HTA) analyses, to compare ddprof with it number for number.

ddprof reports over the whole trace. HTA, when loading traces whose ``ProfilerStep#N`` names (over all
ranks) number two or more, keeps per rank only

* CPU rows that start before the start of the rank's last ProfilerStep (``include_last_step=False``,
  HTA's default: the last step is taken as incomplete), or no later than its end (``True``);
* GPU rows whose ``correlation`` matches a kept CPU row (so kernels launched outside the kept steps, or
  whose launch is not in the trace, are dropped).

With fewer than two distinct step names HTA keeps everything, and so does :func:`hta_window`.
Applying it before an analysis gives the numbers HTA computes on the same input.
"""

from __future__ import annotations

import polars as pl
from ddprof.analyses.frames.sets import steps as profiler_steps


def hta_window(events: pl.LazyFrame, include_last_step: bool = False) -> pl.LazyFrame:
    """The events HTA keeps. Example: steps 4, 5, 6 starting at 0, 10, 20 ms -> CPU rows starting
    before 20 ms, and the kernels those rows launched."""
    steps = profiler_steps(events)
    if steps["step"].n_unique() < 2:
        return events
    last = steps.lazy().group_by("rank").agg(pl.col("start").max().alias("__last_start"),
                                      pl.col("end").max().alias("__last_end"))
    cut = pl.col("__last_end") if include_last_step else pl.col("__last_start")
    keep = (pl.col("ts_ns") <= cut) if include_last_step else (pl.col("ts_ns") < cut)
    cpu = events.filter(pl.col("stream").is_null()).join(last, on="rank", how="inner").filter(keep)
    launched = cpu.filter(pl.col("correlation").is_not_null()).select("rank", "correlation").unique()
    gpu = events.filter(pl.col("stream").is_not_null()).join(launched, on=["rank", "correlation"], how="semi")
    return pl.concat([cpu.drop("__last_start", "__last_end"), gpu])
