"""``step`` of every row.

CPU rows take the ``ProfilerStep#N`` window (on a CPU thread) that contains their start; GPU rows take
the step of the runtime call that launched them (matched on ``correlation``), and their own start's
window when no launch is in the trace.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ddprof.keyjoin import find, first_by_key
from ddprof.schema import STEP_PREFIX, step_number


def assign_steps(df: pl.DataFrame) -> pl.Expr:
    """The ``step`` of every row of ``df`` (Int32, null outside every step; module doc), as an expression
    for the frame operation that assembles the table."""
    windows = (
        df.lazy().filter(~pl.col("is_gpu") & pl.col("name").str.starts_with(STEP_PREFIX))
        .select(start=pl.col("ts_ns"), end=pl.col("ts_ns") + pl.col("dur_ns"), step=step_number(pl.col("name")))
        .drop_nulls("step").sort("start").collect(engine="in-memory")
    )
    if windows.height == 0:
        return pl.lit(None, dtype=pl.Int32)
    starts, ends = windows["start"].to_numpy(), windows["end"].to_numpy()
    steps = windows["step"].to_numpy()
    ts = df["ts_ns"].to_numpy()
    pos = np.searchsorted(starts, ts, side="right") - 1
    inside = (pos >= 0) & (ts < ends[np.maximum(pos, 0)])
    step = np.where(inside, steps[np.maximum(pos, 0)], -1).astype(np.int32)
    # GPU rows take the step of the runtime call that launched them (same correlation), when it has one
    corr = df["correlation"].fill_null(-1).to_numpy()
    launch = np.flatnonzero((df["kind"] == "runtime").to_numpy() & (corr >= 0) & (step >= 0))
    keys, first = first_by_key(corr[launch])  # the first launch of a correlation wins
    gpu = np.flatnonzero(df["is_gpu"].to_numpy() & (corr >= 0))
    found, at = find(keys, corr[gpu])
    step[gpu[found]] = step[launch[first[at[found]]]]
    stepped = pl.Series("step", step)
    return pl.when(stepped >= 0).then(stepped)
