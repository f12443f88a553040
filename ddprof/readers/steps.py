"""``step`` of every row, for every reader of events with runtime launches (Kineto, Nsight Systems).

CPU rows take the ``ProfilerStep#N`` window (on a CPU thread) that contains their start; GPU rows take
the step of the runtime call that launched them (matched on ``correlation``), and their own start's
window when no launch is in the trace.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ddprof.frames.keyjoin import find, first_by_key, pair_keys
from ddprof.store.schema import STEP_PREFIX, step_number


def assign_steps(df: pl.DataFrame) -> pl.Expr:
    """The ``step`` of every row of ``df`` (Int32, null outside every step; module doc), as an expression
    for the frame operation that assembles the table. ``df`` may hold several traces, one after the other
    (``_trace``): a row takes a step of its own trace only."""
    windows = (
        df.lazy().filter(~pl.col("is_gpu") & pl.col("name").str.starts_with(STEP_PREFIX))
        .select("_trace", start=pl.col("ts_ns"), end=pl.col("ts_ns") + pl.col("dur_ns"),
                step=step_number(pl.col("name")))
        .drop_nulls("step").sort("_trace", "start").collect(engine="in-memory")
    )
    if windows.height == 0:
        return pl.lit(None, dtype=pl.Int32)
    trace = df["_trace"].to_numpy()
    ts = df["ts_ns"].to_numpy()
    step = np.full(df.height, -1, dtype=np.int32)
    w_trace = windows["_trace"].to_numpy()
    starts, ends, steps = (windows[c].to_numpy() for c in ("start", "end", "step"))
    for t in np.unique(w_trace):  # traces follow each other: each is a slice of rows and one of windows
        lo, hi = np.searchsorted(trace, [t, t + 1])
        w_lo, w_hi = np.searchsorted(w_trace, [t, t + 1])
        s, e, n, tt = starts[w_lo:w_hi], ends[w_lo:w_hi], steps[w_lo:w_hi], ts[lo:hi]
        pos = np.searchsorted(s, tt, side="right") - 1
        inside = (pos >= 0) & (tt < e[np.maximum(pos, 0)])
        step[lo:hi] = np.where(inside, n[np.maximum(pos, 0)], -1)
    # GPU rows take the step of the runtime call that launched them (same trace and correlation)
    corr = df["correlation"].fill_null(-1).to_numpy()
    launch = np.flatnonzero((df["kind"] == "runtime").to_numpy() & (corr >= 0) & (step >= 0))
    gpu = np.flatnonzero(df["is_gpu"].to_numpy() & (corr >= 0))
    k_launch, k_gpu = pair_keys((trace[launch], corr[launch]), (trace[gpu], corr[gpu]))
    keys, first = first_by_key(k_launch)  # the first launch of a correlation wins
    found, at = find(keys, k_gpu)
    step[gpu[found]] = step[launch[first[at[found]]]]
    stepped = pl.Series("step", step)
    return pl.when(stepped >= 0).then(stepped)
