"""Union lengths of the work sets (:mod:`.sets`) that overlap, breakdown and bubbles share.

Three tables, each from one pass of :func:`.intervals.union_lengths` over the work intervals:

* per rank: ``busy_ns = |U(all work)|``, ``compute_ns``, ``comm_ns``, ``comm_compute_ns =
  |U(comm ∪ compute)|``, ``span_ns`` = Σ over the rank's profiling windows (:mod:`.windows`) of last
  work end − first work start in the window, and ``on_gpu``. Work in windows [0, 4) and [180e6, 180e6 + 2)
  µs has span 6 µs, not 180 s: untraced time is not part of the span. (Unions need no such care: no
  event crosses a window's edge, so a union over the windows is the sum of the windows' unions.)
* per (rank, step), on the work rows of the step: ``compute_ns``, ``comm_ns``, ``comm_compute_ns``;
* per step window (:func:`.sets.step_windows`), on the work of the step cut to its window:
  ``window_ns = w_end − w_start``, ``busy_ns``, ``compute_ns``.

|U(comm) ∩ U(compute)| = comm_ns + compute_ns − comm_compute_ns. Each table has a row for every group
that has work rows (every window, for the third), with 0 for an empty set.
"""

from __future__ import annotations

import polars as pl
from ddprof.analyses.frames import intervals as iv
from ddprof.analyses.frames.memo import Prepared, collect, derived
from ddprof.analyses.frames.sets import step_windows, work
from ddprof.analyses.frames.windows import several_windows, window_of

_ROLE = pl.col("role")
_COMPUTE = {"compute_ns": _ROLE == "compute"}
_OVERLAP = {**_COMPUTE, "comm_ns": _ROLE == "comm", "comm_compute_ns": _ROLE.is_in(["comm", "compute"])}


@derived
def rank_lengths(p: Prepared) -> pl.DataFrame:
    """rank, busy_ns, compute_ns, comm_ns, comm_compute_ns, span_ns, on_gpu; sorted by rank."""
    w = work(p)
    span = (pl.col("end").max() - pl.col("start").min()).alias("span_ns")
    if several_windows(p):
        spans = (w.lazy().with_columns(window_of(p, w, "start")).group_by("rank", "window")
                 .agg(span, pl.col("on_gpu").first())
                 .group_by("rank").agg(pl.col("span_ns").sum(), pl.col("on_gpu").first()))
    else:
        spans = w.lazy().group_by("rank").agg(span, pl.col("on_gpu").first())
    lengths = iv.union_lengths(w, ["rank"], {"busy_ns": pl.lit(True), **_OVERLAP})
    return collect(lengths.lazy().join(spans, on="rank").sort("rank"))


@derived
def step_lengths(p: Prepared) -> pl.DataFrame:
    """rank, step, compute_ns, comm_ns, comm_compute_ns over the work rows with a step; sorted."""
    w = work(p).filter(pl.col("step").is_not_null())
    return iv.union_lengths(w, ["rank", "step"], _OVERLAP)


@derived
def window_lengths(p: Prepared) -> pl.DataFrame:
    """rank, step, w_start, w_end, window_ns, busy_ns, compute_ns; one row per step window, sorted."""
    windows = step_windows(p)
    keys = ["rank", "step"]
    inside = iv.clip(work(p).lazy().filter(pl.col("step").is_not_null()), windows.lazy(), keys)
    busy = iv.union_lengths(collect(inside), keys, {"busy_ns": pl.lit(True), **_COMPUTE})
    return collect(
        windows.lazy().join(busy.lazy(), on=keys, how="left")
        .with_columns(pl.col("busy_ns", "compute_ns").fill_null(0),
                      (pl.col("w_end") - pl.col("w_start")).alias("window_ns"))
        .sort(keys)
    )
