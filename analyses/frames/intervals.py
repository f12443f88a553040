"""Interval math: merge, the difference of two unions, clip to windows, and union lengths.

Intervals are half-open ``[start, end)`` in integer ns; empty ones (``end <= start``) cover nothing.

:func:`merge`, :func:`subtract` and :func:`clip` take a LazyFrame with half-open intervals ``[start, end)`` (integer ns) and grouping
columns ``by`` (e.g. ``["rank"]`` or ``["rank", "step"]``), and works per group, vectorised: sort by
start, take the running maximum of the ends, start a new merged interval wherever a start lies after
that maximum. No Python loop runs over rows.

:func:`union_lengths` measures |U(X)| of several interval sets per group in one pass over one sorted
DataFrame, with NumPy (no row loop). Sorted by start, interval i of a set adds
``max(0, reach_i − max(start_i, reach_{i−1}))`` to the set's union, where ``reach_i`` is the largest end
among the set's intervals 1..i: every earlier interval starts no later than ``start_i``, so what they cover
from ``start_i`` on is exactly ``[start_i, reach_{i−1})``. Example: [0,4) [2,5) [9,10) add 4, 1 and 1 ->
|U| = 6. An empty interval adds nothing and never raises the reach above a later start. The running
maximum restarts at each group: group g's times are shifted to lie above every earlier group's (by
``base_g − min_g``, ``base_g`` = the sum of the earlier groups' extents), so one sort orders the rows by
(group, start) and no maximum carries over into the next group. Where the extents add up to more than
int64 holds, times are first replaced by their rank among the distinct times (same order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.ma  # noqa: F401 - Polars imports it on its first NumPy -> Series conversion (~30 ms): load it with the rest
import polars as pl

_KEY = "__grp"
_FITS = 2.0**62


def _keyed(lf: pl.LazyFrame, by: Sequence[str]) -> tuple[pl.LazyFrame, list[str]]:
    """Polars window functions need at least one key: add a constant one when ``by`` is empty."""
    if by:
        return lf, list(by)
    return lf.with_columns(pl.lit(0, dtype=pl.Int8).alias(_KEY)), [_KEY]


def _unkey(lf: pl.LazyFrame, by: Sequence[str]) -> pl.LazyFrame:
    return lf if by else lf.drop(_KEY)


def merge(lf: pl.LazyFrame, by: Sequence[str] = (), start: str = "start", end: str = "end") -> pl.LazyFrame:
    """Merge overlapping or touching intervals per group into disjoint ones, sorted by start.

    A new merged interval begins where ``start > max(end of all earlier intervals)``::

        [0,4) [2,5) [5,7) [9,10)  ->  [0,7) [9,10)
    """
    keyed, keys = _keyed(lf.select(*by, start, end).filter(pl.col(end) > pl.col(start)), by)
    merged = (
        keyed.sort([*keys, start])
        .with_columns(pl.col(end).cum_max().shift(1).over(keys).alias("__reach"))
        .with_columns(
            (pl.col("__reach").is_null() | (pl.col(start) > pl.col("__reach"))).cum_sum().over(keys).alias("__seg")
        )
        .group_by([*keys, "__seg"])
        .agg(pl.col(start).min(), pl.col(end).max())
        .drop("__seg")
        .sort([*keys, start])
    )
    return _unkey(merged, by)


def subtract(a: pl.LazyFrame, b: pl.LazyFrame, by: Sequence[str] = (), start: str = "start",
             end: str = "end") -> pl.LazyFrame:
    """Disjoint intervals of U(A) − U(B) per group, sorted by start.

    A and B are merged first, then swept: A's starts and ends count +1/−1, B's +2/−2, so the running
    sum is 1 exactly where A covers and B does not (2 = only B, 3 = both)::

        A = [0,4) [6,8), B = [3,7)  ->  [0,3) [7,8)
    """
    parts = []
    for frame, weight in ((a, 1), (b, 2)):
        m = merge(frame, by, start, end)
        parts.append(m.select(*by, pl.col(start).alias("__t"), pl.lit(weight, dtype=pl.Int8).alias("__d")))
        parts.append(m.select(*by, pl.col(end).alias("__t"), pl.lit(-weight, dtype=pl.Int8).alias("__d")))
    keyed, keys = _keyed(pl.concat(parts), by)
    segs = (
        keyed.sort([*keys, "__t"])
        .with_columns(
            pl.col("__d").cast(pl.Int32).cum_sum().over(keys).alias("__code"),
            pl.col("__t").shift(-1).over(keys).alias("__next"),
        )
        .filter((pl.col("__code") == 1) & (pl.col("__next") > pl.col("__t")))
        .select(*keys, pl.col("__t").alias(start), pl.col("__next").alias(end))
    )
    return merge(_unkey(segs, by), by, start, end)


def clip(lf: pl.LazyFrame, windows: pl.LazyFrame, by: Sequence[str], start: str = "start", end: str = "end",
         w_start: str = "w_start", w_end: str = "w_end") -> pl.LazyFrame:
    """Cut each interval to its group's window ``[w_start, w_end)``; drop what falls outside.

    [2,9) in window [4,6) -> [4,6); [7,9) in the same window -> dropped.
    """
    return (
        lf.join(windows.select(*by, w_start, w_end), on=list(by), how="inner")
        .with_columns(
            pl.max_horizontal(start, w_start).alias(start),
            pl.min_horizontal(end, w_end).alias(end),
        )
        .filter(pl.col(end) > pl.col(start))
        .drop(w_start, w_end)
    )


def union_lengths(frame: pl.DataFrame, by: Sequence[str], sets: Mapping[str, pl.Expr],
                  start: str = "start", end: str = "end") -> pl.DataFrame:
    """One row per group of ``by`` in ``frame`` (the ``by`` columns, sorted), and per named set (a
    boolean expression on the rows) the Int64 column |U(the group's intervals in the set)|, 0 where the
    group has none. ``by``, ``start`` and ``end`` must not be null.

    Example, by rank: rank 0 comm [0,10), compute [4,6) [8,20) -> comm 10, compute 14, both 20.
    """
    keys = list(by)
    group = pl.lit(0) if not keys else pl.col(keys[0]) if len(keys) == 1 else pl.struct(keys)
    cols = frame.select(group.rank("dense").cast(pl.Int64).alias("__g") - 1, pl.col(start).alias("__s"),
                        pl.col(end).alias("__e"), *[e.fill_null(False).alias(k) for k, e in sets.items()])
    g, s, e = (cols[c].to_numpy() for c in ("__g", "__s", "__e"))
    times = None
    lo, hi = _bounds(g, s, e)
    if float((hi.astype(np.float64) - lo.astype(np.float64) + 1).sum()) >= _FITS:
        times, ranks = np.unique(np.concatenate([s, e]), return_inverse=True)
        s, e = ranks[: len(s)], ranks[len(s):]
        lo, hi = _bounds(g, s, e)
    extent = hi - lo + 1
    base = np.cumsum(extent) - extent
    s, e = s - lo[g] + base[g], e - lo[g] + base[g]  # group g now in [base_g, base_g + extent_g)
    order = np.argsort(s, kind="stable")
    g, s, e = g[order], s[order], e[order]
    n_groups = len(extent)
    out = []
    for name in sets:
        m = cols[name].to_numpy()[order]
        top = np.maximum.accumulate(e[m])
        prev = np.empty_like(top)
        prev[:1], prev[1:] = -1, top[:-1]
        begin, gm = np.maximum(s[m], prev), g[m]
        if times is None:  # both shifted by the same group's offset
            added = top - begin
        else:
            added = times[top - base[gm] + lo[gm]] - times[begin - base[gm] + lo[gm]]
        total = np.zeros(n_groups, dtype=np.int64)
        np.add.at(total, gm, np.maximum(added, 0))
        out.append(pl.Series(name, total, dtype=pl.Int64))
    first = order[np.flatnonzero(np.diff(g, prepend=-1))]
    return pl.DataFrame([*(frame[k].gather(first) for k in keys), *out])


def _bounds(g: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the smallest and the largest of its starts and ends."""
    n_groups = int(g.max()) + 1 if len(g) else 0
    lo = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n_groups, np.iinfo(np.int64).min, dtype=np.int64)
    for t in (s, e):
        np.minimum.at(lo, g, t)
        np.maximum.at(hi, g, t)
    return lo, hi
