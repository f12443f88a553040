"""|U(X)| of several interval sets per group, in one pass over one sorted frame (NumPy, no row loop).

Sorted by start, interval i of a set adds ``max(0, reach_i − max(start_i, reach_{i−1}))`` to the set's
union, where ``reach_i`` is the largest end among the set's intervals 1..i: every earlier interval
starts no later than ``start_i``, so what they cover from ``start_i`` on is exactly
``[start_i, reach_{i−1})``. Example: [0,4) [2,5) [9,10) add 4, 1 and 1 -> |U| = 6. An empty interval
(``end <= start``) adds nothing and never raises the reach above a later start.

The running maximum restarts at each group: times are replaced by their rank among the frame's
distinct times (same order), and group g's ranks are shifted by g · (number of distinct times), so no
maximum carries over from one group into the next. Equal to :func:`intervals.union_length` per set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl


def union_lengths(frame: pl.DataFrame, by: Sequence[str], sets: Mapping[str, pl.Expr],
                  start: str = "start", end: str = "end") -> pl.DataFrame:
    """One row per group of ``by`` in ``frame`` (first the ``by`` columns, sorted), and per named set
    (a boolean expression on the rows) the Int64 column |U(intervals of the group in the set)|, 0 where
    the group has none. ``start``/``end`` must not be null.

    Example, by rank: rank 0 comm [0,10), compute [4,6) [8,20) -> comm 10, compute 14, both 20.
    """
    keys = list(by)
    f = frame.sort([*keys, start])
    n = f.height
    cols = f.select(pl.col(start), pl.col(end), *[e.fill_null(False).alias(k) for k, e in sets.items()])
    if keys:
        gid = f.select(pl.struct(keys).rle_id()).to_series().to_numpy().astype(np.int64)
    else:
        gid = np.zeros(n, dtype=np.int64)
    n_groups = int(gid[-1]) + 1 if n else 0
    s, e = cols[start].to_numpy(), cols[end].to_numpy()
    times, ranks = np.unique(np.concatenate([s, e]), return_inverse=True)
    shift = gid * len(times)
    rank_s, rank_e = ranks[:n] + shift, ranks[n:] + shift
    out = {}
    for name in sets:
        m = cols[name].to_numpy()
        g, sh = gid[m], shift[m]
        reach = np.maximum.accumulate(rank_e[m])
        prev = np.empty_like(reach)
        prev[:1], prev[1:] = -1, reach[:-1]
        begin = np.maximum(rank_s[m], prev)
        added = np.maximum(times[reach - sh] - times[begin - sh], 0)
        total = np.zeros(n_groups, dtype=np.int64)
        np.add.at(total, g, added)
        out[name] = pl.Series(name, total, dtype=pl.Int64)
    if not keys:
        return pl.DataFrame(list(out.values()))
    first = np.flatnonzero(np.diff(gid, prepend=-1))
    return f.select(keys)[first].with_columns(*out.values())
