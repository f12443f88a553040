"""Interval math on Polars frames: merge, the difference of two unions, clip to windows.

(Union lengths of many sets at once are :func:`coverage.union_lengths`.)

Every function takes a LazyFrame with half-open intervals ``[start, end)`` (integer ns) and grouping
columns ``by`` (e.g. ``["rank"]`` or ``["rank", "step"]``), and works per group, vectorised: sort by
start, take the running maximum of the ends, start a new merged interval wherever a start lies after
that maximum. No Python loop runs over rows. Empty intervals (``end <= start``) cover nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

_KEY = "__grp"


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
