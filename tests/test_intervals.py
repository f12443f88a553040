"""Interval math against a brute-force reference: integer grids, every unit cell counted."""

from __future__ import annotations

import polars as pl
from ddprof.analyses import intervals as iv
from ddprof.analyses.coverage import union_lengths
from hypothesis import given, settings
from hypothesis import strategies as st

interval = st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 25)).map(
    lambda t: (t[0], t[1], t[1] + t[2])
)
interval_lists = st.lists(interval, max_size=30)


def frame(rows: list[tuple[int, int, int]]) -> pl.LazyFrame:
    return pl.LazyFrame(rows, schema={"g": pl.Int64, "start": pl.Int64, "end": pl.Int64}, orient="row")


def cells(rows, group):
    return {t for g, s, e in rows if g == group for t in range(s, e)}


def lengths(lf: pl.LazyFrame) -> dict[int, int]:
    return {g: n for g, n in lf.collect().iter_rows()}


def expected(a, b, op) -> dict[int, int]:
    out = {}
    for g in {r[0] for r in a} | {r[0] for r in b}:
        n = len(op(cells(a, g), cells(b, g)))
        if n:
            out[g] = n
    return out


@settings(max_examples=200, deadline=None)
@given(interval_lists)
def test_union_length_matches_brute_force(rows):
    got = {g: n for g, n in lengths(iv.union_length(frame(rows), ["g"])).items() if n}
    assert got == expected(rows, [], lambda a, b: a)


@settings(max_examples=200, deadline=None)
@given(interval_lists, interval_lists)
def test_intersection_and_difference_match_brute_force(a, b):
    inter = lengths(iv.intersection_length(frame(a), frame(b), ["g"]))
    diff = lengths(iv.difference_length(frame(a), frame(b), ["g"]))
    assert {g: n for g, n in inter.items() if n} == expected(a, b, set.__and__)
    assert {g: n for g, n in diff.items() if n} == expected(a, b, set.__sub__)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 60), st.integers(-5, 25),
                          st.booleans()), max_size=40),
       st.sampled_from([(1, 0), (2**56, 2**62)]))
def test_union_lengths_of_several_sets_match_brute_force(rows, scale_shift):
    """Also with times near the int64 limits, where the groups' extents add up past int64."""
    scale, shift = scale_shift
    df = pl.DataFrame([(g, h, s * scale - shift, (s + d) * scale - shift, x) for g, h, s, d, x in rows],
                      orient="row",
                      schema={"g": pl.Int32, "h": pl.Int64, "start": pl.Int64, "end": pl.Int64, "x": pl.Boolean})
    got = union_lengths(df, ["g", "h"], {"all": pl.lit(True), "x": pl.col("x"), "not_x": ~pl.col("x")})
    groups = sorted({(g, h) for g, h, *_ in rows})
    assert got.select("g", "h").rows() == groups
    for name, keep in (("all", lambda x: True), ("x", bool), ("not_x", lambda x: not x)):
        want = [scale * len({t for g2, h2, s, d, x in rows if (g2, h2) == gh and keep(x) for t in range(s, s + d)})
                for gh in groups]
        assert got[name].to_list() == want, name


def test_union_lengths_without_groups_and_on_no_rows():
    df = pl.DataFrame({"start": [0, 2, 9], "end": [4, 5, 10]})
    assert union_lengths(df, [], {"n": pl.lit(True)}).rows() == [(6,)]
    assert union_lengths(df.head(0).with_columns(g=pl.lit(1)), ["g"], {"n": pl.lit(True)}).height == 0


@settings(max_examples=100, deadline=None)
@given(interval_lists)
def test_merge_gives_disjoint_sorted_cover(rows):
    merged = iv.merge(frame(rows), ["g"]).collect()
    for g in {r[0] for r in rows}:
        part = merged.filter(pl.col("g") == g)
        starts, ends = part["start"].to_list(), part["end"].to_list()
        assert all(e > s for s, e in zip(starts, ends, strict=True))
        assert all(starts[i + 1] > ends[i] for i in range(len(starts) - 1))  # disjoint, not touching
        assert {t for s, e in zip(starts, ends, strict=True) for t in range(s, e)} == cells(rows, g)


@settings(max_examples=100, deadline=None)
@given(interval_lists, interval_lists)
def test_ungrouped_lengths(a, b):
    ungroup = [(0, s, e) for _, s, e in a]
    other = [(0, s, e) for _, s, e in b]
    lf_a, lf_b = frame(ungroup).drop("g"), frame(other).drop("g")
    assert iv.union_length(lf_a).collect().item() == len(cells(ungroup, 0))
    assert iv.intersection_length(lf_a, lf_b).collect().item() == len(cells(ungroup, 0) & cells(other, 0))
    assert iv.difference_length(lf_a, lf_b).collect().item() == len(cells(ungroup, 0) - cells(other, 0))


@settings(max_examples=100, deadline=None)
@given(interval_lists, st.integers(0, 80), st.integers(0, 40))
def test_clip_to_window(rows, w0, wlen):
    windows = pl.LazyFrame({"g": [0, 1, 2, 3], "w_start": [w0] * 4, "w_end": [w0 + wlen] * 4})
    got = lengths(iv.union_length(iv.clip(frame(rows), windows, ["g"]), ["g"]))
    window = set(range(w0, w0 + wlen))
    want = {g: len(cells(rows, g) & window) for g in range(4)}
    assert {g: n for g, n in got.items() if n} == {g: n for g, n in want.items() if n}


def test_docstring_examples():
    a = frame([(0, 0, 4), (0, 6, 8)])
    b = frame([(0, 3, 7)])
    assert iv.intersect(a, b, ["g"]).collect().rows() == [(0, 3, 4), (0, 6, 7)]
    assert iv.subtract(a, b, ["g"]).collect().rows() == [(0, 0, 3), (0, 7, 8)]
    merged = iv.merge(frame([(0, 0, 4), (0, 2, 5), (0, 5, 7), (0, 9, 10)]), ["g"]).collect()
    assert merged.rows() == [(0, 0, 7), (0, 9, 10)]
