"""Step windows: where each rank's per-step numbers are measured, on its device or on its host.

A GPU rank's per-step numbers (bubbles, per-step overlap, breakdown and idle) are measured in its **device
steps**, the time its device ran each step's work; a CPU-only rank's in its host steps. :func:`step_windows`
gives the windows, :func:`step_at` the step a time falls in. All device work inside a device step counts
in it, whichever step launched it, so a rank's per-step figures add up to its whole-trace ones
(:mod:`.lengths`). The host's ``ProfilerStep#N`` spans stay the step time the user calls iteration time
(:mod:`ddprof.analyses.steptimes`).
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl
from ddprof.analyses.frames.memo import Prepared, collect, derived
from ddprof.analyses.frames.sets import rank_spans, steps, work
from ddprof.analyses.frames.windows import several_windows, window_of

#: The basis of a rank's per-step numbers: its device steps, or its host steps (a CPU-only rank).
DEVICE, HOST = "device", "host"


@derived
def step_windows(p: Prepared) -> pl.DataFrame:
    """Window of each (rank, step), in which its per-step numbers are measured (docs/DESIGN.md §3).

    * On a GPU rank, the **device step**: from the first device activity launched in step N to the first
      launched in step N+1; the last step of a profiling window ends with the last activity launched in
      it or before (:mod:`.windows`: a device step never stretches across an untraced gap). A device that
      lags the host runs step N while the host is in step N+1 or later: the device step follows the
      device, and its host ``ProfilerStep#N`` span stays the step time (:mod:`..steptimes`). A rank's
      device steps never overlap (a step that began before the one before it begins where that one did)
      and add up to no more than its span. Example: first activities of steps 3, 4, 5 at 89, 189 and 290
      ms, the last of step 5 ending at 390 ms -> [89, 189), [189, 290), [290, 390), whatever the host's
      ProfilerStep spans ([0, 100), [100, 200), [200, 300)). A host step that launched no device work
      has no device step.
    * On a CPU-only rank (and a GPU rank none of whose device work has a step), the **host step**: the hull
      of its ``ProfilerStep#N`` span and the work rows of step N, host and device being the same.
      Example: ProfilerStep#3 on [0, 100) ms whose last op ends at 104 ms -> [0, 104).

    Columns: rank, step, w_start, w_end, basis (:data:`DEVICE` or :data:`HOST`); sorted by rank, step.
    """
    w = work(p)
    launched = collect(w.lazy().filter(pl.col("on_gpu") & pl.col("step").is_not_null())
                       .group_by("rank", "step").agg(pl.col("start").min().alias("d0"), pl.col("end").max().alias("d1"))
                       .sort("rank", "step"))
    if several_windows(p):
        launched = launched.with_columns(window_of(p, launched, "d0"))
    else:
        launched = launched.with_columns(pl.lit(0, dtype=pl.Int32).alias("window"))
    within = ["rank", "window"]
    device = (
        launched.lazy()
        .with_columns(pl.col("d0").cum_max().over(within).alias("w_start"),
                      pl.col("d1").cum_max().over(within).alias("__reach"))
        .with_columns(pl.col("w_start").shift(-1).over(within).fill_null(pl.col("__reach")).alias("w_end"))
        .select("rank", "step", "w_start", "w_end", pl.lit(DEVICE).alias("basis"))
    )
    host_ranks = rank_spans(p).lazy().select("rank").join(launched.lazy().select("rank").unique(), on="rank", how="anti")
    parts = [
        steps(p).lazy().select("rank", "step", "start", "end"),
        w.lazy().filter(pl.col("step").is_not_null()).select("rank", "step", "start", "end"),
    ]
    host = (
        pl.concat(parts).join(host_ranks, on="rank", how="semi")
        .group_by("rank", "step")
        .agg(pl.col("start").min().alias("w_start"), pl.col("end").max().alias("w_end"))
        .select("rank", "step", "w_start", "w_end", pl.lit(HOST).alias("basis"))
    )
    return collect(pl.concat([device, host]).sort("rank", "step"))


def step_at(p: Prepared, rows: pl.DataFrame, at: str) -> pl.Series:
    """The step (Int32) of each row of ``rows`` (columns ``rank``, ``step`` and ``at``, a time in ns), in row
    order: on a rank measured by device steps (:func:`step_windows`), the device step whose window holds
    ``at`` (null outside every one); on any other rank, the row's own ``step``. Example: device steps 3 on
    [89, 189) ms and 4 on [189, 290) ms -> a kernel launched in step 3 that starts at 195 ms is in step 4."""
    windows = step_windows(p).filter(pl.col("basis") == DEVICE)
    if windows.height == 0:
        return rows["step"].cast(pl.Int32)
    ranks = windows.select(pl.col("rank").cast(pl.Int32).unique(), pl.lit(True).alias("__dev"))
    keyed = (rows.select(pl.col("rank").cast(pl.Int32), pl.col(at).alias("__at"), pl.col("step").alias("__own"))
             .with_row_index("__i").join(ranks, on="rank", how="left"))
    found = (keyed.sort("__at")
             .join_asof(windows.select(pl.col("rank").cast(pl.Int32), pl.col("step").alias("__step"), "w_start", "w_end")
                        .sort("w_start"), left_on="__at", right_on="w_start", by="rank", strategy="backward",
                        check_sortedness=False)
             .sort("__i"))
    return found.select(
        pl.when(pl.col("__dev").is_null()).then(pl.col("__own"))
        .when(pl.col("__at") < pl.col("w_end")).then(pl.col("__step"))
        .cast(pl.Int32).alias("step"))["step"]


def step_word(bases: Iterable[str | None]) -> str:
    """What the report calls the steps its per-step numbers were measured in: ``device step`` when every
    rank's are device steps, else ``step`` (host steps, a mixed run, or a report from before the basis was
    recorded)."""
    seen = set(bases)
    return "device step" if seen == {DEVICE} else "step"
