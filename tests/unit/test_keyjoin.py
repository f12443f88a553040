"""NumPy key lookups and sorts (ddprof.frames.keyjoin) against plain Python, on the docstring example and random keys."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from ddprof.frames.keyjoin import find, first_by_key, pair_keys, sorted_rows


def test_docstring_example():
    keys, first = first_by_key(np.array([7, 3, 7]), np.array([5, 2, 1]))
    assert keys.tolist() == [3, 7] and first.tolist() == [1, 2]
    found, at = find(keys, np.array([7, 4]))
    assert found.tolist() == [True, False] and at.tolist() == [1, 0]


def test_ties_and_no_order_keep_table_order():
    assert first_by_key(np.array([2, 1, 2, 1]))[1].tolist() == [1, 0]
    assert first_by_key(np.array([2, 2, 2]), np.array([4, 3, 3]))[1].tolist() == [1]


def test_nothing_to_find_in():
    found, at = find(np.array([], dtype=np.int64), np.array([1, 2]))
    assert not found.any() and at.tolist() == [0, 0]


_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_pairs = st.lists(st.tuples(st.integers(min_value=0, max_value=2**31 - 1), _ints), max_size=30)


@given(a=_pairs, b=_pairs, small=st.booleans())
def test_pair_keys_equal_exactly_for_equal_pairs(a, b, small):
    if small:  # the arithmetic path; huge values take the dense one
        a, b = [(x % 8, y % 1000) for x, y in a], [(x % 8, y % 1000) for x, y in b]
    cols = [(np.array([x for x, _ in p], dtype=np.int32), np.array([y for _, y in p], dtype=np.int64)) for p in (a, b)]
    ka, kb = pair_keys(cols[0], cols[1])
    pairs, keys = a + b, np.concatenate([ka, kb]).tolist()
    for i in range(len(pairs)):
        for j in range(len(pairs)):
            assert (pairs[i] == pairs[j]) == (keys[i] == keys[j])


@given(launches=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10**6)), max_size=40),
       wanted=st.lists(st.integers(0, 5), max_size=20))
def test_first_launch_per_key_matches_a_dictionary(launches, wanted):
    keys = np.array([k for k, _ in launches], dtype=np.int64)
    when = np.array([t for _, t in launches], dtype=np.int64)
    expect: dict[int, int] = {}
    for i, (k, t) in enumerate(launches):
        if k not in expect or t < launches[expect[k]][1]:
            expect[k] = i
    distinct, first = first_by_key(keys, when)
    found, at = find(distinct, np.array(wanted, dtype=np.int64))
    for w, f, a in zip(wanted, found.tolist(), at.tolist()):
        assert f == (w in expect)
        if f:
            assert int(first[a]) == expect[w]


@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-2**62, 2**62), st.integers(0, 2)), max_size=40))
def test_sorted_rows_sorts_by_each_key_in_turn_keeping_table_order_on_ties(rows):
    df = pl.DataFrame({"a": [r[0] for r in rows], "b": [r[1] for r in rows], "c": [r[2] for r in rows]},
                      schema={"a": pl.Int64, "b": pl.Int64, "c": pl.Int64}).with_row_index("i")
    assert sorted_rows(df, "a", "b")["i"].to_list() == [i for i, _ in sorted(enumerate(rows), key=lambda r: r[1][:2])]
