"""Union lengths of the work sets (:mod:`.sets`) that overlap, breakdown and bubbles share.

Two tables, each from one pass of :func:`.intervals.union_lengths` over the work intervals:

* per rank: ``busy_ns = |U(all work)|``, ``compute_ns``, ``comm_ns``, ``comm_compute_ns =
  |U(comm ∪ compute)|``, ``span_ns`` = Σ over the rank's profiling windows (:mod:`.windows`) of last
  work end − first work start in the window, and ``on_gpu``. Work in windows [0, 4) and [180e6, 180e6 + 2)
  µs has span 6 µs, not 180 s: untraced time is not part of the span. (Unions need no such care: no
  event crosses a window's edge, so a union over the windows is the sum of the windows' unions.)
* per step window (:func:`.stepwindows.step_windows`: a device step, or a host step on a CPU-only rank),
  on the work inside it (:func:`window_lengths`): ``window_ns = w_end − w_start``, ``busy_ns``,
  ``compute_ns``, ``comm_ns``, ``comm_compute_ns``.

|U(comm) ∩ U(compute)| = comm_ns + compute_ns − comm_compute_ns. The first table has a row for every
rank that has work rows, the second for every step window, with 0 for an empty set."""

from __future__ import annotations

import polars as pl
from ddprof.analyses.frames import intervals as iv
from ddprof.analyses.frames.memo import Prepared, collect, derived
from ddprof.analyses.frames.sets import work
from ddprof.analyses.frames.stepwindows import DEVICE, HOST, step_windows
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


def _in_device_steps(w: pl.DataFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """The work rows of the device-step ranks cut at their device steps' edges, each piece keyed by the
    step whose window holds it (rank, step, role, start, end); what lies outside every window is dropped.
    A row is matched to the windows from the one holding its start to the one holding its last instant
    (two as-of joins; the windows of a rank are disjoint and sorted), then clipped to each."""
    win = (windows.select(pl.col("rank").cast(pl.Int32), "step", "w_start", "w_end").sort("rank", "w_start")
           .with_row_index("__wi"))
    first = win.group_by("rank").agg(pl.col("__wi").min().alias("__first"))
    rows = (w.lazy().join(win.lazy().select("rank").unique(), on="rank", how="semi")
            .filter(pl.col("end") > pl.col("start"))
            .select(pl.col("rank").cast(pl.Int32), "role", "start", "end", (pl.col("end") - 1).alias("__last"))
            .sort("start"))
    right = win.lazy().select("rank", "w_start", "__wi").sort("w_start")
    matched = (
        rows.join_asof(right.rename({"__wi": "__a"}), left_on="start", right_on="w_start", by="rank",
                       strategy="backward", check_sortedness=False).drop("w_start")
        .sort("__last")
        .join_asof(right.rename({"__wi": "__b"}), left_on="__last", right_on="w_start", by="rank",
                   strategy="backward", check_sortedness=False).drop("w_start")
        .filter(pl.col("__b").is_not_null())
        .join(first.lazy(), on="rank")
        .with_columns(pl.coalesce("__a", "__first").alias("__a"))
        .with_columns(pl.int_ranges("__a", pl.col("__b") + 1, dtype=pl.UInt32).alias("__wi"))
        .explode("__wi")
        .join(win.lazy().select("__wi", "step", "w_start", "w_end"), on="__wi")
    )
    return (matched.with_columns(pl.max_horizontal("start", "w_start").alias("start"),
                                 pl.min_horizontal("end", "w_end").alias("end"))
            .filter(pl.col("end") > pl.col("start"))
            .select("rank", "step", "role", "start", "end"))


@derived
def window_lengths(p: Prepared) -> pl.DataFrame:
    """rank, step, basis, w_start, w_end, window_ns, busy_ns, compute_ns, comm_ns, comm_compute_ns; one row
    per step window (:func:`.stepwindows.step_windows`), sorted.

    In a device step, every piece of device work inside the window counts, whichever step launched it
    (a kernel crossing the window's edge counts its part inside): the device steps of a rank tile its span
    from the first step's first activity, so their lengths add up to the whole trace's (within the
    steps). Example: device step 4 on [189, 290) ms, step 3's last kernel on [180, 200) ms and step 4's
    compute on [200, 280) ms -> compute 91 ms in step 4. In a host step (a CPU-only rank), the work rows of
    the step, cut to its window.
    """
    windows = step_windows(p)
    keys = ["rank", "step"]
    w = work(p)
    host = windows.filter(pl.col("basis") == HOST)
    device = windows.filter(pl.col("basis") == DEVICE)
    cols = ["rank", "step", "role", "start", "end"]
    parts = []
    if host.height:
        parts.append(iv.clip(w.lazy().filter(pl.col("step").is_not_null()), host.lazy(), keys).select(cols))
    if device.height:
        parts.append(_in_device_steps(w, device).select(cols))
    inside = collect(pl.concat(parts)) if parts else w.select(cols).clear()
    inside = inside.with_columns(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32))
    lengths = iv.union_lengths(inside, keys, {"busy_ns": pl.lit(True), **_OVERLAP})
    sets = ["busy_ns", *_OVERLAP]
    return collect(
        windows.lazy().with_columns(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32))
        .join(lengths.lazy(), on=keys, how="left")
        .with_columns(pl.col(sets).fill_null(0), (pl.col("w_end") - pl.col("w_start")).alias("window_ns"))
        .select(*keys, "basis", "w_start", "w_end", "window_ns", *sets)
        .sort(keys)
    )
