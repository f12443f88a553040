"""Interval math against a brute-force reference: integer grids, every unit cell counted."""

from __future__ import annotations

import polars as pl
from ddprof.analyses.frames import intervals as iv
from ddprof.analyses.frames.intervals import union_lengths
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


def covered(lf: pl.LazyFrame) -> dict[int, set[int]]:
    """The unit cells a result covers, per group (the brute-force view of any interval frame)."""
    out: dict[int, set[int]] = {}
    for g, s, e in lf.collect().select("g", "start", "end").iter_rows():
        out.setdefault(g, set()).update(range(s, e))
    return {g: c for g, c in out.items() if c}


def expected(a, b, op) -> dict[int, set[int]]:
    out = {}
    for g in {r[0] for r in a} | {r[0] for r in b}:
        c = op(cells(a, g), cells(b, g))
        if c:
            out[g] = c
    return out


def disjoint_sorted(lf: pl.LazyFrame) -> bool:
    df = lf.collect()
    for (_,), part in df.group_by("g"):
        starts, ends = part["start"].to_list(), part["end"].to_list()
        if not all(e > s for s, e in zip(starts, ends, strict=True)):
            return False
        if not all(starts[i + 1] > ends[i] for i in range(len(starts) - 1)):
            return False
    return True


@settings(max_examples=200, deadline=None)
@given(interval_lists, interval_lists)
def test_subtract_matches_brute_force(a, b):
    got = iv.subtract(frame(a), frame(b), ["g"])
    assert covered(got) == expected(a, b, set.__sub__)
    assert disjoint_sorted(got)


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
def test_ungrouped_merge_and_subtract(a, b):
    ungroup = [(0, s, e) for _, s, e in a]
    other = [(0, s, e) for _, s, e in b]
    lf_a, lf_b = frame(ungroup).drop("g"), frame(other).drop("g")
    as_group = lambda lf: lf.with_columns(pl.lit(0, dtype=pl.Int64).alias("g"))  # noqa: E731
    assert covered(as_group(iv.merge(lf_a))) == expected(ungroup, [], lambda x, _: x)
    assert covered(as_group(iv.subtract(lf_a, lf_b))) == expected(ungroup, other, set.__sub__)


@settings(max_examples=100, deadline=None)
@given(interval_lists, st.integers(0, 80), st.integers(0, 40))
def test_clip_to_window(rows, w0, wlen):
    windows = pl.LazyFrame({"g": [0, 1, 2, 3], "w_start": [w0] * 4, "w_end": [w0 + wlen] * 4})
    window = set(range(w0, w0 + wlen))
    want = {g: cells(rows, g) & window for g in range(4)}
    assert covered(iv.clip(frame(rows), windows, ["g"])) == {g: c for g, c in want.items() if c}


def test_docstring_examples():
    a = frame([(0, 0, 4), (0, 6, 8)])
    b = frame([(0, 3, 7)])
    assert iv.subtract(a, b, ["g"]).collect().rows() == [(0, 0, 3), (0, 7, 8)]
    merged = iv.merge(frame([(0, 0, 4), (0, 2, 5), (0, 5, 7), (0, 9, 10)]), ["g"]).collect()
    assert merged.rows() == [(0, 0, 7), (0, 9, 10)]


def test_every_interval_function_serves_an_analysis():
    """No dead code kept alive by its own tests: each public function here is called by an analysis."""
    import ast
    from pathlib import Path

    folder = Path(iv.__file__).parent
    public = {n.name for n in ast.parse(Path(iv.__file__).read_text()).body
              if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    used = set()
    for path in folder.glob("*.py"):
        if path.name == "intervals.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "iv":
                used.add(node.attr)
            elif isinstance(node, ast.ImportFrom) and node.module == "ddprof.analyses.intervals":
                used.update(a.name for a in node.names)
    # merge is the building block of subtract (used inside intervals.py itself)
    assert public - used - {"merge"} == set()
