"""Match rows to rows, and sort them, on integer keys with NumPy: sort once, binary-search, no hash table.

A kernel finds the runtime call that launched it by ``correlation`` (per rank): a hash join or group-by
on such keys builds a table per query, row-encoding the keys when there are two. Sorted keys and
``searchsorted`` do the same with two small arrays, and no memory beyond them.

Example: launches with keys [7, 3, 7] at times [5, 2, 1] -> distinct keys [3, 7], the earliest launch
of each is row 1 (key 3) and row 2 (key 7); looking up [7, 4] finds position 1, and nothing for 4.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def first_by_key(keys: np.ndarray, order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys, sorted, and for each the index of its first row: smallest ``order`` where
    given, ties (and no ``order``) in table order."""
    by = np.argsort(keys, kind="stable") if order is None else np.lexsort((order, keys))
    distinct, first = np.unique(keys[by], return_index=True)
    return distinct, by[first]


def sorted_rows(df: pl.DataFrame, *keys: str) -> pl.DataFrame:
    """``df`` sorted by integer ``keys`` with no nulls (the first key first), ties in table order.
    NumPy's lexsort does it several times faster than Polars' multi-key sort (which row-encodes the keys)."""
    return df[np.lexsort([df[k].to_numpy() for k in reversed(keys)])]


def find(distinct: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each wanted key: whether ``distinct`` (sorted) holds it, and its position there (0 where not)."""
    if len(distinct) == 0:
        return np.zeros(len(wanted), dtype=bool), np.zeros(len(wanted), dtype=np.intp)
    at = np.minimum(np.searchsorted(distinct, wanted), len(distinct) - 1)
    found = distinct[at] == wanted
    return found, np.where(found, at, 0)


def pair_keys(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One int64 key per (x, y) pair of integers, for two sets of pairs ``a`` and ``b``: equal pairs get
    equal keys, different pairs different keys. ``x`` must be non-negative (a rank)."""
    (xa, ya), (xb, yb) = a, b
    y = np.concatenate([ya, yb])
    if len(y) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    low, span = int(y.min()), int(y.max()) - int(y.min()) + 1
    top = int(max(xa.max(initial=0), xb.max(initial=0))) + 1
    if top * span < 2**62:  # x * span + (y - low) is exact
        return xa.astype(np.int64) * span + (ya - low), xb.astype(np.int64) * span + (yb - low)
    _, dense = np.unique(y, return_inverse=True)  # the same order with no gaps: at most len(y) values
    span = len(y)
    return xa.astype(np.int64) * span + dense[:len(ya)], xb.astype(np.int64) * span + dense[len(ya):]
